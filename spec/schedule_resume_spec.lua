-- Schedules on a resume that changes total_steps (moonrl.resume): a
-- schedule is stretched from its value at the last update trained to its
-- end value at the new total, so the learning rate does not jump. Runs the
-- built binary (build/moonrl, or $MOONRL_BIN) on a tiny network.

local support = require("support")

local BIN, have_bin = support.BIN, support.have_bin

local function moonrl(args, dir) return support.moonrl(args, dir) end

local T, BATCH = 6, 32    -- updates of the first run; 4 envs x 8 steps

local EXPERIMENT = [[
return {
  name = "stretch", device = "cpu", threads = 1, seed = 3, hardware = "ci", level = "basic",
  total_steps = ]] .. T * BATCH .. [[,
  env = { num_envs = 4, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8, epochs = 1, lr = linear(3e-4, 1e-4) },
  log = { console = false, checkpoint_interval = 1 },
}
]]

local function lrs(text)   -- update -> lr of the metric rows
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local u = not line:find('"event":', 1, true) and line:match('"update":(%d+)')
    local lr = line:match('"lr":([-%deE.+]+)')
    if u and lr then out[tonumber(u)] = tonumber(lr) end
  end
  return out
end

local function near(a, b) return math.abs(a - b) <= 1e-9 + 1e-5 * math.abs(b) end

describe("moonrl train --resume with a larger total_steps", function()
  it("stretches a linear lr schedule from its value at the resume point to its end value: no jump", function()
    if not have_bin then pending("no binary at " .. BIN) return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    local rc, _, err = moonrl("train exp.lua --dir r --no-eval", dir)
    assert(rc == 0, err)
    rc, _, err = moonrl("train --resume r --no-eval --set total_steps=" .. 2 * T * BATCH, dir)
    assert.equal(0, rc, err)
    local lr = lrs(support.read_file(dir .. "/r/metrics.jsonl"))
    for k = 1, 2 * T do assert.truthy(lr[k], "no lr for update " .. k) end
    -- the first run: linear 3e-4 -> 1e-4 over T updates (update k at progress (k-1)/T)
    for k = 1, T do assert.truthy(near(lr[k], 3e-4 + (1e-4 - 3e-4) * (k - 1) / T), k .. ": " .. lr[k]) end
    -- after it: a straight line from update T's value to 1e-4 at update 2T + 1 (progress 1)
    local slope = (1e-4 - lr[T]) / (2 * T + 1 - T)
    assert.truthy(near(lr[T + 1], lr[T] + slope),
      string.format("lr jumped at the resume: update %d %.10g, update %d %.10g (want %.10g)", T, lr[T], T + 1, lr[T + 1], lr[T] + slope))
    for k = T + 1, 2 * T do
      assert.truthy(near(lr[k], lr[T] + slope * (k - T)), k .. ": " .. lr[k])
    end
    assert.truthy(near(lr[2 * T] + slope, 1e-4))     -- reaches 1e-4 at 2T total steps
    -- the message names the key, its value at the resume point and its new end
    assert.truthy(err:find("each schedule goes on from its value at the last update trained", 1, true), err)
    assert.truthy(err:find(string.format("ppo.lr: %.6g at update %d -> 0.0001 at total_steps = %d (now linear(",
      lr[T], T, 2 * T * BATCH), 1, true), err)
    -- config.lua keeps the stretched schedule: a second resume continues it
    local cfg = support.read_file(dir .. "/r/config.lua")
    assert.truthy(cfg:find("lr = linear(", 1, true), cfg)
    support.rm_rf(dir)
  end)
  it("stretches a Lua function schedule given again on moonrl.train{resume = ...} the same way", function()
    if not have_bin then pending("no binary at " .. BIN) return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", (EXPERIMENT:gsub("lr = linear%(3e%-4, 1e%-4%)", "lr = 1e-3")))
    support.write_file(dir .. "/fn.lua", [[
      local moonrl = require "moonrl"
      local lr = load("return function(p) return 1e-3 * (1 - p) end")()   -- config.lua cannot keep it
      local cfg = dofile("exp.lua")
      cfg.dir, cfg.ppo.lr = "f", lr
      local lrs = {}
      cfg.hooks = { on_update = function(m) lrs[m.update] = m.lr end }
      moonrl.train(cfg):wait()
      local run = moonrl.train({ resume = "f", ppo = { lr = lr }, total_steps = ]] .. 2 * T * BATCH .. [[ },
        { hooks = { on_update = function(m) lrs[m.update] = m.lr end } })
      run:wait()
      for k = 1, #lrs do print(string.format("update=%d lr=%.17g", k, lrs[k])) end
    ]])
    local rc, out, err = moonrl("run fn.lua", dir)
    assert.equal(0, rc, err)
    local lr = {}
    for u, v in out:gmatch("update=(%d+) lr=([^\n]+)") do lr[tonumber(u)] = tonumber(v) end
    for k = 1, T do assert.truthy(near(lr[k], 1e-3 * (1 - (k - 1) / T)), out) end
    local slope = (0 - lr[T]) / (T + 1)
    for k = T + 1, 2 * T do
      assert.truthy(near(lr[k], lr[T] + slope * (k - T)), k .. ": " .. tostring(lr[k]) .. "\n" .. out .. err)
    end
    assert.truthy(err:find("ppo.lr: " .. string.format("%.6g", lr[T]) .. " at update " .. T ..
      " -> its value at progress 1 at total_steps = " .. 2 * T * BATCH .. " (a Lua function)", 1, true), err)
    support.rm_rf(dir)
  end)
end)

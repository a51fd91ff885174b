-- schedule.value of a schedule table is the engine's mr_schedule_value (via
-- the FFI), so it is checked where the engine is: in the moonrl binary. The
-- expected numbers are computed here, in plain Lua, from the closed forms of
-- moonrl.h's mr_schedule_kind comments - not from either implementation.

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

-- Runs `body` (Lua) with `moonrl` required; returns exit code and stdout, stderr.
local function run_script(dir, body)
  support.write_file(dir .. "/s.lua", "local moonrl = require 'moonrl'\nlocal S = moonrl.schedule\n" .. body)
  os.execute(string.format("cd %q && timeout 120 %q run s.lua >out 2>err; echo $? >rc", dir, BIN))
  return tonumber(support.read_file(dir .. "/rc")), support.read_file(dir .. "/out") or "",
    support.read_file(dir .. "/err") or ""
end

-- "i=value" lines -> {[i] = number}, exact (%.17g round-trips a double).
local function values(out)
  local t = {}
  for i, v in out:gmatch("(%d+)=([^\n]+)") do t[tonumber(i)] = tonumber(v) end
  return t
end

-- Independent closed forms.
local function linear(from, to, p) return from + (to - from) * p end
local function cosine(from, to, p) return to + (from - to) * (1 + math.cos(math.pi * p)) / 2 end
local function step(from, gamma, every, p, to)
  local v = from * gamma ^ math.floor(p / every)
  if to ~= nil then v = from > to and math.max(v, to) or math.min(v, to) end
  return v
end

local function close(want, got, what)
  assert(got ~= nil, what .. ": no value")
  assert(math.abs(got - want) <= 4e-16 * math.max(1, math.abs(want)),
    string.format("%s: closed form %.17g, schedule.value %.17g", what, want, got))
end

describe("schedule.value through the engine", function()
  local dir
  before_each(function() dir = have_bin and support.tmpdir() or nil end)
  after_each(function() if dir then support.rm_rf(dir) end end)

  it("agrees with the closed forms across progress", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    -- (k + 0.5) / 40: never on a step boundary, where floor(p / every) and
    -- the engine's floor(p / every + 1e-9) could differ
    local cases, lines = {}, {}
    local function case(src, want)
      cases[#cases + 1] = { src = src, want = want }
    end
    for k = 0, 39 do
      local p = (k + 0.5) / 40
      case(("S.linear(3e-4, 1e-4), %.17g"):format(p), linear(3e-4, 1e-4, p))
      case(("S.cosine(0.2, 0.1), %.17g"):format(p), cosine(0.2, 0.1, p))
      case(("S.cosine(1, 0), %.17g"):format(p), cosine(1, 0, p))
      case(("S.step(1, 0.5, 0.25), %.17g"):format(p), step(1, 0.5, 0.25, p))
      case(("S.step(1, 0.5, 0.25, 0.2), %.17g"):format(p), step(1, 0.5, 0.25, p, 0.2))
      case(("S.step(1, 2, 0.5, 3), %.17g"):format(p), step(1, 2, 0.5, p, 3))
      case(("S.constant(0.5), %.17g"):format(p), 0.5)
      case(("{ kind = 'linear', from = 2, to = 4 }, %.17g"):format(p), linear(2, 4, p))
    end
    for i, c in ipairs(cases) do
      lines[#lines + 1] = ("print(%d .. '=' .. string.format('%%.17g', S.value(%s)))"):format(i, c.src)
    end
    local rc, out, err = run_script(dir, table.concat(lines, "\n"))
    assert.are.equal(0, rc, err)
    local got = values(out)
    for i, c in ipairs(cases) do close(c.want, got[i], c.src) end
  end)

  it("is exact at the ends, clamps progress, and lands on step boundaries as the trainer does", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out, err = run_script(dir, [[
      local function say(i, v) print(i .. "=" .. string.format("%.17g", v)) end
      local lin = S.linear(3e-4, 1e-4)
      say(1, S.value(lin, 0)); say(2, S.value(lin, 1)); say(3, S.value(lin, -3)); say(4, S.value(lin, 7))
      say(5, S.value(lin, 0 / 0))
      local st = S.step(1, 0.5, 0.1)
      say(6, S.value(st, 0.3)); say(7, S.value(st, 0.29)); say(8, S.value(st, 1))
      say(9, S.value(S.step(1, 2, 0.5, 1), 1))     -- from == to: the bound wins
      say(10, S.value(S.cosine(1, 0), 0.5))
      say(11, S.value(S.step(1, 0.5, 0.25), 1))
    ]])
    assert.are.equal(0, rc, err)
    local v = values(out)
    assert.are.equal(3e-4, v[1])
    assert.are.equal(1e-4, v[2])
    assert.are.equal(3e-4, v[3])
    assert.are.equal(1e-4, v[4])
    assert.are.equal(3e-4, v[5])
    assert.are.equal(0.125, v[6])     -- 0.3 / 0.1 is 2.9999999999999996 in doubles: still step 3
    assert.are.equal(0.25, v[7])
    assert.are.equal(0.5 ^ 10, v[8])
    assert.are.equal(1, v[9])
    close(0.5, v[10], "cosine(1, 0) at 0.5")
    assert.are.equal(0.0625, v[11])
  end)

  it("is what the trainer applies at every update (lr = schedule.value at (k - 1) / total updates)", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out, err = run_script(dir, ([[
      local engine = require("moonrl.engine")
      local lrs = {}
      local cfg = assert(moonrl.resolve({
        name = "sched", dir = %q, device = "cpu", threads = 1, seed = 3, total_steps = 64 * 12 - 5,
        warmup = { updates = 0 },
        env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 },
        policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
        ppo = { rollout_steps = 8, lr = S.cosine(1e-3, 1e-4) },
        log = { console = false, checkpoint_interval = 0 },
        hooks = { on_update = function(m) lrs[m.update] = m.lr end },
      }, { hardware = "ci", level = "basic" }))
      local u = engine.total_updates(cfg)
      local s = moonrl.train(cfg, { hardware = "ci", level = "basic" }):wait()
      print("updates=" .. s.updates .. " total=" .. u)
      local worst = 0
      for k = 1, s.updates do
        local want = S.value(cfg.ppo.lr, (k - 1) / u)
        worst = math.max(worst, math.abs(lrs[k] - want) / want)
      end
      print("worst=" .. string.format("%%.17g", worst))
    ]]):format(dir .. "/r"))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("updates=12 total=12", 1, true), out)   -- ceil((768 - 5) / 64)
    -- the trainer may keep the rate in single precision
    assert.truthy(tonumber(out:match("worst=([^\n]+)")) < 1e-6, out)
  end)
end)

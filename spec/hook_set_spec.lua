-- run:set inside an on_update hook (moonrl.run, the update hand-shake of
-- src/host/run_channel.c's mailbox): a hot change made in the hook of update k is in force
-- from update k + 1 - not k, and not k + 2 (the trainer would otherwise have
-- started update k + 1 before the loop ran the hook of update k). Runs the
-- built binary (build/moonrl, or $MOONRL_BIN) on a tiny network.

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

local UPDATES = 12

local SCRIPT = [[
local moonrl = require "moonrl"
local seen = {}
local run = moonrl.train({
  name = "hookset", device = "cpu", threads = 1, seed = 5, hardware = "ci", level = "basic",
  dir = "h", total_steps = ]] .. UPDATES .. [[ * 32,
  env = { num_envs = 4, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8, epochs = 1, lr = 1e-4, ent_coef = 0.01 },
  log = { console = false },
  hooks = { on_update = function(m, run)
    seen[#seen + 1] = string.format("update=%d lr=%.10g ent_coef=%.10g", m.update, m.lr, m.ent_coef)
    -- the lr of update k + 1 is set in the hook of update k
    assert(run:set("ppo.lr", 1e-4 * (m.update + 1)))
    assert(run:set("ppo.ent_coef", 0.01 * (m.update + 1)))
  end },
})
run:wait()
print(table.concat(seen, "\n"))
]]

describe("run:set in an on_update hook", function()
  it("is in force from the next update (k + 1), every time", function()
    if not have_bin then pending("no binary at " .. BIN) return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/s.lua", SCRIPT)
    os.execute(string.format("cd %q && timeout 120 %q run s.lua >out 2>err; echo $? >rc", dir, BIN))
    local rc, out, err = tonumber(support.read_file(dir .. "/rc")), support.read_file(dir .. "/out") or "",
      support.read_file(dir .. "/err") or ""
    assert.equal(0, rc, err .. out)
    local lr, ent = {}, {}
    for u, l, e in out:gmatch("update=(%d+) lr=([^ ]+) ent_coef=([^\n]+)") do
      lr[tonumber(u)], ent[tonumber(u)] = tonumber(l), tonumber(e)
    end
    local function near(a, b) return a and math.abs(a - b) <= 1e-6 * b end
    assert.truthy(near(lr[1], 1e-4), out)
    for k = 1, UPDATES - 1 do
      -- update k + 1 has what the hook of update k set; update k had the value from the hook of k - 1
      assert.truthy(near(lr[k + 1], 1e-4 * (k + 1)),
        string.format("the lr set in the hook of update %d (%g) is not the lr of update %d (%s):\n%s",
          k, 1e-4 * (k + 1), k + 1, tostring(lr[k + 1]), out))
      assert.truthy(near(ent[k + 1], 0.01 * (k + 1)), out)
    end
    support.rm_rf(dir)
  end)
end)

-- moonrl bench --scaling: one row per size, and where the sweep ends (a size
-- the engine refuses: its memory, its limits) is a line of the table, not a
-- crash; the CSV holds the rows measured.

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

describe("moonrl bench --scaling", function()
  it("measures each size in turn and ends at the first one refused, saying why", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    local p = io.popen(string.format("cd %q && %q bench --scaling 16,2000000,32 --net small --rollout 4 --reps 1 " ..
      "--device cpu --threads 1 --out s.csv 2>&1; echo rc=$?", dir, BIN))
    local out = p:read("*a")
    p:close()
    local csv = support.read_file(dir .. "/s.csv")
    support.rm_rf(dir)
    assert.truthy(out:match("rc=0%s*$"), out)
    assert.truthy(out:match("\n%s+16%s+%d+%s+[%d.]+\n"), out)
    assert.truthy(out:find("2000000  refused: trainer: env.num_envs = 2000000: must be in [1, 1048576]", 1, true), out)
    assert.falsy(out:match("\n%s+32%s"), "a size after the refused one was measured: " .. out)
    local lines = support.lines(csv)
    assert.are.equal("num_envs,agent_steps_per_s,update_s", lines[1])
    assert.truthy(lines[2]:match("^16,"), csv)
    assert.is_nil(lines[3] ~= "" and lines[3] or nil, csv)
  end)
end)

-- The specs' own helpers (spec/support.lua) keep their limits when the luv
-- loop has stood still: its clock is cached, and specs that run the binary with
-- os.execute leave it minutes old. A limit counted from that old clock was
-- already over, so a wait ended at its first look (faults_spec's SIGINT case
-- and resume_spec's sinks case failed so in full runs, never alone).

local support = require("support")
local uv = support.uv

describe("spec/support", function()
  local function stand_still(seconds)
    uv.run("nowait")
    os.execute("sleep " .. seconds)   -- the loop does not run: its clock stays put
  end

  it("wait_for waits out its limit after the loop stood still", function()
    stand_still(1.5)
    local t0 = uv.hrtime()
    assert.is_true(support.wait_for(function() return (uv.hrtime() - t0) / 1e9 > 0.5 end, 1000))
  end)

  it("run_until waits out its limit after the loop stood still", function()
    stand_still(1.5)
    local done = false
    uv.fs_stat(".", function() done = true end)   -- answered from the thread pool at once
    support.run_until(function() return done end, 1000)
    assert.is_true(done)
  end)
end)

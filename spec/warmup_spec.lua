local warmup = require("moonrl.config.warmup")

describe("moonrl.warmup.normalize", function()
  it("fills a table's missing fields with the defaults and copies it", function()
    local prep = { "graphs" }
    local w = warmup.normalize({ updates = 3, prepare = prep }, {})
    assert.same({ updates = 3, restore = true, prepare = { "graphs" } }, w)
    assert.are_not.equal(prep, w.prepare)
    assert.same({ updates = 1, restore = true, prepare = { "graphs" } }, warmup.normalize(nil))
    assert.same({ updates = 0, restore = false, prepare = {} }, warmup.normalize({ updates = 0, restore = false, prepare = {} }))
  end)

  it("calls a function with info", function()
    local got
    local w = warmup.normalize(function(info)
      got = info
      if info.device == "cpu" then return { updates = 0, prepare = {} } end
      return { updates = info.num_envs > 1000 and 3 or 1 }
    end, { device = "cuda", level = "ultra", num_envs = 4096 })
    assert.same({ device = "cuda", level = "ultra", num_envs = 4096 }, got)
    assert.same({ updates = 3, restore = true, prepare = { "graphs" } }, w)
    w = warmup.normalize(function(info) if info.device == "cpu" then return { updates = 0, prepare = {} } end end,
      { device = "cpu" })
    assert.same({ updates = 0, restore = true, prepare = {} }, w)
  end)

  it("names bad values", function()
    assert.same({ nil, "warmup.updates = -1 is out of range: accepted 0 .. 1000" }, { warmup.normalize({ updates = -1 }) })
    assert.same({ nil, 'warmup.restore: expected true or false, got string "yes"' }, { warmup.normalize({ restore = "yes" }) })
    assert.same({ nil, 'warmup.prepare[1] = "graph": accepted "graphs", "algorithms" - did you mean "graphs"?' },
      { warmup.normalize({ prepare = { "graph" } }) })
    -- "algorithms": the CPU's per-layer conv search (cpu.conv = auto)
    assert.same({ updates = 1, restore = true, prepare = { "algorithms", "graphs" } },
      warmup.normalize({ prepare = { "algorithms", "graphs" } }))
    assert.same({ nil, "unknown key 'warmup.update' - did you mean 'warmup.updates'?" }, { warmup.normalize({ update = 2 }) })
    assert.same({ nil, 'warmup: expected a table or function(info), got string "fast"' }, { warmup.normalize("fast") })
  end)

  it("names what a function did wrong", function()
    local _, err = warmup.normalize(function() error("no idea", 0) end, {})
    assert.equal("warmup: the function failed: no idea", err)
    _, err = warmup.normalize(function() return 5 end, {})
    assert.equal("warmup: the function returned number 5, expected a table {updates=, restore=, prepare=}", err)
    _, err = warmup.normalize(function() return { updates = 1.5 } end, {})
    assert.equal("warmup function result: warmup.updates: expected an integer, got number 1.5", err)
  end)
end)

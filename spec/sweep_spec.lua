-- moonrl.sweep's pure parts: the space (grid, random, choice, seeds), ASHA's
-- decisions on synthetic curves against hand-computed expectations, the
-- results file and its table, and the SVG writer. No process is started
-- here; spec/sweep_e2e_spec.lua runs real sweeps with the binary.

local space = require("moonrl.sweep.space")
local asha = require("moonrl.sweep.asha")
local results = require("moonrl.sweep.results")
local svg = require("moonrl.formats.svg")
local support = require("support")

local function key_of(p, keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = tostring(p[k]) end
  return table.concat(parts, "|")
end

describe("moonrl.sweep.space", function()
  it("grid covers every combination exactly once, the last key fastest", function()
    local sp = { a = space.grid({ 1, 2, 3 }), b = space.grid({ "x", "y" }), c = space.choice({ 10, 20 }) }
    assert.equal(12, space.grid_size(sp, "grid"))   -- choice is enumerated by method grid
    assert.equal(6, space.grid_size(sp, "random"))  -- ... and drawn by method random
    local seen = {}
    for i = 1, 12 do
      local p = space.point(sp, "grid", 7, i)
      local k = key_of(p, { "a", "b", "c" })
      assert.is_nil(seen[k], "combination " .. k .. " twice")
      seen[k] = i
    end
    local n = 0
    for _ in pairs(seen) do n = n + 1 end
    assert.equal(12, n)
    assert.same({ a = 1, b = "x", c = 10 }, space.point(sp, "grid", 7, 1))
    assert.same({ a = 1, b = "x", c = 20 }, space.point(sp, "grid", 7, 2))
    assert.same({ a = 1, b = "y", c = 10 }, space.point(sp, "grid", 7, 3))
    assert.same({ a = 3, b = "y", c = 20 }, space.point(sp, "grid", 7, 12))
    -- past the grid's size it starts again
    assert.same(space.point(sp, "grid", 7, 1), space.point(sp, "grid", 7, 13))
  end)

  it("random respects the bounds, and loguniform is uniform in log10", function()
    local sp = { lr = space.loguniform(1e-4, 1e-2), u = space.uniform(-1, 3), n = space.randint(2, 5) }
    local lo_decade, ints, usum = 0, {}, 0
    local N = 4000
    for i = 1, N do
      local p = space.point(sp, "random", 3, i)
      assert.is_true(p.lr >= 1e-4 and p.lr < 1e-2, "lr " .. p.lr)
      assert.is_true(p.u >= -1 and p.u < 3, "u " .. p.u)
      assert.is_true(p.n == math.floor(p.n) and p.n >= 2 and p.n <= 5, "n " .. p.n)
      if p.lr < 1e-3 then lo_decade = lo_decade + 1 end
      ints[p.n] = (ints[p.n] or 0) + 1
      usum = usum + p.u
    end
    -- two decades: half the draws in each (a linear draw would put 9% in the lower one)
    assert.is_true(math.abs(lo_decade / N - 0.5) < 0.04, "lower decade " .. lo_decade / N)
    assert.is_true(math.abs(usum / N - 1) < 0.1, "uniform mean " .. usum / N)
    for v = 2, 5 do assert.is_true(math.abs(ints[v] / N - 0.25) < 0.04, "randint " .. v .. ": " .. ints[v] / N) end
  end)

  it("choice covers its values, about equally", function()
    local sp = { c = space.choice({ 0.01, 0.05, 0.1 }) }
    local count = {}
    for i = 1, 3000 do
      local v = space.point(sp, "random", 11, i).c
      count[v] = (count[v] or 0) + 1
    end
    for _, v in ipairs({ 0.01, 0.05, 0.1 }) do
      assert.is_true(count[v] > 900 and count[v] < 1100, tostring(v) .. ": " .. tostring(count[v]))
    end
    local n = 0
    for _ in pairs(count) do n = n + 1 end
    assert.equal(3, n)
  end)

  it("grid keys cycle through their values under method random, the rest is drawn", function()
    local sp = { g = space.grid({ 64, 128 }), lr = space.loguniform(1e-4, 1e-3), fixed = 5 }
    for i = 1, 6 do
      local p = space.point(sp, "random", 1, i)
      assert.equal(i % 2 == 1 and 64 or 128, p.g)
      assert.equal(5, p.fixed)
    end
    assert.are_not.equal(space.point(sp, "random", 1, 1).lr, space.point(sp, "random", 1, 3).lr)
  end)

  it("is reproducible: a point and a seed depend on the sweep seed and the index only", function()
    local sp = { lr = space.loguniform(1e-4, 1e-3), c = space.choice({ 1, 2, 3 }) }
    assert.same(space.point(sp, "random", 42, 5), space.point(sp, "random", 42, 5))
    assert.are_not.same(space.point(sp, "random", 42, 5), space.point(sp, "random", 43, 5))
    -- adding a key changes no other key's draws
    local sp2 = { lr = sp.lr, c = sp.c, extra = space.uniform(0, 1) }
    assert.equal(space.point(sp, "random", 42, 5).lr, space.point(sp2, "random", 42, 5).lr)
    assert.equal(space.trial_seed(9, 3), space.trial_seed(9, 3))
    local seeds = {}
    for i = 1, 200 do
      local s = space.trial_seed(9, i)
      assert.is_true(s >= 0 and s < 2 ^ 31 and s == math.floor(s))
      assert.is_nil(seeds[s], "seed " .. s .. " twice")
      seeds[s] = true
    end
    assert.are_not.equal(space.trial_seed(9, 1), space.trial_seed(10, 1))
    -- a fixed value, not a sequence: the generator is counter-based
    local r1, r2 = space.rng(1, 1, "x"), space.rng(1, 1, "x")
    for _ = 1, 5 do assert.equal(r1(), r2()) end
  end)

  it("refuses bad distributions by name", function()
    assert.has_error(function() space.loguniform(0, 1) end, "moonrl.loguniform(lo, hi): expected numbers 0 < lo < hi, got 0, 1")
    assert.has_error(function() space.uniform(2, 1) end)
    assert.has_error(function() space.randint(1.5, 3) end)
    assert.has_error(function() space.choice({}) end)
    assert.has_error(function() space.grid("a") end)
    assert.equal("loguniform(0.0001, 0.001)", space.describe(space.loguniform(1e-4, 1e-3)))
    assert.equal("grid{ 64, 128 }", space.describe(space.grid({ 64, 128 })))
  end)
end)

describe("moonrl.sweep.space.point_of", function()
  it("gives a config's own values at the space's keys, a schedule's first value, and leaves out what it lacks", function()
    local sp = { ["ppo.lr"] = space.loguniform(3e-4, 3e-3), ["ppo.clip"] = space.uniform(0.1, 0.3),
      ["ppo.epochs"] = space.randint(5, 20), ["ppo.minibatches"] = space.choice{ 1, 2, 4 } }
    local cfg = { ppo = { lr = { kind = "linear", from = 1e-3, to = 0 }, clip = 0.2, epochs = 20 } }
    assert.same({ ["ppo.lr"] = 1e-3, ["ppo.clip"] = 0.2, ["ppo.epochs"] = 20 }, space.point_of(sp, cfg))
  end)
end)

describe("moonrl.sweep.asha", function()
  it("puts rungs at grace_steps * reduction^k", function()
    local s = asha.new({ grace_steps = 100, reduction = 3 })
    assert.equal(100, s:rung_steps(1))
    assert.equal(300, s:rung_steps(2))
    assert.equal(900, s:rung_steps(3))
    assert.same({ 1, 2 }, s:crossed("a", 300))
    assert.same({}, s:crossed("a", 99))
  end)

  it("keeps the top 1/reduction of the trials recorded at a rung, as they arrive (max)", function()
    -- reduction 2: at the n-th arrival the top max(1, floor(n/2)) go on
    local s = asha.new({ grace_steps = 100, reduction = 2 })
    assert.equal("continue", (s:decide("A", 1, 0.5)))   -- 1st: alone, top 1
    assert.equal("continue", (s:decide("B", 1, 0.7)))   -- 0.7 > 0.5: #1 of 2, top 1
    assert.equal("stop", (s:decide("C", 1, 0.4)))       -- #3 of 3, top 1
    assert.equal("continue", (s:decide("D", 1, 0.8)))   -- #1 of 4, top 2
    local d, why = s:decide("E", 1, 0.6)                -- 0.7, 0.8 above: #3 of 5, top 2
    assert.equal("stop", d)
    assert.equal("rung 1 (100 agent-steps): 0.6 is #3 of 5, top 2 go on", why)
    assert.equal("continue", (s:decide("F", 1, 0.75)))  -- #2 of 6, top 3
    -- rung 2 (200 agent-steps) is its own population
    assert.equal("continue", (s:decide("B", 2, 0.2)))
    assert.equal("stop", (s:decide("D", 2, 0.1)))
  end)

  it("mode min keeps the smallest; ties go on; a missing value goes on unrecorded", function()
    local s = asha.new({ grace_steps = 10, reduction = 3, mode = "min" })
    assert.equal("continue", (s:decide(1, 1, 5)))
    assert.equal("continue", (s:decide(2, 1, 3)))
    assert.equal("stop", (s:decide(3, 1, 4)))           -- #2 of 3, top 1
    assert.equal("continue", (s:decide(4, 1, 3)))       -- ties with the best: nobody strictly better
    assert.equal("continue", (s:decide(5, 1, nil)))
    local n = 0
    for _ in pairs(s.recorded[1]) do n = n + 1 end
    assert.equal(4, n)
    assert.same({}, s:crossed(5, 10))                   -- decided (went on) all the same
  end)

  it("decides synthetic curves as a sweep feeds them", function()
    -- four trials, metric sampled every 50 steps; rungs at 100 and 300 (reduction 3)
    local curves = {
      t1 = function(s) return s / 1000 end,          -- 0.1 at 100, 0.3 at 300
      t2 = function(s) return 0.5 - s / 2000 end,    -- 0.45 at 100
      t3 = function(s) return 0.05 + s / 4000 end,   -- 0.075 at 100
      t4 = function(s) return 0.3 + s / 1000 end,    -- 0.4 at 100, 0.6 at 300
    }
    local s = asha.new({ grace_steps = 100, reduction = 3 })
    local stopped, alive = {}, { t1 = true, t2 = true, t3 = true, t4 = true }
    for step = 50, 1000, 50 do
      for _, id in ipairs({ "t1", "t2", "t3", "t4" }) do
        if alive[id] then
          for _, k in ipairs(s:crossed(id, step)) do
            if s:decide(id, k, curves[id](s:rung_steps(k))) == "stop" then
              alive[id], stopped[id] = false, s:rung_steps(k)
              break
            end
          end
        end
      end
    end
    -- rung 1 arrivals in order t1 0.1 (go on), t2 0.45 (go on), t3 0.075 (#3 of 3: stop),
    -- t4 0.4 (#2 of 4, top 1: stop); rung 2: t1 0.3 (alone: go on), t2 0.35 (go on);
    -- rung 3 (900): t1 0.9 (go on), t2 0.05 (#2 of 2: stop)
    assert.same({ t3 = 100, t4 = 100, t2 = 900 }, stopped)
    assert.is_true(alive.t1)
  end)

  it("records decisions read back without deciding again", function()
    local s = asha.new({ grace_steps = 100, reduction = 3 })
    s:record("old", 1, 0.9)
    assert.same({}, s:crossed("old", 100))
    assert.equal("stop", (s:decide("new", 1, 0.5)))      -- judged against the one read back
  end)

  it("refuses bad settings", function()
    assert.has_error(function() asha.new({ reduction = 3 }) end)
    assert.has_error(function() asha.new({ grace_steps = 10, reduction = 1 }) end)
  end)

  it("lets trials wait at the rungs on this machine only, one rank each (the refusal and the pause marks agree)", function()
    local waits = require("moonrl.sweep.definition").waits_at_rungs
    local local_obj = require("moonrl.sweep.local_executor").new()
    assert.is_true(waits(nil, nil))
    assert.is_true(waits("local", 1))
    assert.is_true(waits(local_obj, 1))          -- the executor object the sweep runs with
    assert.is_false(waits(local_obj, 2))
    assert.is_false(waits("local", 4))
    assert.is_false(waits("slurm", 1))
    assert.is_false(waits({ name = "slurm", start = function() end }, 1))
    assert.is_false(waits({ start = function() end }, 1))   -- a custom executor without a name
  end)
end)

describe("moonrl.sweep.results", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  it("reads back starts, rungs and results, skipping a torn last line", function()
    results.append(dir, { event = "start", trial = 1, params = { a = 1 } })
    results.append(dir, { event = "start", trial = 2, params = { a = 2 } })
    results.append(dir, { event = "rung", trial = 1, rung = 1, value = 0.5, decision = "continue" })
    results.append(dir, { trial = 1, status = "done", value = 0.5, params = { a = 1 } })
    local f = io.open(dir .. "/results.jsonl", "a")
    f:write('{"trial": 2, "status": "do')
    f:close()
    local r = results.read(dir)
    assert.equal("done", r.results[1].status)
    assert.is_nil(r.results[2])
    assert.equal(2, r.starts[2].params.a)
    assert.equal(1, #r.rungs)
  end)

  it("follows a growing metrics file, and one cut back", function()
    local path = dir .. "/metrics.jsonl"
    local t = results.tail(path)
    assert.same({}, t:read())
    support.write_file(path, '{"update":1,"agent_steps":10,"efficiency":0.1}\n{"update":2,"agent_st')
    local curve = {}
    for _, rec in ipairs(t:read()) do results.curve_add(curve, rec, "efficiency") end
    assert.equal(1, #curve)
    local f = io.open(path, "a")
    f:write('eps":20,"efficiency":null}\n{"event":"change"}\n{"update":3,"agent_steps":30,"efficiency":0.3}\n')
    f:close()
    for _, rec in ipairs(t:read()) do results.curve_add(curve, rec, "efficiency") end
    assert.equal(3, #curve)
    assert.is_nil(curve[2].value)
    assert.equal(0.2, results.curve_value(curve, 2))   -- mean of 0.3 and 0.1: the null is skipped
    assert.equal(0.1, (results.value_at(curve, 15, 1)))
    assert.equal(0.3, (results.value_at(curve, 25, 1)))
    assert.is_nil((results.value_at(curve, 31, 1)))
    -- a resumed trial cuts its file back to its checkpoint
    support.write_file(path, '{"update":1,"agent_steps":10,"efficiency":0.1}\n')
    local recs = t:read()
    assert.is_true(t.reset)
    curve = {}
    for _, rec in ipairs(recs) do results.curve_add(curve, rec, "efficiency") end
    assert.equal(1, #curve)
  end)

  it("names as the best a trial that ran to its end before a stopped one, never a failed or running one", function()
    local list = {
      { trial = 1, status = "stopped", value = 9 },     -- ASHA stopped it at an early rung
      { trial = 2, status = "done", value = 5 },
      { trial = 3, status = "failed", value = 12 },
      { trial = 4, status = "running", value = 11 },
      { trial = 5, status = "done", value = 4 },
      { trial = 6, status = "done" },                   -- no value
    }
    assert.equal(2, results.best(list, "max").trial)
    assert.equal(5, results.best(list, "min").trial)
    -- no trial ran to its end: the best stopped one
    local stopped = { { trial = 1, status = "stopped", value = 3 }, { trial = 2, status = "stopped", value = 7 },
      { trial = 3, status = "failed", value = 9 } }
    assert.equal(2, results.best(stopped, "max").trial)
    assert.equal(1, results.best(stopped, "min").trial)
    assert.is_nil(results.best({ { trial = 1, status = "failed", value = 1 }, { trial = 2, status = "running", value = 2 } }, "max"))
  end)

  it("sorts by the metric, best first, trials without a value last", function()
    local list = {
      { trial = 1, value = 0.2, status = "done" }, { trial = 2, status = "failed" },
      { trial = 3, value = 0.9, status = "stopped" }, { trial = 4, value = 0.5, status = "done" },
    }
    local order = {}
    for i, r in ipairs(results.sorted(list, "max")) do order[i] = r.trial end
    assert.same({ 3, 4, 1, 2 }, order)
    order = {}
    for i, r in ipairs(results.sorted(list, "min")) do order[i] = r.trial end
    assert.same({ 1, 4, 3, 2 }, order)
    local text = results.table(list, { metric = "efficiency", mode = "max", keys = {} })
    local lines = support.lines(text .. "\n")
    assert.equal(6, #lines)
    assert.matches("^| trial %s+| status%s+| efficiency | steps | seed | dir", lines[1])
    assert.matches("^| trial%-3 ", lines[3])
    assert.matches("^| trial%-2 +| failed ", lines[6])
  end)

  it("groups repeated trials by setting: mean, 95% t interval, and which settings the best cannot be told from", function()
    -- repeats = 3: trials 1-3 are setting 1, 4-6 setting 2, 7-9 setting 3; trial 9 failed
    local list = {
      { trial = 1, value = 1.0, status = "done" }, { trial = 2, value = 1.1, status = "done" },
      { trial = 3, value = 0.9, status = "done" },
      { trial = 4, value = 0.5, status = "done" }, { trial = 5, value = 0.6, status = "done" },
      { trial = 6, value = 0.4, status = "done" },
      { trial = 7, value = 0.95, status = "done" }, { trial = 8, value = 1.0, status = "stopped" },
      { trial = 9, value = 7.0, status = "failed" },
    }
    local g = results.settings(list, "max", 3)
    assert.same({ 1, 3, 2 }, { g[1].setting, g[2].setting, g[3].setting })
    -- setting 1: mean 1.0, sd 0.1, t(0.975, 2) = 4.302653 (published tables): 1.0 +- 4.302653 * 0.1 / sqrt(3)
    local h = 4.302653 * 0.1 / math.sqrt(3)
    assert.is_true(math.abs(g[1].mean - 1.0) < 1e-12)
    assert.is_true(math.abs(g[1].lo - (1.0 - h)) < 1e-6 and math.abs(g[1].hi - (1.0 + h)) < 1e-6)
    -- setting 3: two values (the failed trial left out), mean 0.975, t(0.975, 1) = 12.706205
    assert.equal(2, g[2].n)
    local h3 = 12.706205 * math.sqrt(0.00125) / math.sqrt(2)
    assert.is_true(math.abs(g[2].lo - (0.975 - h3)) < 1e-5)
    assert.is_false(g[2].distinct)   -- overlaps the best's interval
    assert.is_true(g[3].distinct)    -- 0.5 +- 0.248 is below 1.0 +- 0.248
    local text = results.settings_text(g, { metric = "return", keys = {} })
    assert.matches("not distinguishable from the best", text, 1, true)
    assert.matches("worse than the best", text, 1, true)
    -- mode min puts setting 2 first
    assert.equal(2, results.settings(list, "min", 3)[1].setting)
  end)
end)

describe("moonrl.svg chart (the sweeps' plots)", function()
  it("writes a well-formed chart with a log axis, lines and points", function()
    local text = svg.chart({ title = "a <b> & c", xlabel = "lr", ylabel = "eff", xlog = true, series = {
      { name = "done", kind = "points", points = { { 1e-4, 0.2 }, { 1e-3, 0.5 }, { 0 / 0, 1 } } },
      { name = "curve", points = { { 2e-4, 0.1 }, { 5e-4, 0.3 } } },
    } })
    assert.matches("^<svg xmlns=", text)
    assert.matches("</svg>\n$", text)
    assert.matches("a &lt;b&gt; &amp; c", text)
    local circles = select(2, text:gsub("<circle [^>]*><title>", ""))   -- the data's (the legend's has no title)
    assert.equal(2, circles)   -- the NaN point is left out
    assert.matches("<polyline points=\"[%d., ]+\"", text)
    assert.matches(">0.0001<", text)   -- a decade tick
    -- every element opened (not self-closing) is closed
    local closes = select(2, text:gsub("</%a+>", ""))
    local starts = select(2, text:gsub("<%a[^>]*[^/]>", ""))
    assert.equal(starts, closes)
  end)
end)

describe("moonrl.sweep's budget (agent-steps in all) with a scheduler", function()
  -- the scheduling half of the Sweep object on a stand-in sweep: no process starts (moonrl.core, the
  -- binary's C module, is not in a plain busted; these paths only report through it)
  local had_core = package.loaded["moonrl.core"]
  package.loaded["moonrl.core"] = had_core or { report = function(...) error(table.concat({ ... }, ": ")) end }
  local trials = require("moonrl.sweep.trials")
  package.loaded["moonrl.core"] = had_core
  local function sweep_with(opts)
    local S = {}
    S.__index = S
    trials.install(S, { new_trial = function(_, index, params) return { index = index, params = params, status = "pending" } end,
      point_text = tostring, tail_lines = function() return "" end, public = function(t) return t end })
    local stopped = {}
    function S:say(line) self.said[#self.said + 1] = line end
    function S:_stop_trial(t) stopped[#stopped + 1] = t.index t.stop_sent = true end
    local dir = support.tmpdir()
    local list = {}
    for i, r in ipairs(opts.done) do list[i] = { index = i, status = r.status, result = r } end
    local self = setmetatable({ dir = dir, said = {}, trials = 64, trials_list = list, prev = { starts = {} }, budget = opts.budget,
      base_cfg = { total_steps = opts.trial_steps }, done_results = opts.done, running = opts.running or {}, seed = 1,
      space = { x = space.uniform(0, 1) }, mode = "max", scheduler = opts.scheduler,
      method = function(_, ctx) return { x = ctx.index / 100 } end }, S)
    return self, stopped, dir
  end
  local function done(...)
    local out = {}
    for i, steps in ipairs({ ... }) do out[i] = { trial = i, steps = steps, status = "stopped", value = 1 } end
    return out
  end

  it("charges the steps trials ran and needs room for the first rung only, so it is spent to the end", function()
    -- 650 of 1,000 spent: a whole trial (400) does not fit, its first rung (100) does
    local s, _, dir = sweep_with({ budget = 1000, trial_steps = 400, done = done(400, 100, 150),
      scheduler = asha.new{ grace_steps = 100, reduction = 2 } })
    local t = s:_next()
    assert.is_truthy(t, "no trial proposed with 400 agent-steps left and a first rung of 100")
    assert.equal(4, t.index)
    support.rm_rf(dir)
    -- 950 spent: not even the first rung fits; the sweep says so and proposes no more
    s, _, dir = sweep_with({ budget = 1000, trial_steps = 400, done = done(400, 400, 150),
      scheduler = asha.new{ grace_steps = 100, reduction = 2 } })
    assert.is_nil(s:_next())
    assert.is_true(s.method_done)
    assert.is_true(s.said[1]:find("no room for another trial of 100", 1, true) ~= nil, s.said[1])
    support.rm_rf(dir)
    -- without a scheduler every trial runs its whole budget: a whole trial must fit
    s, _, dir = sweep_with({ budget = 1000, trial_steps = 400, done = done(400, 100, 150) })
    assert.is_nil(s:_next())
    assert.is_true(s.said[1]:find("no room for another trial of 400", 1, true) ~= nil, s.said[1])
    support.rm_rf(dir)
  end)

  it("stops the running trial that spends the budget, as stopped early", function()
    local running = { index = 4, steps = 350, cfg = { total_steps = 800 }, label = "trial-004" }
    local s, stopped, dir = sweep_with({ budget = 1000, trial_steps = 800, done = done(400, 100, 100), running = { running },
      scheduler = asha.new{ grace_steps = 100, reduction = 2 } })
    s:_budget_stop(running)
    assert.same({}, stopped)   -- 950 of 1,000
    running.steps = 400
    s:_budget_stop(running)
    assert.same({ 4 }, stopped)
    assert.is_true(running.stop_why:find("budget of 1,000 agent-steps is spent", 1, true) ~= nil, running.stop_why)
    assert.is_true(support.read_file(dir .. "/results.jsonl"):find('"event":"budget_stop"', 1, true) ~= nil)
    support.rm_rf(dir)
  end)
end)

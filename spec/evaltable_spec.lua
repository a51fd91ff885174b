-- moonrl.eval.table and moonrl.eval.files on records made here (shaped as
-- engine.eval_records returns them): the table's numbers against values
-- worked out by hand, the comparison's verdict, the records files read back
-- to the same numbers, and the figure.
local evaltable = require("moonrl.eval.table")
local evalfiles = require("moonrl.eval.files")
local stats = require("moonrl.eval.stats")
local support = require("support")

local function near(a, b, tol, what)
  assert.is_true(math.abs(a - b) <= (tol or 1e-12), (what or "") .. ": " .. tostring(a) .. " vs " .. tostring(b))
end

-- records from {run, env, died, steps, food, poison} lists
local function result(list, eval, mode)
  local R = { n = #list, deaths = 0, rec = {} }
  local start = {}
  for i, x in ipairs(list) do
    local key = x[1] .. ":" .. x[2]
    local r = { run = x[1], env = x[2], died = x[3], steps = x[4], food = x[5], poison = x[6],
                start = start[key] or 0, reward = 0.5 * x[5] }
    start[key] = r.start + r.steps
    r.energy_gained_centi = 100 * r.food - 200 * r.poison - r.steps
    r.final_energy = (100 + r.energy_gained_centi) / 100
    R.rec[i - 1] = r
    R.deaths = R.deaths + r.died
  end
  return { records = R, eval = eval, mode = mode or "proxy" }
end

-- agent 0: dies at 4 (1 food, 2 poison), dies at 3 (nothing eaten: counts
-- 1.0), alive for the last 3 (2 food); agent 1: alive all 10 steps (3 food, 1 poison)
local SMALL = {
  { 0, 0, 1, 4, 1, 2 }, { 0, 0, 1, 3, 0, 0 }, { 0, 0, 0, 3, 2, 0 },
  { 0, 1, 0, 10, 3, 1 },
}
local SMALL_EVAL = { num_envs = 2, steps = 10, runs = 1, seed = 5 }

-- n agents, each living `steps` steps in lives of `life` steps, eating food
-- with probability pf and poison with pp per step (seeded).
local function synthetic(n, steps, life, pf, pp, seed)
  local r = stats.rng(seed)
  local list = {}
  for env = 0, n - 1 do
    local t = 0
    while t < steps do
      local len = math.min(life + r:below(life) - 1, steps - t)
      local f, p = 0, 0
      for _ = 1, len do
        local u = r:uniform()
        if u < pf then f = f + 1 elseif u < pf + pp then p = p + 1 end
      end
      local died = (t + len < steps) and 1 or 0
      list[#list + 1] = { 0, env, died, len, f, p }
      t = t + len
    end
  end
  return result(list, { num_envs = n, steps = steps, runs = 1, seed = 1 })
end

describe("moonrl.eval.table", function()
  it("works out every metric of a small evaluation as by hand", function()
    local s = evaltable.summarise(result(SMALL, SMALL_EVAL), { boot = 0 })
    local p = s.point
    -- F = 6, P = 3, S = 20 agent-steps, D = 2 deaths, 4 episodes
    near(p.energy_per_1k, (6 - 2 * 3 - 0.01 * 20) * 1000 / 20)
    near(p.eff_overall, 6 / 9)
    near(p.eff_per_death, (1 / 3 + 1.0) / 2)
    near(p.eff_per_env, (3 / 5 + 3 / 4) / 2)
    near(p.survival_mean, (4 + 3) / 2)
    near(p.survival_all, 20 / 4)
    near(p.deaths_per_1k, 2 * 1000 / 20)
    near(p.food_per_1k, 6 * 1000 / 20)
    near(p.poison_per_1k, 3 * 1000 / 20)
    assert.equal(2, s.deaths)
    assert.equal(2, s.censored)
    -- KM: at 3, 4 at risk (3, 3+ and 4, 10+ ... 3 is a death, the 3+ counts at risk): S = 3/4;
    -- at 4: 2 at risk, S = 3/8; the median is 4
    assert.same({ 3, 4 }, s.km.time)
    near(s.km.surv[1], 3 / 4)
    near(s.km.surv[2], 3 / 8)
    assert.equal(4, s.km_median[1])
  end)

  it("gives intervals around the point estimates, the same for the same seed", function()
    local res = synthetic(60, 200, 40, 0.05, 0.03, 3)
    local a = evaltable.summarise(res, { boot = 200, boot_seed = 4 })
    local b = evaltable.summarise(res, { boot = 200, boot_seed = 4 })
    for _, m in ipairs(evaltable.METRICS) do
      local ci = a.ci[m.key]
      assert.is_true(ci[1] <= a.point[m.key] and a.point[m.key] <= ci[2], m.key)
      assert.same(ci, b.ci[m.key])
    end
    -- runs as the unit: three runs of 20 agents
    for i = 0, res.records.n - 1 do
      local x = res.records.rec[i]
      x.run, x.env = math.floor(x.env / 20), x.env % 20
    end
    res.eval = { num_envs = 20, steps = 200, runs = 3, seed = 1 }
    local r = evaltable.summarise(res, { boot = 200, unit = "runs" })
    assert.equal(3, r.units)
    near(r.point.eff_overall, a.point.eff_overall, 1e-12, "the point does not depend on the unit")
  end)

  it("prints the table with its definitions", function()
    local s = evaltable.summarise(result(SMALL, SMALL_EVAL, "ground_truth"), { boot = 100 })
    local text = evaltable.table({ s })
    for _, want in ipairs({ "| metric", "ground_truth", "efficiency, overall", "efficiency, per-death mean",
      "efficiency, per-env mean", "survival, KM median", "deaths / survivors (censored)", "2 / 2",
      "total food / (total food + total poison)", "a death with", "Brookmeyer-Crowley",
      "percentile bootstrap over agents (100 resamples, seed 1)" }) do
      assert.truthy(text:find(want, 1, true), want .. " missing in\n" .. text)
    end
    assert.truthy(text:find("| efficiency, overall +| +66%.7%% %[", 1), text)
  end)

  it("says when B is measurably worse than A, with the difference, its interval and d", function()
    local a = evaltable.summarise(synthetic(80, 300, 60, 0.06, 0.005, 1), { boot = 300 })
    a.label = "truth"
    local b = evaltable.summarise(synthetic(80, 300, 30, 0.03, 0.04, 2), { boot = 300 })
    b.label = "proxy"
    local c = evaltable.compare(a, b)
    assert.truthy(c.verdict:find("^proxy is measurably worse than truth: "), c.verdict)
    assert.truthy(c.verdict:find("efficiency, overall %-[%d%.]+ points %[%-[%d%.]+, %-[%d%.]+%], d = %-[%d%.]+"),
      c.verdict)
    for _, r in ipairs(c.rows) do
      if r.key == "eff_overall" then
        assert.is_true(r.worse and r.hi < 0 and r.lo <= r.diff and r.diff <= r.hi)
        near(r.d, stats.cohen_d(a.values.eff_overall, b.values.eff_overall))
        assert.is_true(r.d < -1)
      end
      if r.key == "poison_per_1k" then assert.is_true(r.worse and r.lo > 0) end
    end
    -- and the other way round
    assert.truthy(evaltable.compare(b, a).verdict:find("^truth is measurably better than proxy"))
    -- the same evaluation twice: nothing measurable
    local v = evaltable.compare(a, a).verdict
    assert.truthy(v:find("no measurable difference", 1, true), v)
    local text = evaltable.compare_text(a, b)
    assert.truthy(text:find("Cohen's d", 1, true) and text:find("difference [95% CI]", 1, true), text)
  end)
end)

describe("moonrl.eval.files", function()
  local dir
  setup(function() dir = support.tmpdir() end)
  teardown(function() support.rm_rf(dir) end)

  it("writes records that read back to the same table, as CSV and as JSONL", function()
    local res = synthetic(20, 120, 30, 0.05, 0.03, 8)
    res.label = "x"
    local want = evaltable.summarise(res, { boot = 50 })
    for _, fmt in ipairs({ "csv", "jsonl" }) do
      local path = dir .. "/records." .. fmt
      assert.is_true(evalfiles.write_records(path, { res }, fmt))
      local back = assert(evalfiles.read_records(path, fmt))
      assert.equal(res.records.n, back[1].n)
      local got = evaltable.summarise({ records = back[1], eval = res.eval, mode = "proxy" }, { boot = 50 })
      assert.same(want.point, got.point)
      assert.same(want.ci, got.ci)
    end
    local first = support.lines(support.read_file(dir .. "/records.csv"))[1]
    assert.equal(table.concat(evalfiles.FIELDS, ","), first)
  end)

  it("draws the Kaplan-Meier curves and efficiency distributions as SVG", function()
    local a = evaltable.summarise(synthetic(20, 120, 30, 0.05, 0.01, 1), { boot = 0 })
    local b = evaltable.summarise(synthetic(20, 120, 20, 0.03, 0.03, 2), { boot = 0 })
    a.label, b.label = "ground_truth", "proxy & co"
    local text = evalfiles.figure({ a, b })
    assert.truthy(text:find('^<svg xmlns="http://www.w3.org/2000/svg"'))
    assert.truthy(text:find("</svg>\n$"))
    assert.truthy(text:find("Kaplan-Meier survival", 1, true))
    assert.truthy(text:find("proxy &amp; co", 1, true))
    local lines = 0
    for _ in text:gmatch("<polyline") do lines = lines + 1 end
    assert.equal(2 + 2 * 2, lines)   -- a curve per mode, two distributions per mode
    -- every opened element is closed
    local open = select(2, text:gsub("<(%a+)[^>]-[^/]>", ""))
    local closed = select(2, text:gsub("</%a+>", ""))
    assert.equal(open, closed)
  end)
end)

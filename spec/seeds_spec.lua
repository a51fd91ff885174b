-- Verdicts that count training seeds (moonrl.eval.seeds, stats.welch,
-- `moonrl eval --compare A1,A2 B1,B2`): Welch's test and the seeds a side
-- needed against an independent reference in mpmath at 30 digits
-- (spec/seeds_reference.py: Student's t from the regularized incomplete beta,
-- the power from the noncentral t's density integrated numerically), and
-- against Cohen's 1988 tables (64 a side for d = 0.5, 26 for 0.8); the
-- comparison of arms of runs, the note under a comparison of single runs,
-- and the CLI end to end from hand-written evaluation files (--from).
local stats = require("moonrl.eval.stats")
local seeds = require("moonrl.eval.seeds")
local evaltable = require("moonrl.eval.table")
local json = require("moonrl.formats.json")
local support = require("support")

local function near(a, b, tol, what)
  assert.is_true(math.abs(a - b) <= tol, (what or "") .. ": " .. tostring(a) .. " vs " .. tostring(b))
end

-- two arms of training runs, one value each (efficiency): spec/seeds_reference.py's A and B
local A = { 0.912, 0.874, 0.951, 0.889 }
local B = { 0.948, 0.967, 0.931 }

describe("stats.welch", function()
  it("gives mpmath's difference, interval, df and two-sided p", function()
    -- seeds_reference.py: AB ['0.0421666666666667', '-0.00951000558548847', '0.0938433389188218',
    --                         '4.7070396872871', '0.0890301179401962']
    local d, lo, hi, df, p = stats.welch(A, B)
    near(d, 0.0421666666666667, 1e-13, "diff")
    near(lo, -0.00951000558548847, 1e-8, "lo")
    near(hi, 0.0938433389188218, 1e-8, "hi")
    near(df, 4.7070396872871, 1e-10, "df")
    near(p, 0.0890301179401962, 1e-8, "p")
    -- the other way round: the difference and interval change sign, p does not
    local d2, lo2, hi2, _, p2 = stats.welch(B, A)
    near(d2, -d, 1e-15) near(lo2, -hi, 1e-12) near(hi2, -lo, 1e-12) near(p2, p, 1e-12)
    -- near: ['0.0866666666666667', '-0.213714881239504', '0.387048214572837', '4.33208031305235', '0.477189484059237']
    d, lo, hi, df, p = stats.welch({ 1.0, 1.2, 0.9 }, { 1.1, 1.3, 1.0, 1.25, 0.95 })
    near(d, 0.0866666666666667, 1e-13) near(lo, -0.213714881239504, 1e-8) near(hi, 0.387048214572837, 1e-8)
    near(df, 4.33208031305235, 1e-10) near(p, 0.477189484059237, 1e-8)
    -- fewer than 2 a side: no test; both constant: the difference itself
    assert.is_nil(stats.welch({ 1 }, { 1, 2 }))
    d, lo, hi, df, p = stats.welch({ 1, 1 }, { 2, 2 })
    assert.same({ 1, 1, 1, 0 }, { d, lo, hi, p })
  end)
end)

describe("moonrl.eval.seeds", function()
  it("needs as many seeds a side as the exact noncentral t says (and Cohen's tables)", function()
    -- seeds_reference.py: d 0.5 -> 64, 0.8 -> 26, 1 -> 17, 2 -> 6, 3 -> 4 (exact power >= 0.8)
    for d, n in pairs({ [0.5] = 64, [0.8] = 26, [1] = 17, [2] = 6, [3] = 4 }) do
      assert.equal(n, seeds.needed(d), "d = " .. d)
      assert.equal(n, seeds.needed(-d))
    end
    -- the approximate power near the exact one (seeds_reference.py: 0.8070367151 at n = 17, d = 1;
    -- 0.6186977144 at d = 0.8; 0.2929571394 at d = 0.5)
    near(seeds.power(17, 1), 0.8070367151, 0.005, "d = 1")
    near(seeds.power(17, 0.8), 0.6186977144, 0.01, "d = 0.8")
    near(seeds.power(17, 0.5), 0.2929571394, 0.01, "d = 0.5")
    assert.is_nil(seeds.needed(0))
    assert.is_nil(seeds.needed(0 / 0))
    assert.equal(math.huge, seeds.needed(1e-4))
  end)

  it("tests two arms of runs: Welch's numbers, the seed-to-seed sd, the seeds needed, the direction", function()
    local t = seeds.test(A, B, true)
    near(t.p, 0.0890301179401962, 1e-8)
    assert.is_nil(t.better)   -- p > 0.05: no verdict
    near(t.sd, math.sqrt((stats.var(A) + stats.var(B)) / 2), 1e-15)
    assert.equal(seeds.needed(t.diff / t.sd), t.needed)
    assert.equal(4, t.na) assert.equal(3, t.nb)
    local m, lo, hi = stats.mean_interval(B)
    assert.same({ m, lo, hi }, t.b)
    -- arms well apart: better where more is better, worse where less is
    local far = { 0.99, 0.995, 0.985 }
    assert.is_true(seeds.test(A, far, true).better)
    assert.is_true(seeds.test(A, far, false).worse)
    assert.is_nil(seeds.test(A, far, nil).better)
    -- NaN values (a metric undefined in a run) are left out
    assert.equal(3, seeds.test({ 1, 2, 0 / 0, 3 }, { 1, 2 }).na)
  end)

  -- summaries as moonrl.eval.table makes them, one value per metric (the others NaN)
  local function summaries(label, values)
    local out = {}
    for i, v in ipairs(values) do
      local point = {}
      for _, m in ipairs(evaltable.METRICS) do point[m.key] = 0 / 0 end
      point.eff_overall = v
      out[i] = { label = label .. i, metrics = evaltable.METRICS, point = point }
    end
    return out
  end

  it("compares arms of summaries over seeds, and says what it would take", function()
    local c = seeds.compare(summaries("a", A), summaries("b", B))
    assert.equal("{a1, a2, a3, a4}", c.label_a)
    assert.truthy(c.verdict:find("^no difference the training seeds can tell between {a1, a2, a3, a4} and {b1, b2, b3}"),
      c.verdict)
    local t = seeds.test(A, B, true)
    assert.truthy(c.verdict:find("efficiency, overall differs by %+4%.2 points with a seed%-to%-seed sd of 2%.%d points: " ..
      "telling that difference at the 5%% level with 80%% power needs about " .. t.needed .. " runs a side"), c.verdict)
    local text = seeds.compare_text(summaries("a", A), summaries("b", B))
    assert.truthy(text:find("| efficiency, overall", 1, true), text)
    assert.truthy(text:find("+4.2 pts [-1.0, +9.4]", 1, true), text)
    assert.truthy(text:find("| 0.089 ", 1, true), text)
    c = seeds.compare(summaries("a", A), summaries("b", { 0.99, 0.995, 0.985 }))
    assert.truthy(c.verdict:find("is measurably better than {a1, a2, a3, a4} over training seeds %(Welch's t over 4 and 3 " ..
      "training runs%): efficiency, overall %+"), c.verdict)
    c = seeds.compare(summaries("a", A), summaries("b", { 0.99 }))
    assert.truthy(c.verdict:find("needs at least 2 a side", 1, true), c.verdict)
  end)

  it("says under a comparison of single runs that seed-to-seed spread is not in its intervals, and the seeds needed", function()
    local r = { metric = evaltable.METRICS[2], diff = 0.062 }
    local note = seeds.single_note({ better = { r }, worse = {} })
    assert.truthy(note:find("seed-to-seed", 1, true) and note:find("A1,A2,A3 B1,B2,B3", 1, true), note)
    -- sd = D / 2, D, 2 D: d = 2, 1, 0.5 -> 6, 17, 64
    assert.truthy(note:find("6 if the seeds' sd is 3.1 points, 17 if the seeds' sd is 6.2 points, 64 if the seeds' sd " ..
      "is 12.4 points", 1, true), note)
    assert.truthy(note:find("efficiency, overall's difference of +6.2 points", 1, true), note)
    note = seeds.single_note({ better = {}, worse = {} })
    assert.falsy(note:find("Runs a side", 1, true))
  end)
end)

describe("moonrl eval --compare A1,A2 B1,B2 (the CLI)", function()
  if not support.have_bin then
    it("needs the binary", function() pending("no binary at " .. support.BIN .. " (build it: make build)") end)
    return
  end
  local dir
  setup(function() dir = support.tmpdir() end)
  teardown(function() support.rm_rf(dir) end)

  it("reads arms from commas and refuses an arm of one run beside arms of several", function()
    local rc, _, err = support.moonrl("eval --compare a b1,b2", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("a is one run beside arms of several: a verdict over training seeds needs at least 2 runs a side",
      1, true), err)
    local eval = require("moonrl.cli.commands.eval")
    local arms = eval.arms({ "x1,x2,x3", "y1,y2" })
    assert.same({ "x1", "x2", "x3", "y1", "y2" }, arms.paths)
    assert.same({ 1, 2, 3 }, arms[1])
    assert.same({ 4, 5 }, arms[2])
    assert.is_true(arms.grouped)
    assert.is_nil(eval.arms({ "x", "y" }).grouped)
  end)

  it("gives the verdict over seeds from an evaluation's files (--from), each run's own interval in the table", function()
    -- five training runs' evaluations, one agent each, efficiency = food / (food + poison) = A's and B's values
    local folder = dir .. "/cmp"
    support.uv.fs_mkdir(folder, 493)
    local values = { A[1], A[2], A[3], A[4], B[1], B[2], B[3] }
    local lines, sources = { "source,mode,run,env,died,steps,start,food,poison,reward,energy_gained,final_energy" }, {}
    for k, v in ipairs(values) do
      local food = math.floor(v * 1000 + 0.5)
      lines[#lines + 1] = string.format("%d,ground_truth,0,0,0,1000,0,%d,%d,0,%.2f,%.2f", k, food, 1000 - food,
        food - 2 * (1000 - food) - 10, 1 + food - 2 * (1000 - food) - 10)
      sources[k] = { label = (k <= 4 and "a" .. k or "b" .. (k - 4)) .. " (ground_truth)", mode = "ground_truth",
        checkpoint = "run/checkpoints/update_0000001.mrck",
        eval = { num_envs = 1, steps = 1000, runs = 1, seed = 1 } }
    end
    support.write_file(folder .. "/records.csv", table.concat(lines, "\n") .. "\n")
    support.write_file(folder .. "/eval.json", json.encode({ sources = sources, compare = true,
      arms = { { 1, 2, 3, 4 }, { 5, 6, 7 } }, records = { file = "records.csv", format = "csv" },
      bootstrap = { resamples = 0, seed = 1, unit = "agents" } }) .. "\n")
    local rc, out, err = support.moonrl("eval --from cmp", dir)
    assert.equal(0, rc, err)
    assert.truthy(out:find("comparison over training seeds: B against A\n  A: a1 (ground_truth), a2 (ground_truth), " ..
      "a3 (ground_truth), a4 (ground_truth)\n  B: b1 (ground_truth), b2 (ground_truth), b3 (ground_truth)", 1, true), out)
    assert.truthy(out:find("no difference the training seeds can tell between A and B (Welch's t over 4 and 3 training runs",
      1, true), out)
    assert.truthy(out:find("| efficiency, overall", 1, true), out)
    assert.truthy(out:find("+4.2 pts [-1.0, +9.4] | 0.089 ", 1, true), out)   -- mpmath: [-0.0095, 0.0938], p 0.0890
    assert.truthy(out:find("no difference the training seeds can tell", 1, true), out)
    -- every run in the table, with its own column
    for _, l in ipairs({ "a1 (ground_truth)", "a4 (ground_truth)", "b3 (ground_truth)" }) do
      assert.truthy(out:find("| " .. l, 1, true) or out:find(l .. " |", 1, true), l)
    end
    -- without arms: single runs, and the note says what their intervals leave out
    local doc = json.decode(support.read_file(folder .. "/eval.json"))
    doc.arms = nil
    doc.sources = { doc.sources[1], doc.sources[5] }
    support.write_file(folder .. "/eval.json", json.encode(doc) .. "\n")
    support.write_file(folder .. "/records.csv", lines[1] .. "\n" .. lines[2] .. "\n" .. lines[6]:gsub("^5,", "2,") .. "\n")
    rc, out, err = support.moonrl("eval --from cmp", dir)
    assert.equal(0, rc, err)
    assert.truthy(out:find("comparison: b1 (ground_truth) against a1 (ground_truth)", 1, true), out)
    assert.truthy(out:find("seed-to-seed", 1, true) and out:find("--compare A1,A2,A3 B1,B2,B3", 1, true), out)
  end)
end)

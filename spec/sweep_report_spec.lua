-- `moonrl sweep report DIR` (moonrl.sweep.report) on sweep directories
-- written by hand as moonrl.sweep writes them (sweep.json, results.jsonl):
-- a sweep where one key decides the metric and two do not (the importance
-- finds it; the slices are of the keys that mattered), its default trial
-- found by the base config's values, a sweep without one (the median setting
-- stands in, and the report says so), a sweep with repeats (the verdict over
-- seeds: Welch's numbers of spec/seeds_reference.py), --default runs, too few
-- trials, and the parallel-coordinates chart read back from its SVG.
local report = require("moonrl.sweep.report")
local results = require("moonrl.sweep.results")
local stats = require("moonrl.eval.stats")
local json = require("moonrl.formats.json")
local support = require("support")
local uv = support.uv

local SPACE = {
  ["ppo.lr"] = { kind = "loguniform", lo = 1e-4, hi = 1e-2, log = true, text = "loguniform(0.0001, 0.01)" },
  ["ppo.clip"] = { kind = "uniform", lo = 0.1, hi = 0.3, text = "uniform(0.1, 0.3)" },
  ["ppo.minibatches"] = { kind = "choice", values = { 1, 2, 4 }, text = "choice{1, 2, 4}" },
}
local BASE = { ["ppo.lr"] = "0.001", ["ppo.clip"] = "0.2", ["ppo.minibatches"] = "2", seed = "1" }

-- the metric: only the learning rate matters (best at 10^-2.5), plus a little noise
local function f(p, noise) return 0.9 - 0.2 * (math.log10(p["ppo.lr"]) + 2.5) ^ 2 + noise end

-- A sweep directory: sweep.json and results.jsonl (trial i's params and value, or status)
local function sweep_dir(root, name, info, trials)
  local dir = root .. "/" .. name
  uv.fs_mkdir(dir, 493)
  info.space = info.space or SPACE
  info.definition = info.definition or { base = BASE, method = info.method or "random" }
  info.metric, info.mode, info.method = info.metric or "efficiency", info.mode or "max", info.method or "random"
  support.write_file(dir .. "/sweep.json", json.encode(info) .. "\n")
  for i, t in ipairs(trials) do
    local label = string.format("trial-%03d", i)
    results.append(dir, { event = "start", trial = i, label = label, params = t.params, dir = dir .. "/" .. label })
    if t.status ~= "running" then
      results.append(dir, { trial = i, label = label, status = t.status or "done", value = t.value, params = t.params,
        steps = t.steps or 4096, dir = dir .. "/" .. label })
    end
  end
  return dir
end

-- n trials: trial 1 at the base's values, the others drawn (seeded)
local function random_trials(n, seed)
  local r = stats.rng(seed)
  local out = {}
  for i = 1, n do
    local p
    if i == 1 then p = { ["ppo.lr"] = 1e-3, ["ppo.clip"] = 0.2, ["ppo.minibatches"] = 2 }
    else p = { ["ppo.lr"] = 10 ^ (-4 + 2 * r:uniform()), ["ppo.clip"] = 0.1 + 0.2 * r:uniform(),
               ["ppo.minibatches"] = ({ 1, 2, 4 })[r:below(3)] } end
    out[i] = { params = p, value = f(p, 0.002 * (r:uniform() - 0.5)) }
  end
  return out
end

describe("moonrl sweep report", function()
  local root
  setup(function() root = support.tmpdir() end)
  teardown(function() support.rm_rf(root) end)

  it("finds the key that matters, the default trial, and writes the report, the slices and the parallel chart", function()
    local trials = random_trials(30, 5)
    trials[31] = { params = { ["ppo.lr"] = 2e-3, ["ppo.clip"] = 0.15, ["ppo.minibatches"] = 1 }, status = "stopped", value = 0.5 }
    trials[32] = { params = { ["ppo.lr"] = 5e-4, ["ppo.clip"] = 0.25, ["ppo.minibatches"] = 4 }, status = "failed" }
    local dir = sweep_dir(root, "one-key", {}, trials)
    local files, text, r = report.write(dir)
    assert.is_table(files, text)
    -- importance: the learning rate alone
    local imp = assert(r.importance, r.importance_why)
    assert.equal("ppo.lr", imp.keys[1].key)
    assert.is_true(imp.keys[1].importance > 0.8, "ppo.lr " .. imp.keys[1].importance)
    for i = 2, 3 do assert.is_true(imp.keys[i].importance < 0.05, imp.keys[i].key .. " " .. imp.keys[i].importance) end
    assert.equal(30, imp.n)   -- done only: the stopped and the failed trial are left out
    -- the default: trial 1, the base's values; the best: the trial nearest lr = 10^-2.5
    assert.equal("trial", r.default_kind)
    assert.same({ 1 }, r.default.trials)
    local best, bv = nil, -math.huge
    for i = 1, 30 do if trials[i].value > bv then best, bv = i, trials[i].value end end
    assert.same({ best }, r.best.trials)
    assert.equal(bv, r.best.mean)
    -- one run a side: no verdict over seeds, and the report says why and what it would take
    assert.truthy(text:find("No verdict over training seeds", 1, true), text)
    assert.truthy(text:find("seed-to-seed spread is in no interval here", 1, true), text)
    assert.truthy(text:find("the best is the best of 30 settings, so its value is biased upward", 1, true), text)
    assert.truthy(text:find("fANOVA", 1, true) and text:find("random forest", 1, true), text)
    assert.truthy(text:find("The default: trial-001, the setting with the base config's value of every swept key", 1, true), text)
    assert.truthy(text:find("![ppo.lr](slice_ppo.lr.svg)", 1, true), text)
    local want = {}
    for _, name in ipairs({ "report.md", "importance.svg", "parallel.svg", "slice_ppo.lr.svg",
      "slice_" .. imp.keys[2].key .. ".svg" }) do want[#want + 1] = dir .. "/report/" .. name end
    table.sort(want)
    table.sort(files)
    assert.same(want, files)
    assert.equal(text, support.read_file(dir .. "/report/report.md"))

    -- the parallel chart: the axes in importance order then the metric, a line per trial with settings
    local svgtext = support.read_file(dir .. "/report/parallel.svg")
    local lines = 0
    for _ in svgtext:gmatch("<polyline ") do lines = lines + 1 end
    assert.equal(32, lines)   -- 30 done, the stopped one (dashed) and the failed one (to the last key's axis)
    local dashed = 0
    for _ in svgtext:gmatch('stroke%-dasharray="4 3"') do dashed = dashed + 1 end
    assert.equal(1, dashed)
    local names = {}
    for name in svgtext:gmatch('<text x="[%d.]+" y="[%d.]+" text%-anchor="middle">([^<]+)</text>') do names[#names + 1] = name end
    assert.same({ "ppo.lr", imp.keys[2].key, imp.keys[3].key, "efficiency (max)" }, names)
    -- trial 1 (lr = 1e-3) on the first axis, a log axis over [1e-4, 1e-2]: at the middle of its height
    local pts = svgtext:match('<polyline points="([^"]+)"[^>]*><title>trial%-001 ')
    local y1 = tonumber(pts:match("^[%d.]+,([%d.]+)"))
    local top, bottom = 48, 420 - 64
    assert.is_true(math.abs(y1 - (top + bottom) / 2) < 0.01, "y " .. y1)
    -- the slices: a point per trial with a value (30 done, 1 stopped)
    local slice = support.read_file(dir .. "/report/slice_ppo.lr.svg")
    local n = 0
    for _ in slice:gmatch("<circle ") do n = n + 1 end
    assert.equal(31 + 2, n)   -- and the legend's two markers (done, stopped)
  end)

  it("without a default trial, sets the best against the median setting and says so", function()
    local trials = random_trials(9, 8)
    trials[1].params["ppo.clip"] = 0.3   -- no trial at the base's values now
    local dir = sweep_dir(root, "no-default", {}, trials)
    local r = assert(report.build(dir))
    assert.equal("median", r.default_kind)
    local sorted = {}
    for _, t in ipairs(trials) do sorted[#sorted + 1] = t.value end
    table.sort(sorted, function(a, b) return a > b end)
    assert.equal(sorted[5], r.default.mean)   -- the 5th of 9, best first
    local text = report.markdown(r)
    assert.truthy(text:find("No default: no trial ran the base config's values (ppo.clip=0.2 ppo.lr=0.001 " ..
      "ppo.minibatches=2) and no --default was given; the best is set against the median setting instead", 1, true), text)
    assert.truthy(text:find("| median setting |", 1, true), text)
  end)

  it("with repeats, gives the verdict over seeds (Welch's t: spec/seeds_reference.py's numbers)", function()
    -- two settings of 4 seeds: the default's values A, the other's B (its 4th seed failed)
    local A, B = { 0.912, 0.874, 0.951, 0.889 }, { 0.948, 0.967, 0.931 }
    local pd = { ["ppo.lr"] = 1e-3, ["ppo.clip"] = 0.2, ["ppo.minibatches"] = 2 }
    local pb = { ["ppo.lr"] = 3e-3, ["ppo.clip"] = 0.12, ["ppo.minibatches"] = 4 }
    local trials = {}
    for i = 1, 4 do trials[i] = { params = pd, value = A[i] } end
    for i = 1, 3 do trials[4 + i] = { params = pb, value = B[i] } end
    trials[8] = { params = pb, status = "failed" }
    local dir = sweep_dir(root, "repeats", { repeats = 4 }, trials)
    local r = assert(report.build(dir))
    assert.equal("trial", r.default_kind)
    assert.equal(4, r.default.n)
    assert.equal(3, r.best.n)
    assert.is_true(math.abs(r.test.p - 0.0890301179401962) < 1e-8, r.test.p)
    assert.is_true(math.abs(r.test.lo - -0.00951000558548847) < 1e-8)
    local m, lo, hi = stats.mean_interval(B)
    assert.same({ m, lo, hi }, { r.best.mean, r.best.lo, r.best.hi })
    local text = report.markdown(r)
    assert.truthy(text:find("no difference the training seeds can tell between the best and the default (Welch's t over " ..
      "3 and 4 runs): difference 0.04217 [-0.00951, 0.09384], p = 0.089.", 1, true), text)
    assert.truthy(text:find("needs about " .. r.test.needed .. " runs a side", 1, true), text)
    assert.truthy(text:find("95% Student-t interval over its 3 seeds", 1, true), text)
  end)

  it("reads --default runs as the sweep reads a trial, and says how many trials importance needs", function()
    local trials = random_trials(3, 9)
    local dir = sweep_dir(root, "few", { smooth = 2 }, trials)
    local runs = {}
    for k, vals in ipairs({ { 0.5, 0.7, 0.8 }, { 0.6, 0.8, 0.9 } }) do
      local rd = root .. "/default" .. k
      uv.fs_mkdir(rd, 493)
      local m = {}
      for u, v in ipairs(vals) do m[u] = json.encode({ update = u, agent_steps = 4096 * u / 3, efficiency = v }) end
      support.write_file(rd .. "/metrics.jsonl", table.concat(m, "\n") .. "\n")
      runs[k] = rd
    end
    local files, text, r = report.write(dir, { default = runs })
    assert.is_table(files, text)
    assert.equal("runs", r.default_kind)
    -- smooth = 2: the mean of each run's last two values
    assert.equal(2, #r.default.values)
    assert.is_true(math.abs(r.default.values[1] - 0.75) < 1e-12 and math.abs(r.default.values[2] - 0.85) < 1e-12)
    -- the best is one run, the default two: the seeds needed at the default's seed-to-seed sd
    local sd = stats.sd(r.default.values)
    local n = require("moonrl.eval.seeds").needed((r.best.mean - r.default.mean) / sd)
    assert.truthy(text:find(string.format("With the seed-to-seed sd of the default's runs (%s), telling this " ..
      "difference at the 5%% level with 80%% power needs about %d runs a side", results.fmt(sd), n), 1, true), text)
    assert.is_nil(r.importance)
    assert.truthy(text:find("No importance: 3 finished trial(s) with a value (status done; trials stopped early are " ..
      "left out): at least 4 are needed to fit a model.", 1, true), text)
    -- no importance: no slices, the parallel chart still
    assert.same({ dir .. "/report/parallel.svg", dir .. "/report/report.md" }, files)
    local _, err = report.build(dir, { default = { root .. "/nowhere" } })
    assert.truthy(err:find("--default " .. root .. "/nowhere: " .. root .. "/nowhere is not a directory", 1, true), err)
  end)
end)

describe("moonrl sweep report (the CLI)", function()
  if not support.have_bin then
    it("needs the binary", function() pending("no binary at " .. support.BIN .. " (build it: make build)") end)
    return
  end
  local root
  setup(function() root = support.tmpdir() end)
  teardown(function() support.rm_rf(root) end)

  it("prints the report and writes it; says what a wrong DIR is", function()
    sweep_dir(root, "s", {}, random_trials(6, 3))
    local rc, out, err = support.moonrl("sweep report s", root)
    assert.equal(0, rc, err)
    assert.truthy(out:find("# Sweep report: s", 1, true), out)
    assert.truthy(err:find("wrote s/report/importance.svg", 1, true), err)
    uv.fs_mkdir(root .. "/s/trial-001", 493)
    support.write_file(root .. "/s/trial-001/config.lua", "return {}\n")
    uv.fs_mkdir(root .. "/run", 493)
    support.write_file(root .. "/run/config.lua", "return {}\n")
    support.write_file(root .. "/file", "x\n")
    for args, want in pairs({
      ["sweep report nowhere"] = "moonrl sweep report: nowhere not found (a sweep directory: sweep.json, trial-NNN/)",
      ["sweep report file"] = "moonrl sweep report: file is not a directory",
      ["sweep report run"] = "moonrl sweep report: run is a run directory, not a sweep's (no sweep.json",
      ["sweep report s/trial-001"] = "moonrl sweep report: s/trial-001 is a trial of the sweep s, not a sweep " ..
        "directory: moonrl sweep report s",
      ["sweep status s --default run"] = "moonrl sweep status: --default is report's option",
    }) do
      rc, _, err = support.moonrl(args, root)
      assert.equal(2, rc, args .. ": " .. err)
      assert.truthy(err:find(want, 1, true), args .. ": " .. err)
    end
  end)
end)

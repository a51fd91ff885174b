-- moonrl.sweep.report - what a finished (or running) sweep found, as
-- `moonrl sweep report DIR` writes it: the best setting with its interval
-- against the default's and a verdict, which keys mattered
-- (moonrl.sweep.importance: fANOVA over a random forest), the metric against
-- the two that mattered most (slice plots), and every trial across the keys
-- (parallel coordinates). Markdown and SVG in DIR/report/:
--   report.md, importance.svg, parallel.svg, slice_<key>.svg (the two keys)
--
-- Read from sweep.json and results.jsonl only: the trials with a result.
-- The unit compared is a setting (a point of the space): its trials are its
-- seeds (a sweep with repeats = N runs each point N times); a setting's value
-- is the mean over its seeds that finished (status done: a trial ASHA
-- stopped has its value at a smaller budget and is left out of the ranking).
--
-- The default, in this order:
--   1. the runs given (opts.default: run directories of the base config
--      trained on their own, e.g. with several seeds), their values read as
--      the sweep reads a trial's (the mean of the last `smooth` values of the
--      metric in metrics.jsonl; metric = "eval.<key>": their eval.json);
--   2. the setting whose every swept key has the base config's value
--      (sweep.json's definition.base): the sweep ran the default;
--   3. else none: the best is set against the median setting (the middle of
--      the settings ranked by the metric: what a trial drawn from the space
--      reaches), and the report says so and how to give a default.
-- Intervals: a setting of several seeds, the 95% Student-t interval over
-- them and a verdict by Welch's test (moonrl.eval.seeds); one run, its
-- evaluation's interval when the metric is eval.<key> (evaluation noise
-- only: the report says that seed-to-seed spread is not in it), else none
-- (a training metric's last values are autocorrelated updates of one run).
--
--   report.build(dir, opts) -> r | nil, err     opts: default = { run dirs }, seed (importance's, 1)
--   report.markdown(r) -> text
--   report.write(dir, opts) -> files (paths), text, r | nil, err
--   report.charts(dir, list, info) -> { importance = of_sweep's | { error = why },
--       parallel = SVG text, bars = SVG text | nil }   (the dashboard's sweep view)

local results = require("moonrl.sweep.results")
local importance = require("moonrl.sweep.importance")
local plot = require("moonrl.sweep.plot")
local seeds = require("moonrl.eval.seeds")
local stats = require("moonrl.eval.stats")
local util = require("moonrl.util")

local report = {}

local fmt = results.fmt

local function finite(v) return type(v) == "number" and v == v and math.abs(v) < math.huge end

-- the trials with a result, by trial number
local function finished(rec)
  local list = {}
  for _, r in pairs(rec.results) do list[#list + 1] = r end
  table.sort(list, function(a, b) return a.trial < b.trial end)
  return list
end

-- A value of a trial's params against the base's text of the key.
local function same_value(v, text)
  if text == nil or v == nil then return false end
  local a, b = tonumber(v), tonumber(text)
  if type(v) == "number" and b then return math.abs(v - b) <= 1e-9 * math.max(math.abs(v), math.abs(b), 1e-300) end
  if type(v) == "boolean" then return tostring(v) == text end
  return fmt(v) == text or util.fmt_value(v) == text or (a ~= nil and a == b)
end

-- The value (and the evaluation's interval) of a run the sweep did not run,
-- read as a trial's is: -> value, lo, hi, steps | nil, why
local function run_value(dir, info)
  local metric = info.metric
  if type(metric) ~= "string" or metric == "<function>" then
    return nil, "the sweep's metric is a Lua function: a run outside it cannot be read the same way"
  end
  local st = require("luv").fs_stat(dir)
  if not st or st.type ~= "directory" then return nil, dir .. " is not a directory (a run directory of the default)" end
  local curve = {}
  for _, m in ipairs(results.tail(dir .. "/metrics.jsonl"):read()) do results.curve_add(curve, m, metric) end
  local steps = curve[#curve] and curve[#curve].steps
  local key = metric:match("^eval%.(.+)$")
  if key then
    local ef = require("moonrl.eval.files")
    local folder, ferr = ef.newest(dir)
    if not folder then return nil, ferr end
    local v, verr = ef.point(folder, key)
    if not v then return nil, verr end
    local lo, hi = ef.interval(folder, key)
    return v, lo, hi, steps
  end
  if #curve == 0 then return nil, dir .. "/metrics.jsonl has no update (is it a run directory?)" end
  local v = results.curve_value(curve, info.smooth or 1)
  if v == nil then return nil, dir .. "/metrics.jsonl has no value of " .. metric end
  return v, nil, nil, steps
end

-- A trial's evaluation interval (metric = "eval.<key>"): lo, hi | nil
local function trial_interval(dir, r, info)
  local key = type(info.metric) == "string" and info.metric:match("^eval%.(.+)$")
  if not key or type(r.dir) ~= "string" or r.no_interval then return nil end
  local ef = require("moonrl.eval.files")
  local folder = ef.newest(dir .. "/" .. (r.dir:match("([^/]+)/*$") or ""))
  if not folder then return nil end
  return ef.interval(folder, key)
end

-- A setting: { label, params, values, trials, n, mean, lo, hi, how (what the interval is) }
local function describe_setting(g, dir, byt, info)
  g.label = g.label or (#g.trials == 1 and (byt[g.trials[1]].label or ("trial-" .. g.trials[1])) or
    ("trials " .. table.concat(g.trials, ", ")))
  if g.n >= 2 then
    g.how = string.format("95%% Student-t interval over its %d seeds", g.n)
  else
    g.lo, g.hi = trial_interval(dir, byt[g.trials[1]], info)
    g.how = g.lo and "the evaluation's 95% interval (one training run: seed-to-seed spread is not in it)" or
      "no interval: one training run"
  end
  return g
end

function report.build(dir, opts)
  opts = opts or {}
  local rec = results.read(dir)
  local info = rec.info
  if not info then return nil, dir .. " has no readable sweep.json (is it a sweep directory?)" end
  local list = finished(rec)
  local keys = {}
  for k in pairs(info.space or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  local mode = info.mode or "max"
  local higher = mode ~= "min"
  local repeats = tonumber(info.repeats) or 1
  local r = { dir = dir, info = info, list = list, keys = keys, mode = mode, metric = info.metric, notes = {} }
  -- a trial the sweep's finish trained on counts at the trials' budget, as the others (its value
  -- before the finish); its evaluation files are the finish's, so it has no interval here
  for i, t in ipairs(list) do
    if type(t.finish) == "table" and finite(t.finish.from_value) and finite(t.finish.from_steps) then
      r.notes[#r.notes + 1] = string.format("%s trained on by %s agent-steps after the search (the sweep's finish) " ..
        "and reached %s %s there; this report takes it at the trials' budget, %s after %s agent-steps, as the others",
        tostring(t.label), results.thousands((t.steps or 0) - t.finish.from_steps), tostring(info.metric), fmt(t.value),
        fmt(t.finish.from_value), results.thousands(t.finish.from_steps))
      local c = {}
      for k, v in pairs(t) do c[k] = v end
      c.value, c.steps, c.no_interval = t.finish.from_value, t.finish.from_steps, true
      list[i] = c
    end
  end
  local c = { done = 0, stopped = 0, failed = 0 }
  for _, t in ipairs(list) do c[t.status] = (c[t.status] or 0) + 1 end
  local started = 0
  for _ in pairs(rec.starts) do started = started + 1 end
  r.counts, r.started = c, started

  local byt = {}
  for _, t in ipairs(list) do byt[t.trial] = t end
  local done = {}
  for _, t in ipairs(list) do if t.status == "done" and finite(t.value) then done[#done + 1] = t end end
  r.settings = results.settings(done, mode, repeats)
  for _, g in ipairs(r.settings) do describe_setting(g, dir, byt, info) end
  r.best = r.settings[1]

  -- the default
  local base = type(info.definition) == "table" and type(info.definition.base) == "table" and info.definition.base or {}
  r.base_values = {}
  for _, k in ipairs(keys) do r.base_values[k] = base[k] end
  if opts.default and #opts.default > 0 then
    local g = { label = "the default (" .. table.concat(opts.default, ", ") .. ")", values = {}, trials = {}, runs = opts.default }
    local steps = {}
    for _, d in ipairs(opts.default) do
      local v, lo, hi, st = run_value(d, info)
      if not v then return nil, "--default " .. d .. ": " .. tostring(lo) end
      g.values[#g.values + 1] = v
      if st then steps[#steps + 1] = st end
      if #opts.default == 1 then g.lo, g.hi = lo, hi end
    end
    g.n = #g.values
    local m, lo, hi = stats.mean_interval(g.values)
    g.mean = m
    if g.n >= 2 then g.lo, g.hi = lo, hi end
    g.how = g.n >= 2 and string.format("95%% Student-t interval over its %d runs", g.n) or
      (g.lo and "the evaluation's 95% interval (one training run: seed-to-seed spread is not in it)" or "no interval: one training run")
    r.default, r.default_kind = g, "runs"
    -- budgets: the default's against the trials'
    local trial_steps = {}
    for _, t in ipairs(done) do if finite(t.steps) then trial_steps[#trial_steps + 1] = t.steps end end
    if #steps > 0 and #trial_steps > 0 then
      local a, b = stats.mean(steps), stats.mean(trial_steps)
      if math.abs(a - b) > 0.1 * b then
        r.notes[#r.notes + 1] = string.format("the default's runs trained %s agent-steps on average, the sweep's " ..
          "finished trials %s: the comparison is not at the same budget", results.thousands(math.floor(a + 0.5)),
          results.thousands(math.floor(b + 0.5)))
      end
    end
  else
    for _, g in ipairs(r.settings) do
      local all = #keys > 0
      for _, k in ipairs(keys) do
        if not same_value((g.params or {})[k], base[k]) then all = false break end
      end
      if all then r.default, r.default_kind = g, "trial" break end
    end
    if not r.default and #r.settings >= 2 then
      r.default, r.default_kind = r.settings[math.floor((#r.settings + 1) / 2)], "median"
    end
  end

  -- the best against it
  if r.best and r.default and r.best ~= r.default then
    local t = seeds.test(r.default.values, r.best.values, higher)
    r.test = t
  end
  if #r.settings > 2 then
    r.notes[#r.notes + 1] = string.format("the best is the best of %d settings, so its value is biased upward (the " ..
      "winner's curse): train it again with new seeds to measure it", #r.settings)
  end

  -- which keys mattered
  local imp, why = importance.of_sweep(list, info, { seed = opts.seed })
  r.importance, r.importance_why = imp, why
  return r
end

-- ----------------------------------------------------------------- text

local function setting_text(g, keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = (g.params or {})[k]
    if v ~= nil then parts[#parts + 1] = k .. "=" .. fmt(v) end
  end
  return table.concat(parts, " ")
end

local function value_cell(g)
  if g.mean == nil then return "-" end
  if g.lo and g.hi then return string.format("%s [%s, %s]", fmt(g.mean), fmt(g.lo), fmt(g.hi)) end
  return fmt(g.mean)
end

local function p_text(p)
  if p < 0.001 then return "< 0.001" end
  return string.format("%.3f", p)
end

local function verdict(r)
  local b, d, t = r.best, r.default, r.test
  local against = r.default_kind == "median" and "the median setting" or "the default"
  if b == d then
    return "the default is the best setting the sweep found: tuning did not improve on it here."
  end
  if t and t.diff then
    local better = (r.mode ~= "min") == (t.diff > 0)
    if t.p < 0.05 then
      return string.format("the best is measurably %s than %s over training seeds (Welch's t over %d and %d runs): " ..
        "difference %s [%s, %s], p = %s.", better and "better" or "worse", against, t.nb, t.na, fmt(t.diff), fmt(t.lo),
        fmt(t.hi), p_text(t.p))
    end
    local s = string.format("no difference the training seeds can tell between the best and %s (Welch's t over %d " ..
      "and %d runs): difference %s [%s, %s], p = %s.", against, t.nb, t.na, fmt(t.diff), fmt(t.lo), fmt(t.hi), p_text(t.p))
    if t.needed then
      s = s .. string.format(" With the seed-to-seed sd seen (%s), telling a difference of %s at the 5%% level with " ..
        "80%% power needs about %s runs a side.", fmt(t.sd), fmt(math.abs(t.diff)),
        t.needed == math.huge and "more than 100,000" or tostring(t.needed))
    end
    return s
  end
  -- one run on a side (at least): what the intervals say, and what they leave out
  local lines = {}
  if b.lo and d.lo then
    local apart = b.hi < d.lo or b.lo > d.hi
    lines[#lines + 1] = apart and "their evaluation intervals are apart" or "their evaluation intervals overlap"
  end
  local diff = (b.mean or 0) - (d.mean or 0)
  lines[#lines + 1] = string.format("difference %s", fmt(diff))
  local text = table.concat(lines, "; ") .. ". No verdict over training seeds: " ..
    (b.n < 2 and "the best" or against) .. " is one training run, and seed-to-seed spread is in no interval here. "
  -- a side of several runs shows the seeds' sd: the seeds needed at that sd
  local several = (b.n >= 2 and b) or (d.n >= 2 and d) or nil
  local sd = several and stats.sd(several.values)
  if diff ~= 0 and sd and sd > 0 then
    local n = seeds.needed(diff / sd)
    text = text .. string.format("With the seed-to-seed sd of %s's runs (%s), telling this difference at the 5%% " ..
      "level with 80%% power needs about %s runs a side (the two-sample t-test's power; docs/evaluation.md). ",
      several == b and "the best" or against, fmt(sd), n == math.huge and "more than 100,000" or tostring(n))
  elseif diff ~= 0 then
    local parts = {}
    for _, k in ipairs({ 0.5, 1, 2 }) do
      parts[#parts + 1] = string.format("%d if the seeds' sd is %s", seeds.needed(1 / k), fmt(k * math.abs(diff)))
    end
    text = text .. "Runs a side needed to tell this difference at the 5% level with 80% power: " ..
      table.concat(parts, ", ") .. " (the two-sample t-test's power; docs/evaluation.md). "
  end
  return text .. "Run the sweep with repeats = N (each point N seeds), or train both with several seeds and compare them with " ..
    "moonrl eval --compare D1,D2,D3 B1,B2,B3."
end

function report.markdown(r)
  local info, keys = r.info, r.keys
  local metric = tostring(r.metric)
  local out = {}
  local function add(s) out[#out + 1] = s end
  add("# Sweep report: " .. r.dir)
  add("")
  add(string.format("%s over %s; metric %s (%s is better); %d trial(s) started: %d done, %d stopped early, %d failed%s.",
    tostring(info.method), #keys > 0 and table.concat(keys, ", ") or "nothing", metric, r.mode == "min" and "lower" or "higher",
    r.started, r.counts.done, r.counts.stopped, r.counts.failed,
    (tonumber(info.repeats) or 1) > 1 and string.format("; each point run with %d seeds (repeats)", info.repeats) or ""))
  add("")
  add("## The best against the default")
  add("")
  if not r.best then
    add("No trial finished with a value yet (status done): nothing to rank.")
  else
    local rows = { { "", "setting", metric .. " [95%]", "runs", "interval" } }
    rows[#rows + 1] = { "best", setting_text(r.best, keys), value_cell(r.best), tostring(r.best.n), r.best.how or "" }
    if r.default and r.default ~= r.best then
      local what = r.default_kind == "median" and "median setting" or "default"
      rows[#rows + 1] = { what, r.default_kind == "runs" and r.default.label or setting_text(r.default, keys),
        value_cell(r.default), tostring(r.default.n), r.default.how or "" }
    end
    add(util.md_table(rows, 2))
    add("")
    if r.default_kind == "trial" then
      add("The default: " .. r.default.label .. ", the setting with the base config's value of every swept key.")
    elseif r.default_kind == "runs" then
      add("The default: the runs given with --default, their " .. metric .. " read as the sweep reads a trial's.")
    else
      local base = {}
      for _, k in ipairs(keys) do base[#base + 1] = k .. "=" .. tostring(r.base_values[k] or "?") end
      add("No default: no trial ran the base config's values (" .. table.concat(base, " ") .. ") and no --default " ..
        "was given" .. (r.default and "; the best is set against the median setting instead (the middle of the " ..
        "settings ranked by " .. metric .. ": what a trial drawn from the space reaches; with TPE, an optimistic " ..
        "one). To compare with the default, train the base config with the trials' budget (several seeds) and give " ..
        "the runs: moonrl sweep report " .. r.dir .. " --default RUN1,RUN2,RUN3." or "."))
    end
    for _, n in ipairs(r.notes) do add("") add("Note: " .. n .. ".") end
    if r.default then
      add("")
      add("Verdict: " .. verdict(r))
    end
  end
  add("")
  add("## Which keys mattered")
  add("")
  local imp = r.importance
  if not imp then
    add("No importance: " .. tostring(r.importance_why) .. ".")
  else
    add(string.format("%s, fitted on %d finished trials (status done); a key's importance is the variance of its " ..
      "main effect over the model's variance (mean +- sd over the trees), its share those normalised to sum to 1.",
      imp.method, imp.n))
    add("")
    local rows = { { "key", "importance", "sd", "share", "scale" } }
    for _, k in ipairs(imp.keys) do
      rows[#rows + 1] = { k.key, string.format("%.3f", k.importance), string.format("%.3f", k.sd),
        string.format("%.1f%%", 100 * k.share), k.scale }
    end
    rows[#rows + 1] = { "interactions (the rest)", string.format("%.3f", imp.interactions), "", "", "" }
    add(util.md_table(rows))
    add("")
    local top = imp.keys[1]
    if top and top.sd >= top.importance then
      add(string.format("The trees disagree (%s's sd over them, %.3f, is as large as its importance): %d trials are " ..
        "too few to say which of %d keys mattered; more trials will.", top.key, top.sd, imp.n, #imp.keys))
      add("")
    end
    add("![importance](importance.svg)")
    if r.slices and #r.slices > 0 then
      add("")
      add("### " .. metric .. " against the " .. (#r.slices == 1 and "key" or "two keys") .. " that mattered most")
      add("")
      for _, s in ipairs(r.slices) do add("![" .. s.key .. "](" .. s.file .. ")") end
    end
  end
  add("")
  add("## Every trial")
  add("")
  if info.method == "pbt" then
    add("A PBT sweep's members change their keys as they train: the chart shows the keys each member started with.")
    add("")
  end
  add("An axis per swept key (its declared range; log scale for a log-uniform key) and one for " .. metric ..
    "; a line per trial, coloured by its value (yellow better), dashed when ASHA stopped it early.")
  add("")
  add("![parallel coordinates](parallel.svg)")
  add("")
  return table.concat(out, "\n")
end

-- ----------------------------------------------------------------- files

-- The keys in the chart's order: by importance when there is one, else sorted.
local function key_order(r_keys, imp)
  if not imp then return r_keys end
  local order, seen = {}, {}
  for _, k in ipairs(imp.keys) do order[#order + 1] = k.key seen[k.key] = true end
  for _, k in ipairs(r_keys) do if not seen[k] then order[#order + 1] = k end end
  return order
end

function report.charts(dir, list, info)
  local keys = {}
  for k in pairs(info.space or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  local imp, why = importance.of_sweep(list, info)
  return { importance = imp or { error = why }, parallel = plot.parallel_chart(dir, list, info, key_order(keys, imp)),
    bars = imp and plot.importance_chart(dir, imp) or nil }
end

function report.write(dir, opts)
  local r, err = report.build(dir, opts)
  if not r then return nil, err end
  local out = dir .. "/report"
  local ok, merr = util.mkdir_p(out)
  if not ok then return nil, merr end
  local files = {}
  local function write(name, text)
    local path = out .. "/" .. name
    local wok, werr = util.write_file(path, text)
    if not wok then error(werr, 0) end
    files[#files + 1] = path
  end
  local wok, werr = pcall(function()
    if r.importance then
      write("importance.svg", plot.importance_chart(dir, r.importance))
      r.slices = {}
      for i = 1, math.min(2, #r.importance.keys) do
        local key = r.importance.keys[i].key
        local file = "slice_" .. plot.safe(key) .. ".svg"
        write(file, plot.param_chart(dir, r.list, r.info, key))
        r.slices[#r.slices + 1] = { key = key, file = file }
      end
    end
    write("parallel.svg", plot.parallel_chart(dir, r.list, r.info, key_order(r.keys, r.importance)))
    local text = report.markdown(r)
    write("report.md", text)
    r.text = text
  end)
  if not wok then return nil, tostring(werr) end
  return files, r.text, r
end

return report

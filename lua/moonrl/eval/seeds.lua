-- moonrl.eval.seeds - verdicts that count training seeds.
--
-- An evaluation's interval (moonrl.eval.table) covers the noise of
-- evaluating one set of weights: episodes, agents, runs of the evaluation.
-- Two trainings of one configuration that differ only in their seed differ
-- by more than that, so "B is measurably better than A" between two single
-- runs speaks of those two checkpoints, not of their configurations. Here
-- the unit is the training run: each arm is several runs (seeds), each
-- run's evaluation gives one value per metric (its point estimate), and
-- the arms are compared with Welch's t-test over those values.
--
-- Seeds needed: the smallest n per arm at which the two-sided two-sample
-- t-test at level 5% has 80% power against a standardized difference
-- d = D / s (D the difference to detect, s the seed-to-seed standard
-- deviation). The power at n is that of the noncentral t with df = 2n - 2
-- and noncentrality d sqrt(n / 2), approximated by Student's t shifted by the
-- noncentrality (both tails):
--   power(n, d) = P(T_df > t_c - d sqrt(n/2)) + P(T_df < -t_c - d sqrt(n/2)),
--   t_c = t(0.975, df)
-- (within 0.01 of the exact power at n = 17, d = 0.5 .. 1; spec/seeds_spec.lua
-- checks the seeds it gives against the exact noncentral t, mpmath in
-- spec/seeds_reference.py, and Cohen's 1988 tables: 64 per arm for d = 0.5,
-- 26 for d = 0.8, 17 for d = 1).
--
--   seeds.power(n, d) -> the power above
--   seeds.needed(d) -> n per arm (>= 2) | nil when d is 0 or not a number; math.huge past 100,000
--   seeds.test(a, b, higher) -> t      a, b: the values of the runs of each arm;
--       higher: true when more is better, false when less is, nil for no direction.
--       t = { na, nb, a = {mean, lo, hi}, b = {...} (Student-t intervals over the runs),
--             diff, lo, hi, df, p (stats.welch; nil fields with fewer than 2 runs a side),
--             sd (the seed-to-seed sd, sqrt((va + vb) / 2)), needed (seeds.needed(|diff| / sd)),
--             better, worse (p < 0.05 in that direction) }
--   seeds.compare(A, B [, labels]) -> c    A, B: lists of evaluation summaries (one per
--       training run, moonrl.eval.table's or episodic's), over A[1].metrics:
--       c.rows[i] = seeds.test of metric i plus {metric, key}, c.verdict, c.better, c.worse
--   seeds.compare_text(A, B [, labels]) -> text, c
--   seeds.single_note(c) -> text        under a comparison of single runs (evaltable.compare's c):
--       that seed-to-seed spread is not in its intervals, and the seeds that would be needed

local stats = require("moonrl.eval.stats")

local seeds = {}

local sqrt, abs = math.sqrt, math.abs

function seeds.power(n, d)
  local df = 2 * n - 2
  local tc = stats.t_quantile(0.975, df)
  local ncp = abs(d) * sqrt(n / 2)
  return (1 - stats.t_cdf(tc - ncp, df)) + stats.t_cdf(-tc - ncp, df)
end

function seeds.needed(d)
  if type(d) ~= "number" or d ~= d or d == 0 then return nil end
  d = abs(d)
  if d == math.huge then return 2 end
  -- the normal approximation 2 (z_.975 + z_.8)^2 / d^2 as a start, then up (or down) to the first n that has it
  local n = math.max(2, math.floor(2 * (1.959963984540054 + 0.8416212335729143) ^ 2 / (d * d)))
  if n > 100000 then return math.huge end
  while n > 2 and seeds.power(n - 1, d) >= 0.8 do n = n - 1 end
  while seeds.power(n, d) < 0.8 do n = n + 1 end
  return n
end

local function finite_values(x)
  local out = {}
  for _, v in ipairs(x) do if type(v) == "number" and v == v and abs(v) < math.huge then out[#out + 1] = v end end
  return out
end

function seeds.test(a, b, higher)
  a, b = finite_values(a), finite_values(b)
  local t = { na = #a, nb = #b, a = { stats.mean_interval(a) }, b = { stats.mean_interval(b) } }
  local diff, lo, hi, df, p = stats.welch(a, b)
  if not diff then return t end
  t.diff, t.lo, t.hi, t.df, t.p = diff, lo, hi, df, p
  t.sd = sqrt((stats.var(a) + stats.var(b)) / 2)
  if t.sd > 0 then t.needed = seeds.needed(diff / t.sd) end
  if p < 0.05 and higher ~= nil then
    t.better = (higher and diff > 0) or (not higher and diff < 0)
    t.worse = not t.better
  end
  return t
end

-- ------------------------------------------------------------ summaries

local function label_of(list)
  local names = {}
  for i, s in ipairs(list) do names[i] = tostring(s.label) end
  return "{" .. table.concat(names, ", ") .. "}"
end

-- a metric's difference as the tables write it: percentage points for a fraction
local function diff_fmt(m)
  if m.pct then return function(v) return v == v and string.format("%+.1f", 100 * v) or "n/a" end, " points" end
  local f = (m.fmt or "%.4g"):gsub("%%%+?", "%%+")
  return function(v) return v == v and string.format(f, v) or "n/a" end, ""
end

local function value_fmt(m)
  if m.pct then return function(v) return v == v and string.format("%.1f%%", 100 * v) or "n/a" end end
  return function(v) return v == v and string.format(m.fmt or "%.4g", v) or "n/a" end
end

local function p_text(p)
  if p == nil or p ~= p then return "n/a" end
  if p < 0.001 then return "< 0.001" end
  return string.format("%.3f", p)
end

function seeds.compare(A, B, labels)
  labels = labels or {}
  local la, lb = labels[1] or label_of(A), labels[2] or label_of(B)
  local rows, better, worse = {}, {}, {}
  for _, m in ipairs(A[1].metrics) do
    local va, vb = {}, {}
    for i, s in ipairs(A) do va[i] = s.point[m.key] end
    for i, s in ipairs(B) do vb[i] = s.point[m.key] end
    local r = seeds.test(va, vb, m.higher)
    r.metric, r.key = m, m.key
    rows[#rows + 1] = r
    if r.better then better[#better + 1] = r end
    if r.worse then worse[#worse + 1] = r end
  end
  local by_p = function(x, y) return x.p < y.p end
  table.sort(better, by_p)
  table.sort(worse, by_p)
  local function phrase(list)
    local out = {}
    for i = 1, math.min(3, #list) do
      local r = list[i]
      local f, unit = diff_fmt(r.metric)
      out[i] = string.format("%s %s%s [%s, %s], p = %s", r.metric.label, f(r.diff), unit, f(r.lo), f(r.hi), p_text(r.p))
    end
    return table.concat(out, "; ")
  end
  local n = string.format("Welch's t over %d and %d training runs", #A, #B)
  local verdict
  if #A < 2 or #B < 2 then
    verdict = string.format("no verdict over training seeds: %s has %d run(s) and %s %d; Welch's test needs at least 2 a side",
      la, #A, lb, #B)
  elseif #better > 0 and #worse == 0 then
    verdict = string.format("%s is measurably better than %s over training seeds (%s): %s", lb, la, n, phrase(better))
  elseif #worse > 0 and #better == 0 then
    verdict = string.format("%s is measurably worse than %s over training seeds (%s): %s", lb, la, n, phrase(worse))
  elseif #worse > 0 then
    verdict = string.format("%s is measurably worse than %s in some metrics and better in others over training seeds " ..
      "(%s): worse %s; better %s", lb, la, n, phrase(worse), phrase(better))
  else
    -- what it would take: the metric with a direction nearest to a verdict
    local near
    for _, r in ipairs(rows) do
      if r.metric.higher ~= nil and r.needed and (not near or r.needed < near.needed) then near = r end
    end
    verdict = string.format("no difference the training seeds can tell between %s and %s (%s, every interval holds 0)",
      la, lb, n)
    if near then
      local f, unit = diff_fmt(near.metric)
      verdict = verdict .. string.format("; %s differs by %s%s with a seed-to-seed sd of %s%s: telling that " ..
        "difference at the 5%% level with 80%% power needs about %s runs a side",
        near.metric.label, f(near.diff), unit, (f(near.sd):gsub("^%+", "")), unit,
        near.needed == math.huge and "more than 100,000" or tostring(near.needed))
    end
  end
  return { rows = rows, better = better, worse = worse, verdict = verdict, label_a = la, label_b = lb }
end

function seeds.compare_text(A, B, labels)
  local c = seeds.compare(A, B, labels)
  local md = require("moonrl.util").md_table
  local rows = { { "metric", c.label_a .. " (mean [95%])", c.label_b .. " (mean [95%])", "difference [95% CI]", "p",
    "runs a side needed" } }
  for _, r in ipairs(c.rows) do
    local v, m = value_fmt(r.metric), r.metric
    local f, unit = diff_fmt(m)
    local function arm(x, n)
      if x[1] ~= x[1] then return "n/a" end
      if n < 2 then return v(x[1]) .. " (1 run)" end
      return string.format("%s [%s, %s]", v(x[1]), v(x[2]), v(x[3]))
    end
    rows[#rows + 1] = { m.label, arm(r.a, r.na), arm(r.b, r.nb),
      r.diff and string.format("%s%s [%s, %s]", f(r.diff), unit ~= "" and " pts" or "", f(r.lo), f(r.hi)) or "n/a",
      p_text(r.p), (r.needed == math.huge and "> 100,000") or (r.needed and tostring(r.needed)) or "-" }
  end
  return md(rows) .. "\n\n" .. c.verdict .. "\n\n" ..
    "over training seeds: each run's evaluation gives one value per metric (its column above, with the\n" ..
    "evaluation's own interval); an arm's mean [95% Student-t interval over its runs]; the difference\n" ..
    c.label_b .. " - " .. c.label_a .. " with Welch's 95% interval and two-sided p (unequal variances,\n" ..
    "Welch-Satterthwaite df). Runs a side needed: for 80% power at the 5% level against the difference\n" ..
    "seen, with the seed-to-seed sd seen (docs/evaluation.md, \"Verdicts over training seeds\").", c
end

-- ------------------------------------------------------------ single runs

function seeds.single_note(c)
  local lines = {
    "These intervals hold the evaluation's noise only: each side is one training run, and seed-to-seed",
    "spread is not in them (two runs of one configuration that differ only in their seed can differ by",
    "more). For a verdict on the configurations, train several seeds a side and give them as",
    "moonrl eval --compare A1,A2,A3 B1,B2,B3 (Welch's test over the runs).",
  }
  local r = (c and (c.better[1] or c.worse[1])) or nil
  if r then
    local f, unit = diff_fmt(r.metric)
    local D = abs(r.diff)
    local parts = {}
    for _, k in ipairs({ 0.5, 1, 2 }) do
      parts[#parts + 1] = string.format("%s if the seeds' sd is %s%s", tostring(seeds.needed(1 / k)),
        (f(k * D):gsub("^%+", "")), unit)
    end
    lines[#lines + 1] = string.format("Runs a side needed to tell %s's difference of %s%s at the 5%% level with 80%% " ..
      "power:", r.metric.label, f(r.diff), unit)
    lines[#lines + 1] = "  " .. table.concat(parts, ", ") .. " (the two-sample t-test's power; docs/evaluation.md)."
  end
  return table.concat(lines, "\n")
end

return seeds

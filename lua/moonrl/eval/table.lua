-- moonrl.eval.table - the evaluation as a research instrument: from the
-- per-death and censored records of an evaluation (moonrl.evaluate with
-- records = true) to the table with its definitions and 95% intervals, and
-- to the comparison of two evaluations (docs/evaluation.md).
--
-- A summary is worked out from the records alone, so a records file read
-- back gives the same numbers. Intervals are percentile bootstraps over
-- agents (an agent = one environment instance of one run; with unit = "runs",
-- over runs), with a fixed seed; the Kaplan-Meier median's is
-- Brookmeyer-Crowley with the log-log Greenwood band (moonrl.eval.stats).
--
-- Public functions
--   evaltable.METRICS                              {key, label, ...} in table order
--   evaltable.summarise(res, opts) -> summary
--       res: {records = {n, rec}, eval = {num_envs, steps, runs, seed}, mode, label?}
--       opts: boot = resamples (1000), boot_seed (1), unit = "agents" | "runs"
--   evaltable.table(summaries) -> string           what was evaluated (checkpoint,
--                                                  update, sizes), markdown table, definitions
--   evaltable.header(summaries) -> string          that first part alone
--   evaltable.update_of(checkpoint_path) -> n | nil   N of .../update_NNNNNNN.mrck
--   evaltable.compare(a, b) -> {rows, verdict}     b against a, over a.metrics (either protocol's);
--                                                  a metric without `higher` has no verdict
--   evaltable.compare_text(a, b) -> string
--   evaltable.compare_rows(a, b) -> comparison, rows   (the table's rows, for either protocol)
--   evaltable.show(metric, v[, bare]) -> string        a value as the tables write it
--   evaltable.definitions(summary) -> string

local stats = require("moonrl.eval.stats")
local util = require("moonrl.util")

local evaltable = {}
local NAN = stats.NAN

-- higher: true when more is better (the direction "worse" reads in).
local METRICS = {
  { key = "energy_per_1k", label = "energy/1k", fmt = "%+.1f", higher = true },
  { key = "eff_overall", label = "efficiency, overall", pct = true, higher = true },
  { key = "eff_per_death", label = "efficiency, per-death mean", pct = true, higher = true },
  { key = "eff_per_env", label = "efficiency, per-env mean", pct = true, higher = true },
  { key = "survival_mean", label = "survival, mean over deaths", fmt = "%.1f", higher = true, steps = true },
  { key = "survival_all", label = "survival, mean of all episodes", fmt = "%.1f", higher = true, steps = true },
  { key = "deaths_per_1k", label = "deaths/1k", fmt = "%.2f", higher = false },
  { key = "food_per_1k", label = "food/1k", fmt = "%.1f", higher = true },
  { key = "poison_per_1k", label = "poison/1k", fmt = "%.1f", higher = false },
}
evaltable.METRICS = METRICS

local commas = require("moonrl.number").thousands

-- A metric's value as the table shows it (efficiencies in percent).
-- A metric's value as the tables write it ("n/a" where undefined).
function evaltable.show(m, v, bare)
  if v == nil or v ~= v then return "n/a" end
  if m.pct then return string.format(bare and "%.1f" or "%.1f%%", 100 * v) end
  if m.steps and math.abs(v) >= 1000 then return commas(v) end
  return string.format(m.fmt, v)
end
local show = evaltable.show

-- The metrics of sums over units: F food, P poison, S steps, D deaths,
-- DS steps of the deaths, DE per-death efficiencies, E episodes, EFS/EFN the
-- per-agent efficiencies and the agents that ate.
local function metrics_of(F, P, S, D, DS, DE, E, EFS, EFN)
  local k = S > 0 and 1000 / S or NAN
  return {
    (F - 2 * P - 0.01 * S) * k,
    F + P > 0 and F / (F + P) or NAN,
    D > 0 and DE / D or NAN,
    EFN > 0 and EFS / EFN or NAN,
    D > 0 and DS / D or NAN,
    E > 0 and S / E or NAN,
    D * k, F * k, P * k,
  }
end

-- Per agent (run, env) totals and the per-record arrays of a result's records.
local function collect(res)
  local R, N = res.records, res.eval.num_envs
  local a = { F = {}, P = {}, S = {}, D = {}, DS = {}, DE = {}, E = {}, run = {} }
  local death_steps, death_eff, all_steps, all_died = {}, {}, {}, {}
  local nagents = res.eval.runs * N
  for u = 1, nagents do
    a.F[u], a.P[u], a.S[u], a.D[u], a.DS[u], a.DE[u], a.E[u] = 0, 0, 0, 0, 0, 0, 0
    a.run[u] = math.floor((u - 1) / N) + 1
  end
  for i = 0, R.n - 1 do
    local x = R.rec[i]
    local u = x.run * N + x.env + 1
    local f, p, s = x.food, x.poison, x.steps
    a.F[u], a.P[u], a.S[u], a.E[u] = a.F[u] + f, a.P[u] + p, a.S[u] + s, a.E[u] + 1
    all_steps[#all_steps + 1], all_died[#all_died + 1] = s, x.died
    if x.died == 1 then
      local e = f + p > 0 and f / (f + p) or 1.0   -- nothing eaten counts 1.0 (the original's)
      a.D[u], a.DS[u], a.DE[u] = a.D[u] + 1, a.DS[u] + s, a.DE[u] + e
      death_steps[#death_steps + 1], death_eff[#death_eff + 1] = s, e
    end
  end
  return a, nagents, { death_steps = death_steps, death_eff = death_eff, all_steps = all_steps, all_died = all_died }
end

function evaltable.summarise(res, opts)
  opts = opts or {}
  local B, seed, unit = opts.boot or 1000, opts.boot_seed or 1, opts.unit or "agents"
  local a, nagents, per = collect(res)
  -- units: agents, or runs (the agents of a run added up)
  local U = { F = {}, P = {}, S = {}, D = {}, DS = {}, DE = {}, E = {}, EFS = {}, EFN = {} }
  local agent_eff, rate = {}, { energy_per_1k = {}, deaths_per_1k = {}, food_per_1k = {}, poison_per_1k = {} }
  for u = 1, nagents do
    local t = unit == "runs" and a.run[u] or u
    for _, c in ipairs({ "F", "P", "S", "D", "DS", "DE", "E" }) do U[c][t] = (U[c][t] or 0) + a[c][u] end
    local ate = a.F[u] + a.P[u]
    U.EFS[t] = (U.EFS[t] or 0) + (ate > 0 and a.F[u] / ate or 0)
    U.EFN[t] = (U.EFN[t] or 0) + (ate > 0 and 1 or 0)
    if ate > 0 then agent_eff[#agent_eff + 1] = a.F[u] / ate end
    local k = a.S[u] > 0 and 1000 / a.S[u] or 0
    rate.energy_per_1k[u] = (a.F[u] - 2 * a.P[u] - 0.01 * a.S[u]) * k
    rate.deaths_per_1k[u], rate.food_per_1k[u], rate.poison_per_1k[u] = a.D[u] * k, a.F[u] * k, a.P[u] * k
  end
  local n = #U.F
  local function sums(idx)
    local F, P, S, D, DS, DE, E, EFS, EFN = 0, 0, 0, 0, 0, 0, 0, 0, 0
    local uF, uP, uS, uD, uDS, uDE, uE, uEFS, uEFN = U.F, U.P, U.S, U.D, U.DS, U.DE, U.E, U.EFS, U.EFN
    for j = 1, n do
      local t = idx and idx[j] or j
      F, P, S, D = F + uF[t], P + uP[t], S + uS[t], D + uD[t]
      DS, DE, E, EFS, EFN = DS + uDS[t], DE + uDE[t], E + uE[t], EFS + uEFS[t], EFN + uEFN[t]
    end
    return metrics_of(F, P, S, D, DS, DE, E, EFS, EFN), { F = F, P = P, S = S, D = D, E = E }
  end
  local point, totals = sums(nil)
  local reps = B > 0 and n > 0 and stats.bootstrap(n, B, seed, function(idx) return (sums(idx)) end) or {}
  local km = stats.km(per.all_steps, per.all_died)
  local med, mlo, mhi = stats.km_median(km)
  local s = {
    label = res.label or res.mode, mode = res.mode, checkpoint = res.checkpoint, eval = res.eval,
    environment = res.environment, protocol = "survival", metrics = METRICS,
    boot = B, boot_seed = seed, unit = unit, units = n, agents = nagents,
    totals = totals, deaths = totals.D, censored = totals.E - totals.D,
    point = {}, ci = {}, reps = {}, values = {},
    km = km, km_median = { med, mlo, mhi },
    agent_eff = agent_eff, death_eff = per.death_eff,
  }
  for i, m in ipairs(METRICS) do
    s.point[m.key] = point[i]
    s.reps[m.key] = reps[i] or {}
    s.ci[m.key] = { stats.interval(s.reps[m.key]) }
  end
  -- the values Cohen's d compares: per agent, per death or per episode
  s.values = {
    energy_per_1k = rate.energy_per_1k, deaths_per_1k = rate.deaths_per_1k,
    food_per_1k = rate.food_per_1k, poison_per_1k = rate.poison_per_1k,
    eff_overall = agent_eff, eff_per_env = agent_eff, eff_per_death = per.death_eff,
    survival_mean = per.death_steps, survival_all = per.all_steps,
  }
  return s
end

-- ------------------------------------------------------------------ tables

local md_table = util.md_table

local function km_cell(s)
  local m, lo, hi = s.km_median[1], s.km_median[2], s.km_median[3]
  local T = s.km.max_time
  local function f(v) return v and (v >= 1000 and commas(v) or string.format("%g", v)) or ("> " .. commas(T)) end
  if not m then return "not reached (> " .. commas(T) .. ")" end
  return string.format("%s [%s, %s]", f(m), f(lo), f(hi))
end

function evaltable.definitions(s)
  local ci = s and s.boot and s.boot > 0 and string.format(
    "percentile bootstrap over %s (%d resamples, seed %d)", s.unit or "agents", s.boot, s.boot_seed) or "none"
  return table.concat({
    "definitions (docs/evaluation.md):",
    "  energy/1k                      (food - 2 poison - 0.01 steps) per 1,000 agent-steps",
    "  efficiency, overall            total food / (total food + total poison) over the whole evaluation",
    "  efficiency, per-death mean     mean over deaths of food / (food + poison) in that life; a death with",
    "                                 nothing eaten counts 1.0 (the original's)",
    "  efficiency, per-env mean       food / (food + poison) pooled per environment instance, averaged over",
    "                                 the instances that ate anything (moonrl's table before records)",
    "  survival, mean over deaths     mean steps lived by the agents that died (survivors left out)",
    "  survival, KM median            Kaplan-Meier median survival, agents alive at the end right-censored;",
    "                                 95% interval Brookmeyer-Crowley with the log-log Greenwood band;",
    "                                 \"> T\": not reached within the T steps evaluated",
    "  survival, mean of all episodes steps / (deaths + survivors): the original's, biased by censoring",
    "  deaths/1k, food/1k, poison/1k  per 1,000 agent-steps",
    "  [a, b]                         95% confidence interval: " .. ci,
  }, "\n")
end

-- The update a checkpoint was written at, from its name (update_NNNNNNN.mrck,
-- as runs name them), or nil.
function evaltable.update_of(path)
  local n = type(path) == "string" and path:match("update_(%d+)%.mrck$")
  return n and tonumber(n) or nil
end

-- What the table evaluated: the checkpoint (and its update) of every column
-- and the evaluation's size and seed; one line when every column shares them.
function evaltable.header(summaries)
  local function what(s)
    local e, u = s.eval or {}, evaltable.update_of(s.checkpoint)
    return string.format("%s%s; %d envs x %d steps x %d run%s%s, eval seed %s%s",
      tostring(s.checkpoint or "?"), u and string.format(" (update %d)", u) or "",
      e.num_envs or 0, e.steps or 0, e.runs or 0, e.runs == 1 and "" or "s",
      e.episodes and string.format(" (or %d episodes a run)", e.episodes) or "", tostring(e.seed),
      e.greedy and ", greedy actions" or "")
  end
  local lines, first = {}, summaries[1] and what(summaries[1])
  local same = true
  for _, s in ipairs(summaries) do same = same and what(s) == first end
  if same then
    lines[1] = "evaluated: " .. (first or "nothing")
  else
    for _, s in ipairs(summaries) do lines[#lines + 1] = "evaluated: " .. s.label .. ": " .. what(s) end
  end
  -- the survival protocol is foraging's (docs/evaluation.md); another environment's items take food's and
  -- poison's rows
  local env = summaries[1] and summaries[1].environment
  if env and env ~= "foraging" and summaries[1].protocol ~= "episodic" then
    local codes = require("moonrl.engine").env_codes(env)
    lines[#lines + 1] = string.format("environment: %s; the protocol is foraging's: food below is the %s, poison " ..
      "the %s (cell codes 1 and 2), energy weighs them as foraging does", env, codes[2], codes[3])
  end
  return table.concat(lines, "\n")
end

-- The table: what was evaluated, one column per summary, one row per
-- metric, then the definitions.
function evaltable.table(summaries)
  local head = { "metric" }
  for _, s in ipairs(summaries) do head[#head + 1] = s.label end
  local rows = { head }
  local function row(label, cell)
    local r = { label }
    for _, s in ipairs(summaries) do r[#r + 1] = cell(s) end
    rows[#rows + 1] = r
  end
  for _, m in ipairs(METRICS) do
    row(m.label, function(s)
      local ci = s.ci[m.key]
      if #s.reps[m.key] == 0 or ci[1] ~= ci[1] then return show(m, s.point[m.key]) end
      return string.format("%s [%s, %s]", show(m, s.point[m.key]), show(m, ci[1], true), show(m, ci[2], true))
    end)
    if m.key == "survival_mean" then row("survival, KM median", km_cell) end
  end
  row("deaths / survivors (censored)", function(s) return string.format("%d / %d", s.deaths, s.censored) end)
  return evaltable.header(summaries) .. "\n\n" .. md_table(rows) .. "\n\n" .. evaltable.definitions(summaries[1])
end

-- ---------------------------------------------------------------- compare

-- b against a, per metric: the difference b - a with its percentile interval
-- (the b-th resamples of a and b are independent draws, so their
-- differences are resamples of the difference), Cohen's d of b's unit values
-- against a's, and whether the interval leaves out 0 on the worse or better side.
function evaltable.compare(a, b)
  local rows, worse, better = {}, {}, {}
  for _, m in ipairs(a.metrics or METRICS) do
    local ra, rb = a.reps[m.key], b.reps[m.key]
    local diffs = {}
    for i = 1, math.min(#ra, #rb) do diffs[i] = rb[i] - ra[i] end
    local lo, hi = stats.interval(diffs)
    local r = { metric = m, key = m.key, a = a.point[m.key], b = b.point[m.key],
                diff = b.point[m.key] - a.point[m.key], lo = lo, hi = hi,
                d = stats.cohen_d(a.values[m.key], b.values[m.key]) }
    local down, up = hi < 0, lo > 0
    if m.higher ~= nil then   -- the direction that is better, where there is one
      r.worse = (m.higher and down) or (not m.higher and up)
      r.better = (m.higher and up) or (not m.higher and down)
    end
    rows[#rows + 1] = r
    if r.worse then worse[#worse + 1] = r end
    if r.better then better[#better + 1] = r end
  end
  local function by_d(x, y)
    local dx, dy = x.d == x.d and math.abs(x.d) or -1, y.d == y.d and math.abs(y.d) or -1
    return dx > dy
  end
  table.sort(worse, by_d)
  table.sort(better, by_d)
  local function phrase(list)
    local out = {}
    for i = 1, math.min(3, #list) do
      local r = list[i]
      local m = r.metric
      local unit = m.pct and " points" or ""
      local f = m.pct and function(v) return string.format("%+.1f", 100 * v) end
        or function(v) return string.format((m.fmt:gsub("%%%+?", "%%+")), v) end
      out[i] = string.format("%s %s%s [%s, %s], d = %s", m.label, f(r.diff), unit, f(r.lo), f(r.hi),
        r.d == r.d and string.format("%.1f", r.d) or "n/a")
    end
    return table.concat(out, "; ")
  end
  local verdict
  if #worse > 0 and #better == 0 then
    verdict = string.format("%s is measurably worse than %s: %s", b.label, a.label, phrase(worse))
  elseif #better > 0 and #worse == 0 then
    verdict = string.format("%s is measurably better than %s: %s", b.label, a.label, phrase(better))
  elseif #worse > 0 then
    verdict = string.format("%s is measurably worse than %s in some metrics and better in others: worse %s; better %s",
      b.label, a.label, phrase(worse), phrase(better))
  else
    verdict = string.format("no measurable difference between %s and %s at this size: every interval holds 0",
      b.label, a.label)
  end
  return { rows = rows, worse = worse, better = better, verdict = verdict }
end

-- The comparison of a and b (evaltable.compare) and its table's rows: a
-- header, then per metric both values, the difference with its interval and
-- Cohen's d. Both protocols' comparison tables start from these.
function evaltable.compare_rows(a, b)
  local c = evaltable.compare(a, b)
  local rows = { { "metric", a.label, b.label, "difference [95% CI]", "Cohen's d" } }
  for _, r in ipairs(c.rows) do
    local m = r.metric
    local f = m.pct and function(v) return v == v and string.format("%+.1f", 100 * v) or "n/a" end
      or function(v) return v == v and string.format((m.fmt:gsub("%%%+?", "%%+")), v) or "n/a" end
    rows[#rows + 1] = { m.label, show(m, r.a), show(m, r.b),
      string.format("%s%s [%s, %s]", f(r.diff), m.pct and " pts" or "", f(r.lo), f(r.hi)),
      r.d == r.d and string.format("%+.2f", r.d) or "n/a" }
  end
  return c, rows
end

function evaltable.compare_text(a, b)
  local c, rows = evaltable.compare_rows(a, b)
  rows[#rows + 1] = { "survival, KM median", km_cell(a), km_cell(b), "", "" }
  return md_table(rows) .. "\n\n" .. c.verdict .. "\n\n" ..
    "difference: " .. b.label .. " - " .. a.label .. ", 95% interval of the bootstrap differences; Cohen's d:\n" ..
    "the difference of the means over the pooled sd, of per-agent values (rates, efficiency overall and\n" ..
    "per-env), per-death values (per-death efficiency, survival over deaths) or per-episode steps.", c
end

return evaltable

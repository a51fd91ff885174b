-- moonrl.eval.episodic - the episodic protocol every environment has
-- (docs/evaluation.md, "The episodic protocol"): from the per-episode
-- records of mr_trainer_evaluate_episodes to the table of return, episode
-- length, success (where the environment declares it) and each declared
-- counter, each a mean over the episodes that ended with its 95% interval;
-- the comparison of two evaluations; the records file and the figure.
--
-- The intervals are moonrl.eval.stats' percentile bootstrap over agents (an
-- agent = one environment instance of one run; unit = "runs": whole runs),
-- as the survival table's: each resample adds up its units' episodes and
-- sums, so a mean is a ratio of sums and an agent's episodes stay together.
-- Episodes still running when a run stopped are counted, not averaged: a
-- mean over them would favour the short ones.
--
-- Public functions (the protocol's part of moonrl.eval.protocols)
--   episodic.KEYS                          the metric keys every environment has
--   episodic.metrics(counters, has_success) -> {{key, label, ...}, ...} in table order
--   episodic.summarise(res, opts) -> summary
--       res: {records = {n, rec}, eval = {num_envs, steps, runs, seed, episodes?, greedy?},
--             counters = {name, ...}, success = words | nil, mode, environment, label?}
--       opts: boot = resamples (1000), boot_seed (1), unit = "agents" | "runs"
--   episodic.table(summaries) -> string      what was evaluated, the table, the definitions
--   episodic.definitions(summary) -> string
--   episodic.compare_text(a, b) -> string, comparison   b against a (moonrl.eval.table.compare)
--   episodic.FIELDS                           the records file's first columns
--   episodic.write_records(path, results, format)       format "csv" | "jsonl"
--   episodic.read_records(path, format, counters) -> {[source] = records} | nil, err
--   episodic.result_json(summary) -> table    its numbers in eval.json
--   episodic.figure(summaries) -> svg text    distributions of return and episode length

local stats = require("moonrl.eval.stats")
local evaltable = require("moonrl.eval.table")
local util = require("moonrl.util")

local episodic = {}
local NAN = stats.NAN

episodic.KEYS = { "return_mean", "length_mean", "success_rate" }

-- higher: true when more is better (a comparison's verdict reads only those);
-- the length and the counters have no direction every environment shares.
function episodic.metrics(counters, has_success)
  local m = {
    { key = "return_mean", label = "return", fmt = "%.2f", higher = true },
    { key = "length_mean", label = "episode length", fmt = "%.1f" },
  }
  if has_success then m[#m + 1] = { key = "success_rate", label = "success", pct = true, higher = true } end
  for k, name in ipairs(counters or {}) do
    m[#m + 1] = { key = name .. "_per_episode", label = name .. " per episode", fmt = "%.2f", counter = k }
  end
  return m
end

-- A metric's value of one record.
local function value_of(m, x)
  if m.key == "return_mean" then return tonumber(x.ret) end
  if m.key == "length_mean" then return tonumber(x.length) end
  if m.key == "success_rate" then return x.success == 1 and 1 or 0 end
  return tonumber(x.count[m.counter - 1])
end

function episodic.summarise(res, opts)
  opts = opts or {}
  local B, seed, unit = opts.boot or 1000, opts.boot_seed or 1, opts.unit or "agents"
  local R, N, runs = res.records, res.eval.num_envs, res.eval.runs
  local metrics = episodic.metrics(res.counters, res.success ~= nil)
  local nm = #metrics
  local n = unit == "runs" and runs or runs * N
  local E, V, values = {}, {}, {}
  for j = 1, nm do V[j], values[j] = {}, {} end
  for u = 1, n do
    E[u] = 0
    for j = 1, nm do V[j][u] = 0 end
  end
  local running = 0
  for i = 0, R.n - 1 do
    local x = R.rec[i]
    if x.ended == 0 then
      running = running + 1
    else
      local u = unit == "runs" and x.run + 1 or x.run * N + x.env + 1
      if not E[u] or x.env < 0 or x.env >= N then
        error(string.format("a record of run %s, environment %s is outside the evaluation's %d runs x %d " ..
          "environments", tostring(x.run), tostring(x.env), runs, N), 0)
      end
      E[u] = E[u] + 1
      for j = 1, nm do
        local v = value_of(metrics[j], x)
        V[j][u] = V[j][u] + v
        values[j][#values[j] + 1] = v
      end
    end
  end
  -- the means of the units idx (all of them when nil): sums of values over sums of episodes
  local function means(idx)
    local e, s = 0, {}
    for j = 1, nm do s[j] = 0 end
    for t = 1, n do
      local u = idx and idx[t] or t
      e = e + E[u]
      for j = 1, nm do s[j] = s[j] + V[j][u] end
    end
    for j = 1, nm do s[j] = e > 0 and s[j] / e or NAN end
    return s, e
  end
  local point, ended = means(nil)
  local reps = B > 0 and n > 0 and stats.bootstrap(n, B, seed, function(idx) return (means(idx)) end) or {}
  local s = {
    protocol = "episodic", label = res.label or res.mode, mode = res.mode, checkpoint = res.checkpoint,
    eval = res.eval, environment = res.environment, counters = res.counters or {}, success = res.success,
    metrics = metrics, boot = B, boot_seed = seed, unit = unit, units = n, episodes = ended, running = running,
    point = {}, ci = {}, reps = {}, values = {},
  }
  for j, m in ipairs(metrics) do
    s.point[m.key] = point[j]
    s.reps[m.key] = reps[j] or {}
    s.ci[m.key] = { stats.interval(s.reps[m.key]) }
    s.values[m.key] = values[j]   -- per episode: what Cohen's d compares
  end
  return s
end

-- ------------------------------------------------------------------ table

local show = evaltable.show

local function cell(m, s)
  local ci = s.ci[m.key]
  if not ci or #s.reps[m.key] == 0 or ci[1] ~= ci[1] then return show(m, s.point[m.key]) end
  return string.format("%s [%s, %s]", show(m, s.point[m.key]), show(m, ci[1], true), show(m, ci[2], true))
end

function episodic.definitions(s)
  local ci = s and s.boot and s.boot > 0 and string.format(
    "percentile bootstrap over %s (%d resamples, seed %d)", s.unit or "agents", s.boot, s.boot_seed) or "none"
  local lines = {
    "definitions (docs/evaluation.md):",
    "  return               the sum of the environment's rewards over an episode (unclipped), mean over",
    "                       the episodes that ended",
    "  episode length       steps of an episode, mean over the episodes that ended",
  }
  if s.success then
    lines[#lines + 1] = "  success              the share of ended episodes that succeeded:"
    lines[#lines + 1] = "                       " .. s.success
  end
  for _, name in ipairs(s.counters or {}) do
    lines[#lines + 1] = string.format("  %-20s the environment's counter %s in an episode, mean over the ended ones",
      name .. " per episode", name)
  end
  lines[#lines + 1] = "  episodes             ended (terminated, or truncated at the environment's step limit) /"
  lines[#lines + 1] = "                       still running when the run stopped (counted, left out of the means)"
  lines[#lines + 1] = "  [a, b]               95% confidence interval: " .. ci
  return table.concat(lines, "\n")
end

function episodic.table(summaries)
  local s1 = summaries[1]
  local head = { "metric" }
  for _, s in ipairs(summaries) do head[#head + 1] = s.label end
  local rows = { head }
  local function row(label, f)
    local r = { label }
    for _, s in ipairs(summaries) do r[#r + 1] = f(s) end
    rows[#rows + 1] = r
  end
  for _, m in ipairs(s1.metrics) do row(m.label, function(s) return cell(m, s) end) end
  row("episodes ended / running", function(s) return string.format("%d / %d", s.episodes, s.running) end)
  local how = string.format("environment: %s; the episodic protocol: every episode as the environment ends it, " ..
    "actions %s", tostring(s1.environment), s1.eval.greedy and "greedy (the most likely)" or "sampled from the policy")
  return evaltable.header(summaries) .. "\n" .. how .. "\n\n" .. util.md_table(rows) .. "\n\n" ..
    episodic.definitions(s1)
end

function episodic.compare_text(a, b)
  local c, rows = evaltable.compare_rows(a, b)
  return util.md_table(rows) .. "\n\n" .. c.verdict .. "\n\n" ..
    "difference: " .. b.label .. " - " .. a.label .. ", 95% interval of the bootstrap differences; Cohen's d:\n" ..
    "the difference of the means over the pooled sd of per-episode values. The verdict reads the return and\n" ..
    "the success (more is better); the length and the counters are shown without one.", c
end

-- ------------------------------------------------------------------ files

-- Records files: one line per episode, columns
--   source  the evaluated checkpoint, 1-based (eval.json's sources)
--   mode, run, env, start (the run's step it began at), length,
--   ended   terminated, truncated, or running (when the run stopped: no success or counters yet)
--   success 1 or 0 (empty where the environment declares none, or running)
--   return  the sum of its rewards, unclipped
--   then one column per declared counter, by its name
episodic.FIELDS = { "source", "mode", "run", "env", "start", "length", "ended", "success", "return" }
local ENDED = { [0] = "running", [1] = "terminated", [2] = "truncated" }
local ENDED_CODE = { running = 0, terminated = 1, truncated = 2 }

function episodic.write_records(path, results, format)
  local f, err = io.open(path, "wb")
  if not f then return nil, "cannot write " .. path .. ": " .. tostring(err) end
  local counters = results[1].counters or {}
  local buf = {}
  local function flush()
    f:write(table.concat(buf))
    buf = {}
  end
  if format == "csv" then
    local head = { table.concat(episodic.FIELDS, ",") }
    for _, name in ipairs(counters) do head[#head + 1] = name end
    buf[1] = table.concat(head, ",") .. "\n"
  end
  for k, r in ipairs(results) do
    local R = r.records
    for i = 0, R.n - 1 do
      local x = R.rec[i]
      local known = x.ended ~= 0
      local succ = (known and x.success >= 0) and tostring(tonumber(x.success)) or nil
      local ret = string.format("%.17g", tonumber(x.ret))
      if format == "csv" then
        local cells = { string.format("%d,%s,%d,%d,%d,%d,%s,%s,%s", k, r.mode, x.run, x.env, x.start, x.length,
          ENDED[tonumber(x.ended)], succ or "", ret) }
        for c = 1, #counters do cells[#cells + 1] = known and tostring(tonumber(x.count[c - 1])) or "" end
        buf[#buf + 1] = table.concat(cells, ",") .. "\n"
      else
        local cells = { string.format('{"source":%d,"mode":"%s","run":%d,"env":%d,"start":%d,"length":%d,' ..
          '"ended":"%s","success":%s,"return":%s', k, r.mode, x.run, x.env, x.start, x.length,
          ENDED[tonumber(x.ended)], succ or "null", ret) }
        for c, name in ipairs(counters) do
          cells[#cells + 1] = string.format('"%s":%s', name, known and tostring(tonumber(x.count[c - 1])) or "null")
        end
        buf[#buf + 1] = table.concat(cells, ",") .. "}\n"
      end
      if #buf >= 65536 then flush() end
    end
  end
  flush()
  f:close()
  return true
end

-- The records of a file written by write_records, per source, as plain
-- tables shaped like engine.eval_episodes' ({n, ended, rec[0..n-1]} with
-- run, env, start, length, ended, success, ret, count[0..]).
function episodic.read_records(path, format, counters)
  local json = require("moonrl.formats.json")
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot read " .. path .. ": " .. tostring(err) end
  counters = counters or {}
  local out, line_no, cols = {}, 0, nil
  for line in f:lines() do
    line_no = line_no + 1
    local v
    if format == "csv" then
      if line_no == 1 then
        cols = {}
        for cell in (line .. ","):gmatch("([^,]*),") do cols[#cols + 1] = cell end
      elseif line ~= "" then
        v = {}
        local i = 0
        for cell in (line .. ","):gmatch("([^,]*),") do
          i = i + 1
          if cols[i] then v[cols[i]] = cell end
        end
      end
    elseif line ~= "" then
      v = json.decode(line)
    end
    if v then
      local x = { source = tonumber(v.source), run = tonumber(v.run), env = tonumber(v.env),
                  start = tonumber(v.start), length = tonumber(v.length), ended = ENDED_CODE[v.ended],
                  success = tonumber(v.success) or -1, ret = tonumber(v["return"]), count = {} }
      if not x.source or not x.length or not x.ended or not x.ret then
        f:close()
        return nil, path .. ":" .. line_no .. ": not an episode's record"
      end
      for c, name in ipairs(counters) do x.count[c - 1] = tonumber(v[name]) or 0 end
      local R = out[x.source] or { n = 0, ended = 0, rec = {}, mode = v.mode }
      out[x.source] = R
      R.rec[R.n] = x
      R.n = R.n + 1
      if x.ended ~= 0 then R.ended = R.ended + 1 end
    end
  end
  f:close()
  return out
end

function episodic.result_json(s)
  local ci = {}
  for key, v in pairs(s.ci) do ci[key] = { v[1], v[2] } end
  return { label = s.label, point = s.point, ci = ci, episodes = s.episodes, running = s.running }
end

-- ----------------------------------------------------------------- figure

-- The distributions of the ended episodes' return (left) and length
-- (right), as fractions of episodes in 20 bins, one curve per summary.
function episodic.figure(summaries)
  local svg = require("moonrl.formats.svg")
  local doc = svg.new(980, 400)
  local BINS = 20
  local function panel(x, key, title)
    local lo, hi = math.huge, -math.huge
    for _, s in ipairs(summaries) do
      for _, v in ipairs(s.values[key]) do lo, hi = math.min(lo, v), math.max(hi, v) end
    end
    if lo > hi then lo, hi = 0, 1 end
    if hi - lo < 1e-9 then lo, hi = lo - 0.5, hi + 0.5 end
    local hs, ymax = {}, 0.1
    for i, s in ipairs(summaries) do
      local h, vals = {}, s.values[key]
      for b = 1, BINS do h[b] = 0 end
      for _, v in ipairs(vals) do
        local b = math.min(BINS, math.floor((v - lo) / (hi - lo) * BINS) + 1)
        h[b] = h[b] + 1
      end
      for b = 1, BINS do
        h[b] = #vals > 0 and h[b] / #vals or 0
        ymax = math.max(ymax, h[b])
      end
      hs[i] = h
    end
    local p = doc:panel { x = x, y = 40, w = 380, h = 290, xmin = lo, xmax = hi, ymin = 0,
      ymax = math.min(1, ymax * 1.1), title = title, xlabel = title, ylabel = "fraction of episodes" }
    local legend = {}
    for i, s in ipairs(summaries) do
      local color = svg.colors[(i - 1) % #svg.colors + 1]
      local pts, w = { { lo, 0 } }, (hi - lo) / BINS
      for b = 1, BINS do
        pts[#pts + 1] = { lo + (b - 1) * w, hs[i][b] }
        pts[#pts + 1] = { lo + b * w, hs[i][b] }
      end
      pts[#pts + 1] = { hi, 0 }
      p:curve(pts, { stroke = color, stroke_width = 2 })
      legend[#legend + 1] = { label = s.label, color = color }
    end
    p:legend(legend)
  end
  panel(70, "return_mean", "return")
  panel(560, "length_mean", "episode length")
  local s1 = summaries[1]
  if s1 then
    doc:text(70, 385, string.format("%s: %d envs x %d steps x %d run%s, eval seed %d; ended episodes: %s",
      tostring(s1.environment), s1.eval.num_envs, s1.eval.steps, s1.eval.runs, s1.eval.runs == 1 and "" or "s",
      s1.eval.seed, (function()
        local parts = {}
        for _, s in ipairs(summaries) do parts[#parts + 1] = s.label .. " " .. s.episodes end
        return table.concat(parts, ", ")
      end)()), { fill = "#555" })
  end
  return doc:render()
end

return episodic

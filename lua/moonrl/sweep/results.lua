-- moonrl.sweep.results - a sweep directory's records and the trials' curves.
--
-- SWEEP_DIR/sweep.json     what the sweep is (metric, mode, method, space, ...)
-- SWEEP_DIR/results.jsonl  one JSON object per line, appended as things happen:
--   {"event": "start", "trial": i, "label", "params", "seed", "dir", "resume": bool}
--   {"event": "rung", "trial": i, "rung": k, "steps", "value", "decision", "why"}
--   population-based training (moonrl.sweep.pbt): {"event": "exploit", ...},
--   {"event": "explore_refused", "trial", "update", "error"} (that exploit's
--   member kept its keys), {"event": "restart", "trial", "error", "update"}
--   (a member that died, resumed from its checkpoint)
--   a result (no "event" field): "trial", "label", "status" ("done" | "failed"
--   | "stopped"), "metric", "value", "steps", "updates", "params", "seed",
--   "dir", "seconds", "train_seconds", and for a failure "exit_code",
--   "signal", "error", "log_tail" (the trial's last output lines); "stopped"
--   adds "why".
--   Costs: "steps" is the trial's agent-steps (its last metrics.jsonl line's
--   agent_steps: every process that trained it, a resume continuing the
--   count). "train_seconds" is its training's wall-seconds, also over every
--   process: the sum of time_total (one update's seconds, as the engine
--   measures it) over the updates in its metrics.jsonl. A resumed run cuts
--   that file back to its checkpoint and continues it, so each update counts
--   once and the time the trial was not running counts not at all (the file
--   marks no process boundary, so differences of wall_time would count it);
--   left out are a process's start-up, the time between updates (a
--   checkpoint's write) and updates done twice across an interruption.
--   "seconds" is the wall-seconds of the last process only, as this sweep
--   process saw it: from its start (or, for a task queued in Slurm, its
--   start on a node; or when a re-run followed it again) to its end.
-- A reader of results skips lines with an "event" field, as with metrics.jsonl.
-- A trial with a start but no result was running when the sweep was
-- interrupted: a re-run resumes it.
--
--   results.append(dir, obj)                 one line, written at once (small, rare)
--   results.read(dir) -> { results = {[i] = r}, starts = {[i] = last start},
--                          rungs = { events in order }, exploits = { in order },
--                          restarts = {[i] = count}, finishing = {[i] = the start
--                          of a finish under way: a start after the trial's
--                          result}, info = sweep.json | nil }
--   results.write_info(dir, info), results.read_info(dir)
--   results.tail(path) -> reader; reader:read() -> new complete JSON lines
--                          (decoded), reader.reset = true when the file was
--                          cut or replaced since (moonrl.run.dir.tail)
--   results.curve_add(curve, record, metric)  record: a metrics.jsonl line; an
--                          entry { update, steps (agent_steps), value (the
--                          metric, nil when absent or NaN), seconds (the sum
--                          of time_total up to it: train_seconds so far; nil
--                          from a line without time_total on) }
--   results.curve_value(curve, smooth [, upto]) -> mean of the last `smooth`
--                          values of the metric among entries 1..upto
--   results.value_at(curve, steps, smooth) -> value at the first entry with
--                          agent-steps >= steps (nil if not reached)
--   results.sorted(list, mode) -> list by value (best first; failed trials, then
--                          trials without a value, last)
--   results.best(list, mode) -> the sweep's best result | nil: the best trial that ran its
--                          whole budget (status done) with a value, else the best stopped one
--                          (ASHA, a budget, a time limit) with a value; never a failed,
--                          running or interrupted one. A trial stopped early is ranked on a
--                          value from fewer agent-steps, so it is the best only where no trial
--                          ran to its end (as Optuna's best_trial counts completed trials, and
--                          a finish trains a done one)
--   results.table(list, opts) -> text       opts: metric, keys (params to show)
--   results.fmt(v) -> short text of a value
--   results.thousands(n) -> "16,384"

local json = require("moonrl.formats.json")
local util = require("moonrl.util")
local number = require("moonrl.number")

local results = {}

local function null_to_nil(v) if v == json.null then return nil end return v end

function results.append(dir, obj)
  local f, err = io.open(dir .. "/results.jsonl", "a")
  if not f then return nil, "cannot write " .. dir .. "/results.jsonl: " .. tostring(err) end
  f:write(json.encode(obj), "\n")
  f:close()
  return true
end

function results.write_info(dir, info)
  local f, err = io.open(dir .. "/sweep.json", "w")
  if not f then return nil, "cannot write " .. dir .. "/sweep.json: " .. tostring(err) end
  f:write(json.encode(info), "\n")
  f:close()
  return true
end

function results.read_info(dir)
  local text = util.read_file(dir .. "/sweep.json")
  if not text then return nil end
  local info = json.decode(text)
  if type(info) ~= "table" then return nil end
  for k, v in pairs(info) do info[k] = null_to_nil(v) end
  return info
end

-- JSON nulls inside a decoded object become nils (one level deep, and in params).
local function clean(o)
  for k, v in pairs(o) do o[k] = null_to_nil(v) end
  if type(o.params) == "table" then for k, v in pairs(o.params) do o.params[k] = null_to_nil(v) end end
  return o
end

function results.read(dir)
  local out = { results = {}, starts = {}, rungs = {}, exploits = {}, restarts = {}, finishing = {}, info = results.read_info(dir) }
  local text = util.read_file(dir .. "/results.jsonl")
  if not text then return out end
  for line in text:gmatch("[^\n]+") do
    local o = json.decode(line)   -- a line cut short by a kill is skipped
    if type(o) == "table" and type(o.trial) == "number" then
      clean(o)
      if o.event == "start" then
        out.starts[o.trial] = o
        -- a finish (moonrl.sweep's finish =) runs the trial again after its result
        if o.finish and out.results[o.trial] then out.finishing[o.trial] = o end
      elseif o.event == "rung" then out.rungs[#out.rungs + 1] = o
      elseif o.event == "exploit" then out.exploits[#out.exploits + 1] = o
      elseif o.event == "explore_refused" then   -- the member kept its keys at that exploit
        for i = #out.exploits, 1, -1 do
          local e = out.exploits[i]
          if e.trial == o.trial and e.update == o.update then e.new, e.explore_error = e.old, o.error break end
        end
      elseif o.event == "restart" then out.restarts[o.trial] = (out.restarts[o.trial] or 0) + 1
      elseif o.event == nil then out.results[o.trial], out.finishing[o.trial] = o, nil
      end
    end
  end
  return out
end

-- a growing JSON-lines file (a trial's metrics.jsonl): moonrl.run.dir's reader
results.tail = require("moonrl.run.dir").tail

-- ------------------------------------------------------------------ curves

-- A metric is a metrics.jsonl field name or function(record) -> number | nil.
function results.metric_of(record, metric)
  local v
  if type(metric) == "function" then
    local ok, r = pcall(metric, record)
    v = ok and r or nil
  else
    v = record[metric]
  end
  v = null_to_nil(v)
  if type(v) ~= "number" or v ~= v then return nil end
  return v
end

function results.curve_add(curve, rec, metric)
  if rec.event ~= nil or type(rec.update) ~= "number" then return end
  -- a record for an update seen already: the file was rewritten from there (resume)
  while #curve > 0 and curve[#curve].update >= rec.update do curve[#curve] = nil end
  local prev = curve[#curve]
  -- a line without time_total leaves this entry and the ones after it without seconds
  local dt, before = number.finite_value(null_to_nil(rec.time_total)), (prev == nil) and 0 or prev.seconds
  curve[#curve + 1] = { update = rec.update, steps = tonumber(rec.agent_steps) or 0,
    value = results.metric_of(rec, metric), seconds = dt and before and before + math.max(0, dt) or nil }
end

function results.curve_value(curve, smooth, upto)
  local sum, n = 0, 0
  for i = upto or #curve, 1, -1 do
    local v = curve[i].value
    if v then
      sum, n = sum + v, n + 1
      if n >= (smooth or 1) then break end
    end
  end
  if n == 0 then return nil end
  return sum / n
end

function results.value_at(curve, steps, smooth)
  for i, e in ipairs(curve) do
    if e.steps >= steps then return results.curve_value(curve, smooth, i), true end
  end
  return nil, false
end

-- ------------------------------------------------------------------ tables

function results.sorted(list, mode)
  local out = {}
  for _, r in ipairs(list) do out[#out + 1] = r end
  table.sort(out, function(a, b)
    local fa, fb = a.status == "failed", b.status == "failed"
    if fa ~= fb then return fb end   -- a failed trial's last value is no result: they go last
    local va, vb = a.value, b.value
    if va ~= nil and vb ~= nil and va ~= vb then
      if mode == "min" then return va < vb end
      return va > vb
    end
    if (va ~= nil) ~= (vb ~= nil) then return va ~= nil end
    return a.trial < b.trial
  end)
  return out
end

function results.best(list, mode)
  local stopped
  for _, r in ipairs(results.sorted(list, mode)) do
    if r.value ~= nil and r.status == "done" then return r end
    if r.value ~= nil and r.status == "stopped" and not stopped then stopped = r end
  end
  return stopped
end

function results.fmt(v)
  if v == nil then return "-" end
  if type(v) == "number" then return util.fmt_number(tonumber(string.format("%.4g", v))) end
  if type(v) == "table" and v.kind then   -- a schedule
    return require("moonrl.schedule").to_lua(v) or util.fmt_value(v)
  end
  if type(v) == "string" then return v end
  return util.fmt_value(v)
end

results.thousands = number.thousands

-- list: results (and trials in progress, status "running" / "pending"), any order
function results.table(list, opts)
  opts = opts or {}
  local metric = type(opts.metric) == "string" and opts.metric or "metric"
  local keys = opts.keys
  if not keys then
    local seen = {}
    keys = {}
    for _, r in ipairs(list) do
      for k in pairs(r.params or {}) do
        if not seen[k] then seen[k] = true; keys[#keys + 1] = k end
      end
    end
    table.sort(keys)
  end
  local head = { "trial", "status", metric, "steps" }
  for _, k in ipairs(keys) do head[#head + 1] = k end
  head[#head + 1] = "seed"
  head[#head + 1] = "dir"
  local rows = { head }
  local right = { [3] = true, [4] = true }
  for i = 1, #keys + 1 do right[4 + i] = true end
  for _, r in ipairs(results.sorted(list, opts.mode)) do
    local row = { r.label or ("trial-" .. tostring(r.trial)), tostring(r.status or "?"), results.fmt(r.value),
      results.thousands(r.steps) }
    for _, k in ipairs(keys) do row[#row + 1] = results.fmt((r.params or {})[k]) end
    row[#row + 1] = r.seed and tostring(r.seed) or "-"
    row[#row + 1] = r.dir or "-"
    rows[#rows + 1] = row
  end
  return util.md_table(rows, right)
end

-- The point (setting) trial `trial` runs when each point runs `repeats`
-- times: trials 1 .. repeats run setting 1, and so on.
function results.setting_of(trial, repeats)
  return math.floor((trial - 1) / (repeats or 1)) + 1
end

-- A sweep run with repeats: its finished trials grouped by setting
-- (results.setting_of), each with n, the values, the
-- mean and its 95% Student-t interval (stats.mean_interval), best first by
-- mode. A setting is `distinct` from the best when their intervals do not
-- overlap (a conservative reading: overlapping 95% intervals may still
-- differ), false when they do, nil when either has fewer than 2 values.
-- Failed trials and trials without a value are left out.
function results.settings(list, mode, repeats)
  local stats = require("moonrl.eval.stats")
  local by, order = {}, {}
  for _, r in ipairs(list) do
    if r.status ~= "failed" and type(r.value) == "number" and r.value == r.value then
      local k = results.setting_of(r.trial, repeats)
      local g = by[k]
      if not g then
        g = { setting = k, params = r.params, values = {}, trials = {} }
        by[k] = g
        order[#order + 1] = g
      end
      g.values[#g.values + 1] = r.value
      g.trials[#g.trials + 1] = r.trial
    end
  end
  for _, g in ipairs(order) do
    g.n = #g.values
    g.mean, g.lo, g.hi = stats.mean_interval(g.values)
  end
  table.sort(order, function(a, b)
    if a.mean ~= b.mean then if mode == "min" then return a.mean < b.mean end return a.mean > b.mean end
    return a.setting < b.setting
  end)
  local best = order[1]
  for i, g in ipairs(order) do
    if i > 1 and g.lo == g.lo and best.lo == best.lo then g.distinct = g.hi < best.lo or g.lo > best.hi end
  end
  return order
end

-- results.settings as text: one line per setting, best first.
function results.settings_text(settings, opts)
  opts = opts or {}
  local metric = type(opts.metric) == "string" and opts.metric or "metric"
  local lines = { string.format("settings (%s: mean [95%% interval] over their seeds, best first):", metric) }
  for i, g in ipairs(settings) do
    local parts = {}
    for _, k in ipairs(opts.keys or {}) do parts[#parts + 1] = k .. "=" .. results.fmt((g.params or {})[k]) end
    local iv = g.lo == g.lo and string.format("[%s, %s]", results.fmt(g.lo), results.fmt(g.hi)) or "[n < 2]"
    local verdict = i == 1 and "best" or g.distinct == true and "worse than the best" or
      g.distinct == false and "not distinguishable from the best" or "too few values to tell"
    lines[#lines + 1] = string.format("  %d. %s  %s %s  n = %d  %s", i, table.concat(parts, " "),
      results.fmt(g.mean), iv, g.n, verdict)
  end
  return table.concat(lines, "\n")
end

return results

-- moonrl.sweep.plot - a sweep directory's plots, as SVG files (moonrl.formats.svg):
--   SWEEP_DIR/plots/curves.svg       each trial's metric against agent-steps
--   SWEEP_DIR/plots/param_<key>.svg  each trial's final metric against a swept key
--                                    (log axis for a loguniform key; a key whose
--                                    values are not numbers gets one column per value)
--   SWEEP_DIR/plots/front.svg        the best metric within each budget of agent-steps
--                                    (moonrl.sweep.front: a step line, each point labelled
--                                    with its trial where the front passes to it) over every
--                                    trial's curve (faint, smoothed as the front sees it);
--                                    a log x axis when the steps span more than a decade
--   SWEEP_DIR/plots/front_seconds.svg  the same against the seconds of training
-- Read from sweep.json, results.jsonl and each trial's metrics.jsonl, so
-- `moonrl sweep plot DIR` draws a running sweep too (its trials' latest values).
--
--   plot.trials(dir [, info]) -> list, info, records   every trial the directory knows,
--                                    each with its curve (results.curve_add), steps and
--                                    train_seconds (the curve's when its result has none)
--   plot.front_chart(dir, summary, cost) -> SVG text   summary: front.of_sweep's
--   plot.param_chart(dir, list, info, key) -> SVG text   the metric against one key (a point per trial)
--   plot.parallel_chart(dir, list, info [, keys]) -> SVG text   every trial across the keys and the
--                                    metric (parallel coordinates; moonrl sweep report, the dashboard)
--   plot.importance_chart(dir, imp) -> SVG text   importance.of_sweep's result as bars
--   plot.safe(key) -> the key as part of a file name
--   plot.write(dir) -> list of files written | nil, err

local results = require("moonrl.sweep.results")
local front = require("moonrl.sweep.front")
local svg = require("moonrl.formats.svg")

local plot = {}

local STATUS_COLOR = { done = "#1f77b4", stopped = "#ff7f0e", failed = "#d62728", running = "#2ca02c" }

-- every trial the directory knows: results, and starts without one (running or interrupted)
function plot.trials(dir, info)
  local rec = results.read(dir)
  info = info or rec.info or {}
  local metric = info.metric or "efficiency"
  local list = {}
  local seen = {}
  for i, r in pairs(rec.results) do
    if rec.finishing[i] then   -- its finish is under way: running again, from the result before it
      r = { trial = i, label = r.label, status = "running", params = r.params, seed = r.seed, dir = r.dir,
        job = rec.finishing[i].job }
    end
    list[#list + 1] = r; seen[i] = true
  end
  for i, s in pairs(rec.starts) do
    if not seen[i] then
      list[#list + 1] = { trial = i, label = s.label, status = "running", params = s.params, seed = s.seed, dir = s.dir,
        job = s.job }
    end
  end
  for _, r in ipairs(list) do
    r.curve = {}
    if r.dir then
      -- a trial's directory is DIR/trial-NNN; its record has the path from the
      -- sweep process's directory, which need not be this one's
      local recs = results.tail(dir .. "/" .. r.dir:match("([^/]+)/*$") .. "/metrics.jsonl"):read()
      for _, m in ipairs(recs) do results.curve_add(r.curve, m, metric) end
      local last = r.curve[#r.curve]
      if r.status == "running" then
        r.value = results.curve_value(r.curve, info.smooth or 1)
        r.steps = last and last.steps
      end
      -- a result recorded before results had train_seconds, or a trial still running
      if r.train_seconds == nil and last then r.train_seconds = last.seconds end
    end
  end
  table.sort(list, function(a, b) return a.trial < b.trial end)
  return list, info, rec
end

local AXIS = { steps = "agent-steps", seconds = "seconds of training (the sum of the updates' time_total)" }

function plot.front_chart(dir, s, cost)
  local metric = type(s.metric) == "string" and s.metric or "metric"
  local by, order = {}, {}
  local xmin, xmax = math.huge, -math.huge
  for _, p in ipairs(s.points) do
    if not by[p.trial] then by[p.trial] = {}; order[#order + 1] = p.trial end
    local c = p[cost]
    if type(c) == "number" and c == c then
      table.insert(by[p.trial], { c, p.value })
      if c > 0 then xmin = math.min(xmin, c) end
      xmax = math.max(xmax, c)
    end
  end
  table.sort(order)
  local series, label_of = {}, {}
  for _, p in ipairs(s.points) do label_of[p.trial] = p.label end
  for i, trial in ipairs(order) do   -- each trial faint; named in the legend while there are few
    if #by[trial] > 0 then
      series[#series + 1] = { points = by[trial], opacity = 0.35, width = 1,
        color = svg.colors[(i - 1) % #svg.colors + 1], name = #order <= 12 and label_of[trial] or nil }
    end
  end
  local f = s[cost].front
  if #f > 0 then
    -- the step line: level from each point of the front to the next, then up (or down) to it
    local steps, marks, labels = {}, {}, {}
    for i, p in ipairs(f) do
      if i > 1 then steps[#steps + 1] = { p[cost], f[i - 1].value } end
      steps[#steps + 1] = { p[cost], p.value }
      marks[i] = { p[cost], p.value }
      if i == 1 or f[i - 1].trial ~= p.trial then labels[i] = p.label end
    end
    if xmax > f[#f][cost] then steps[#steps + 1] = { xmax, f[#f].value } end
    series[#series + 1] = { name = "best within budget", points = steps, color = "#000000", width = 2 }
    series[#series + 1] = { kind = "points", points = marks, labels = labels, color = "#000000" }
  end
  local xlog = xmin > 0 and xmax / xmin > 10
  return svg.chart({
    title = dir .. ": best " .. metric .. " (" .. tostring(s.mode) .. ") within a budget" ..
      (s.smooth > 1 and (" (mean of last " .. s.smooth .. ")") or ""),
    xlabel = AXIS[cost] .. (xlog and " (log scale)" or ""), ylabel = metric, xlog = xlog, series = series })
end

-- a key as a file name's part
function plot.safe(key) return (key:gsub("[^%w_.-]", "_")) end

-- The metric against one swept key: a point per trial with a value, coloured
-- by its status (a log axis for a loguniform key; a column per value for a key
-- whose values are not numbers).
function plot.param_chart(dir, list, info, key)
  local metric = type(info.metric) == "string" and info.metric or "metric"
  local sp = (info.space or {})[key] or {}
  local numeric = true
  for _, r in ipairs(list) do
    local v = (r.params or {})[key]
    if v ~= nil and type(v) ~= "number" then numeric = false end
  end
  local cats, index
  if not numeric then
    cats, index = {}, {}
    for _, r in ipairs(list) do
      local v = results.fmt((r.params or {})[key])
      if not index[v] then cats[#cats + 1] = v; index[v] = #cats end
    end
  end
  local by_status = {}
  local order = {}
  for _, r in ipairs(list) do
    local v = (r.params or {})[key]
    if r.value and v ~= nil then
      local s = r.status or "?"
      if not by_status[s] then by_status[s] = {}; order[#order + 1] = s end
      local x = numeric and v or index[results.fmt(v)]
      table.insert(by_status[s], { x, r.value })
    end
  end
  table.sort(order)
  local ser = {}
  for _, s in ipairs(order) do
    ser[#ser + 1] = { name = s, kind = "points", points = by_status[s], color = STATUS_COLOR[s] }
  end
  return svg.chart({
    title = dir .. ": " .. metric .. " against " .. key .. " (" .. tostring(sp.text or "") .. ")",
    xlabel = key .. (sp.log and " (log scale)" or ""), ylabel = metric .. " (final)",
    xlog = numeric and sp.log or false, xcategories = cats, series = ser,
  })
end

-- Every trial across the swept keys and the metric (parallel coordinates):
-- an axis per key of sweep.json's space, scaled by its declared range (log
-- for a loguniform key, a tick per value for a choice or grid), in `order`
-- (default: sorted), then the metric's axis; a line per trial that has
-- settings, coloured by its value (better: yellow, worse: dark; svg.ramp),
-- dashed when stopped early (its value at a smaller budget), grey and ending
-- before the metric's axis when it has no value (failed, or not started).
function plot.parallel_chart(dir, list, info, order)
  local importance = require("moonrl.sweep.importance")
  local metric = type(info.metric) == "string" and info.metric or "metric"
  local space = info.space or {}
  local keys = order
  if not keys or #keys == 0 then   -- sweep.json's space; an older one without it: the keys the trials have
    keys = {}
    local seen = {}
    for k in pairs(space) do keys[#keys + 1] = k seen[k] = true end
    if #keys == 0 then
      for _, r in ipairs(list) do
        for k in pairs(r.params or {}) do if not seen[k] then seen[k] = true keys[#keys + 1] = k end end
      end
    end
    table.sort(keys)
  end
  local axes, scales = {}, {}
  for i, k in ipairs(keys) do
    local values = {}
    for _, r in ipairs(list) do
      local v = (r.params or {})[k]
      if v ~= nil then values[#values + 1] = v end
    end
    local sc = importance.scale(space[k], values)
    scales[i] = sc
    axes[i] = { name = k, lo = sc.lo, hi = sc.hi, log = sc.kind == "log", categories = sc.categories }
  end
  local vmin, vmax = math.huge, -math.huge
  for _, r in ipairs(list) do
    if type(r.value) == "number" and r.value == r.value and math.abs(r.value) < math.huge then
      vmin, vmax = math.min(vmin, r.value), math.max(vmax, r.value)
    end
  end
  if vmin > vmax then vmin, vmax = 0, 1 end
  if vmin == vmax then vmin, vmax = vmin - 0.5, vmax + 0.5 end
  axes[#axes + 1] = { name = metric .. " (" .. (info.mode or "max") .. ")", lo = vmin, hi = vmax }
  local lines = {}
  for _, r in ipairs(results.sorted(list, info.mode)) do   -- the best last: drawn on top
    table.insert(lines, 1, r)
  end
  local out, counted = {}, { done = 0, stopped = 0, other = 0 }
  for _, r in ipairs(lines) do
    if r.params then
      local vals = {}
      local parts = {}
      for i, k in ipairs(keys) do
        local v = r.params[k]
        if v ~= nil then
          vals[i] = scales[i].kind == "categorical" and scales[i].index(v) or v
          parts[#parts + 1] = k .. "=" .. results.fmt(v)
        end
      end
      local has = type(r.value) == "number" and r.value == r.value and math.abs(r.value) < math.huge
      vals[#keys + 1] = has and r.value or nil
      local t = has and (r.value - vmin) / (vmax - vmin) or 0
      if info.mode == "min" then t = 1 - t end
      local st = r.status or "?"
      counted[counted[st] and st or "other"] = counted[counted[st] and st or "other"] + 1
      out[#out + 1] = { values = vals, color = has and svg.ramp(t) or "#bbbbbb", dash = st == "stopped" and "4 3" or nil,
        width = 1.5, opacity = has and 0.85 or 0.6,
        title = string.format("%s (%s): %s %s; %s", r.label or ("trial-" .. tostring(r.trial)), st, metric,
          results.fmt(r.value), table.concat(parts, " ")) }
    end
  end
  return svg.parallel({
    title = dir .. ": every trial's settings and " .. metric,
    axes = axes, lines = out, width = math.max(640, 150 * #axes + 100),
    note = string.format("%d done, %d stopped early (dashed), %d without a value (grey); colour: the %s, " ..
      "better yellow, worse dark", counted.done, counted.stopped, counted.other, metric),
  })
end

-- The importance of each key (importance.of_sweep's result): a bar per key,
-- its mean over the trees with a whisker of +- its sd over them.
function plot.importance_chart(dir, imp)
  local bars = {}
  for _, k in ipairs(imp.keys) do
    bars[#bars + 1] = { label = k.key, value = k.importance, err = k.sd }
  end
  bars[#bars + 1] = { label = "interactions (the rest)", value = imp.interactions, color = "#bbbbbb" }
  return svg.bars({ title = dir .. ": which keys mattered (" .. imp.n .. " trials)",
    xlabel = "share of " .. tostring(imp.metric or "the metric") .. "'s variance (fANOVA main effect; +- sd over " ..
      (imp.fitted_trees or imp.trees) .. " trees)",
    bars = bars, xmin = 0, xmax = 1 })
end

function plot.write(dir)
  local list, info = plot.trials(dir)
  local metric = info.metric or "metric"
  local ok, err = require("luv").fs_mkdir(dir .. "/plots", tonumber("755", 8))
  if not ok and not require("luv").fs_stat(dir .. "/plots") then return nil, "cannot create " .. dir .. "/plots: " .. tostring(err) end
  local written = {}
  local function write(name, text)
    local path = dir .. "/plots/" .. name
    local f, ferr = io.open(path, "w")
    if not f then error("cannot write " .. path .. ": " .. tostring(ferr), 0) end
    f:write(text)
    f:close()
    written[#written + 1] = path
  end

  local series = {}
  for _, r in ipairs(list) do
    local pts = {}
    for _, e in ipairs(r.curve) do if e.value then pts[#pts + 1] = { e.steps, e.value } end end
    series[#series + 1] = { name = (r.label or ("trial-" .. r.trial)) .. " (" .. tostring(r.status) .. ")", points = pts }
  end
  write("curves.svg", svg.chart({ title = dir .. ": " .. metric .. " of each trial", xlabel = "agent-steps",
    ylabel = metric, series = series }))
  local summary = front.of_sweep(list, info)
  write("front.svg", plot.front_chart(dir, summary, "steps"))
  write("front_seconds.svg", plot.front_chart(dir, summary, "seconds"))

  for key in pairs(info.space or {}) do
    write("param_" .. plot.safe(key) .. ".svg", plot.param_chart(dir, list, info, key))
  end
  table.sort(written)
  return written
end

return plot

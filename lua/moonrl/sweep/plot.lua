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
  for i, r in pairs(rec.results) do list[#list + 1] = r; seen[i] = true end
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

local function safe(key) return (key:gsub("[^%w_.-]", "_")) end

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

  for key, sp in pairs(info.space or {}) do
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
    write("param_" .. safe(key) .. ".svg", svg.chart({
      title = dir .. ": " .. metric .. " against " .. key .. " (" .. tostring(sp.text or "") .. ")",
      xlabel = key .. (sp.log and " (log scale)" or ""), ylabel = metric .. " (final)",
      xlog = numeric and sp.log or false, xcategories = cats, series = ser,
    }))
  end
  table.sort(written)
  return written
end

return plot

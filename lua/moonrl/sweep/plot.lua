-- moonrl.sweep.plot - a sweep directory's plots, as SVG files (moonrl.formats.svg):
--   SWEEP_DIR/plots/curves.svg       each trial's metric against agent-steps
--   SWEEP_DIR/plots/param_<key>.svg  each trial's final metric against a swept key
--                                    (log axis for a loguniform key; a key whose
--                                    values are not numbers gets one column per value)
-- Read from sweep.json, results.jsonl and each trial's metrics.jsonl, so
-- `moonrl sweep plot DIR` draws a running sweep too (its trials' latest values).
--
--   plot.write(dir) -> list of files written | nil, err

local results = require("moonrl.sweep.results")
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
      local recs = results.tail(r.dir .. "/metrics.jsonl"):read()
      for _, m in ipairs(recs) do results.curve_add(r.curve, m, metric) end
      if r.status == "running" then
        r.value = results.curve_value(r.curve, info.smooth or 1)
        local last = r.curve[#r.curve]
        r.steps = last and last.steps
      end
    end
  end
  table.sort(list, function(a, b) return a.trial < b.trial end)
  return list, info, rec
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

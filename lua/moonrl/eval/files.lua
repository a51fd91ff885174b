-- moonrl.eval.files - what `moonrl eval` writes beside its table, so every
-- figure can be recomputed: the records (CSV or JSONL), eval.json (the
-- settings, seeds and numbers), eval.md (the table) and eval.svg (the
-- Kaplan-Meier curves and the efficiency distributions); and the records
-- read back (`moonrl eval --from DIR`).
--
-- The episodic protocol's results (results[1].protocol = "episodic") have
-- records of their own (moonrl.eval.episodic: one line per episode) and a
-- figure of their distributions; eval.json then says "protocol": "episodic"
-- (a file without it is the survival protocol's).
--
-- The survival protocol's records files: one line per death or survivor, columns
--   source  the evaluated checkpoint, 1-based (eval.json's sources)
--   mode, run, env, died (1 death, 0 alive at the end: censored), steps,
--   start (the run's step the episode began at), food, poison, reward,
--   energy_gained (food - 2 poison - 0.01 steps), final_energy
-- Run r of a source used the environment seed eval.seed + r x 1000003.
--
-- Public functions
--   evalfiles.FIELDS
--   evalfiles.write_records(path, results, format)    format "csv" | "jsonl"
--   evalfiles.read_records(path, format[, meta]) -> {[source] = records} | nil, err
--       meta: eval.json's content (the protocol and counters of the file)
--   evalfiles.settings(results, summaries, extra) -> table  (eval.json's content)
--   evalfiles.figure(summaries) -> svg text
--   evalfiles.write(path, text) -> true | nil, err
--   evalfiles.save(dir, results, summaries, text, opts) -> {file names} | nil, err
--       the four files in dir (made, parents too); opts: records = "csv" | "jsonl",
--       bootstrap = {resamples, seed, unit}, compare, command, arms (--compare's arms of
--       several training runs: lists of source indices)
--   evalfiles.dir_for(checkpoint, run_dir) -> RUN_DIR/eval/<checkpoint's name>
--       (update_NNNNNNN for a run's), or beside the checkpoint when in no run
--   evalfiles.newest(dir) -> the folder in dir holding the newest checkpoint's
--       eval.json (dir itself when it holds one; a run directory: its eval/) | nil, err
--   evalfiles.point(folder, key) -> the number eval.json in folder has for key
--       in its first result's point (eval.energy_per_1k, ...) | nil, err
--   evalfiles.interval(folder, key) -> lo, hi: its 95% interval there | nil

local json = require("moonrl.formats.json")
local svg = require("moonrl.formats.svg")
local util = require("moonrl.util")

local evalfiles = {}

local FIELDS = { "source", "mode", "run", "env", "died", "steps", "start", "food", "poison", "reward",
                 "energy_gained", "final_energy" }
evalfiles.FIELDS = FIELDS

function evalfiles.write(path, text)
  local f, err = io.open(path, "wb")
  if not f then return nil, "cannot write " .. path .. ": " .. tostring(err) end
  local ok, werr = f:write(text)
  f:close()
  if not ok then return nil, "cannot write " .. path .. ": " .. tostring(werr) end
  return true
end

local function fmt_float(x) return string.format("%.9g", x) end

-- Writes every record of results[k].records (source k), buffered.
function evalfiles.write_records(path, results, format)
  if results[1] and results[1].protocol == "episodic" then
    return require("moonrl.eval.episodic").write_records(path, results, format)
  end
  local f, err = io.open(path, "wb")
  if not f then return nil, "cannot write " .. path .. ": " .. tostring(err) end
  local buf = {}
  local function flush()
    f:write(table.concat(buf))
    buf = {}
  end
  if format == "csv" then buf[1] = table.concat(FIELDS, ",") .. "\n" end
  for k, r in ipairs(results) do
    local R = r.records
    for i = 0, R.n - 1 do
      local x = R.rec[i]
      local gained = string.format("%.2f", x.energy_gained_centi / 100)
      local final = string.format("%.2f", (100 + x.energy_gained_centi) / 100)
      if format == "csv" then
        buf[#buf + 1] = string.format("%d,%s,%d,%d,%d,%d,%d,%d,%d,%s,%s,%s\n", k, r.mode, x.run, x.env, x.died,
          x.steps, x.start, x.food, x.poison, fmt_float(x.reward), gained, final)
      else
        buf[#buf + 1] = string.format('{"source":%d,"mode":"%s","run":%d,"env":%d,"died":%d,"steps":%d,' ..
          '"start":%d,"food":%d,"poison":%d,"reward":%s,"energy_gained":%s,"final_energy":%s}\n', k, r.mode,
          x.run, x.env, x.died, x.steps, x.start, x.food, x.poison, fmt_float(x.reward), gained, final)
      end
      if #buf >= 65536 then flush() end
    end
  end
  flush()
  f:close()
  return true
end

-- The records of a file written by write_records, per source, as plain
-- tables shaped like engine.eval_records' ({n, deaths, rec[0..n-1]}).
function evalfiles.read_records(path, format, meta)
  if type(meta) == "table" and meta.protocol == "episodic" then
    local s1 = type(meta.sources) == "table" and type(meta.sources[1]) == "table" and meta.sources[1] or {}
    local counters = {}
    for _, name in ipairs(type(s1.counters) == "table" and s1.counters or {}) do
      if type(name) == "string" then counters[#counters + 1] = name end
    end
    return require("moonrl.eval.episodic").read_records(path, format, counters)
  end
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot read " .. path .. ": " .. tostring(err) end
  local out, line_no = {}, 0
  for line in f:lines() do
    line_no = line_no + 1
    local x
    if format == "csv" then
      if line_no > 1 and line ~= "" then
        local v = {}
        for cell in (line .. ","):gmatch("([^,]*),") do v[#v + 1] = cell end
        x = {}
        for i, name in ipairs(FIELDS) do x[name] = name == "mode" and v[i] or tonumber(v[i]) end
      end
    elseif line ~= "" then
      x = json.decode(line)
    end
    if x then
      if type(x.source) ~= "number" or type(x.steps) ~= "number" then
        f:close()
        return nil, path .. ":" .. line_no .. ": not a record line"
      end
      local R = out[x.source] or { n = 0, deaths = 0, rec = {}, mode = x.mode }
      out[x.source] = R
      x.energy_gained_centi = math.floor(x.energy_gained * 100 + 0.5)
      R.rec[R.n] = x
      R.n = R.n + 1
      R.deaths = R.deaths + x.died
    end
  end
  f:close()
  return out
end

-- eval.json: what was evaluated and how (enough to run it again) and the
-- numbers of the table.
function evalfiles.settings(results, summaries, extra)
  local t = { sources = {}, results = {} }
  for k, v in pairs(extra or {}) do t[k] = v end
  local episodic = results[1] and results[1].protocol == "episodic"
  if episodic then t.protocol = "episodic" end
  for k, r in ipairs(results) do
    local seeds = {}
    for run = 0, r.eval.runs - 1 do seeds[#seeds + 1] = r.eval.seed + run * 1000003 end
    t.sources[k] = { label = r.label or r.mode, mode = r.mode, trained_mode = r.trained_mode, environment = r.environment,
      checkpoint = r.checkpoint, update = require("moonrl.eval.table").update_of(r.checkpoint), train_seed = r.train_seed, engine = r.describe,
      eval = { num_envs = r.eval.num_envs, steps = r.eval.steps, runs = r.eval.runs, seed = r.eval.seed,
               run_seeds = seeds, episodes = r.eval.episodes, greedy = r.eval.greedy },
      engine_table = r.energy_per_1k and { energy_per_1k = r.energy_per_1k, efficiency = r.efficiency,
        survival = r.survival, deaths_per_1k = r.deaths_per_1k, food_per_1k = r.food_per_1k,
        poison_per_1k = r.poison_per_1k } or nil }
    if episodic then t.sources[k].counters, t.sources[k].success = r.counters, r.success end
  end
  if episodic then
    for k, s in ipairs(summaries) do t.results[k] = require("moonrl.eval.episodic").result_json(s) end
    return t
  end
  for k, s in ipairs(summaries) do
    local ci = {}
    for key, v in pairs(s.ci) do ci[key] = { v[1], v[2] } end
    t.results[k] = { label = s.label, point = s.point, ci = ci, deaths = s.deaths, censored = s.censored,
      agent_steps = s.totals.S, food = s.totals.F, poison = s.totals.P,
      km_median = { median = s.km_median[1], lower = s.km_median[2], upper = s.km_median[3],
                    max_time = s.km.max_time } }
  end
  return t
end

-- The folder an evaluation of one checkpoint goes to by default: one per
-- checkpoint, so evaluating an older one leaves the others alone.
function evalfiles.dir_for(checkpoint, run_dir)
  local name = (checkpoint:match("([^/]+)$") or checkpoint):gsub("%.mrck$", "")
  local base = run_dir or checkpoint:match("^(.*)/[^/]*$") or "."
  return base .. "/eval/" .. name
end

-- The results folder of the newest checkpoint evaluated under dir: dir itself
-- when it holds an eval.json, else its (or, for a run directory, its eval/'s)
-- subfolder of the highest update_NNNNNNN with an eval.json.
function evalfiles.newest(dir)
  local uv = require("luv")
  local function has(d) return uv.fs_stat(d .. "/eval.json") ~= nil end
  dir = dir:gsub("/+$", "")
  if dir == "" then dir = "/" end
  if has(dir) then return dir end
  local function scan(d)
    local best, best_n, others = nil, -1, {}
    local req = uv.fs_scandir(d)
    while req do
      local name, kind = uv.fs_scandir_next(req)
      if not name then break end
      if kind == "directory" and has(d .. "/" .. name) then
        others[#others + 1] = name
        local n = tonumber(name:match("^update_(%d+)$") or "")
        if n and n > best_n then best, best_n = name, n end
      end
    end
    if not best and #others == 1 then best = others[1] end
    return best and (d .. "/" .. best)
  end
  local ev = dir .. "/eval"   -- a run directory's
  local found = (uv.fs_stat(ev) and (scan(ev) or (has(ev) and ev))) or scan(dir)
  if found then return found end
  return nil, "no eval.json in " .. dir .. " nor in a checkpoint's folder under it " ..
    "(update_NNNNNNN/, written by moonrl eval or at the end of moonrl train)"
end

-- Writes the records, eval.json, eval.md and eval.svg into dir.
function evalfiles.save(dir, results, summaries, text, opts)
  opts = opts or {}
  local ok, me = require("moonrl.util").mkdir_p(dir)
  if not ok then return nil, me end
  local fmt = opts.records or "csv"
  local rec_file = "records." .. fmt
  local n = 0
  for _, r in ipairs(results) do n = n + r.records.n end
  local settings = evalfiles.settings(results, summaries, {
    moonrl = require("moonrl.engine").version(), compare = opts.compare or false,
    records = { file = rec_file, format = fmt, count = n },
    bootstrap = opts.bootstrap, command = opts.command, arms = opts.arms,
  })
  for _, f in ipairs({
    { rec_file, function(path) return evalfiles.write_records(path, results, fmt) end },
    { "eval.json", function(path) return evalfiles.write(path, json.encode(settings) .. "\n") end },
    { "eval.md", function(path) return evalfiles.write(path, text .. "\n") end },
    { "eval.svg", function(path) return evalfiles.write(path, evalfiles.figure(summaries)) end },
  }) do
    local wok, we = f[2](dir .. "/" .. f[1])
    if not wok then return nil, we end
  end
  return { rec_file, "eval.json", "eval.md", "eval.svg" }
end

-- ------------------------------------------------------------------ figure

-- Left: the Kaplan-Meier curves (log steps); right: the distributions of
-- the per-agent efficiency (solid) and the per-death efficiency (dashed), as
-- fractions of agents / deaths in 20 bins of [0, 1].
function evalfiles.figure(summaries)
  if summaries[1] and summaries[1].protocol == "episodic" then return require("moonrl.eval.episodic").figure(summaries) end
  local doc = svg.new(980, 400)
  local tmax = 10
  for _, s in ipairs(summaries) do tmax = math.max(tmax, s.km.max_time) end
  local left = doc:panel { x = 70, y = 40, w = 380, h = 290, xmin = 1, xmax = tmax, xlog = true, ymin = 0, ymax = 1,
    title = "Kaplan-Meier survival (survivors censored)", xlabel = "steps alive", ylabel = "fraction alive" }
  local legend = {}
  for i, s in ipairs(summaries) do
    local color = svg.colors[(i - 1) % #svg.colors + 1]
    local pts, prev = { { 1, 1 } }, 1
    for k = 1, #s.km.time do
      local t = s.km.time[k]
      pts[#pts + 1] = { t, prev }
      pts[#pts + 1] = { t, s.km.surv[k] }
      prev = s.km.surv[k]
    end
    pts[#pts + 1] = { math.max(s.km.max_time, 1), prev }
    left:curve(pts, { stroke = color, stroke_width = 2 })
    legend[#legend + 1] = { label = s.label, color = color }
  end
  left:legend(legend)
  local BINS = 20
  local function hist(values)
    local h = {}
    for b = 1, BINS do h[b] = 0 end
    for _, v in ipairs(values) do
      local b = math.min(BINS, math.floor(v * BINS) + 1)
      h[b] = h[b] + 1
    end
    for b = 1, BINS do h[b] = #values > 0 and h[b] / #values or 0 end
    return h
  end
  local hs, ymax = {}, 0.1
  for i, s in ipairs(summaries) do
    hs[i] = { hist(s.agent_eff), hist(s.death_eff) }
    for _, h in ipairs(hs[i]) do for _, v in ipairs(h) do ymax = math.max(ymax, v) end end
  end
  local right = doc:panel { x = 560, y = 40, w = 380, h = 290, xmin = 0, xmax = 1, ymin = 0,
    ymax = math.min(1, ymax * 1.1), title = "efficiency food / (food + poison)", xlabel = "efficiency",
    ylabel = "fraction", xfmt = function(v) return string.format("%d%%", 100 * v + 0.5) end }
  local rl = {}
  for i, s in ipairs(summaries) do
    local color = svg.colors[(i - 1) % #svg.colors + 1]
    for j, h in ipairs(hs[i]) do
      local pts = { { 0, 0 } }
      for b = 1, BINS do
        pts[#pts + 1] = { (b - 1) / BINS, h[b] }
        pts[#pts + 1] = { b / BINS, h[b] }
      end
      pts[#pts + 1] = { 1, 0 }
      right:curve(pts, { stroke = color, stroke_width = j == 1 and 2 or 1.5, stroke_dasharray = j == 2 and "5,3" or nil })
    end
    rl[#rl + 1] = { label = s.label .. " per agent", color = color }
    rl[#rl + 1] = { label = s.label .. " per death", color = color, dash = "5,3" }
  end
  right:legend(rl)
  local s1 = summaries[1]
  if s1 then
    doc:text(70, 385, string.format("%d envs x %d steps x %d run%s, eval seed %d; KM median survival: %s",
      s1.eval.num_envs, s1.eval.steps, s1.eval.runs, s1.eval.runs == 1 and "" or "s", s1.eval.seed,
      (function()
        local parts = {}
        for _, s in ipairs(summaries) do
          parts[#parts + 1] = s.label .. " " .. (s.km_median[1] and string.format("%g", s.km_median[1]) or "n.r.")
        end
        return table.concat(parts, ", ")
      end)()), { fill = "#555" })
  end
  return doc:render()
end

-- The 95% interval eval.json in folder has for key (its first result's ci[key]) -> lo, hi | nil
function evalfiles.interval(folder, key)
  local doc = json.decode(util.read_file(folder .. "/eval.json") or "")
  local r = type(doc) == "table" and type(doc.results) == "table" and doc.results[1]
  local ci = r and type(r.ci) == "table" and r.ci[key]
  if type(ci) ~= "table" or type(ci[1]) ~= "number" or type(ci[2]) ~= "number" then return nil end
  return ci[1], ci[2]
end

function evalfiles.point(folder, key)
  local doc = json.decode(util.read_file(folder .. "/eval.json") or "")
  local r = type(doc) == "table" and type(doc.results) == "table" and doc.results[1]
  local v = r and type(r.point) == "table" and r.point[key]
  if type(v) ~= "number" then return nil, folder .. "/eval.json has no " .. key end
  return v
end

return evalfiles

-- moonrl.dashboard.data - what the dashboard shows, read from the files runs
-- and sweeps write, never from the runs themselves (a run's training is not
-- touched; the live status and every action go through its control socket).
--
-- A served directory is walked as `moonrl ps` walks one (moonrl.run.dir.walk):
-- the directory itself, its subdirectories and theirs (3 levels), and every sweep
-- directory's (one with sweep.json) trial directories. A run directory is one
-- with a config.lua and a metrics.jsonl or a control/ folder. Links are not
-- followed (a link to a directory is not walked into, a run file that is a
-- link is not read), and every directory listed lies under a served root, so
-- nothing outside the served runs can be read: the page names a run by its id,
-- an entry of this list, never by a path.
--
--   data.new(roots) -> d                   roots: directories (refused when missing)
--   d:scan() -> runs, sweeps               (re)walk; runs[i] = {id, dir, name, sweep},
--                                          sweeps[i] = {id, dir, trials = {ids}}
--   d:run(id) -> run | nil                 a run of the last scan
--   d:sweep(id) -> sweep | nil
--   d:metrics(id, from) -> {rows, changes, total, reset}   rows from[+1] on (0-based count
--                                          the page has); the file is tailed (rundir.tail),
--                                          each byte read once; reset when it was cut
--   d:details(id) -> {config, summary, changes_lua, alerts, evals}
--   d:summary(id) -> summary.json decoded | nil
--   d:sweep_table(id) -> {metric, mode, method, trials = {...}, rungs = {...}, exploits = {...},
--                          lineage = {best, segments} | nil (PBT), front = front.json's,
--                          importance = importance.of_sweep's | {error}, charts = version of the charts}
--   d:sweep_chart(id, name) -> SVG text | nil, why   name: "parallel" (every trial with a result across
--                          the keys and the metric) or "importance" (bars), as moonrl sweep report draws them
--   data.CURVES                            {field, title} of each curve the page draws (sent with /api/runs)

local uv = require("luv")
local json = require("moonrl.formats.json")
local rundir = require("moonrl.run.dir")
local results = require("moonrl.sweep.results")
local front = require("moonrl.sweep.front")
local plot = require("moonrl.sweep.plot")
local pbt = require("moonrl.sweep.pbt")

local data = {}

data.CURVES = {   -- {metrics.jsonl field, the chart's title}: the page draws these, in this order
  { "episode_return_mean", "return (mean)" }, { "efficiency", "efficiency" }, { "deaths", "deaths" },
  { "episode_length_mean", "episode length (mean)" },
  { "policy_loss", "policy loss" }, { "value_loss", "value loss" }, { "entropy", "entropy" },
  { "approx_kl", "approx. KL" }, { "clip_fraction", "clip fraction" }, { "explained_variance", "explained variance" },
  { "grad_norm", "gradient norm" }, { "lr", "learning rate" }, { "sps", "agent-steps/s" },
  { "memory_peak_bytes", "memory peak" },
}

local MAX_TEXT = 256 * 1024    -- config.lua, changes.lua, train.log's tail: at most this much is sent
local DEPTH = 3

local D = {}
D.__index = D

local function lstat(p) return uv.fs_lstat(p) end
local function is_file(p) local st = lstat(p) return st and st.type == "file" end
local function is_dir(p) local st = lstat(p) return st and st.type == "directory" end

local subdirs = rundir.subdirs

function data.new(roots)
  local d = setmetatable({ roots = {}, runs = {}, by_id = {}, sweeps = {}, sweep_by_id = {}, tails = {}, fronts = {},
    reports = {} }, D)
  for _, r in ipairs(roots) do
    r = r:gsub("(.)/+$", "%1")
    local st = uv.fs_stat(r)
    if not st or st.type ~= "directory" then
      return nil, r .. " is not a directory (moonrl dashboard serves the runs under directories)"
    end
    d.roots[#d.roots + 1] = r
  end
  return d
end

function D:scan()
  local found, found_sweeps = rundir.walk(self.roots, { depth = DEPTH })
  local runs, sweeps = {}, {}
  for _, f in ipairs(found) do
    runs[#runs + 1] = { id = f.dir, dir = f.dir, name = f.dir:match("([^/]+)$"), sweep = f.sweep }
  end
  for _, sw in ipairs(found_sweeps) do
    local trials = json.array()
    for i, t in ipairs(sw.trials) do trials[i] = t end
    sweeps[#sweeps + 1] = { id = sw.dir, dir = sw.dir, trials = trials }
  end
  self.runs, self.sweeps, self.by_id, self.sweep_by_id = runs, sweeps, {}, {}
  for _, r in ipairs(runs) do self.by_id[r.id] = r end
  for _, s in ipairs(sweeps) do self.sweep_by_id[s.id] = s end
  return runs, sweeps
end

function D:run(id) return self.by_id[id] end
function D:sweep(id) return self.sweep_by_id[id] end

local function keep_curves(rec)
  local row = { update = rec.update, agent_steps = rec.agent_steps, wall_time = rec.wall_time }
  for _, c in ipairs(data.CURVES) do
    local k, v = c[1], rec[c[1]]
    if type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge then row[k] = v end
  end
  return row
end

-- Reads what was appended since the last call (nothing when the file is a link).
function D:_tail(run)
  local t = self.tails[run.id]
  if not t then
    t = { reader = rundir.tail(run.dir .. "/metrics.jsonl"), rows = {}, changes = json.array() }
    self.tails[run.id] = t
  end
  if not is_file(run.dir .. "/metrics.jsonl") then return t, false end
  local new = t.reader:read()
  local reset = t.reader.reset
  if reset then t.rows, t.changes = {}, json.array() end
  for _, rec in ipairs(new) do
    if rec.event == "change" or rec.event == "adopt" then
      t.changes[#t.changes + 1] = rec
    elseif rec.event == nil and type(rec.update) == "number" then
      t.rows[#t.rows + 1] = keep_curves(rec)
    end
  end
  return t, reset
end

function D:metrics(id, from)
  local run = self.by_id[id]
  if not run then return nil end
  local t, reset = self:_tail(run)
  from = math.max(0, math.floor(tonumber(from) or 0))
  if reset or from > #t.rows then from = 0 reset = true end
  local rows = json.array()
  for i = from + 1, #t.rows do rows[#rows + 1] = t.rows[i] end
  return { from = from, rows = rows, total = #t.rows, changes = t.changes, reset = reset or false }
end

-- A file of the run (a regular file, not a link), its last `max` bytes.
local function read_tail(path, max)
  if not is_file(path) then return nil end
  local f = io.open(path, "rb")
  if not f then return nil end
  local size = f:seek("end")
  f:seek("set", math.max(0, size - max))
  local text = f:read("*a")
  f:close()
  return text, size > max
end

local function decode_file(path)
  local text = read_tail(path, 4 * MAX_TEXT)
  if not text then return nil end
  local v = json.decode(text)
  return type(v) == "table" and v or nil
end

-- The run's summary.json (a regular file, not a link), decoded, or nil.
function D:summary(id)
  local run = self.by_id[id]
  return run and decode_file(run.dir .. "/summary.json")
end

function D:details(id)
  local run = self.by_id[id]
  if not run then return nil end
  local out = { id = run.id, dir = run.dir, name = run.name, sweep = run.sweep }
  out.config = read_tail(run.dir .. "/config.lua", MAX_TEXT)
  out.config_now = read_tail(run.dir .. "/config.now.lua", MAX_TEXT)
  out.changes_lua = read_tail(run.dir .. "/changes.lua", MAX_TEXT)
  out.summary = self:summary(id)
  local log = read_tail(run.dir .. "/train.log", MAX_TEXT) or ""
  out.alerts = json.array()
  for line in log:gmatch("[^\n]+") do
    if line:find("alert ", 1, true) then out.alerts[#out.alerts + 1] = line end
  end
  out.evals = json.array()
  if is_dir(run.dir .. "/eval") then
    for _, e in ipairs(subdirs(run.dir .. "/eval")) do
      local ev = decode_file(e .. "/eval.json")
      if ev then
        local rows = json.array()
        for _, r in ipairs(type(ev.results) == "table" and ev.results or {}) do
          rows[#rows + 1] = { label = r.label, agent_steps = r.agent_steps, point = r.point, ci = r.ci,
            deaths = r.deaths, food = r.food, poison = r.poison }
        end
        out.evals[#out.evals + 1] = { name = e:match("([^/]+)$"), command = ev.command, results = rows }
      end
    end
  end
  return out
end

-- A sweep: its trials, its scheduler's rung decisions (ASHA), PBT's exploits
-- and the best member's lineage, and the cost-aware front (the best value
-- within each budget of agent-steps and of training seconds, as `moonrl
-- sweep status` prints it). Reading every trial's curve for the front costs
-- a pass over their metrics.jsonl: done at most once per FRONT_MS per sweep.
local FRONT_MS = 5000

local function finite_or_nil(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge and v or nil end

function D:_front(sw, info)
  local c = self.fronts[sw.id]
  if c and uv.now() - c.at < FRONT_MS then return c.front end
  local ok, f = pcall(function()
    local list = plot.trials(sw.dir, info)
    return front.json(front.of_sweep(list, info))
  end)
  f = ok and f or { error = tostring(f) }
  self.fronts[sw.id] = { at = uv.now(), front = f }
  return f
end

function D:sweep_table(id)
  local sw = self.sweep_by_id[id]
  if not sw then return nil end
  local rec = results.read(sw.dir)
  local info = rec.info or {}
  local trials = json.array()
  local n = 0
  for i in pairs(rec.starts) do n = math.max(n, i) end
  for i in pairs(rec.results) do n = math.max(n, i) end
  for i = 1, n do
    local s, r = rec.starts[i], rec.results[i]
    if s or r then
      local dir = (r and r.dir) or (s and s.dir)
      local base = type(dir) == "string" and dir:match("([^/]+)/*$")
      local run_id = base and self.by_id[sw.dir .. "/" .. base] and (sw.dir .. "/" .. base) or nil
      trials[#trials + 1] = {
        run = run_id,
        trial = i, label = (r and r.label) or (s and s.label), params = (r and r.params) or (s and s.params),
        state = r and r.status or "running", value = r and r.value, steps = r and r.steps,
        error = r and r.error,
      }
    end
  end
  local rungs, exploits = json.array(), json.array()
  for _, ev in ipairs(rec.rungs) do
    rungs[#rungs + 1] = { trial = ev.trial, rung = ev.rung, steps = ev.steps, value = finite_or_nil(ev.value),
      decision = ev.decision, why = ev.why }
  end
  for _, ev in ipairs(rec.exploits) do
    exploits[#exploits + 1] = { trial = ev.trial, from = ev.from, update = ev.update, donor_update = ev.donor_update,
      old = ev.old, new = ev.new }
  end
  local lineage
  if info.method == "pbt" then
    local lin = pbt.lineage(sw.dir)
    if lin then
      lineage = { best = lin.best, label = lin.label, value = finite_or_nil(lin.value), segments = json.array() }
      for i, s in ipairs(lin.segments) do
        lineage.segments[i] = { trial = s.trial, from = s.from, to = finite_or_nil(s.to), params = s.params }
      end
    end
  end
  local rep, version = self:_report(sw, rec)
  return { id = sw.id, dir = sw.dir, metric = info.metric, mode = info.mode, method = info.method, trials = trials,
    rungs = rungs, exploits = exploits, lineage = lineage, front = self:_front(sw, info),
    importance = rep.importance, charts = version }
end

-- The sweep's importance and charts (moonrl.sweep.report.charts over the
-- trials with a result), worked out again only when results.jsonl changed.
function D:_report(sw, rec)
  local st = uv.fs_stat(sw.dir .. "/results.jsonl")
  local version = st and string.format("%d.%d.%d", st.size, st.mtime.sec, st.mtime.nsec) or "0"
  local c = self.reports[sw.id]
  if c and c.version == version then return c.value, version end
  rec = rec or results.read(sw.dir)
  local list = {}
  for _, r in pairs(rec.results) do list[#list + 1] = r end
  table.sort(list, function(a, b) return a.trial < b.trial end)
  local ok, v = pcall(require("moonrl.sweep.report").charts, sw.dir, list, rec.info or {})
  if not ok then v = { importance = { error = tostring(v) } } end
  self.reports[sw.id] = { version = version, value = v }
  return v, version
end

function D:sweep_chart(id, name)
  local sw = self.sweep_by_id[id]
  if not sw then return nil, "no sweep " .. json.encode(id) .. " among the served directories" end
  local rep = self:_report(sw)
  if name == "parallel" then return rep.parallel or nil, "no chart of the trials: " .. tostring(rep.importance.error) end
  if name == "importance" then
    if rep.bars then return rep.bars end
    return nil, "no importance: " .. tostring(rep.importance.error)
  end
  return nil, "no chart " .. json.encode(name) .. ": accepted parallel, importance"
end

return data

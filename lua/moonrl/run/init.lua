-- moonrl.run - one training run as Lua sees it (moonrl.train returns one).
--
-- The trainer works on its own thread (src/host/trainer_thread.c); this
-- object lives on the loop thread and turns the thread's events into sinks,
-- alerts, hooks, the plain log and the summary. Changes go the other way
-- through the thread's mailbox (src/host/run_channel.c) and take effect at the
-- next update boundary.
--
--   run.dir                    the run directory
--   run.describe               the engine's backend description, once started
--   run.last_checkpoint        path of the latest checkpoint written, or nil
--   run.hot_from               the first update that ran with the latest
--                              run:set() of an engine key (once the thread took it)
--   run:metrics()              the last update's metrics (nil before the first)
--   run:progress()             {phase = "warm-up" | "training" | the end's status, update,
--                              warmup_done, warmup_updates}: where it is, the warm-up included
--   run:wait()                 yields until the end; returns the summary
--   run:set(key, value[, source])  true | nil, err: hot keys only (schema hot ~= false),
--                              validated by config.set; an engine key applies
--                              from the next update the thread starts. Every
--                              change is recorded (moonrl.run.changes: train.log,
--                              metrics.jsonl, changes.lua) with `source`, a label
--                              saying who made it (default "run:set")
--   run.changes.list           the changes recorded so far (moonrl.run.changes)
--   run.live                   the live tweak file's watcher (cfg.live; moonrl.live)
--   run:set_many({key = value, ...}[, source])  true | nil, err: all or none, from the same update
--   run:get(key)               the value in force
--   run:pause() / run:resume() / run:stop([{checkpoint = false, reason = "..."}])
--                              reason: logged, and in the summary (stop_reason)
--   run:pause{at_steps = N or {N1, N2, ...}}  pause at each of those agent-step counts
--                              (at the end of the first update that reaches it: exact,
--                              whatever the loop is doing; run:resume() goes on to the
--                              next); replaces the marks set before. opts.pause_at_steps
--                              of moonrl.train sets them from the start
--   run:checkpoint([path])     from a coroutine: waits, returns the path written
--                              (nil, err if the run ended first); elsewhere: returns true
--   run:adopt(path[, source])  the weights, Adam moments and PopArt of that checkpoint
--                              from the next update (population-based training's
--                              exploit); from a coroutine: waits, returns that update
--   run:alive()                false once finished
--   run:summary()              the summary (nil while running)
--
-- Run directory: config.lua (the resolved config the run started with,
-- config.serialize, without dir; written once), config.now.lua (the config in
-- force, written by run:set and a resume that changed anything: what a resume
-- continues from), .config.as-written.lua (the last of the two as written:
-- what moonrl.resume tells an edit from), train.log (a plain
-- log, one line per event), changes.lua (moonrl.run.changes), the sinks' files
-- (metrics.jsonl, metrics.csv, events.out.tfevents.*), checkpoints/ and, while
-- the run goes, control/control.sock (moonrl.control.server: `moonrl ctl`, `moonrl ps`). The
-- few files written at start are small and written synchronously;
-- everything per update is asynchronous (the log here, the sinks' own writes).
--
-- A new run never reuses a directory that holds a run (moonrl.run.dir): it is
-- refused, or with opts.force moved aside to DIR.old-<time>.
--
-- Resuming (opts.resume, a moonrl.resume plan): the run keeps its directory;
-- metrics written after the checkpoint's update are cut (moonrl.run.trim_metrics),
-- the sinks and train.log append, and the thread loads the checkpoint before
-- its first update and runs no warm-up.
--
-- Warm-up updates (flagged `warmup = true`) reach train.log, the console and
-- run.warmup_metrics only: they are not progress, so not in the metrics files,
-- alerts or hooks.
--
-- Hooks (cfg.hooks) run on the loop thread right after the event and must not
-- block (moonrl.spawn inside a hook for longer work); how a failing one is
-- reported, counted and disabled is moonrl.run.hooks. A hook can be changed
-- while running (run:set("hooks.on_update", fn)).
--
-- Non-finite updates: the thread's policy (src/host/bad_updates.c) ends a
-- run after faults.max_bad_updates of them in a row; here each one adds to the
-- metrics (bad_updates: the run's total, bad_streak: in a row) and raises the
-- nonfinite alert.

local core = require("moonrl.core")
local uv = require("luv")
local config = require("moonrl.config")
local schema = require("moonrl.config.schema")
local engine = require("moonrl.engine")
local util = require("moonrl.util")
local rundir = require("moonrl.run.dir")
local sinks = require("moonrl.run.sinks")
local hooks = require("moonrl.run.hooks")
local live = require("moonrl.run.live")
local mkdir_p, write_file = util.mkdir_p, util.write_file

local Run = {}
Run.__index = Run

local SINKS = { "console", "jsonl", "csv", "tensorboard" }
local SUMMARY_FILE = "summary.json"
Run.SUMMARY_FILE = SUMMARY_FILE

local function traceback(e)
  return debug.traceback(tostring(e), 2)
end

local tasks = require("moonrl.runtime.tasks")
local shutdown = require("moonrl.runtime.shutdown")
local hardware = require("moonrl.runtime.hardware")
require("moonrl.runtime.signals").on_reread(live.reread)   -- SIGHUP re-reads the live tweak files

-- --------------------------------------------------------------- train.log

-- One timestamped line per event, written asynchronously in order.
local Log = {}
Log.__index = Log

local function open_log(path, append)
  local file = require("moonrl.runtime.asyncfile").open(uv, path, {
    on_error = function(msg) core.report("train.log", tostring(msg)) end, append = append,
  })
  return setmetatable({ file = file }, Log)
end

function Log:line(msg)
  self.file:write(os.date("%Y-%m-%d %H:%M:%S ") .. msg .. "\n")
end

function Log:close(cb)
  self.file:close(function() cb() end)
end

-- ------------------------------------------------------------------ start

-- What the trainer thread gets: the mr_config (built once, here), the warm-up
-- plan and the hot set ({bytes = mr_hot_params, tables = the per-update values
-- of function schedules}: engine.hot_set). Checked before anything is
-- written, so a config the engine refuses leaves no run directory behind.
local function prepare(cfg, resume_dir, steps_base)
  local c, err = engine.config(cfg)
  if not c then return nil, err end
  local device = cfg.device
  if device == "auto" then device = hardware.detect().gpus > 0 and "cuda" or "cpu" end
  if device == "cuda" and hardware.detect().gpus == 0 then
    return nil, "device = cuda (hardware = " .. tostring(cfg.hardware) .. "), but no usable GPU was found " ..
      "(or this build has no CUDA backend: see moonrl version); accepted here: device = cpu or auto, " ..
      "hardware = cpu, ci, debug or auto"
  end
  local w, werr = require("moonrl.config.warmup").normalize(cfg.warmup, {
    device = device, level = cfg.level, num_envs = cfg.env.num_envs })
  if not w then return nil, werr end
  -- What warm-up prepares is the engine's to do; it is told through the
  -- switches that enable it.
  local prep = {}
  for _, p in ipairs(w.prepare or {}) do prep[p] = true end
  if not prep.graphs then c.cuda.graphs = 0 end
  local ok, verr = engine.validate(c)
  if not ok then return nil, verr end
  local hot, tables = engine.hot_set(cfg, steps_base, c)
  if not hot then return nil, tables end
  -- cpu.conv = "auto": each conv layer's implementation, searched by the
  -- "algorithms" step or read from the cache (after the checks above, so a
  -- refused config searches nothing)
  -- conv: {notes, layers, from_record} (conv_algorithms.resolve's answers)
  local conv = { notes = {} }
  if device == "cpu" then
    local ca = require("moonrl.run.conv_algorithms")
    local recorded, rnote
    if resume_dir then recorded, rnote = ca.read_record(resume_dir) end
    conv.notes, conv.layers, conv.from_record = ca.resolve(cfg, c, prep.algorithms, recorded)
    if rnote then table.insert(conv.notes, 1, rnote .. ": chosen again") end
  elseif device == "cuda" then   -- cuda.conv = "auto" / "cudnn": the same search and cache for the GPU
    conv.notes = require("moonrl.run.conv_algorithms").resolve_cuda(cfg, c, prep.algorithms)
    conv.what = "cuda.conv = " .. tostring(cfg.cuda and cfg.cuda.conv)
  end
  return c, w, { bytes = hot, tables = tables }, conv, device
end

-- The config without its directory: a copy started as a new run gets a new one.
local function without_dir(cfg)
  local t = {}
  for k, v in pairs(cfg) do t[k] = v end
  t.dir = nil
  return t
end

-- config.lua: the config the run started with, written once when it starts
-- (not by a resume, not by changes).
-- Each is also copied to .config.as-written.lua: what a resume tells an
-- edit of the file from (moonrl.resume).
local function write_config_file(dir, name, text)
  local ok, err = write_file(dir .. "/" .. name, text)
  if not ok then return nil, err end
  return write_file(dir .. "/" .. require("moonrl.run.resume").WRITTEN_FILE, text)
end

function Run:_write_config()
  return write_config_file(self.dir, "config.lua", config.serialize(without_dir(self.cfg), {
    header = "moonrl " .. core.version() .. ": the resolved config the run in this directory started with,\n" ..
      os.date("%Y-%m-%d %H:%M:%S") .. ". Changes made while it trained are in changes.lua and, once there are\n" ..
      "any, the config in force after the last one is config.now.lua (what a resume continues from).\n" ..
      "No dir: started as a config (moonrl train this-file.lua), this is a new run in a new directory",
  }))
end

-- config.now.lua: the config in force now, after changes (run:set, ctl set,
-- live tweaks, a resume's --set); a resume continues from it.
function Run:_write_current()
  local upd = self.updates or 0
  return write_config_file(self.dir, "config.now.lua", config.serialize(without_dir(self.cfg), {
    header = "moonrl " .. core.version() .. ": the config in force in the run in this directory after its last " ..
      "change (" .. os.date("%Y-%m-%d %H:%M:%S") .. ", around update " .. upd .. ").\n" ..
      "It reproduces the run from the state of that change on, not from its start: the values\n" ..
      "before each change are in changes.lua, the config it started with is config.lua.\n" ..
      "moonrl train --resume continues from this file; edit it (or use --set) to change hot keys then",
  }))
end

function Run.start(cfg, opts)
  opts = opts or {}
  local rs = opts.resume
  local c, warmup, hot, conv, device = prepare(cfg, rs and rs.dir, rs and rs.steps_base)
  if not c then util.refuse(warmup, 3, "input") end
  local self = setmetatable({
    cfg = cfg, status = "starting", checkpoints = {}, warmup_metrics = {},
    hook_state = hooks.state(), sink_failed = {}, waiters = {}, ckpt_waiters = {}, adopt_waiters = {},
    bad_updates = 0, bad_streak = 0,
    alert_state = {}, alerts = {}, started_at = uv.hrtime(), updates = rs and rs.update or 0,
    warmup = warmup, resume_plan = rs, steps_base = rs and rs.steps_base or 0,
  }, Run)
  if opts.pause_at_steps ~= nil then
    local marks, merr = require("moonrl.run.options").pause_marks(opts.pause_at_steps, "pause_at_steps")
    if not marks then util.refuse(merr, 3, "input") end
    self.pause_marks = marks
    self:_next_mark(rs and rs.steps or 0)
  end

  -- a new run from given weights: checked before anything is written
  local init_params
  if not rs and cfg.policy and cfg.policy.init then
    local ierr
    init_params, ierr = engine.init_params(c, cfg.policy.init)
    if not init_params then util.refuse(ierr, 3, "input") end
  end

  local notes = { unpack(opts.notes or {}) }
  local dir, derr
  if rs then dir = rs.dir else dir, derr = rundir.new(cfg, opts.force, notes) end
  if not dir then util.refuse(derr, 3) end
  local ok, err = mkdir_p(dir .. "/checkpoints")
  if not ok then util.refuse(err, 3) end
  self.dir = dir
  -- One process at a time in a directory, before anything in it changes.
  local dirlock = require("moonrl.run.dirlock")
  self.lock, err = dirlock.take(dir)
  if not self.lock then util.refuse(err, 3) end
  local function fail(msg)
    self.lock:release()
    util.refuse(msg, 4)
  end
  os.remove(dir .. "/" .. SUMMARY_FILE)   -- an earlier session's: this one has none until it ends
  local stale = dirlock.clean_temporaries(dir)
  if #stale > 0 then
    notes[#notes + 1] = "removed " .. table.concat(stale, ", ") .. " from " .. dir ..
      "/checkpoints: a checkpoint an earlier process did not finish writing"
  end
  local trimmed, log_only
  if rs then
    trimmed, err = require("moonrl.run.trim_metrics").run_dir(dir, rs.update, rs.steps)
    if not trimmed then fail(err) end
    for _, l in ipairs(trimmed.lines) do
      if trimmed.dropped then notes[#notes + 1] = l else log_only = l end
    end
    if trimmed.missing_line then notes[#notes + 1] = trimmed.missing_line end
  end
  if rs then
    if rs.changed then ok, err = self:_write_current() end
  else
    ok, err = self:_write_config()
  end
  if not ok then fail(err) end
  self.log = open_log(dir .. "/train.log", rs ~= nil)
  self.log:line("moonrl " .. core.version() .. (rs and " resuming run " or " run ") .. dir)
  -- notes that only tell how a default was resolved (config/resolve.lua) reach
  -- the terminal with verbose = true only; train.log gets them all
  local info = opts.notes and require("moonrl.config.resolve").default_notes[opts.notes] or {}
  for _, n in ipairs(notes) do
    self.log:line("note: " .. n)
    if not opts.quiet and (opts.verbose or not info[n]) then io.stderr:write("moonrl: note: ", n, "\n") end
  end
  if log_only then self.log:line(log_only) end
  for _, n in ipairs(conv.notes) do
    self.log:line("conv algorithms (" .. (conv.what or "cpu.conv = auto") .. "): " .. n)
    if n:find("is damaged", 1, true) and not opts.quiet then io.stderr:write("moonrl: note: ", n, "\n") end
  end
  -- the run's own record of the choice, so a resume runs the same implementations
  -- (written where the choice was made now: a new run, or a resume without a usable record)
  if conv.layers and next(conv.layers) and not conv.from_record then
    local ca = require("moonrl.run.conv_algorithms")
    local cok, cerr = ca.write_record(dir, conv.layers)
    if not cok then fail("cannot write " .. dir .. "/" .. ca.RUN_FILE .. ": " .. tostring(cerr)) end
  end

  self.changes = require("moonrl.run.changes").new(self, rs and rs.update)
  self._sink_failed = function(name, err) self:_sink_error(name, err) end   -- sinks.each's on_error

  self.console = cfg.log.console and opts.console ~= false
  self.sinks = {}
  for _, name in ipairs(SINKS) do
    if cfg.log[name] and (name ~= "console" or self.console) then
      local okr, sink = pcall(function()
        local mod = require("moonrl.run.sinks." .. name)
        return mod.new(dir, cfg, {
          -- a rank under mpirun: its launcher relays stdout (a pty) and stderr (a pipe)
          -- apart, so a note on stderr lands on the bar's line; lines, not a bar
          uv = uv, is_tty = uv.guess_handle(1) == "tty" and engine.ranks() <= 1,
          total_updates = function(c) return engine.total_updates(c, rs and rs.steps_base) end,
          on_error = function(msg) self:_sink_error(name, msg) end,
          append = rs ~= nil, columns = trimmed and trimmed.csv_columns,
          resume_step = rs and rs.steps or nil, device = device,
        })
      end)
      if okr and sink then
        self.sinks[#self.sinks + 1] = { name = name, sink = sink }
        if name == "console" then self.console_sink = sink end
      else
        self:_sink_error(name, tostring(sink))
      end
    end
  end

  local started, handle = pcall(core.start, engine.bytes(c), {
    run_dir = dir,
    hot = hot.bytes,
    schedules = hot.tables,
    warmup_updates = self.warmup.updates,
    warmup_restore = self.warmup.restore,
    checkpoint_interval = cfg.log.checkpoint_interval,
    checkpoint_keep = cfg.log.checkpoint_keep,
    keep_gradients = cfg.log.histograms and true or false,   -- checkpoints hold the last step's gradient
    resume_checkpoint = rs and rs.checkpoint, resume_update = rs and rs.update, resume_kept = rs and rs.kept,
    steps_base = rs and rs.steps_base or 0,
    init_params = init_params,
    max_bad_updates = cfg.faults.max_bad_updates,
    inject_nan_at_update = cfg.debug.inject_nan_at_update,
    sync_updates = type(cfg.hooks and cfg.hooks.on_update) == "function",   -- Run:_sync_hooks
    pause_at = self.pause_marks and self.pause_marks[1] or 0,
  }, function(kind, ...) return self:_event(kind, ...) end)
  if not started then fail(handle) end
  self.handle = handle
  if cfg.debug.inject_nan_at_update > 0 then
    self.log:line("debug: a NaN is injected into the weights before update " .. cfg.debug.inject_nan_at_update ..
      " (debug.inject_nan_at_update)")
  end
  self.status = "running"
  if cfg.live then
    local okl, lerr = pcall(function() self.live = live.watch(self, cfg.live) end)
    if not okl then core.report("run " .. dir .. ": live tweaks", tostring(lerr)) end
  end
  local function note(msg)
    self.log:line("control: " .. msg)
    if not opts.quiet then io.stderr:write("moonrl: note: ", msg, "\n") end
  end
  local control, cerr = require("moonrl.control.server").start(self, { on_note = note })
  if control then self.control = control else note(cerr) end
  shutdown.add_run(self, function(msg) self:_note(msg) end)   -- a stop signal stops it
  return self
end

-- ---------------------------------------------------------------- events

function Run:_sink_error(name, msg)
  if self.sink_failed[name] then return end
  self.sink_failed[name] = true
  core.report("sink " .. name .. " failed (disabled for this run)", tostring(msg))
  self.log:line("sink " .. name .. " failed: " .. tostring(msg))
  for i, s in ipairs(self.sinks or {}) do
    if s.name == name then table.remove(self.sinks, i) break end
  end
end

-- A line for the person watching, without breaking the progress bar.
function Run:_say(text)
  if not self.console then return end
  local c = self.console_sink
  if c and c.message then
    local ok = pcall(c.message, c, text)
    if ok then return end
  end
  io.stdout:write(text, "\n")
  io.stdout:flush()
end

function Run:_hook(name, ...)
  hooks.call(self.hook_state, { cfg = self.cfg, dir = self.dir, update = self.updates,
    log = function(line) self.log:line(line) end }, name, ...)
end

-- A line in train.log (signals, stop reasons: moonrl.runtime.signals writes here).
function Run:_note(msg)
  if self.log and not self._summary then self.log:line(msg) end
end

local function fmt(x)
  if x == nil then return "-" end   -- absent: no episode ended in this update
  if type(x) ~= "number" then return tostring(x) end
  return util.fmt_number(tonumber(string.format("%.4g", x)))
end

function Run:_metrics(m)
  if m.nonfinite and m.nonfinite ~= 0 then
    self.bad_updates = self.bad_updates + 1
    self.bad_streak = self.bad_streak + 1
  else
    self.bad_streak = 0
  end
  m.bad_updates, m.bad_streak = self.bad_updates, self.bad_streak
  self.last = m
  self.updates = m.update
  if self.control then self.control:metrics(m) end
  sinks.each(self.sinks, "update", self._sink_failed, m)
  if (m.update % (self.cfg.log.interval or 1)) == 0 then
    self.log:line(string.format("update %d steps %d progress %.3f return %s efficiency %s entropy %s lr %s sps %s",
      m.update, m.agent_steps, m.progress, fmt(m.episode_return_mean), fmt(m.efficiency), fmt(m.entropy),
      fmt(m.lr), fmt(m.sps)))
  end
  local okm, alerts = pcall(function()
    return require("moonrl.run.alerts").check(m, self.cfg.alerts, self.alert_state)
  end)
  if not okm then
    if not self.alerts_broken then
      self.alerts_broken = true
      core.report("alerts failed (disabled for this run)", tostring(alerts))
    end
    alerts = nil
  end
  for _, a in ipairs(alerts or {}) do
    if a.kind == "nonfinite" and m.bad_streak > 0 then
      local max = self.cfg.faults.max_bad_updates
      a.message = a.message .. "; its optimizer step was skipped (" .. m.bad_streak .. " in a row" ..
        (max > 0 and ("; the run stops with its last good state at faults.max_bad_updates = " .. max) or "") .. ")"
    end
    self.alerts[#self.alerts + 1] = a
    self.log:line("alert " .. tostring(a.level) .. " " .. tostring(a.kind) .. ": " .. tostring(a.message))
    if self.console then
      self:_say("moonrl: " .. tostring(a.level) .. ": " .. tostring(a.message))
    else
      io.stderr:write("moonrl: ", tostring(a.level), ": ", tostring(a.message), "\n")
    end
    self:_hook("on_alert", a, self)
  end
  self:_hook("on_update", m, self)
  local crash = self.cfg.debug.crash_at_update
  if crash and crash > 0 and m.update >= crash then
    io.stderr:write("moonrl: debug.crash_at_update = ", crash, ": killing this process (SIGKILL) after update ",
      m.update, "\n")
    uv.kill(uv.os_getpid(), "sigkill")
  end
  local stats = hooks.episode_stats(m)
  if stats then self:_hook("on_episode_stats", stats, self) end
end

local handlers = {}

function handlers.started(self, describe)
  self.describe = describe
  self.log:line("engine: " .. describe)
  self:_say(table.concat(util.engine_lines(describe, "moonrl: engine: ", "  "), "\n"))   -- train.log: one line
  local rs = self.resume_plan
  if rs then
    local line = "resumed from update " .. rs.update .. " (checkpoint " .. rs.checkpoint .. ")"
    self.log:line(line)
    self:_say("moonrl: " .. line)
  end
  -- the warm-up is said before it runs (an update can take seconds): no silence before the first line
  local w = type(self.warmup) == "table" and tonumber(self.warmup.updates) or 0
  if w > 0 then
    self:_say(string.format("moonrl: warming up: %d untimed update%s%s", w, w == 1 and "" or "s",
      self.warmup.restore and (w == 1 and " (then the state before it is restored)" or " (then the state before them is restored)") or ""))
  end
end

-- The environment's declared episode counters by name (engine.env_evaluation),
-- looked up once: {name, ...}, or {} where they cannot be read.
local function counter_names(self)
  if self._counter_names == nil then
    local env = type(self.cfg) == "table" and type(self.cfg.env) == "table" and self.cfg.env or {}
    local ok, ev = pcall(engine.env_evaluation, env.lua and "lua" or env.name or "foraging", env.lua)
    self._counter_names = ok and type(ev) == "table" and ev.counters or {}
  end
  return self._counter_names
end

-- The metrics' first two counters (mr_metrics' food_per_episode and
-- poison_per_episode, foraging's names) also under the names the
-- environment declares: catch's caught_per_episode, reach's goal_per_episode.
local COUNTER_FIELDS = { "food_per_episode", "poison_per_episode" }
local function name_counters(self, m)
  for k, name in ipairs(counter_names(self)) do
    local f = COUNTER_FIELDS[k]
    if f and name .. "_per_episode" ~= f then m[name .. "_per_episode"] = m[f] end
  end
end

function handlers.metrics(self, bytes, warm)
  local m = engine.metrics(bytes)
  name_counters(self, m)
  if warm then
    m.warmup = true
    self.warmup_metrics[#self.warmup_metrics + 1] = m
    self.log:line(string.format("warm-up update %d: %.3f s", m.update, m.time_total))
    self:_say(string.format("moonrl: warm-up update %d: %.3f s", m.update, m.time_total))
    return
  end
  local ok, err = xpcall(self._metrics, traceback, self, m)
  -- the update's rows are queued in the sinks' files: the trainer writes a
  -- checkpoint after this update only once the files hold them (host.h,
  -- mb_written), so a SIGKILL just after a checkpoint loses no row; told
  -- even when handling the metrics failed, or every checkpoint would wait
  self:_when_written(function() if self.handle then self.handle:written() end end)
  if not ok then error(err, 0) end
end

-- cb() once every sink's file holds what it was given so far.
function Run:_when_written(cb)
  local left = 1
  local function one()
    left = left - 1
    if left == 0 then cb() end
  end
  for _, s in ipairs(self.sinks) do
    local f = s.sink.file
    if type(f) == "table" and f.flushed then
      left = left + 1
      f:flushed(one)
    end
  end
  one()
end

function handlers.warmup_done(self, n, restored)
  self.log:line("warm-up done: " .. n .. " update(s)" .. (restored and ", weights restored" or ""))
end

function handlers.checkpoint(self, path, update, requested)
  self.last_checkpoint = path
  self.checkpoints[#self.checkpoints + 1] = path
  self.log:line("checkpoint " .. path .. " (update " .. update .. ")")
  sinks.each(self.sinks, "checkpoint", self._sink_failed, path, update)
  self:_hook("on_checkpoint", path, self)
  if requested then
    local w = table.remove(self.ckpt_waiters, 1)
    if w then w(path) end
  end
end

function handlers.adopted(self, update, path, refusal)
  local w = table.remove(self.adopt_waiters, 1)
  -- the path and the source come from a request: control bytes are written
  -- \xNN in train.log, so a name cannot add a line of its own
  local function shown(s) return util.escape_bytes(s, true) end
  if refusal then
    local msg = "adopting " .. tostring(w and w.path or "a checkpoint") .. " refused: " .. refusal .. " (training goes on)"
    self.log:line(shown(msg))
    if w then w.wake(nil, msg) else core.report("run " .. self.dir, msg) end
    return
  end
  local source = w and w.source or "run:adopt"
  self.log:line("update " .. (update + 1) .. ": the weights, Adam moments and PopArt of " .. shown(path) ..
    " (" .. shown(source) .. ")")
  sinks.each(self.sinks, "event", self._sink_failed, { event = "adopt", update = update + 1, path = path, source = source })
  if w then w.wake(update + 1) end
end

function handlers.checkpoint_failed(self, msg)
  core.report("run " .. self.dir, msg .. " (training goes on)")
  self.log:line(msg)
  local w = table.remove(self.ckpt_waiters, 1)
  if w then w(nil, msg) end
end

function handlers.hot(self, from, refusal, seq)
  self.changes:hot(from, refusal, seq)
  if refusal then
    core.report("run " .. self.dir, refusal .. " (the previous values stay)")
    self.log:line(refusal)
  else
    self.hot_from = from + 1
    self.log:line("hot parameters in force from update " .. (from + 1))
  end
end

function handlers.paused(self, update)
  self.status = "paused"
  self.pauses = (self.pauses or 0) + 1   -- a waiter counts them: a pause can follow a resume within a tick
  local steps = self.last and self.last.agent_steps or self.steps_base
  local mark = self.pause_marks and self.pause_marks[1]
  if mark and steps >= mark then
    self.log:line("paused after update " .. update .. " (" .. util.fmt_number(steps) .. " agent-steps: the mark at " ..
      util.fmt_number(mark) .. ")")
    self:_next_mark(steps)
    if self.pause_marks[1] and self.handle then self.handle:pause_at(self.pause_marks[1]) end
    -- at a terminal, say how it goes on (a sweep's trials have no console)
    if self.console then
      io.stderr:write(string.format("\nmoonrl: paused at %s agent-steps (the mark at %s): moonrl ctl %s resume goes on\n",
        util.fmt_number(steps), util.fmt_number(mark), self.dir))
    end
  else
    self.log:line("paused after update " .. update)
  end
  local c = self.console_sink
  if c and c.paused then pcall(c.paused, c, true) end
end

function handlers.resumed(self, update)
  self.status = "running"
  self.resumes = (self.resumes or 0) + 1
  self.log:line("resumed after update " .. update)
  local c = self.console_sink
  if c and c.paused then pcall(c.paused, c, false) end
end

function handlers.note(self, line)
  self.log:line("note: " .. line)
  if self.console then io.stderr:write("moonrl: note: ", line, "\n") end
end

function handlers.error(self, msg)
  self.error = msg
  core.report("run " .. self.dir .. " failed", msg)
  self.log:line("error: " .. msg)
end

function handlers.finished(self, reason, updates, last)
  self.status = reason
  if self.control then self.control:close() end
  local secs = (uv.hrtime() - self.started_at) / 1e9
  local m = self.last or {}
  local rs = self.resume_plan
  local start_steps = m.agent_steps and rs and rs.steps or 0
  local hook_errors = hooks.failures(self.hook_state)
  self._summary = {
    status = reason, error = self.error, dir = self.dir, updates = updates,
    agent_steps = m.agent_steps or 0, seconds = secs,
    sps = ((m.agent_steps or 0) - start_steps) / math.max(secs, 1e-9),   -- of this session
    resumed_from = rs and rs.update or nil,
    checkpoint = last or self.last_checkpoint, checkpoints = self.checkpoints,
    metrics = self.last, describe = self.describe, warmup_updates = #self.warmup_metrics,
    hook_errors = hook_errors, alerts = #self.alerts, stop_reason = self.stop_reason,
    bad_updates = self.bad_updates,
  }
  self:_write_summary()
  local why = self.error or (reason == "stopped" and self.stop_reason)
  self.log:line(string.format("finished: %s after %d updates, %.1f s%s", reason, updates, secs,
    why and (" (" .. why .. ")") or ""))
  for _, w in ipairs(self.ckpt_waiters) do w(nil, "the run ended before the checkpoint (" .. reason .. ")") end
  self.ckpt_waiters = {}
  for _, w in ipairs(self.adopt_waiters) do w.wake(nil, "the run ended before it adopted " .. w.path .. " (" .. reason .. ")") end
  self.adopt_waiters = {}
  self.changes:finish()
  if self.live then self.live:close() end

  -- Files complete before anyone hears of the end: sinks, then the log.
  local pending = #self.sinks + 1
  local function closed()
    pending = pending - 1
    if pending > 0 then return end
    self.log:close(function()
      self.lock:release()
      self:_hook("on_finish", self._summary, self)
      shutdown.run_ended(self)
      self._ended = true
      local waiters = self.waiters
      self.waiters = {}
      for _, w in ipairs(waiters) do w(self._summary) end
    end)
  end
  for _, s in ipairs(self.sinks) do
    if s.sink.ended then pcall(s.sink.ended, s.sink, reason) end   -- guarded inside: reports its own failure
    local ok, err = pcall(s.sink.close, s.sink, closed)
    if not ok then
      core.report("sink " .. s.name .. " failed to close", tostring(err))
      closed()
    end
  end
  closed()
end

-- summary.json: the summary, for whoever did not start the run in this
-- process (a run of several ranks launched by moonrl.train{ranks =}, a
-- script reading a finished run). Written whole (a temporary file renamed);
-- a run that starts removes an earlier one, so one there is this session's.
function Run:_write_summary()
  local path = self.dir .. "/" .. SUMMARY_FILE
  local ok, err = pcall(function()
    local text = require("moonrl.formats.json").encode(self._summary) .. "\n"
    local okw, werr = util.write_file_atomic(path, text)
    if not okw then error(werr, 0) end
  end)
  if not ok then self.log:line("cannot write " .. SUMMARY_FILE .. ": " .. tostring(err)) end
end

function Run:_event(kind, ...)
  local h = handlers[kind]
  if h then return h(self, ...) end
end

-- ------------------------------------------------------------- user side

function Run:alive() return self._summary == nil and self.handle:alive() end
function Run:metrics() return self.last end
function Run:progress()
  local w = type(self.warmup) == "table" and tonumber(self.warmup.updates) or 0
  local phase = self._summary and self._summary.status or (self.last and "training") or
    (#self.warmup_metrics < w and "warm-up") or "training"
  return { phase = phase, update = self.last and self.last.update or self.updates or 0,
    warmup_done = #self.warmup_metrics, warmup_updates = w }
end
function Run:summary() return self._summary end

function Run:wait()
  if self._ended then return self._summary end
  return tasks.await("run:wait()", function(wake)
    self.waiters[#self.waiters + 1] = wake
  end)
end

function Run:get(key)
  return config.get(self.cfg, key)
end

function Run:set(key, value, source)
  if source ~= nil and type(source) ~= "string" then
    error("run:set: source must be a string (who made the change), got " .. type(source), 2)
  end
  if not self:alive() then return nil, "run:set: the run has finished" end
  local old = util.deepcopy(config.get(self.cfg, key))
  local ok, err = config.set(self.cfg, key, value, { running = true })
  if not ok then return nil, err end
  local e = schema.by_key[key]
  local seq
  if e and e.hot == "engine" then
    local okh, herr = pcall(function()
      local hot, tables = engine.hot_set(self.cfg, self.steps_base)
      if not hot then error(tables, 0) end
      seq = self.handle:set_hot(hot, tables)
    end)
    if not okh then
      config.set(self.cfg, key, old, { running = true })
      return nil, tostring(herr)
    end
  end
  self.changes:set(key, old, config.get(self.cfg, key), source, seq)
  if key == "hooks.on_update" then self:_sync_hooks() end
  local okw, werr = self:_write_current()   -- what a resume starts from
  if not okw then self.log:line(tostring(werr)) end
  return true
end

function Run:set_many(values, source)
  if type(values) ~= "table" then error("run:set_many: expected a table {key = value, ...}, got " .. type(values), 2) end
  if source ~= nil and type(source) ~= "string" then
    error("run:set_many: source must be a string (who made the change), got " .. type(source), 2)
  end
  if not self:alive() then return nil, "run:set: the run has finished" end
  local keys = util.sorted_keys(values)
  local trial = util.deepcopy(self.cfg)
  local engine_hot = false
  for _, k in ipairs(keys) do
    local ok, err = config.set(trial, k, values[k], { running = true })
    if not ok then return nil, err end
    local e = schema.by_key[k]
    engine_hot = engine_hot or (e and e.hot == "engine")
  end
  local seq
  if engine_hot then
    local okh, herr = pcall(function()
      local hot, tables = engine.hot_set(trial, self.steps_base)
      if not hot then error(tables, 0) end
      seq = self.handle:set_hot(hot, tables)
    end)
    if not okh then return nil, tostring(herr) end
  end
  for _, k in ipairs(keys) do
    local old = util.deepcopy(config.get(self.cfg, k))
    config.set(self.cfg, k, values[k], { running = true })
    local e = schema.by_key[k]
    self.changes:set(k, old, config.get(self.cfg, k), source or "run:set_many", e and e.hot == "engine" and seq or nil)
  end
  if values["hooks.on_update"] ~= nil or type(values.hooks) == "table" then self:_sync_hooks() end
  local okw, werr = self:_write_current()   -- what a resume starts from
  if not okw then self.log:line(tostring(werr)) end
  return true
end

-- The update hand-shake (src/host/host.h, mb_sync): while an on_update hook
-- exists, the trainer starts update k+1 only after the loop has handled the
-- metrics of update k and run its hooks, so a run:set in the on_update hook
-- of update k is in force from update k+1 (without it the trainer would
-- already be running k+1, and the change would start at k+2). Runs without
-- an on_update hook keep the trainer running ahead of the loop.
function Run:_sync_hooks()
  if self.handle and self:alive() then
    self.handle:sync(type(self.cfg.hooks and self.cfg.hooks.on_update) == "function")
  end
end

-- the pause marks from `steps` on (those passed dropped)
function Run:_next_mark(steps)
  local marks = self.pause_marks
  while marks[1] and marks[1] <= steps do table.remove(marks, 1) end
end

function Run:pause(opts)
  if opts ~= nil and (type(opts) ~= "table" or opts.at_steps == nil) then
    error("run:pause: expected nothing or {at_steps = N or {N1, N2, ...}}, got " .. util.fmt_value(opts), 2)
  end
  if not self:alive() then return nil, "run:pause: the run has finished" end
  if not opts then
    self.handle:pause()
    return true
  end
  local marks, err = require("moonrl.run.options").pause_marks(opts.at_steps, "run:pause: at_steps")
  if not marks then error(err, 2) end
  self.pause_marks = marks
  self:_next_mark(self.last and self.last.agent_steps or self.steps_base)
  self.handle:pause_at(self.pause_marks[1] or 0)
  return true
end

function Run:resume()
  if not self:alive() then return nil, "run:resume: the run has finished" end
  self.handle:resume()
  return true
end

function Run:stop(opts)
  require("moonrl.run.options").check_stop(opts)
  if not self:alive() then return true end
  local ckpt = not (opts and opts.checkpoint == false)
  if opts and opts.reason and not self.stop_reason then
    self.stop_reason = opts.reason
    self.log:line("stop requested after update " .. self.updates .. ": " .. opts.reason ..
      (ckpt and " (the update in progress ends, then the final checkpoint)" or " (no final checkpoint)"))
  end
  self.handle:stop(ckpt)
  return true
end

function Run:checkpoint(path)
  if path ~= nil and type(path) ~= "string" then
    error("run:checkpoint: expected nil or a path, got " .. type(path), 2)
  end
  if not self:alive() then return nil, "run:checkpoint: the run has finished" end
  local co, is_main = coroutine.running()
  if co == nil or is_main then
    -- In a callback nobody can wait: fire and let on_checkpoint tell.
    self.ckpt_waiters[#self.ckpt_waiters + 1] = function() end
    self.handle:checkpoint(path or "")
    return true
  end
  return tasks.await("run:checkpoint()", function(wake)
    self.ckpt_waiters[#self.ckpt_waiters + 1] = wake
    self.handle:checkpoint(path or "")
  end)
end

-- Takes the learned state of another run's checkpoint (weights, Adam, PopArt;
-- this run keeps its environments, progress and hot keys) from the next
-- update: population-based training's exploit. From a coroutine: waits and
-- returns the update it is in force from (nil, err when refused).
function Run:adopt(path, source)
  if type(path) ~= "string" or path == "" then error("run:adopt: expected the path of a checkpoint, got " .. type(path), 2) end
  if source ~= nil and type(source) ~= "string" then
    error("run:adopt: source must be a string (who made the change), got " .. type(source), 2)
  end
  if not self:alive() then return nil, "run:adopt: the run has finished" end
  local st = uv.fs_stat(path)
  if not st then return nil, "run:adopt: no checkpoint file at " .. path end
  if st.type ~= "file" then
    return nil, "run:adopt: " .. path .. " " .. util.file_kind(st, "a checkpoint file") ..
      "; accepted: a checkpoint file"
  end
  local function post(wake)
    self.adopt_waiters[#self.adopt_waiters + 1] = { path = path, source = source, wake = wake }
    self.handle:adopt(path)
  end
  local co, is_main = coroutine.running()
  if co == nil or is_main then   -- nobody can wait: train.log and metrics.jsonl tell
    post(function() end)
    return true
  end
  return tasks.await("run:adopt()", post)
end

function Run:__tostring()
  return "moonrl run " .. tostring(self.dir) .. " (" .. tostring(self.status) .. ")"
end

return Run

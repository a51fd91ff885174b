-- moonrl.sweep - scripted hyperparameter sweeps: many trials of one base
-- config, each a `moonrl train` of its own in a child process, watched from
-- this process's loop.
--
--   local sweep = moonrl.sweep {
--     base = "my_experiment.lua",              -- a config file or table (layered as moonrl.train does)
--     sets = { "total_steps=1e6" },            -- optional --set strings over the base
--     space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 1e-3), ["env.num_envs"] = moonrl.grid{ 64, 128 } },
--     method = "random",     -- "grid" | "random" | "tpe" | function(history, ctx) -> point | nil
--     trials = 16, parallel = 2, metric = "efficiency", mode = "max",
--     scheduler = moonrl.asha{ grace_steps = 2e5, reduction = 3 },   -- optional
--     dir = "runs/lr_sweep",
--   }
--   sweep:wait()                   -- yields like run:wait(); returns the summary
--   print(sweep:table())
--
-- What a sweep does
--   - Resolves the base once and every trial's config (base + point + its
--     seed + its directory) before anything starts: a config error in the
--     base or in any point is raised then, naming the trial and the key. A
--     point a method function proposes is checked when proposed; a bad one is
--     recorded as a failed trial and the sweep goes on.
--   - Runs each trial as `moonrl train DIR/trial-NNN.lua --dir DIR/trial-NNN
--     --no-eval` through an executor (local_executor.lua: child processes;
--     its header is the interface; slurm_executor.lua: Slurm array tasks), at
--     most `parallel` at once. Its stdout and stderr go to
--     DIR/trial-NNN/output.log. With Slurm, every trial known up front goes
--     in one `sbatch --array=...%parallel`; a method function's proposals go
--     as places free up; tasks an earlier sweep process left queued or
--     running are followed again, not submitted twice.
--   - Reads each trial's metrics.jsonl as it grows (every poll_ms): its curve
--     of the metric, and the scheduler's rungs (moonrl.sweep.asha); a trial
--     the scheduler drops is stopped through its normal stop path (SIGINT:
--     the update in progress, a final checkpoint).
--   - A trial that exits non-zero or by a signal (a crash, the OOM killer) is
--     recorded as failed with its exit status and its last output lines; one
--     past time_limit seconds is stopped (SIGINT, then SIGKILL after
--     kill_grace seconds) and recorded as failed. The sweep goes on.
--   - Appends every start, rung decision and result to DIR/results.jsonl
--     (moonrl.sweep.results) and rewrites DIR/best.lua, the best trial's
--     resolved config as a runnable file, whenever the best changes; at the
--     end writes DIR/plots/*.svg (moonrl.sweep.plot; front.svg: the best
--     result within each budget, moonrl.sweep.front).
--   - Re-running the same script resumes: trials with a result are not run
--     again; trials that were running resume from their newest checkpoint
--     (`moonrl train --resume DIR/trial-NNN`), or start again without one; a
--     trial still running (a killed sweep process leaves them: its run
--     directory's lock is held) is followed again (local executor: follow),
--     its end seen when the lock is free (finished: done; else resumed).
--   - sweep.json keeps the definition (space, method and its tpe/pbt options,
--     seed, trials, resolved base) and `command`, the `moonrl run SCRIPT ARGS` that
--     made it (what `moonrl train --resume DIR` points to); a re-run with another
--     definition is refused with the differences, unless `extend = true`.
--   - SIGINT / SIGTERM to this process stop every trial with its final
--     checkpoint (they are not results: a re-run resumes them), then exit
--     with 128 + N.
--
-- Options (besides those above): seed (the sweep seed; trial i's config seed
-- is space.trial_seed(seed, i); default the base config's seed), hardware,
-- level (as moonrl.train's), time_limit (seconds per trial; 0 = none),
-- kill_grace (seconds between a stop and SIGKILL, default 30), smooth (the
-- metric of a trial is the mean of its last `smooth` values, default 1),
-- poll_ms (default 500), console (false: no progress lines), executor
-- ("local", "slurm", moonrl.slurm{...} or an executor object), hooks = { on_trial_start = fn(trial),
-- on_trial_result = fn(result, trial) (done or stopped), on_trial_failed =
-- fn(result, trial) }, run on the loop (errors are reported, the sweep goes on),
-- extend (true: a re-run may change the definition), dashboard (true: the
-- sweep's directory served live while it goes, moonrl.dashboard), metric = "eval.<key>"
-- (each trial ends in its evaluation; its value is eval.json's point[key]),
-- repeats (each point run
-- with that many seeds, trial i running point results.setting_of(i); the summary's
-- `settings` is results.settings of the results), method = "tpe" with tpe =
-- {startup =, gamma =, candidates =} (a Tree-structured Parzen Estimator
-- proposes each trial from the results so far: moonrl.sweep.tpe), budget
-- (agent-steps in all, for random, tpe or a method function), finish (agent-steps:
-- the best trial trains on by this many once the search ended; trials.lua's
-- Sweep:_start_finish; finish_schedules = "constant" | "base": whether the finish
-- anneals the swept keys the base schedules, Sweep:_finish_schedule_sets), command (the command that runs this sweep again, for
-- sweep.json; default the `moonrl run SCRIPT ARGS` that runs it).
--
-- The sweep object
--   sweep.dir, sweep.trials (list), sweep.status ("running" | "done" | "stopped")
--   sweep:wait() -> { status, results = sorted results, best = result | nil }
--   sweep:results() -> the results so far, best first
--   sweep:best() -> the best result so far | nil
--   sweep:table() -> text: every trial, sorted by the metric
--   sweep:stop([{reason =}]) -> stops every trial (final checkpoints), starts no more

local core = require("moonrl.core")
local uv = require("luv")
local util = require("moonrl.util")
local mkdir_p = util.mkdir_p
local space = require("moonrl.sweep.space")
local results = require("moonrl.sweep.results")
local definition = require("moonrl.sweep.definition")
local json = require("moonrl.formats.json")

local sweep = {}

local Sweep = {}
Sweep.__index = Sweep

local tasks = require("moonrl.runtime.tasks")
local shutdown = require("moonrl.runtime.shutdown")
local config = require("moonrl.config")

local NOT_SWEPT = { dir = "each trial has its own directory", hardware = "a profile is a layer: sweep the keys it sets",
  level = "a level is a layer: sweep the keys it sets", name = "the trials share the base's name", live = "trials have no live file" }

-- ------------------------------------------------------------------ files




-- The command that ran the script making this sweep (`moonrl run SCRIPT
-- ARGS`), for sweep.json: running it again resumes the sweep. nil outside
-- `moonrl run` (`moonrl sweep EXPERIMENT` gives its own: spec.command).
local function script_command()
  local a = rawget(_G, "arg")
  if type(a) ~= "table" or type(a[0]) ~= "string" then return nil end
  local words = { "moonrl", "run" }
  for i = 0, #a do words[#words + 1] = util.shell_word(a[i]) end
  return table.concat(words, " ")
end

local function tail_lines(path, n)
  local text = util.read_file(path) or ""
  local lines = {}
  for line in text:gmatch("[^\n]+") do
    line = line:gsub("\r", ""):gsub("^.*\r", "")
    lines[#lines + 1] = line
    if #lines > n then table.remove(lines, 1) end
  end
  return lines
end

local function point_text(params)
  local parts = {}
  for _, k in ipairs(util.sorted_keys(params or {})) do parts[#parts + 1] = k .. "=" .. results.fmt(params[k]) end
  return table.concat(parts, " ")
end

-- --------------------------------------------------------------- trials

local function trial_config(self, index, params)
  local cfg = util.deepcopy(self.base_cfg)
  for _, k in ipairs(util.sorted_keys(params)) do
    if NOT_SWEPT[k] then return nil, k .. " cannot be swept: " .. NOT_SWEPT[k] end
    local ok, err = config.set(cfg, k, params[k])
    if not ok then return nil, err end
  end
  local seed = params.seed or space.trial_seed(self.seed, index)
  config.set(cfg, "seed", seed)
  config.set(cfg, "dir", self:trial_dir(index))
  local ok, err = config.validate(cfg)
  if not ok then return nil, err end
  local okc, engine = pcall(require, "moonrl.engine")
  if okc then
    local c, cerr = engine.config(cfg)
    if not c then return nil, cerr end
    local okv, verr = engine.validate(c)
    if not okv then return nil, verr end
  end
  return cfg, seed
end

function Sweep:label(index) return string.format("trial-%03d", index) end
function Sweep:trial_dir(index) return self.dir .. "/" .. self:label(index) end

local function new_trial(self, index, params)
  local t = { index = index, label = self:label(index), params = params, dir = self:trial_dir(index),
    status = "pending", curve = {} }
  t.cfg_path = self.dir .. "/" .. t.label .. ".lua"
  local cfg, seed = trial_config(self, index, params)
  if cfg then t.cfg, t.seed = cfg, seed else t.config_error = seed end
  return t
end

-- ----------------------------------------------------------------- start

-- A shipped experiment's name as base and no space: its default space
-- (moonrl.sweep.spaces) -> the spec to use, the experiment's name or nil.
local function with_default_space(spec)
  if type(spec) ~= "table" or spec.space ~= nil or type(spec.base) ~= "string" then return spec, nil end
  local fh = io.open(spec.base, "rb")   -- a file of the user's own of that name is not the shipped one
  if fh then fh:close() end
  if fh and not spec.base:find("configs/experiments/", 1, true) and not spec.base:find("configs/default.lua", 1, true) then
    return spec, nil
  end
  if not require("moonrl.config.load").experiment_path(spec.base) then return spec, nil end
  local spaces = require("moonrl.sweep.spaces")
  local sp = spaces.of(spec.base)
  if not sp then return spec, nil end
  local out = {}
  for k, v in pairs(spec) do out[k] = v end
  out.space = sp
  if out.metric == nil then out.metric = spaces.metric(spec.base) end
  return out, spaces.name_of(spec.base)
end

-- sweep.start(spec[, opts]) -> sweep. opts.dashboard: function(what, dir) ->
-- a server (with :close()) | nil, which serves the sweep's directory when
-- spec.dashboard is true (moonrl.sweep gives moonrl.dashboard.serve_for: the
-- dashboard reads sweeps, so a sweep does not load it).
function sweep.start(spec, opts)
  local default_space
  spec, default_space = with_default_space(spec)
  local o = definition.check(spec)
  local self = setmetatable(o, Sweep)
  self.space = spec.space or {}
  self.default_space = default_space
  local keys, serr = space.check(self.space)
  if not keys then error("moonrl.sweep: " .. serr, 2) end
  self.keys = keys
  for _, k in ipairs(keys) do
    if NOT_SWEPT[k] then error("moonrl.sweep: space: " .. k .. " cannot be swept: " .. NOT_SWEPT[k], 2) end
    local _, gerr = config.get({}, k)
    if gerr then error("moonrl.sweep: space: " .. gerr, 2) end
  end

  -- the base, resolved as moonrl.train would
  local base_cfg, notes = require("moonrl.run.start").resolve(spec.base, { sets = spec.sets, hardware = spec.hardware, level = spec.level })
  if not base_cfg then error("moonrl.sweep: base config: " .. tostring(notes), 2) end
  self.base_cfg, self.notes = base_cfg, notes
  self.base_cfg.dir = nil
  -- trials serve no dashboard of their own: the sweep's (dashboard = true) shows them all
  self.base_dashboard, self.base_cfg.dashboard = self.base_cfg.dashboard, false
  self.seed = self.seed or base_cfg.seed
  self.dir = (spec.dir or ("runs/" .. base_cfg.name .. "-sweep")):gsub("(.)/+$", "%1")
  self.scheduler = spec.scheduler
  if self.scheduler then self.scheduler.mode = self.mode end

  if self.method == "tpe" then
    -- TPE (moonrl.sweep.tpe) proposes through the method-function path; sweep.json names it "tpe".
    -- Trials proposed and not finished yet count as bad points (its constant liar).
    self.method_name = "tpe"
    -- with ASHA, the model is fitted on the largest budget with enough values (BOHB-style: tpe.lua)
    local levels = self.scheduler and self.scheduler.recorded and function()
      local out, finished = {}, {}
      for _, r in ipairs(self.done_results) do
        if r.status == "done" and r.value ~= nil then finished[#finished + 1] = { params = r.params, value = r.value, status = "done", trial = r.trial } end
      end
      out[1] = finished
      local ks = {}
      for k in pairs(self.scheduler.recorded) do ks[#ks + 1] = k end
      table.sort(ks, function(a, b) return a > b end)
      for _, k in ipairs(ks) do
        local level = {}
        for id, v in pairs(self.scheduler.recorded[k]) do
          local t = self.trials_list[id]
          if t then level[#level + 1] = { params = t.params, value = v, status = "done", trial = id } end
        end
        table.sort(level, function(a, b) return a.trial < b.trial end)
        out[#out + 1] = level
      end
      return out
    end or nil
    self.method = require("moonrl.sweep.tpe").method(self.tpe, function(index)
      local busy = {}
      for i = 1, index - 1 do
        local t = self.trials_list[i]
        if t and not t.result then busy[#busy + 1] = t.params end
      end
      return busy
    end, levels)
  end
  if self.method == "random" and self.budget then
    -- a budget needs trials proposed one by one: random search's own points (space.point), through the
    -- method-function path; sweep.json names it "random"
    self.method_name = "random"
    self.method = function(_, ctx) return ctx.sample() end
  end
  if self.method == "grid" or self.method == "random" or self.method == "pbt" then
    local size = space.grid_size(self.space, self.method == "pbt" and "random" or self.method)
    self.grid_size = size
    if self.method == "grid" then self.trials = self.trials or size
    elseif not self.trials then error("moonrl.sweep: trials is missing: how many points to draw (method = \"random\")", 2) end
    -- repeats: each point runs that many times with seeds of its own (results.setting_of)
    self.trials = self.trials * self.repeats
  elseif not self.trials then
    error("moonrl.sweep: trials is missing: the most trials the method function may propose", 2)
  end

  -- what an earlier run of this sweep left
  local prev = results.read(self.dir)
  self.prev = prev
  -- an edited definition is refused (its trials would not be those of the
  -- results so far) unless the sweep is to be extended
  self.definition = definition.of(self)
  local old_def = prev.info and prev.info.definition
  if type(old_def) == "table" and (next(prev.starts) ~= nil or next(prev.results) ~= nil) then
    local changes = definition.changes(old_def, self.definition)
    if #changes > 0 and not self.extend then
      util.refuse("moonrl.sweep: " .. self.dir .. " holds a sweep with another definition (its sweep.json); what changed:\n  " ..
        table.concat(changes, "\n  ") .. "\nNothing was started. To extend that sweep with this definition (its results " ..
        "stand; trials already started keep their points), set extend = true in the sweep table; for a new sweep, " ..
        "give it another dir.", 2)
    end
    self.extended = changes
  end

  -- every point known up front is checked before anything starts
  self.trials_list = {}
  local errs = {}
  if type(self.method) ~= "function" then
    for i = 1, self.trials do
      local params = prev.starts[i] and prev.starts[i].params or
        space.point(self.space, self.method == "pbt" and "random" or self.method, self.seed,
          results.setting_of(i, self.repeats))
      local t = new_trial(self, i, params)
      if t.config_error and not prev.results[i] then
        errs[#errs + 1] = t.label .. " (" .. point_text(params) .. "): " .. t.config_error:gsub("\n", "; ")
      end
      self.trials_list[i] = t
    end
  else
    for i, st in pairs(prev.starts) do self.trials_list[i] = new_trial(self, i, st.params or {}) end
  end
  if #errs > 0 then
    local n = #errs
    while #errs > 5 do errs[#errs] = nil end
    error("moonrl.sweep: config error in " .. n .. " of the trials; nothing was started:\n  " ..
      table.concat(errs, "\n  ") .. (n > 5 and ("\n  ... and " .. (n - 5) .. " more") or ""), 2)
  end

  local ok, merr = mkdir_p(self.dir)
  if not ok then error("moonrl.sweep: " .. merr, 2) end
  local space_info = {}
  for _, k in ipairs(keys) do
    local d = self.space[k]
    local dist = space.is_dist(d)
    -- the declared ranges: the report's importance and the dashboard's parallel axes scale by them
    space_info[k] = { text = space.describe(d), log = dist and d.kind == "loguniform" or nil, kind = dist and d.kind or "constant",
      lo = dist and d.lo or nil, hi = dist and d.hi or nil, values = dist and d.values or nil }
  end
  local sched = self.scheduler
  results.write_info(self.dir, {
    metric = type(self.metric) == "string" and self.metric or "<function>", mode = self.mode,
    method = self.definition.method, trials = self.trials,
    parallel = self.parallel, seed = self.seed, space = space_info, base = type(spec.base) == "string" and spec.base or json.null,
    scheduler = sched and sched.describe and sched:describe() or json.null,
    executor = type(spec.executor) == "table" and (spec.executor.name or "custom") or spec.executor or "local",
    smooth = self.smooth, moonrl = core.version(), definition = self.definition, repeats = self.repeats,
    command = spec.command or script_command() or json.null,
  })
  for _, c in ipairs(self.extended or {}) do self:say("extended: " .. c) end

  if spec.executor == nil or spec.executor == "local" then
    self.executor = require("moonrl.sweep.local_executor").new()
  elseif type(spec.executor) == "table" and (type(spec.executor.start) == "function" or type(spec.executor.start_array) == "function") then
    self.executor = spec.executor
  elseif spec.executor == "slurm" then
    self.executor = require("moonrl.sweep.slurm_executor").new({})
  else
    error("moonrl.sweep: executor must be \"local\", \"slurm\", moonrl.slurm{...} or an executor object, got " ..
      util.fmt_value(spec.executor), 2)
  end
  -- Slurm tasks an earlier sweep process submitted that are still queued or
  -- running are followed again, not submitted a second time
  if self.executor.adopt then
    local ids, by_id = {}, {}
    for i, st in pairs(prev.starts) do
      if not prev.results[i] and type(st.job) == "string" then ids[#ids + 1] = st.job by_id[st.job] = i end
    end
    if #ids > 0 then
      self.adoptable = {}
      for id in pairs(self.executor:adopt(ids)) do
        if by_id[id] then self.adoptable[by_id[id]] = id end
      end
    end
  end

  if self.method == "pbt" then self.pbt_ctl = require("moonrl.sweep.pbt").new(self, self.pbt) end
  self.status, self.running, self.waiters, self.started_at = "running", {}, {}, uv.hrtime()
  self.done_results = {}
  -- results of the earlier run stand; its rung decisions too
  for i, r in pairs(prev.results) do
    local t = self.trials_list[i] or new_trial(self, i, r.params or {})
    self.trials_list[i] = t
    t.status, t.value, t.steps, t.result = r.status, r.value, r.steps, r
    self.done_results[#self.done_results + 1] = r
  end
  if sched then
    for _, ev in ipairs(prev.rungs) do sched:record(ev.trial, ev.rung, ev.value) end
  end
  local n_prev = #self.done_results
  self:say(string.format("%s: %d trial(s), %d at once, %s over %s, %s executor, %s%s", self.dir, self.trials, self.parallel,
    self.method_name or (type(self.method) == "string" and self.method or "method function"), #keys > 0 and table.concat(keys, ", ") or "nothing",
    self.executor.name or "executor", sched and sched.describe and sched:describe() or "no early stopping",
    n_prev > 0 and string.format("; resuming: %d result(s) read back from results.jsonl", n_prev) or ""))
  if self.default_space then
    self:say("space: the default space of the " .. self.default_space .. " experiment (moonrl.sweep.spaces; docs/sweeps.md)")
  end
  for _, n in ipairs(notes or {}) do
    if not n:match("^budget:") then self:say("note: " .. n) end   -- the base's budget is not the trials'
  end
  if self.base_dashboard and not self.dashboard then
    self:say("note: the base's dashboard = true is not the trials': give the sweep dashboard = true to serve them all")
  end
  if self.dashboard then
    local serve = opts and opts.dashboard
    if serve then self.dashboard_server = serve("the sweep", self.dir)
    else io.stderr:write("moonrl: dashboard: the sweep ", self.dir, " goes on without one: no dashboard given to sweep.start\n") end
  end
  shutdown.track(self, { note = function(msg) self:say(msg) end, abort = function() self:_abort() end })
  self.starting = true
  self:_fill()
  self.starting = false
  self:_check_end()
  return self
end

-- ------------------------------------------------------------- display

function Sweep:say(line)
  if not self.console then return end
  if self.tty and self.drawn then io.stdout:write("\r\27[K") end
  io.stdout:write("sweep: ", line, "\n")
  io.stdout:flush()
  self.drawn = false
end

-- pending: the trials proposed and not started, and the slots up to `trials` that will be, unless
-- the method is done or a budget decides how many run (then `trials` is only a cap)
function Sweep:counts()
  local c = { running = 0, done = 0, failed = 0, stopped = 0, pending = 0 }
  local last = 0
  for i in pairs(self.trials_list) do if i > last then last = i end end
  for i = 1, (self.method_done or self.budget) and last or math.max(self.trials, last) do
    local t = self.trials_list[i]
    local s = t and t.status or "pending"
    c[s] = (c[s] or 0) + 1
  end
  return c
end

function Sweep:progress_line()
  local c = self:counts()
  local best = self:best()
  local metric = type(self.metric) == "string" and self.metric or "metric"
  return string.format("%s%d running, %d done, %d failed, %d stopped, %s%d pending%s; best: %s",
    c.queued and (c.queued .. " queued, ") or "", c.running, c.done, c.failed, c.stopped, c.interrupted and (c.interrupted .. " interrupted, ") or "", c.pending,
    self.budget and string.format(", budget: %s of %s agent-steps taken", results.thousands(self:_budget_used()), results.thousands(self.budget)) or "",
    best and (best.label .. " " .. metric .. " " .. results.fmt(best.value) .. " (" ..
      point_text(best.params) .. ")") or "-")
end

function Sweep:_show()
  if not self.console then return end
  if self.tty == nil then self.tty = uv.guess_handle(1) == "tty" end
  local line = self:progress_line()
  if self.tty then
    io.stdout:write("\r\27[Ksweep: ", line)
    self.drawn = true
  elseif line ~= self.last_line then
    io.stdout:write("sweep: ", line, "\n")
  end
  self.last_line = line
  io.stdout:flush()
end

-- --------------------------------------------------------------- hooks

function Sweep:_hook(name, ...)
  local fn = self.hooks[name]
  if not fn then return end
  local ok, err = xpcall(fn, function(e) return debug.traceback(tostring(e), 2) end, ...)
  if not ok then core.report("sweep " .. self.dir .. ": hooks." .. name .. " failed (the sweep goes on)", tostring(err)) end
end

local function public(t)
  return { index = t.index, label = t.label, params = t.params, seed = t.seed, dir = t.dir, status = t.status,
    value = t.value, steps = t.steps }
end

-- the trials from proposal to result: moonrl.sweep.trials
require("moonrl.sweep.trials").install(Sweep,
  { new_trial = new_trial, point_text = point_text, tail_lines = tail_lines, public = public })

-- ------------------------------------------------------------- user side

function Sweep:wait()
  if self._summary then return self._summary end
  return tasks.await("sweep:wait()", function(wake) self.waiters[#self.waiters + 1] = wake end)
end

function Sweep:results()
  return results.sorted(self.done_results, self.mode)
end

function Sweep:best()
  return results.best(self:results(), self.mode)
end

-- With repeats: each setting's finished trials, their metric's mean and
-- 95% interval, best first, and whether each is distinguishable from the
-- best (results.settings).
function Sweep:settings()
  return results.settings(self.done_results, self.mode, self.repeats)
end

function Sweep:table()
  local list = {}
  for _, r in ipairs(self.done_results) do list[#list + 1] = r end
  for i = 1, math.max(self.trials, #self.trials_list) do
    local t = self.trials_list[i]
    if t and not t.result then
      list[#list + 1] = { trial = t.index, label = t.label, status = t.status, value = t.value, steps = t.steps,
        params = t.params, seed = t.seed, dir = t.dir }
    end
  end
  return results.table(list, { metric = self.metric, mode = self.mode, keys = self.keys })
end

function Sweep:stop(opts)
  if self._ended or self.stopping then return true end
  self.stopping = (opts and opts.reason) or "sweep:stop()"
  self:say("stopping every trial (" .. self.stopping .. "): each ends its update in progress and writes a " ..
    "checkpoint; running the sweep again resumes them")
  -- queued trials first (Slurm): a running one that ends frees its place, and
  -- the queue would start the next before it is cancelled
  for _, t in ipairs(self.running) do if t.status == "queued" then self:_stop_trial(t) end end
  for _, t in ipairs(self.running) do self:_stop_trial(t) end
  self:_check_end()
  return true
end

-- A second stop signal: the process exits at once, and so do the trials
-- (killed: each keeps its last complete checkpoint, which a re-run resumes).
function Sweep:_abort()
  for _, t in ipairs(self.running) do
    if t.job and t.job:alive() then t.job:kill() end
  end
end

-- what moonrl's signal handlers ask of what they stop (moonrl.runtime.signals)
function Sweep:checkpoint() return true end

return sweep

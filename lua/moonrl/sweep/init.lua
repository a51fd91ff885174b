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
--     seed, trials, resolved base); a re-run with another one is refused with the differences,
--     unless `extend = true`.
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
-- proposes each trial from the results so far: moonrl.sweep.tpe).
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
local mkdir_p, write_file, rm_rf = util.mkdir_p, util.write_file, util.rm_rf
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

function sweep.start(spec)
  local o = definition.check(spec)
  local self = setmetatable(o, Sweep)
  self.space = spec.space or {}
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
    self.method = require("moonrl.sweep.tpe").method(self.tpe, function(index)
      local busy = {}
      for i = 1, index - 1 do
        local t = self.trials_list[i]
        if t and not t.result then busy[#busy + 1] = t.params end
      end
      return busy
    end)
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
    space_info[k] = { text = space.describe(d), log = space.is_dist(d) and d.kind == "loguniform" or nil }
  end
  local sched = self.scheduler
  results.write_info(self.dir, {
    metric = type(self.metric) == "string" and self.metric or "<function>", mode = self.mode,
    method = self.definition.method, trials = self.trials,
    parallel = self.parallel, seed = self.seed, space = space_info, base = type(spec.base) == "string" and spec.base or json.null,
    scheduler = sched and sched.describe and sched:describe() or json.null,
    executor = type(spec.executor) == "table" and (spec.executor.name or "custom") or spec.executor or "local",
    smooth = self.smooth, moonrl = core.version(), definition = self.definition, repeats = self.repeats,
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
  for _, n in ipairs(notes or {}) do
    if not n:match("^budget:") then self:say("note: " .. n) end   -- the base's budget is not the trials'
  end
  if self.base_dashboard and not self.dashboard then
    self:say("note: the base's dashboard = true is not the trials': give the sweep dashboard = true to serve them all")
  end
  if self.dashboard then self.dashboard_server = require("moonrl.dashboard").serve_for("the sweep", self.dir) end
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

function Sweep:counts()
  local c = { running = 0, done = 0, failed = 0, stopped = 0, pending = 0 }
  for i = 1, math.max(self.trials, #self.trials_list) do
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
  return string.format("%s%d running, %d done, %d failed, %d stopped, %s%d pending; best: %s",
    c.queued and (c.queued .. " queued, ") or "", c.running, c.done, c.failed, c.stopped, c.interrupted and (c.interrupted .. " interrupted, ") or "", c.pending, best and (best.label .. " " .. metric .. " " .. results.fmt(best.value) .. " (" ..
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

-- ------------------------------------------------------------ scheduling

function Sweep:_next()
  if self.stopping then return nil end
  -- trials of an earlier run that were running first (their checkpoints wait), then in order
  for i = 1, #self.trials_list do
    local t = self.trials_list[i]
    if t and t.status == "pending" and self.prev.starts[i] and not t.claimed then return t end
  end
  if type(self.method) ~= "function" then
    for i = 1, self.trials do
      local t = self.trials_list[i]
      if t.status == "pending" and not t.claimed then return t end
    end
    return nil
  end
  local index = #self.trials_list + 1
  if index > self.trials or self.method_done then return nil end
  local history = {}
  for _, r in ipairs(self.done_results) do history[#history + 1] = util.deepcopy(r) end
  table.sort(history, function(a, b) return a.trial < b.trial end)
  local ok, point = xpcall(self.method, function(e) return debug.traceback(tostring(e), 2) end, history, {
    index = index, seed = self.seed, space = self.space, mode = self.mode,
    sample = function() return space.point(self.space, "random", self.seed, index) end,
    running = #self.running,
  })
  if not ok then
    core.report("sweep " .. self.dir .. ": the method function failed (no more trials are proposed)", tostring(point))
    self.method_done = true
    return nil
  end
  if point == nil then self.method_done = true return nil end
  if type(point) ~= "table" then
    core.report("sweep " .. self.dir, "the method function returned " .. util.describe(point) ..
      ": expected a table { key = value } or nil (no more trials are proposed)")
    self.method_done = true
    return nil
  end
  local t = new_trial(self, index, point)
  self.trials_list[index] = t
  return t
end

function Sweep:_fill()
  if self.executor.start_array then return self:_fill_array() end
  while #self.running < self.parallel do
    local t = self:_next()
    if not t then break end
    t.claimed = true
    self:_start_trial(t)
  end
  self:_show()
end

-- An executor with a queue of its own (Slurm): every trial known now goes in
-- one array, throttled to `parallel` by the executor; a method function still
-- proposes only as many as there are free places, from the results so far.
-- Tasks of an earlier sweep process that are still queued or running are
-- followed again (executor:attach) rather than submitted twice.
function Sweep:_fill_array()
  if self.filling or self.stopping then return end
  self.filling = true
  local batch = {}
  while true do
    if type(self.method) == "function" and #self.running + #batch >= self.parallel then break end
    local t = self:_next()
    if not t then break end
    t.claimed = true
    local live = self.adoptable and self.adoptable[t.index]
    if live then
      self:_launched(t, self.executor:attach(live, self:_exec_spec(t, nil)), { adopted = true })
    else
      local spec, info = self:_prepare_trial(t)
      if spec then batch[#batch + 1] = { t = t, spec = spec, info = info } end
    end
  end
  if #batch > 0 then
    local specs = {}
    for i, b in ipairs(batch) do specs[i] = b.spec end
    local jobs, err = self.executor:start_array(specs, self:_array_opts())
    if not jobs and self.starting then
      -- the first submission (a wrong partition, no Slurm here): an error for
      -- the script, not failed trials that a re-run would not try again
      self.filling = false
      self:_close_dashboard()
      shutdown.untrack(self)
      error("moonrl.sweep: the trials could not be submitted: " .. tostring(err), 0)
    end
    for i, b in ipairs(batch) do
      if jobs then
        self:_launched(b.t, jobs[i], b.info)
      else
        b.t.status = "pending"
        self:_finish_trial(b.t, { status = "failed", error = err })
      end
    end
  end
  self.filling = false
  self:_show()
  self:_check_end()
end

-- What an array submission of trials is told (start_array's opts).
function Sweep:_array_opts()
  return { parallel = self.parallel, dir = self.dir, ranks = self.ranks, output = self.dir .. "/trial-%3a/output.log",
    name = "moonrl-" .. (self.base_cfg.name or "sweep") }
end

function Sweep:_start_trial(t)
  -- started by an earlier sweep process (killed) and still running: followed
  -- again, not started a second time (a resume would be refused by its lock)
  if self.prev.starts[t.index] and self.executor.follow and not t.config_error and not t.followed then
    t.followed = true
    local job = self.executor:follow(self:_exec_spec(t, nil), self.poll_ms)
    if job then return self:_launched(t, job, { adopted = true }) end
  end
  local spec, info = self:_prepare_trial(t)
  if not spec then return end
  local job, jerr
  if self.executor.start then
    job, jerr = self.executor:start(spec)
  else   -- an executor with a queue of its own (Slurm): an array of this one trial
    local jobs
    jobs, jerr = self.executor:start_array({ spec }, self:_array_opts())
    job = jobs and jobs[1]
  end
  if not job then
    t.status = "pending"
    return self:_finish_trial(t, { status = "failed", error = jerr })
  end
  self:_launched(t, job, info)
end

function Sweep:_exec_spec(t, argv)
  return {
    argv = argv, dir = t.dir, output = t.dir .. "/output.log", name = t.label, index = t.index, ranks = self.ranks,
    on_exit = function(exit) self:_exited(t, exit) end,
    on_running = function() self:_running(t) end,
  }
end

-- What the trial runs (its directory and config written), or nil when it was
-- settled here (a config error, or it had finished before an interruption).
function Sweep:_prepare_trial(t)
  if t.config_error then
    return self:_finish_trial(t, { status = "failed", error = "config error: " .. t.config_error })
  end
  local resume_ck
  if self.prev.starts[t.index] or t.restarting then
    local ck = require("moonrl.run.resume").newest(t.dir)
    if ck then resume_ck = ck end
  end
  local argv
  if resume_ck then
    t.resumed_steps = resume_ck.steps
    if t.resumed_steps >= t.cfg.total_steps then
      -- it had finished; only its result was not recorded
      self:_read_metrics(t)
      return self:_finish_trial(t, { status = "done" })
    end
    argv = self:_train_argv({ "train", "--resume", t.dir })
  else
    rm_rf(t.dir)   -- no checkpoint: nothing there is worth keeping
    local ok, err = mkdir_p(t.dir)
    if ok then
      local cfg = util.deepcopy(t.cfg)
      ok, err = write_file(t.cfg_path, config.serialize(cfg, {
        header = "moonrl sweep " .. self.dir .. ": " .. t.label .. " (" .. point_text(t.params) .. ", seed " .. t.seed .. ")",
      }))
    end
    if not ok then return self:_finish_trial(t, { status = "failed", error = err }) end
    argv = self:_train_argv({ "train", t.cfg_path, "--dir", t.dir })
  end
  mkdir_p(t.dir)
  local spec = self:_exec_spec(t, argv)
  if not resume_ck then   -- what a task a queue restarts (Slurm's requeue) runs once it has a checkpoint
    spec.resume_argv, spec.resume_dir = self:_train_argv({ "train", "--resume", t.dir }), t.dir
  end
  return spec, { resume_ck = resume_ck }
end

function Sweep:_launched(t, job, info)
  local resume_ck = info.resume_ck
  t.curve, t.tail = {}, results.tail(t.dir .. "/metrics.jsonl")
  t.output = t.dir .. "/output.log"
  t.started_at = uv.hrtime()
  t.status = job.queued and "queued" or "running"
  t.job = job
  self.running[#self.running + 1] = t
  results.append(self.dir, { event = "start", trial = t.index, label = t.label, params = t.params, seed = t.seed,
    dir = t.dir, resume = resume_ck and true or false, job = job.id, adopted = info.adopted or nil })
  if info.adopted then
    self:say(string.format("%s: following %s again (%s, %s by an earlier run of this sweep)",
      t.label, job.pid and job.id or ("Slurm job " .. job.id), point_text(t.params), job.pid and "started" or "submitted"))
  else
    self:say(string.format("%s %s: %s%s%s", t.label, resume_ck and "resumed" or (job.queued and "submitted" or "started"),
      point_text(t.params), resume_ck and (" (from update " .. resume_ck.update .. ")") or "",
      job.queued and (" (Slurm job " .. job.id .. ")") or ""))
  end
  self:_hook("on_trial_start", public(t))
  if not job.queued then self:_limit(t) end
  if not self.poll_timer then
    self.poll_timer = uv.new_timer()
    self.poll_timer:start(self.poll_ms, self.poll_ms, function() self:_poll() end)
  end
end

-- A queued trial (Slurm) got its node: its time limit counts from now.
function Sweep:_running(t)
  if t.status ~= "queued" then return end
  t.status = "running"
  t.started_at = uv.hrtime()
  self:_limit(t)
  self:_show()
end

function Sweep:_limit(t)
  if self.time_limit > 0 and not t.limit_timer then
    t.limit_timer = uv.new_timer()
    t.limit_timer:start(math.floor(self.time_limit * 1000), 0, function()
      t.timed_out = true
      self:_stop_trial(t)
    end)
  end
end

-- SIGINT (the run's own stop path), then SIGKILL after kill_grace seconds.
function Sweep:_stop_trial(t)
  if not t.job or not t.job:alive() or t.stop_sent then return end
  t.stop_sent = true
  t.job:stop()
  t.kill_timer = uv.new_timer()
  t.kill_timer:start(math.floor(self.kill_grace * 1000), 0, function()
    if t.job:alive() then
      t.killed = true
      t.job:kill()
    end
  end)
end

function Sweep:_read_metrics(t)
  t.tail = t.tail or results.tail(t.dir .. "/metrics.jsonl")
  local recs = t.tail:read()
  if t.tail.reset then t.curve = {} end
  for _, rec in ipairs(recs) do results.curve_add(t.curve, rec, self.metric) end
  local last = t.curve[#t.curve]
  if last then t.steps, t.updates = last.steps, last.update end
  t.value = results.curve_value(t.curve, self.smooth)
end

function Sweep:_poll()
  for _, t in ipairs({ unpack(self.running) }) do
    self:_read_metrics(t)
    self:_rungs(t)
  end
  if self.pbt_ctl then
    for _, t in ipairs({ unpack(self.running) }) do self.pbt_ctl:poll(t) end
  end
end

function Sweep:_rungs(t)
  local s = self.scheduler
  if not s or not t.steps or t.stop_sent then return end
  for _, k in ipairs(s:crossed(t.index, t.steps)) do
    local rung = s:rung_steps(k)
    if rung >= t.cfg.total_steps then break end   -- its budget ends there: nothing to save
    local value = results.value_at(t.curve, rung, self.smooth)
    local decision, why
    if t.resumed_steps and rung <= t.resumed_steps then
      s:record(t.index, k, value)   -- passed before the interruption: it went on then
      decision, why = "continue", "recorded on resume"
    else
      decision, why = s:decide(t.index, k, value)
    end
    results.append(self.dir, { event = "rung", trial = t.index, rung = k, steps = rung, value = value,
      decision = decision, why = why })
    if decision == "stop" then
      t.stop_why = why
      self:say(string.format("%s: stopping early (%s)", t.label, why))
      self:_stop_trial(t)
      return
    end
  end
end

function Sweep:_exited(t, exit)
  for i, r in ipairs(self.running) do
    if r == t then table.remove(self.running, i) break end
  end
  for _, name in ipairs({ "limit_timer", "kill_timer" }) do
    if t[name] then
      t[name]:stop()
      t[name]:close()
      t[name] = nil
    end
  end
  self:_read_metrics(t)
  if not t.stop_why and not t.timed_out then self:_rungs(t) end
  local complete = t.steps ~= nil and t.cfg ~= nil and t.steps >= t.cfg.total_steps
  if exit.requeue_lost and not complete and not (self.stopping or t.stop_why or t.timed_out) then
    -- the cluster requeued the task, and its restart ended without a run starting (the executor's
    -- error says how): not the trial's failure; it resumes from its last checkpoint, submitted anew
    self:say(string.format("%s: %s; resuming it from its checkpoint", t.label, tostring(exit.error)))
    t.status, t.job = "pending", nil
    self:_start_trial(t)
    return self:_check_end()
  end
  if exit.adopted then
    -- a trial an earlier sweep process started ended (its exit status is not
    -- ours to see): complete, or resumed from its last checkpoint
    if complete then exit = { code = 0, signal = 0 }
    elseif self.stopping or t.stop_why or t.timed_out then exit = { code = 130, signal = 0 }
    else
      self:say(string.format("%s: the process of an earlier run of this sweep ended after %s agent-steps; resuming it",
        t.label, results.thousands(t.steps or 0)))
      t.status, t.job = "pending", nil
      self:_start_trial(t)
      return self:_check_end()
    end
  end
  if self.pbt_ctl and self.pbt_ctl:revive(t, exit, complete) then return self:_check_end() end
  local clean = exit.code == 0 and exit.signal == 0
  local r = { exit_code = exit.code, signal = exit.signal ~= 0 and exit.signal or nil }
  if self.stopping and not clean and not t.stop_why and not t.timed_out then
    -- the sweep was interrupted: not a result; a re-run resumes this trial
    t.status = "interrupted"
    self:say(string.format("%s: interrupted after %s agent-steps (resumes when the sweep is run again)",
      t.label, results.thousands(t.steps or 0)))
    return self:_check_end()
  end
  if t.stop_why and not (clean and complete) then
    r.status, r.why = "stopped", t.stop_why
    if t.killed then r.why = r.why .. "; killed after kill_grace = " .. self.kill_grace .. " s" end
  elseif t.timed_out then
    r.status = "failed"
    r.error = string.format("time limit of %s s reached: stopped%s", util.fmt_number(self.time_limit),
      t.killed and (" and killed after kill_grace = " .. util.fmt_number(self.kill_grace) .. " s") or " with its final checkpoint")
  elseif clean then
    r.status = "done"
  else
    r.status = "failed"
    if exit.signal ~= 0 then
      r.error = "killed by signal " .. exit.signal .. " (" .. (exit.signal_name or "?"):upper() .. ")"
    else
      r.error = "exit code " .. exit.code
    end
  end
  if exit.state then r.slurm_state = exit.state end
  if r.status == "failed" and exit.error then r.error, r.reason = exit.error, exit.reason end
  if r.status == "failed" then r.log_tail = tail_lines(t.output, 12) end
  self:_finish_trial(t, r)
end

-- A trial's training ends in its evaluation only when the metric is one
-- (metric = "eval.<key>"); else --no-eval spares the time.
function Sweep:_train_argv(argv)
  if not self.eval_key then argv[#argv + 1] = "--no-eval" end
  return argv
end

-- metric = "eval.<key>": the value of a finished trial's own evaluation (the
-- final one moonrl train runs, the run's eval settings), or nil, why.
local function eval_value(dir, key)
  local evalfiles = require("moonrl.eval.files")
  local folder, ferr = evalfiles.newest(dir)
  if not folder then return nil, ferr end
  return evalfiles.point(folder, key)
end

function Sweep:_finish_trial(t, r)
  r.trial, r.label, r.params, r.seed, r.dir = t.index, t.label, t.params, t.seed, t.dir
  r.metric = type(self.metric) == "string" and self.metric or "<function>"
  if self.eval_key and r.status == "done" then
    local v, verr = eval_value(t.dir, self.eval_key)
    t.value = v
    if not v then r.note = "no evaluation to read: " .. tostring(verr) end
  end
  r.value, r.steps, r.updates = t.value, t.steps, t.updates
  r.seconds = t.started_at and (uv.hrtime() - t.started_at) / 1e9 or 0
  r.train_seconds = t.curve[#t.curve] and t.curve[#t.curve].seconds   -- every process's (results.lua)
  t.status, t.result = r.status, r
  local ok, err = results.append(self.dir, r)
  if not ok then core.report("sweep " .. self.dir, err) end
  self.done_results[#self.done_results + 1] = r
  if r.status == "failed" then
    self:say(string.format("%s failed: %s%s", t.label, r.error or "?",
      r.log_tail and #r.log_tail > 0 and ("; last output:\n    " .. table.concat(r.log_tail, "\n    ")) or ""))
    self:_hook("on_trial_failed", r, public(t))
  else
    self:say(string.format("%s %s: %s %s after %s agent-steps", t.label, r.status,
      r.metric, results.fmt(r.value), results.thousands(r.steps or 0)))
    self:_hook("on_trial_result", r, public(t))
  end
  local best = self:best()
  if best and best.trial == t.index and r.status ~= "failed" then self:_write_best(best) end
  if not self.stopping then self:_fill() end
  self:_check_end()
end

function Sweep:_write_best(best)
  local t = self.trials_list[best.trial]
  local cfg = config.load_file(best.dir .. "/config.lua")
  if type(cfg) ~= "table" then cfg = t and t.cfg and util.deepcopy(t.cfg) end
  if type(cfg) ~= "table" then return end
  cfg.dir = nil
  local metric = type(self.metric) == "string" and self.metric or "metric"
  write_file(self.dir .. "/best.lua", config.serialize(cfg, {
    header = "moonrl sweep " .. self.dir .. ": the best trial so far, " .. best.label .. " (" .. metric .. " " ..
      results.fmt(best.value) .. " after " .. results.thousands(best.steps or 0) .. " agent-steps; " ..
      point_text(best.params) .. "); `moonrl train " .. self.dir .. "/best.lua` trains it again",
  }))
end

function Sweep:_check_end()
  if #self.running > 0 or self._ended or self.filling then return end
  if not self.stopping and self:_next_available() then return end
  self._ended = true
  if self.poll_timer then
    self.poll_timer:stop()
    self.poll_timer:close()
    self.poll_timer = nil
  end
  self.status = self.stopping and "stopped" or "done"
  if not self.stopping then
    local ok, perr = pcall(function() return require("moonrl.sweep.plot").write(self.dir) end)
    if not ok then core.report("sweep " .. self.dir .. ": plots", tostring(perr)) end
  end
  if self.console then
    self:_show()
    if self.tty then io.stdout:write("\n") end
    self:say(string.format("%s %s after %.1f s: results in %s/results.jsonl%s", self.dir, self.status,
      (uv.hrtime() - self.started_at) / 1e9, self.dir, self:best() and (", best config " .. self.dir .. "/best.lua") or ""))
  end
  local summary = { status = self.status, results = self:results(), best = self:best(), dir = self.dir,
    settings = self.repeats > 1 and self:settings() or nil }
  if self.console and summary.settings then
    self:say(results.settings_text(summary.settings, { metric = self.metric, keys = self.keys }))
  end
  self._summary = summary
  self:_close_dashboard()
  shutdown.untrack(self)
  local waiters = self.waiters
  self.waiters = {}
  for _, w in ipairs(waiters) do w(summary) end
end

function Sweep:_close_dashboard()
  if self.dashboard_server then self.dashboard_server:close() end
end

-- whether a trial could still start (without proposing one)
function Sweep:_next_available()
  if type(self.method) == "function" then
    if self.method_done or #self.trials_list >= self.trials then
      for _, t in pairs(self.trials_list) do if t.status == "pending" and not t.claimed then return true end end
      return false
    end
    return true
  end
  for i = 1, self.trials do
    local t = self.trials_list[i]
    if t.status == "pending" and not t.claimed then return true end
  end
  return false
end

-- ------------------------------------------------------------- user side

function Sweep:wait()
  if self._summary then return self._summary end
  return tasks.await("sweep:wait()", function(wake) self.waiters[#self.waiters + 1] = wake end)
end

function Sweep:results()
  return results.sorted(self.done_results, self.mode)
end

function Sweep:best()
  for _, r in ipairs(self:results()) do
    if r.status ~= "failed" and r.value ~= nil then return r end
  end
  return nil
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

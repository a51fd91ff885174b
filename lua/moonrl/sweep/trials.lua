-- moonrl.sweep.trials - a sweep's trials from proposal to result, the
-- scheduling half of the Sweep object (moonrl.sweep's header describes what a
-- sweep does): the next trial (in order, or proposed by a method function),
-- starting them through the executor (one by one, or one array on Slurm),
-- following them (metrics, the scheduler's rungs, time limits), their exits
-- (result, failure, interruption, resumption) and the sweep's end (best.lua,
-- the plots). install(Sweep, h) adds these methods; h holds init.lua's
-- helpers (new_trial, point_text, tail_lines, public).

local core = require("moonrl.core")
local uv = require("luv")
local util = require("moonrl.util")
local mkdir_p, write_file, rm_rf = util.mkdir_p, util.write_file, util.rm_rf
local space = require("moonrl.sweep.space")
local results = require("moonrl.sweep.results")
local definition = require("moonrl.sweep.definition")
local shutdown = require("moonrl.runtime.shutdown")
local tasks = require("moonrl.runtime.tasks")
local config = require("moonrl.config")
local schedule = require("moonrl.schedule")
local json_null = require("moonrl.formats.json").null

local M = {}

function M.install(Sweep, h)
  local new_trial, point_text, tail_lines, public = h.new_trial, h.point_text, h.tail_lines, h.public

  -- a trial that may start: pending and not claimed by a starting array
  local function open(t) return t.status == "pending" and not t.claimed end

  -- the first open trial of a grid or random sweep (every trial listed), or nil
  local function first_open(sweep)
    for i = 1, sweep.trials do
      local t = sweep.trials_list[i]
      if open(t) then return t end
    end
    return nil
  end

  -- ------------------------------------------------------------ scheduling

  function Sweep:_next()
    if self.stopping then return nil end
    -- trials of an earlier run that were running first (their checkpoints wait), then in order
    for i = 1, #self.trials_list do
      local t = self.trials_list[i]
      if t and open(t) and self.prev.starts[i] then return t end
    end
    if type(self.method) ~= "function" then return first_open(self) end
    local index = #self.trials_list + 1
    if index > self.trials or self.method_done then return nil end
    if self.budget then
      -- budget: the agent-steps of the trials that ended, and of those running: without a
      -- scheduler their whole budgets, and the next one's whole budget must fit (so the sweep
      -- never spends more); with one (ASHA) the steps they ran so far, and the next one needs
      -- room for its first rung only: most trials stop there, and one that goes on is stopped
      -- when the budget is spent (_budget_stop). Charging each new trial its whole budget up
      -- front left up to (trial budget - first rung) agent-steps unspent.
      local used, need = self:_budget_used(), self.base_cfg.total_steps
      if self.scheduler and self.scheduler.rung_steps then need = math.min(need, self.scheduler:rung_steps(1)) end
      if used + need > self:_search_budget() then
        if #self.running == 0 then
          self:say(string.format("budget: %s of %s agent-steps spent%s; no room for another trial of %s",
            results.thousands(used), results.thousands(self.budget),
            self.finish and (" (" .. results.thousands(self.finish) .. " kept for the finish)") or "", results.thousands(need)))
          self.method_done = true
        end
        return nil
      end
    end
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

  -- the part of the budget the search may spend: the finish's agent-steps are kept for the best trial
  function Sweep:_search_budget() return self.budget - (self.finish or 0) end

  -- the agent-steps a budget (moonrl.sweep{budget =}) is charged: the ended trials' steps, and the
  -- running ones' (their steps so far with a scheduler, else their whole budgets)
  function Sweep:_budget_used()
    local used = 0
    for _, r in ipairs(self.done_results) do used = used + (tonumber(r.steps) or 0) end
    for _, t in ipairs(self.running) do
      if self.scheduler then used = used + (tonumber(t.steps) or 0)
      else used = used + (t.cfg and t.cfg.total_steps or 0) end
    end
    return used
  end

  -- with a scheduler, a running trial is stopped once the budget is spent (it counts as stopped
  -- early, at the steps it reached; the scheduler's ranking treats it so). Not the finish: its
  -- agent-steps are the part of the budget kept for it. Not while it is evaluated at a rung: a
  -- trial starts when its first rung fits, so that rung's value is had (_rung_decide stops it
  -- there, after its decision, if the budget is spent)
  function Sweep:_budget_stop(t)
    if not (self.budget and self.scheduler) or t.finishing or t.stop_sent or t.stop_why or not t.steps or t.rung_busy then
      return
    end
    if t.cfg and t.steps >= t.cfg.total_steps then return end
    local used = self:_budget_used()
    if used >= self:_search_budget() then
      t.stop_why = string.format("the sweep's budget of %s agent-steps is spent", results.thousands(self.budget))
      results.append(self.dir, { event = "budget_stop", trial = t.index, steps = t.steps, used = used })
      self:say(string.format("%s: stopping (%s)", t.label, t.stop_why))
      self:_stop_trial(t)
    end
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
    if t.finishing and not resume_ck then
      return self:_finish_trial(t, { status = "failed", error = "no checkpoint in " .. t.dir .. " to go on from" })
    end
    local argv
    if resume_ck then
      t.resumed_steps = resume_ck.steps
      if t.resumed_steps >= t.cfg.total_steps then
        -- it had finished; only its result was not recorded
        self:_read_metrics(t)
        return self:_finish_trial(t, { status = "done" })
      end
      argv = self:_train_argv({ "train", "--resume", t.dir }, t)
      if t.finishing then
        argv[#argv + 1] = "--set"
        argv[#argv + 1] = string.format("total_steps=%.0f", t.cfg.total_steps)
        -- from where the finish started, not this checkpoint: a finish resumed halfway goes on
        -- along the same line
        for _, set in ipairs(self:_finish_schedule_sets(t, t.finish_from and t.finish_from.steps or resume_ck.steps)) do
          argv[#argv + 1] = "--set"
          argv[#argv + 1] = set
        end
      end
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
      argv = self:_train_argv({ "train", t.cfg_path, "--dir", t.dir }, t)
    end
    mkdir_p(t.dir)
    local spec = self:_exec_spec(t, argv)
    if not resume_ck then   -- what a task a queue restarts (Slurm's requeue) runs once it has a checkpoint
      spec.resume_argv, spec.resume_dir = self:_train_argv({ "train", "--resume", t.dir }, t), t.dir
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
      dir = t.dir, resume = resume_ck and true or false, job = job.id, adopted = info.adopted or nil,
      finish = t.finishing and t.cfg.total_steps or nil })
    if info.adopted then
      self:say(string.format("%s: following %s again (%s, %s by an earlier run of this sweep)",
        t.label, job.pid and job.id or ("Slurm job " .. job.id), point_text(t.params), job.pid and "started" or "submitted"))
    else
      self:say(string.format("%s %s: %s%s%s", t.label, t.finishing and ("trains on to " .. results.thousands(t.cfg.total_steps) ..
        " agent-steps (the finish)") or resume_ck and "resumed" or (job.queued and "submitted" or "started"),
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
    for _, rec in ipairs(recs) do
      results.curve_add(t.curve, rec, self.metric)
      -- a field name the rows never carry (not even as null) is a wrong metric, not a quiet trial
      if type(self.metric) == "string" and rec[self.metric] ~= nil then t.metric_seen = true end
      t.last_record = rec
    end
    local last = t.curve[#t.curve]
    if last then t.steps, t.updates = last.steps, last.update end
    t.value = results.curve_value(t.curve, self.smooth)
  end

  function Sweep:_poll()
    for _, t in ipairs({ unpack(self.running) }) do
      self:_read_metrics(t)
      self:_rungs(t)
      self:_budget_stop(t)
    end
    if self.pbt_ctl then
      for _, t in ipairs({ unpack(self.running) }) do self.pbt_ctl:poll(t) end
    end
  end

  -- A scheduler with rungs (ASHA), trials on this machine: each pauses at the
  -- rungs ahead of it (`--pause-at-steps`), so its decision is made at the
  -- rung's steps and a stop lands there, whatever the load. (A queue's trials,
  -- Slurm's, may run where the driver cannot reach their sockets: they are
  -- stopped a poll after the rung, as before.) -> the marks | nil
  function Sweep:_rung_marks(t)
    local s = self.scheduler
    if not (s and s.rung_steps and t.cfg and definition.waits_at_rungs(self.executor, self.ranks)) then return nil end
    local marks, k = {}, 1
    while not s.max_rungs or k <= s.max_rungs do
      local rung = s:rung_steps(k)
      if rung >= t.cfg.total_steps or #marks >= 1000 then break end
      if rung > (t.resumed_steps or 0) then marks[#marks + 1] = rung end
      k = k + 1
    end
    t.rung_marks = #marks > 0 or nil
    return marks
  end

  -- The trial goes on from the rung it paused at: once it is paused there (its
  -- metrics row can come before its pause), resumed. A trial an earlier sweep
  -- process started is resumed once when followed again (it may wait at a rung
  -- that process decided).
  function Sweep:_go_on(t)
    tasks.spawn(function()
      local client = require("moonrl.control.client")
      if client.ask(t.dir, { cmd = "pause" }) and t.status == "running" and not t.stop_sent then
        client.ask(t.dir, { cmd = "resume" })
      end
    end)
  end

  -- The decision at rung k of trial t, on its value there: recorded (with
  -- `checkpoint`, the one evaluated, if any), and the trial stopped or, paused
  -- at the rung, let go on. -> true if it goes on
  function Sweep:_rung_decide(t, k, rung, value, checkpoint)
    local s = self.scheduler
    local decision, why
    if t.resumed_steps and rung <= t.resumed_steps then
      s:record(t.index, k, value)   -- passed before the interruption: it went on then
      decision, why = "continue", "recorded on resume"
    else
      decision, why = s:decide(t.index, k, value)
    end
    results.append(self.dir, { event = "rung", trial = t.index, rung = k, steps = rung, value = value,
      decision = decision, why = why, checkpoint = checkpoint })
    if value ~= nil then t.rung_value = value end
    if decision == "stop" then
      t.stop_why = why
      self:say(string.format("%s: stopping early (%s)", t.label, why))
      self:_stop_trial(t)
      return false
    end
    self:_budget_stop(t)   -- the budget spent at this rung: stopped here, with its value, not let go on
    if t.stop_sent then return false end
    if t.rung_marks and rung > (t.resumed_steps or 0) and t.job and t.job:alive() then self:_go_on(t) end
    return true
  end

  -- metric = "eval.<key>": trial t, paused at rung k (its --pause-at-steps
  -- mark), is evaluated there (moonrl.sweep.trial_checkpoint: a checkpoint,
  -- `moonrl eval` of it with the trial's eval.* settings, files in
  -- DIR/asha/eval/), and decided on that value; then its next rungs. No
  -- evaluation (the trial ended first, eval failed): no value, it goes on.
  function Sweep:_rung_evaluate(t, k, rung)
    t.rung_busy = true
    tasks.spawn(function()
      local value, err, checkpoint
      if t.job and t.job:alive() and t.rung_marks and rung > (t.resumed_steps or 0) then
        require("moonrl.control.client").ask(t.dir, { cmd = "pause" })   -- returns once it waits at the mark
        value, err = require("moonrl.sweep.trial_checkpoint").evaluate(t, self.eval_key, function()
          return string.format("%s/asha/eval/%s-rung%d", self.dir, t.label, k)
        end)
        if value ~= nil then checkpoint = err end
      else
        err = "it did not wait at the rung"
      end
      if value == nil and rung > (t.resumed_steps or 0) then
        self:say(string.format("%s: no evaluation at rung %d: %s (it goes on)", t.label, k, tostring(err)))
      end
      t.rung_busy = nil
      if t.stop_sent then return end
      if self:_rung_decide(t, k, rung, value, checkpoint) then self:_rungs(t) end
    end)
  end

  function Sweep:_rungs(t)
    local s = self.scheduler
    if not s or not t.steps or t.stop_sent or t.rung_busy then return end
    if t.followed and t.job and t.job.pid and not t.follow_resumed and s.rung_steps and self.executor.name == "local" then
      t.follow_resumed, t.rung_marks = true, true   -- an earlier process of this sweep started it with marks
      tasks.spawn(function() require("moonrl.control.client").ask(t.dir, { cmd = "resume" }) end)
    end
    for _, k in ipairs(s:crossed(t.index, t.steps)) do
      local rung = s:rung_steps(k)
      if rung >= t.cfg.total_steps then break end   -- its budget ends there: nothing to save
      if self.eval_key then return self:_rung_evaluate(t, k, rung) end
      if not self:_rung_decide(t, k, rung, results.value_at(t.curve, rung, self.smooth)) then return end
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
      -- restarting: _prepare_trial looks for its checkpoint (without it, the trial started over and
      -- said "submitted", though this line said resuming)
      t.status, t.job, t.restarting = "pending", nil, true
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
      if t.finishing then self.done_results[#self.done_results + 1] = t.finish_from end   -- on disk it is still the last
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
  -- (metric = "eval.<key>"); else --no-eval spares the time. A synchronous
  -- population (pbt.sync) pauses its members at its decision points.
  function Sweep:_train_argv(argv, t)
    if not self.eval_key then argv[#argv + 1] = "--no-eval" end
    local marks = self.pbt_ctl and self.pbt_ctl:pause_marks(t) or self:_rung_marks(t)
    if marks and #marks > 0 then
      local text = {}
      for i, n in ipairs(marks) do text[i] = string.format("%.0f", n) end
      argv[#argv + 1] = "--pause-at-steps"
      argv[#argv + 1] = table.concat(text, ",")
    end
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
    if t.finishing then
      t.finishing = nil
      if r.status ~= "done" then
        -- the finish did not end: the trial's result before it stands (written again, so that it is the last)
        self:say(string.format("%s: the finish ended %s (%s); its result before the finish stands", t.label, r.status,
          tostring(r.error or r.why or "?")))
        local r0 = util.deepcopy(t.finish_from)
        r0.note = "the finish to " .. results.thousands(t.cfg.total_steps) .. " agent-steps ended " .. r.status .. ": " ..
          tostring(r.error or r.why or "?")
        t.cfg.total_steps, t.status, t.result, t.value, t.steps = r0.steps, r0.status, r0, r0.value, r0.steps
        results.append(self.dir, r0)
        self.done_results[#self.done_results + 1] = r0
        return self:_check_end()
      end
      r.finish = { from_steps = t.finish_from.steps, from_value = t.finish_from.value }
    end
    r.trial, r.label, r.params, r.seed, r.dir = t.index, t.label, t.params, t.seed, t.dir
    r.metric = type(self.metric) == "string" and self.metric or "<function>"
    if self.eval_key and r.status == "done" then
      local v, verr = eval_value(t.dir, self.eval_key)
      t.value = v
      if not v then r.note = "no evaluation to read: " .. tostring(verr) end
    elseif self.eval_key and r.status == "stopped" then
      t.value = t.rung_value   -- ASHA's evaluation at the rung that stopped it
    end
    r.value, r.steps, r.updates = t.value, t.steps, t.updates
    local wrong_metric = r.status == "done" and r.value == nil and type(self.metric) == "string" and not self.eval_key and
      t.last_record and not t.metric_seen
    if wrong_metric then
      local fields = {}
      for k, v in pairs(t.last_record) do if type(v) == "number" or v == json_null then fields[#fields + 1] = k end end
      table.sort(fields)
      r.note = "metric " .. self.metric .. " is no field of its metrics.jsonl"
      wrong_metric = "metric " .. util.fmt_value(self.metric) .. " is no field of the trials' metrics.jsonl (" .. t.label ..
        " ran to its end without it); accepted: " .. table.concat(fields, ", ") .. ", or eval.<key>"
    end
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
    if wrong_metric and not self.stopping then
      io.stderr:write("moonrl.sweep: ", wrong_metric, "\n")
      self:stop({ reason = "a wrong metric" })
    end
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
    if self.finish and not self.stopping and not self.finish_started then
      if self:_start_finish() or self._ended then return end   -- (a finish that could not start ended the sweep)
    end
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

  -- The finish's schedules (finish_schedules = "base"; "constant", the
  -- default, keeps the trial's values): a swept key that the base schedules
  -- (linear or cosine from `from` to `to`, `from` not 0) and the trial holds
  -- constant at v goes, over the finish, from v (no jump at the resume) to
  -- v * to / from at the new total, as the base's would at its end. Measured
  -- (docs/benchmarks-log.md, "sixth"): dials (lr to a tenth, ent_coef to 0)
  -- +2.3 over the constant, cartpole (lr and clip to 0) -77: a choice per
  -- experiment, not a default. The schedule is set on the resume "as given,
  -- at the new total's progress" (config docs), so its `from` is placed
  -- (schedule.from_through, as a resume re-anchors one) where the progress
  -- of the finish's first update, steps / total in updates, gives v.
  -- -> list of "key=kind(from, to)" for --set
  function Sweep:_finish_schedule_sets(t, steps)
    local sets = {}
    -- PBT's member holds the values its lineage left it, not its params: it goes on with them
    if self.finish_schedules ~= "base" or self.method == "pbt" then return sets end
    local batch = t.cfg.env.num_envs * t.cfg.ppo.rollout_steps * (self.ranks or 1)
    local q = math.min(math.floor(steps / batch) / math.max(1, math.ceil(t.cfg.total_steps / batch)), 0.999)
    for _, k in ipairs(self.keys) do
      local b, v = config.get(self.base_cfg, k), (t.params or {})[k]
      if type(b) == "table" and (b.kind == "linear" or b.kind == "cosine") and type(b.from) == "number" and b.from ~= 0
        and type(b.to) == "number" and type(v) == "number" then
        local to = v * b.to / b.from
        local from = schedule.from_through(b.kind, v, q, to)
        sets[#sets + 1] = string.format("%s=%s(%s, %s)", k, b.kind, util.fmt_number(from), util.fmt_number(to))
      end
    end
    return sets
  end

  -- finish = N: once the search has ended, its best trial that ran to its end
  -- trains on from its last checkpoint by N agent-steps (moonrl train --resume
  -- --set total_steps=...), and its result is the one at the end (r.finish:
  -- the steps and value before). A sweep run again after its finish ended
  -- does not finish again; one stopped during it goes on with the same trial
  -- (the same results, so the same best). -> true while the finish runs
  function Sweep:_start_finish()
    self.finish_started = true
    for _, r in ipairs(self:results()) do
      if r.finish then return false end   -- an earlier run of this sweep finished it
    end
    local best = self:best()
    if best and best.status ~= "done" then best = nil end   -- one that ran to its end
    if not best then
      self:say("finish: no trial ran to its end with a value; nothing to train on")
      return false
    end
    local t = self.trials_list[best.trial]
    if not (t and t.cfg) then return false end
    for i, r in ipairs(self.done_results) do
      if r == best then table.remove(self.done_results, i) break end
    end
    t.finish_from, t.finishing, t.restarting = best, true, true
    t.cfg.total_steps = (best.steps or t.cfg.total_steps) + self.finish
    t.status, t.result, t.claimed = "pending", nil, true
    results.append(self.dir, { event = "finish", trial = t.index, from_steps = best.steps, steps = t.cfg.total_steps,
      value = best.value })
    self:say(string.format("finish: %s, the best (%s %s after %s agent-steps), trains on by %s", t.label,
      type(self.metric) == "string" and self.metric or "metric", results.fmt(best.value), results.thousands(best.steps or 0),
      results.thousands(self.finish)))
    self:_start_trial(t)
    return #self.running > 0
  end

  -- whether a trial could still start (without proposing one)
  function Sweep:_next_available()
    if type(self.method) == "function" then
      if self.method_done or #self.trials_list >= self.trials then
        for _, t in pairs(self.trials_list) do if open(t) then return true end end
        return false
      end
      return true
    end
    return first_open(self) ~= nil
  end

end

return M

-- moonrl.sweep.slurm_executor - runs a sweep's trials as Slurm array tasks:
-- the same moonrl binary, on whatever node Slurm picks, in the trial's run
-- directory on a file system the sweep's process shares with the nodes.
--
--   executor = moonrl.slurm{ partition = "gpu", time = "02:00:00", gpus = 1 }
--
-- What it is (the interface is local_executor.lua's, plus start_array):
--   executor:start_array(specs, opts) -> jobs | nil, err
--       one `sbatch --array=<trial indices>%<opts.parallel>` for every spec;
--       spec.index is the trial number and the array task id (job "1234_7" is
--       trial 7). It writes DIR/slurm/submit-NNN.sh, a batch script whose case
--       statement maps each array task to its trial: `exec moonrl train ...`
--       (exec: the signals Slurm and the sweep send reach moonrl itself, not a
--       shell waiting on it), in the sweep process's working directory
--       (sbatch --chdir), so relative paths mean what they mean locally. Output goes
--       to opts.output (sbatch --output, %3a = the task id, appended: the
--       trial's output.log, Slurm's own lines such as "CANCELLED ... DUE TO
--       TIME LIMIT" included). A task Slurm requeues (node failure,
--       preemption) and starts again runs spec.resume_argv instead when
--       spec.resume_dir has a checkpoint ($SLURM_RESTART_COUNT > 0).
--   executor:adopt(ids) -> { [id] = state }  which of the array tasks an earlier
--       sweep process submitted are still queued or running (squeue)
--   executor:attach(id, spec) -> job         follows such a task again
--   job.queued      true until squeue first shows the task RUNNING; then
--                   spec.on_running() is called
--   job:stop()      scancel --full --signal=INT (batch shell and its children:
--                   moonrl, exec'd, is the batch shell); a task still queued
--                   is simply cancelled
--   job:kill()      scancel (SIGTERM, then SIGKILL after Slurm's KillWait)
-- on_exit gets { code, signal, state = "COMPLETED" | "FAILED" | "TIMEOUT" |
-- "CANCELLED" | "PREEMPTED" | "NODE_FAIL" | "OUT_OF_MEMORY" | ..., reason =
-- "exit" | "timeout" | "cancelled" | "preempted" | "node_fail" |
-- "out_of_memory" | "slurm", error = words for a person (nil when it completed) }.
--
-- How tasks are followed: every `poll` seconds one `squeue -h -r -j <arrays>`
-- (asynchronous, on the loop). A task squeue no longer lists has ended; its
-- final state comes from `sacct -n -P -X` (Slurm's accounting database), or,
-- where the cluster has none (sacct answers "accounting storage is
-- disabled"), from `scontrol show job -o <array>` (slurmctld keeps ended jobs
-- for MinJobAge, 300 s by default), or else from `sacct --completion` (the
-- jobcomp/filetxt log, which knows a task only by its raw job id).
-- sbatch and scancel are run synchronously: they are quick and rare.
--
-- Every Slurm command honours SLURM_CONF from the environment (the children
-- inherit it), and sbatch exports the environment to the task (MOONRL_LUA_PATH,
-- MOONRL_BIN, CUDA_VISIBLE_DEVICES set by Slurm).
--
-- What it is not: a Slurm client library. It parses the plain outputs of
-- squeue -o, sacct --parsable2 and scontrol -o, which Slurm keeps stable.

local uv = require("luv")
local util = require("moonrl.util")

local executor = {}

local Slurm = {}
Slurm.__index = Slurm
local Job = {}
Job.__index = Job

-- ----------------------------------------------------------------- options

local TIME_FORMS = { "^%d+$", "^%d+:%d%d$", "^%d+:%d%d:%d%d$", "^%d+%-%d+$", "^%d+%-%d+:%d%d$", "^%d+%-%d+:%d%d:%d%d$" }
local KNOWN = { partition = "string", time = "\"HH:MM:SS\", \"D-HH:MM:SS\", \"MM\" or minutes (a number)",
  gpus = "an integer >= 0", cpus_per_task = "an integer >= 1", mem = "\"16G\", \"4000M\" or megabytes (a number)",
  account = "string", qos = "string", job_name = "string", sbatch_args = "a list of strings (extra sbatch arguments)",
  setup = "a list of shell lines run before moonrl in each task (\"module load cuda\")",
  poll = "seconds between squeue polls, a number >= 0.2", bin = "the moonrl binary's path on the nodes",
  mpi = "srun's --mpi plugin for trials of several ranks (default \"pmix\", what Open MPI needs)" }

local function bad(key, value, accepted)
  error("moonrl.slurm: " .. key .. " = " .. util.fmt_value(value) .. " is not accepted: expected " .. accepted, 4)
end

local function check(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    error("moonrl.slurm: expected a table { partition =, time =, gpus =, ... }, got " .. type(opts), 3)
  end
  for k in pairs(opts) do
    if not KNOWN[k] then
      local near = util.closest(tostring(k), util.sorted_keys(KNOWN))
      error("moonrl.slurm: unknown option " .. util.fmt_value(k) .. (near and (" - did you mean " .. near .. "?") or "") ..
        "; accepted: " .. table.concat(util.sorted_keys(KNOWN), ", "), 3)
    end
  end
  for _, k in ipairs({ "partition", "account", "qos", "job_name", "bin", "mpi" }) do
    local v = opts[k]
    if v ~= nil and (type(v) ~= "string" or v == "" or v:find("[%s'\"]")) then
      bad(k, v, "a non-empty string without spaces or quotes")
    end
  end
  local time = opts.time
  if type(time) == "number" then
    if time ~= math.floor(time) or time < 1 then bad("time", time, KNOWN.time) end
    time = tostring(time)
  elseif time ~= nil then
    local ok = false
    if type(time) == "string" then for _, f in ipairs(TIME_FORMS) do ok = ok or time:match(f) ~= nil end end
    if not ok then bad("time", time, KNOWN.time) end
  end
  local function int(k, min)
    local v = opts[k]
    if v ~= nil and (type(v) ~= "number" or v ~= math.floor(v) or v < min) then bad(k, v, KNOWN[k]) end
    return v
  end
  local mem = opts.mem
  if type(mem) == "number" then
    if mem ~= math.floor(mem) or mem < 1 then bad("mem", mem, KNOWN.mem) end
    mem = tostring(mem)
  elseif mem ~= nil and (type(mem) ~= "string" or not mem:match("^%d+[KMGT]?$")) then
    bad("mem", mem, KNOWN.mem)
  end
  for _, k in ipairs({ "sbatch_args", "setup" }) do
    local v = opts[k]
    if v ~= nil then
      if type(v) ~= "table" then bad(k, v, KNOWN[k]) end
      for i, s in ipairs(v) do
        if type(s) ~= "string" then bad(k .. "[" .. i .. "]", s, "a string") end
      end
    end
  end
  for _, a in ipairs(opts.sbatch_args or {}) do
    for _, own in ipairs({ "--array", "--output", "--error", "--open-mode", "--parsable", "--chdir", "-a", "-o", "-e", "-D" }) do
      if a == own or a:sub(1, #own + 1) == own .. "=" then
        error("moonrl.slurm: sbatch_args: " .. a .. " is set by the sweep itself (the array, its throttle, the " ..
          "trial's output.log, its directory); leave it out", 3)
      end
    end
  end
  local poll = opts.poll
  if poll ~= nil and (type(poll) ~= "number" or poll ~= poll or poll < 0.2) then bad("poll", poll, KNOWN.poll) end
  return {
    partition = opts.partition, time = time, gpus = int("gpus", 0), cpus_per_task = int("cpus_per_task", 1), mem = mem,
    account = opts.account, qos = opts.qos, job_name = opts.job_name, sbatch_args = opts.sbatch_args or {},
    setup = opts.setup or {}, poll = poll or 10, bin = opts.bin, mpi = opts.mpi or "pmix",
  }
end

function executor.new(opts)
  local o = check(opts)
  local self = setmetatable(o, Slurm)
  self.name = "slurm"
  self.bin = self.bin or require("moonrl.sweep.local_executor").binary()
  self.jobs = {}          -- id -> live job
  self.submits = 0
  return self
end

-- ------------------------------------------------------------- processes

local quote = util.shell_word
executor.quote = quote

-- Runs argv, waits (the loop waits too): exit code, stdout + stderr.
local function run_sync(argv)
  local parts = {}
  for i, a in ipairs(argv) do parts[i] = quote(a) end
  local p = io.popen(table.concat(parts, " ") .. " 2>&1; echo \"__rc=$?\"")
  if not p then return 127, "cannot run " .. argv[1] end
  local out = p:read("*a") or ""
  p:close()
  local rc = tonumber(out:match("__rc=(%d+)%s*$")) or 127
  return rc, (out:gsub("__rc=%d+%s*$", ""))
end

-- MOONRL_SLURM_TRACE=FILE: every Slurm command the executor runs on the loop
-- and what it printed, appended to FILE (for a cluster that behaves oddly).
local TRACE = os.getenv("MOONRL_SLURM_TRACE")
local function trace(text)
  if not TRACE or TRACE == "" then return end
  local f = io.open(TRACE, "ab")
  if f then
    f:write(string.format("%.3f %s\n", uv.hrtime() / 1e9, text))
    f:close()
  end
end

-- Runs argv on the loop; cb(code, stdout, stderr).
local function run_async(argv, cb)
  if TRACE then
    local inner = cb
    cb = function(code, o, e)
      trace(table.concat(argv, " ") .. " -> " .. tostring(code) .. "\n" .. o .. e)
      return inner(code, o, e)
    end
  end
  local out, err = uv.new_pipe(false), uv.new_pipe(false)
  local bufs = { {}, {} }
  local pending = 3
  local code
  local function done()
    pending = pending - 1
    if pending == 0 then cb(code, table.concat(bufs[1]), table.concat(bufs[2])) end
  end
  local handle, perr
  handle, perr = uv.spawn(argv[1], { args = { unpack(argv, 2) }, stdio = { nil, out, err } }, function(c)
    code = c
    handle:close()
    done()
  end)
  if not handle then
    out:close()
    err:close()
    return cb(127, "", "cannot run " .. argv[1] .. ": " .. tostring(perr))
  end
  for i, pipe in ipairs({ out, err }) do
    pipe:read_start(function(e, chunk)
      if chunk then bufs[i][#bufs[i] + 1] = chunk
      else
        pipe:read_stop()
        pipe:close()
        done()
      end
      if e then bufs[2][#bufs[2] + 1] = tostring(e) end
    end)
  end
end

local function abs(path)
  if path:sub(1, 1) == "/" then return path end
  return uv.cwd() .. "/" .. path:gsub("^%./", "")
end

-- ---------------------------------------------------------------- parsing

-- The states of a task that is still Slurm's to run.
local ACTIVE = { PENDING = 1, RUNNING = 1, CONFIGURING = 1, COMPLETING = 1, SUSPENDED = 1, REQUEUED = 1,
  REQUEUE_HOLD = 1, REQUEUE_FED = 1, RESIZING = 1, SIGNALING = 1, STAGE_OUT = 1, STOPPED = 1, RESV_DEL_HOLD = 1 }
executor.ACTIVE = ACTIVE

-- "1-4,7" from { 1, 2, 3, 4, 7 }
function executor.ranges(list)
  local s = {}
  for _, v in ipairs(list) do s[#s + 1] = v end
  table.sort(s)
  local out, i = {}, 1
  while i <= #s do
    local j = i
    while j < #s and s[j + 1] == s[j] + 1 do j = j + 1 end
    out[#out + 1] = (j > i) and (s[i] .. "-" .. s[j]) or tostring(s[i])
    i = j + 1
  end
  return table.concat(out, ",")
end

-- squeue -h -r -o '%i|%A|%T|%R' -> { ["123_4"] = { state =, raw =, reason = } }
function executor.parse_squeue(text)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local id, raw, state, reason = line:match("^([^|]+)|([^|]*)|([^|]*)|?(.*)$")
    if id then out[id] = { state = state, raw = raw, reason = reason } end
  end
  return out
end

-- sacct -n -P -X -o JobID,JobIDRaw,State,ExitCode,Elapsed -> { [JobID] = { state, code, signal, raw, elapsed } }
-- ("CANCELLED by 0" -> CANCELLED; an array's "123_[4-6%2]" line, its tasks not started, is skipped)
function executor.parse_sacct(text)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local f = {}
    for field in (line .. "|"):gmatch("([^|]*)|") do f[#f + 1] = field end
    if #f >= 4 and not f[1]:find("[", 1, true) then
      local code, sig = (f[4] or ""):match("^(%d+):(%d+)$")
      out[f[1]] = { state = (f[3]:match("^(%u[%u_]*)") or f[3]), raw = f[2], code = tonumber(code) or 0,
        signal = tonumber(sig) or 0, elapsed = f[5] }
    end
  end
  return out
end

-- scontrol show job -o <array> -> { ["123_4"] = { state, code, signal, raw, reason, elapsed } }
function executor.parse_scontrol(text)
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local f = {}
    for k, v in line:gmatch("(%S-)=(%S*)") do f[k] = v end
    if f.JobId and f.JobState then
      local id = (f.ArrayJobId and f.ArrayTaskId and f.ArrayTaskId:match("^%d+$")) and (f.ArrayJobId .. "_" .. f.ArrayTaskId) or f.JobId
      local code, sig = (f.ExitCode or ""):match("^(%d+):(%d+)$")
      -- a task listed twice (its ended record and its requeued one) is the one still to run
      if not (out[id] and ACTIVE[out[id].state]) then
        out[id] = { state = f.JobState, raw = f.JobId, code = tonumber(code) or 0, signal = tonumber(sig) or 0,
          reason = f.Reason, elapsed = f.RunTime, limit = f.TimeLimit }
      end
    end
  end
  return out
end


-- How long a task whose output says Slurm requeued it may take to be listed
-- again before its final-looking state counts (seconds).
executor.REQUEUE_WAIT = 60
-- How long a requeued task waits for its first run to let go of the run
-- directory before it resumes (seconds; the batch script's flock -w).
executor.REQUEUE_LOCK_WAIT = 120

-- True when the task's output (its trial's output.log) ends in a requeue:
-- the last line slurmstepd wrote there says "DUE TO JOB REQUEUE" and no run
-- has printed its "run directory:" line after it.
function executor.requeue_pending(path)
  local f = path and io.open(path, "rb")
  if not f then return false end
  local size = f:seek("end")
  f:seek("set", math.max(0, size - 8192))
  local tail = f:read("*a") or ""
  f:close()
  local pending = false
  for line in tail:gmatch("[^\n]+") do
    if line:find("slurmstepd", 1, true) then pending = line:find("DUE TO JOB REQUEUE", 1, true) ~= nil
    elseif line:find("^run directory: ") then pending = false end
  end
  return pending
end

-- A final Slurm state -> what on_exit gets.
function executor.describe_end(id, st, job)
  local e = { code = st.code or 0, signal = st.signal or 0, state = st.state }
  local s = st.state
  if s == "COMPLETED" then
    e.reason = "exit"
  elseif s == "FAILED" then
    e.reason = "exit"
    e.error = "Slurm job " .. id .. " FAILED: " .. (e.signal ~= 0 and ("killed by signal " .. e.signal) or ("exit code " .. e.code))
  elseif s == "TIMEOUT" then
    e.reason = "timeout"
    e.error = "Slurm job " .. id .. " TIMEOUT: it reached its time limit" ..
      ((job and job.ex.time) and (" (time = " .. job.ex.time .. ")") or (st.limit and (" of " .. st.limit) or "")) ..
      " and Slurm ended it (SIGTERM, SIGKILL after KillWait)"
  elseif s == "CANCELLED" then
    e.reason = "cancelled"
    e.error = "Slurm job " .. id .. " CANCELLED (scancel, or by an administrator) before it finished"
  elseif s == "PREEMPTED" then
    e.reason = "preempted"
    e.error = "Slurm job " .. id .. " PREEMPTED: a job of higher priority took its node"
  elseif s == "NODE_FAIL" then
    e.reason = "node_fail"
    e.error = "Slurm job " .. id .. " NODE_FAIL: its node failed"
  elseif s == "OUT_OF_MEMORY" then
    e.reason = "out_of_memory"
    e.error = "Slurm job " .. id .. " OUT_OF_MEMORY: it used more memory than it asked for" ..
      ((job and job.ex.mem) and (" (mem = " .. job.ex.mem .. ")") or "")
  else
    e.reason = "slurm"
    e.error = "Slurm job " .. id .. " ended in state " .. tostring(s)
  end
  if s ~= "COMPLETED" and e.code == 0 and e.signal == 0 then e.code = 1 end   -- never mistaken for a clean exit
  return e
end

-- --------------------------------------------------------------- submit

local function batch_script(self, specs, opts)
  local lines = {
    "#!/bin/sh",
    "# moonrl sweep " .. opts.dir .. ": one Slurm array task per trial; the task id is the trial number.",
    "# Written by moonrl.sweep.slurm_executor; `exec` so that Slurm's and the sweep's signals reach moonrl.",
  }
  for _, l in ipairs(self.setup) do lines[#lines + 1] = l end
  lines[#lines + 1] = 'case "$SLURM_ARRAY_TASK_ID" in'
  -- a trial of several ranks: one job step of that many tasks (Open MPI
  -- wires them up over PMIx); a rank that dies ends the step
  local function cmd(list)
    local argv = { quote(self.bin) }
    if (opts.ranks or 1) > 1 then
      argv = { "srun", "--ntasks=" .. opts.ranks, "--kill-on-bad-exit=1", "--mpi=" .. self.mpi, quote(self.bin) }
    end
    for _, a in ipairs(list) do argv[#argv + 1] = quote(a) end
    return table.concat(argv, " ")
  end
  for _, spec in ipairs(specs) do
    if spec.resume_argv and spec.resume_dir then
      -- requeued (a node failure, preemption with PreemptMode=REQUEUE, scontrol
      -- requeue): the same task starts again; it resumes from its checkpoint,
      -- or, requeued before its first checkpoint, starts anew with --force (the
      -- first run's files are moved aside: a plain start refuses a used directory).
      -- First it waits (at most REQUEUE_LOCK_WAIT s) for the run directory's lock:
      -- slurmctld may start the requeued task while the first run, stopped by
      -- SIGTERM, still writes its final checkpoint there (seen on a loaded
      -- machine: the restart was refused at once, "in use by another moonrl process").
      local fresh = { unpack(spec.argv) }
      fresh[#fresh + 1] = "--force"
      local lock = quote(spec.resume_dir .. "/.lock")
      lines[#lines + 1] = string.format("  %d) if [ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ]; then " ..
        "[ -e %s ] && command -v flock >/dev/null 2>&1 && flock -w %d %s true; " ..
        "ls %s/checkpoints/*.mrck >/dev/null 2>&1 && exec %s; exec %s; fi", spec.index, lock,
        executor.REQUEUE_LOCK_WAIT, lock, quote(spec.resume_dir), cmd(spec.resume_argv), cmd(fresh))
      lines[#lines + 1] = string.format("     exec %s ;;", cmd(spec.argv))
    else
      lines[#lines + 1] = string.format("  %d) exec %s ;;", spec.index, cmd(spec.argv))
    end
  end
  lines[#lines + 1] = '  *) echo "moonrl sweep: no trial for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;'
  lines[#lines + 1] = "esac"
  return table.concat(lines, "\n") .. "\n"
end

executor.batch_script = batch_script   -- (executor, specs, opts) -> text: what submit writes (for the spec)

function Slurm:sbatch_argv(script, indices, opts)
  local argv = { "sbatch", "--parsable", "--array=" .. executor.ranges(indices) .. "%" .. opts.parallel,
    "--job-name=" .. (self.job_name or opts.name or "moonrl-sweep"), "--output=" .. abs(opts.output),
    "--open-mode=append", "--chdir=" .. uv.cwd() }
  local function add(flag, v) if v ~= nil then argv[#argv + 1] = flag .. "=" .. v end end
  add("--partition", self.partition)
  add("--time", self.time)
  if self.gpus and self.gpus > 0 then add("--gpus", self.gpus) end
  if (opts.ranks or 1) > 1 then add("--ntasks", opts.ranks) end
  add("--cpus-per-task", self.cpus_per_task)
  add("--mem", self.mem)
  add("--account", self.account)
  add("--qos", self.qos)
  for _, a in ipairs(self.sbatch_args) do argv[#argv + 1] = a end
  argv[#argv + 1] = script
  return argv
end

-- specs: { index, argv, dir, output, on_exit, on_running }; opts: { parallel, dir, output (a pattern with %3a), name }
function Slurm:start_array(specs, opts)
  local dir = opts.dir .. "/slurm"
  local ok, err = util.mkdir_p(dir)
  if not ok then return nil, err end
  self.submits = self.submits + 1
  local script
  repeat   -- a re-run of the sweep numbers on after the scripts already there
    script = string.format("%s/submit-%03d.sh", dir, self.submits)
    if uv.fs_stat(script) then self.submits = self.submits + 1 end
  until not uv.fs_stat(script)
  ok, err = util.write_file(script, batch_script(self, specs, opts))
  if not ok then return nil, err end
  uv.fs_chmod(script, tonumber("755", 8))
  local indices = {}
  for i, s in ipairs(specs) do indices[i] = s.index end
  local argv = self:sbatch_argv(abs(script), indices, opts)
  local rc, out = run_sync(argv)
  local job_id = rc == 0 and out:match("^%s*(%d+)")
  if not job_id then
    return nil, "sbatch failed (exit " .. rc .. "): " .. (out:gsub("%s+$", "")) .. "\n  command: " ..
      table.concat(argv, " ")
  end
  local jobs = {}
  for i, spec in ipairs(specs) do jobs[i] = self:attach(job_id .. "_" .. spec.index, spec) end
  self.last_submit = { script = script, argv = argv, job = job_id }
  return jobs
end

-- ----------------------------------------------------------------- jobs

function Slurm:attach(id, spec)
  local job = setmetatable({ id = id, array = id:match("^(%d+)"), spec = spec, ex = self, queued = true,
    alive_ = true, state = "PENDING" }, Job)
  self.jobs[id] = job
  self:_arm()
  return job
end

-- ids: "123_4" strings from an earlier sweep process -> { [id] = state } of those squeue still lists
function Slurm:adopt(ids)
  local arrays, seen = {}, {}
  for _, id in ipairs(ids) do
    local a = type(id) == "string" and id:match("^(%d+)_%d+$")
    if a and not seen[a] then seen[a] = true arrays[#arrays + 1] = a end
  end
  if #arrays == 0 then return {} end
  local rc, out = run_sync({ "squeue", "-h", "-r", "-j", table.concat(arrays, ","), "-o", "%i|%A|%T|%R" })
  if rc ~= 0 then return {} end
  local live = {}
  for id, st in pairs(executor.parse_squeue(out)) do
    if ACTIVE[st.state] then live[id] = st.state end
  end
  return live
end

function Job:alive() return self.alive_ end

function Job:stop()
  if not self.alive_ then return end
  if self.state ~= "RUNNING" then   -- the last poll may be older than the trial's first metrics: ask now
    local rc, out = run_sync({ "squeue", "-h", "-r", "-j", self.id, "-o", "%i|%A|%T|%R" })
    local st = rc == 0 and executor.parse_squeue(out)[self.id]
    if st then self.state = st.state end
  end
  if self.state == "RUNNING" then
    run_sync({ "scancel", "--full", "--signal=INT", self.id })
  else
    run_sync({ "scancel", self.id })
  end
end

function Job:kill()
  if self.alive_ then run_sync({ "scancel", self.id }) end
end

function Slurm:_arm()
  if self.timer then return end
  self.timer = uv.new_timer()
  self.timer:start(math.floor(self.poll * 1000), math.floor(self.poll * 1000), function() self:_poll() end)
end

function Slurm:_disarm()
  if self.timer then
    self.timer:stop()
    self.timer:close()
    self.timer = nil
  end
end

function Slurm:_ended(job, e)
  if not job.alive_ then return end
  job.alive_ = false
  self.jobs[job.id] = nil
  if next(self.jobs) == nil then self:_disarm() end
  job.spec.on_exit(e)
end

function Slurm:_poll()
  if self.polling then return end
  local arrays, seen = {}, {}
  for _, job in pairs(self.jobs) do
    if not seen[job.array] then seen[job.array] = true arrays[#arrays + 1] = job.array end
  end
  if #arrays == 0 then return self:_disarm() end
  -- a task seen ended once is asked for by its own id too (as `squeue -j 12_3`):
  -- a requeued task must not be missed by the array's listing
  for _, job in pairs(self.jobs) do
    if job.ending and not seen[job.id] then seen[job.id] = true arrays[#arrays + 1] = job.id end
  end
  self.polling = true
  run_async({ "squeue", "-h", "-r", "-j", table.concat(arrays, ","), "-o", "%i|%A|%T|%R" }, function(code, out, err)
    if code ~= 0 and not (out .. err):find("Invalid job id", 1, true) then
      self.polling = false
      self.squeue_failures = (self.squeue_failures or 0) + 1
      if self.squeue_failures == 3 then
        require("moonrl.core").report("sweep: squeue keeps failing (the sweep waits and tries again)",
          (out .. err):gsub("%s+$", ""))
      end
      return
    end
    self.squeue_failures = 0
    local listed = code == 0 and executor.parse_squeue(out) or {}
    local gone, started = {}, {}
    for id, job in pairs(self.jobs) do
      local st = listed[id]
      if st and ACTIVE[st.state] then
        job.ending = nil   -- listed again (a requeue): the end seen before was not the end
        job.state, job.raw = st.state, st.raw ~= "" and st.raw or job.raw
        if st.state ~= "PENDING" and job.queued then
          job.queued = false
          started[#started + 1] = job
        end
      else
        gone[#gone + 1] = job
      end
    end
    -- the ends first: a task that took the place of one that ended is then
    -- not shown running beside it
    local function run_started()
      self.polling = false
      table.sort(started, function(a, b) return (a.spec.index or 0) < (b.spec.index or 0) end)
      for _, job in ipairs(started) do
        if job.spec.on_running then job.spec.on_running() end
      end
    end
    if #gone == 0 then return run_started() end
    self:_final_states(gone, run_started)
  end)
end

-- The final states of tasks squeue no longer lists: sacct, then (for what it
-- does not know) scontrol, then sacct --completion by raw job id.
function Slurm:_final_states(gone, done)
  local found = {}
  local function missing()
    local out = {}
    for _, job in ipairs(gone) do
      if not (found[job.id] or (job.raw and found["raw:" .. job.raw])) then out[#out + 1] = job end
    end
    return out
  end
  local function settle()
    for _, job in ipairs(gone) do
      local st = found[job.id] or (job.raw and found["raw:" .. job.raw])
      if st and not ACTIVE[st.state] then
        -- ended only when a second poll still finds it ended, and not while
        -- Slurm's own line in its output says it was requeued and no run has
        -- started since: a requeued task (scontrol requeue, a node failure)
        -- shows its run's exit (FAILED after SIGTERM) until slurmctld lists
        -- it PENDING again, which takes a moment
        local t = uv.now() / 1000
        local requeued = executor.requeue_pending(job.spec and job.spec.output)
        trace(string.format("%s: %s, seen ended %s, requeue pending %s", job.id, st.state,
          job.ending and string.format("%.1f s ago", t - job.ending) or "first", tostring(requeued)))
        if not job.ending then
          job.ending = t
        elseif st.state ~= "COMPLETED" and requeued and t - job.ending >= executor.REQUEUE_WAIT then
          -- requeued, and no run has started since: lost in the requeue (seen once on a loaded
          -- machine: slurmctld restarted the task at once and that start ended at once, FAILED,
          -- Restarts=1, nothing in its output); the sweep resumes it (Sweep:_exited)
          local e = executor.describe_end(job.id, st, job)
          e.requeue_lost = true
          e.error = "Slurm requeued job " .. job.id .. " and no run of it started within " ..
            executor.REQUEUE_WAIT .. " s (it is " .. tostring(st.state) .. ")"
          self:_ended(job, e)
        elseif st.state == "COMPLETED" or not requeued then   -- else: requeued, still within the wait
          self:_ended(job, executor.describe_end(job.id, st, job))
        end
      elseif st then
        job.ending, job.unknown = nil, nil   -- the controller still has it (squeue missed it a moment)
      else
        job.unknown = (job.unknown or 0) + 1   -- accounting may lag a moment behind squeue
        if job.unknown >= 5 then
          self:_ended(job, { code = 1, signal = 0, state = "UNKNOWN", reason = "slurm",
            error = "Slurm job " .. job.id .. " is gone and neither sacct nor scontrol knows how it ended" })
        end
      end
    end
    done()
  end
  local function completion()
    local raws = {}
    for _, job in ipairs(missing()) do if job.raw then raws[#raws + 1] = job.raw end end
    if #raws == 0 then return settle() end
    run_async({ "sacct", "-c", "-n", "-P", "-j", table.concat(raws, ","), "-o", "JobID,JobIDRaw,State,ExitCode,Elapsed" },
      function(code, out)
        if code == 0 then for id, st in pairs(executor.parse_sacct(out)) do found["raw:" .. id] = st end end
        settle()
      end)
  end
  local function scontrol()
    local arrays, seen = {}, {}
    for _, job in ipairs(missing()) do
      if not seen[job.array] then seen[job.array] = true arrays[#arrays + 1] = job.array end
    end
    if #arrays == 0 then return settle() end
    local left = #arrays
    for _, a in ipairs(arrays) do
      run_async({ "scontrol", "show", "job", "-o", a }, function(code, out)
        if code == 0 then
          for id, st in pairs(executor.parse_scontrol(out)) do found[id] = found[id] or st end
        end
        left = left - 1
        if left == 0 then completion() end
      end)
    end
  end
  if self.no_sacct then return scontrol() end
  local ids = {}
  for _, job in ipairs(gone) do ids[#ids + 1] = job.id end
  run_async({ "sacct", "-n", "-P", "-X", "-j", table.concat(ids, ","), "-o", "JobID,JobIDRaw,State,ExitCode,Elapsed" },
    function(code, out)
      if code ~= 0 then
        self.no_sacct = true   -- no accounting storage (no slurmdbd): ask the controller from now on
      else
        for id, st in pairs(executor.parse_sacct(out)) do if not ACTIVE[st.state] then found[id] = st end end
      end
      scontrol()
    end)
end

return executor

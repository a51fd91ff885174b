-- Sweeps on a real Slurm cluster: this spec starts one of its own on this
-- machine (munged, slurmctld -D, slurmd -D from Debian's slurm-wlm and munge,
-- a slurm.conf and a munge key in a temporary directory, ports of its own,
-- plugins that need neither systemd nor cgroups, no slurmdbd) and runs sweeps
-- through it with the binary (build/moonrl or $MOONRL_BIN). Where the daemons
-- are missing or will not start (not root, no munge), the cluster tests are
-- pending with the reason; nothing here stands in for Slurm.
--
-- The parsers of squeue, sacct --parsable2 and scontrol -o are also checked
-- on output captured from such a cluster (a job array with a completed, a
-- failed, a timed-out and a cancelled task), so that states this cluster
-- cannot produce quickly (TIMEOUT takes a minute or more) are covered too.

local support = require("support")
local json = require("moonrl.formats.json")
local slurm = require("moonrl.sweep.slurm_executor")
local uv = support.uv

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

local function has(text, s) return text:find(s, 1, true) ~= nil end

-- ------------------------------------------------------------ without a cluster

describe("moonrl.slurm options", function()
  local function err_of(opts)
    local ok, err = pcall(slurm.new, opts)
    assert.is_false(ok)
    return tostring(err)
  end

  it("takes the usual sbatch resources and refuses bad ones naming the key, the value and what is accepted", function()
    local ex = slurm.new({ partition = "gpu", time = "02:00:00", gpus = 1, cpus_per_task = 8, mem = "32G",
      account = "rl", qos = "high", sbatch_args = { "--constraint=a100" }, poll = 2, bin = "/opt/moonrl" })
    assert.equal("slurm", ex.name)
    local argv = ex:sbatch_argv("/s/submit-001.sh", { 1, 2, 3, 5 }, { parallel = 2, dir = "/s", output = "/s/trial-%3a/output.log" })
    local cwd = uv.cwd()
    assert.same({ "sbatch", "--parsable", "--array=1-3,5%2", "--job-name=moonrl-sweep", "--output=/s/trial-%3a/output.log",
      "--open-mode=append", "--chdir=" .. cwd, "--partition=gpu", "--time=02:00:00", "--gpus=1", "--cpus-per-task=8",
      "--mem=32G", "--account=rl", "--qos=high", "--constraint=a100", "/s/submit-001.sh" }, argv)
    assert.equal("30", slurm.new({ time = 30 }).time)
    assert.equal("1-12:00:00", slurm.new({ time = "1-12:00:00" }).time)

    assert.matches("unknown option \"partiton\" %- did you mean partition%?", err_of({ partiton = "gpu" }))
    assert.matches("time = \"2h\" is not accepted: expected \"HH:MM:SS\", \"D%-HH:MM:SS\", \"MM\" or minutes",
      err_of({ time = "2h" }))
    assert.matches("gpus = %-1 is not accepted: expected an integer >= 0", err_of({ gpus = -1 }))
    assert.matches("mem = \"lots\" is not accepted", err_of({ mem = "lots" }))
    assert.matches("poll = 0 is not accepted: expected seconds between squeue polls", err_of({ poll = 0 }))
    assert.matches("sbatch_args: %-%-array=1%-3 is set by the sweep itself", err_of({ sbatch_args = { "--array=1-3" } }))
    assert.matches("sbatch_args%[2%] = 5 is not accepted: expected a string", err_of({ sbatch_args = { "-N1", 5 } }))
    assert.matches("partition = \"a b\" is not accepted", err_of({ partition = "a b" }))
    assert.matches("expected a table", err_of("gpu"))
  end)

  it("writes --array as ranges", function()
    assert.equal("1-4", slurm.ranges({ 4, 3, 2, 1 }))
    assert.equal("2,4-5,9", slurm.ranges({ 2, 4, 5, 9 }))
    assert.equal("7", slurm.ranges({ 7 }))
  end)
end)

-- Captured from this spec's cluster (Slurm 22.05.8): array job 1, tasks 1-5 %2;
-- task 1 exits 0, 2 exits 3, 3 runs past --time=1, 4 exits 7 on SIGINT from
-- `scancel --full --signal=INT 1_4`, 5 was cancelled by `scancel 1_5`.
local SQUEUE_ALL = [[
1_5|1|CANCELLED|localhost
1_1|2|COMPLETED|localhost
1_4|5|FAILED|(NonZeroExitCode)
1_2|3|FAILED|(NonZeroExitCode)
1_3|4|TIMEOUT|(TimeLimit)
]]
local SACCT_COMPLETION = [[
3|3|FAILED|3:0|00:00:00
2|2|COMPLETED|0:0|00:00:00
5|5|FAILED|7:0|00:00:22
1|1|CANCELLED|0:0|00:00:00
4|4|TIMEOUT|0:0|00:01:19
]]
local SCONTROL = [[
JobId=1 ArrayJobId=1 ArrayTaskId=5 ArrayTaskThrottle=2 JobName=sw UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=CANCELLED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:00:00 TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-11-23T21:43:29 EligibleTime=2026-11-23T21:43:56 AccrueTime=2026-11-23T21:43:30 StartTime=2026-11-23T21:43:56 EndTime=2026-11-23T21:43:56 Deadline=N/A Partition=ci NodeList=localhost BatchHost=localhost NumNodes=1 NumCPUs=1 Command=/tmp/slurm-explore/job.sh WorkDir=/tmp/slurm-explore StdErr=/tmp/slurm-explore/out-%3a.log StdIn=/dev/null StdOut=/tmp/slurm-explore/out-%3a.log Power= 
JobId=5 ArrayJobId=1 ArrayTaskId=4 ArrayTaskThrottle=2 JobName=sw UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=7:0 RunTime=00:00:22 TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-11-23T21:43:29 Partition=ci NodeList=localhost Power= 
JobId=4 ArrayJobId=1 ArrayTaskId=3 ArrayTaskThrottle=2 JobName=sw UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:19 TimeLimit=00:01:00 TimeMin=N/A Partition=ci NodeList=localhost Power= 
JobId=3 ArrayJobId=1 ArrayTaskId=2 ArrayTaskThrottle=2 JobName=sw UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:00 TimeLimit=00:01:00 TimeMin=N/A Partition=ci NodeList=localhost Power= 
JobId=2 ArrayJobId=1 ArrayTaskId=1 ArrayTaskThrottle=2 JobName=sw UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=COMPLETED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=00:01:00 TimeMin=N/A Partition=ci NodeList=localhost Power= 
]]

describe("moonrl.slurm parsers (output captured from a real cluster)", function()
  it("reads squeue -r -o '%i|%A|%T|%R'", function()
    local q = slurm.parse_squeue(SQUEUE_ALL)
    assert.same({ state = "TIMEOUT", raw = "4", reason = "(TimeLimit)" }, q["1_3"])
    assert.same({ state = "CANCELLED", raw = "1", reason = "localhost" }, q["1_5"])
    local n = 0
    for _ in pairs(q) do n = n + 1 end
    assert.equal(5, n)
  end)

  it("reads sacct --parsable2 --noheader, and maps every final state to a status and words", function()
    local s = slurm.parse_sacct(SACCT_COMPLETION)
    assert.equal("TIMEOUT", s["4"].state)
    assert.equal(7, s["5"].code)
    assert.equal("00:00:22", s["5"].elapsed)
    -- sacct with a database: "CANCELLED by 1000", array tasks by JobID, a not yet started range skipped
    local db = slurm.parse_sacct("812_3|815|CANCELLED by 1000|0:15|00:00:41\n812_[4-6%2]|812|PENDING|0:0|00:00:00\n" ..
      "812_1|813|OUT_OF_MEMORY|0:125|00:10:02\n")
    assert.same({ state = "CANCELLED", raw = "815", code = 0, signal = 15, elapsed = "00:00:41" }, db["812_3"])
    assert.is_nil(db["812_[4-6%2]"])
    assert.equal("OUT_OF_MEMORY", db["812_1"].state)

    local e = slurm.describe_end("1_3", s["4"])
    assert.equal("timeout", e.reason)
    assert.equal(1, e.code)   -- never a clean exit
    assert.is_true(has(e.error, "TIMEOUT: it reached its time limit"), e.error)
    e = slurm.describe_end("812_1", db["812_1"], { ex = { mem = "4G" } })
    assert.equal("out_of_memory", e.reason)
    assert.equal("Slurm job 812_1 OUT_OF_MEMORY: it used more memory than it asked for (mem = 4G)", e.error)
    assert.equal("preempted", slurm.describe_end("9_1", { state = "PREEMPTED" }).reason)
    assert.equal("node_fail", slurm.describe_end("9_1", { state = "NODE_FAIL" }).reason)
    assert.equal("cancelled", slurm.describe_end("9_1", db["812_3"]).reason)
    assert.equal("Slurm job 1_4 FAILED: exit code 7", slurm.describe_end("1_4", s["5"]).error)
    assert.equal("Slurm job 1_9 FAILED: killed by signal 9", slurm.describe_end("1_9", { state = "FAILED", code = 0, signal = 9 }).error)
    e = slurm.describe_end("1_1", s["2"])
    assert.is_nil(e.error)
    assert.equal(0, e.code)
    assert.equal(0, e.signal)
  end)

  it("reads scontrol show job -o <array>: one line per task, keyed by array id", function()
    local c = slurm.parse_scontrol(SCONTROL)
    assert.equal("TIMEOUT", c["1_3"].state)
    assert.equal("4", c["1_3"].raw)
    assert.equal(15, c["1_3"].signal)
    assert.equal("00:01:00", c["1_3"].limit)
    assert.equal("CANCELLED", c["1_5"].state)
    assert.equal(3, c["1_2"].code)
    assert.equal("COMPLETED", c["1_1"].state)
    assert.is_nil(c["1"])
    -- a task listed twice, its ended record before or after its requeued one, is the one still to run
    local failed = SCONTROL:match("(JobId=3 [^\n]+)")
    local requeued = failed:gsub("JobId=3 ", "JobId=9 "):gsub("JobState=FAILED", "JobState=PENDING")
    for _, text in ipairs({ failed .. "\n" .. requeued, requeued .. "\n" .. failed }) do
      local t = slurm.parse_scontrol(text)["1_2"]
      assert.equal("PENDING", t.state)
      assert.equal("9", t.raw)
    end
  end)

  it("a requeued task's script resumes from its checkpoint, or, requeued before one, starts anew with the first run moved aside", function()
    -- the script submit writes, run by sh as slurmstepd runs it (the task's variables set), with the real binary
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    support.write_file(d .. "/t.lua", "return { name = 'rq', hardware = 'ci', threads = 1, total_steps = 64 * 4, " ..
      "warmup = { updates = 0 }, env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 }, " ..
      "policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 }, ppo = { rollout_steps = 8 }, " ..
      "log = { console = false, tensorboard = false, csv = false, checkpoint_interval = 2 } }\n")
    local bin = BIN:sub(1, 1) == "/" and BIN or (os.getenv("PWD") .. "/" .. BIN)
    local ex = slurm.new({ partition = "ci", bin = bin })
    support.write_file(d .. "/task.sh", slurm.batch_script(ex, { { index = 1,
      argv = { "train", "t.lua", "--dir", "t", "--no-eval" },
      resume_argv = { "train", "--resume", "t", "--no-eval" }, resume_dir = "t" } }, { dir = "sw" }))
    local function task(restarts)
      local p = io.popen(string.format("cd %q && SLURM_ARRAY_TASK_ID=1 SLURM_RESTART_COUNT=%d sh task.sh 2>&1; echo \"rc=$?\"",
        d, restarts))
      local out = p:read("*a")
      p:close()
      return tonumber(out:match("rc=(%d+)%s*$")), out
    end
    -- the first run was requeued before its first checkpoint: its files are there, no checkpoint
    uv.fs_mkdir(d .. "/t", tonumber("755", 8))
    support.write_file(d .. "/t/train.log", "moonrl run t\n")
    support.write_file(d .. "/t/metrics.jsonl", "")
    local rc, out = task(1)
    assert.equal(0, rc, out)
    local moved = support.files(d)
    local old
    for _, f in ipairs(moved) do if f:match("^t%.old%-") then old = f end end
    assert.is_string(old, table.concat(moved, " "))
    assert.equal("moonrl run t\n", support.read_file(d .. "/" .. old .. "/train.log"))   -- moved, not lost
    assert.is_true(#support.files(d .. "/t/checkpoints") > 0, out)
    -- requeued again, now with a checkpoint: it resumes (the run is finished: it says so, exit 0)
    rc, out = task(2)
    assert.equal(0, rc, out)
    assert.is_true(has(out, "is finished"), out)
    -- requeued while the first run still holds the directory (still writing its final checkpoint):
    -- the restart waits for the lock, then resumes (it is not refused as "in use")
    local holder = io.popen(string.format("cd %q && flock t/.lock sleep 2", d))
    local t0 = uv.hrtime()
    uv.sleep(300)   -- the holder has the lock by now
    rc, out = task(3)
    local waited = (uv.hrtime() - t0) / 1e9
    holder:close()
    assert.equal(0, rc, out)
    assert.is_true(has(out, "is finished"), out)
    assert.is_true(waited > 1.0, "the restart did not wait for the lock: " .. waited .. " s")
    -- a first start (no restart) in a used directory is still refused: only a requeue moves a run aside
    rc, out = task(0)
    assert.equal(2, rc, out)
    assert.is_true(has(out, "already holds a run"), out)
    support.rm_rf(d)
  end)

  it("tells from a task's output whether Slurm requeued it and no run has started since", function()
    local path = os.tmpname()
    local function with(text)
      local f = assert(io.open(path, "wb"))
      f:write(text)
      f:close()
      return slurm.requeue_pending(path)
    end
    local first = "run directory: sw/trial-002\nmoonrl: note: budget\n"
    local requeue = "slurmstepd-localhost: error: *** JOB 16 ON localhost CANCELLED AT 2026-11-24T00:48:08 " ..
      "DUE TO JOB REQUEUE ***\nmoonrl: SIGTERM: stopping after the update in progress (final checkpoint)\n" ..
      "sw/trial-002: stopped after 25 updates\n"
    assert.is_false(with(first))
    assert.is_true(with(first .. requeue))
    assert.is_false(with(first .. requeue .. "run directory: sw/trial-002\nresuming from update 25\n"))
    assert.is_false(with(first .. "slurmstepd-localhost: error: *** JOB 16 ON localhost CANCELLED AT " ..
      "2026-11-24T00:48:08 DUE TO TIME LIMIT ***\n"))
    os.remove(path)
    assert.is_false(slurm.requeue_pending(path))
    assert.is_false(slurm.requeue_pending(nil))
  end)
end)

-- ------------------------------------------------------------ the cluster

local SBIN = { munged = "/usr/sbin/munged", slurmctld = "/usr/sbin/slurmctld", slurmd = "/usr/sbin/slurmd" }

local wait_for = support.wait_for

-- sh -c cmd with SLURM_CONF; -> exit code, output (stdout and stderr)
local function sh(conf, cmd)
  local p = io.popen("SLURM_CONF=" .. conf .. " " .. cmd .. " 2>&1; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  return rc, (out:gsub("__rc=%d+%s*$", ""))
end

local Cluster = {}

function Cluster.start()
  if not have_bin then return nil, "no binary at " .. BIN .. " (build it: make build)" end
  for name, path in pairs(SBIN) do
    if not uv.fs_access(path, "X") then return nil, name .. " is not installed at " .. path .. " (make test-deps installs slurm-wlm and munge)" end
  end
  for _, c in ipairs({ "sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "mungekey" }) do
    local rc = os.execute("command -v " .. c .. " >/dev/null 2>&1")
    if rc ~= 0 and rc ~= true then return nil, c .. " is not installed (make test-deps installs slurm-wlm and munge)" end
  end
  if uv.getuid and uv.getuid() ~= 0 then return nil, "the test cluster's slurmd must run as root (this runs as uid " .. uv.getuid() .. ")" end
  local c = { dir = support.tmpdir(), procs = {} }
  local d = c.dir
  for _, sub in ipairs({ "munge", "state", "spool", "work" }) do uv.fs_mkdir(d .. "/" .. sub, tonumber("700", 8)) end
  uv.fs_chmod(d, tonumber("755", 8))
  local key = d .. "/munge/munge.key"
  local rc = os.execute("mungekey --create --keyfile=" .. key .. " >/dev/null 2>&1")
  if rc ~= 0 and rc ~= true then
    os.execute("dd if=/dev/urandom of=" .. key .. " bs=1024 count=1 >/dev/null 2>&1")
  end
  uv.fs_chmod(key, tonumber("600", 8))
  local port = 20000 + (uv.os_getpid() % 10000) * 2
  c.conf = d .. "/slurm.conf"
  local mem = math.floor((uv.get_total_memory() / 1048576) / 2)
  support.write_file(c.conf, table.concat({
    "ClusterName=moonrlspec",
    "SlurmctldHost=localhost",
    "SlurmctldPort=" .. port, "SlurmdPort=" .. (port + 1),
    "SlurmUser=root", "SlurmdUser=root",
    "AuthType=auth/munge", "CredType=cred/munge", "AuthInfo=socket=" .. d .. "/munge/munge.sock",
    "StateSaveLocation=" .. d .. "/state", "SlurmdSpoolDir=" .. d .. "/spool",
    "SlurmctldPidFile=" .. d .. "/slurmctld.pid", "SlurmdPidFile=" .. d .. "/slurmd.pid",
    "SlurmctldLogFile=" .. d .. "/slurmctld.log", "SlurmdLogFile=" .. d .. "/slurmd.log",
    "SlurmctldDebug=info", "SlurmdDebug=info",
    -- nothing that needs systemd or cgroups; no slurmdbd: sacct falls back (see the executor)
    "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
    "AccountingStorageType=accounting_storage/none",
    "JobCompType=jobcomp/filetxt", "JobCompLoc=" .. d .. "/jobcomp.txt",
    "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "SchedulerType=sched/backfill",
    "SchedulerParameters=sched_min_interval=100000", "MpiDefault=none", "ReturnToService=2",
    "InactiveLimit=0", "KillWait=10", "MinJobAge=300", "MessageTimeout=20",
    -- three CPUs on this machine's two (config_overrides): the arrays' two
    -- places, and one for the trial that runs into its time limit meanwhile
    "SlurmdParameters=config_overrides",
    "NodeName=localhost NodeAddr=127.0.0.1 CPUs=3 RealMemory=" .. mem .. " State=UNKNOWN",
    "PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
  }, "\n") .. "\n")
  local function daemon(name, args)
    local log = d .. "/" .. name .. ".out"
    local fd = uv.fs_open(log, "w", tonumber("644", 8))
    local p = { name = name, log = log }
    local handle, pid = uv.spawn(SBIN[name], { args = args, stdio = { nil, fd, fd } }, function(code, sig)
      p.done, p.code, p.signal = true, code, sig
      p.handle:close()
    end)
    uv.fs_close(fd)
    if not handle then return nil, "cannot start " .. SBIN[name] .. ": " .. tostring(pid) end
    p.handle, p.pid = handle, pid
    c.procs[#c.procs + 1] = p
    return p
  end
  local function fail(why, p)
    local text = p and (support.read_file(p.log) or "") or ""
    Cluster.stop(c)
    return nil, why .. (text ~= "" and (":\n" .. text:sub(-1500)) or "")
  end
  local m, merr = daemon("munged", { "-F", "-f", "--socket=" .. d .. "/munge/munge.sock", "--key-file=" .. key,
    "--log-file=" .. d .. "/munge/munged.log", "--pid-file=" .. d .. "/munge/munged.pid", "--seed-file=" .. d .. "/munge/seed" })
  if not m then return fail(merr) end
  if not wait_for(function() return uv.fs_stat(d .. "/munge/munge.sock") ~= nil or m.done end, 10000) or m.done then
    return fail("munged did not start", m)
  end
  local ctl, cerr = daemon("slurmctld", { "-D", "-i", "-f", c.conf })
  if not ctl then return fail(cerr) end
  local sd, derr = daemon("slurmd", { "-D", "-f", c.conf, "-N", "localhost" })
  if not sd then return fail(derr) end
  local state
  local ok = wait_for(function()
    if ctl.done or sd.done then return true end
    local _, out = sh(c.conf, "sinfo -h -N -o %T")
    state = out:match("^%s*(%S+)")
    return state == "idle"
  end, 40000)
  if not ok or ctl.done or sd.done then
    return fail("the node did not become idle (sinfo: " .. tostring(state) .. ")", ctl.done and ctl or sd)
  end
  return c
end

function Cluster.stop(c)
  if not c then return end
  -- the jobs first (slurmstepd outlives slurmd), then the daemons
  if c.conf then
    sh(c.conf, "scancel --user=root")
    wait_for(function() local _, q = sh(c.conf, "squeue -h -o %i") return not q:match("%d") end, 20000)
  end
  for i = #c.procs, 1, -1 do
    local p = c.procs[i]
    if not p.done then uv.kill(p.pid, "sigterm") end
  end
  local all = function()
    for _, p in ipairs(c.procs) do if not p.done then return false end end
    return true
  end
  if not wait_for(all, 10000) then
    for _, p in ipairs(c.procs) do if not p.done then uv.kill(p.pid, "sigkill") end end
    wait_for(all, 5000)
  end
  support.rm_rf(c.dir)
end

-- The sweep script: arg[1] = sweep directory, arg[2] = the case.
local SCRIPT = [==[
local moonrl = require "moonrl"
local dir, case = arg[1], arg[2]
local base = {
  name = "slurm", hardware = "ci", threads = 1, total_steps = 64 * 12, warmup = { updates = 0 },
  env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8, max_episode_steps = 16 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8 },
  log = { console = false, tensorboard = false, csv = false, checkpoint_interval = 5 },
}
local spec = {
  base = base, dir = dir, metric = "episode_return_mean", mode = "max", smooth = 4, poll_ms = 100, kill_grace = 30,
  executor = moonrl.slurm{ partition = "ci", time = "00:10:00", cpus_per_task = 1, poll = 0.5 },
  hooks = {
    on_trial_failed = function(r) print("hook failed " .. r.label .. " " .. tostring(r.error)) end,
  },
}
if case == "crash" then
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 5e-4 }, ["debug.crash_at_update"] = moonrl.grid{ 0, 3 } }
  spec.method, spec.parallel = "grid", 2
elseif case == "asha" then
  -- the metric is the (constant) learning rate: trial 2 is below trial 1 at the first rung and stops
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 3e-4, 2e-3 } }
  spec.method, spec.parallel, spec.metric, spec.smooth = "grid", 1, "lr", 1
  spec.scheduler = moonrl.asha{ grace_steps = 64 * 5, reduction = 3 }
  base.total_steps = 64 * 1500
elseif case == "long" then
  -- trial 1 is short, trial 2 trains until it is interrupted, cancelled or followed again
  spec.space = { total_steps = moonrl.grid{ 64 * 12, 64 * 3000 } }
  spec.method, spec.parallel = "grid", 1
elseif case == "timeout" then
  -- runs into Slurm's time limit of one minute (reniced: it shares the CPUs with the other tests)
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3 } }
  spec.executor = moonrl.slurm{ partition = "ci", time = 1, poll = 1, setup = { "renice -n 19 $$ >/dev/null" } }
  base.total_steps = 64 * 100000000
elseif case == "ranks" then
  -- one trial of two ranks: srun --ntasks=2 in an sbatch --ntasks=2 job (docs/data-parallel.md)
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3 } }
  spec.method, spec.parallel, spec.ranks = "grid", 1, 2
elseif case == "bad_partition" then
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 5e-4 } }
  spec.executor = moonrl.slurm{ partition = "nosuch" }
elseif case == "pbt" then
  -- two members (the timeout test holds the third CPU), exploiting every 25 updates through their control sockets
  spec.space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 3e-3) }
  spec.method, spec.population, spec.poll_ms = "pbt", 2, 50
  spec.pbt = { interval = 25, fraction = 0.5, test = "none", explore = { ["ppo.lr"] = "perturb" } }
  base.total_steps = 64 * 600
elseif case == "function" then
  spec.trials, spec.parallel = 3, 2
  spec.method = function(history, ctx)
    print("propose " .. ctx.index .. " after " .. #history .. " result(s), " .. ctx.running .. " running")
    return { ["ppo.lr"] = 1e-3 / ctx.index }
  end
end
local sweep = moonrl.sweep(spec)
local s = sweep:wait()
print("summary " .. s.status .. " " .. #s.results .. " best " .. (s.best and s.best.label or "-"))
print(sweep:table())
]==]

local function read_results(path)
  local out = { results = {}, starts = {}, by = {} }
  for line in (support.read_file(path) or ""):gmatch("[^\n]+") do
    local o = assert(json.decode(line))
    if o.event == "start" then table.insert(out.starts, o)
    elseif o.event == nil then table.insert(out.results, o) out.by[o.trial] = o end
  end
  return out
end

describe("sweeps on a Slurm cluster (a real one, started here)", function()
  local cluster, why, dir

  local timeout_run   -- started first, checked last: a minute and more in Slurm, beside the other tests
  local spawned = {}  -- sweep processes a failed test left running are killed after it
  local function kill_left(list)
    for _, proc in ipairs(list) do
      if not proc.done and proc.pid then uv.kill(proc.pid, "sigkill") end
    end
    wait_for(function()
      for _, proc in ipairs(list) do if not proc.done then return false end end
      return true
    end, 5000)
  end
  setup(function()
    local ok, c, err = pcall(Cluster.start)
    if ok then cluster, why = c, err else why = tostring(c) end
    if cluster then
      local tdir = cluster.dir .. "/work/timeout"
      uv.fs_mkdir(tdir, tonumber("755", 8))
      support.write_file(tdir .. "/sweep.lua", SCRIPT)
      timeout_run = support.spawn(BIN, tdir, "run sweep.lua sw timeout", { env = "SLURM_CONF=" .. cluster.conf })
      timeout_run.dir = tdir
    end
  end)
  teardown(function()
    kill_left(spawned)
    if timeout_run then kill_left({ timeout_run }) end
    Cluster.stop(cluster)
  end)
  after_each(function() kill_left(spawned) end)
  before_each(function()
    if not cluster then return end
    dir = cluster.dir .. "/work/" .. tostring(uv.hrtime())
    uv.fs_mkdir(dir, tonumber("755", 8))
    support.write_file(dir .. "/sweep.lua", SCRIPT)
  end)

  local function need_cluster()
    if not cluster then pending("no Slurm test cluster: " .. tostring(why)) end
    return cluster ~= nil
  end

  local function spawn(args)
    -- every Slurm command the sweep runs, and what it printed, for the message of a failure
    local proc = support.spawn(BIN, dir, args, { env = "SLURM_CONF=" .. cluster.conf ..
      " MOONRL_SLURM_TRACE=" .. dir .. "/slurm-trace.txt", wait = 120000 })
    spawned[#spawned + 1] = proc
    return proc
  end

  local function moonrl(args)
    local p = spawn(args)
    return p.wait(), p.out(), p.err()
  end

  local function metric_lines(path)
    return select(2, (support.read_file(path) or ""):gsub("\n", ""))
  end

  it("submits a grid as one array with the %parallel throttle; a crashing trial is failed, the others finish", function()
    if not need_cluster() then return end
    local code, out, err = moonrl("run sweep.lua sw crash")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(4, #rec.results)
    assert.equal(4, #rec.starts)
    -- one sbatch: one array, trial i = task i
    local array = rec.starts[1].job:match("^(%d+)_1$")
    assert.is_string(array, rec.starts[1].job)
    for _, s in ipairs(rec.starts) do assert.equal(array .. "_" .. s.trial, s.job) end
    assert.same({ "submit-001.sh" }, support.files(dir .. "/sw/slurm"))
    local script = support.read_file(dir .. "/sw/slurm/submit-001.sh")
    assert.is_true(has(script, "  4) if [ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ]; then [ -e sw/trial-004/.lock ] && " ..
      "command -v flock >/dev/null 2>&1 && flock -w 120 sw/trial-004/.lock true; ls sw/trial-004/checkpoints/*.mrck " ..
      ">/dev/null 2>&1 && exec " .. BIN .. " train --resume sw/trial-004 --no-eval; exec " .. BIN ..
      " train sw/trial-004.lua --dir sw/trial-004 --no-eval --force; fi\n" ..
      "     exec " .. BIN .. " train sw/trial-004.lua --dir sw/trial-004 --no-eval ;;"), script)
    local _, sc = sh(cluster.conf, "scontrol show job -o " .. array)
    assert.is_true(has(sc, "ArrayTaskThrottle=2"), sc)
    for i = 1, 4 do
      local r = rec.by[i]
      local crash = r.params["debug.crash_at_update"]
      if crash == 0 then
        assert.equal("done", r.status, json.encode(r))
        assert.equal(768, r.steps)
        assert.equal("COMPLETED", r.slurm_state)
      else
        assert.equal("failed", r.status)
        assert.equal("FAILED", r.slurm_state)
        assert.equal("exit", r.reason)
        assert.equal("Slurm job " .. array .. "_" .. i .. " FAILED: killed by signal 9", r.error)
        assert.is_true(has(table.concat(r.log_tail, "\n"), "debug.crash_at_update = 3"), json.encode(r.log_tail))
      end
    end
    -- the trial's output.log is Slurm's --output for its task
    assert.is_table(uv.fs_stat(dir .. "/sw/trial-001/output.log"))
    assert.is_true(has(out, "submitted"), out)
    assert.is_true(has(out, "summary done 4 best trial-00"), out)
    local json_info = json.decode(support.read_file(dir .. "/sw/sweep.json"))
    assert.equal("slurm", json_info.executor)
  end)

  it("runs a trial of 2 ranks as srun --ntasks=2 in its job: one run, every rank's steps", function()
    if not need_cluster() then return end
    local code, out, err = moonrl("run sweep.lua sw ranks")
    assert.equal(0, code, err .. out .. "\n" .. (support.read_file(dir .. "/slurm-trace.txt") or ""))
    local rec = read_results(dir .. "/sw/results.jsonl")
    local r = rec.by[1]
    assert.equal("done", r.status, json.encode(r) .. (support.read_file(dir .. "/sw/trial-001/output.log") or ""))
    assert.equal(768, r.steps)   -- total_steps: every rank's; 6 updates of 2 x 64
    local script = support.read_file(dir .. "/sw/slurm/submit-001.sh")
    assert.is_true(has(script, "exec srun --ntasks=2 --kill-on-bad-exit=1 --mpi=pmix " .. BIN ..
      " train sw/trial-001.lua --dir sw/trial-001 --no-eval ;;"), script)
    local log = support.read_file(dir .. "/sw/trial-001/train.log")
    assert.is_true(has(log, "2 ranks (Open MPI"), log)
    assert.is_true(has(log, "update 6 steps 768"), log)
  end)

  it("stops the trial ASHA drops with scancel --signal=INT: it leaves its final checkpoint", function()
    if not need_cluster() then return end
    local code, out, err = moonrl("run sweep.lua sw asha")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal("done", rec.by[1].status, json.encode(rec.by[1]))
    local r = rec.by[2]
    assert.equal("stopped", r.status, json.encode(r))
    assert.equal("rung 1 (320 agent-steps): 0.0003 is #2 of 2, top 1 go on", r.why)
    assert.equal(130, r.exit_code)   -- moonrl's own exit on SIGINT, seen through Slurm
    assert.is_true(r.steps >= 320 and r.steps < 64 * 1500, tostring(r.steps))
    local ck = support.files(dir .. "/sw/trial-002/checkpoints")
    assert.equal(string.format("update_%07d.mrck", r.updates), ck[#ck])
    assert.equal("done", rec.by[3].status, json.encode(rec.by[3]))
    assert.is_true(has(out, "summary done 3 best trial-003"), out)
  end)

  it("records a task cancelled in Slurm as failed with its state, reason and Slurm's last lines", function()
    if not need_cluster() then return end
    local p = spawn("run sweep.lua sw long")
    local metrics = dir .. "/sw/trial-002/metrics.jsonl"
    assert.is_true(wait_for(function() return metric_lines(metrics) >= 20 or p.done end, 60000) and not p.done,
      "trial-002 did not get going:\n" .. p.out() .. p.err())
    local rec = read_results(dir .. "/sw/results.jsonl")
    local job = rec.starts[2].job
    local rc, out = sh(cluster.conf, "scancel " .. job)
    assert.equal(0, rc, out)
    assert.equal(0, p.wait())
    rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal("done", rec.by[1].status, json.encode(rec.by[1]))
    local r = rec.by[2]
    assert.equal("failed", r.status)
    assert.equal("CANCELLED", r.slurm_state)
    assert.equal("cancelled", r.reason)
    assert.equal("Slurm job " .. job .. " CANCELLED (scancel, or by an administrator) before it finished", r.error)
    assert.is_true(has(table.concat(r.log_tail, "\n"), "CANCELLED AT"), json.encode(r.log_tail))
    assert.is_true(has(p.out(), "hook failed trial-002 Slurm job " .. job .. " CANCELLED"), p.out())
  end)

  it("resumes: SIGINT stops the task with a checkpoint; a re-run skips finished trials and resumes it", function()
    if not need_cluster() then return end
    local p = spawn("run sweep.lua sw long")
    local metrics = dir .. "/sw/trial-002/metrics.jsonl"
    assert.is_true(wait_for(function() return metric_lines(metrics) >= 20 or p.done end, 60000) and not p.done,
      "trial-002 did not get going:\n" .. p.out() .. p.err())
    uv.kill(p.pid, "sigint")
    assert.equal(130, p.wait(60000))
    assert.is_true(has(p.out(), "trial-002: interrupted after"), p.out())
    assert.is_true(#support.files(dir .. "/sw/trial-002/checkpoints") > 0)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(1, #rec.results)

    local code, out, err = moonrl("run sweep.lua sw long")
    assert.equal(0, code, err .. out)
    rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(2, #rec.results)
    assert.equal("done", rec.by[2].status, json.encode(rec.by[2]))
    assert.equal(64 * 3000, rec.by[2].steps)
    assert.equal(3, #rec.starts)
    assert.equal(2, rec.starts[3].trial)
    assert.is_true(rec.starts[3].resume)
    assert.is_true(has(out, "resuming: 1 result(s) read back"), out)
    assert.same({ "submit-001.sh", "submit-002.sh" }, support.files(dir .. "/sw/slurm"))
    assert.is_true(has(support.read_file(dir .. "/sw/slurm/submit-002.sh"), "train --resume sw/trial-002"))
    -- every update once
    local seen, n = {}, 0
    for line in support.read_file(metrics):gmatch("[^\n]+") do
      local m = json.decode(line)
      if m.event == nil then
        assert.is_nil(seen[m.update], "update " .. tostring(m.update) .. " twice")
        seen[m.update], n = true, n + 1
      end
    end
    assert.equal(3000, n)
  end)

  it("a re-run follows a task an earlier sweep process left running (killed) instead of submitting it again", function()
    if not need_cluster() then return end
    local p = spawn("run sweep.lua sw long")
    local metrics = dir .. "/sw/trial-002/metrics.jsonl"
    assert.is_true(wait_for(function() return metric_lines(metrics) >= 20 or p.done end, 60000) and not p.done,
      "trial-002 did not get going:\n" .. p.out() .. p.err())
    uv.kill(p.pid, "sigkill")   -- the login node went away; Slurm goes on
    p.wait(10000)
    local rec = read_results(dir .. "/sw/results.jsonl")
    local job = rec.starts[2].job
    local _, q = sh(cluster.conf, "squeue -h -r -j " .. job:match("^%d+") .. " -o '%i %T'")
    assert.is_true(has(q, job .. " RUNNING"), q)

    local code, out, err = moonrl("run sweep.lua sw long")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "trial-002: following Slurm job " .. job .. " again"), out)
    rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(2, #rec.results)
    assert.equal("done", rec.by[2].status, json.encode(rec.by[2]))
    assert.equal(3, #rec.starts)
    assert.equal(job, rec.starts[3].job)
    assert.is_true(rec.starts[3].adopted)
    assert.same({ "submit-001.sh" }, support.files(dir .. "/sw/slurm"))
  end)

  it("a task Slurm requeues (as after a node failure) starts again from its checkpoint", function()
    if not need_cluster() then return end
    local p = spawn("run sweep.lua sw long")
    local metrics = dir .. "/sw/trial-002/metrics.jsonl"
    -- going, and with a checkpoint to start again from (a checkpoint waits for its metrics rows to be
    -- written, so 20 rows alone did not mean one existed: under load the requeue came first and the
    -- trial started over instead)
    local function checkpointed()
      for _, f in ipairs(support.files(dir .. "/sw/trial-002/checkpoints") or {}) do
        if f:match("%.mrck$") then return true end
      end
      return false
    end
    assert.is_true(wait_for(function() return (metric_lines(metrics) >= 20 and checkpointed()) or p.done end, 90000) and
      not p.done, "trial-002 did not get going:\n" .. p.out() .. p.err())
    local job = read_results(dir .. "/sw/results.jsonl").starts[2].job
    local rc, out = sh(cluster.conf, "scontrol requeue " .. job)
    assert.equal(0, rc, out)
    -- slurmctld holds a requeued job back (BeginTime) for a while; a test does not wait for that
    assert.is_true(wait_for(function()
      local _, q = sh(cluster.conf, "squeue -h -r -j " .. job .. " -o %T")
      return q:match("PENDING") ~= nil
    end, 20000), "the requeued job is not pending")
    rc, out = sh(cluster.conf, "scontrol update jobid=" .. job .. " StartTime=now")
    assert.equal(0, rc, out)
    -- the whole second run of trial-002 happens in here: generous for a loaded 2-core CI machine
    local ok, code = pcall(p.wait, 180000)
    assert.is_true(ok and code == 0, tostring(code) .. "\n" .. p.out() .. p.err() ..
      select(2, sh(cluster.conf, "squeue -r")) .. select(2, sh(cluster.conf, "scontrol show job " .. job)) ..
      (support.read_file(dir .. "/sw/trial-002/output.log") or ""):sub(-3000))
    local rec = read_results(dir .. "/sw/results.jsonl")
    local function why()
      return json.encode(rec.by[2]) .. "\n" .. p.out() .. p.err() ..
        select(2, sh(cluster.conf, "scontrol show job -o " .. job)) ..
        (support.read_file(dir .. "/slurm-trace.txt") or ""):sub(-6000) ..
        "\nslurmd.log:\n" .. (support.read_file(cluster.dir .. "/slurmd.log") or ""):sub(-4000) ..
        "\nslurmctld.log:\n" .. (support.read_file(cluster.dir .. "/slurmctld.log") or ""):sub(-4000)
    end
    assert.equal("done", rec.by[2].status, why())
    assert.equal(64 * 3000, rec.by[2].steps)
    local _, sc = sh(cluster.conf, "scontrol show job -o " .. job)
    if #rec.starts == 2 then
      -- Slurm restarted it, the sweep did not submit it again, and Slurm's own record says so:
      -- the task ran twice, the second time to completion
      assert.is_true(has(sc, "Restarts=1 ") and has(sc, "JobState=COMPLETED "), sc)
    else
      -- under load slurmctld has restarted the task at once and that start ended at once, with
      -- nothing in its output (FAILED, Restarts=1, RunTime 0): no run started within the executor's
      -- wait, so the sweep resumed the trial itself, once
      assert.equal(3, #rec.starts, why())
      assert.is_true(rec.starts[3].resume, why())
      assert.is_true(has(p.out(), "no run of it started within 60 s"), why())
    end
    local log = support.read_file(dir .. "/sw/trial-002/output.log")
    assert.is_true(has(log, "resum"), log:sub(-2000))
    local seen, n = {}, 0
    for line in support.read_file(metrics):gmatch("[^\n]+") do
      local m = json.decode(line)
      if m.event == nil then
        assert.is_nil(seen[m.update], "update " .. tostring(m.update) .. " twice")
        seen[m.update], n = true, n + 1
      end
    end
    assert.equal(3000, n)
  end)

  it("a first submission Slurm refuses (no such partition) is an error of the script, not failed trials", function()
    if not need_cluster() then return end
    local code, out, err = moonrl("run sweep.lua sw bad_partition")
    assert.equal(1, code, err .. out)
    assert.is_true(has(err, "moonrl.sweep: the trials could not be submitted: sbatch failed (exit 1): sbatch: error: " ..
      "invalid partition specified: nosuch"), err)
    assert.is_true(has(err, "command: sbatch --parsable --array=1-2%1 "), err)
    assert.is_nil(support.read_file(dir .. "/sw/results.jsonl"))
  end)

  it("trains a PBT population as one array: members exploit and explore through their control sockets", function()
    if not need_cluster() then return end
    local code, out, err = moonrl("run sweep.lua sw pbt")
    assert.equal(0, code, err .. out .. "\n" .. (support.read_file(dir .. "/slurm-trace.txt") or ""))
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(2, #rec.results)
    for _, r in ipairs(rec.results) do
      assert.equal("done", r.status, json.encode(r))
      assert.equal("COMPLETED", r.slurm_state)
      assert.equal(64 * 600, r.steps)
    end
    assert.equal(rec.starts[1].job:match("^(%d+)_"), rec.starts[2].job:match("^(%d+)_"))   -- one array
    local exploits = {}
    for line in support.read_file(dir .. "/sw/results.jsonl"):gmatch("[^\n]+") do
      local o = json.decode(line)
      if o.event == "exploit" then exploits[#exploits + 1] = o end
    end
    assert.is_true(#exploits >= 1, out)
    local e = exploits[1]
    local log = support.read_file(string.format("%s/sw/trial-%03d/train.log", dir, e.trial))
    assert.is_true(has(log, "update " .. e.update .. ": the weights, Adam moments and PopArt of "), log)
    assert.is_true(has(support.read_file(string.format("%s/sw/trial-%03d/changes.lua", dir, e.trial)), 'source = "pbt: explore"'))
  end)

  it("a method function proposes as places free up; each proposal goes to Slurm as it comes", function()
    if not need_cluster() then return end
    local code, out, err = moonrl("run sweep.lua sw function")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "propose 1 after 0 result(s), 0 running"), out)
    assert.is_true(has(out, "propose 2 after 0 result(s), 0 running"), out)
    assert.is_true(has(out, "propose 3 after 1 result(s), 1 running"), out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(3, #rec.results)
    for i = 1, 3 do assert.equal("done", rec.by[i].status, json.encode(rec.by[i])) end
    -- trials 1 and 2 in the first array; trial 3 in a second one
    assert.same({ "submit-001.sh", "submit-002.sh" }, support.files(dir .. "/sw/slurm"))
    assert.equal(rec.starts[1].job:match("^%d+"), rec.starts[2].job:match("^%d+"))
    assert.not_equal(rec.starts[1].job:match("^%d+"), rec.starts[3].job:match("^%d+"))
  end)

  it("records a trial past its Slurm time limit (time = 1 minute) as timed out, with its final checkpoint", function()
    if not need_cluster() then return end
    local d = timeout_run.dir
    local out = function() return (support.read_file(d .. "/stdout") or "") .. (support.read_file(d .. "/stderr") or "") end
    assert.is_true(wait_for(function() return timeout_run.done end, 180000), "the timeout sweep did not end:\n" .. out())
    assert.equal(0, timeout_run.code, out())
    local rec = read_results(d .. "/sw/results.jsonl")
    assert.equal(1, #rec.results)
    local r = rec.by[1]
    assert.equal("failed", r.status)
    assert.equal("TIMEOUT", r.slurm_state)
    assert.equal("timeout", r.reason)
    assert.equal("Slurm job " .. rec.starts[1].job .. " TIMEOUT: it reached its time limit (time = 1) and Slurm " ..
      "ended it (SIGTERM, SIGKILL after KillWait)", r.error)
    assert.is_true(has(table.concat(r.log_tail, "\n"), "DUE TO TIME LIMIT"), json.encode(r.log_tail))
    -- SIGTERM is moonrl's stop: the update in progress, then a final checkpoint
    local ck = support.files(d .. "/sw/trial-001/checkpoints")
    assert.equal(string.format("update_%07d.mrck", r.updates), ck[#ck])
    assert.is_true(r.steps > 0)
  end)
end)

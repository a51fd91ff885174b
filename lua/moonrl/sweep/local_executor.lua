-- moonrl.sweep.local_executor - runs a sweep's trials as child processes of
-- this one, on this machine: the same moonrl binary, spawned with luv on the
-- loop, each in a session of its own (moonrl.run.process starts and follows
-- them; this file is the executor interface over it).
--
-- The executor interface (what moonrl.sweep asks of any executor;
-- slurm_executor.lua, beside this file, answers the same plus start_array):
--   executor.name                            "local"
--   executor:start(spec) -> job | nil, err
--       spec.argv       moonrl's arguments: { "train", cfg, "--dir", dir, ... }
--       spec.dir        the trial's run directory (exists; shared with the sweep)
--       spec.output     file that gets the trial's stdout and stderr (appended);
--                       nil (local only): this process's own
--       spec.index      the trial's number
--       spec.on_exit    function(exit) called once, on the loop, when the trial has
--                       ended: exit = { code = n, signal = n, signal_name = "sigkill" | nil }
--                       and, from an executor that knows more, state (Slurm's),
--                       reason and error (recorded in the trial's result)
--       spec.on_running function() for an executor with a queue: called when a
--                       queued trial starts (its time_limit counts from then)
--   An executor with a queue of its own has, instead of start,
--   executor:start_array(specs, opts) -> jobs | nil, err: every trial known
--       now at once, at most opts.parallel running (opts.dir: the sweep's
--       directory; opts.output: the trials' output files, %3a = index), and
--       may have executor:adopt(ids) -> { [id] = state } and
--       executor:attach(id, spec) -> job to follow again what an earlier sweep
--       process started (the ids are the start events' `job` in results.jsonl).
--   job.id                                   what identifies it to a person (pid, job id)
--   job.queued      true while it waits in the executor's queue (the sweep shows "queued")
--   job:stop()      the run's own stop path: the update in progress ends, a
--                   final checkpoint, files closed (SIGINT here; scancel --signal=INT)
--   job:kill()      at once, no checkpoint (SIGKILL)
--   job:alive() -> boolean
--   executor:follow(spec) -> job | nil (local only): a trial an earlier sweep
--       process started that still runs (it holds its run directory's lock,
--       moonrl.run.dirlock), followed again rather than started a second time.
--       It is not a child of this process: its end is seen when the lock is
--       free again (polled), with exit = { adopted = true } (no exit status);
--       stop/kill signal the pid the lock file names.
-- Progress is not the executor's business: the sweep reads the trial's
-- metrics.jsonl in its run directory (a shared file system on a cluster).
--
-- Why a session of its own, and the job's methods: moonrl.run.process.

local process = require("moonrl.run.process")

local Local = {}
Local.__index = Local

local executor = {}

-- The moonrl binary: $MOONRL_BIN, else this process's own executable.
executor.binary = process.binary
-- The launcher of a trial of several ranks: $MOONRL_MPIRUN, else mpirun on PATH.
executor.mpirun = process.mpirun
executor.signal_name = process.signal_name

function executor.new(opts)
  opts = opts or {}
  return setmetatable({ name = "local", bin = opts.bin or executor.binary() }, Local)
end

function Local:start(spec)
  return process.start(spec, self.bin)
end

-- A trial this process did not start: alive while its run directory's lock
-- is held (the kernel drops it however the trial ends).
function Local:follow(spec, poll_ms)
  return process.follow(spec.dir, spec.on_exit, poll_ms)
end

return executor

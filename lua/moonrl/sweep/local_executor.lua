-- moonrl.sweep.local_executor - runs a sweep's trials as child processes of
-- this one, on this machine: the same moonrl binary, spawned with luv on the
-- loop, each in a session of its own.
--
-- The executor interface (what moonrl.sweep asks of any executor;
-- slurm_executor.lua, beside this file, answers the same plus start_array):
--   executor.name                            "local"
--   executor:start(spec) -> job | nil, err
--       spec.argv       moonrl's arguments: { "train", cfg, "--dir", dir, ... }
--       spec.dir        the trial's run directory (exists; shared with the sweep)
--       spec.output     file that gets the trial's stdout and stderr (appended);
--                       nil (local only): this process's own (moonrl.run.launched)
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
-- Why a session of its own (setsid, luv's `detached`): Ctrl-C in a terminal
-- signals the whole foreground process group; the sweep forwards one SIGINT
-- to each trial itself, and a trial that got two would quit without its
-- final checkpoint. The handle stays referenced, so the loop lives until the
-- trial has ended.

local uv = require("luv")

local Local = {}
Local.__index = Local

local executor = {}

-- The moonrl binary: $MOONRL_BIN, else this process's own executable.
function executor.binary()
  local env = os.getenv("MOONRL_BIN")
  if env and env ~= "" then return env end
  return uv.exepath()
end

-- The launcher of a trial of several ranks: $MOONRL_MPIRUN, else mpirun on PATH.
function executor.mpirun()
  local env = os.getenv("MOONRL_MPIRUN")
  return env and env ~= "" and env or "mpirun"
end

function executor.new(opts)
  opts = opts or {}
  return setmetatable({ name = "local", bin = opts.bin or executor.binary() }, Local)
end

local SIGNAL_NAMES = {}
for name, n in pairs(uv.constants or {}) do
  if type(name) == "string" and name:match("^SIG%u+$") and type(n) == "number" then
    SIGNAL_NAMES[n] = SIGNAL_NAMES[n] or name:lower()
  end
end
executor.signal_name = function(n) return SIGNAL_NAMES[n] end

local Job = {}
Job.__index = Job

function Local:start(spec)
  local fd, ferr = 1, nil
  if spec.output then
    fd, ferr = uv.fs_open(spec.output, "a", tonumber("644", 8))
    if not fd then return nil, "cannot open " .. spec.output .. ": " .. tostring(ferr) end
  end
  local job = setmetatable({ alive_ = true }, Job)
  -- a trial of several ranks: mpirun starts them (docs/data-parallel.md);
  -- a stop (SIGTERM) reaches rank 0 through it, the others ignore it
  local file, args = self.bin, spec.argv
  if (spec.ranks or 1) > 1 then
    file, args = executor.mpirun(), { "-n", tostring(spec.ranks), self.bin, unpack(spec.argv) }
  end
  local handle, pid = uv.spawn(file, {
    args = args, stdio = { nil, fd, spec.output and fd or 2 }, detached = true,
  }, function(code, signal)
    job.alive_ = false
    if job.handle and not job.handle:is_closing() then job.handle:close() end
    spec.on_exit({ code = code, signal = signal, signal_name = signal ~= 0 and SIGNAL_NAMES[signal] or nil })
  end)
  if spec.output then uv.fs_close(fd) end
  if not handle then
    if file ~= self.bin then
      return nil, "cannot start " .. file .. " for a trial of " .. spec.ranks .. " ranks: " .. tostring(pid) ..
        " (ranks > 1 needs Open MPI's mpirun: apt install openmpi-bin, or set MOONRL_MPIRUN)"
    end
    return nil, "cannot start " .. self.bin .. ": " .. tostring(pid)
  end
  job.handle, job.pid, job.id = handle, pid, "pid " .. pid
  return job
end

-- A trial this process did not start: alive while its run directory's lock
-- is held (the kernel drops it however the trial ends).
function Local:follow(spec, poll_ms)
  local dirlock = require("moonrl.run.dirlock")
  local lock = dirlock.take(spec.dir)
  if lock then lock:release() return nil end   -- nobody runs there
  local text = io.open(spec.dir .. "/" .. dirlock.FILE, "rb")
  local pid = text and tonumber((text:read("*a") or ""):match("^(%d+)"))
  if text then text:close() end
  if not pid then return nil end
  local job = setmetatable({ alive_ = true, pid = pid, id = "pid " .. pid, adopted = true }, Job)
  job.timer = uv.new_timer()
  job.timer:start(poll_ms or 250, poll_ms or 250, function()
    local l = dirlock.take(spec.dir)
    if not l then return end
    l:release()
    job.alive_ = false
    job.timer:stop()
    job.timer:close()
    spec.on_exit({ code = 0, signal = 0, adopted = true })
  end)
  return job
end

function Job:alive() return self.alive_ end

function Job:stop()
  if not self.alive_ then return end
  if self.adopted then uv.kill(self.pid, "sigint") else pcall(self.handle.kill, self.handle, "sigint") end
end

function Job:kill()
  if not self.alive_ then return end
  if self.adopted then uv.kill(self.pid, "sigkill") else pcall(self.handle.kill, self.handle, "sigkill") end
end

return executor

-- moonrl.run.process - a moonrl run as a child process of this one, on this
-- machine: the same moonrl binary (or mpirun starting it on several ranks),
-- spawned with luv on the loop, in a session of its own. What starts one:
-- a sweep's trials (moonrl.sweep.local_executor, whose header is the
-- executor interface) and a run of several ranks (moonrl.run.launched).
--
--   process.binary() -> path       $MOONRL_BIN, else this process's own executable
--   process.mpirun() -> command    $MOONRL_MPIRUN, else mpirun on PATH
--   process.signal_name(n) -> "sigkill" | nil
--   process.start(spec[, bin]) -> job | nil, err
--       spec.argv       moonrl's arguments: { "train", cfg, "--dir", dir, ... }
--       spec.ranks      > 1: `mpirun -n ranks bin argv...` (docs/data-parallel.md)
--       spec.output     file that gets its stdout and stderr (appended); nil:
--                       this process's own
--       spec.on_exit    function(exit) called once, on the loop, when it has
--                       ended: exit = { code = n, signal = n, signal_name = "sigkill" | nil }
--   process.follow(dir, on_exit[, poll_ms]) -> job | nil: a run an earlier
--       process started that still runs (it holds its run directory's lock,
--       moonrl.run.dirlock); nil when nobody runs there. Its end is seen when
--       the lock is free again (polled): on_exit{ code = 0, signal = 0,
--       adopted = true } (no exit status); stop/kill signal the pid the lock
--       file names.
--   job.id ("pid N"), job.pid
--   job:stop()      the run's own stop path: the update in progress ends, a
--                   final checkpoint, files closed (SIGINT)
--   job:kill()      at once, no checkpoint (SIGKILL)
--   job:alive() -> boolean
--
-- Why a session of its own (setsid, luv's `detached`): Ctrl-C in a terminal
-- signals the whole foreground process group; a sweep forwards one SIGINT
-- to each trial itself, and a trial that got two would quit without its
-- final checkpoint. The handle stays referenced, so the loop lives until the
-- child has ended.

local uv = require("luv")

local process = {}

function process.binary()
  local env = os.getenv("MOONRL_BIN")
  if env and env ~= "" then return env end
  return uv.exepath()
end

function process.mpirun()
  local env = os.getenv("MOONRL_MPIRUN")
  return env and env ~= "" and env or "mpirun"
end

local SIGNAL_NAMES = {}
for name, n in pairs(uv.constants or {}) do
  if type(name) == "string" and name:match("^SIG%u+$") and type(n) == "number" then
    SIGNAL_NAMES[n] = SIGNAL_NAMES[n] or name:lower()
  end
end
process.signal_name = function(n) return SIGNAL_NAMES[n] end

local Job = {}
Job.__index = Job

function process.start(spec, bin)
  bin = bin or process.binary()
  local fd, ferr = 1, nil
  if spec.output then
    fd, ferr = uv.fs_open(spec.output, "a", tonumber("644", 8))
    if not fd then return nil, "cannot open " .. spec.output .. ": " .. tostring(ferr) end
  end
  local job = setmetatable({ alive_ = true }, Job)
  -- several ranks: mpirun starts them (docs/data-parallel.md); a stop
  -- (SIGTERM) reaches rank 0 through it, the others ignore it
  local file, args = bin, spec.argv
  if (spec.ranks or 1) > 1 then
    file, args = process.mpirun(), { "-n", tostring(spec.ranks), bin, unpack(spec.argv) }
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
    if file ~= bin then
      return nil, "cannot start " .. file .. " for a trial of " .. spec.ranks .. " ranks: " .. tostring(pid) ..
        " (ranks > 1 needs Open MPI's mpirun: apt install openmpi-bin, or set MOONRL_MPIRUN)"
    end
    return nil, "cannot start " .. bin .. ": " .. tostring(pid)
  end
  job.handle, job.pid, job.id = handle, pid, "pid " .. pid
  return job
end

-- A run this process did not start: alive while its run directory's lock
-- is held (the kernel drops it however the run ends).
function process.follow(dir, on_exit, poll_ms)
  local dirlock = require("moonrl.run.dirlock")
  local lock = dirlock.take(dir)
  if lock then lock:release() return nil end   -- nobody runs there
  local text = io.open(dir .. "/" .. dirlock.FILE, "rb")
  local pid = text and tonumber((text:read("*a") or ""):match("^(%d+)"))
  if text then text:close() end
  if not pid then return nil end
  local job = setmetatable({ alive_ = true, pid = pid, id = "pid " .. pid, adopted = true }, Job)
  job.timer = uv.new_timer()
  job.timer:start(poll_ms or 250, poll_ms or 250, function()
    local l = dirlock.take(dir)
    if not l then return end
    l:release()
    job.alive_ = false
    job.timer:stop()
    job.timer:close()
    on_exit({ code = 0, signal = 0, adopted = true })
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

return process

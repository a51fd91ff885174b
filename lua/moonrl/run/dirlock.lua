-- moonrl.run.dirlock - one process at a time in a run directory.
--
-- A run takes RUN_DIR/.lock with flock(2) (exclusive, non-blocking) before it
-- writes anything there, and holds it until its files are closed. A second
-- `moonrl train --resume RUN_DIR`, or a new run given the same --dir, while
-- the first still runs, is refused before it trims a metrics file or writes
-- a checkpoint: two writers would interleave their rows. The kernel drops the
-- lock when the process ends however it ends (SIGKILL, a crash), so there is
-- no stale lock to clean up; the file stays, holding the last holder's pid
-- for the message. libuv opens files close-on-exec, so trials and hooks
-- started from the run do not inherit it.
--
--   dirlock.take(dir) -> lock | nil, message
--   lock:release()                       (idempotent)
--   dirlock.clean_temporaries(dir) -> names removed
--       The *.tmp files a killed writer left in dir/checkpoints (a checkpoint
--       is written to NAME.tmp and renamed: checkpoint_save.c). Call it holding
--       the lock: nobody else can be writing one then.

local uv = require("luv")
local libc = require("moonrl.runtime.libc")

local LOCK_EX, LOCK_NB, LOCK_UN = libc.LOCK_EX, libc.LOCK_NB, libc.LOCK_UN
local O_RDWR, O_CREAT = 2, 64

local dirlock = { FILE = ".lock" }

local Lock = {}
Lock.__index = Lock

function dirlock.take(dir)
  local path = dir .. "/" .. dirlock.FILE
  local fd, err = uv.fs_open(path, O_RDWR + O_CREAT, tonumber("644", 8))
  if not fd then return nil, "cannot open " .. path .. ": " .. tostring(err) end
  local locked, errno = libc.flock(fd, LOCK_EX + LOCK_NB)
  if locked ~= 0 then
    local holder = uv.fs_read(fd, 64, 0)
    uv.fs_close(fd)
    local pid = holder and holder:match("^(%d+)")
    if errno == libc.EWOULDBLOCK then
      return nil, "run directory " .. dir .. " is in use by another moonrl process" ..
        (pid and (" (pid " .. pid .. ")") or "") .. ": stop it first (moonrl ctl " .. dir ..
        " stop) or wait for it to end; nothing here was changed"
    end
    return nil, "cannot lock " .. path .. ": " .. libc.strerror(errno)
  end
  uv.fs_ftruncate(fd, 0)
  uv.fs_write(fd, tostring(uv.os_getpid()) .. "\n", 0)
  return setmetatable({ fd = fd, path = path }, Lock)
end

function Lock:release()
  if not self.fd then return end
  libc.flock(self.fd, LOCK_UN)
  uv.fs_close(self.fd)
  self.fd = nil
end

function dirlock.clean_temporaries(dir)
  local removed = {}
  local cdir = dir .. "/checkpoints"
  local req = uv.fs_scandir(cdir)
  if not req then return removed end
  while true do
    local name = uv.fs_scandir_next(req)
    if not name then break end
    if name:match("%.tmp$") and uv.fs_unlink(cdir .. "/" .. name) then removed[#removed + 1] = name end
  end
  table.sort(removed)
  return removed
end

return dirlock

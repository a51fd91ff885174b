-- moonrl.runtime.libc - the few C library calls the Lua library makes
-- through LuaJIT's ffi, declared once here: flock(2) (a run directory's
-- lock, the dashboard's token file), geteuid(2) (who may own a control
-- socket) and strerror(3). The engine's C functions are moonrl.engine's;
-- beside it this is the one module of the loop's Lua state that reaches
-- ffi.C (spec/module_graph_spec.lua checks).
--
--   libc.flock(fd, op) -> 0 | -1, errno     op: a sum of libc.LOCK_EX, LOCK_NB, LOCK_UN
--   libc.strerror(errno) -> text
--   libc.geteuid() -> integer              the effective user id
--   libc.EWOULDBLOCK                        flock's errno when another holds the lock

local ffi = require("ffi")

-- each alone: one declared before (by another state's code) must not stop the others
pcall(ffi.cdef, "int flock(int fd, int operation);")
pcall(ffi.cdef, "char *strerror(int errnum);")
pcall(ffi.cdef, "unsigned int geteuid(void);")

local C = ffi.C
local libc = { LOCK_EX = 2, LOCK_NB = 4, LOCK_UN = 8, EWOULDBLOCK = 11 }

function libc.flock(fd, op)
  local r = C.flock(fd, op)
  if r ~= 0 then return r, ffi.errno() end
  return r
end

function libc.strerror(errno) return ffi.string(C.strerror(errno)) end

function libc.geteuid() return tonumber(C.geteuid()) end

return libc

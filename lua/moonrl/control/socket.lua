-- moonrl.control.socket - where a run's control socket is and whether it can
-- be trusted: what the server (moonrl.control.server) and the client
-- (moonrl.control.client) both check.
--
-- Each run listens on a Unix domain socket, RUN_DIR/control/control.sock: the
-- folder is created 0700 and the socket chmod-ed 0600, so only the run's
-- owner can connect (no TCP listener, by design). Both ends check that the
-- folder and the socket belong to the current user and have those modes
-- (socket.check_private), and refuse them otherwise.
--
-- Public functions
--   socket.socket_path(run_dir) -> path
--   socket.check_private(path, kind, opts) -> true | nil, err    kind: "directory" | "socket"
--   socket.DIR, socket.SOCKET, socket.MAX_PATH

local uv = require("luv")
local bit = require("bit")
local libc = require("moonrl.runtime.libc")

local control = {}

control.DIR = "control"
control.SOCKET = "control.sock"
-- sun_path holds 108 bytes with the terminating NUL; libuv 1.44 cuts a
-- longer name short without a word, so the length is checked here.
control.MAX_PATH = 107

function control.socket_path(run_dir)
  return run_dir .. "/" .. control.DIR .. "/" .. control.SOCKET
end


local PRIVATE_MODE = { directory = tonumber("700", 8), socket = tonumber("600", 8) }

-- true when path (the control folder, kind "directory", or its socket,
-- "socket") belongs to this user and has the owner-only mode, or is not
-- there at all (absent: nothing to trust yet); else nil and a message
-- naming the path, what was found and what is required. A folder or a
-- socket another user made would let that user answer in a job's place.
function control.check_private(path, kind, opts)
  local st = uv.fs_lstat(path)
  if not st then return true end
  local want = PRIVATE_MODE[kind]
  local what = kind == "directory" and "control directory" or "control socket"
  if st.type ~= kind then
    return nil, string.format("refusing the %s %s: it is a %s, not a %s", what, path, tostring(st.type), kind)
  end
  local me = libc.geteuid()
  if st.uid ~= me then
    return nil, string.format("refusing the %s %s: it is owned by uid %d, not by this user (uid %d); " ..
      "another user could answer in the job's place (remove it if it is not yours)", what, path, st.uid, me)
  end
  local mode = bit.band(st.mode, tonumber("777", 8))
  if mode ~= want and not (opts and opts.owner_only) then
    return nil, string.format("refusing the %s %s: its mode is %04o, it must be %04o (its owner only); " ..
      "another user could have reached it (chmod %o %s if you trust it)", what, path, mode, want,
      want, path)
  end
  return true
end

return control

-- Helpers shared by the Lua specs: temporary directories, whole-file reads
-- and writes, and running a real luv loop until a callback says it is done.
local uv = require("luv")

local support = {}

support.uv = uv

function support.tmpdir()
  local dir = assert(uv.fs_mkdtemp((os.getenv("TMPDIR") or "/tmp") .. "/moonrl-spec-XXXXXX"))
  return dir
end

function support.rm_rf(path)
  local st = uv.fs_lstat(path)
  if not st then return end
  if st.type == "directory" then
    local req = uv.fs_scandir(path)
    while req do
      local name = uv.fs_scandir_next(req)
      if not name then break end
      support.rm_rf(path .. "/" .. name)
    end
    uv.fs_rmdir(path)
  else
    uv.fs_unlink(path)
  end
end

function support.write_file(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

function support.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function support.lines(text)
  local out = {}
  for line in text:gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

-- Runs the default loop until done() returns true (or `limit` ms pass).
function support.run_until(done, limit)
  local timer = uv.new_timer()
  local timed_out = false
  timer:start(limit or 60000, 0, function() timed_out = true end)
  while not done() and not timed_out do uv.run("once") end
  timer:stop()
  timer:close()
  uv.run("nowait")
  assert(not timed_out, "the luv loop did not finish in time")
end

function support.files(dir)
  local out = {}
  local req = uv.fs_scandir(dir)
  while req do
    local name = uv.fs_scandir_next(req)
    if not name then break end
    out[#out + 1] = name
  end
  table.sort(out)
  return out
end

return support

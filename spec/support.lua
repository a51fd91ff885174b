-- Helpers shared by the Lua specs: temporary directories, whole-file reads
-- and writes, running a real luv loop until a callback says it is done or a
-- condition holds, and moonrl started in the background.
local uv = require("luv")

local support = {}

support.uv = uv

function support.tmpdir()
  local dir = assert(uv.fs_mkdtemp((os.getenv("TMPDIR") or "/tmp") .. "/moonrl-spec-XXXXXX"))
  return dir
end

support.rm_rf = require("moonrl.util").rm_rf

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
  -- The loop's clock is cached: after a spec that ran for a while without the
  -- loop (os.execute of the binary), a timer started on the stale clock is due
  -- at once, and a limit of 5 s ended the wait before the first callback.
  uv.update_time()
  timer:start(limit or 60000, 0, function() timed_out = true end)
  while not done() and not timed_out do uv.run("once") end
  timer:stop()
  timer:close()
  uv.run("nowait")
  assert(not timed_out, "the luv loop did not finish in time")
end

-- Blocks (no loop) until pred() holds, looked at every 20 ms; an assertion
-- naming `what` after limit_ms (default 60 s). For a pred that reads files or
-- another process, where nothing on this process's loop has to run.
function support.wait_until(what, pred, limit_ms)
  local t0 = uv.hrtime()
  while not pred() do
    assert((uv.hrtime() - t0) / 1e6 < (limit_ms or 60000), "timed out waiting for " .. what)
    uv.sleep(20)
  end
end

-- One control request through moonrl.control's client, the loop run here
-- until it answers (at most loop_ms, default 90 s) -> reply, err.
function support.control_request(sock, req, timeout_ms, loop_ms)
  local reply, err, done
  require("moonrl.control.client").request(sock, req, { timeout_ms = timeout_ms or 20000 }, function(r, e)
    reply, err, done = r, e, true
  end)
  support.run_until(function() return done end, loop_ms or 90000)
  return reply, err
end

-- Runs the default loop until pred() holds, polled every 10 ms (so a pred
-- that reads files or processes is looked at again), or `limit` ms pass
-- (default 60 s); true if it held.
function support.wait_for(pred, limit)
  local tick = uv.new_timer()
  uv.update_time()   -- the cached clock may be minutes old (see run_until)
  tick:start(10, 10, function() end)
  local deadline = uv.now() + (limit or 60000)
  local ok = false
  while true do
    if pred() then ok = true break end
    uv.update_time()
    if uv.now() > deadline then break end
    uv.run("once")
  end
  tick:stop()
  tick:close()
  uv.run("nowait")
  return ok
end

-- `bin ARGS` in dir, in the background, through /bin/sh with exec (so the
-- pid is bin's), stdout and stderr into dir/stdout and dir/stderr.
-- opts.env: "VAR=value ..." put before it; opts.wait: proc.wait's default
-- limit in ms (60 s). proc.pid; proc.done, proc.code, proc.signal once it
-- exits; proc.out() / proc.err(); proc.wait([limit]) -> exit code (asserts
-- it exited); proc.kill(sig).
function support.spawn(bin, dir, args, opts)
  opts = opts or {}
  local proc = {}
  local handle, pid
  -- opts.name: its output in NAME.stdout / NAME.stderr, so processes started in one directory keep theirs apart
  local out, err = (opts.name and opts.name .. "." or "") .. "stdout", (opts.name and opts.name .. "." or "") .. "stderr"
  handle, pid = uv.spawn("/bin/sh", {
    args = { "-c", string.format("%sexec %q %s >%s 2>%s", opts.env and (opts.env .. " ") or "", bin, args, out, err) },
    cwd = dir,
  }, function(code, sig)
    proc.code, proc.signal, proc.done = code, sig, true
    handle:close()
  end)
  assert(handle, pid)
  proc.pid = pid
  proc.out = function() return support.read_file(dir .. "/" .. out) or "" end
  proc.err = function() return support.read_file(dir .. "/" .. err) or "" end
  -- alive now (a signal 0 reaches it), whether or not the loop has run its exit callback
  proc.alive = function() return not proc.done and uv.kill(pid, 0) == 0 end
  proc.wait = function(limit)
    assert(support.wait_for(function() return proc.done end, limit or opts.wait or 60000),
      "moonrl did not exit:\n" .. proc.out() .. proc.err())
    return proc.code
  end
  proc.kill = function(sig) uv.kill(pid, sig) end
  return proc
end

-- The environment prefix ("PYTHONPATH=...") under which the optional Python
-- packages (PyTorch, NumPy) cannot be imported, as on a machine without them:
-- spec/without_optional holds packages of those names that raise ImportError.
-- .ci/run runs the whole suite so.
function support.without_optional_env()
  local root = os.getenv("PWD") or "."
  return string.format("PYTHONPATH=%q", root .. "/spec/without_optional")
end

-- The benchmark peer's python, as moonrl bench --compare picks it: build/venv-bench's (make bench
-- installs requirements-bench.txt there, make test never does), else the system's python3 with
-- torch; nil and why not (the pending message) where none imports torch. PYTHONPATH is kept, so
-- spec/without_optional hides torch from both.
function support.bench_python()
  local root = os.getenv("PWD") or "."
  for _, p in ipairs({ root .. "/build/venv-bench/bin/python", "/usr/bin/python3" }) do
    local ok = io.open(p, "rb") and os.execute(string.format("%q -c 'import torch' >/dev/null 2>&1", p))
    if ok == 0 or ok == true then return p end
  end
  return nil, "no PyTorch: neither build/venv-bench nor the system's python3 imports torch (make bench " ..
    "installs it into build/venv-bench)"
end

-- The binary the specs run: $MOONRL_BIN or build/moonrl, as an absolute path
-- (specs run it from temporary directories); have_bin: whether it is there.
-- build/venv's python (make test-deps installs requirements.txt there), and
-- nil when it imports the modules ("safetensors, numpy"), else why not: the
-- pending message of a spec that needs them.
support.VENV_PY = (os.getenv("PWD") or ".") .. "/build/venv/bin/python"
function support.venv_lacks(modules)
  local probe = io.popen(string.format("env -u PYTHONPATH %q -c 'import %s' 2>&1; echo rc=$?", support.VENV_PY, modules))
  local got = probe:read("*a")
  probe:close()
  if got:match("rc=0") then return nil end
  return modules .. " not importable from build/venv (make test-deps installs requirements.txt; it could not " ..
    "here: " .. got:gsub("%s+$", "") .. ")"
end

support.BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
support.have_bin = io.open(support.BIN, "rb") ~= nil
if support.BIN:sub(1, 1) ~= "/" then support.BIN = (os.getenv("PWD") or ".") .. "/" .. support.BIN end

-- Runs `moonrl ARGS` in dir in the foreground (killed after opts.timeout s,
-- default 120), stdout and stderr into dir/stdout and dir/stderr; returns the
-- exit code, stdout, stderr. opts.env: "VAR=value ..." for the process.
function support.moonrl(args, dir, opts)
  opts = opts or {}
  local out, err, rc = dir .. "/stdout", dir .. "/stderr", dir .. "/rc"
  os.execute(string.format("cd %q && %s timeout %d %q %s >%q 2>%q; echo $? >%q", dir,
    opts.env and ("env " .. opts.env) or "", opts.timeout or 120, support.BIN, args, out, err, rc))
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

-- The bytes of section `name` of a moonrl checkpoint, read by this parser of
-- the format (checkpoint_format.h's header comment), not the engine's.
function support.checkpoint_section(path, name)
  local function u32(s, i) local a, b, c, d = s:byte(i, i + 3) return a + b * 256 + c * 65536 + d * 16777216 end
  local function u64(s, i) return u32(s, i) + u32(s, i + 4) * 4294967296 end
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  assert(s:sub(1, 8) == "MOONRLCK", path .. " is not a checkpoint")
  local count, off = u32(s, 13), 25
  for _ = 1, count do
    local nm = s:sub(off, off + 31):gsub("%z.*$", "")
    local bytes = u64(s, off + 32)
    if nm == name then return s:sub(off + 48, off + 48 + bytes - 1) end
    off = off + 48 + bytes
  end
  error(path .. " has no section " .. name)
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

-- moonrl.control.client - the client side of a run's control socket, what
-- `moonrl ctl`, `moonrl ps` and `moonrl sweep status` use to talk to a job
-- (the protocol: moonrl.control.server, docs/control.md).
--
-- Public functions
--   client.request(path, req, opts, cb)         one request, cb(reply | nil, err)
--       opts: timeout_ms (0 = none)
--   client.request_all(run_dirs, req, opts, cb) the same request to every run directory's socket at
--       once; cb(replies) when each has answered or failed: replies[i] = {reply =, err =}
--   client.call(path, req, opts, cb)            the same, for a caller that wants the answer:
--       cb(reply) when the job said "ok": true, else cb(nil, err): the job's error or,
--       the request not answered, client.explain's words
--   client.ask(run_dir, req[, timeout_ms]) -> reply | nil, err
--       client.call to a run directory's socket from a coroutine, which waits for
--       the answer (default timeout 120 s): a sweep's driver steering its trials
--   client.explain(path, err) -> text           why a connect failed, in words
--   client.socket_path(run_dir) -> path         (moonrl.control.socket's)

local uv = require("luv")
local json = require("moonrl.formats.json")
local socket = require("moonrl.control.socket")

local control = {}

control.socket_path = socket.socket_path

-- connect(path) for a path of any length: a long one is reached from its
-- folder (connect() itself runs at once, so the folder change is brief; the
-- client commands have no other threads).
local function connect(pipe, path, cb)
  if #path <= socket.MAX_PATH then return pcall(pipe.connect, pipe, path, cb) end
  local dir, base = path:match("^(.*)/([^/]+)$")
  local cwd = uv.cwd()
  if not dir or not uv.chdir(dir) then return false, "cannot enter " .. tostring(dir) end
  local ok, err = pcall(pipe.connect, pipe, base, cb)
  uv.chdir(cwd)
  return ok, err
end

function control.request(path, req, opts, cb)
  opts = opts or {}
  -- The folder and the socket must be this user's and owner-only.
  local ok_dir, derr = socket.check_private(path:match("^(.*)/[^/]*$") or ".", "directory")
  local ok_sock, serr = true, nil
  if ok_dir then ok_sock, serr = socket.check_private(path, "socket") end
  if not (ok_dir and ok_sock) then return cb(nil, derr or serr) end
  local pipe = uv.new_pipe(false)
  local timer
  local buf, done = "", false
  local function finish(reply, err)
    if done then return end
    done = true
    if timer and not timer:is_closing() then timer:close() end
    if not pipe:is_closing() then pipe:close() end
    cb(reply, err)
  end
  if (opts.timeout_ms or 0) > 0 then
    timer = uv.new_timer()
    timer:start(opts.timeout_ms, 0, function()
      finish(nil, "no reply in " .. (opts.timeout_ms / 1000) .. " s")
    end)
  end
  local ok, err = connect(pipe, path, function(cerr)
    if cerr then return finish(nil, cerr) end
    pipe:write(json.encode(req) .. "\n")
    pipe:read_start(function(rerr, data)
      if rerr then return finish(nil, rerr) end
      if not data then return finish(nil, "the run closed the connection without a reply") end
      buf = buf .. data
      local nl = buf:find("\n", 1, true)
      if nl then
        local reply, jerr = json.decode(buf:sub(1, nl - 1))
        if type(reply) ~= "table" then return finish(nil, "unreadable reply: " .. tostring(jerr)) end
        finish(reply)
      end
    end)
  end)
  if not ok then finish(nil, tostring(err)) end
end

function control.call(path, req, opts, cb)
  control.request(path, req, opts, function(reply, err)
    if not reply then return cb(nil, control.explain(path, err)) end
    if reply.ok ~= true then return cb(nil, tostring(reply.error)) end
    cb(reply)
  end)
end

function control.request_all(run_dirs, req, opts, cb)
  local replies, left = {}, #run_dirs
  if left == 0 then return cb(replies) end
  for i, d in ipairs(run_dirs) do
    control.request(control.socket_path(d), req, opts, function(reply, err)
      replies[i] = { reply = reply, err = err }
      left = left - 1
      if left == 0 then cb(replies) end
    end)
  end
end

-- Why a connect failed, in words.
function control.explain(path, err)
  err = tostring(err)
  if err:find("^refusing the control ") then return err end
  if err:find("ENOENT", 1, true) then
    return "no control socket at " .. path .. ": no job is running there (finished, or never started)"
  elseif err:find("ECONNREFUSED", 1, true) then
    return "the control socket " .. path .. " does not answer: the job that made it is no longer running (a stale socket)"
  elseif err:find("EACCES", 1, true) then
    return "not allowed to connect to " .. path .. ": the job belongs to another user"
  end
  return path .. ": " .. err
end

function control.ask(run_dir, req, timeout_ms)
  local path = control.socket_path(run_dir)
  return require("moonrl.runtime.tasks").await("a control request", function(wake)
    control.call(path, req, { timeout_ms = timeout_ms or 120000 }, wake)
  end)
end

return control

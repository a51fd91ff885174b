-- moonrl.control.server - the control socket of a running job.
--
-- Each run listens on a Unix domain socket, RUN_DIR/control/control.sock
-- (moonrl.control.socket: where, and the owner-only checks both ends make).
-- The server is a few luv pipe handles on the host's loop; it only calls the
-- run's public methods (run:set_many, run:get, run:pause, run:resume,
-- run:checkpoint, run:stop), so what a socket can change is exactly what a
-- script can. The client side is moonrl.control.client.
--
-- Protocol (docs/control.md): one JSON object per line each way, UTF-8,
-- lines end with "\n" ("\r\n" accepted; blank lines ignored). Every request
-- line gets exactly one reply line, in order:
--   {"cmd": "status"}                       -> {"ok": true, "status": "running", "update": ..., "hot": {...}, ...}
--   {"cmd": "get", "key": "ppo.lr"}         -> {"ok": true, "key": "ppo.lr", "value": ..., "text": "linear(...)"}
--   {"cmd": "set", "values": {"ppo.lr": 1e-4}}   (or "key" + "value"; "source": who, default "ctl")
--                                           -> {"ok": true, "values": {...}}
--   {"cmd": "pause"} / {"cmd": "resume"}    -> {"ok": true, "status": "paused", "update": N} once in force
--   {"cmd": "pause", "at_steps": N | [N, ...]}   -> {"ok": true, "status": ..., "update": N, "agent_steps": S,
--                                           "at_steps": [the marks ahead]} at once (run:pause{at_steps =})
--   {"cmd": "checkpoint"}                   -> {"ok": true, "path": "..."} once written
--   {"cmd": "adopt", "path": "...", "source": "..."?} -> {"ok": true, "update": N} once the run
--                                           has taken that checkpoint's weights (in force from N)
--   {"cmd": "stop", "checkpoint": false?, "wait": true?, "reason": "..."?} -> {"ok": true}
--                                           (with wait: once the run ended; reason: logged, in the summary)
--   {"cmd": "help"}                         -> {"ok": true, "commands": [...]}
-- A failure is {"ok": false, "error": "message"} and changes nothing. An "id"
-- (string or number) in a request is copied into its reply.
--
-- Robustness, by the limits below: a line longer than max_line bytes gets an
-- error reply and the connection is closed; more than max_clients at once
-- wait (up to wait_ms, at most max_waiting of them) for one to end, then are
-- refused with an error line; a connection that sends no complete request for
-- idle_ms is closed (a reply being waited for does not count); a client that
-- does not read its replies is dropped once max_queue bytes wait for it. A
-- client that disconnects at any point harms nothing: a reply to nobody is
-- dropped.
--
-- Public functions
--   server.start(run) -> server | nil, err       (the run calls it; never raises)
--   server:metrics(m)                            after each update (agent-steps/s average)
--   server:close()                               stop listening, remove the socket;
--                                                connections waiting for the run's end are answered first
--   server.limits                                max_line, max_clients, wait_ms, max_waiting, idle_ms, max_queue

local uv = require("luv")
local json = require("moonrl.formats.json")
local util = require("moonrl.util")
local socket = require("moonrl.control.socket")

local control = {}

control.limits = {
  max_line = 64 * 1024,     -- bytes in one request line
  max_clients = 16,         -- connections served at once
  wait_ms = 2000,           -- one more waits this long for a slot, then is refused
  max_waiting = 128,        -- connections waiting for a slot; one more is refused at once
  idle_ms = 30000,          -- no complete request for this long: closed
  max_queue = 1024 * 1024,  -- reply bytes waiting for a client that does not read
}

local tasks = require("moonrl.runtime.tasks")

-- --------------------------------------------------------------- values

-- A config value as JSON can carry it: functions (hooks, Lua-function
-- schedules) as "<function>", nil as null.
local function plain(v, depth)
  depth = depth or 0
  local t = type(v)
  if v == nil then return json.null end
  if t == "function" then return "<function>" end
  if t == "cdata" then return tonumber(v) end
  if t == "table" then
    if depth > 8 then return "<table>" end
    local out = {}
    for k, x in pairs(v) do
      if type(k) == "string" or type(k) == "number" then out[k] = plain(x, depth + 1) end
    end
    return out
  end
  if t == "userdata" or t == "thread" then return "<" .. t .. ">" end
  return v
end

-- The value as `moonrl ctl set` (and --set) reads it back.
local function value_text(v)
  if type(v) == "table" then
    local s = require("moonrl.schedule").to_lua(v)
    if s then return s end
  end
  if type(v) == "function" then return "<function>" end
  return util.fmt_value(v, 200)
end

local function hot_values(cfg)
  local config = require("moonrl.config")
  local out = {}
  for _, k in ipairs(require("moonrl.config.schema").hot_keys()) do
    out[k] = plain((config.get(cfg, k)))
  end
  return out
end

-- --------------------------------------------------------------- requests

local Server = {}
Server.__index = Server

local COMMANDS = { "status", "get", "set", "pause", "resume", "checkpoint", "adopt", "stop", "help" }
local handlers = {}

local finite_value = require("moonrl.number").finite_value

function handlers.status(self)
  local run = self.run
  local m = run:metrics()
  local total_updates
  do
    local ok, n = pcall(require("moonrl.engine").total_updates, run.cfg, run.steps_base)
    total_updates = ok and tonumber(n) or nil
  end
  local steps = m and tonumber(m.agent_steps) or 0
  local total_steps = tonumber(run.cfg.total_steps)
  local eta
  if self.sps_avg and self.sps_avg > 0 and total_steps and run.status ~= "paused" then   -- paused: no ETA
    eta = math.max(0, total_steps - steps) / self.sps_avg
  end
  return {
    ok = true, status = run.status, dir = run.dir, name = run.cfg.name, pid = uv.os_getpid(),
    update = m and tonumber(m.update) or 0, total_updates = total_updates,
    agent_steps = steps, total_steps = total_steps,
    progress = m and finite_value(m.progress) or 0,
    sps = finite_value(self.sps_avg), sps_last = m and finite_value(m.sps) or nil,
    eta_seconds = finite_value(eta), elapsed_seconds = (uv.hrtime() - run.started_at) / 1e9,
    describe = run.describe, last_checkpoint = run.last_checkpoint,
    metrics = m and plain(m) or json.null, hot = hot_values(run.cfg),
  }
end

function handlers.get(self, req)
  if type(req.key) ~= "string" then
    return { ok = false, error = "get: expected \"key\": a config key such as \"ppo.lr\"" }
  end
  local v, err = require("moonrl.config").get(self.run.cfg, req.key)
  if err then return { ok = false, error = "get: " .. err } end
  return { ok = true, key = req.key, value = plain(v), text = value_text(v) }
end

-- "source" and "reason": optional, one line of at most 200 bytes.
local function bad_line(v)
  return v ~= nil and (type(v) ~= "string" or #v > 200 or v:find("[%c]") ~= nil)
end

function handlers.set(self, req)
  local values = req.values
  if values == nil and req.key ~= nil then
    if type(req.key) ~= "string" then return { ok = false, error = "set: \"key\" must be a string" } end
    values = { [req.key] = req.value }
    if req.value == nil then return { ok = false, error = "set: \"value\" is missing" } end
  end
  if type(values) ~= "table" or values == json.null or next(values) == nil or values[1] ~= nil then
    return { ok = false, error = "set: expected \"values\": {\"key\": value, ...} (or \"key\" and \"value\")" }
  end
  for k, v in pairs(values) do
    if v == json.null then
      return { ok = false, error = "set: " .. tostring(k) .. ": null is not a value (nothing was changed)" }
    end
  end
  if bad_line(req.source) then
    return { ok = false, error = "set: \"source\" (who makes the change) must be a one-line string of at most 200 bytes" }
  end
  local ok, err = self.run:set_many(values, req.source or "ctl")
  if not ok then return { ok = false, error = "set: " .. tostring(err) .. " (nothing was changed)" } end
  local out = {}
  for k in pairs(values) do out[k] = plain((require("moonrl.config").get(self.run.cfg, k))) end
  return { ok = true, values = out }
end

-- pause / resume: the thread takes them at the next update boundary; the
-- reply comes once it has (the run's status says so), unless "wait": false.
-- A later pause or resume answers the earlier one's waiter.
local function pause_resume(method, want)
  return function(self, req, reply)
    if req.wait ~= nil and type(req.wait) ~= "boolean" then
      return { ok = false, error = method .. ": \"wait\" must be true or false" }
    end
    local run = self.run
    if req.at_steps ~= nil then
      if method ~= "pause" then return { ok = false, error = "resume: at_steps is an option of pause" } end
      -- run:pause checks the marks (it raises on bad ones: the message without its position)
      local okp, ok, err = pcall(run.pause, run, { at_steps = req.at_steps })
      if not okp then return { ok = false, error = (tostring(ok):gsub("^[^\n]-:%d+: ", "")) } end
      if not ok then return { ok = false, error = tostring(err) } end
      local m = run:metrics()
      return { ok = true, status = run.status, update = m and tonumber(m.update) or 0,
        agent_steps = m and tonumber(m.agent_steps) or 0, at_steps = run.pause_marks or {} }
    end
    -- taken: the run's status is `want`, or it has been since the request (a resume and the
    -- pause at the next mark can both come between two looks)
    local counter = method == "pause" and "pauses" or "resumes"
    local before = run[counter] or 0
    local ok, err = run[method](run)
    if not ok then return { ok = false, error = tostring(err) } end
    self.pause_gen = (self.pause_gen or 0) + 1
    local gen = self.pause_gen
    local function taken() return run.status == want or (run[counter] or 0) > before end
    local function state()
      local m = run:metrics()
      return { ok = true, status = run.status, update = m and tonumber(m.update) or 0 }
    end
    if req.wait == false or run.status == want then return state() end
    local t = uv.new_timer()
    t:start(20, 20, function()
      if not taken() and run:alive() and gen == self.pause_gen then return end
      t:close()
      if taken() or gen ~= self.pause_gen then return reply(state()) end
      reply({ ok = false, error = method .. ": the run ended (" .. tostring(run.status) .. ")" })
    end)
  end
end
handlers.pause = pause_resume("pause", "paused")
handlers.resume = pause_resume("resume", "running")

-- Answers later: reply(t) once the checkpoint is written.
function handlers.checkpoint(self, req, reply)
  if not self.run:alive() then return { ok = false, error = "checkpoint: the run has finished" } end
  tasks.spawn(function()
    local path, err = self.run:checkpoint()
    if path then reply({ ok = true, path = path }) else reply({ ok = false, error = "checkpoint: " .. tostring(err) }) end
  end)
end

function handlers.adopt(self, req, reply)
  if type(req.path) ~= "string" or req.path == "" or #req.path > 4000 then
    return { ok = false, error = "adopt: expected \"path\": the checkpoint file whose weights the run takes" }
  end
  if req.path:find("%z") then
    return { ok = false, error = "adopt: \"path\" holds a NUL byte, which no file name can: nothing was changed" }
  end
  if bad_line(req.source) then
    return { ok = false, error = "adopt: \"source\" (who makes the change) must be a one-line string of at most 200 bytes" }
  end
  if not self.run:alive() then return { ok = false, error = "adopt: the run has finished" } end
  if not self.run.adopt then return { ok = false, error = "adopt: not for this run" } end
  tasks.spawn(function()
    local from, err = self.run:adopt(req.path, req.source or "ctl")
    if from then reply({ ok = true, update = from }) else reply({ ok = false, error = "adopt: " .. tostring(err) }) end
  end)
end

function handlers.stop(self, req, reply)
  if req.checkpoint ~= nil and type(req.checkpoint) ~= "boolean" then
    return { ok = false, error = "stop: \"checkpoint\" must be true or false" }
  end
  if req.wait ~= nil and type(req.wait) ~= "boolean" then
    return { ok = false, error = "stop: \"wait\" must be true or false" }
  end
  if bad_line(req.reason) then
    return { ok = false, error = "stop: \"reason\" must be a one-line string of at most 200 bytes" }
  end
  self.run:stop({ checkpoint = req.checkpoint ~= false, reason = req.reason })
  if not req.wait then return { ok = true } end
  tasks.spawn(function()
    local s = self.run:wait() or {}
    reply({ ok = true, status = s.status, updates = s.updates, checkpoint = s.checkpoint, error = s.error })
  end)
end

function handlers.help()
  return { ok = true, commands = COMMANDS, protocol = "one JSON object per line; see docs/control.md" }
end

-- --------------------------------------------------------------- connections

local Conn = {}
Conn.__index = Conn

-- A connection holds one of max_clients' slots from its admission until it
-- has been answered and its client is done sending (or it is dropped): a
-- client that has gone counts no longer while its handle closes, and the
-- oldest waiting connection takes the slot.
function Conn:release()
  if self.waiting then
    self.waiting = false
    local w = self.server.waiting
    for i = #w, 1, -1 do if w[i] == self then table.remove(w, i) end end
  end
  if not self.counted then return end
  self.counted = false
  self.server.nconns = self.server.nconns - 1
  self.server:admit_waiting()
end

function Conn:admit()
  self.waiting = false
  self.counted = true
  self.server.nconns = self.server.nconns + 1
  self:arm_timer()   -- in place of the wait for a slot
  self:drain()
end

function Conn:close()
  if self.closed then return end
  self.closed = true
  self.server.conns[self] = nil
  self:release()
  if not self.timer:is_closing() then self.timer:close() end
  if not self.pipe:is_closing() then
    pcall(self.pipe.read_stop, self.pipe)
    self.pipe:close()
  end
end

-- Close once what was written has gone out (or after a grace period: a
-- client that never reads does not keep the handle).
function Conn:finish()
  if self.closed or self.finishing then return end
  self.finishing = true
  self:release()
  pcall(self.pipe.read_stop, self.pipe)
  self.timer:stop()
  self.timer:start(2000, 0, function() self:close() end)
  if not self.pipe:shutdown(function() self:close() end) then self:close() end
end

-- A reply is valid UTF-8 whatever a client sent: bytes that are not (an
-- echoed key, cmd, id or a decoder's message quoting the line) become \xNN,
-- and an error message has no control characters either (`moonrl ctl`
-- prints it to a terminal).
local function clean(v, depth)
  if type(v) == "string" then return util.escape_bytes(v) end
  if type(v) ~= "table" or v == json.null or depth > 8 then return v end
  local out = {}
  for k, x in pairs(v) do out[clean(k, depth + 1)] = clean(x, depth + 1) end
  return setmetatable(out, getmetatable(v))
end

function Conn:send(t)
  if self.closed or self.finishing then return end
  t = clean(t, 0)
  if type(t.error) == "string" then t.error = util.escape_bytes(t.error, true) end
  local ok, line = pcall(json.encode, t)
  if not ok then
    line = json.encode({ ok = false, error = "internal: reply not encodable: " .. tostring(line), id = t.id })
  end
  local req = self.pipe:write(line .. "\n", function(werr)
    if werr then self:close() end
  end)
  if not req then return self:close() end
  if self.pipe:get_write_queue_size() > self.server.limits.max_queue then
    self:close()   -- it does not read its replies: drop it rather than grow
  end
end

function Conn:arm_timer()
  if self.closed or self.finishing then return end
  self.timer:stop()
  self.timer:start(self.server.limits.idle_ms, 0, function()
    self:send({ ok = false, error = "no complete request in " .. self.server.limits.idle_ms .. " ms: closing" })
    self:finish()
  end)
end

-- One request line -> a reply now, or later through reply(): meanwhile the
-- connection reads nothing more, so replies stay in order.
function Conn:handle(line)
  local req, err = json.decode(line)
  local id
  if type(req) == "table" and req ~= json.null then
    id = req.id
    if type(id) ~= "string" and type(id) ~= "number" then id = nil end
  end
  local function answer(t)
    t.id = id
    self:send(t)
  end
  if not req then return answer({ ok = false, error = "malformed JSON: " .. tostring(err) }) end
  if type(req) ~= "table" or req == json.null or (next(req) ~= nil and req[1] ~= nil) or
      (next(req) == nil and line:match("^%s*%[")) then
    return answer({ ok = false, error = "expected a JSON object such as {\"cmd\": \"status\"}" })
  end
  local cmd = req.cmd
  if cmd == json.null then cmd = nil end
  local h = type(cmd) == "string" and handlers[cmd]
  if not h then
    local near = type(cmd) == "string" and #cmd <= 40 and util.closest(cmd, COMMANDS) or nil
    return answer({ ok = false, error = (cmd == nil and "missing \"cmd\"" or
      ("unknown cmd " .. util.fmt_value(plain(cmd), 60))) .. ": accepted " .. table.concat(COMMANDS, ", ") ..
      (near and (" - did you mean '" .. near .. "'?") or "") })
  end
  local waiting, inside = true, true
  local function reply(t)
    if not waiting then return end
    waiting = false
    self.busy = false
    answer(t)
    if inside then return end
    -- Answered from a later callback: carry on with what came meanwhile.
    if self.server.closed or self.eof then return self:finish() end
    self:arm_timer()
    if self.reading_stopped and not self.closed then
      self.reading_stopped = false
      self.pipe:read_start(self.reader)
    end
    self:drain()
  end
  self.busy = true
  local ok, res = xpcall(h, debug.traceback, self.server, req, reply)
  inside = false
  if not ok then
    require("moonrl.core").report("control socket: " .. cmd .. " failed", tostring(res))
    res = { ok = false, error = "internal error in " .. cmd .. ": " .. tostring(res):match("^[^\n]*") }
  end
  if res ~= nil then reply(res) end
  if self.busy then
    self.timer:stop()
    pcall(self.pipe.read_stop, self.pipe)
    self.reading_stopped = true
  end
end

-- Handles the complete lines buffered, up to one that answers later.
function Conn:drain()
  local max = self.server.limits.max_line
  if self.waiting then
    -- Not served yet: what it sent waits (a line too long, or a client gone
    -- with no complete request, is dropped without a word).
    local nl = self.buf:find("\n", 1, true)
    if (nl or #self.buf + 1) > max + 1 or (self.eof and not nl) then self:close() end
    return
  end
  while not self.closed and not self.finishing and not self.busy do
    local nl = self.buf:find("\n", 1, true)
    if not nl then
      if #self.buf > max then
        self:send({ ok = false, error = "request line longer than " .. max .. " bytes: closing" })
        return self:finish()
      end
      break
    end
    local line = self.buf:sub(1, nl - 1)
    self.buf = self.buf:sub(nl + 1)
    if #line > max then
      self:send({ ok = false, error = "request line longer than " .. max .. " bytes: closing" })
      return self:finish()
    end
    line = line:gsub("\r$", "")
    if line:find("%S") then
      self:handle(line)
      if not self.busy then self:arm_timer() end
    end
  end
  if self.eof and not self.busy then self:finish() end
end

function Conn:on_read(err, data)
  if self.closed or self.finishing then return end
  if err then return self:close() end
  if data == nil then
    -- The client is done sending: what it asked for is answered, then the
    -- connection closes. A last line without its newline is not a request
    -- (the client may have gone mid-way): it is dropped.
    self.eof = true
    return self:drain()
  end
  self.buf = self.buf .. data
  self:drain()
end

-- --------------------------------------------------------------- server

local function too_many(limits)
  return "too many connections (" .. limits.max_clients .. " at once): try again shortly"
end

-- Admits waiting connections while there are slots, oldest first.
function Server:admit_waiting()
  if self.admitting then return end
  self.admitting = true
  while not self.closed and self.nconns < self.limits.max_clients and #self.waiting > 0 do
    local c = table.remove(self.waiting, 1)
    if not c.closed and not c.finishing then c:admit() end
  end
  self.admitting = false
end

function Server:_accept()
  local client = uv.new_pipe(false)
  if not self.listener:accept(client) then
    client:close()
    return
  end
  -- Over max_clients a connection waits for a slot rather than being
  -- refused at once: connections accepted together may belong to clients
  -- that have already gone (their end is read after this), and a client
  -- that connects again as soon as it has its reply must find its slot.
  if self.closed or #self.waiting >= self.limits.max_waiting then
    local msg = self.closed and "the run is ending" or too_many(self.limits)
    client:write(json.encode({ ok = false, error = msg }) .. "\n")
    local t = uv.new_timer()
    local function done()
      if not t:is_closing() then t:close() end
      if not client:is_closing() then client:close() end
    end
    t:start(1000, 0, done)
    if not client:shutdown(done) then done() end
    return
  end
  local c = setmetatable({ server = self, pipe = client, timer = uv.new_timer(), buf = "" }, Conn)
  self.conns[c] = true
  c.reader = function(err, data)
    local okr, e = xpcall(c.on_read, debug.traceback, c, err, data)
    if not okr then
      require("moonrl.core").report("control socket", tostring(e))
      c:close()
    end
  end
  if not client:read_start(c.reader) then return c:close() end
  if self.nconns < self.limits.max_clients and #self.waiting == 0 then return c:admit() end
  c.waiting = true
  self.waiting[#self.waiting + 1] = c
  c.timer:start(self.limits.wait_ms, 0, function()
    if not c.waiting then return end
    c:release()
    c:send({ ok = false, error = too_many(self.limits) })
    c:finish()
  end)
end

function Server:_listen()
  -- The backlog only holds connections not yet accepted; every one is
  -- accepted at once, and one over max_clients is refused in words.
  local ok, err = self.listener:listen(128, function(lerr)
    if lerr then return end
    self:_accept()
  end)
  if not ok then return nil, tostring(err) end
  -- The run keeps the process alive, never its socket.
  self.listener:unref()
  return true
end

local function path_for_bind(path)
  if #path <= socket.MAX_PATH then return path end
  -- An absolute path under the current folder may fit as a relative one.
  local cwd = uv.cwd()
  if cwd and path:sub(1, #cwd + 1) == cwd .. "/" then
    local rel = path:sub(#cwd + 2)
    if #rel <= socket.MAX_PATH then return rel end
  end
  return nil
end

-- The private folder: a directory (not a link) that only its owner enters.
-- One this job creates is made 0700 whatever the umask; one already there
-- (a killed job's) must be this user's and 0700, else it is refused: someone
-- else could have put a socket of their own in it.
local function private_dir(dir)
  local st = uv.fs_lstat(dir)
  if not st then
    local ok, err = uv.fs_mkdir(dir, tonumber("700", 8))
    if ok then
      ok, err = uv.fs_chmod(dir, tonumber("700", 8))
      if not ok then return nil, "cannot make " .. dir .. " private: " .. tostring(err) end
    elseif not uv.fs_lstat(dir) then
      return nil, "cannot create " .. dir .. ": " .. tostring(err)
    end
  end
  return socket.check_private(dir, "directory")
end

function Server:_bind()
  local ok, err = self.listener:bind(self.bind_path)
  if not ok then return nil, err end
  uv.fs_chmod(self.bind_path, tonumber("600", 8))
  local st = uv.fs_lstat(self.bind_path)
  self.ino = st and st.ino
  return self:_listen()
end

function control.start(run, opts)
  opts = opts or {}
  local self = setmetatable({
    run = run, conns = {}, nconns = 0, waiting = {}, limits = {},
    path = socket.socket_path(run.dir), on_note = opts.on_note or function() end,
  }, Server)
  for k, v in pairs(control.limits) do self.limits[k] = v end
  self.bind_path = path_for_bind(self.path)
  if not self.bind_path then
    return nil, "the control socket path " .. self.path .. " is " .. #self.path .. " bytes, more than a Unix socket takes (" ..
      socket.MAX_PATH .. "): `moonrl ctl` cannot reach this run (a shorter run directory can)"
  end
  local ok, err = private_dir(run.dir .. "/" .. socket.DIR)
  if not ok then return nil, err end
  self.listener = uv.new_pipe(false)
  ok, err = self:_bind()
  if ok then return self end
  if not tostring(err):find("EADDRINUSE", 1, true) then
    self.listener:close()
    return nil, "cannot listen on " .. self.path .. ": " .. tostring(err)
  end
  -- Something is there: a live job's socket answers, a killed one's does not.
  -- One another user made is not talked to (it is replaced only when it is
  -- this user's own).
  local mine, merr = socket.check_private(self.bind_path, "socket", { owner_only = true })
  if not mine then
    self.listener:close()
    return nil, merr
  end
  local probe = uv.new_pipe(false)
  probe:connect(self.bind_path, function(cerr)
    probe:close()
    if self.closed then return end
    if not cerr then
      self.listener:close()
      self.closed = true
      return self.on_note("another job is listening on " .. self.path .. ": this run has no control socket")
    end
    uv.fs_unlink(self.bind_path)
    local bok, berr = self:_bind()
    if bok then
      self.on_note("replaced the stale control socket " .. self.path .. " (" .. tostring(cerr) .. ")")
    else
      self.listener:close()
      self.closed = true
      self.on_note("cannot listen on " .. self.path .. ": " .. tostring(berr))
    end
  end)
  return self
end

function Server:metrics(m)
  local sps = finite_value(m.sps)
  if sps and sps > 0 then
    self.sps_avg = self.sps_avg and (0.7 * self.sps_avg + 0.3 * sps) or sps
  end
end

function Server:close()
  if self.closed then return end
  self.closed = true
  if self.listener and not self.listener:is_closing() then self.listener:close() end
  if self.ino then
    local st = uv.fs_lstat(self.bind_path)
    if st and st.ino == self.ino then uv.fs_unlink(self.bind_path) end
    uv.fs_rmdir(self.run.dir .. "/" .. socket.DIR)   -- only when empty
  end
  for c in pairs(self.conns) do
    if c.waiting then
      c:release()
      c:send({ ok = false, error = "the run is ending" })
    end
    if not c.busy then c:finish() end    -- a busy one is answered first
  end
end

return control

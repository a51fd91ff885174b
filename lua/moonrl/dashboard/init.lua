-- moonrl.dashboard - a live dashboard in the browser for the runs and sweeps
-- under some directories, served by this process's own loop
-- (`moonrl dashboard`, moonrl.dashboard(); docs/dashboard.md).
--
-- What it reads: the files runs and sweeps write (moonrl.dashboard.data),
-- tailed, so a run's training never waits on it. What it sends: a run's live
-- status and every action (pause, resume, checkpoint, stop, set a hot key) go
-- through the run's control socket exactly as `moonrl ctl` sends them, with
-- source "dashboard" (the run's change log records it like any other change).
--
-- Private by default:
--   - it listens on 127.0.0.1 (another address only when asked, with a warning);
--   - every request needs the token (128 random bits from /dev/urandom, in the
--     URL printed at start and in a 0600 file this process creates and alone
--     removes): `?token=` or the X-Moonrl-Token header; without it 401;
--   - the Host header must name a loopback address (localhost, 127.0.0.1, [::1],
--     any port: ssh -L forwards another) or the address asked for: a DNS
--     rebinding page's requests are refused (403);
--   - an Origin header, when sent, must be this server's own; every action is
--     a POST of application/json that must carry it (403 otherwise), so no
--     other site's page can act, nor read an answer;
--   - the page names a run by its id, an entry of the scanned list: no path
--     from a request is ever opened; the page's own files are a fixed list;
--   - requests are bounded (moonrl.dashboard.http.limits).
--
--   dashboard.serve(opts) -> d | nil, err
--     opts: dirs = {DIR, ...} (default {"."}), host = "127.0.0.1", port = 0 (any free),
--           token_file = path (default DIR/.dashboard-token of the first DIR; a path that
--           exists is refused: nil, err, "exists"), quiet = bool
--     d.url (with the token), d.token, d.port, d.host, d.token_file, d:close(), d:closed(),
--     d:requests() (how many requests it has served)
--   dashboard.LOOPBACK   the hosts accepted without asking
--
-- A run with `dashboard = true` (a config key) is served from its own process
-- while it trains: its directory only, on 127.0.0.1, the URL printed at start,
-- closed as it ends. The run layer lies below and knows nothing of this; it
-- announces its runs through moonrl.runtime.shutdown.on_run, where this module
-- watches once loaded (the facade, moonrl, loads it).

local uv = require("luv")
local json = require("moonrl.formats.json")
local http = require("moonrl.dashboard.http")
local data = require("moonrl.dashboard.data")
local control = require("moonrl.control.client")
local util = require("moonrl.util")

local dashboard = {}

dashboard.LOOPBACK = { ["127.0.0.1"] = true, ["localhost"] = true, ["[::1]"] = true, ["::1"] = true }

local PAGE = {   -- the only files served: name -> content type
  ["app.js"] = "text/javascript; charset=utf-8",
  ["app.css"] = "text/css; charset=utf-8",
  ["dygraph.min.js"] = "text/javascript; charset=utf-8",
  ["dygraph.min.css"] = "text/css; charset=utf-8",
}

local ACTIONS = { "pause", "resume", "checkpoint", "stop", "set" }

local function random_token()
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(16)
  if f then f:close() end
  if not bytes or #bytes ~= 16 then
    local ok, r = pcall(uv.random, 16, 0)
    bytes = ok and r or nil
  end
  assert(type(bytes) == "string" and #bytes == 16, "moonrl dashboard: no random bytes (/dev/urandom, uv.random)")
  return (bytes:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

-- The token file. Created here, never an existing path: O_CREAT | O_EXCL
-- (which also refuses a link), mode 0600, and held with flock(2) while the
-- dashboard serves, so another dashboard can tell a live one's file from one
-- a killed dashboard left. Removed at close only while the path still names
-- the very file created (its device and inode): whatever else is there by
-- then is left alone.
local libc = require("moonrl.runtime.libc")
local LOCK_EX, LOCK_NB = libc.LOCK_EX, libc.LOCK_NB
local MODE_0600 = tonumber("600", 8)

local function create_token_file(path, token)
  local fd, err = uv.fs_open(path, "wx", MODE_0600)
  if not fd then return nil, tostring(err) end
  libc.flock(fd, LOCK_EX + LOCK_NB)
  uv.fs_fchmod(fd, MODE_0600)
  local ok, werr = uv.fs_write(fd, token .. "\n", 0)
  local st = uv.fs_fstat(fd)
  if not ok or not st then
    uv.fs_close(fd)
    uv.fs_unlink(path)
    return nil, tostring(werr or "fstat failed")
  end
  return { fd = fd, path = path, dev = st.dev, ino = st.ino }
end

local function remove_token_file(tf)
  if not tf.fd then return end
  local st = uv.fs_lstat(tf.path)
  if st and st.dev == tf.dev and st.ino == tf.ino then uv.fs_unlink(tf.path) end
  uv.fs_close(tf.fd)
  tf.fd = nil
end

-- What is at the default path already: "stale" (a token file no dashboard
-- holds: a killed one's, which may be replaced), or why it is left alone.
local function existing_token_file(path)
  local st = uv.fs_lstat(path)
  if not st then return "stale" end   -- gone meanwhile
  if st.type ~= "file" then return "it is a " .. st.type .. ", not a token file" end
  if st.size ~= 33 then return "it is not a token file (" .. st.size .. " bytes)" end
  local fd = uv.fs_open(path, "r", 0)
  if not fd then return "it cannot be read" end
  local text = uv.fs_read(fd, 64, 0)
  local held = libc.flock(fd, LOCK_EX + LOCK_NB) ~= 0
  uv.fs_close(fd)
  if held then return "another dashboard that is running holds it" end
  if not (text and text:match("^%x+\n$") and #text == 33) then return "it is not a token file" end
  return "stale"
end

-- -> the token file | nil, err, "exists" (an explicit path that exists).
-- The default path taken by a running dashboard (or holding anything else)
-- is left alone: this one writes DIR/.dashboard-token.PID instead, and says so.
local function take_token_file(path, explicit, token)
  local tf, err = create_token_file(path, token)
  if tf then return tf end
  if not err:find("^EEXIST") then return nil, "cannot create the token file " .. path .. ": " .. err end
  if explicit then
    return nil, "it exists; give a path that does not (the dashboard creates the file, mode 0600, and removes " ..
      "it when it stops): nothing was changed", "exists"
  end
  local why = existing_token_file(path)
  if why == "stale" then   -- left by a dashboard that was killed: nobody's now
    uv.fs_unlink(path)
    tf = create_token_file(path, token)
    if tf then return tf end
    why = "another dashboard took it just now"
  end
  local own = path .. "." .. uv.os_getpid()
  tf, err = create_token_file(own, token)
  if not tf then return nil, "cannot create the token file " .. own .. ": " .. err end
  io.stderr:write("moonrl dashboard: ", path, " is left as it is (", why, "); this dashboard's token is in ",
    own, "\n")
  return tf
end

local function same(a, b)   -- in time independent of where they differ
  if type(a) ~= "string" or #a ~= #b then return false end
  local diff = 0
  for i = 1, #a do diff = bit.bor(diff, bit.bxor(a:byte(i), b:byte(i))) end
  return diff == 0
end

local function host_name(h)   -- "localhost:8080" -> "localhost"; "[::1]:80" -> "[::1]"
  if not h then return nil end
  return h:match("^(%[[^%]]*%])") or h:match("^([^:]*)")
end

-- Every string in an answer as valid UTF-8 (RFC 8259 8.1): a byte that is not
-- part of UTF-8 (from a request echoed, or a run's file) is written \xNN.
local function clean(v, depth)
  if type(v) == "string" then return util.escape_bytes(v) end
  if type(v) ~= "table" or v == json.null or depth > 64 then return v end
  local out = setmetatable({}, getmetatable(v))
  for k, x in pairs(v) do out[clean(k, depth + 1)] = clean(x, depth + 1) end
  return out
end

local function send_json(reply, status, obj)
  local text = json.encode(obj)
  if text:find("[\128-\255]") and util.escape_bytes(text) ~= text then text = json.encode(clean(obj, 0)) end
  reply(status, { ["Content-Type"] = "application/json" }, text .. "\n")
end
local function refuse(reply, status, msg) send_json(reply, status, { ok = false, error = msg }) end

function dashboard.serve(opts)
  opts = opts or {}
  local dirs = opts.dirs or { "." }
  if #dirs == 0 then dirs = { "." } end
  local d, derr = data.new(dirs)
  if not d then return nil, derr end
  local host = opts.host or "127.0.0.1"
  local allowed = {}
  for h in pairs(dashboard.LOOPBACK) do allowed[h] = true end
  if not dashboard.LOOPBACK[host] then
    allowed[host:find(":", 1, true) and ("[" .. host .. "]") or host] = true
    for _, h in ipairs(opts.allow_hosts or {}) do allowed[h] = true end
    if not opts.quiet then
      io.stderr:write("moonrl dashboard: warning: listening on ", host, ", not only on this machine's loopback: ",
        "anyone who can reach it and has the token can steer the runs (see docs/dashboard.md: ssh -L is the ",
        "private way to reach it from elsewhere)\n")
    end
  end
  local token = random_token()
  local tf, terr, tkind = take_token_file(opts.token_file or (d.roots[1] .. "/.dashboard-token"),
    opts.token_file ~= nil, token)
  if not tf then return nil, terr, tkind end
  local token_file = tf.path

  local embedded = require("moonrl.embedded")
  local last_scan = -math.huge
  local function rescan()
    if uv.now() - last_scan >= 1000 then
      d:scan()
      last_scan = uv.now()
    end
  end
  rescan()

  -- ------------------------------------------------------------ actions
  local function act(req, reply)
    if not (req.headers["content-type"] or ""):lower():find("^application/json") then
      return refuse(reply, 415, "an action is a POST of Content-Type: application/json " ..
        "(got " .. tostring(req.headers["content-type"] or "none") .. ")")
    end
    local body, jerr = json.decode(req.body)
    if type(body) ~= "table" or body == json.null or body[1] ~= nil then
      return refuse(reply, 400, "the body must be a JSON object {\"run\": ID, \"action\": ...}: " ..
        (jerr and ("malformed JSON: " .. tostring(jerr)) or "got " .. type(body)))
    end
    local run = type(body.run) == "string" and d:run(body.run)
    if not run then
      return refuse(reply, 404, "no run " .. json.encode(body.run) .. " among the served runs (GET /api/runs lists them)")
    end
    local what = body.action
    local req_ = nil
    if what == "pause" or what == "resume" or what == "checkpoint" then
      req_ = { cmd = what }
    elseif what == "stop" then
      req_ = { cmd = "stop", wait = false, reason = "stopped from the dashboard" }
    elseif what == "set" then
      -- as `moonrl ctl set KEY=VALUE` reads it, with the same messages
      if type(body.key) ~= "string" or body.key == "" then
        return refuse(reply, 400, "set: \"key\" must be a config key such as \"ppo.lr\"")
      end
      local v = body.value
      if type(v) == "number" then v = string.format("%.17g", v) elseif type(v) == "boolean" then v = tostring(v) end
      if type(v) ~= "string" then
        return refuse(reply, 400, "set: \"value\" must be text as --set reads it (1e-4, true, \"text\", linear(1e-3, 1e-4))")
      end
      local k, val = require("moonrl.config").parse_set(body.key .. "=" .. v)
      if not k then return refuse(reply, 422, "set: " .. tostring(val):gsub("^%-%-set ", "")) end
      if type(val) == "function" then
        return refuse(reply, 422, "set: " .. k .. ": a Lua function cannot travel over the socket (set it from the script)")
      end
      req_ = { cmd = "set", values = { [k] = val }, source = "dashboard" }
    else
      return refuse(reply, 400, "unknown action " .. json.encode(what) .. ": accepted " .. table.concat(ACTIONS, ", "))
    end
    local path = control.socket_path(run.dir)
    control.request(path, req_, { timeout_ms = 60000 }, function(r, err)
      if not r then return refuse(reply, 502, control.explain(path, err)) end
      if r.ok ~= true then return refuse(reply, 422, tostring(r.error)) end
      send_json(reply, 200, r)
    end)
  end

  -- ------------------------------------------------------------ the list, with live status
  local function list(reply)
    rescan()
    local live = {}
    for _, r in ipairs(d.runs) do
      if uv.fs_lstat(control.socket_path(r.dir)) then live[#live + 1] = r end
    end
    local dirs_live = {}
    for i, r in ipairs(live) do dirs_live[i] = r.dir end
    control.request_all(dirs_live, { cmd = "status" }, { timeout_ms = 1500 }, function(replies)
      local status = {}
      for i, r in ipairs(live) do
        local rep = replies[i].reply
        if rep and rep.ok then status[r.id] = rep end
      end
      local runs = json.array()
      for _, r in ipairs(d.runs) do
        local st = status[r.id]
        local entry = { id = r.id, dir = r.dir, name = r.name, sweep = r.sweep, live = st ~= nil }
        if st then
          entry.status, entry.update, entry.total_updates, entry.progress, entry.sps, entry.eta_seconds, entry.hot =
            st.status, st.update, st.total_updates, st.progress, st.sps, st.eta_seconds, st.hot
          entry.name = st.name or r.name
        else
          local sum = d:summary(r.id)   -- decode_file: a table or nil
          entry.status = sum and sum.status or "not running"
          if sum then entry.update = sum.updates end
        end
        runs[#runs + 1] = entry
      end
      local sweeps = json.array()
      for _, s in ipairs(d.sweeps) do sweeps[#sweeps + 1] = { id = s.id, dir = s.dir, trials = s.trials } end
      send_json(reply, 200, { ok = true, runs = runs, sweeps = sweeps, curves = data.CURVES })
    end)
  end

  -- ------------------------------------------------------------ the guard, then the routes
  local server
  local function handle(req, reply)
    local h = req.headers
    local hn = host_name(h.host)
    if not hn or not allowed[hn:lower()] then
      return refuse(reply, 403, "refused: the Host header " .. json.encode(h.host or "(none)") ..
        " is not this dashboard's (accepted: localhost, 127.0.0.1, [::1]" ..
        (dashboard.LOOPBACK[host] and "" or (", " .. host)) .. ", any port)")
    end
    local origin = h.origin
    if origin and origin ~= ("http://" .. h.host) then
      return refuse(reply, 403, "refused: a request from another origin (" .. origin .. "); accepted only http://" .. h.host)
    end
    if (h["sec-fetch-site"] or "") == "cross-site" then
      return refuse(reply, 403, "refused: a cross-site request")
    end
    local given = req.query.token or h["x-moonrl-token"]
    if not same(given, token) then
      return refuse(reply, 401, given and "refused: wrong token (the URL printed at start has it; so does " .. token_file .. ")"
        or "refused: no token: open the URL moonrl dashboard printed (?token=...), or send X-Moonrl-Token")
    end
    local p = req.path
    if req.method == "POST" then
      if p ~= "/api/action" then return refuse(reply, 404, "no such action endpoint: POST /api/action") end
      if not origin then
        return refuse(reply, 403, "refused: an action must carry an Origin header naming this server (http://" .. h.host .. ")")
      end
      return act(req, reply)
    end
    if req.method ~= "GET" and req.method ~= "HEAD" then
      return reply(405, { Allow = "GET, POST" }, "method " .. tostring(req.method) .. " not allowed: GET, or POST /api/action\n")
    end
    if p == "/" or p == "/index.html" then
      local page = embedded.page("index.html") or "index.html missing from this build"
      return reply(200, {
        ["Content-Type"] = "text/html; charset=utf-8",
        ["Content-Security-Policy"] = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " ..
          "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ["Referrer-Policy"] = "no-referrer", ["X-Frame-Options"] = "DENY",
      }, (page:gsub("{{TOKEN}}", token)))
    end
    local name = p:match("^/static/(.+)$")
    if name then
      local text = PAGE[name] and embedded.page(name)
      if not text then return refuse(reply, 404, "no such page file " .. json.encode(name)) end
      return reply(200, { ["Content-Type"] = PAGE[name], ["Cache-Control"] = "private, max-age=300" }, text)
    end
    if p == "/api/runs" then return list(reply) end
    if p == "/api/metrics" or p == "/api/run" then
      rescan()
      local id = req.query.run
      local run = id and d:run(id)
      if not run then
        return refuse(reply, 404, "no run " .. json.encode(id or "(none)") .. " among the served runs (GET /api/runs lists them)")
      end
      if p == "/api/metrics" then
        local m = d:metrics(id, req.query.from)
        m.ok = true
        return send_json(reply, 200, m)
      end
      local det = d:details(id)
      det.ok = true
      return send_json(reply, 200, det)
    end
    if p == "/api/sweep_chart" then
      rescan()
      local text, cerr = d:sweep_chart(req.query.sweep, req.query.chart)
      if not text then return refuse(reply, 404, cerr) end
      return reply(200, { ["Content-Type"] = "image/svg+xml", ["Cache-Control"] = "no-store",
        ["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'" }, text)
    end
    if p == "/api/sweep" then
      rescan()
      local t = req.query.sweep and d:sweep_table(req.query.sweep)
      if not t then return refuse(reply, 404, "no sweep " .. json.encode(req.query.sweep or "(none)") .. " among the served directories") end
      t.ok = true
      return send_json(reply, 200, t)
    end
    return refuse(reply, 404, "not found: " .. json.encode(p))
  end

  server, derr = http.listen({ host = host, port = opts.port or 0, handler = handle })
  if not server then
    remove_token_file(tf)
    return nil, derr
  end
  local shown = host:find(":", 1, true) and ("[" .. host .. "]") or host
  local dash = {
    dir = d.roots[1], host = host, port = server.port, token = token, token_file = token_file,
    url = "http://" .. shown .. ":" .. server.port .. "/?token=" .. token, data = d,
  }
  local closed, waiters = false, {}
  function dash:close()
    if closed then return end
    closed = true
    server:close()
    remove_token_file(tf)
    for _, w in ipairs(waiters) do w() end
  end
  function dash:closed() return closed end
  function dash:requests() return server.requests end   -- how many it has served
  function dash:on_close(fn) if closed then fn() else waiters[#waiters + 1] = fn end end
  function dash:stop() self:close() end   -- a stop signal (moonrl.runtime.shutdown) closes it
  function dash:checkpoint() end
  return dash
end

-- Serves `dir` for an owner (a run, a sweep) until it ends: prints the URL on
-- stderr, or why it could not (the owner goes on without it).
function dashboard.serve_for(what, dir)
  local d, err = dashboard.serve({ dirs = { dir }, quiet = true })
  if not d then
    io.stderr:write("moonrl: dashboard: ", what, " ", dir, " goes on without one: ", tostring(err), "\n")
    return nil
  end
  io.stderr:write("moonrl: dashboard of ", what, " ", dir, ": ", d.url, "\n")
  return d
end

require("moonrl.runtime.shutdown").on_run(function(run)
  if not (type(run.cfg) == "table" and run.cfg.dashboard == true and run.control) then return nil end
  local d = dashboard.serve_for("the run", run.dir)
  return d and function() d:close() end
end)

return dashboard

-- moonrl.dashboard.http - a small HTTP/1.1 server on the host's libuv loop, for
-- the dashboard (moonrl.dashboard). One request per connection (every answer
-- says Connection: close), which keeps the bounds simple and is plenty for a
-- page that polls once a second.
--
-- The sockets, timers and bounds are luv here, on the process's own loop;
-- parsing the bytes is Node's http_parser (Debian's libhttp-parser-dev),
-- linked into the binary and reached through core.http_parser
-- (src/host/lua_http.c says why a C binding and not LuaJIT's FFI).
--
--   http.limits                          (change before listen)
--     max_head         16384 bytes   request line + headers; past it: 431 and closed
--     max_body         65536 bytes   a body (Content-Length or chunked); past it: 413 and closed
--     max_connections  32            open at once; one more is answered 503 and closed at once
--     request_ms       10000         a request not complete by then: 408 and closed
--   http.listen{host =, port =, handler =} -> server | nil, err
--     handler(req, reply): req = {method, url, path, query = {k = v}, headers, body, peer};
--     reply(status, headers, body) once (headers: {["Content-Type"] = ...})
--   server.port, server.host, server:close(), server:connections() -> number open
--   http.decode_path(text) -> the percent-decoded path | nil, why (a NUL or a bad escape)
--   http.parse_query(text) -> {k = v}

local uv = require("luv")

local http = {}

http.limits = { max_head = 16384, max_body = 65536, max_connections = 32, request_ms = 10000 }

local REASON = {
  [200] = "OK", [204] = "No Content", [400] = "Bad Request", [401] = "Unauthorized", [403] = "Forbidden",
  [404] = "Not Found", [405] = "Method Not Allowed", [408] = "Request Timeout", [409] = "Conflict",
  [413] = "Content Too Large", [415] = "Unsupported Media Type", [422] = "Unprocessable Content",
  [431] = "Request Header Fields Too Large", [500] = "Internal Server Error", [502] = "Bad Gateway",
  [501] = "Not Implemented", [503] = "Service Unavailable",
}

local function unhex(h) return string.char(tonumber(h, 16)) end

function http.decode_path(s)
  if s:find("%%[^%x]") or s:find("%%%x[^%x]") or s:find("%%%x?$") then
    return nil, "a malformed percent escape"
  end
  local d = s:gsub("%%(%x%x)", unhex)
  if d:find("%z") then return nil, "a NUL byte" end
  return d
end

function http.parse_query(q)
  local out = {}
  for pair in (q or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=?(.*)$")
    k = (k:gsub("+", " "):gsub("%%(%x%x)", unhex))
    v = (v:gsub("+", " "):gsub("%%(%x%x)", unhex))
    if out[k] == nil then out[k] = v end
  end
  return out
end

-- The text of one answer.
-- head_only: the answer to a HEAD request, its headers (Content-Length the
-- GET's) without the body (RFC 9110 9.3.2).
local function answer(status, headers, body, head_only)
  body = body or ""
  local lines = { string.format("HTTP/1.1 %d %s", status, REASON[status] or "Status") }
  local have = {}
  for k, v in pairs(headers or {}) do
    lines[#lines + 1] = k .. ": " .. tostring(v):gsub("[\r\n]", " ")
    have[k:lower()] = true
  end
  if not have["content-type"] then lines[#lines + 1] = "Content-Type: text/plain; charset=utf-8" end
  if not have["cache-control"] then lines[#lines + 1] = "Cache-Control: no-store" end
  lines[#lines + 1] = "X-Content-Type-Options: nosniff"
  lines[#lines + 1] = "Content-Length: " .. #body
  lines[#lines + 1] = "Connection: close"
  return table.concat(lines, "\r\n") .. "\r\n\r\n" .. (head_only and "" or body)
end
http.answer = answer

function http.listen(opts)
  local core = require("moonrl.core")
  local handler = assert(opts.handler, "http.listen: handler")
  local limits = http.limits
  local tcp = uv.new_tcp()
  local ok, err = tcp:bind(opts.host or "127.0.0.1", opts.port or 0)
  if not ok then
    tcp:close()
    return nil, "cannot listen on " .. tostring(opts.host) .. ":" .. tostring(opts.port) .. ": " .. tostring(err)
  end
  local open = 0
  local server = { host = opts.host or "127.0.0.1", requests = 0 }   -- requests: complete ones, answered or not
  local clients = {}

  local function serve(client)
    open = open + 1
    clients[client] = true
    local done, timer, head_only = false, uv.new_timer(), false
    local function close()
      if timer and not timer:is_closing() then timer:close() end
      if not client:is_closing() then
        client:close()
        open = open - 1
        clients[client] = nil
      end
    end
    local function send(status, headers, body)
      if done then return end
      done = true
      client:read_stop()
      if timer and not timer:is_closing() then timer:stop() end
      if client:is_closing() then return end
      client:write(answer(status, headers, body, head_only), function() client:shutdown(function() close() end) end)
    end
    if open > limits.max_connections then
      return send(503, nil, "too many connections (" .. limits.max_connections .. " at once): try again shortly\n")
    end
    timer:start(limits.request_ms, 0, function()
      send(408, nil, "the request was not complete within " .. limits.request_ms / 1000 .. " s\n")
    end)
    local parser = core.http_parser({ max_head = limits.max_head, max_body = limits.max_body })
    local peer = client:getpeername()
    client:read_start(function(rerr, data)
      if done then return end
      if rerr or not data then return close() end
      local req, perr = parser:feed(data)
      if req == false then
        local kind = parser:err_kind()
        local status = kind == "head" and 431 or kind == "body" and 413 or kind == "coding" and 501 or 400
        local limit = kind == "head" and (" (at most " .. limits.max_head .. " bytes)")
          or kind == "body" and (" (at most " .. limits.max_body .. " bytes)") or ""
        return send(status, nil, perr .. limit .. "\n")
      end
      if not req then return end
      client:read_stop()
      server.requests = server.requests + 1
      head_only = req.method == "HEAD"
      timer:stop()   -- complete: the handler answers (an action may wait for its run)
      local raw_path, query = req.url:match("^([^?#]*)%??([^#]*)")
      req.raw_path = raw_path or req.url
      req.query = http.parse_query(query)
      req.peer = peer
      local path, why = http.decode_path(req.raw_path)
      if not path then return send(400, nil, "bad request path: " .. why .. "\n") end
      req.path = path
      local okh, herr = xpcall(handler, debug.traceback, req, send)
      if not okh then
        io.stderr:write("moonrl dashboard: internal error: ", tostring(herr), "\n")
        send(500, nil, "internal error (the dashboard's terminal has the details)\n")
      end
    end)
  end

  local lok, lerr = tcp:listen(128, function(lerr)
    if lerr then return end
    local client = uv.new_tcp()
    if not pcall(tcp.accept, tcp, client) then client:close() return end
    serve(client)
  end)
  if not lok then
    tcp:close()
    return nil, "cannot listen on " .. tostring(opts.host) .. ":" .. tostring(opts.port) .. ": " .. tostring(lerr)
  end
  server.port = tcp:getsockname().port
  function server:connections() return open end
  function server:close()
    if not tcp:is_closing() then tcp:close() end
    for c in pairs(clients) do if not c:is_closing() then c:close() end end
    clients = {}
  end
  return server
end

return http

-- moonrl dashboard's HTTP layer, against the binary: the token, the Host and
-- Origin checks, path traversal, bounds, bad bodies, and actions through a live
-- CI-profile run's control socket (the same messages as moonrl ctl).
local support = require("support")
local json = require("moonrl.formats.json")
local uv = support.uv

local EXPERIMENT = [[
return {
  name = "dash", device = "cpu", threads = 1, seed = 11, hardware = "ci", level = "basic",
  total_steps = 100000 * 8 * 8, warmup = { updates = 0 },
  env = { num_envs = 8, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8, epochs = 1, lr = 3e-4 },
  log = { console = false, tensorboard = false, checkpoint_interval = 0 },
}
]]

-- One raw exchange: bytes out, everything the server sends until it closes.
local function raw(port, bytes, opts)
  opts = opts or {}
  local tcp = uv.new_tcp()
  local got, done = {}, false
  tcp:connect("127.0.0.1", port, function(err)
    if err then got[#got + 1] = "CONNECT " .. err done = true return end
    tcp:read_start(function(rerr, data)
      if rerr or not data then done = true return end
      got[#got + 1] = data
    end)
    if bytes then tcp:write(bytes) end
  end)
  support.run_until(function() return done end, opts.limit or 30000)
  if not tcp:is_closing() then tcp:close() end
  local text = table.concat(got)
  local status = tonumber(text:match("^HTTP/1%.1 (%d+)"))
  local body = text:match("\r\n\r\n(.*)$") or ""
  return status, body, text
end

local function request(port, method, path, headers, body)
  local lines = { method .. " " .. path .. " HTTP/1.1" }
  headers = headers or {}
  if headers.Host == nil then headers.Host = "127.0.0.1:" .. port end
  for k, v in pairs(headers) do if v ~= false then lines[#lines + 1] = k .. ": " .. v end end
  if body then lines[#lines + 1] = "Content-Length: " .. #body end
  local status, rbody, text = raw(port, table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or ""))
  return status, json.decode(rbody) or rbody, text
end

describe("moonrl dashboard (the HTTP layer, the binary)", function()
  if not support.have_bin then
    it("needs the binary", function() pending("no binary at " .. support.BIN .. " (build it: make build)") end)
    return
  end
  local dir, dash, port, token, live, outside

  setup(function()
    dir = support.tmpdir()
    -- a finished run written by hand, a live CI run, and things outside the served tree
    outside = support.tmpdir()
    support.write_file(outside .. "/secret.txt", "SECRET\n")
    uv.fs_mkdir(outside .. "/run", 493)
    support.write_file(outside .. "/run/config.lua", "return {}\n")
    support.write_file(outside .. "/run/metrics.jsonl", '{"update":1,"agent_steps":64,"episode_return_mean":42}\n')
    uv.fs_mkdir(dir .. "/served", 493)
    uv.fs_mkdir(dir .. "/served/old", 493)
    support.write_file(dir .. "/served/old/config.lua", "return { name = 'old' }\n")
    local rows = {}
    for u = 1, 5 do rows[#rows + 1] = json.encode({ update = u, agent_steps = 64 * u, episode_return_mean = u / 10 }) end
    rows[#rows + 1] = '{"event":"change","update":3,"key":"ppo.lr","old":0.001,"new":0.0001,"source":"ctl"}'
    support.write_file(dir .. "/served/old/metrics.jsonl", table.concat(rows, "\n") .. "\n")
    uv.fs_symlink(outside .. "/run", dir .. "/served/linked")            -- a link to a run outside
    uv.fs_mkdir(dir .. "/served/leak", 493)                               -- a run whose file is a link out
    support.write_file(dir .. "/served/leak/config.lua", "return {}\n")
    uv.fs_symlink(outside .. "/run/metrics.jsonl", dir .. "/served/leak/metrics.jsonl")
    uv.fs_mkdir(dir .. "/served/leak/control", 448)
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    live = support.spawn(support.BIN, dir, "train exp.lua --dir served/live")
    support.wait_until("the live run's control socket", function()
      return uv.fs_stat(dir .. "/served/live/control/control.sock") ~= nil
    end, 120000)
    dash = support.spawn(support.BIN, dir, "dashboard served --port 0", { })
    support.wait_until("the dashboard's URL", function() return dash.out():find("token=%x+") ~= nil end, 30000)
    port, token = dash.out():match("http://127%.0%.0%.1:(%d+)/%?token=(%x+)")
    port = tonumber(port)
  end)

  teardown(function()
    if dash and not dash.done then dash.kill("sigterm") dash.wait(20000) end
    if live and not live.done then live.kill("sigterm") live.wait(60000) end
    support.rm_rf(dir)
    support.rm_rf(outside)
  end)

  local function get(path, headers) return request(port, "GET", path, headers) end
  local function post(body, headers)
    headers = headers or {}
    if headers.Origin == nil then headers.Origin = "http://127.0.0.1:" .. port end
    if headers["Content-Type"] == nil then headers["Content-Type"] = "application/json" end
    return request(port, "POST", "/api/action?token=" .. token, headers, body)
  end

  it("prints a URL with a 128-bit token, also in a 0600 file", function()
    assert.truthy(port, dash.out() .. dash.err())
    assert.equal(32, #token)
    local st = uv.fs_stat(dir .. "/served/.dashboard-token")
    assert.equal(tonumber("600", 8), bit.band(st.mode, 511))
    assert.equal(token .. "\n", support.read_file(dir .. "/served/.dashboard-token"))
  end)

  it("refuses every request without the right token (401)", function()
    for _, p in ipairs({ "/", "/api/runs", "/static/app.js", "/api/run?run=served/old" }) do
      local status, body = get(p)
      assert.equal(401, status, p)
      assert.truthy(body.error:find("no token", 1, true), p)
    end
    local status, body = get("/api/runs?token=" .. string.rep("0", 32))
    assert.equal(401, status)
    assert.truthy(body.error:find("wrong token", 1, true))
    assert.equal(401, (request(port, "POST", "/api/action", { Origin = "http://127.0.0.1:" .. port,
      ["Content-Type"] = "application/json" }, '{"run":"served/live","action":"pause"}')))
    assert.equal(200, (get("/api/runs", { ["X-Moonrl-Token"] = token })))
  end)

  it("refuses a foreign Host (DNS rebinding) and a foreign Origin (403)", function()
    local status, body = get("/api/runs?token=" .. token, { Host = "attacker.example:" .. port })
    assert.equal(403, status)
    assert.truthy(body.error:find("Host header", 1, true))
    status = get("/api/runs?token=" .. token, { Host = false })
    assert.equal(403, status)
    status, body = get("/api/runs?token=" .. token, { Origin = "http://attacker.example" })
    assert.equal(403, status)
    assert.truthy(body.error:find("another origin", 1, true))
    assert.equal(200, (get("/api/runs?token=" .. token, { Host = "localhost:8080" })))   -- ssh -L's other port
    status, body = post('{"run":"served/live","action":"pause"}', { Origin = "http://attacker.example" })
    assert.equal(403, status)
    status, body = post('{"run":"served/live","action":"pause"}', { Origin = false })
    assert.equal(403, status)
    assert.truthy(body.error:find("Origin header", 1, true))
    status, body = post('{"run":"served/live","action":"pause"}', { ["Content-Type"] = "text/plain" })
    assert.equal(415, status)
    assert.equal(405, (request(port, "PUT", "/api/runs?token=" .. token)))
  end)

  it("lists the served runs, not links out of the tree, and tails metrics from where the page is", function()
    local status, body = get("/api/runs?token=" .. token)
    assert.equal(200, status)
    local ids = {}
    for _, r in ipairs(body.runs) do ids[r.id] = r end
    assert.truthy(ids["served/old"])
    assert.truthy(ids["served/live"])
    assert.is_nil(ids["served/linked"])
    assert.equal(true, ids["served/live"].live)
    assert.truthy(ids["served/live"].hot["ppo.lr"])
    status, body = get("/api/metrics?token=" .. token .. "&run=served/old&from=2")
    assert.equal(200, status)
    assert.equal(3, #body.rows)
    assert.equal(3, body.rows[1].update)
    assert.equal(5, body.total)
    assert.equal("ppo.lr", body.changes[1].key)
    status, body = get("/api/metrics?token=" .. token .. "&run=served/leak")
    assert.equal(200, status)
    assert.equal(0, #body.rows)   -- metrics.jsonl there is a link out: not read
    status, body = get("/api/run?token=" .. token .. "&run=served/old")
    assert.equal(200, status)
    assert.equal("return { name = 'old' }\n", body.config)
  end)

  it("reads nothing outside the served runs (../, %2e%2e, absolute paths, links)", function()
    local tries = {
      "/static/../../../../etc/passwd", "/static/%2e%2e/%2e%2e/etc/passwd", "/static/..%2f..%2fetc%2fpasswd",
      "/../../etc/passwd", "//etc/passwd", "/static//etc/passwd", "/static/%2fetc%2fpasswd",
      "/api/run?run=" .. outside .. "/run", "/api/run?run=served/../" .. outside:match("[^/]+$"),
      "/api/run?run=served/linked", "/api/metrics?run=served/linked", "/api/metrics?run=%2e%2e%2f%2e%2e%2fetc",
      "/api/metrics?run=/etc", "/api/sweep?sweep=/etc",
    }
    for _, p in ipairs(tries) do
      local status, body, text = get(p .. (p:find("?", 1, true) and "&" or "?") .. "token=" .. token)
      assert.truthy(status == 404 or status == 400, p .. ": " .. tostring(status))
      assert.falsy(text:find("root:", 1, true), p)
      assert.falsy(text:find("SECRET", 1, true), p)
      assert.falsy(text:find("42", 1, true) and text:find("episode_return", 1, true), p)
      if type(body) == "table" then assert.equal(false, body.ok, p) end
    end
    local status = get("/static/%zz?token=" .. token)
    assert.equal(400, status)
  end)

  it("bounds a request: too large headers (431), a too large body (413), a malformed one (400)", function()
    local status, body = get("/api/runs?token=" .. token, { ["X-Big"] = string.rep("a", 20000) })
    assert.equal(431, status)
    status, body = post('{"run":"' .. string.rep("x", 100000) .. '"}')
    assert.equal(413, status)
    assert.truthy(body:find("too large", 1, true))
    status = raw(port, "NONSENSE\r\n\r\n")
    assert.equal(400, status)
    status = raw(port, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
    assert.equal(400, status)
  end)

  it("bounds the connections open at once (503 past 32) and serves again after", function()
    local idle = {}
    for i = 1, 32 do
      local t = uv.new_tcp()
      t:connect("127.0.0.1", port, function() end)
      idle[i] = t
    end
    support.wait_for(function() return false end, 500)   -- the loop runs: they connect
    local status, body = raw(port, "GET /api/runs?token=" .. token .. " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert.equal(503, status)
    assert.truthy(body:find("too many connections", 1, true))
    for _, t in ipairs(idle) do t:close() end
    support.wait_for(function() return false end, 300)
    assert.equal(200, (get("/api/runs?token=" .. token)))
  end)

  it("refuses bad JSON, an unknown run or action, a key that is not hot (with moonrl ctl's message)", function()
    local status, body = post("{not json")
    assert.equal(400, status)
    assert.truthy(body.error:find("malformed JSON", 1, true), body.error)
    status, body = post('[1, 2]')
    assert.equal(400, status)
    status, body = post('{"run":"served/nope","action":"pause"}')
    assert.equal(404, status)
    status, body = post('{"run":"served/live","action":"explode"}')
    assert.equal(400, status)
    assert.truthy(body.error:find("accepted pause, resume, checkpoint, stop, set", 1, true))
    status, body = post('{"run":"served/live","action":"set","key":"seed","value":"3"}')
    assert.equal(422, status)
    local rc, _, err = support.moonrl("ctl served/live set seed=3", dir)
    assert.equal(1, rc)
    assert.equal(err:gsub("^moonrl ctl: ", ""):gsub("\n$", ""), body.error)
    status, body = post('{"run":"served/live","action":"set","key":"ppo.lr","value":"fast"}')
    assert.equal(422, status)
    rc, _, err = support.moonrl("ctl served/live set ppo.lr=fast", dir)
    assert.equal(1, rc)
    assert.equal(err:gsub("^moonrl ctl: ", ""):gsub("\n$", ""), body.error)
    status, body = post('{"run":"served/live","action":"set","key":"ppo.lr","value":"linear(1e-3"}')
    assert.equal(422, status)
    rc, _, err = support.moonrl("ctl served/live set 'ppo.lr=linear(1e-3'", dir)
    assert.equal(2, rc)
    assert.equal(err:gsub("^moonrl ctl ", ""):gsub("\n.*$", ""), body.error)
  end)

  it("sets a hot key through the run's control socket, recorded with source \"dashboard\"", function()
    local status, body = post('{"run":"served/live","action":"set","key":"ppo.lr","value":"1.25e-4"}')
    assert.equal(200, status, json.encode(body))
    assert.equal(1.25e-4, body.values["ppo.lr"].from)
    support.wait_until("the change in changes.lua", function()
      local t = support.read_file(dir .. "/served/live/changes.lua") or ""
      return t:find('source = "dashboard"', 1, true) ~= nil and t:find("0.000125", 1, true) ~= nil
    end, 60000)
    status, body = post('{"run":"served/live","action":"pause"}')
    assert.equal(200, status, json.encode(body))
    assert.equal("paused", body.status)
    status, body = post('{"run":"served/live","action":"resume"}')
    assert.equal(200, status, json.encode(body))
    status, body = post('{"run":"served/old","action":"pause"}')
    assert.equal(502, status)
    assert.truthy(body.error:find("no job is running there", 1, true))
  end)
end)

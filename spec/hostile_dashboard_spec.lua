-- Hostile input on the dashboard's surfaces (issue 43), against the binary and
-- a live CI run that serves its own dashboard (dashboard = true): `set` values
-- that would be code, HTTP that RFC 9112 refuses, token files that are not
-- the dashboard's, adopt paths with control bytes. Each case must get a clear
-- refusal within seconds and leave the processes answering; both stop on
-- SIGTERM within seconds after all of it.

local support = require("support")
local json = require("moonrl.formats.json")
local util = require("moonrl.util")
local uv = support.uv

local EXPERIMENT = [[
return {
  name = "hostile", device = "cpu", threads = 1, seed = 5, hardware = "ci", level = "basic",
  -- outlasts every test (the last one stops it): 100,000 updates take about a minute
  total_steps = 100000000 * 8 * 8, warmup = { updates = 0 }, dashboard = true,
  env = { num_envs = 8, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8, epochs = 1, lr = 3e-4 },
  log = { console = false, tensorboard = false, checkpoint_interval = 0 },
}
]]

-- Is s valid UTF-8? (escape_bytes writes every byte that is not as \xNN)
local function utf8_ok(s) return util.escape_bytes(s) == s end

-- One raw exchange, at most limit_ms (default 5 s): status, body, the whole answer.
local function raw(port, bytes, limit_ms)
  local tcp = uv.new_tcp()
  local got, done = {}, false
  tcp:connect("127.0.0.1", port, function(err)
    if err then done = true return end
    tcp:read_start(function(rerr, data)
      if rerr or not data then done = true return end
      got[#got + 1] = data
    end)
    tcp:write(bytes)
  end)
  local ok = support.wait_for(function() return done end, limit_ms or 5000)
  if not tcp:is_closing() then tcp:close() end
  uv.run("nowait")
  assert(ok, "no answer within " .. (limit_ms or 5000) / 1000 .. " s to " .. util.fmt_value(bytes, 120))
  local text = table.concat(got)
  return tonumber(text:match("^HTTP/1%.1 (%d+)")), text:match("\r\n\r\n(.*)$") or "", text
end

describe("hostile input on the dashboard's surfaces", function()
  if not support.have_bin then
    it("needs the binary", function() pending("no binary at " .. support.BIN .. " (build it: make build)") end)
    return
  end
  local dir, run, port, token, sock

  local function get(path, extra)
    return raw(port, "GET " .. path .. " HTTP/1.1\r\nHost: 127.0.0.1:" .. port .. "\r\n" .. (extra or "") .. "\r\n")
  end
  local function responsive(what)
    local status, body = get("/api/runs?token=" .. token)
    assert.equal(200, status, "after " .. what .. ": " .. body)
    local r = support.control_request(sock, { cmd = "status" }, 3000, 5000)
    assert.truthy(r and r.ok, "the run's control socket after " .. what)
  end
  local function set(value)
    local body = json.encode({ run = "live", action = "set", key = "ppo.lr", value = value })
    return raw(port, "POST /api/action?token=" .. token .. " HTTP/1.1\r\nHost: 127.0.0.1:" .. port ..
      "\r\nOrigin: http://127.0.0.1:" .. port .. "\r\nContent-Type: application/json\r\nContent-Length: " .. #body ..
      "\r\n\r\n" .. body)
  end

  setup(function()
    dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    run = support.spawn(support.BIN, dir, "train exp.lua --dir live", { name = "run" })
    support.wait_until("the run's dashboard URL", function() return run.err():find("token=%x+") ~= nil end, 120000)
    port, token = run.err():match("dashboard of the run live: http://127%.0%.0%.1:(%d+)/%?token=(%x+)")
    port = tonumber(port)
    sock = dir .. "/live/control/control.sock"
    support.wait_until("the control socket", function() return uv.fs_stat(sock) ~= nil end, 60000)
  end)

  teardown(function()
    if run and not run.done then
      run.kill("sigkill")
      run.wait(10000)
    end
    support.rm_rf(dir)
  end)

  it("reads a set value as data: code in it is refused at once, never run", function()
    local hostile = {
      "linear((function() while true do end end)(), 1e-4)",
      "linear(#(\"x\"):rep(2^30), 1e-4)",
      "{(\"x\"):rep(2^30)}",
      "step((function() local t = {} for i = 1, 1e9 do t[i] = i end end)(), 0.5, 0.1)",
      "constant(#string.rep(\"x\", 2^30))",
      "linear(1e-3, 1e-4) or os.exit(3)",
      "linear(math.huge, 1)",
      "function(p) return 1e-3 end",
      "cosine(1e-3, " .. string.rep("(", 5000) .. "1" .. string.rep(")", 5000) .. ")",
      string.rep("{", 5000) .. string.rep("}", 5000),
      "linear(\"\\255\\254\", 1)",
      "linaer(1e-3, 1e-4)",
    }
    for _, v in ipairs(hostile) do
      local t0 = uv.hrtime()
      local status, body = set(v)
      assert.equal(422, status, v:sub(1, 60) .. ": " .. body)
      assert.truthy(utf8_ok(body), body)
      local reply = json.decode(body)
      assert.truthy(reply.error:find("cannot read the value", 1, true), reply.error)
      assert.truthy(reply.error:find("a value is a number", 1, true), reply.error)   -- what is accepted
      assert.truthy((uv.hrtime() - t0) / 1e6 < 2000, v:sub(1, 60))
    end
    -- an invalid UTF-8 string for a number key: refused by the schema, echoed escaped
    local status, body = set("\255\254")
    assert.equal(422, status, body)
    assert.truthy(utf8_ok(body), body)
    -- the value in force is the config's, and a data value still sets it
    local r = support.control_request(sock, { cmd = "get", key = "ppo.lr" }, 3000, 5000)
    assert.equal(3e-4, r.value.from)
    status, body = set("cosine(3e-4, 1e-4)")
    assert.equal(200, status, body)
    assert.equal("cosine", json.decode(body).values["ppo.lr"].kind)
    responsive("the hostile values")
  end)

  it("moonrl ctl set and --set read values as data too (exit 2, at once)", function()
    for _, args in ipairs({
      "ctl live set 'ppo.lr=linear((function() while true do end end)(), 1e-4)'",
      "ctl live set 'ppo.lr={(\"x\"):rep(2^30)}'",
      "train exp.lua --dir other --set 'ppo.lr=linear((function() while true do end end)(), 1e-4)'",
    }) do
      local t0 = uv.hrtime()
      local rc, _, err = support.moonrl(args, dir, { timeout = 10 })
      assert.equal(2, rc, args .. ": " .. err)
      assert.truthy(err:find("cannot read the value", 1, true), err)
      assert.truthy((uv.hrtime() - t0) / 1e9 < 5, args)
    end
    assert.is_nil(uv.fs_stat(dir .. "/other"))
  end)

  it("refuses HTTP that RFC 9112 refuses: 400, 501; trailers are not headers", function()
    local H = "Host: 127.0.0.1:" .. port .. "\r\n"
    local tok = "?token=" .. token
    local cases = {
      { 400, "two Host headers", "GET /api/runs" .. tok .. " HTTP/1.1\r\n" .. H .. "Host: localhost\r\n\r\n" },
      { 400, "a Host header", "GET /api/runs" .. tok .. " HTTP/1.1\r\n\r\n" },
      { 400, "whitespace", "GET /api/runs" .. tok .. " HTTP/1.1\r\nHost : 127.0.0.1\r\n\r\n" },
      { 400, "whitespace", "POST /api/action" .. tok .. " HTTP/1.1\r\n" .. H .. "Transfer-Encoding : chunked\r\n\r\n" ..
        "0\r\n\r\n" },
      { 400, "header", "GET /api/runs" .. tok .. " HTTP/1.1\r\n" .. H .. "X(y): 1\r\n\r\n" },
      { 400, "folded", "GET /api/runs" .. tok .. " HTTP/1.1\r\n" .. H .. "X-A: 1\r\n  2\r\n\r\n" },
      { 501, "transfer coding", "POST /api/action" .. tok .. " HTTP/1.1\r\n" .. H ..
        "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" },
      { 501, "transfer coding", "POST /api/action" .. tok .. " HTTP/1.1\r\n" .. H .. "Transfer-Encoding: gzip\r\n\r\n" },
      { 501, "transfer coding", "POST /api/action" .. tok .. " HTTP/1.1\r\n" .. H ..
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" },
      { 400, "HTTP/1.0", "POST /api/action" .. tok .. " HTTP/1.0\r\n" .. H .. "Transfer-Encoding: chunked\r\n\r\n" ..
        "0\r\n\r\n" },
      -- a token (or an Origin) in a chunked body's trailer is not a header: 401
      { 401, "no token", "GET /api/runs HTTP/1.1\r\n" .. H .. "Transfer-Encoding: chunked\r\n\r\n0\r\n" ..
        "X-Moonrl-Token: " .. token .. "\r\n\r\n" },
    }
    for _, c in ipairs(cases) do
      local status, body = raw(port, c[3])
      assert.equal(c[1], status, c[3] .. " -> " .. body)
      assert.truthy(body:find(c[2], 1, true), c[3] .. " -> " .. body)
      assert.truthy(utf8_ok(body), body)
    end
    responsive("the malformed requests")
  end)

  it("echoes what a request sent as valid UTF-8 (bad bytes escaped)", function()
    local cases = {
      { 404, "/api/nope%FF%C0%AF" .. "?token=" .. token, "" },
      { 403, "/api/runs?token=" .. token, "Origin: http://\255\254.example\r\n" },
      { 404, "/api/run?token=" .. token .. "&run=%FF%FE", "" },
    }
    for _, c in ipairs(cases) do
      local status, body = get(c[2], c[3])
      assert.equal(c[1], status, body)
      assert.truthy(utf8_ok(body), body)
      assert.truthy(json.decode(body), body)
    end
    -- a Host header of bytes that are not UTF-8
    local status, body = raw(port, "GET /api/runs HTTP/1.1\r\nHost: \255\254:1\r\n\r\n")
    assert.equal(403, status, body)
    assert.truthy(utf8_ok(body), body)
    responsive("the requests echoed")
  end)

  it("a second dashboard on the run's directory leaves the run's token file alone", function()
    local tf = dir .. "/live/.dashboard-token"
    local before, st0 = support.read_file(tf), uv.fs_stat(tf)
    assert.equal(token .. "\n", before)
    local second = support.spawn(support.BIN, dir, "dashboard live", { name = "second" })
    support.wait_until("the second dashboard's URL", function() return second.out():find("token=%x+") ~= nil end, 30000)
    local own = second.out():match("the token is also in (%S+),")
    assert.truthy(own and own ~= "live/.dashboard-token", second.out() .. second.err())
    assert.truthy(second.err():find("live/.dashboard-token", 1, true), second.err())   -- says why
    local st1 = uv.fs_stat(tf)
    assert.equal(before, support.read_file(tf))
    assert.equal(st0.ino, st1.ino)
    second.kill("sigterm")
    assert.equal(0, second.wait(5000))
    -- exited, not killed by the signal's default action (luv says code 0 then too): a
    -- SIGTERM right after the URL was printed once came before the handlers existed
    assert.is_true(second.signal == nil or second.signal == 0, "ended by signal " .. tostring(second.signal))
    assert.equal(before, support.read_file(tf))
    assert.is_nil(uv.fs_stat(dir .. "/" .. own))   -- its own is gone
    assert.equal(200, (get("/api/runs?token=" .. token)))
  end)

  it("--token-file refuses a path that exists (a file, a FIFO, a link) and never deletes it", function()
    uv.fs_mkdir(dir .. "/empty", 493)
    support.write_file(dir .. "/data.txt", "precious\n")
    assert.truthy(os.execute("mkfifo " .. dir .. "/fifo") == 0 or true)
    uv.fs_symlink(dir .. "/data.txt", dir .. "/link")
    for _, name in ipairs({ "data.txt", "fifo", "link" }) do
      local t0 = uv.hrtime()
      local rc, _, err = support.moonrl("dashboard empty --token-file " .. name, dir, { timeout = 10 })
      assert.equal(2, rc, name .. ": " .. err)
      assert.truthy(err:find("--token-file " .. name .. ": it exists", 1, true), err)
      assert.truthy((uv.hrtime() - t0) / 1e9 < 5, name)
      assert.truthy(uv.fs_lstat(dir .. "/" .. name), name .. " is gone")
    end
    assert.equal("precious\n", support.read_file(dir .. "/data.txt"))
    assert.equal("fifo", uv.fs_lstat(dir .. "/fifo").type)
    assert.equal("link", uv.fs_lstat(dir .. "/link").type)
  end)

  it("replaces a token file a killed dashboard left, removes it at exit, and stops on SIGTERM at once", function()
    uv.fs_mkdir(dir .. "/stale", 493)
    support.write_file(dir .. "/stale/.dashboard-token", string.rep("ab", 16) .. "\n")   -- nobody holds it
    local dash = support.spawn(support.BIN, dir, "dashboard stale", { name = "stale" })
    support.wait_until("the dashboard's URL", function() return dash.out():find("token=%x+") ~= nil end, 30000)
    local new = dash.out():match("token=(%x+)")
    assert.truthy(dash.out():find("the token is also in stale/.dashboard-token,", 1, true), dash.out())
    assert.equal(new .. "\n", support.read_file(dir .. "/stale/.dashboard-token"))
    local t0 = uv.hrtime()
    dash.kill("sigterm")
    assert.equal(0, dash.wait(5000))
    assert.truthy((uv.hrtime() - t0) / 1e9 < 2, "the dashboard took " .. (uv.hrtime() - t0) / 1e9 .. " s to stop")
    assert.is_nil(uv.fs_lstat(dir .. "/stale/.dashboard-token"))
    -- what the signal says is the dashboard's, not a training's "final checkpoint"
    assert.truthy(dash.err():find("SIGTERM: closing the dashboard (the runs it shows go on)", 1, true), dash.err())
    assert.is_nil(dash.err():find("checkpoint", 1, true), dash.err())
  end)

  it("refuses an adopt path with a NUL byte, and writes no control byte from a request into train.log", function()
    local ck = support.control_request(sock, { cmd = "checkpoint" }, 30000, 40000)
    assert.truthy(ck and ck.ok, json.encode(ck))
    local path = ck.path:sub(1, 1) == "/" and ck.path or (dir .. "/" .. ck.path)
    local r = support.control_request(sock, { cmd = "adopt", path = path .. "\0.evil" }, 30000, 40000)
    assert.is_false(r.ok)
    assert.truthy(r.error:find("NUL", 1, true), r.error)
    -- a checkpoint whose name holds a line break: adopted, logged on one line
    local odd = dir .. "/odd\nupdate 999: forged"
    assert.truthy(uv.fs_copyfile(path, odd))
    r = support.control_request(sock, { cmd = "adopt", path = odd, source = "spec" }, 30000, 40000)
    assert.truthy(r.ok, json.encode(r))
    local log
    support.wait_until("the adopt in train.log", function()   -- written after the reply, by the log's own writes
      log = support.read_file(dir .. "/live/train.log")
      return log:find("(spec)", 1, true) ~= nil
    end, 10000)
    assert.is_nil(log:find("%z"))
    assert.is_nil(log:find("\nupdate 999: forged", 1, true))
    assert.truthy(log:find("odd\\x0Aupdate 999: forged (spec)", 1, true), log:sub(-2000))
  end)

  it("stops on SIGTERM within seconds after all of it", function()
    responsive("everything")
    local t0 = uv.hrtime()
    run.kill("sigterm")
    run.wait(10000)
    assert.truthy((uv.hrtime() - t0) / 1e9 < 5, "the run took " .. (uv.hrtime() - t0) / 1e9 .. " s to stop")
    assert.is_nil(uv.fs_stat(dir .. "/live/.dashboard-token"))
  end)
end)

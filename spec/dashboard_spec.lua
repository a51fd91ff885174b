-- moonrl dashboard's HTTP layer, against the binary: the token, the Host and
-- Origin checks, path traversal, bounds, bad bodies, and actions through a live
-- CI-profile run's control socket (the same messages as moonrl ctl).
local support = require("support")
local json = require("moonrl.formats.json")
local uv = support.uv

local EXPERIMENT = [[
return {
  name = "dash", device = "cpu", threads = 1, seed = 11, hardware = "ci", level = "basic",
  -- the live run outlasts every test (the teardown stops it): at 100k agent-steps/s (this config,
  -- 2026-11-27) 100,000 updates would end in about a minute
  total_steps = 100000000 * 8 * 8, warmup = { updates = 0 },
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
  tcp:connect(opts.addr or "127.0.0.1", port, function(err)
    if err then got[#got + 1] = "CONNECT " .. err done = true return end
    tcp:read_start(function(rerr, data)
      if rerr or not data then done = true return end
      got[#got + 1] = data
    end)
    if bytes then tcp:write(bytes) end
  end)
  support.run_until(function() return done end, opts.limit or 30000)
  if not tcp:is_closing() then tcp:close() end
  -- the close completes now: luv 1.44 crashes at exit on a handle whose close is still pending
  uv.run("nowait")
  local text = table.concat(got)
  local status = tonumber(text:match("^HTTP/1%.1 (%d+)"))
  local body = text:match("\r\n\r\n(.*)$") or ""
  return status, body, text
end

local function request(port, method, path, headers, body, addr)
  local lines = { method .. " " .. path .. " HTTP/1.1" }
  headers = headers or {}
  if headers.Host == nil then headers.Host = (addr or "127.0.0.1") .. ":" .. port end
  for k, v in pairs(headers) do if v ~= false then lines[#lines + 1] = k .. ": " .. v end end
  if body then lines[#lines + 1] = "Content-Length: " .. #body end
  local status, rbody, text = raw(port, table.concat(lines, "\r\n") .. "\r\n\r\n" .. (body or ""), { addr = addr })
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
    -- a random-search sweep with an ASHA rung, and a PBT sweep with an exploit, written by hand
    -- as moonrl.sweep writes them (results.lua's header), their fronts and lineage worked out below
    local function sweep_fixture(name, info, records, trials)
      local sd = dir .. "/served/" .. name
      uv.fs_mkdir(sd, 493)
      support.write_file(sd .. "/sweep.json", json.encode(info) .. "\n")
      local lines = {}
      for _, r in ipairs(records) do lines[#lines + 1] = json.encode(r) end
      support.write_file(sd .. "/results.jsonl", table.concat(lines, "\n") .. "\n")
      for i, curve in ipairs(trials) do
        local td = string.format("%s/trial-%03d", sd, i)
        uv.fs_mkdir(td, 493)
        support.write_file(td .. "/config.lua", "return {}\n")
        local m = {}
        for u, e in ipairs(curve) do
          m[u] = json.encode({ update = u, agent_steps = 64 * u, efficiency = e[1], time_total = e[2] })
        end
        support.write_file(td .. "/metrics.jsonl", table.concat(m, "\n") .. "\n")
      end
    end
    -- recorded from elsewhere: the trial paths are the sweep process's, not the dashboard's
    local function start(i, params) return { event = "start", trial = i, label = string.format("trial-%03d", i),
      params = params, dir = "elsewhere/sweep/" .. string.format("trial-%03d", i) } end
    sweep_fixture("search", { metric = "efficiency", mode = "max", method = "random", smooth = 1 }, {
      start(1, { ["ppo.lr"] = 1e-3 }), start(2, { ["ppo.lr"] = 3e-4 }),
      { event = "rung", trial = 2, rung = 1, steps = 128, value = 0.25, decision = "stop", why = "bottom" },
      { trial = 1, label = "trial-001", status = "done", value = 0.2, steps = 192, updates = 3, params = { ["ppo.lr"] = 1e-3 },
        dir = "elsewhere/sweep/trial-001" },
      { trial = 2, label = "trial-002", status = "stopped", value = 0.25, steps = 128, updates = 2, params = { ["ppo.lr"] = 3e-4 },
        dir = "elsewhere/sweep/trial-002" },
    }, { { { 0.1, 1 }, { 0.3, 1 }, { 0.2, 1 } }, { { 0.2, 0.5 }, { 0.25, 0.5 } } })
    sweep_fixture("pbt", { metric = "efficiency", mode = "max", method = "pbt", smooth = 1 }, {
      start(1, { ["ppo.lr"] = 1e-3 }), start(2, { ["ppo.lr"] = 3e-4 }),
      { event = "exploit", trial = 2, from = 1, update = 4, donor_update = 4, old = { ["ppo.lr"] = 3e-4 },
        new = { ["ppo.lr"] = 1.2e-3 } },
      { trial = 1, label = "trial-001", status = "done", value = 0.5, steps = 512, updates = 8, params = { ["ppo.lr"] = 1e-3 } },
      { trial = 2, label = "trial-002", status = "done", value = 0.7, steps = 512, updates = 8, params = { ["ppo.lr"] = 3e-4 } },
    }, { { { 0.5, 1 } }, { { 0.7, 1 } } })
    -- a sweep where only ppo.lr matters (log-uniform), ppo.clip does not: importance and the parallel chart
    local keyed, curves = {}, {}
    local CLIP = { 7, 3, 2, 5, 8, 4, 9, 6, 10, 0, 1, 11 }   -- uncorrelated with lr's order (i * 5) % 12
    for i = 1, 12 do
      local lr, clip = 10 ^ (-4 + 2 * ((i * 5) % 12) / 11), 0.1 + 0.2 * CLIP[i] / 11
      local params = { ["ppo.lr"] = lr, ["ppo.clip"] = clip }
      local v = 0.5 + (math.log10(lr) + 4) / 4
      keyed[#keyed + 1] = start(i, params)
      keyed[#keyed + 1] = { trial = i, label = string.format("trial-%03d", i), status = "done", value = v, steps = 64,
        updates = 1, params = params, dir = "elsewhere/sweep/" .. string.format("trial-%03d", i) }
      curves[i] = { { v, 1 } }
    end
    sweep_fixture("keys", { metric = "efficiency", mode = "max", method = "random", smooth = 1,
      space = { ["ppo.lr"] = { kind = "loguniform", lo = 1e-4, hi = 1e-2, log = true },
                ["ppo.clip"] = { kind = "uniform", lo = 0.1, hi = 0.3 } } }, keyed, curves)
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
    status = get("/api/runs?token=" .. token, { Host = false })   -- none at all: malformed (RFC 9112 3.2)
    assert.equal(400, status)
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

  it("answers HEAD with the headers of GET and no body", function()
    local _, _, got = get("/api/run?token=" .. token .. "&run=served/old")
    local _, _, head = request(port, "HEAD", "/api/run?token=" .. token .. "&run=served/old")
    assert.truthy(head:find("^HTTP/1%.1 200"), head)
    assert.equal(got:match("Content%-Length: (%d+)"), head:match("Content%-Length: (%d+)"))
    assert.equal("", head:match("\r\n\r\n(.*)$"))
  end)

  it("writes an empty list as [] (no alerts, no evaluations)", function()
    local _, body, text = get("/api/run?token=" .. token .. "&run=served/old")
    assert.equal(0, #body.alerts)
    assert.truthy(text:find('"alerts":[]', 1, true), text)
    assert.truthy(text:find('"evals":[]', 1, true), text)
  end)

  it("shows a sweep: its trials, its ASHA rungs and its front, worked out by hand", function()
    local status, body = get("/api/sweep?token=" .. token .. "&sweep=served/search")
    assert.equal(200, status, json.encode(body))
    assert.equal("random", body.method)
    assert.equal(2, #body.trials)
    assert.equal("served/search/trial-001", body.trials[1].run)
    assert.equal("stopped", body.trials[2].state)
    assert.same({ { trial = 2, rung = 1, steps = 128, value = 0.25, decision = "stop", why = "bottom" } }, body.rungs)
    -- steps: at 64, trial 2's 0.2 beats trial 1's 0.1; at 128 trial 1's 0.3; nothing later beats it
    local function pts(list, cost)
      local out = {}
      for i, p in ipairs(list) do out[i] = { p.trial, p[cost], p.value } end
      return out
    end
    assert.same({ { 2, 64, 0.2 }, { 1, 128, 0.3 } }, pts(body.front.steps.front, "steps"))
    -- seconds (the sum of time_total): trial 2 at 0.5 s (0.2) and 1 s (0.25), trial 1 at 2 s (0.3)
    assert.same({ { 2, 0.5, 0.2 }, { 2, 1, 0.25 }, { 1, 2, 0.3 } }, pts(body.front.seconds.front, "seconds"))
    assert.truthy(#body.front.steps.rows >= 1)
    assert.equal(0, #body.exploits)
    assert.is_nil(body.lineage)
  end)

  it("shows a PBT sweep's exploits and the best member's lineage", function()
    local status, body = get("/api/sweep?token=" .. token .. "&sweep=served/pbt")
    assert.equal(200, status, json.encode(body))
    assert.equal(1, #body.exploits)
    assert.same({ trial = 2, from = 1, update = 4, donor_update = 4, old = { ["ppo.lr"] = 3e-4 }, new = { ["ppo.lr"] = 1.2e-3 } },
      body.exploits[1])
    -- the best (trial 2, 0.7) trained on trial 1's weights up to update 4, then its own updates 4
    -- to 8 (the copy is in force from update 4: the segment is its updates after 3)
    assert.equal(2, body.lineage.best)
    assert.same({ { trial = 1, from = 0, to = 4, params = { ["ppo.lr"] = 1e-3 } },
      { trial = 2, from = 3, to = 8, params = { ["ppo.lr"] = 1.2e-3 } } }, body.lineage.segments)
  end)

  it("shows which keys mattered (fANOVA) and every trial across the keys (parallel coordinates, SVG)", function()
    local status, body = get("/api/sweep?token=" .. token .. "&sweep=served/keys")
    assert.equal(200, status, json.encode(body))
    local imp = body.importance
    assert.equal(12, imp.n)
    assert.equal("ppo.lr", imp.keys[1].key)
    assert.is_true(imp.keys[1].importance > 0.8 and imp.keys[2].importance < 0.05, json.encode(imp))
    assert.equal("log", imp.keys[1].scale)
    assert.truthy(imp.method:find("fANOVA", 1, true))
    assert.is_string(body.charts)
    -- too few trials: said
    status, body = get("/api/sweep?token=" .. token .. "&sweep=served/search")
    assert.truthy(body.importance.error:find("at least 4 are needed", 1, true), json.encode(body.importance))
    -- the charts: an SVG, an axis per key in importance order and the metric, a line per trial
    local st, text, raw_text = get("/api/sweep_chart?token=" .. token .. "&sweep=served/keys&chart=parallel")
    assert.equal(200, st, tostring(raw_text))
    assert.truthy(raw_text:find("Content%-Type: image/svg%+xml"), raw_text)
    assert.truthy(text:find("^<svg "), text)
    local n = 0
    for _ in text:gmatch("<polyline ") do n = n + 1 end
    assert.equal(12, n)
    local lr, clip, metric = text:find(">ppo.lr</text>", 1, true), text:find(">ppo.clip</text>", 1, true),
      text:find(">efficiency (max)</text>", 1, true)
    assert.truthy(lr and clip and metric and lr < clip and clip < metric)
    assert.truthy(text:find("(log scale)", 1, true))
    st, text = get("/api/sweep_chart?token=" .. token .. "&sweep=served/keys&chart=importance")
    assert.equal(200, st)
    assert.truthy(text:find(">ppo.lr</text>", 1, true), text)
    st, text = get("/api/sweep_chart?token=" .. token .. "&sweep=served/search&chart=importance")
    assert.equal(404, st)
    assert.truthy(text.error:find("no importance: 1 finished trial(s)", 1, true), json.encode(text))
    st, text = get("/api/sweep_chart?token=" .. token .. "&sweep=served/keys&chart=../x")
    assert.equal(404, st)
    assert.truthy(text.error:find("accepted parallel, importance", 1, true), json.encode(text))
    st, text = get("/api/sweep_chart?token=" .. token .. "&sweep=../served/keys&chart=parallel")
    assert.equal(404, st)
    assert.equal(401, (get("/api/sweep_chart?sweep=served/keys&chart=parallel")))
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

describe("moonrl dashboard --host, and dashboard = true", function()
  if not support.have_bin then
    it("needs the binary", function() pending("no binary at " .. support.BIN .. " (build it: make build)") end)
    return
  end
  local dir
  setup(function()
    dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
  end)
  teardown(function() support.rm_rf(dir) end)

  it("--host listens on another address with a warning, and accepts that Host header there", function()
    uv.fs_mkdir(dir .. "/empty", 493)
    local dash = support.spawn(support.BIN, dir, "dashboard empty --host 127.0.0.2")
    support.wait_until("the dashboard's URL", function() return dash.out():find("token=%x+") ~= nil end, 30000)
    local port, token = dash.out():match("http://127%.0%.0%.2:(%d+)/%?token=(%x+)")
    port = tonumber(port)
    assert.truthy(port, dash.out())
    assert.truthy(dash.err():find("warning: listening on 127.0.0.2", 1, true), dash.err())
    assert.truthy(dash.err():find("ssh -L", 1, true), dash.err())
    local status, body, text = request(port, "GET", "/api/runs?token=" .. token, nil, nil, "127.0.0.2")
    assert.equal(200, status, text)
    assert.truthy(text:find('"runs":[]', 1, true), text)
    status = request(port, "GET", "/api/runs?token=" .. token, { Host = "attacker.example:" .. port }, nil, "127.0.0.2")
    assert.equal(403, status)
    -- not on the loopback address it was not asked for
    status, body = raw(port, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", { limit = 5000 })
    assert.is_nil(status)
    assert.equal("", body)
    dash.kill("sigterm")
    assert.truthy(dash.wait(20000))
    assert.is_nil(uv.fs_stat(dir .. "/empty/.dashboard-token"))
  end)

  it("dashboard = true serves the run from its own process while it trains, and stops with it", function()
    local run = support.spawn(support.BIN, dir, "train exp.lua --dir runs/served --set dashboard=true --set total_steps=" ..
      (40 * 64))
    support.wait_until("the run's dashboard URL", function() return run.err():find("token=%x+") ~= nil end, 120000)
    local port, token = run.err():match("moonrl: dashboard of the run runs/served: http://127%.0%.0%.1:(%d+)/%?token=(%x+)")
    port = tonumber(port)
    assert.truthy(port, run.err())
    local st = uv.fs_stat(dir .. "/runs/served/.dashboard-token")
    assert.equal(tonumber("600", 8), bit.band(st.mode, 511))
    local status, body = request(port, "GET", "/api/runs?token=" .. token)
    assert.equal(200, status, json.encode(body))
    assert.equal(1, #body.runs)
    assert.equal("runs/served", body.runs[1].id)
    assert.truthy(run.wait(180000))
    assert.equal(0, run.code)
    assert.is_nil(uv.fs_stat(dir .. "/runs/served/.dashboard-token"))
    assert.is_nil((request(port, "GET", "/api/runs?token=" .. token)))   -- closed with the run
  end)

  it("a sweep with dashboard = true serves all its trials; its trials serve none of their own", function()
    local sdir = dir .. "/sweep"   -- a directory of its own: support.spawn writes stdout and stderr there
    uv.fs_mkdir(sdir, 493)
    support.write_file(sdir .. "/exp.lua", EXPERIMENT)
    support.write_file(sdir .. "/sweep.lua", [=[
      local moonrl = require("moonrl")
      local ok, err = pcall(moonrl.sweep, { base = "exp.lua", space = {}, dashboard = "yes" })
      print("refused: " .. tostring(err))
      local s = moonrl.sweep{ base = "exp.lua", sets = { "dashboard=true" },
        space = { ["ppo.lr"] = moonrl.grid{ 1e-3 } }, dir = "sw", dashboard = true }
      print("status: " .. s:wait().status)
    ]=])
    local sw = support.spawn(support.BIN, sdir, "run sweep.lua")
    support.wait_until("the sweep's dashboard URL", function() return sw.err():find("token=%x+") ~= nil end, 120000)
    local port, token = sw.err():match("moonrl: dashboard of the sweep sw: http://127%.0%.0%.1:(%d+)/%?token=(%x+)")
    port = tonumber(port)
    assert.truthy(port, sw.err())
    local status, body = request(port, "GET", "/api/runs?token=" .. token)
    assert.equal(200, status, json.encode(body))
    assert.equal("sw", body.sweeps[1].id)
    support.wait_until("the trial's first metrics", function()
      return (support.read_file(sdir .. "/sw/trial-001/metrics.jsonl") or ""):find("\n") ~= nil
    end, 120000)
    support.wait_until("the trial in the list, live (the list is walked again at most once a second)", function()
      status, body = request(port, "GET", "/api/runs?token=" .. token)
      return body.runs[1] ~= nil and body.runs[1].live == true
    end, 30000)
    assert.equal("sw/trial-001", body.runs[1].id)
    sw.kill("sigint")   -- the sweep stops its trial (a final checkpoint) and its dashboard
    assert.equal(130, sw.wait(120000), sw.out() .. sw.err())
    assert.truthy(sw.out():find("refused: moonrl.sweep: dashboard must be true or false, got \"yes\"", 1, true), sw.out())
    assert.truthy(support.read_file(sdir .. "/sw/trial-001.lua"):find("dashboard = false", 1, true))
    assert.falsy((support.read_file(sdir .. "/sw/trial-001/output.log") or ""):find("dashboard of the run", 1, true))
    assert.is_nil(uv.fs_stat(sdir .. "/sw/.dashboard-token"))
  end)
end)

-- The dashboard in a real browser: headless Chromium driven by chromedriver
-- through the WebDriver HTTP protocol (curl as the client). A CI-profile run
-- trains; the page shows its curves growing, sets ppo.lr from the page (the
-- change lands in the run's changes.lua with source "dashboard"), and is
-- refused without the token and from another origin. Skipped, saying so, only
-- where chromium and chromedriver are not installed (make test installs them).
local support = require("support")
local json = require("moonrl.formats.json")
local uv = support.uv

local EXPERIMENT = [[
return {
  name = "browser", device = "cpu", threads = 1, seed = 5, hardware = "ci", level = "basic",
  -- The live run outlasts every test (the teardown stops it) at a rate of rows a dashboard is
  -- made for. With 8 envs x 8 steps it ran 1,000 updates a second (100k agent-steps/s, 2026-11-27),
  -- logging each: its 100,000 updates ended within about a minute, and a slow start (Chromium's,
  -- on a loaded machine) left tens of thousands of rows for the dashboard to read before its page
  -- could answer, so the later tests timed out. 16 envs x 128 steps: about 50 updates a second.
  total_steps = 1000000 * 16 * 128, warmup = { updates = 0 },
  env = { num_envs = 16, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 128, epochs = 1, lr = 3e-4 },
  log = { console = false, tensorboard = false, checkpoint_interval = 0 },
}
]]

local function which(name)
  local p = io.popen("command -v " .. name .. " 2>/dev/null")
  local out = p:read("*l")
  p:close()
  return out
end

local CHROMEDRIVER = which("chromedriver")
local CHROMIUM = which("chromium") or which("chromium-browser")

-- One WebDriver command: method, path under the session, body table -> value, the whole reply.
local function wd(base, method, path, body, tmp)
  local args = { "curl", "-s", "-m", "60", "-X", method, "-H", "'Content-Type: application/json'" }
  if body then
    support.write_file(tmp .. "/wd.json", type(body) == "string" and body or json.encode(body))
    args[#args + 1] = "--data-binary @" .. tmp .. "/wd.json"
  end
  args[#args + 1] = "'" .. base .. path .. "'"
  local p = io.popen(table.concat(args, " "))
  local text = p:read("*a")
  p:close()
  local reply = json.decode(text)
  assert(type(reply) == "table", "WebDriver " .. method .. " " .. path .. ": " .. text)
  return reply.value, reply
end

describe("moonrl dashboard in headless Chromium (WebDriver)", function()
  if not support.have_bin then
    it("needs the binary", function() pending("no binary at " .. support.BIN .. " (build it: make build)") end)
    return
  end
  if not (CHROMEDRIVER and CHROMIUM) then
    it("needs Chromium", function()
      pending("chromium and chromium-driver are not installed (make test installs them; apt-get install " ..
        "chromium chromium-driver): the browser test of the dashboard is skipped")
    end)
    return
  end
  local dir, live, dash, driver, port, token, base, session

  setup(function()
    dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    uv.fs_mkdir(dir .. "/runs", 493)
    live = support.spawn(support.BIN, dir, "train exp.lua --dir runs/live", { name = "live" })
    support.wait_until("the live run's first metrics", function()
      return uv.fs_stat(dir .. "/runs/live/control/control.sock") ~= nil
        and (support.read_file(dir .. "/runs/live/metrics.jsonl") or ""):find("\n") ~= nil
    end, 120000)
    -- a finished run beside it, with an evaluation, and a sweep, written as moonrl writes them
    uv.fs_mkdir(dir .. "/runs/old", 493)
    support.write_file(dir .. "/runs/old/config.lua", "return { name = 'old' }\n")
    local rows = {}
    for u = 1, 6 do rows[u] = json.encode({ update = u, agent_steps = 64 * u, episode_return_mean = -u, efficiency = 0.1 * u }) end
    support.write_file(dir .. "/runs/old/metrics.jsonl", table.concat(rows, "\n") .. "\n")
    uv.fs_mkdir(dir .. "/runs/old/eval", 493)
    uv.fs_mkdir(dir .. "/runs/old/eval/final", 493)
    support.write_file(dir .. "/runs/old/eval/final/eval.json", json.encode({ command = "moonrl eval runs/old",
      results = { { label = "ground_truth", point = { eff_overall = 0.875, deaths_per_1k = 1.5 },
        ci = { eff_overall = { 0.75, 0.9375 }, deaths_per_1k = { 0.5, 2.5 } } } } }) .. "\n")
    uv.fs_mkdir(dir .. "/runs/sw", 493)
    support.write_file(dir .. "/runs/sw/sweep.json", json.encode({ metric = "efficiency", mode = "max", method = "random" }) .. "\n")
    uv.fs_mkdir(dir .. "/runs/sw/trial-001", 493)
    support.write_file(dir .. "/runs/sw/trial-001/config.lua", "return {}\n")
    support.write_file(dir .. "/runs/sw/trial-001/metrics.jsonl", table.concat(rows, "\n") .. "\n")
    support.write_file(dir .. "/runs/sw/results.jsonl", json.encode({ event = "start", trial = 1, label = "trial-001",
      params = { ["ppo.lr"] = 1e-3 }, dir = "runs/sw/trial-001" }) .. "\n" .. json.encode({ trial = 1, label = "trial-001",
      status = "done", value = 0.6, steps = 384, updates = 6, params = { ["ppo.lr"] = 1e-3 }, dir = "runs/sw/trial-001" }) .. "\n")
    dash = support.spawn(support.BIN, dir, "dashboard runs", { name = "dash" })
    support.wait_until("the dashboard's URL", function() return dash.out():find("token=%x+") ~= nil end, 30000)
    port, token = dash.out():match("http://127%.0%.0%.1:(%d+)/%?token=(%x+)")
    local wport = 20000 + (uv.os_getpid() % 20000)
    uv.fs_mkdir(dir .. "/wd", 448)
    driver = support.spawn(CHROMEDRIVER, dir .. "/wd", "--port=" .. wport)
    base = "http://127.0.0.1:" .. wport
    support.wait_until("chromedriver", function()
      local p = io.popen("curl -s -m 2 " .. base .. "/status")
      local t = p:read("*a")
      p:close()
      return t:find('"ready"%s*:%s*true') ~= nil
    end, 30000)
    local value = wd(base, "POST", "/session", { capabilities = { alwaysMatch = { ["goog:chromeOptions"] = {
      binary = CHROMIUM,
      args = { "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--user-data-dir=" .. dir .. "/profile" } } } } }, dir)
    session = assert(value.sessionId, "no WebDriver session: " .. json.encode(value))
  end)

  teardown(function()
    if session then pcall(wd, base, "DELETE", "/session/" .. session, nil, dir) end
    if driver and not driver.done then driver.kill("sigterm") driver.wait(20000) end
    if dash and not dash.done then dash.kill("sigterm") dash.wait(20000) end
    if live and not live.done then live.kill("sigterm") live.wait(60000) end
    support.rm_rf(dir)
  end)

  local function s(path, body, method) return wd(base, method or "POST", "/session/" .. session .. path, body, dir) end
  local function js(script)
    -- moonrl's JSON writes an empty table as {}: WebDriver wants "args": []
    local v = s("/execute/sync", '{"script":' .. json.encode(script) .. ',"args":[]}')
    if type(v) == "table" and v.error then error("WebDriver: " .. json.encode(v), 2) end
    return v
  end
  local function element(css)
    local v = s("/element", { using = "css selector", value = css })
    return v["element-6066-11e4-a52e-4f735466cecf"]
  end
  -- What the page, the dashboard and the live run were doing, for a wait that timed out.
  local function state()
    local p = io.popen("curl -s -m 5 'http://127.0.0.1:" .. port .. "/api/runs?token=" .. token .. "' 2>&1")
    local api = p:read("*a")
    p:close()
    local _, page = pcall(js, "return document.getElementById('run-status').textContent + ' | ' + " ..
      "document.getElementById('runs').textContent")
    local function tail(t) t = tostring(t) return #t > 1500 and "..." .. t:sub(-1500) or t end
    return string.format("\n  dashboard alive %s, live run alive %s\n  /api/runs: %s\n  the page: %s\n" ..
      "  dashboard stdout/stderr: %s%s\n  live run stdout/stderr: %s%s", tostring(dash.alive()), tostring(live.alive()),
      tail(api), tail(page), tail(dash.out()), tail(dash.err()), tail(live.out()), tail(live.err()))
  end
  local function wait_js(what, script, limit)
    local ok, err = pcall(support.wait_until, what, function() return js(script) == true end, limit or 60000)
    if not ok then
      local got, st = pcall(state)
      error(tostring(err) .. (got and st or "\n  (the state could not be read: " .. tostring(st) .. ")"), 2)
    end
  end

  it("refuses the page without the token", function()
    s("/url", { url = "http://127.0.0.1:" .. port .. "/" })
    local text = js("return document.body.textContent")
    assert.truthy(text:find("no token", 1, true), text)
  end)

  it("shows the run's curves growing, live", function()
    s("/url", { url = "http://127.0.0.1:" .. port .. "/?token=" .. token })
    wait_js("the return curve", "return !!window.moonrlDashboard && window.moonrlDashboard.points('episode_return_mean') > 0")
    local first = js("return window.moonrlDashboard.points('episode_return_mean')")
    wait_js("more points", "return window.moonrlDashboard.points('episode_return_mean') > " .. first, 60000)
    assert.truthy(js("return document.querySelectorAll('#charts canvas').length") > 0)
    assert.truthy(js("return document.getElementById('run-title').textContent"):find("runs/live", 1, true))
  end)

  it("sets ppo.lr from the page: the change is in the run's changes.lua, source \"dashboard\"", function()
    wait_js("the controls", "return !document.getElementById('controls').hidden && " ..
      "Array.from(document.getElementById('hot-keys').options).some(o => o.value === 'ppo.lr')")
    local key, input = element("#set-key"), element("#set-value")
    s("/element/" .. key .. "/clear", {})
    s("/element/" .. key .. "/value", { text = "ppo.lr" })
    s("/element/" .. input .. "/clear", {})
    s("/element/" .. input .. "/value", { text = "2.5e-4" })
    s("/element/" .. element("#set-button") .. "/click", {})
    wait_js("the page's answer", "return document.getElementById('message').className === 'ok'")
    assert.truthy(js("return document.getElementById('message').textContent"):find("ppo.lr", 1, true))
    support.wait_until("the change in changes.lua", function()
      local t = support.read_file(dir .. "/runs/live/changes.lua") or ""
      return t:find('source = "dashboard"', 1, true) ~= nil and t:find("0.00025", 1, true) ~= nil
    end, 60000)
    -- a key that is not hot: the run's refusal, shown on the page
    s("/element/" .. key .. "/clear", {})
    s("/element/" .. key .. "/value", { text = "seed" })
    s("/element/" .. input .. "/clear", {})
    s("/element/" .. input .. "/value", { text = "3" })
    s("/element/" .. element("#set-button") .. "/click", {})
    wait_js("the refusal", "return document.getElementById('message').className === 'err'")
    assert.truthy(js("return document.getElementById('message').textContent"):find("seed is not hot", 1, true))
  end)

  it("marks the change on the curves and lists it, with who made it", function()
    wait_js("the change in the page", "return window.moonrlDashboard.marks('episode_return_mean')" ..
      ".some(t => t.startsWith('ppo.lr = 0.00025') && t.includes('(dashboard)'))", 60000)
    local row = js("return Array.from(document.querySelectorAll('#changes tr')).map(r => r.textContent)" ..
      ".find(t => t.includes('ppo.lr') && t.includes('dashboard')) || ''")
    assert.truthy(row:find("0.00025", 1, true), row)
  end)

  it("overlays a ticked run's curves on the selected run's", function()
    assert.same({ "runs/live" }, js("return window.moonrlDashboard.series('efficiency')"))
    js("document.querySelector('#runs li[data-id=\"runs/old\"] input').click()")
    wait_js("both runs on the chart", "return window.moonrlDashboard.series('efficiency').length === 2")
    local labels = js("return window.moonrlDashboard.series('efficiency')")
    table.sort(labels)
    assert.same({ "runs/live", "runs/old" }, labels)
  end)

  it("shows a run's evaluation table with its intervals", function()
    js("document.querySelector('#runs li[data-id=\"runs/old\"]').click()")
    wait_js("the evaluation table", "return document.querySelectorAll('#evals table tr').length === 2")
    local text = js("return document.querySelector('#evals').textContent")
    assert.truthy(text:find("moonrl eval runs/old", 1, true), text)
    assert.truthy(text:find("ground_truth", 1, true), text)
    assert.truthy(text:find("0.875 [0.75, 0.9375]", 1, true), text)
    assert.truthy(text:find("1.5 [0.5, 2.5]", 1, true), text)
  end)

  it("draws every curve of the server's one list, each axis's labels distinct and on one line", function()
    s("/url", { url = "http://127.0.0.1:" .. port .. "/?token=" .. token .. "#run=runs/live" })
    wait_js("the curves", "return !!window.moonrlDashboard && window.moonrlDashboard.points('approx_kl') > 0 && " ..
      "window.moonrlDashboard.points('explained_variance') > 0 && window.moonrlDashboard.points('grad_norm') > 0")
    -- the page draws what the server lists (data.CURVES): nothing the page lacks, nothing extra
    local api = js("return window.moonrlDashboard.state.curves.map(c => c[0]).join(',')")
    local p = io.popen("curl -s -m 5 'http://127.0.0.1:" .. port .. "/api/runs?token=" .. token .. "'")
    local listed = json.decode(p:read("*a"))
    p:close()
    local want = {}
    for i, c in ipairs(listed.curves) do want[i] = c[1] end
    assert.is_true(#want >= 13, api)
    assert.are.equal(table.concat(want, ","), api)
    local drawn = js("return Array.from(document.querySelectorAll('#charts .chart')).map(d => d.id.slice(6)).join(',')")
    for name in drawn:gmatch("[^,]+") do assert.truthy(api:find(name, 1, true), name) end
    -- on every chart: the y labels differ from each other (a label per tick, enough digits) and hold
    -- no breakable space (a unit stays on its number's line)
    local bad = js([[
      const out = [];
      for (const d of document.querySelectorAll('#charts .chart')) {
        const labels = Array.from(d.querySelectorAll('.dygraph-axis-label-y')).map(e => e.textContent);
        if (new Set(labels).size !== labels.length || labels.some(t => t.includes(' '))) out.push(d.id + ': ' + labels.join(' | '));
      }
      return out.join('; ');]])
    assert.are.equal("", bad)
    local f = "window.moonrlDashboard.axisLabels"
    assert.are.same({ "2.076", "2.078", "2.080" }, js("return " .. f .. "('entropy', [2.076, 2.078, 2.08])"))
    assert.are.same({ "6.0e-4", "8.0e-4", "1.0e-3" }, js("return " .. f .. "('lr', [0.0006, 0.0008, 0.001])"))
    assert.are.same({ "10.0k", "12.5k" }, js("return " .. f .. "('sps', [10000, 12500])"))
    assert.are.same({ "95.4\u{a0}MiB", "95.6\u{a0}MiB" },
      js("return " .. f .. "('memory_peak_bytes', [95.4 * 1048576, 95.6 * 1048576])"))
  end)

  it("shows a sweep on a page of its own: trials with a column per key, every trial's curve, the front; " ..
    "a trial's row opens its run", function()
    js("document.querySelector('#sweeps li[data-id=\"runs/sw\"]').click()")
    wait_js("the sweep table", "return !document.getElementById('sweep-view').hidden && " ..
      "document.querySelectorAll('#sweep-table tr').length === 2")
    -- the sweep's page, not drawn inside the run shown before
    assert.is_true(js("return document.getElementById('run-page').hidden"))
    local head = js("return document.querySelectorAll('#sweep-table tr')[0].textContent")
    assert.truthy(head:find("ppo.lr", 1, true), head)
    local cells = js("return Array.from(document.querySelectorAll('#sweep-table tr')[1].children).map(c => c.textContent)")
    assert.are.same({ "trial-001", "done", "0.6", "384", "0.001" }, cells)
    wait_js("every trial's curve", "return window.moonrlDashboard.sweepSeries().join() === 'trial-001'")
    wait_js("the front", "return !!document.getElementById('front-steps')")
    assert.truthy(js("return document.getElementById('front-steps').textContent"):find("trial-001", 1, true))
    -- the parallel-coordinates chart (an SVG from the server) and why there is no importance yet
    wait_js("the parallel chart", "const i = document.getElementById('sweep-parallel'); " ..
      "return !i.hidden && i.complete && i.naturalWidth > 0")
    local imp = js("return document.getElementById('sweep-importance').textContent")
    assert.truthy(imp:find("no importance: 1 finished trial(s)", 1, true) and imp:find("at least 4", 1, true), imp)
    js("document.querySelectorAll('#sweep-table tr')[1].click()")
    wait_js("the trial's run", "return document.getElementById('run-title').textContent.includes('runs/sw/trial-001')")
    assert.is_true(js("return document.getElementById('sweep-view').hidden && !document.getElementById('run-page').hidden"))
  end)

  it("keeps the view in the URL's fragment, and opens the view a fragment names", function()
    local url = js("return location.href")
    assert.truthy(url:find("#run=runs%2Fsw%2Ftrial-001", 1, true), url)
    s("/url", { url = "http://127.0.0.1:" .. port .. "/?token=" .. token .. "#run=runs/old&overlay=runs/live" })
    wait_js("the named view", "return document.getElementById('run-title').textContent.includes('runs/old') && " ..
      "window.moonrlDashboard.series('efficiency').length === 2")
    assert.truthy(js("return document.getElementById('sweep-view').hidden"))
    s("/url", { url = "http://127.0.0.1:" .. port .. "/?token=" .. token .. "#sweep=runs/sw" })
    wait_js("the named sweep", "return !document.getElementById('sweep-view').hidden && " ..
      "document.getElementById('run-page').hidden")
  end)

  it("refuses an action from another origin", function()
    -- localhost:PORT is another origin than 127.0.0.1:PORT: a page there cannot act
    s("/url", { url = "http://127.0.0.1:" .. port .. "/?token=" .. token })
    local before = support.read_file(dir .. "/runs/live/changes.lua") or ""
    local r = s("/execute/async", { args = { "http://localhost:" .. port .. "/api/action?token=" .. token }, script = [[
      const done = arguments[arguments.length - 1];
      fetch(arguments[0], { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" },
        body: JSON.stringify({ run: "runs/live", action: "set", key: "ppo.lr", value: "9e-4" }) })
        .then(r => done("sent " + r.type)).catch(e => done("failed " + e));
    ]] })
    assert.truthy(type(r) == "string", json.encode(r))
    uv.sleep(1500)
    local after = support.read_file(dir .. "/runs/live/changes.lua") or ""
    assert.falsy(after:find("0.0009", 1, true), after)
    assert.equal(select(2, before:gsub("source", "")), select(2, after:gsub("source", "")))
  end)
end)

-- bench/dashboard_overhead.lua - does the dashboard slow training? agent-steps/s
-- of the same run without and with the dashboard serving it from the run's own
-- process (as dashboard = true does) while its page is open in headless
-- Chromium, polling (metrics every 1 s, the run list and status every 2 s, the
-- details every 5 s), alternating, PAIRS pairs.
--
--   moonrl run bench/dashboard_overhead.lua [PAIRS=3] [STEPS=131072] [THREADS=0]
--
-- Each run: the cpu profile, STEPS agent-steps, no console, no TensorBoard;
-- its rate is its summary's sps (the whole run, warm-up included). The page
-- costs what the browser costs: on a machine whose cores all train, Chromium
-- rendering the charts takes its share of them, which is the point of the
-- measurement. The server's share alone: the same with --no-browser
-- (requests sent by this script's loop at the page's rate instead).
local moonrl = require("moonrl")
local uv = require("luv")

local args, no_browser = {}, false
for _, a in ipairs(arg) do if a == "--no-browser" then no_browser = true else args[#args + 1] = a end end
local PAIRS = tonumber(args[1]) or 3
local STEPS = tonumber(args[2]) or 131072
local THREADS = tonumber(args[3]) or 0

local CHROMIUM = not no_browser and "chromium"
local tmp = assert(uv.fs_mkdtemp("/tmp/moonrl-dashboard-overhead-XXXXXX"))
-- The page's requests without a browser: GETs at the page's rates over plain TCP.
local function poll_like_the_page(d, id)
  local timers = {}
  local function get(path)
    local tcp = uv.new_tcp()
    tcp:connect("127.0.0.1", d.port, function(err)
      if err then tcp:close() return end
      tcp:read_start(function(rerr, data) if rerr or not data then tcp:close() end end)
      tcp:write("GET " .. path .. " HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Moonrl-Token: " .. d.token .. "\r\n\r\n")
    end)
  end
  -- (the metrics from row 0 each time: every row, more than the page asks for once it has them)
  for _, t in ipairs({ { 1000, function() get("/api/metrics?run=" .. id .. "&from=0") end },
    { 2000, function() get("/api/runs") end }, { 5000, function() get("/api/run?run=" .. id) end } }) do
    local timer = uv.new_timer()
    timer:start(t[1], t[1], t[2])
    timers[#timers + 1] = timer
  end
  return function() for _, t in ipairs(timers) do t:close() end end
end

local function one(label, i, with_page)
  local dir = string.format("%s/%s-%d", tmp, label, i)
  local run = moonrl.train({ name = "overhead", dir = dir, total_steps = STEPS, seed = 1, threads = THREADS,
    log = { console = false, tensorboard = false } }, { hardware = "cpu" })
  local d, stop, browser
  if with_page then
    d = assert(moonrl.dashboard({ dirs = { dir }, quiet = true }))
    if CHROMIUM then
      local err
      browser, err = uv.spawn(CHROMIUM, { args = { "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--remote-debugging-port=0", "--user-data-dir=" .. dir .. ".profile", d.url .. "#run=" .. dir },
        stdio = { nil, nil, nil } }, function() end)
      if not browser then
        error("bench/dashboard_overhead.lua: cannot start chromium (" .. tostring(err) .. "): make test installs it; " ..
          "--no-browser measures the server alone", 0)
      end
    else
      stop = poll_like_the_page(d, dir)
    end
  end
  local s = run:wait()
  local requests = d and d:requests() or 0
  if browser then browser:kill("sigterm") browser:close() end
  if stop then stop() end
  if d then d:close() end
  assert(s.status == "done", dir .. ": " .. tostring(s.status) .. " " .. tostring(s.error))
  return s.sps, requests
end

print(string.format("dashboard overhead: %d pairs of %d agent-steps, cpu profile, threads %s; %s; %s",
  PAIRS, STEPS, THREADS == 0 and "all" or THREADS, CHROMIUM and "the page open in headless Chromium" or
  "the page's requests sent without a browser", require("moonrl.runtime.hardware").cpu_description()))
print(string.format("%-6s %12s %12s %8s %10s", "pair", "without", "with page", "ratio", "requests"))
local ratios = {}
for i = 1, PAIRS do
  local a = one("without", i, false)
  local b, n = one("with", i, true)
  ratios[i] = b / a
  print(string.format("%-6d %12.0f %12.0f %8.3f %10d", i, a, b, b / a, n))
end
table.sort(ratios)
print(string.format("median ratio (with the page / without): %.3f over %d pairs (agent-steps/s, the runs' summaries)",
  ratios[math.floor((#ratios + 1) / 2)], #ratios))
require("moonrl.util").rm_rf(tmp)

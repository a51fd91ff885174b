-- bench/cartpole_train.lua - `moonrl train cartpole` end to end against its
-- peers on the same cores: Stable-Baselines3's PPO with rl-baselines3-zoo's
-- CartPole-v1 settings (bench/reference/cartpole_sb3.py) and a PPO written
-- after CleanRL's ppo.py (bench/reference/cartpole_cleanrl.py), the same
-- settings where they map. Each run is a fresh process, alternating moonrl /
-- SB3 / CleanRL per seed, SEEDS seeds, each for STEPS agent-steps (rounded up
-- to whole updates of 8 x 32).
--
--   moonrl run bench/cartpole_train.lua [SEEDS=3] [STEPS=100000] [PEERS=moonrl,sb3,cleanrl]
--
-- "Reached 500": the first update by which the last ended episodes, at least
-- 8 (as many as environments; whole updates, the oldest dropped while 8
-- remain), all returned 500 (their mean >= 499.99): environments_spec's rule
-- for cartpole, applied alike to moonrl's metrics.jsonl and to the peers'
-- lines (one per update: the episodes its rollout ended and their mean
-- return, the wall-clock time the update ended). Times: from the process's
-- start (what a user waits: start-up and imports included) and from the
-- start of training (moonrl: its first update's end less that update's
-- time_total; the peers: just before their first rollout). moonrl runs as
-- `moonrl train cartpole` does by default (metrics, TensorBoard, checkpoints);
-- the peers write nothing but their lines.
local json = require("moonrl.formats.json")
local uv = require("luv")

local SEEDS = tonumber(arg[1]) or 3
local STEPS = tonumber(arg[2]) or 100000
local BATCH = 8 * 32
STEPS = math.ceil(STEPS / BATCH) * BATCH
local PEERS = {}
for p in (arg[3] or "moonrl,sb3,cleanrl"):gmatch("[^,]+") do
  if not ({ moonrl = true, sb3 = true, cleanrl = true })[p] then
    return require("moonrl.cli.cmdline").usage_error("bench/cartpole_train.lua: PEERS: '" .. p ..
      "': accepted moonrl, sb3, cleanrl")
  end
  PEERS[#PEERS + 1] = p
end
local NAMES = { moonrl = "moonrl", sb3 = "Stable-Baselines3 PPO", cleanrl = "CleanRL-style ppo.py" }
-- (their settings: the scripts' docstrings; SB3's are rl-baselines3-zoo's CartPole-v1)

local home = require("moonrl.core").home()
local function now() local s, us = uv.gettimeofday() return s + us / 1e6 end

-- The peers' interpreter: the first that imports Stable-Baselines3, PyTorch and Gymnasium.
local py, versions
local needs_py = false
for _, p in ipairs(PEERS) do needs_py = needs_py or p ~= "moonrl" end
if needs_py then
  local probe = [[import sys, torch, gymnasium, stable_baselines3 as s; ]] ..
    [[print("moonrl-probe", s.__version__, torch.__version__, gymnasium.__version__, ]] ..
    [["%d.%d.%d" % sys.version_info[:3])]]
  for _, p in ipairs(require("moonrl.bench.compare").pythons()) do
    if not p:find("/", 1, true) or io.open(p, "rb") then
      local f = io.popen(string.format("%q -c %q 2>/dev/null", p, probe))
      local out = f:read("*a")
      f:close()
      local sb, tv, gv, pv = out:match("moonrl%-probe (%S+) (%S+) (%S+) (%S+)")
      if sb then py, versions = p, { sb3 = sb, torch = tv, gymnasium = gv, python = pv } break end
    end
  end
  if not py then
    io.stderr:write("bench/cartpole_train.lua: the peers need Stable-Baselines3, PyTorch and Gymnasium: " ..
      "`make bench` installs them (build/venv-bench, requirements-bench.txt); PEERS=moonrl runs moonrl alone\n")
    require("moonrl.core").set_exit_code(1)
    return
  end
end

local tmp = assert(uv.fs_mkdtemp("/tmp/moonrl-cartpole-train-XXXXXX"))

local function lines_of(text)
  local t = {}
  for line in text:gmatch("[^\n]+") do
    if line:match("^{") then t[#t + 1] = json.decode(line) end
  end
  return t
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- One run: { updates = { {agent_steps, episodes, mean, wall} ... }, spawn, exit, train0 }.
local function run(peer, seed)
  local out = string.format("%s/%s-%d", tmp, peer, seed)
  local cmd
  if peer == "moonrl" then
    cmd = string.format("%q train cartpole --dir %q --set seed=%d --set total_steps=%d >%q.log 2>&1",
      uv.exepath(), out, seed, STEPS, out)
  else
    cmd = string.format("%q %s/bench/reference/cartpole_%s.py --seed %d --total-steps %d >%q.log 2>&1", py, home, peer,
      seed, STEPS, out)
  end
  local spawn = now()
  local ok = os.execute(cmd)
  local exit = now()
  if ok ~= 0 and ok ~= true then
    error(peer .. " failed (" .. cmd .. "):\n" .. (read(out .. ".log") or ""), 0)
  end
  local r = { spawn = spawn, exit = exit, updates = {} }
  local rows = lines_of(peer == "moonrl" and read(out .. "/metrics.jsonl") or read(out .. ".log"))
  for _, m in ipairs(rows) do
    if m.event == "start" then r.train0 = m.wall_time
    elseif m.event == nil and m.agent_steps then
      if peer == "moonrl" and not r.train0 then r.train0 = m.wall_time - m.time_total end
      r.updates[#r.updates + 1] = { steps = m.agent_steps, episodes = m.episodes or 0,
        mean = m.episode_return_mean or 0, wall = m.wall_time }
    end
  end
  assert(#r.updates > 0 and r.train0, peer .. ": no updates in its output (" .. out .. ")")
  return r
end

-- The first update at which the window (>= 8 episodes, whole updates) averages 500, and the window's mean at the end.
local function reached(r)
  local win, at = {}, nil
  local n, sum = 0, 0
  for _, u in ipairs(r.updates) do
    if u.episodes > 0 then
      win[#win + 1] = u
      n, sum = n + u.episodes, sum + u.episodes * u.mean
      while #win > 1 and n - win[1].episodes >= 8 do
        n, sum = n - win[1].episodes, sum - win[1].episodes * win[1].mean
        table.remove(win, 1)
      end
      if n >= 8 and sum / n >= 499.99 and not at then at = u end
    end
  end
  return at, n > 0 and sum / n or 0
end

local function median(xs)
  local s = {}
  for i, v in ipairs(xs) do s[i] = v end
  table.sort(s)
  local k = #s
  if k == 0 then return nil end
  return k % 2 == 1 and s[(k + 1) / 2] or 0.5 * (s[k / 2] + s[k / 2 + 1])
end

local load0 = uv.loadavg()
local results = {}
for _, p in ipairs(PEERS) do results[p] = {} end
for seed = 1, SEEDS do
  for _, p in ipairs(PEERS) do
    local r = run(p, seed)
    local at, final = reached(r)
    local last = r.updates[#r.updates]
    local row = {
      seed = seed, steps = at and at.steps, process_s = at and at.wall - r.spawn, train_s = at and at.wall - r.train0,
      final = final, total_steps = last.steps, total_process_s = r.exit - r.spawn, total_train_s = last.wall - r.train0,
    }
    row.sps = row.total_steps / row.total_train_s
    table.insert(results[p], row)
    io.stderr:write(string.format("  seed %d %-22s reached 500 %s, whole run %.1f s\n", seed, NAMES[p],
      at and string.format("at %d agent-steps, %.1f s", at.steps, row.process_s) or "not", row.total_process_s))
  end
end
local load1 = uv.loadavg()

local w = io.write
local against = {}
for _, p in ipairs(PEERS) do if p ~= "moonrl" then against[#against + 1] = NAMES[p] end end
w(string.format("cartpole end to end: moonrl train cartpole %s, %d seed%s, %d agent-steps each\n",
  #against > 0 and "against " .. table.concat(against, " and ") or "alone", SEEDS, SEEDS > 1 and "s" or "", STEPS))
w(string.format("  machine    %s, %d cores; load average (1 min) %.1f at the start, %.1f at the end\n",
  require("moonrl.runtime.hardware").cpu_description(), #uv.cpu_info(), load0, load1))
if versions then
  w(string.format("  peers      stable-baselines3 %s, torch %s (its default threads), gymnasium %s, python %s (%s)\n",
    versions.sb3, versions.torch, versions.gymnasium, versions.python, py))
end
w("  reached    the first update by which the last >= 8 ended episodes (whole updates) all returned 500\n\n")
w(string.format("%-22s %4s %12s %18s %10s %20s %12s\n", "", "seed", "reached at", "time to it", "return at",
  "whole run", "agent-steps/s"))
w(string.format("%-22s %4s %12s %18s %10s %20s %12s\n", "", "", "agent-steps", "process / training", "the end",
  "process / training", "training"))
local function line(name, seed, r)
  w(string.format("%-22s %4s %12s %18s %10.1f %20s %12.0f\n", name, seed,
    r.steps and tostring(r.steps) or "not reached",
    r.process_s and string.format("%.1f / %.1f s", r.process_s, r.train_s) or "-", r.final,
    string.format("%.1f / %.1f s", r.total_process_s, r.total_train_s), r.sps))
end
local med = {}
for _, p in ipairs(PEERS) do
  for _, r in ipairs(results[p]) do line(NAMES[p], r.seed, r) end
  local col = function(k)
    local xs = {}
    for _, r in ipairs(results[p]) do if r[k] then xs[#xs + 1] = r[k] end end
    return #xs == #results[p] and median(xs) or nil
  end
  med[p] = { steps = col("steps"), process_s = col("process_s"), train_s = col("train_s"), final = col("final"),
             total_process_s = col("total_process_s"), total_train_s = col("total_train_s"), sps = col("sps") }
  if SEEDS > 1 then line(NAMES[p], "med", med[p]) end
end
if med.moonrl and #PEERS > 1 then
  w("\nmoonrl's advantage (the peer's median / moonrl's median; above 1, moonrl is faster or needs fewer steps)\n")
  for _, p in ipairs(PEERS) do
    if p ~= "moonrl" then
      local m, o = med.moonrl, med[p]
      local function ratio(k) return m[k] and o[k] and string.format("%.2fx", o[k] / m[k]) or "-" end
      w(string.format("  %-22s agent-steps to 500 %s, time to 500 %s (process) %s (training), " ..
        "whole run %s (process) %s (training)\n", NAMES[p], ratio("steps"), ratio("process_s"), ratio("train_s"),
        ratio("total_process_s"), ratio("total_train_s")))
    end
  end
end
w("\n(runs kept in " .. tmp .. ")\n")

-- bench/train_overhead.lua - does `moonrl train` run at the engine's rate?
-- agent-steps/s of build/bench_train (the engine alone: mr_trainer_update in a
-- C loop) against `moonrl train` of the same network, batch, precision, conv
-- path and threads (the host around it: the Lua runtime and its loop, the
-- training thread, metrics.jsonl, TensorBoard, checkpoints), alternating,
-- PAIRS pairs, each in a fresh process.
--
--   moonrl run bench/train_overhead.lua [PAIRS=3] [UPDATES=30] [NET=small] [PRECISION=fp32]
--
-- Both sides: 64 envs x 64 steps, 2 threads (all cores: threads 0 here),
-- cpu.conv onednn. bench_train's rate is the median of its timed updates
-- (after one warm-up update); the run's is the median of its updates' rates by
-- the wall clock from its fourth update on: each update's agent-steps over the
-- time from the previous update's metrics row to its own (wall_time in
-- metrics.jsonl), so the warm-up and start-up are out and everything the host
-- does between updates is in. Median against median: a mean would count a
-- noisy machine's slow updates against one side only. The mean over the same
-- span is printed beside it.
local json = require("moonrl.formats.json")
local util = require("moonrl.util")
local uv = require("luv")

local PAIRS = tonumber(arg[1]) or 3
local UPDATES = tonumber(arg[2]) or 30
local NET = arg[3] or "small"
local PRECISION = arg[4] or "fp32"
local ENVS, ROLLOUT = 64, 64
local NETS = require("moonrl.bench").NETS
assert(NETS[NET], "NET: accepted " .. table.concat({ "small", "ref" }, ", "))

local exe_dir = assert((uv.exepath() or ""):match("^(.*)/[^/]*$"), "cannot find the binary's directory")
local BENCH = exe_dir .. "/bench_train"
assert(io.open(BENCH, "rb"), BENCH .. " is missing: make build")
local tmp = assert(uv.fs_mkdtemp("/tmp/moonrl-train-overhead-XXXXXX"))

local function engine_alone()
  local cmd = string.format("%q --net %s --envs %d --rollout %d --updates %d --threads 0 --cpu-conv onednn " ..
    "--precision %s --json 2>/dev/null", BENCH, NET, ENVS, ROLLOUT, UPDATES, PRECISION)
  local f = assert(io.popen(cmd))
  local out = f:read("*a")
  f:close()
  local row = json.decode(assert(out:match("{.-}\n?$") or out:match("{.*}"), "bench_train said: " .. out))
  return row.sps_median
end

local function with_host(i)
  local dir = string.format("%s/run-%d", tmp, i)
  local net = NETS[NET]
  local sets = { "total_steps=" .. UPDATES * ENVS * ROLLOUT, "seed=1", "threads=0", "precision=" .. PRECISION,
    "env.num_envs=" .. ENVS, "ppo.rollout_steps=" .. ROLLOUT, "cpu.conv=onednn", "log.console=false",
    "policy.conv_channels={" .. table.concat(net.conv_channels, ",") .. "}", "policy.hidden=" .. net.hidden,
    "policy.critic_hidden=" .. net.critic_hidden }
  local cmd = string.format("%q train --hardware cpu --no-eval --dir %q", exe_dir .. "/moonrl", dir)
  for _, s in ipairs(sets) do cmd = cmd .. string.format(" --set %q", s) end
  local f = assert(io.popen(cmd .. " 2>&1"))
  local out = f:read("*a")
  local ok = f:close()
  assert(ok, cmd .. " failed: " .. out)
  local rows = {}
  for line in io.lines(dir .. "/metrics.jsonl") do rows[#rows + 1] = json.decode(line) end
  assert(#rows >= 4, dir .. ": fewer than 4 updates")
  local a, b = rows[3], rows[#rows]
  local sps, wall = {}, {}
  for k = 4, #rows do
    sps[#sps + 1] = rows[k].sps
    -- one update's end to the next's: its call and everything the host did before it
    wall[#wall + 1] = (rows[k].agent_steps - rows[k - 1].agent_steps) / (rows[k].wall_time - rows[k - 1].wall_time)
  end
  local stats = require("moonrl.bench").stats
  -- the median by the wall clock (compared with bench_train's median), the mean over the same
  -- span, and the engine's own rate in that process (mr_metrics.sps: the update's call alone), to
  -- tell the host's gaps between updates from a slower engine
  return stats(wall).median, (b.agent_steps - a.agent_steps) / (b.wall_time - a.wall_time), stats(sps).median
end

print(string.format("moonrl train against the engine alone: %d pairs of %d updates, net %s, %d x %d, %s, " ..
  "cpu.conv onednn, all cores; %s", PAIRS, UPDATES, NET, ENVS, ROLLOUT, PRECISION,
  require("moonrl.runtime.hardware").cpu_description()))
print(string.format("%-6s %14s %14s %8s %14s %16s", "pair", "bench_train", "moonrl train", "ratio", "(its mean)",
  "its engine alone"))
local ratios = {}
for i = 1, PAIRS do
  local a = engine_alone()
  local b, mean, e = with_host(i)
  ratios[i] = b / a
  print(string.format("%-6d %14.0f %14.0f %8.3f %14.0f %16.0f", i, a, b, b / a, mean, e))
end
table.sort(ratios)
print(string.format("median ratio (moonrl train / bench_train): %.3f over %d pairs (agent-steps/s)",
  ratios[math.floor((#ratios + 1) / 2)], #ratios))
util.rm_rf(tmp)

-- bench/env_alone.lua - the environment-alone row (moonrl.bench.env) for any
-- registered environment: agent-steps/s with uniformly random actions (over
-- its action count or its box's bounds; drawn before timing, cycled through
-- 16 batches), after 10 warm-up steps; the median of the repetitions, with
-- the spread.
--
--   moonrl run bench/env_alone.lua [--env foraging|reach|cartpole|pendulum] [--envs 4096] [--reps 5]
--                                  [--steps 100] [--threads 0] [--device cpu|cuda|auto] [--json]
--
-- `moonrl bench env` measures the same row for foraging; `moonrl bench
-- --compare --rows cartpole` runs this script for moonrl's side of the
-- cartpole row (against Gymnasium: bench/reference/cartpole_env.py).
local cmdline = require("moonrl.cli.cmdline")
local bench = require("moonrl.bench")

local CMD = "run bench/env_alone.lua"
local OPTIONS = { env = { "value", "NAME" }, envs = { "value", "N" }, reps = { "value", "R" },
  steps = { "value", "S" }, threads = { "value", "T" }, device = { "value", "cpu|cuda|auto" }, json = { "flag" } }

-- argv -> the options of bench.env; raises the message of a bad command line.
local function parse(argv)
  local p, err = cmdline.parse(CMD, argv, OPTIONS, 0)
  if not p then error(err, 0) end
  local function int(name, default, lo)
    if p[name] == nil then return default end
    local v = tonumber(p[name])
    if not v or v % 1 ~= 0 or v < lo then
      error(string.format("--%s = %s: accepted an integer >= %d", name, tostring(p[name]), lo), 0)
    end
    return v
  end
  local device = p.device or "auto"
  if device ~= "cpu" and device ~= "cuda" and device ~= "auto" then
    error("--device = " .. device .. ": accepted cpu, cuda, auto", 0)
  end
  return { env = bench.check_env(p.env or "foraging"), envs = int("envs", 4096, 1), reps = int("reps", 5, 1),
           env_steps = int("steps", 100, 1), threads = int("threads", 0, 0), device = device, json = p.json,
           help = p.help, net = "ref", rollout = 1 }
end

local ok, o = pcall(parse, arg)
if not ok then
  o = tostring(o)
  return cmdline.usage_error(o:find("^moonrl ") and o or "moonrl " .. CMD .. ": " .. o)
end
if o.help then
  io.write("usage: moonrl run bench/env_alone.lua [--env " .. table.concat(bench.env_names(), "|") ..
    "] [--envs N] [--reps R] [--steps S] [--threads T] [--device cpu|cuda|auto] [--json]\n")
  return
end
if o.device == "auto" then o.device = require("moonrl.engine").cuda_device_count() > 0 and "cuda" or "cpu" end
local r = bench.env(o)
r.device, r.threads = o.device, o.threads
if o.json then
  print(require("moonrl.formats.json").encode(r))
else
  io.write(string.format("env %s, %d envs, %s: %s agent-steps/s (%s .. %s, n=%d)\n", r.env, r.num_envs, o.device,
    bench.fmt_rate(r.rate.median), bench.fmt_rate(r.rate.min), bench.fmt_rate(r.rate.max), r.rate.n))
end

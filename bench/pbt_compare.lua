-- bench/pbt_compare.lua - population-based training against the same budget
-- spent on one default run and on a random search (issue 25's study).
--
--   moonrl run bench/pbt_compare.lua [SEEDS] [BUDGET] [MODE]
--
-- For each of SEEDS seeds (default 3), with BUDGET agent-steps in all (default
-- 524,288, the cpu profile's default run) on the small network of the cpu
-- profile, in MODE of the foraging environment (default ground_truth):
--   default  one run of the experiment as it stands, BUDGET agent-steps;
--   random   4 trials of BUDGET / 4, random points of the space, 2 at once;
--            the best by the training metric is kept;
--   pbt      a population of 4 members of BUDGET / 4 each, from random
--            points of the space, exploit/explore every 4 updates; the best
--            member at the end is kept.
-- Every run trains with 1 thread. Each kept network is evaluated in its mode
-- (`moonrl eval`, 256 environments x 1,024 steps, the same evaluation seed),
-- and the table gives its efficiency and energy/1k with their 95% intervals,
-- then each arm's mean over the seeds with the interval over seeds
-- (Student t). Everything goes under runs/pbt_compare/ (resumable: run it
-- again after an interruption).

local moonrl = require "moonrl"
local uv = require "luv"
local json = require "moonrl.formats.json"

local SEEDS = tonumber(arg[1]) or 3
local BUDGET = tonumber(arg[2]) or 524288
local MODE = arg[3] or "ground_truth"
local ROOT = "runs/pbt_compare"
local PER_UPDATE = 64 * 64   -- the cpu profile: 64 environments x 64 steps
local MEMBER = math.floor(BUDGET / 4 / PER_UPDATE) * PER_UPDATE

local SPACE = {
  ["ppo.lr"] = moonrl.loguniform(3e-5, 3e-3),
  ["ppo.ent_coef"] = moonrl.loguniform(1e-3, 1e-1),
}

local function sets(total, seed)
  return { "hardware=cpu", "threads=1", "env.mode=" .. MODE, "total_steps=" .. total, "seed=" .. seed,
    "log.checkpoint_interval=8", "log.console=false", "eval.num_envs=256", "eval.steps=1024" }
end

local function read_json(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local t = f:read("*a")
  f:close()
  return json.decode(t)
end

-- `moonrl eval DIR` in its mode, once (eval/ is kept: a re-run reads it back)
local function evaluate(dir)
  local bin = require("moonrl.sweep.local_executor").binary()
  local found = io.popen("ls -d " .. dir .. "/eval/update_* 2>/dev/null | tail -1"):read("*l")
  if not found or found == "" then
    assert(os.execute(string.format("%q eval %q --envs 256 --steps 1024 --threads 2 > %q/eval.out 2>&1", bin, dir, dir)) == 0,
      "moonrl eval " .. dir .. " failed: see " .. dir .. "/eval.out")
    found = io.popen("ls -d " .. dir .. "/eval/update_* 2>/dev/null | tail -1"):read("*l")
  end
  local doc = assert(read_json(found .. "/eval.json"), found .. "/eval.json")
  local p, ci = doc.results[1].point, doc.results[1].ci
  local e, en = ci.eff_overall or {}, ci.energy_per_1k or {}
  return { eff = p.eff_overall, eff_lo = e[1], eff_hi = e[2], energy = p.energy_per_1k, energy_lo = en[1], energy_hi = en[2],
    dir = dir }
end

local function default_run(seed)
  local dir = string.format("%s/seed%d/default", ROOT, seed)
  if not read_json(dir .. "/summary.json") or read_json(dir .. "/summary.json").status ~= "done" then
    local resume = uv.fs_stat(dir .. "/checkpoints") ~= nil
    local run = resume and moonrl.train(nil, { resume = dir, console = false }) or
      moonrl.train("foraging", { dir = dir, sets = sets(MEMBER * 4, seed), force = true, console = false })
    local s = run:wait()
    assert(s.status == "done", dir .. ": " .. tostring(s.status))
  end
  return evaluate(dir)
end

local function sweep_run(seed, method)
  local spec = {
    base = "foraging", sets = sets(MEMBER, seed), space = SPACE, seed = seed, dir = string.format("%s/seed%d/%s", ROOT, seed, method),
    metric = "efficiency", mode = "max", smooth = 4, console = false,
  }
  if method == "pbt" then
    spec.method, spec.population = "pbt", 4
    spec.pbt = { interval = 4, fraction = 0.25, explore = { ["ppo.lr"] = "perturb", ["ppo.ent_coef"] = "perturb" } }
  else
    spec.method, spec.trials, spec.parallel = "random", 4, 2
  end
  local s = moonrl.sweep(spec):wait()
  assert(s.best, spec.dir .. ": no result")
  return evaluate(s.best.dir)
end

local function mean_ci(xs)
  local n, m = #xs, 0
  for _, x in ipairs(xs) do m = m + x end
  m = m / n
  if n < 2 then return m, 0 end
  local v = 0
  for _, x in ipairs(xs) do v = v + (x - m) ^ 2 end
  local t = ({ 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262 })[n - 1] or 1.96
  return m, t * math.sqrt(v / (n - 1) / n)
end

local rows, arms = {}, { default = {}, random = {}, pbt = {} }
for seed = 1, SEEDS do
  for _, arm in ipairs({ "default", "random", "pbt" }) do
    local t0 = uv.hrtime()
    local r = arm == "default" and default_run(seed) or sweep_run(seed, arm)
    r.arm, r.seed, r.seconds = arm, seed, (uv.hrtime() - t0) / 1e9
    rows[#rows + 1] = r
    table.insert(arms[arm], r)
    io.stderr:write(string.format("seed %d %-8s efficiency %.3f [%.3f, %.3f]  energy/1k %+.1f  (%s, %.0f s)\n", seed, arm,
      r.eff, r.eff_lo or 0, r.eff_hi or 0, r.energy, r.dir, r.seconds))
  end
end

print(string.format("## %s, %d seeds, %s agent-steps per arm (pbt/random: 4 x %d)", MODE, SEEDS, MEMBER * 4, MEMBER))
print("| seed | arm | efficiency [95%] | energy/1k [95%] | kept |")
print("|---|---|---|---|---|")
for _, r in ipairs(rows) do
  print(string.format("| %d | %s | %.3f [%.3f, %.3f] | %+.1f [%+.1f, %+.1f] | %s |", r.seed, r.arm, r.eff, r.eff_lo or 0,
    r.eff_hi or 0, r.energy, r.energy_lo or 0, r.energy_hi or 0, r.dir))
end
print("")
print("| arm | efficiency, mean over seeds +- 95% | energy/1k, mean +- 95% |")
print("|---|---|---|")
for _, arm in ipairs({ "default", "random", "pbt" }) do
  local e, en = {}, {}
  for _, r in ipairs(arms[arm]) do e[#e + 1] = r.eff en[#en + 1] = r.energy end
  local m, c = mean_ci(e)
  local m2, c2 = mean_ci(en)
  print(string.format("| %s | %.3f +- %.3f | %+.1f +- %.1f |", arm, m, c, m2, c2))
end

-- bench/tpe_noisy.lua - TPE's proposals on a cheap stand-in for a sweep of
-- short, noisy trainings (no training: a Lua function of the point), to see
-- what a sampler can gain in the best of 8 trials before paying for real
-- ones (bench/sweep_compare.lua).
--
--   moonrl run bench/tpe_noisy.lua [SEEDS]     (default 400; seconds)
--
-- The objective mimics reach16's trials in bench/sweep_compare.lua (its
-- records: the trial's gradient steps, updates x epochs x minibatches, and
-- its learning rate decided whether it learned at all): over reach's
-- default space (moonrl.sweep.spaces), a trial succeeds with odds growing
-- with log2 of its gradient steps, the log of its learning rate and a small
-- entropy bonus, and then scores 0.5 + 0.3 z plus noise; else the floor,
-- -1.2. Each arm runs 8 trials per seed, the seeds' random points shared
-- (TPE's startup trials are random search's), and prints the mean best of
-- 8 and the mean of trials 4 to 8 (where the model proposes), then each
-- TPE arm's paired difference from random search with its spread.

local space = require("moonrl.sweep.space")
local tpe = require("moonrl.sweep.tpe")
local util = require("moonrl.util")

local SEEDS = tonumber(arg[1]) or 400
local SP = require("moonrl.sweep.spaces").of("reach")
local STEPS = 24576   -- a trial of reach16's B / 8

local function objective(p, rng)
  local gs = STEPS / (p["env.num_envs"] * p["ppo.rollout_steps"]) * p["ppo.epochs"] * p["ppo.minibatches"]
  local z = 1.2 * (math.log(gs) / math.log(2) - 8.5) + 2.0 * (math.log10(p["ppo.lr"]) + 3.0) -
    0.4 * (math.log10(p["ppo.ent_coef"]) + 2)
  if rng() < 1 / (1 + math.exp(-z)) then return 0.5 + 0.3 * z + 0.4 * (rng() - 0.5) end
  return -1.2
end

local function run(seed, opts)
  local history, best = {}, -math.huge
  for i = 1, 8 do
    local o = util.deepcopy(opts)
    o.sample = function() return space.point(SP, "random", seed, i) end
    local p = tpe.suggest(SP, history, "max", space.rng(seed, i, "tpe"), o)
    local v = objective(p, space.rng(seed, i, "noise"))
    history[i] = { params = p, value = v, status = "done", trial = i }
    best = math.max(best, v)
  end
  return best, history
end

local ARMS = {
  { "random", { startup = 8 } },
  { "tpe startup 3", { startup = 3 } },
  { "tpe startup 4", { startup = 4 } },
  { "multivariate startup 3", { startup = 3, multivariate = true } },
  { "multivariate startup 4", { startup = 4, multivariate = true } },
}
local best_of = {}
print(string.format("%d seeds, 8 trials each", SEEDS))
for a, arm in ipairs(ARMS) do
  local total, late = 0, 0
  best_of[a] = {}
  for seed = 1, SEEDS do
    local b, h = run(seed, arm[2])
    best_of[a][seed], total = b, total + b
    for i = 4, 8 do late = late + h[i].value / 5 end
  end
  print(string.format("%-24s best of 8 %.3f   trials 4-8 mean %.3f", arm[1], total / SEEDS, late / SEEDS))
end
for a = 2, #ARMS do
  local d = {}
  for seed = 1, SEEDS do d[seed] = best_of[a][seed] - best_of[1][seed] end
  local m, lo, hi = require("moonrl.eval.stats").mean_interval(d)
  local sd = 0
  for _, x in ipairs(d) do sd = sd + (x - m) ^ 2 / (SEEDS - 1) end
  print(string.format("%-24s - random: %+.3f [%+.3f, %+.3f] (95%%), sd %.3f over seeds", ARMS[a][1], m, lo, hi, math.sqrt(sd)))
end

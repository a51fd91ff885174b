-- moonrl.sweep.spaces - the default search space of each experiment moonrl
-- ships (configs/default.lua, configs/experiments/*.lua): what
-- `moonrl.sweep{ base = "<name>" }` without `space =` searches, and what
-- `moonrl sweep <name>` runs. One table, keyed by the experiment's name.
--
-- The ranges (docs/sweeps.md, "Default spaces"), from PPO practice
-- (Andrychowicz et al. 2021, "What matters in on-policy RL"; Huang et al.
-- 2022's implementation details; rl-baselines3-zoo's tuned settings) around
-- each experiment's own values:
--   ppo.lr          log-uniform over about a decade that holds the
--                   experiment's value near its middle (a number: the sweep
--                   replaces a schedule by that constant)
--   ppo.ent_coef    log-uniform 1e-3 .. 0.1 where the experiment explores
--                   with a bonus; uniform 0 .. 0.01 where it uses none
--                   (cartpole, pendulum, dials: log-uniform cannot reach 0)
--   ppo.clip        uniform 0.1 .. 0.3 (0.2 the usual value)
--   ppo.gae_lambda  uniform 0.9 .. 0.99 (0.8 .. 0.98 for cartpole, tuned at 0.8)
--   ppo.epochs      integers around the experiment's (2 .. 8 at 4; 5 .. 20 at 20)
--   ppo.minibatches a choice of divisors of the batch (num_envs x rollout_steps
--                   of the experiment, whatever hardware profile resolves:
--                   the foraging batches are multiples of 64 x 64)
--   env.num_envs, ppo.rollout_steps
--                   the batch's shape, a choice of the experiment's value, a
--                   half and a quarter of it (each divisible by the minibatch
--                   counts): a trial of a sweep trains on a share of the
--                   budget, and what it lacks most is updates (dials at a
--                   quarter of 32,768 agent-steps: about 12 at 16 x 64,
--                   about 30 at 4 x 16, against 32.6 for the whole budget
--                   at 16 x 64; docs/benchmarks-log.md). Not for foraging
--                   and the built-in default, whose batch the hardware
--                   profile sets (64 x 64 on cpu, thousands of
--                   environments on a GPU)
-- ppo.lr, ppo.ent_coef and ppo.clip are hot: PBT can explore them
-- (pbt.explore = "pb2" explores every hot numeric key of the space).
--
--   spaces.of(name) -> space table (fresh) | nil     name: an experiment's name
--                                                    ("foraging", "configs/experiments/reach.lua", ...)
--   spaces.name_of(name) -> "reach" for "configs/experiments/reach.lua", ...
--   spaces.metric(name) -> the training metric a sweep of it ranks by by default
--   spaces.names() -> the names with a default space, sorted
--   spaces.describe(name) -> lines "key  distribution" for docs and --help

local space = require("moonrl.sweep.space")
local util = require("moonrl.util")

local spaces = {}

local U, L, R, C = space.uniform, space.loguniform, space.randint, space.choice

local function foraging_like(lr_lo, lr_hi)
  return {
    ["ppo.lr"] = L(lr_lo, lr_hi),
    ["ppo.ent_coef"] = L(1e-3, 0.1),
    ["ppo.clip"] = U(0.1, 0.3),
    ["ppo.gae_lambda"] = U(0.9, 0.99),
    ["ppo.epochs"] = R(2, 8),
    ["ppo.minibatches"] = C{ 1, 2, 4 },
  }
end

-- the batch's shape: the experiment's num_envs and rollout_steps, a half and a quarter of each
local function with_batch(t, num_envs, rollout_steps)
  t["env.num_envs"] = C{ num_envs / 4, num_envs / 2, num_envs }
  t["ppo.rollout_steps"] = C{ rollout_steps / 4, rollout_steps / 2, rollout_steps }
  return t
end

local function cartpole()
  return with_batch({
    ["ppo.lr"] = L(3e-4, 3e-3),           -- the experiment: linear 1e-3 -> 0
    ["ppo.ent_coef"] = U(0, 0.01),        -- the experiment: 0
    ["ppo.clip"] = U(0.1, 0.3),
    ["ppo.gae_lambda"] = U(0.8, 0.98),    -- the experiment: 0.8
    ["ppo.epochs"] = R(5, 20),            -- the experiment: 20
    ["ppo.minibatches"] = C{ 1, 2, 4 },   -- of 8 x 32 = 256 (of 2 x 8 = 16 at the least)
  }, 8, 32)
end

local TABLE = {
  -- foraging (ground_truth; lr 3e-4, ent_coef 0.01, 4 epochs, 1 minibatch)
  foraging = function() return foraging_like(1e-4, 1e-3) end,
  -- the built-in default: foraging with lr linear 1e-3 -> 3e-4
  default = function() return foraging_like(2e-4, 2e-3) end,
  -- reach and snake: lr 1e-3, 64 envs x 32 steps
  reach = function() return with_batch(foraging_like(3e-4, 3e-3), 64, 32) end,
  snake = function() return with_batch(foraging_like(3e-4, 3e-3), 64, 32) end,
  -- catch: lr 2e-3, ent_coef 0.01, 64 envs x 32 steps
  catch = function() return with_batch(foraging_like(6e-4, 6e-3), 64, 32) end,
  cartpole = cartpole,
  cartpole_lua = cartpole,
  pendulum = function()
    return with_batch({
      ["ppo.lr"] = L(3e-4, 3e-3),         -- the experiment: 1e-3
      ["ppo.ent_coef"] = U(0, 0.01),
      ["ppo.clip"] = U(0.1, 0.3),
      ["ppo.gae_lambda"] = U(0.9, 0.99),
      ["ppo.epochs"] = R(5, 15),          -- the experiment: 10
      ["ppo.minibatches"] = C{ 8, 16, 32 },   -- of 4 x 1024 = 4096 (1 x 256 at the least); the experiment: 16
    }, 4, 1024)
  end,
  dials = function()
    return with_batch({
      ["ppo.lr"] = L(3e-4, 3e-3),         -- the experiment: linear 1e-3 -> 1e-4
      ["ppo.ent_coef"] = U(0, 0.02),      -- the experiment: linear 0.01 -> 0
      ["ppo.clip"] = U(0.1, 0.3),
      ["ppo.gae_lambda"] = U(0.8, 0.98),  -- the experiment: 0.9
      ["ppo.epochs"] = R(4, 12),          -- the experiment: 10
      ["ppo.minibatches"] = C{ 2, 4, 8 }, -- of 16 x 64 = 1024 (4 x 16 at the least); the experiment: 4
    }, 16, 64)
  end,
}

function spaces.name_of(name)
  if type(name) ~= "string" then return nil end
  return (name:gsub("%.lua$", ""):gsub("^configs/", ""):gsub("^experiments/", ""))
end

function spaces.of(name)
  local f = TABLE[spaces.name_of(name) or ""]
  return f and f() or nil
end

-- foraging reports its efficiency; the episodic environments their return
function spaces.metric(name)
  local n = spaces.name_of(name)
  if n == "foraging" or n == "default" then return "efficiency" end
  return "episode_return_mean"
end

function spaces.names() return util.sorted_keys(TABLE) end

function spaces.describe(name)
  local sp = spaces.of(name)
  if not sp then return nil end
  local lines = {}
  for _, k in ipairs(util.sorted_keys(sp)) do lines[#lines + 1] = string.format("%-17s %s", k, space.describe(sp[k])) end
  return lines
end

return spaces

-- The pieces behind PBT's measured exploit and PB2's explore, without
-- training: the Gaussian process (moonrl.sweep.gp) against numpy float64
-- (spec/gp_reference.py prints the reference numbers held here), the
-- one-sided Welch test PBT copies on (pbt.measured_better, against a
-- hand-checked case), PB2's choice (moonrl.sweep.pb2) on seeded fake
-- objectives, and the default search spaces of the shipped experiments
-- (moonrl.sweep.spaces): every point they draw is a valid config.

local gp = require("moonrl.sweep.gp")
local pb2 = require("moonrl.sweep.pb2")
local stats = require("moonrl.eval.stats")
local space = require("moonrl.sweep.space")
local spaces = require("moonrl.sweep.spaces")

local X = { { 0, 0.1, 0.9 }, { 0, 0.4, 0.2 }, { 1, 0.8, 0.5 }, { 1, 0.3, 0.3 }, { 2, 0.6, 0.7 }, { 3, 0.2, 0.1 } }
local Y = { 0.5, -1.2, 0.3, 1.1, -0.4, 0.8 }
local THETA = { variance = 1.3, lengthscale = 0.2, epsilon = 0.1, noise = 0.05 }
-- numpy (spec/gp_reference.py)
local L_REF = {
  { 1.161895003862225, 0, 0, 0, 0, 0 },
  { 0.06156338209180502, 1.1602628796895205, 0, 0, 0, 0 },
  { 0.04115671055961668, 0.3023532598633629, 1.1211104456858432, 0, 0, 0 },
  { 0.14365103485405345, 0.9541645824901944, 0.00939639670410869, 0.6471831560197249, 0, 0 },
  { 0.23620657301861206, 0.22400575430970604, 0.6683083802409399, 0.15357884857586526, 0.8796620504880188, 0 },
  { 0.03704103950365502, 0.7430703326392858, -0.12424657958381297, 0.30599067225727117, -0.05406541981893641,
    0.8273354026493116 },
}
local LOG_ML_REF = -12.00466608979148
local PREDICT_REF = {
  { p = { 3, 0.5, 0.5 }, mean = 0.13035447690537227, var = 0.3655579192890879 },
  { p = { 4, 0.1, 0.9 }, mean = 0.41118765139045593, var = 0.4741784438941645 },
  { p = { 2, 0.95, 0.05 }, mean = -0.2536549940088174, var = 1.1255644433335232 },
}

local function close(a, b, tol, what)
  assert(math.abs(a - b) <= tol * math.max(1, math.abs(b)), string.format("%s: %.17g against %.17g", what, a, b))
end

describe("moonrl.sweep.gp (PB2's Gaussian process)", function()
  it("factors, fits and predicts as numpy does in float64 (the time-varying kernel)", function()
    local m = assert(gp.fit(X, Y, THETA))
    for i = 1, 6 do for j = 1, 6 do close(m.L[i][j], L_REF[i][j], 1e-12, "L[" .. i .. "][" .. j .. "]") end end
    close(m.log_ml, LOG_ML_REF, 1e-12, "log marginal likelihood")
    for _, r in ipairs(PREDICT_REF) do
      local mean, var = m:predict(r.p)
      close(mean, r.mean, 1e-11, "mean")
      close(var, r.var, 1e-11, "variance")
    end
  end)

  it("refuses a matrix that is not positive definite, and picks the likelier kernel from a grid", function()
    local L, err = gp.cholesky({ { 1, 2 }, { 2, 1 } }, 2)
    assert.is_nil(L)
    assert.truthy(err:find("not positive definite", 1, true))
    -- data from a smooth function of x: a long lengthscale explains it better than a tiny one
    local Xs, ys = {}, {}
    for i = 0, 9 do Xs[#Xs + 1] = { 0, i / 9 } ys[#ys + 1] = math.sin(3 * i / 9) end
    local grid = { { variance = 1, lengthscale = 0.001, epsilon = 0, noise = 0.01 },
      { variance = 1, lengthscale = 0.5, epsilon = 0, noise = 0.01 } }
    assert.equal(0.5, gp.fit_best(Xs, ys, grid).theta.lengthscale)
  end)
end)

-- measured_better(a, b, mode, alpha) is stats.welch_greater's p < alpha (a, b swapped for "min")
local function measured_better(a, b, mode, alpha)
  local t, _, p
  if mode == "min" then t, _, p = stats.welch_greater(b, a) else t, _, p = stats.welch_greater(a, b) end
  if not t then return false end
  return p < alpha, p
end

describe("stats.welch_greater (PBT's test before an exploit)", function()
  it("matches a hand-checked one-sided Welch test", function()
    local t, df = stats.welch_greater({ 1, 2, 3, 4, 5 }, { 4, 5, 6, 7, 8 })
    close(t, 3, 1e-12, "t")
    close(df, 8, 1e-12, "df")
    -- means 3 and 6, variances 2.5 and 2.5, n = 5 each: t = 3 / sqrt(0.5 + 0.5) = 3,
    -- df = 1 / (2 * 0.25 / 4) = 8; P(T_8 > 3) = 0.00854 (tables: t_.99,8 = 2.896, t_.995,8 = 3.355)
    local ok, p = measured_better({ 1, 2, 3, 4, 5 }, { 4, 5, 6, 7, 8 }, "max", 0.05)
    assert.is_true(ok)
    close(p, 0.008536, 1e-3, "p")
    assert.is_false((measured_better({ 4, 5, 6, 7, 8 }, { 1, 2, 3, 4, 5 }, "max", 0.05)))
    assert.is_true((measured_better({ 4, 5, 6, 7, 8 }, { 1, 2, 3, 4, 5 }, "min", 0.05)))
    -- at alpha 0.005 the same difference is not enough
    assert.is_false((measured_better({ 1, 2, 3, 4, 5 }, { 4, 5, 6, 7, 8 }, "max", 0.005)))
    -- a small difference in noisy values, and too few values, are no reason to copy
    assert.is_false((measured_better({ 0.2, 0.9, 0.1, 0.8 }, { 0.3, 1.0, 0.2, 0.85 }, "max", 0.05)))
    assert.is_false((measured_better({ 0.1 }, { 0.9, 0.95 }, "max", 0.05)))
  end)
end)

describe("moonrl.sweep.pb2 (the GP-UCB explore)", function()
  local function rng_of(seed) return space.rng(seed, 0, "pb2 spec") end

  it("maps keys to [0, 1] and back (log scale for loguniform)", function()
    local dims = assert(pb2.dims({ ["ppo.lr"] = space.loguniform(1e-4, 1e-2), ["ppo.clip"] = space.uniform(0.1, 0.3) },
      { "ppo.clip", "ppo.lr" }))
    close(pb2.to_unit(dims[2], 1e-3), 0.5, 1e-12, "lr 1e-3")
    close(pb2.from_unit(dims[2], 0.5), 1e-3, 1e-12, "u 0.5")
    close(pb2.to_unit(dims[1], 0.15), 0.25, 1e-12, "clip")
    assert.equal(0, pb2.to_unit(dims[1], 0.01))   -- clamped
    assert.is_nil((pb2.dims({ ["ppo.lr"] = space.choice{ 1, 2 } }, { "ppo.lr" })))
  end)

  it("goes where a seeded fake objective rewards it, over 20 seeds", function()
    -- the change of the metric over an interval: -(x - 0.7)^2 plus noise, members at random points
    local hits = 0
    for seed = 1, 20 do
      local rng, data = rng_of(seed), {}
      for t = 0, 5 do
        for _ = 1, 4 do
          local x = rng()
          data[#data + 1] = { t = t, x = { x }, y = -(x - 0.7) ^ 2 + 0.02 * (rng() - 0.5) }
        end
      end
      local x = pb2.select(data, {}, 6, 1, rng)
      if math.abs(x[1] - 0.7) < 0.15 then hits = hits + 1 end
    end
    assert.is_true(hits >= 18, hits .. " of 20 seeds chose within 0.15 of the best x")
  end)

  it("forgets old data (the time-varying kernel) and spreads members out (pending points)", function()
    -- the best x moved: at t 0..3 it was 0.2, at t 4..7 it is 0.8
    local rng, data = rng_of(7), {}
    for t = 0, 7 do
      local best = t < 4 and 0.2 or 0.8
      for _ = 1, 4 do
        local x = rng()
        data[#data + 1] = { t = t, x = { x }, y = -(x - best) ^ 2 }
      end
    end
    local x = pb2.select(data, {}, 8, 1, rng)
    assert.is_true(math.abs(x[1] - 0.8) < 0.15, "chose " .. x[1])
    -- flat data in one corner: UCB goes where it is unsure, and a member already there moves the choice
    local flat = { { t = 0, x = { 0.05, 0.05 }, y = 0 }, { t = 0, x = { 0.1, 0.1 }, y = 0 }, { t = 0, x = { 0.08, 0.02 }, y = 0.01 } }
    local a = pb2.select(flat, {}, 1, 2, rng_of(3))
    local b = pb2.select(flat, { a }, 1, 2, rng_of(3))
    local d = math.sqrt((a[1] - b[1]) ^ 2 + (a[2] - b[2]) ^ 2)
    assert.is_true(d > 0.2, string.format("pending at (%.2f, %.2f); chose (%.2f, %.2f)", a[1], a[2], b[1], b[2]))
    -- no model with fewer than 2 points: a uniform draw
    local u = pb2.select({}, {}, 0, 2, rng_of(1))
    assert.equal(2, #u)
  end)
end)

describe("moonrl.sweep.spaces (a default space per shipped experiment)", function()
  local config = require("moonrl.config")
  it("has one for every shipped experiment, and every point it draws is a valid config", function()
    for _, name in ipairs(require("moonrl.config.load").experiments()) do
      local sp = spaces.of(name)
      assert.truthy(sp, name .. " has no default space")
      local cfg = assert(config.resolve({ file = name, hardware = "cpu", detect = function() return { gpus = 0, cores = 2, memory = 8e9 } end }))
      for i = 1, 20 do
        local point = space.point(sp, "random", 1, i)
        local c = require("moonrl.util").deepcopy(cfg)
        for k, v in pairs(point) do assert(config.set(c, k, v)) end
        assert(config.validate(c))
        assert.equal(0, (c.env.num_envs * c.ppo.rollout_steps) % c.ppo.minibatches,
          name .. ": minibatches " .. c.ppo.minibatches .. " do not divide the batch")
      end
      -- the experiment's own batch and minibatches are choices of its space (TPE starts from them)
      for k, d in pairs(sp) do
        if d.kind == "choice" then
          local own = config.get(cfg, k)
          local found = false
          for _, v in ipairs(d.values) do found = found or v == own end
          assert.is_true(found, name .. ": " .. k .. " = " .. tostring(own) .. " is not among the space's choices")
        end
      end
      -- the batch's shape, where the experiment sets it: a quarter, a half and its own
      if sp["env.num_envs"] then
        assert.same({ cfg.env.num_envs / 4, cfg.env.num_envs / 2, cfg.env.num_envs }, sp["env.num_envs"].values, name)
        assert.same({ cfg.ppo.rollout_steps / 4, cfg.ppo.rollout_steps / 2, cfg.ppo.rollout_steps },
          sp["ppo.rollout_steps"].values, name)
      end
    end
    for _, name in ipairs({ "cartpole", "dials", "pendulum", "reach", "snake", "catch" }) do
      assert.truthy(spaces.of(name)["env.num_envs"], name .. ": no batch shape in its space")
    end
    assert.is_nil(spaces.of("no_such_experiment"))
    assert.equal("reach", spaces.name_of("configs/experiments/reach.lua"))
    assert.equal("efficiency", spaces.metric("foraging"))
    assert.equal("episode_return_mean", spaces.metric("cartpole"))
  end)
end)

-- cartpole in Lua: Gymnasium's CartPole-v1, the same numbers as the C one
-- (src/engine/envs/cartpole.h), so `env = { lua = "cartpole" }` trains
-- exactly what `env = { name = "cartpole" }` does (spec/lua_env_spec.lua
-- replays both with the same actions and requires the same bytes).
--
-- The state is four doubles per instance; every product is written in the
-- order the C code rounds it (LuaJIT fuses no multiply-add on x86-64), sin
-- and cos are the C library's. A new episode draws each component uniform
-- in [-0.05, 0.05) keyed as the C cartpole keys it: purpose 9 (rng.h's
-- MR_RNG_CARTPOLE_RESET), counter s.resets[i] (the episodes the instance
-- started before), component k. An episode ends when |x| > 2.4 or
-- |theta| > 12 degrees, and truncates at 500 steps (max_steps; a smaller
-- env.max_episode_steps lowers it). The reward is 1 every step.
--
-- Its step is written twice: step(s, i, action), one instance a call, the
-- plain form, and step_slice(s, i0, i1, action), a thread's whole slice in
-- one call with sin and cos of all its angles at once (s.sincos, the C
-- library's bits) and no branch on the action. When a file has both,
-- step_slice runs (about 2x faster here: BENCHMARKS.md); spec/lua_env_spec.lua
-- checks that each steps the C cartpole's bytes.
--
-- This file is also the pattern for one's own (docs/environments.md, "An
-- environment in Lua"): declare the spaces and the fields, write reset and
-- step over s's arrays, and train it with `env = { lua = "my_env.lua" }`.

local GRAVITY, MASSCART, MASSPOLE = 9.8, 1.0, 0.1
local TOTAL_MASS = MASSPOLE + MASSCART
local LENGTH = 0.5                         -- half the pole's length
local POLEMASS_LENGTH = MASSPOLE * LENGTH
local FORCE, TAU = 10.0, 0.02
local X_LIMIT = 2.4
local THETA_LIMIT = 12 * 2 * 3.141592653589793 / 360
local RESET_HIGH = 0.05
local PURPOSE = 9                          -- the C cartpole's reset draws
local sin, cos, band, lshift = math.sin, math.cos, bit.band, bit.lshift

local function observe(s, i)
  local o = i * 4
  s.obs[o], s.obs[o + 1], s.obs[o + 2], s.obs[o + 3] = s.x[i], s.x_dot[i], s.theta[i], s.theta_dot[i]
end

return {
  observation = { floats = 4 },            -- x, x_dot, theta, theta_dot
  action = { discrete = 2 },               -- 0 push left, 1 push right
  max_steps = 500,                         -- CartPole-v1's TimeLimit
  success = "truncated",                   -- the pole held to the limit
  fields = { x = "double", x_dot = "double", theta = "double", theta_dot = "double" },

  reset = function(s, i)
    local c = s.resets[i]
    s.x[i] = RESET_HIGH * (2 * s.uniform(i, c, 0, PURPOSE) - 1)
    s.x_dot[i] = RESET_HIGH * (2 * s.uniform(i, c, 1, PURPOSE) - 1)
    s.theta[i] = RESET_HIGH * (2 * s.uniform(i, c, 2, PURPOSE) - 1)
    s.theta_dot[i] = RESET_HIGH * (2 * s.uniform(i, c, 3, PURPOSE) - 1)
    observe(s, i)
  end,

  step = function(s, i, action)
    local x, x_dot, theta, theta_dot = s.x[i], s.x_dot[i], s.theta[i], s.theta_dot[i]
    local force = band(action, 1) == 1 and FORCE or -FORCE
    local costheta, sintheta = cos(theta), sin(theta)
    local temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
    local thetaacc = (GRAVITY * sintheta - costheta * temp) /
      (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS))
    local xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x, x_dot = x + TAU * x_dot, x_dot + TAU * xacc
    theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * thetaacc
    s.x[i], s.x_dot[i], s.theta[i], s.theta_dot[i] = x, x_dot, theta, theta_dot
    observe(s, i)
    return 1.0, x < -X_LIMIT or x > X_LIMIT or theta < -THETA_LIMIT or theta > THETA_LIMIT
  end,

  step_slice = function(s, i0, i1, action)
    local X, XD, TH, THD = s.x, s.x_dot, s.theta, s.theta_dot
    local obs, reward, terminated = s.obs, s.reward, s.terminated
    local SIN, COS = s.sincos(TH, i0, i1)       -- sin and cos of theta[i0 .. i1-1]
    for i = i0, i1 - 1 do
      local x, x_dot, theta, theta_dot = X[i], XD[i], TH[i], THD[i]
      local force = (2 * band(action[i], 1) - 1) * FORCE
      local costheta, sintheta = COS[i], SIN[i]
      local temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
      local thetaacc = (GRAVITY * sintheta - costheta * temp) /
        (LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS))
      local xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
      x, x_dot = x + TAU * x_dot, x_dot + TAU * xacc
      theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * thetaacc
      X[i], XD[i], TH[i], THD[i] = x, x_dot, theta, theta_dot
      local o = lshift(i, 2)                    -- 4 i, in integers (i * 4 would go through a double)
      obs[o], obs[o + 1], obs[o + 2], obs[o + 3] = x, x_dot, theta, theta_dot
      reward[i] = 1
      terminated[i] = (x < -X_LIMIT or x > X_LIMIT or theta < -THETA_LIMIT or theta > THETA_LIMIT) and 1 or 0
    end
  end,
}

-- catch in Lua: the C catch (src/engine/envs/catch.h) on an 8 x 8 board,
-- the same rules and draws, so `env = { lua = "catch" }` trains exactly
-- what `env = { name = "catch", grid_size = 8 }` does
-- (spec/lua_env_spec.lua trains both and requires the same metrics). The
-- pattern for an environment whose observation is an image: declare
-- observation = { image = { C, V, V } } and write s.obs as C x V x V
-- floats, channels first, at i * s.obs_size; the CNN reads it.
--
-- The ball starts in row 0 at a random column with a drift of -1, 0 or +1
-- columns a step, and bounces off the side walls; the paddle, in the
-- bottom row, moves left (0), stays (1) or moves right (2). When the ball
-- reaches the bottom row the episode ends: +1 under the paddle (counted
-- `caught`), -1 else. Channel 0 is the ball (1.0, and 0.5 where it was a
-- step ago), channel 1 the paddle. A new episode's draws are keyed as the
-- C catch keys them: purpose 2 (rng.h's MR_RNG_PLACE), counter s.resets[i],
-- index 0 the ball's column, 1 its drift, 2 the paddle's column.

local N = 8
local NN = N * N
local PLACE = 2

local function draw(s, i)
  local o, bx, by = i * s.obs_size, s.ball_x[i], s.ball_y[i]
  for k = o, o + 2 * NN - 1 do s.obs[k] = 0 end
  if s.prev_y[i] >= 0 then s.obs[o + s.prev_y[i] * N + s.prev_x[i]] = 0.5 end
  s.obs[o + by * N + bx] = 1.0
  s.obs[o + NN + (N - 1) * N + s.paddle[i]] = 1.0
end

return {
  observation = { image = { 2, N, N } },
  action = { discrete = 3 },
  counters = { "caught" },
  success = "caught",
  fields = { ball_x = "int32", ball_y = "int32", dx = "int32", prev_x = "int32", prev_y = "int32",
             paddle = "int32" },

  reset = function(s, i)
    local c = s.resets[i]
    s.ball_x[i] = s.below(i, c, 0, N, PLACE)
    s.ball_y[i] = 0
    s.dx[i] = s.below(i, c, 1, 3, PLACE) - 1
    s.paddle[i] = s.below(i, c, 2, N, PLACE)
    s.prev_x[i], s.prev_y[i] = -1, -1
    draw(s, i)
  end,

  step = function(s, i, action)
    local a = action % 3
    local p = s.paddle[i] + (a == 0 and -1 or a == 2 and 1 or 0)
    s.paddle[i] = p < 0 and 0 or p > N - 1 and N - 1 or p
    s.prev_x[i], s.prev_y[i] = s.ball_x[i], s.ball_y[i]
    local x = s.ball_x[i] + s.dx[i]
    if x < 0 or x > N - 1 then   -- a bounce off a side wall
      s.dx[i] = -s.dx[i]
      x = x < 0 and 1 or N - 2
    end
    s.ball_x[i] = x
    s.ball_y[i] = s.ball_y[i] + 1
    draw(s, i)
    if s.ball_y[i] == N - 1 then
      if x == s.paddle[i] then
        s.caught[i] = s.caught[i] + 1
        return 1.0, true
      end
      return -1.0, true
    end
    return 0.0, false
  end,
}

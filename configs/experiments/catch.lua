-- catch (envs/catch.h, docs/environments.md): move the paddle under the
-- falling ball, which drifts sideways and bounces off the walls. The
-- observation is a float image, 2 x 8 x 8: the ball (1.0, and 0.5 where it
-- was a step ago: the drift), and the paddle. 3 moves; +1 a catch, -1 a
-- miss, an episode every 7 steps. A random policy catches about 1 ball in 8
-- (return -0.75); `moonrl train catch` catches 98% of them after its
-- 200k agent-steps (measured: moonrl eval success 98.3% [98.1, 98.4]).
return {
  name = "catch",
  total_steps = 200000,
  device = "cpu",
  env = { name = "catch", num_envs = 64, grid_size = 8 },
  policy = { conv_channels = { 16, 16 }, hidden = 64, critic_hidden = 64 },
  ppo = { rollout_steps = 32, lr = 2e-3, ent_coef = 0.01 },
  log = { checkpoint_interval = 50 },
}

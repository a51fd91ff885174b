-- snake (envs/snake.h, docs/environments.md): eat, grow, do not crash, on a
-- 6 x 6 walled board seen through a 7 x 7 view around the head: 4 one-hot
-- channels (food, body, tail, wall), 4 moves, +1 a food item, -1 a crash.
-- `moonrl train snake` learns it in under a minute on two cores.
return {
  name = "snake",
  total_steps = 400000,
  env = { name = "snake", num_envs = 64, grid_size = 6, view_range = 3, max_episode_steps = 200 },
  policy = { conv_channels = { 16, 16 }, hidden = 64, critic_hidden = 64 },
  ppo = { rollout_steps = 32, lr = 1e-3 },
  log = { checkpoint_interval = 50 },
}

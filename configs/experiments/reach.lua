-- The second environment, reach (docs/environments.md): walk to the goal on
-- an 8 x 8 torus, keep out of the 2 to 4 pits, 4 actions, a 5 x 5 view.
-- `moonrl train reach` learns it in about 20 s on two cores (the return per
-- 64-step episode goes from -0.9, a random walk's, past 8).
return {
  name = "reach",
  total_steps = 400000,
  env = { name = "reach", num_envs = 64, grid_size = 8, view_range = 2, density_min = 2, density_max = 4,
          max_episode_steps = 64 },
  policy = { conv_channels = { 16, 16 }, hidden = 64, critic_hidden = 64 },
  ppo = { rollout_steps = 32, lr = 1e-3 },
  log = { checkpoint_interval = 50 },
}

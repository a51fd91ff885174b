-- Hardware profile: continuous integration (no GPU, 2 cores, minutes to spare).
-- The cpu network on a tiny budget: 32 envs x 32 steps = 1,024 samples per
-- update, 32 updates. Enough to exercise every code path, not to learn much.
return {
  device = "cpu",
  threads = 2,
  total_steps = 32768,
  env = { num_envs = 32 },
  policy = { conv_channels = { 16, 32 }, hidden = 128, critic_hidden = 128 },
  ppo = { rollout_steps = 32 },
  log = { tensorboard = true, csv = true, checkpoint_interval = 16 },
  eval = { num_envs = 64, steps = 256 },
}

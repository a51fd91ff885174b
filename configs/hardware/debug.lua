-- Hardware profile: debugging. One thread (reproducible and easy to step
-- through), a tiny network and batch, a console line and a checkpoint often,
-- every check on.
return {
  device = "cpu",
  threads = 1,
  total_steps = 4096,
  env = { num_envs = 8 },
  policy = { conv_channels = { 8 }, hidden = 32, critic_hidden = 32 },
  ppo = { rollout_steps = 16 },
  log = { console = true, jsonl = true, csv = true, tensorboard = true, interval = 1, checkpoint_interval = 8 },
  alerts = { nonfinite = true, memory_warning = 0.90, memory_critical = 0.95 },
}

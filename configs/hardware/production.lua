-- Hardware profile: a dedicated GPU for long runs. The reference network with
-- a larger batch (1,024 envs x 128 steps = 131,072 samples per update),
-- periodic checkpoints and alerts on. Precision comes from the level.
return {
  device = "cuda",
  env = { num_envs = 1024 },
  policy = { conv_channels = { 32, 64, 64 }, hidden = 512, critic_hidden = 512 },
  ppo = { rollout_steps = 128 },
  cuda = { device_index = 0, memory_fraction = 0.95, release_threshold = 0.85 },
  log = { console = true, jsonl = true, tensorboard = true, interval = 10,
          checkpoint_interval = 50, checkpoint_keep = 5 },
  alerts = { nonfinite = true, memory_warning = 0.90, memory_critical = 0.97 },
}

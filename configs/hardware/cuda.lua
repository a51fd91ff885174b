-- Hardware profile: one NVIDIA GPU. The reference network and batch of
-- docs/environment.md (192 envs x 128 steps = 24,576 samples per update).
-- Precision is not set here: it comes from the optimisation level (the
-- default level, advanced, runs bf16), which is merged over this profile.
return {
  device = "cuda",
  env = { num_envs = 192 },
  policy = { conv_channels = { 32, 64, 64 }, hidden = 512, critic_hidden = 512 },
  ppo = { rollout_steps = 128 },
  cuda = { device_index = 0, memory_fraction = 0.9, release_threshold = 0.8 },
}

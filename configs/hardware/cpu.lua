-- Hardware profile: a CPU, e.g. a 2-core laptop or CI runner.
-- A network small enough to learn visibly in a minute or two on 2 cores; the
-- environment keeps its reference settings (128 x 128 grid, view range 5).
-- Per update: 64 envs x 64 steps = 4,096 samples; 524,288 steps = 128 updates
-- (the default experiment in about two minutes on 2 cores).
return {
  device = "cpu",
  threads = 0,            -- all cores
  total_steps = 524288,
  env = { num_envs = 64 },
  policy = { conv_channels = { 16, 32 }, hidden = 128, critic_hidden = 128 },
  ppo = { rollout_steps = 64 },
  eval = { num_envs = 256, steps = 1024 },  -- a CPU-sized end-of-run evaluation
}

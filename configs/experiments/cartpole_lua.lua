-- cartpole written in Lua (configs/envs/cartpole.lua: the C cartpole's
-- numbers, JIT-compiled; docs/environments.md, "An environment in Lua"),
-- trained exactly as configs/experiments/cartpole.lua trains the C one: the
-- same settings, the same trajectories for the same actions, so the same run.
return {
  name = "cartpole_lua",
  total_steps = 100000,
  env = { lua = "cartpole", num_envs = 8, max_episode_steps = 500 },
  policy = { mlp_widths = { 64, 64 }, critic_hidden = 64, popart = false },
  ppo = { rollout_steps = 32, epochs = 20, minibatches = 1, gamma = 0.98, gae_lambda = 0.8,
          lr = { kind = "linear", from = 1e-3, to = 0 }, clip = { kind = "linear", from = 0.2, to = 0 },
          ent_coef = 0, ent_floor_coef = 0 },
  log = { checkpoint_interval = 100 },
  -- the episodic evaluation at the end: 64 x 2,000 steps, at least 256 episodes of up to 500 steps
  eval = { num_envs = 64, steps = 2000 },
}

-- dials (envs/dials.h): turn each of 2 dials to its target, one multi-discrete
-- action a step (3 choices a dial: down, stay, up), 4 floats observed (each
-- dial's position and target), 40-step episodes that only truncate (so
-- ppo.truncation = "auto" bootstraps them). The MLP trunk with the
-- multi-discrete head. A random policy earns about 3.6 an episode; the best
-- possible is about 37.3 (each dial turned straight to its target and held).
return {
  name = "dials",
  total_steps = 100000,
  env = { name = "dials", num_envs = 16, max_episode_steps = 40 },
  policy = { mlp_widths = { 64, 64 }, critic_hidden = 64, popart = false },
  ppo = { rollout_steps = 64, epochs = 10, minibatches = 4, gamma = 0.95, gae_lambda = 0.9,
          lr = { kind = "linear", from = 1e-3, to = 1e-4 }, clip = 0.2,
          ent_coef = { kind = "linear", from = 0.01, to = 0 }, ent_floor_coef = 0 },
  log = { checkpoint_interval = 50 },
  -- the episodic evaluation at the end: 64 x 400 steps, 640 episodes of 40 steps
  eval = { num_envs = 64, steps = 400 },
}

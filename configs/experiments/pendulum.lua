-- Gymnasium's Pendulum-v1 (envs/pendulum.h, checked against Gymnasium's own
-- in spec/gym_reference.py): 3 floats, one torque in [-2, 2], the MLP trunk
-- with the Gaussian head. PPO close to rl-baselines3-zoo's Pendulum-v1
-- settings (4 envs x 1024 steps, 10 epochs of 16 minibatches, gamma 0.9,
-- lr 1e-3, no entropy bonus; PopArt in place of its normalisation, no
-- gSDE); `moonrl train pendulum` passes a mean return of -250 well within
-- its 500,000 agent-steps.
return {
  name = "pendulum",
  total_steps = 500000,
  env = { name = "pendulum", num_envs = 4, max_episode_steps = 200 },
  policy = { mlp_widths = { 64, 64 }, critic_hidden = 64 },
  ppo = { rollout_steps = 1024, epochs = 10, minibatches = 16, gamma = 0.9, gae_lambda = 0.95,
          lr = 1e-3, clip = 0.2, ent_coef = 0, ent_floor_coef = 0 },
  log = { checkpoint_interval = 50 },
  -- the episodic evaluation at the end: 64 x 1,000 steps, 320 episodes of 200 steps
  eval = { num_envs = 64, steps = 1000 },
}

-- Gymnasium's CartPole-v1 (envs/cartpole.h, checked against Gymnasium's own
-- in spec/gym_reference.py): 4 floats, 2 actions, the MLP trunk. PPO as
-- rl-baselines3-zoo tunes it for CartPole-v1 (8 envs x 32 steps, 20 epochs,
-- gamma 0.98, lambda 0.8, lr and clip to 0, no entropy bonus); `moonrl train
-- cartpole` reaches the maximum return, 500, within its 100,000 agent-steps.
return {
  name = "cartpole",
  total_steps = 100000,
  env = { name = "cartpole", num_envs = 8, max_episode_steps = 500 },
  policy = { mlp_widths = { 64, 64 }, critic_hidden = 64, popart = false },
  ppo = { rollout_steps = 32, epochs = 20, minibatches = 1, gamma = 0.98, gae_lambda = 0.8,
          lr = { kind = "linear", from = 1e-3, to = 0 }, clip = { kind = "linear", from = 0.2, to = 0 },
          ent_coef = 0, ent_floor_coef = 0 },
  log = { checkpoint_interval = 100 },
  -- the episodic evaluation at the end: 64 x 2,000 steps, at least 256 episodes of up to 500 steps
  eval = { num_envs = 64, steps = 2000 },
}

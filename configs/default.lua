-- The built-in default experiment: what `moonrl train` runs with no file.
-- The hardware profile decides the network and batch (auto: cuda when a GPU is
-- found, else cpu). The step budget is kept small so that `make run` on a
-- 2-core CPU finishes in about two minutes and shows learning: with the cpu
-- profile that is 128 updates of 64 envs x 64 steps. ENV_SPEC's schedules
-- (lr 3e-4 -> 1e-4, entropy 0.1 -> 0.001) are tuned for 2,048 updates; on this
-- short budget a larger step size and a smaller entropy bonus learn visibly.
return {
  name = "default",
  hardware = "auto",
  total_steps = 524288,
  env = { mode = "ground_truth" },
  ppo = { lr = linear(1e-3, 3e-4), ent_coef = linear(0.01, 0.001) },
}

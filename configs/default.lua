-- The built-in default experiment: what `moonrl train` runs with no file.
-- The hardware profile decides the network, the batch and the step budget
-- (auto: cuda when a GPU is found, else cpu), so picking a profile gives its
-- budget: ci 32 updates, debug 32 (tiny ones), cpu 128 (`make run` on a 2-core CPU in
-- about two minutes, learning visibly). The reference schedules (docs/environment.md)
-- (lr 3e-4 -> 1e-4, entropy 0.1 -> 0.001) are tuned for 2,048 updates; on this
-- short budget a larger step size and a smaller entropy bonus learn visibly.
return {
  name = "default",
  hardware = "auto",
  env = { mode = "ground_truth" },
  ppo = { lr = linear(1e-3, 3e-4), ent_coef = linear(0.01, 0.001) },
}

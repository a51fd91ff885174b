-- The built-in default experiment: what `moonrl train` runs with no file.
-- The hardware profile decides the network and batch (auto: cuda when a GPU is
-- found, else cpu). The step budget is kept small so that `make run` on a
-- 2-core CPU finishes in a few minutes and shows the return rising: with the
-- cpu profile that is 64 updates of 64 envs x 64 steps.
return {
  name = "default",
  hardware = "auto",
  total_steps = 262144,
  env = { mode = "ground_truth" },
}

-- An experiment to sweep (examples/sweep.lua): the foraging gridworld in
-- ground_truth mode (docs/environment.md) with fixed step sizes, which a
-- sweep replaces point by point, and a checkpoint every 16 updates, so a
-- trial that was running when its sweep was interrupted resumes from one.
-- `moonrl train configs/experiments/foraging.lua` trains it as it stands.
return {
  name = "foraging",
  hardware = "auto",
  env = { mode = "ground_truth" },
  ppo = { lr = 3e-4, ent_coef = 0.01 },
  log = { checkpoint_interval = 16 },
}

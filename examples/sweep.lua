-- sweep.lua - a hyperparameter sweep: the learning rate, the entropy bonus
-- and the number of environments of configs/experiments/foraging.lua, 16
-- random points two at a time, the weak ones stopped early by ASHA.
--
--   moonrl run examples/sweep.lua        the sweep as written (hours on a CPU)
--   moonrl run examples/sweep.lua ci     the same on the ci profile with tiny budgets
--                                        (6 trials of 16,384 agent-steps: a minute or two)
--
-- Each trial is a `moonrl train` of its own in a child process; a crash is a
-- failed trial, not a failed sweep. Running the script again resumes the
-- sweep: finished trials are read back from results.jsonl, interrupted ones
-- resume from their checkpoints. `moonrl sweep status runs/lr_sweep` shows
-- the table from another shell; runs/lr_sweep/best.lua is the best config.
-- It runs from any directory: runs/ is made in the working directory, and the
-- base is the experiment moonrl ships by that name (a file path works too).

local moonrl = require "moonrl"
local ci = arg[1] == "ci"

local sweep = moonrl.sweep {
  base = "foraging",   -- the built-in configs/experiments/foraging.lua (embedded: any directory)
  sets = ci and { "hardware=ci", "threads=1", "total_steps=16384", "log.checkpoint_interval=2" } or nil,
  space = {
    ["ppo.lr"]       = moonrl.loguniform(1e-4, 1e-3),
    ["ppo.ent_coef"] = moonrl.choice{ 0.01, 0.05, 0.1 },
    ["env.num_envs"] = moonrl.grid{ 64, 128 },
  },
  method = "random",
  trials = ci and 6 or 16, parallel = 2,
  metric = "efficiency", mode = "max",
  smooth = 5,          -- a trial's value: the mean of its last 5 updates (one update's value is noise)
  scheduler = moonrl.asha{ grace_steps = ci and 4096 or 2e5, reduction = 3 },
  executor = "local",
  dir = ci and "runs/lr_sweep_ci" or "runs/lr_sweep",
  hooks = {
    on_trial_failed = function(r) io.stderr:write("trial ", r.label, " failed: ", r.error, "\n") end,
  },
}
sweep:wait()
print(sweep:table())

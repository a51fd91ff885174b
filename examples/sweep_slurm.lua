-- sweep_slurm.lua - examples/sweep.lua's sweep on a Slurm cluster: the same
-- space and ASHA, every trial a task of one Slurm job array (at most
-- `parallel` running at once), on a GPU node each.
--
--   moonrl run examples/sweep_slurm.lua       16 trials, partition "gpu", 2 h and 1 GPU each
--   moonrl run examples/sweep_slurm.lua ci    6 tiny trials on the ci profile, the cluster's
--                                             default partition, 1 CPU each (a minute or two)
--
-- Run it from a directory the nodes share (runs/ must be visible to them at
-- the same path), on a machine where sbatch works (SLURM_CONF is honoured).
-- Running it again resumes: finished trials are read back, tasks still
-- queued or running in Slurm are followed again, interrupted ones resume
-- from their checkpoints.

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
  trials = ci and 6 or 16, parallel = ci and 2 or 8,
  metric = "efficiency", mode = "max",
  smooth = 5,          -- a trial's value: the mean of its last 5 updates (one update's value is noise)
  scheduler = moonrl.asha{ grace_steps = ci and 4096 or 2e5, reduction = 3 },
  executor = ci and moonrl.slurm{ time = "00:10:00", cpus_per_task = 1, poll = 1 }
             or moonrl.slurm{ partition = "gpu", time = "02:00:00", gpus = 1, cpus_per_task = 8, mem = "32G" },
  dir = ci and "runs/lr_sweep_slurm_ci" or "runs/lr_sweep_slurm",
}
sweep:wait()
print(sweep:table())

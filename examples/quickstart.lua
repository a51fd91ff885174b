-- quickstart.lua - the shortest useful experiment: train the built-in default
-- for a few updates, then evaluate the policy it learned.
--
--   moonrl run examples/quickstart.lua [total_steps]
--
-- The hardware profile is picked for this machine (hardware = "auto": cuda
-- with a GPU, else cpu). The run directory (runs/quickstart-<time>/) holds the
-- resolved config, metrics.jsonl, TensorBoard events, checkpoints and
-- train.log.

local moonrl = require("moonrl")

local steps = tonumber(arg[1]) or 32768   -- 8 updates of the cpu profile

local run = moonrl.train(nil, {                  -- nil: configs/default.lua
  sets = { "name=quickstart", "total_steps=" .. steps, "eval.num_envs=64", "eval.steps=512" },
})
print("run directory: " .. run.dir)

local summary = run:wait()                       -- this script waits; the loop does not
if summary.status ~= "done" then
  error("training ended with status " .. summary.status .. ": " .. tostring(summary.error))
end
print(string.format("%d updates in %.1f s (%.0f agent-steps/s)",
  summary.updates, summary.seconds, summary.sps))

local result = assert(moonrl.evaluate(run))      -- the final checkpoint, on a worker thread
print(moonrl.eval_table({ result }))

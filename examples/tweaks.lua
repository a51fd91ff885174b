-- tweaks.lua - a live tweak file: train with it watched,
--
--   moonrl train --live examples/tweaks.lua
--
-- then edit and save it while the run goes: the hot keys below apply at the
-- next update (docs/live-tweaks.md). A key that is not hot, a typo or a value
-- out of range changes nothing and the message names the line. Every change
-- lands in the run directory's train.log, metrics.jsonl and changes.lua.
return {
  ppo = {
    lr = 3e-4,                              -- a number, linear(a, b), cosine(a, b), step(...)
    ent_coef = linear(0.01, 0.001),         -- or a function of progress:
    -- clip = function(p) return 0.2 - 0.1 * p end,
  },
  ["log.interval"] = 1,                     -- dotted keys work too
  alerts = { sps_min = 0 },
}

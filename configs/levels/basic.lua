-- Optimisation level: basic. Plain fp32, no CUDA graphs: the easiest to debug
-- and compare against the reference, and on a cpu bit-reproducible for any
-- thread count.
-- Levels hold engine settings only (never the network or PPO).
return {
  precision = "fp32",
  cuda = { graphs = false },
  warmup = { updates = 1, restore = true, prepare = {} },
}

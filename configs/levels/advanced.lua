-- Optimisation level: advanced (the default). bf16 with fp32 master weights,
-- CUDA graphs for the steady state, captured during warm-up.
return {
  precision = "bf16",
  cuda = { graphs = true },
  warmup = { updates = 1, restore = true, prepare = { "graphs" } },
}

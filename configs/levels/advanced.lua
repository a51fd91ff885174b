-- Optimisation level: advanced (the default). bf16 with fp32 master weights,
-- CUDA graphs for the steady state, captured during warm-up. On a cpu: bf16
-- for the oneDNN convolutions where the CPU has AVX512-BF16 or AMX, else fp32
-- (with a note); no graphs.
return {
  precision = "bf16",
  cuda = { graphs = true },
  warmup = { updates = 1, restore = true, prepare = { "graphs" } },
}

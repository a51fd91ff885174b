-- Optimisation level: advanced (the default). bf16 with fp32 master weights,
-- CUDA graphs for the steady state, cuDNN algorithm search during warm-up.
return {
  precision = "bf16",
  cuda = { graphs = true, cudnn_benchmark = true },
  warmup = { updates = 1, restore = true, prepare = { "algorithms", "graphs" } },
}

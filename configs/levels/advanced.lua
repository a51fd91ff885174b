-- Optimisation level: advanced (the default). bf16 with fp32 master weights,
-- CUDA graphs for the steady state, captured during warm-up. On a cpu: bf16
-- for the oneDNN convolutions where the CPU has AMX, else fp32 (with a note:
-- AVX512-BF16 alone trained no faster than fp32); no graphs; each conv
-- layer's implementation measured once per machine and shape ("algorithms",
-- cpu.conv = auto: oneDNN or Winograd, cached, docs/engine.md).
return {
  precision = "bf16",
  cuda = { graphs = true },
  warmup = { updates = 1, restore = true, prepare = { "graphs", "algorithms" } },
}

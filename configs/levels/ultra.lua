-- Optimisation level: ultra. fp16 with dynamic loss scaling (on device), CUDA
-- graphs, a longer warm-up so the loss scale and the allocator settle before
-- timing, and more of the card for the caching allocator. On a cpu (no fp16
-- there): bf16 where the CPU has AMX, else fp32, with a note,
-- and each conv layer's implementation measured as the advanced level does.
return {
  precision = "fp16",
  cuda = { graphs = true, memory_fraction = 0.95, release_threshold = 0.9 },
  warmup = { updates = 2, restore = true, prepare = { "graphs", "algorithms" } },
}

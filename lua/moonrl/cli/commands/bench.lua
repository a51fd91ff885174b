-- `moonrl bench`: see moonrl.bench, which holds the measurements and the
-- option parsing; loaded only when the command runs or its help is asked
-- for (it loads the engine).

return {
  name = "bench",
  order = 50,
  usage = "bench [env|infer|train] [--compare]",
  summary = "throughput; --compare runs the PyTorch reference side by side",
  help = function() return require("moonrl.bench").usage end,
  run = function(argv) return require("moonrl.bench").main(argv) end,
}

-- `moonrl bench`: see moonrl.bench.
return function(args)
  return require("moonrl.bench").main(args)
end

-- `moonrl run`: a Lua script as the main coroutine on moonrl's event loop.
-- Everything after the script's name is the script's own: no options of
-- moonrl's are parsed there.

local cmdline = require("moonrl.cli.cmdline")

local run = {
  name = "run",
  order = 20,
  usage = "run [--verbose] script.lua [args]",
  summary = "run an experiment script (as a coroutine on the event loop)",
  help = [[
usage: moonrl run [--verbose] script.lua [args...]

Runs a Lua script as a coroutine on moonrl's event loop. The script gets its
arguments in `arg` (arg[0] = the script) and as `...`; `require "moonrl"`
and `require "luv"` (the same loop) are available. It must be Lua source
text: precompiled bytecode (luajit -b, string.dump) is refused. The process exits when the
script and everything it started (runs, timers) are done. An error in the
script stops the runs it started (the update in progress ends, a final
checkpoint, files closed) and exits with status 1 and its traceback (2, with
the message alone, when it is a config moonrl.train refused); SIGINT or
SIGTERM does the same and exits 130 / 143, a second one at once (moonrl train
--help lists the signals).

options (before the script's name; everything after it is the script's):
  --verbose   also print the notes that only tell how a default was resolved
              (as moonrl train --verbose; moonrl.train's opts.verbose)
]],
}

function run.run(argv)
  if argv[1] == "--verbose" then
    require("moonrl.run.start").verbose = true
    argv = { unpack(argv, 2) }
  end
  local script = argv[1]
  if script == nil or script == "--help" or script == "-h" then
    if script == nil then return cmdline.usage_error("moonrl run: missing the script: moonrl run script.lua [args...]") end
    return cmdline.out(run.help)
  end
  if not require("luv").fs_stat(script) then
    return cmdline.usage_error("moonrl run: script '" .. script .. "' not found")
  end
  -- Source text only: LuaJIT does not verify bytecode (a crafted chunk can
  -- crash the process).
  local text = require("moonrl.util").read_file(script)
  local chunk, lerr
  if text and require("moonrl.util").is_bytecode(text) then
    lerr = script .. ": " .. require("moonrl.util").BYTECODE_REFUSED
  else
    chunk, lerr = loadfile(script, "t")
  end
  if not chunk then
    cmdline.err("moonrl run: ", lerr, "\n")
    return 1
  end
  local sargs = { [0] = script }
  for i = 2, #argv do sargs[i - 1] = argv[i] end
  rawset(_G, "arg", sargs)
  -- The script's own return values are not exit codes: drop them.
  chunk(unpack(sargs, 1, #sargs))
end

return run

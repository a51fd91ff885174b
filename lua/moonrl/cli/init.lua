-- moonrl.cli - the `moonrl` command line. main.c runs this file with the
-- process arguments (`...`); the command itself runs as the main coroutine on
-- the loop (moonrl.runtime.tasks.main), so a failure there is the process's failure.
--
-- This file only dispatches. Each command is a module of its own,
-- lua/moonrl/cli/commands/<name>.lua, that describes itself (name, one-line
-- usage, summary, help) and runs (see moonrl.cli.cmdline for the form): the
-- usage text, `moonrl help <command>` and the "unknown command" message are
-- made from those modules, so adding a file adds a command everywhere.
--
-- Exit codes: 0 success; 1 a failure while working (a run that failed, an
-- evaluation error, an error in a script); 2 a bad command line or config
-- (the message names the argument and what is accepted); 128 + N stopped by
-- signal N (130 SIGINT, 143 SIGTERM: moonrl.runtime.signals). A command's run
-- returns its exit code (nil: 0, unless it set one).

local core = require("moonrl.core")
local tasks = require("moonrl.runtime.tasks")
local cmdline = require("moonrl.cli.cmdline")

local args = { ... }

-- modules required by configs and scripts: source text only, as they are
require("moonrl.util").require_text_only()
-- schedule tables are evaluated by the engine, loaded when first needed
-- (moonrl.schedule requires nothing above it; moonrl.engine sets the same when it loads)
require("moonrl.schedule").set_evaluator(function(s, p) return require("moonrl.engine").schedule_value(s, p) end)

local name = args[1]
if name == nil then
  cmdline.err(cmdline.main_usage())
  core.set_exit_code(2)
  return
end
if name == "--help" or name == "-h" or name == "help" then
  local topic = args[2]
  cmdline.out(topic and cmdline.help(topic) or cmdline.main_usage())
  return
end
if name == "--version" then name = "version" end

local command, lerr = cmdline.load(name)
if lerr then
  core.report("cannot load command " .. name, lerr)
  core.set_exit_code(1)
  return
end
if not command then
  local known = {}
  for _, c in ipairs((cmdline.commands())) do known[#known + 1] = c.name end
  local near = require("moonrl.util").closest(name, known)
  cmdline.usage_error("moonrl: unknown command '" .. name .. "': accepted " .. table.concat(known, ", ") ..
    (near and (" - did you mean '" .. near .. "'?") or "") .. " (moonrl --help)")
  return
end
local rest = {}
for i = 2, #args do rest[#rest + 1] = args[i] end
tasks.main(function(argv)
  local code = command.run(argv)
  if type(code) == "number" then core.set_exit_code(code) end
end, rest)

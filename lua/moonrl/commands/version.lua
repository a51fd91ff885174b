-- `moonrl version` (also `moonrl --version`): versions of moonrl and its parts.

local cmdline = require("moonrl.cmdline")

local version = {
  name = "version",
  order = 90,
  usage = "version",
  summary = "versions of moonrl and its parts",
  help = [[
usage: moonrl version

Prints the versions of moonrl, LuaJIT and libuv.
]],
}

function version.run(argv)
  local o, e = cmdline.parse("version", argv, {}, 0)
  if not o then return cmdline.usage_error(e) end
  if o.help then return cmdline.out(version.help) end
  cmdline.out("moonrl ", require("moonrl").version, "\n")
  cmdline.out(jit and jit.version or _VERSION, "\n")
  cmdline.out("libuv ", require("luv").version_string(), "\n")
end

return version

-- `moonrl version` (also `moonrl --version`): versions of moonrl and its parts.

local cmdline = require("moonrl.cli.cmdline")

local version = {
  name = "version",
  order = 90,
  usage = "version",
  summary = "versions of moonrl and its parts",
  help = [[
usage: moonrl version

Prints the versions of moonrl, LuaJIT and libuv, the build (commit,
compiler, flags), the CUDA toolkit it was built with, the BLAS and its
kernel set, the CPU features in use, and where the Lua library comes from:
what a bug report needs.
]],
}

function version.run(argv)
  local o, e = cmdline.parse("version", argv, {}, 0)
  if not o then return cmdline.usage_error(e) end
  if o.help then return cmdline.out(version.help) end
  cmdline.out("moonrl ", require("moonrl").version, "\n")
  cmdline.out(jit and jit.version or _VERSION, "\n")
  cmdline.out("libuv ", require("luv").version_string(), "\n")
  cmdline.out(require("moonrl.engine").build_info(), "\n")
end

return version

-- `moonrl envs`: the environments this moonrl has, with their observation
-- and action shapes (env.name picks one; docs/environments.md adds one).

local cmdline = require("moonrl.cli.cmdline")

local envs = {
  name = "envs",
  order = 38,
  usage = "envs [--json]",
  summary = "the environments env.name can pick, with their observation and action shapes",
  help = [[
usage: moonrl envs [--json]

Lists the environments of this moonrl (the values of env.name), each with
its action count and observation: a (2 x env.view_range + 1)^2 grid of cell
codes around the agent (0 empty, 1 and 2 the environment's two kinds of
item), which the network reads as two channels. The critic also sees two
numbers per environment instance (the item counts, scaled) and the ground
truth of the view. docs/environments.md says how to add an environment.

options:
  --json   one JSON object per environment and line: name, summary, actions,
           codes, and observation (the side at the default view_range)
]],
}

function envs.run(argv)
  local o, e = cmdline.parse("envs", argv, { json = { "flag" } }, 0)
  if not o then return cmdline.usage_error(e) end
  if o.help then return cmdline.out(envs.help) end
  local list = require("moonrl.engine").environments()
  local view = require("moonrl.config.schema").by_key["env.view_range"].default
  local side = 2 * view + 1
  if o.json then
    local json = require("moonrl.formats.json")
    for _, env in ipairs(list) do
      cmdline.out(json.encode({ name = env.name, summary = env.summary, actions = env.actions,
        codes = env.codes, observation = { side, side, 2 } }), "\n")
    end
    return
  end
  cmdline.out(string.format("%-10s %7s  %-22s %s\n", "env.name", "actions", "observation", "what it is"))
  for _, env in ipairs(list) do
    cmdline.out(string.format("%-10s %7d  %-22s %s\n", env.name, env.actions,
      string.format("%d x %d x 2 codes", side, side), env.summary))
  end
  cmdline.out(string.format("\nobservation: (2 x env.view_range + 1)^2 cells around the agent (%d x %d at the " ..
    "default view_range %d), each cell's code as two channels; docs/environments.md adds an environment\n",
    side, side, view))
end

return envs

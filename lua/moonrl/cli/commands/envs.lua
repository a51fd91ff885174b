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
the spaces it declares: its observation (here a C x H x W grid of cell codes
around the agent, which the network expands into C channels), its action
space, what the critic sees beside the trunk's features (a vector of
privileged inputs, and for these grid worlds the view's ground truth), and
the episode counters its logs and evaluation report. Shapes are at the
default env.view_range. docs/environments.md says how to add an environment.

options:
  --json   one JSON object per environment and line: name, summary, codes,
           spaces {observation, action, critic, counters}, and (as before)
           actions and observation (H, W, C)
]],
}

function envs.run(argv)
  local o, e = cmdline.parse("envs", argv, { json = { "flag" } }, 0)
  if not o then return cmdline.usage_error(e) end
  if o.help then return cmdline.out(envs.help) end
  local list = require("moonrl.engine").environments()
  if o.json then
    local json = require("moonrl.formats.json")
    for _, env in ipairs(list) do
      local ob = env.spaces.observation
      cmdline.out(json.encode({ name = env.name, summary = env.summary, actions = env.actions,
        codes = env.codes, spaces = env.spaces,
        observation = ob.kind ~= "vector" and { ob.shape[2], ob.shape[3], ob.shape[1] } or ob.shape }), "\n")
    end
    return
  end
  cmdline.out(string.format("%-10s %-22s %-14s %-14s %s\n", "env.name", "observation", "action", "counters",
    "what it is"))
  for _, env in ipairs(list) do
    local sp = env.spaces
    cmdline.out(string.format("%-10s %-22s %-14s %-14s %s\n", env.name, envs.describe_obs(sp.observation),
      envs.describe_action(sp.action), table.concat(sp.counters, ", "), env.summary))
  end
  cmdline.out("\nshapes at the default env.view_range; the critic also sees each environment's privileged " ..
    "inputs (foraging: the item counts) and the view's ground truth; docs/environments.md adds an environment\n")
end

-- "2 x 11 x 11 codes", "4 floats", ...
function envs.describe_obs(ob)
  if ob.kind == "vector" then return ob.shape[1] .. " floats" end
  return string.format("%d x %d x %d %s", ob.shape[1], ob.shape[2], ob.shape[3], ob.kind == "codes" and "codes" or
    "floats")
end

-- "discrete(8)", "multi_discrete(3, 2)", "box(1) [-2, 2]"
function envs.describe_action(a)
  if a.kind == "discrete" then return "discrete(" .. a.n .. ")" end
  if a.kind == "multi_discrete" then return "multi_discrete(" .. table.concat(a.nvec, ", ") .. ")" end
  local n = #a.low
  return string.format("box(%d) [%g, %g]%s", n, a.low[1], a.high[1], n > 1 and "..." or "")
end

return envs

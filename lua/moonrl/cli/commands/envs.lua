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
privileged inputs, and for these grid worlds the view's ground truth), the
episode counters its logs and evaluation report, and the built-in
experiments that train it (`moonrl train NAME`) with the observation they
train on. The first columns' shapes are at the default env.view_range; an
experiment that sets another view_range trains on its own (reach: a 5 x 5
view). docs/environments.md says how to add an environment.

options:
  --json   one JSON object per environment and line: name, summary, codes,
           spaces {observation, action, critic, counters}, experiments (each
           built-in experiment of this environment: name, view_range and its
           observation space), and (as before) actions and observation (H, W, C)
]],
}

function envs.run(argv)
  local o, e = cmdline.parse("envs", argv, { json = { "flag" } }, 0)
  if not o then return cmdline.usage_error(e) end
  if o.help then return cmdline.out(envs.help) end
  local list = require("moonrl.engine").environments()
  local by_env = envs.experiments()
  if o.json then
    local json = require("moonrl.formats.json")
    for _, env in ipairs(list) do
      local ob = env.spaces.observation
      local key = env.lua and "lua:" .. env.lua or env.name
      cmdline.out(json.encode({ name = env.name, lua = env.lua, summary = env.summary, actions = env.actions,
        codes = env.codes, spaces = env.spaces, experiments = by_env[key] or json.array(),
        observation = ob.kind ~= "vector" and { ob.shape[2], ob.shape[3], ob.shape[1] } or ob.shape }), "\n")
    end
    return
  end
  local rows = { { "env.name", "observation", "action", "counters", "built-in experiments", "what it is" } }
  for _, env in ipairs(list) do
    local sp = env.spaces
    local key = env.lua and "lua:" .. env.lua or env.name
    local ob = sp.observation   -- a float image's side is env.grid_size (catch; a Lua file fixes its own)
    local obs_text = ob.kind == "image" and not env.lua and string.format("%d x N x N floats, N = env.grid_size", ob.shape[1]) or
      envs.describe_obs(ob)
    rows[#rows + 1] = { env.name, obs_text, envs.describe_action(sp.action),
      table.concat(sp.counters, ", "), envs.describe_experiments(by_env[key]), env.summary }
  end
  local width = {}
  for _, r in ipairs(rows) do
    for i = 1, #r - 1 do width[i] = math.max(width[i] or 0, #r[i]) end
  end
  for _, r in ipairs(rows) do
    local cells = {}
    for i = 1, #r - 1 do cells[i] = r[i] .. string.rep(" ", width[i] - #r[i]) end
    cells[#r] = r[#r]
    cmdline.out(table.concat(cells, "  "), "\n")
  end
  cmdline.out("\nobservation: at the default env.view_range (" .. envs.default_view_range() .. "); built-in " ..
    "experiments: `moonrl train NAME` and the observation it trains on (its own env.view_range); the critic " ..
    "also sees each environment's privileged inputs (foraging: the item counts) and the view's ground truth; " ..
    "docs/environments.md adds an environment\n")
end

function envs.default_view_range()
  return require("moonrl.config.schema").by_key["env.view_range"].default
end

-- env.name -> { {name =, view_range =, observation = space}, ... }: the
-- experiments moonrl ships (default, configs/experiments/*.lua), by the
-- environment each trains, with the observation at its view_range.
function envs.experiments()
  local loader, engine = require("moonrl.config.load"), require("moonrl.engine")
  local schema = require("moonrl.config.schema")
  local out = {}
  for _, name in ipairs(loader.experiments()) do
    local t = loader.resource(loader.experiment_path(name))
    local env = type(t) == "table" and type(t.env) == "table" and t.env or {}
    local env_name = type(env.name) == "string" and env.name or schema.by_key["env.name"].default
    if type(env.lua) == "string" then env_name = "lua" end
    local vr = tonumber(env.view_range) or envs.default_view_range()
    local sp = engine.env_spaces(env_name, { view_range = vr, grid_size = env.grid_size }, env.lua)
    local key = env_name == "lua" and "lua:" .. tostring(env.lua) or env_name
    if sp then
      out[key] = out[key] or {}
      table.insert(out[key], { name = name, view_range = vr, observation = sp.observation })
    end
  end
  return out
end

-- "default, foraging: 2 x 11 x 11; reach2: 2 x 7 x 7" (experiments with the same shape share it)
function envs.describe_experiments(list)
  if not list or #list == 0 then return "-" end
  local groups, order = {}, {}
  for _, x in ipairs(list) do
    local ob = x.observation
    local shape = ob.kind == "vector" and (ob.shape[1] .. " floats") or
      string.format("%d x %d x %d", ob.shape[1], ob.shape[2], ob.shape[3])
    if not groups[shape] then groups[shape] = {}; order[#order + 1] = shape end
    table.insert(groups[shape], x.name)
  end
  local parts = {}
  for _, shape in ipairs(order) do parts[#parts + 1] = table.concat(groups[shape], ", ") .. ": " .. shape end
  return table.concat(parts, "; ")
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

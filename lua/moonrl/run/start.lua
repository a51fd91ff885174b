-- moonrl.run.start - from a config (a table, a file, or a run directory to
-- resume) to a run that trains: what moonrl.train, moonrl.resolve and
-- `moonrl train` do.
--
--   start.resolve(cfg_or_path, opts) -> cfg, notes | nil, err    what train() would run
--   start.resume_plan(cfg_or_path, opts) -> plan | nil, err      what train() would resume
--                                                                (moonrl.resume: plan.cfg, plan.notes)
--   start.start(cfg, notes, opts) -> run       a run of an already resolved config (the CLI
--                                              resolves first, to tell a config error from a
--                                              failure to start); refused while moonrl is stopping;
--                                              opts.announce: "moonrl: run directory: DIR" once it starts
--   start.train(cfg_or_path, opts) -> run      moonrl.train (lua/moonrl/init.lua has its options);
--                                              ranks > 1: a moonrl.run.launched run; says
--                                              "moonrl: run directory: DIR" on stdout unless quiet
--   start.verbose                              true: every run's notes at --verbose
--                                              (`moonrl run --verbose`)

local util = require("moonrl.util")
local uv = require("luv")
local config = require("moonrl.config")
local shutdown = require("moonrl.runtime.shutdown")
local hardware = require("moonrl.runtime.hardware")

local start = {}

start.verbose = false

function start.resolve(cfg_or_path, opts)
  opts = opts or {}
  local file = cfg_or_path
  if file ~= nil and type(file) ~= "string" and type(file) ~= "table" then
    return nil, "expected a config table or the path of a config file, got " .. type(file)
  end
  if type(file) == "string" then
    local st = uv.fs_stat(file)
    local rs = require("moonrl.run.resume")
    if (st and st.type == "directory") or rs.is_checkpoint(file) then return nil, rs.hint(file) end
  end
  if opts.sets ~= nil and type(opts.sets) ~= "table" then
    return nil, "opts.sets: expected a list of \"key=value\" strings, got " .. type(opts.sets)
  end
  local cfg, notes = config.resolve {
    file = file, sets = opts.sets, hardware = opts.hardware, level = opts.level, detect = hardware.detect,
    default_experiment = true,   -- no file: configs/default.lua (moonrl.resources)
  }
  if not cfg then return nil, notes end
  if opts.dir ~= nil then
    local ok, err = config.set(cfg, "dir", opts.dir)
    if not ok then return nil, err end
  end
  if opts.hooks ~= nil then
    if type(opts.hooks) ~= "table" then return nil, "opts.hooks: expected a table of functions" end
    for k, fn in pairs(opts.hooks) do
      local ok, err = config.set(cfg, "hooks." .. tostring(k), fn)
      if not ok then return nil, "opts.hooks: " .. err end
    end
  end
  return cfg, notes
end

function start.start(cfg, notes, opts)
  opts = opts or {}
  local stopping = shutdown.stopping()
  if stopping then
    util.refuse("not starting a run: moonrl is stopping (" .. stopping.reason .. ")", 3)
  end
  -- not a tail call: the levels of Run.start's refusals count this frame
  local run = require("moonrl.run").start(cfg, {
    notes = notes, console = opts.console, quiet = opts.quiet, resume = opts.resume, force = opts.force,
    verbose = opts.verbose or start.verbose, pause_at_steps = opts.pause_at_steps,
  })
  -- a script's run says where it writes (`moonrl train` prints its own line), on stdout with its console's lines
  if opts.announce and run.console and not opts.quiet then
    io.stdout:write("moonrl: run directory: ", run.dir, "\n")
    io.stdout:flush()
  end
  return run
end

function start.resume_plan(cfg_or_path, opts)
  local dir = opts.resume
  local changes = cfg_or_path
  if type(cfg_or_path) == "table" and cfg_or_path.resume ~= nil then
    dir = dir or cfg_or_path.resume
    changes = {}
    for k, v in pairs(cfg_or_path) do if k ~= "resume" then changes[k] = v end end
  end
  if opts.dir ~= nil then
    return nil, "resume: a resumed run keeps its directory (" .. tostring(dir) .. "); dir cannot be given"
  end
  if changes ~= nil and type(changes) ~= "string" and type(changes) ~= "table" then
    return nil, "expected a config table or the path of a config file, got " .. type(changes)
  end
  return require("moonrl.run.resume").prepare(dir, {
    file = changes, sets = opts.sets, hardware = opts.hardware, level = opts.level, hooks = opts.hooks,
  })
end

-- ranks: opts.ranks, or in the one-table form cfg.ranks (taken out: no config key).
local function take_ranks(cfg_or_path, opts)
  local ranks = opts.ranks
  if type(cfg_or_path) == "table" and cfg_or_path.ranks ~= nil then
    if ranks ~= nil then util.refuse("moonrl.train: ranks is given twice (in the config table and in opts)", 3) end
    ranks = cfg_or_path.ranks
    local rest = {}
    for k, v in pairs(cfg_or_path) do if k ~= "ranks" then rest[k] = v end end
    cfg_or_path = rest
  end
  local n, err = require("moonrl.run.launched").check_ranks(ranks)
  if not n then util.refuse("moonrl.train: " .. err, 3) end
  return cfg_or_path, n
end

-- A run of several ranks: other processes (moonrl.run.launched).
local function launch(cfg, notes, opts, ranks)
  if opts.pause_at_steps ~= nil then
    util.refuse("moonrl.train: pause_at_steps is not built for a run of several ranks (ranks = " .. ranks .. ")", 4, "input")
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.ranks = ranks
  return require("moonrl.run.launched").start(cfg, notes, o)
end

function start.train(cfg_or_path, opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("moonrl.train: opts must be a table, got " .. type(opts), 2) end
  local ranks
  cfg_or_path, ranks = take_ranks(cfg_or_path, opts)
  if opts.resume ~= nil or (type(cfg_or_path) == "table" and cfg_or_path.resume ~= nil) then
    local plan, err = start.resume_plan(cfg_or_path, opts)
    if not plan then util.refuse("moonrl.train: " .. err, 2, "input") end
    if plan.finished then util.refuse("moonrl.train: " .. plan.finished:gsub("moonrl train %-%-resume (%S+) %-%-set total_steps=N",
      "moonrl.train{resume = %1, total_steps = N}"), 2) end
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.resume = plan
    if ranks > 1 then
      o.changes = cfg_or_path
      if type(cfg_or_path) == "table" and cfg_or_path.resume ~= nil then
        o.changes = {}
        for k, v in pairs(cfg_or_path) do if k ~= "resume" then o.changes[k] = v end end
      end
      return launch(plan.cfg, plan.notes, o, ranks)
    end
    o.announce = true
    return start.start(plan.cfg, plan.notes, o)
  end
  local cfg, notes = start.resolve(cfg_or_path, opts)
  if not cfg then util.refuse(notes, 2, "input") end
  if ranks > 1 then return launch(cfg, notes, opts, ranks) end
  return start.start(cfg, notes, setmetatable({ announce = true }, { __index = opts }))
end

return start

-- moonrl.config - config tables: defaults, layering, validation, live changes,
-- serialisation and the reference docs.
--
-- A config is a plain Lua table described by moonrl.config.schema. resolve() builds
-- the one a run uses from layers, each overriding the one before:
--   built-in defaults (schema)  <  hardware profile configs/hardware/<name>.lua
--   <  optimisation level configs/levels/<name>.lua  <  experiment file (or
--   table)  <  --set key=value
-- then validates it and adapts it to the device. Nothing here touches the
-- engine: engine.lua maps the resolved table onto mr_config.
--
-- This file is the public face; the work is done by one module per concern:
--   config/keys.lua       dotted key paths into nested tables
--   config/merge.lua      defaults, layering, provenance
--   config/load.lua       the sandbox, config files, profile and level files
--   config/validate.lua   validation, did-you-mean, cross-key checks, --set, get/set
--   config/resolve.lua    resolve (its doc says what it does beyond merging)
--   config/serialize.lua  Lua source of a config
--   config/docs.lua       docs/config.md
--
-- Public functions (the interface the host and runner rely on)
--   config.defaults() -> table                      a fresh table of every default
--   config.merge(base, over) -> table               deep merge into a new table;
--                                                   lists and schedules replace
--   config.load_file(path) -> table | nil, err      run a config file in a sandbox
--   config.parse_set("k=v") -> path, value | nil, err
--   config.resolve(opts) -> resolved, notes | nil, err
--       opts = { file = path|table|nil, sets = {"k=v", ...}, hardware = name|nil,
--                level = name|nil, detect = function() -> {gpus=, cores=, memory=
--                [, gpu_memory = bytes of the GPU, optional (addition)]},
--                config_dir = dir|nil (addition: profiles, levels and default.lua
--                from this directory on disk; default: the files moonrl ships,
--                through moonrl.resources - embedded in the binary, or the
--                source tree's configs/),
--                default_experiment = true (addition: with file = nil, the
--                built-in default experiment configs/default.lua is the file) }
--   config.validate(t [, {partial = true}]) -> true | nil, err (one error a line)
--   config.get(t, "ppo.lr") -> value | nil, err     (err only for an unknown key)
--   config.set(t, "ppo.lr", v [, {running = true}]) -> true | nil, err
--   config.serialize(t [, {header = "text"}]) -> Lua source "return { ... }"
--   config.reference_markdown() -> string           docs/config.md
-- Additions
--   config.config_dir() -> the source tree's directory holding hardware/ and
--                          levels/ (what moonrl.resources reads when nothing is
--                          embedded)
--   config.default_file([dir]) -> path on disk of the built-in default experiment
--                                  (what `moonrl train` with no file runs; the
--                                  run itself reads it through moonrl.resources)
--   config.load_resource(relpath) -> table | nil, err   a shipped config file,
--                                  e.g. "configs/hardware/ci.lua", from the binary
--                                  or the source tree
--   config.run_dir(t [, time]) -> t.dir or "runs/<name>-<YYYYmmdd-HHMMSS>"
--   config.sandbox() -> the environment config files run in (a fresh table)

local merge = require("moonrl.config.merge")
local loader = require("moonrl.config.load")
local validate = require("moonrl.config.validate")
local resolve = require("moonrl.config.resolve")
local serialize = require("moonrl.config.serialize")
local docs = require("moonrl.config.docs")

local config = {}

config.defaults = merge.defaults
config.merge = merge.merge
config.sandbox = loader.sandbox
config.load_file = loader.file
config.load_resource = loader.resource
config.config_dir = loader.config_dir
config.parse_set = validate.parse_set
config.validate = validate.validate
config.get = validate.get
config.set = validate.set
config.resolve = resolve.resolve
config.serialize = serialize.serialize
config.reference_markdown = docs.reference_markdown

function config.default_file(dir)
  return (dir or config.config_dir()) .. "/default.lua"
end

function config.run_dir(t, time)
  if t.dir then return t.dir end
  return "runs/" .. tostring(t.name or "default") .. "-" .. os.date("%Y%m%d-%H%M%S", time or os.time())
end

return config

-- moonrl.config.load - running config files: the sandbox, load_file, and the
-- hardware profile and optimisation level files resolve() layers.
--
-- Config files run with their own globals (nothing leaks into moonrl's): the
-- constructors linear, cosine, constant, step and moonrl.schedule; the pure
-- standard library (string, math, table, bit, pairs, ...), os.time/clock/
-- date/getenv, print and require (hooks defined in a config may need modules).
-- No io, no os.execute, no loadfile/dofile. A config is trusted code like
-- any script; the sandbox keeps it tidy, it is not a security boundary.
-- Source text only: precompiled bytecode is refused (util.load_text), as
-- LuaJIT does not verify it and a crafted chunk can crash the process.
--
--   loader.config_dir() -> the directory holding hardware/ and levels/
--   loader.sandbox() -> the environment config files run in (a fresh table: sandbox.config_globals)
--   loader.file(path) -> table | nil, err         a config file on disk
--   loader.resource(relpath) -> table | nil, err  a file moonrl ships, through
--       moonrl.resources ("configs/default.lua": embedded or the source tree)
--   loader.text(text, origin) -> table | nil, err config source; origin names it
--       (an env.lua table becomes its source text: moonrl.config.env_script)
--   loader.layer(kind, name[, dir]) -> table | nil, err
--       kind "profile" (configs/hardware/<name>.lua) or "level"
--       (configs/levels/<name>.lua), through moonrl.resources; with dir, from
--       dir/hardware or dir/levels on disk; a name ending in .lua is a path of
--       its own. Checked as a partial config.
--   loader.hint_global(msg) -> msg with "did you mean" for a misspelt constructor
--   loader.experiments() -> the names of the experiments moonrl ships: "default"
--       (configs/default.lua) and every configs/experiments/<name>.lua
--   loader.experiment_path(name) -> the shipped file a name means, or nil:
--       "foraging", "foraging.lua", "experiments/foraging" and
--       "configs/experiments/foraging.lua" all mean configs/experiments/foraging.lua
--   loader.experiment(path_or_name) -> table, origin | nil, err
--       a config file on disk when one exists at that path (relative to the
--       working directory), else the shipped experiment of that name (embedded
--       in the binary: found from any directory); neither: an error that lists
--       the shipped names

local env_script = require("moonrl.config.env_script")
local resources = require("moonrl.resources")
local sandbox = require("moonrl.sandbox")
local util = require("moonrl.util")
local validate = require("moonrl.config.validate")

local loader = {}

-- The directory holding hardware/ and levels/ on disk: configs/ in the
-- source tree moonrl.resources reads when nothing is embedded.
function loader.config_dir()
  return resources.root() .. "configs"
end

loader.sandbox = sandbox.config_globals

-- Adds "did you mean" to "attempt to call global 'linaer'" style errors
-- (written in validate, which reads --set values with the same constructors).
loader.hint_global = validate.hint_global

-- Runs config source `text` in a fresh sandbox; `origin` names it in
-- messages (chunk name "@" .. origin, so errors read "origin:line: ...").
function loader.text(text, origin)
  local chunk, err = sandbox.compile(text, origin)
  if not chunk then return nil, err end
  setfenv(chunk, loader.sandbox())
  local source = "@" .. origin
  local ok, res = xpcall(chunk, function(e)
    local msg = tostring(e)
    if not msg:find(origin, 1, true) then
      -- Raised outside the file (a library call): point at the file's line.
      for level = 2, 30 do
        local info = debug.getinfo(level, "Sl")
        if not info then break end
        if info.source == source and info.currentline and info.currentline > 0 then
          msg = origin .. ":" .. info.currentline .. ": " .. msg
          break
        end
      end
    end
    return loader.hint_global(msg)
  end)
  if not ok then return nil, res end
  if type(res) ~= "table" then
    return nil, origin .. ": the config file returned " .. util.describe(res) ..
      ", expected a table: end the file with `return { ... }`"
  end
  -- a Lua environment written as a table in the script: its text, cut from the script
  if type(res.env) == "table" and type(res.env.lua) == "table" then
    local src, serr = env_script.source(res.env.lua, text, origin)
    if not src then return nil, serr end
    res.env.lua = src
  end
  return res
end

function loader.file(path)
  if type(path) ~= "string" then
    return nil, "config.load_file: expected a path, got " .. util.describe(path)
  end
  local fh, oerr = io.open(path, "rb")
  if not fh then return nil, "cannot open config file " .. oerr end
  local text = fh:read("*a")
  fh:close()
  if not text then return nil, "cannot read config file " .. path end
  return loader.text(text, path)
end

-- A file shipped with moonrl (configs/...), embedded or from the source tree.
function loader.resource(relpath)
  local text, origin = resources.read(relpath)
  if not text then return nil, origin end
  return loader.text(text, origin)
end

function loader.experiments()
  local names = { "default" }
  for _, rel in ipairs(resources.list("configs/experiments/")) do
    local n = rel:match("^configs/experiments/([^/]+)%.lua$")
    if n then names[#names + 1] = n end
  end
  return names
end

function loader.experiment_path(name)
  if type(name) ~= "string" then return nil end
  local n = name:gsub("%.lua$", ""):gsub("^configs/", ""):gsub("^experiments/", "")
  if n == "default" then return "configs/default.lua" end
  if n == "" or n:find("/") or n:find("%.%.") then return nil end
  local rel = "configs/experiments/" .. n .. ".lua"
  if resources.exists(rel) then return rel end
  return nil
end

function loader.experiment(name)
  if type(name) ~= "string" then
    return nil, "config.load_file: expected a path, got " .. util.describe(name)
  end
  local fh, oerr = io.open(name, "rb")
  if fh then
    fh:close()
    local t, err = loader.file(name)
    if not t then return nil, err end
    return t, name
  end
  if not tostring(oerr):find("No such file", 1, true) then return nil, "cannot open config file " .. oerr end
  local rel = loader.experiment_path(name)
  if rel then
    local t, err = loader.resource(rel)
    if not t then return nil, err end
    return t, rel
  end
  local names = loader.experiments()
  local near = util.closest((name:gsub("%.lua$", ""):match("[^/]*$")), names)
  local okuv, uv = pcall(require, "luv")
  local cwd = okuv and uv.cwd() or nil
  return nil, "config file '" .. name .. "' not found: no such file" ..
    ((cwd and name:sub(1, 1) ~= "/") and (" in " .. cwd) or "") .. ", and not a built-in experiment: built-in " .. table.concat(names, ", ") ..
    (near and (" - did you mean '" .. near .. "'?") or "")
end

function loader.layer(kind, name, dir)
  local what = kind == "profile" and "hardware profile " or "level "
  local folder = kind == "profile" and "hardware" or "levels"
  local t, err, origin
  if name:match("%.lua$") or dir then
    -- a file of the user's (a path, or a config_dir given to resolve): disk
    origin = name:match("%.lua$") and name or (dir .. "/" .. folder .. "/" .. name .. ".lua")
    local fh = io.open(origin, "r")
    if not fh then return nil, what .. util.fmt_value(name) .. " not found: no file " .. origin end
    fh:close()
    t, err = loader.file(origin)
  else
    local relpath = "configs/" .. folder .. "/" .. name .. ".lua"
    local text
    text, origin = resources.read(relpath)
    if not text then return nil, what .. util.fmt_value(name) .. " not found: " .. origin end
    t, err = loader.text(text, origin)
  end
  if not t then return nil, err end
  for _, forbidden in ipairs({ "hardware", "level" }) do
    if t[forbidden] ~= nil then
      return nil, origin .. ": a " .. (kind == "profile" and "hardware profile" or "level") ..
        " cannot set " .. forbidden .. " (it is chosen by the experiment)"
    end
  end
  local ok, verr = validate.validate(t, { partial = true })
  if not ok then return nil, origin .. ":\n" .. verr end
  return t
end

return loader

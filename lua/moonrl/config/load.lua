-- moonrl.config.load - running config files: the sandbox, load_file, and the
-- hardware profile and optimisation level files resolve() layers.
--
-- Config files run with their own globals (nothing leaks into moonrl's): the
-- constructors linear, cosine, constant, step and moonrl.schedule; the pure
-- standard library (string, math, table, bit, pairs, ...), os.time/clock/
-- date/getenv, print and require (hooks defined in a config may need modules).
-- No io, no os.execute, no loadfile/dofile. A config is trusted code like
-- any script; the sandbox keeps it tidy, it is not a security boundary.
--
--   loader.config_dir() -> the directory holding hardware/ and levels/
--   loader.sandbox() -> the environment config files run in (a fresh table)
--   loader.file(path) -> table | nil, err         a config file on disk
--   loader.layer(kind, name, dir) -> table | nil, err
--       kind "profile" (dir/hardware/<name>.lua) or "level" (dir/levels/<name>.lua);
--       a name ending in .lua is a path of its own. Checked as a partial config.
--   loader.hint_global(msg) -> msg with "did you mean" for a misspelt constructor

local schedule = require("moonrl.schedule")
local util = require("moonrl.util")

local loader = {}

-- The directory holding hardware/ and levels/: configs/ beside the lua/ this
-- file was loaded from (the source tree), else configs/ under the working
-- directory.
function loader.config_dir()
  local src = debug.getinfo(1, "S").source
  if src:sub(1, 1) == "@" then
    local root = src:sub(2):match("^(.-)lua/moonrl/config/load%.lua$")
    if root then return root .. "configs" end
  end
  return "configs"
end

function loader.sandbox()
  local env = schedule.env()
  env.moonrl = { schedule = schedule }
  for _, name in ipairs({ "assert", "error", "ipairs", "next", "pairs", "pcall", "print", "rawequal",
    "rawget", "rawset", "require", "select", "setmetatable", "getmetatable", "tonumber",
    "tostring", "type", "unpack", "xpcall" }) do
    env[name] = _G[name]
  end
  env.math = math
  env.string = string
  env.table = table
  env.bit = rawget(_G, "bit")
  env.os = { time = os.time, clock = os.clock, date = os.date, getenv = os.getenv }
  env._G = env
  return env
end

local SANDBOX_NAMES = { "linear", "cosine", "constant", "step" }

-- Adds "did you mean" to "attempt to call global 'linaer'" style errors.
function loader.hint_global(msg)
  local name = msg:match("global '([%w_]+)'")
  if name then
    local near = util.closest(name, SANDBOX_NAMES)
    if near and near ~= name then msg = msg .. " - did you mean '" .. near .. "'?" end
  end
  return msg
end

function loader.file(path)
  if type(path) ~= "string" then
    return nil, "config.load_file: expected a path, got " .. util.describe(path)
  end
  local fh, oerr = io.open(path, "r")
  if not fh then return nil, "cannot open config file " .. oerr end
  fh:close()
  local chunk, err = loadfile(path)
  if not chunk then
    -- "path:3: '}' expected near 'lr'" -> "path:3: syntax error: ..."
    local where, rest = tostring(err):match("^(.-:%d+): (.*)$")
    if where then return nil, where .. ": syntax error: " .. rest end
    return nil, tostring(err)
  end
  setfenv(chunk, loader.sandbox())
  local source = "@" .. path
  local ok, res = xpcall(chunk, function(e)
    local msg = tostring(e)
    if not msg:find(path, 1, true) then
      -- Raised outside the file (a library call): point at the file's line.
      for level = 2, 30 do
        local info = debug.getinfo(level, "Sl")
        if not info then break end
        if info.source == source and info.currentline and info.currentline > 0 then
          msg = path .. ":" .. info.currentline .. ": " .. msg
          break
        end
      end
    end
    return loader.hint_global(msg)
  end)
  if not ok then return nil, res end
  if type(res) ~= "table" then
    return nil, path .. ": the config file returned " .. util.describe(res) ..
      ", expected a table: end the file with `return { ... }`"
  end
  return res
end

local function layer_file(kind, name, dir)
  if name:match("%.lua$") then return name end
  return dir .. "/" .. kind .. "/" .. name .. ".lua"
end

function loader.layer(kind, name, dir)
  local path = layer_file(kind == "profile" and "hardware" or "levels", name, dir)
  local fh = io.open(path, "r")
  if not fh then
    return nil, (kind == "profile" and "hardware profile " or "level ") .. util.fmt_value(name) ..
      " not found: no file " .. path
  end
  fh:close()
  local t, err = loader.file(path)
  if not t then return nil, err end
  for _, forbidden in ipairs({ "hardware", "level" }) do
    if t[forbidden] ~= nil then
      return nil, path .. ": a " .. (kind == "profile" and "hardware profile" or "level") ..
        " cannot set " .. forbidden .. " (it is chosen by the experiment)"
    end
  end
  -- Required here, not at the top: validate needs hint_global from this module.
  local ok, verr = require("moonrl.config.validate").validate(t, { partial = true })
  if not ok then return nil, path .. ":\n" .. verr end
  return t
end

return loader

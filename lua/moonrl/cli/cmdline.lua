-- moonrl.cli.cmdline - what the `moonrl` command line is made of: the command
-- modules and the helpers they share (option parsing, messages, exit codes).
--
-- A command is a module lua/moonrl/cli/commands/<name>.lua returning
--   { name = "train",                          the word after `moonrl`
--     usage = "train [config.lua] [--set k=v ...]",  one line for `moonrl --help`
--     summary = "train; no file = ...",        what it does, on the same line
--     help = "usage: moonrl train ..." | function() -> that text,
--     order = 10,                              place in the list (then by name)
--     run = function(argv) -> exit code | nil }
-- run works as the main coroutine on the loop (moonrl.runtime.tasks.main); it reports a
-- bad command line with cmdline.usage_error (exit code 2) and a failure while
-- working with exit code 1. Adding the file is all it takes for the command
-- to be dispatched, listed in `moonrl --help` and in the "unknown command"
-- message. Older modules returning function(argv) -> exit code (or a table
-- with only `run`) are still run, and listed by name alone.
--
-- Command modules keep their top level light (no engine, no loop): listing
-- them for --help loads every one of them.
--
--   cmdline.command_names() -> sorted names of the command modules found
--   cmdline.load(name) -> command table | nil, err ("not found" err: nil, nil)
--   cmdline.commands() -> list of command tables in listing order, and a list
--                         of {name, err} for modules that failed to load
--   cmdline.main_usage() -> the text of `moonrl --help`
--   cmdline.help(name) -> a command's help text | nil
--   cmdline.parse(cmd, argv, spec, max_pos) -> options | nil, err
--   cmdline.int_option(cmd, o, name, min) -> true | nil, err
--   cmdline.out(...), cmdline.err(...)          write and flush stdout / stderr
--   cmdline.usage_error(msg)                    the message on stderr, exit code 2

local resources = require("moonrl.resources")
local util = require("moonrl.util")

local cmdline = {}

local PREFIX = "lua/moonrl/cli/commands/"

function cmdline.out(...) io.stdout:write(...) io.stdout:flush() end
function cmdline.err(...) io.stderr:write(...) io.stderr:flush() end

function cmdline.usage_error(msg)
  cmdline.err(msg, "\n")
  require("moonrl.core").set_exit_code(2)
end

-- ------------------------------------------------------------ the commands

-- The files under lua/moonrl/cli/commands/ (on disk or embedded in the binary),
-- and modules the host preloaded under moonrl.cli.commands.<name>.
function cmdline.command_names()
  local seen, names = {}, {}
  local function add(name)
    if name and name ~= "init" and not seen[name] then seen[name] = true; names[#names + 1] = name end
  end
  for _, rel in ipairs(resources.list(PREFIX)) do
    add(rel:sub(#PREFIX + 1):match("^([%w_]+)%.lua$"))
  end
  for mod in pairs(package.preload) do
    add(type(mod) == "string" and mod:match("^moonrl%.cli%.commands%.([%w_]+)$") or nil)
  end
  table.sort(names)
  return names
end

-- A command module in its table form; nil, nil when there is no such module.
function cmdline.load(name)
  if type(name) ~= "string" or not name:match("^[%w_]+$") then return nil, nil end
  local modname = "moonrl.cli.commands." .. name
  local ok, m = pcall(require, modname)
  if not ok then
    if tostring(m):find("module '" .. modname .. "' not found", 1, true) then return nil, nil end
    return nil, tostring(m)
  end
  if type(m) == "function" then return { name = name, run = m } end
  if type(m) == "table" and type(m.run) == "function" then
    if m.name ~= nil and m.name ~= name then
      return nil, PREFIX .. name .. ".lua: names itself '" .. tostring(m.name) .. "'"
    end
    m.name = name
    return m
  end
  return nil, PREFIX .. name .. ".lua: returned " .. util.describe(m) ..
    ", expected a command table {name=, usage=, summary=, help=, run=}"
end

function cmdline.commands()
  local list, broken = {}, {}
  for _, name in ipairs(cmdline.command_names()) do
    local c, e = cmdline.load(name)
    if c then list[#list + 1] = c else broken[#broken + 1] = { name = name, err = e or "not found" } end
  end
  table.sort(list, function(a, b)
    local oa, ob = a.order or math.huge, b.order or math.huge
    if oa ~= ob then return oa < ob end
    return a.name < b.name
  end)
  return list, broken
end

function cmdline.main_usage()
  local list, broken = cmdline.commands()
  local width = 0
  for _, c in ipairs(list) do width = math.max(width, #(c.usage or c.name)) end
  local lines = { "usage: moonrl <command> [arguments]", "", "commands:" }
  for _, c in ipairs(list) do
    local u = c.usage or c.name
    lines[#lines + 1] = "  " .. u .. (c.summary and (string.rep(" ", width + 2 - #u) .. c.summary) or "")
  end
  for _, b in ipairs(broken) do
    lines[#lines + 1] = "  " .. b.name .. string.rep(" ", math.max(2, width + 2 - #b.name)) ..
      "(cannot load: " .. b.err:match("^[^\n]*") .. ")"
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "`moonrl <command> --help` tells more. The Lua library and configs are built into"
  lines[#lines + 1] = "the binary; `moonrl --lua-path DIR <command> ...` (or MOONRL_LUA_PATH=DIR) loads"
  lines[#lines + 1] = "them from a source tree DIR instead, for development."
  return table.concat(lines, "\n") .. "\n"
end

function cmdline.help(name)
  local c = cmdline.load(name)
  if not c then return nil end
  local h = c.help
  if type(h) == "function" then h = h() end
  return type(h) == "string" and h or nil
end

-- ---------------------------------------------------------------- helpers

-- Returns a parsed table (each option by its name; o.positional: the other
-- arguments, in order) or nil, message. spec: option name -> "flag" |
-- "value" | "list" (repeatable), plus the value's description for messages.
function cmdline.parse(cmd, argv, spec, max_pos)
  local o = { positional = {} }
  local accepted = {}
  for name in pairs(spec) do accepted[#accepted + 1] = "--" .. name end
  table.sort(accepted)
  accepted[#accepted + 1] = "--help"
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then
      o.help = true
    elseif a:sub(1, 2) == "--" and #a > 2 then
      local name, inline = a:sub(3):match("^([^=]+)=(.*)$")
      name = name or a:sub(3)
      local s = spec[name]
      if not s then
        local near = util.closest("--" .. name, accepted)
        return nil, "moonrl " .. cmd .. ": unknown option '" .. a .. "': accepted " ..
          table.concat(accepted, ", ") .. (near and (" - did you mean '" .. near .. "'?") or "")
      end
      if s[1] == "flag" then
        if inline then return nil, "moonrl " .. cmd .. ": option --" .. name .. " takes no value" end
        o[name] = true
      else
        local v = inline
        if v == nil then
          i = i + 1
          v = argv[i]
          if v == nil then
            return nil, "moonrl " .. cmd .. ": option --" .. name .. " needs a value (" .. s[2] .. ")"
          end
        end
        -- `--set ppo.lr 1e-4`: the value would be taken for a config file
        local after = argv[i + 1]
        if s[2] == "key=value" and not v:find("=", 1, true) and after ~= nil
          and (after:sub(1, 1) ~= "-" or tonumber(after)) then
          return nil, "moonrl " .. cmd .. ": --" .. name .. " " .. v .. " " .. after .. ": a setting is one " ..
            "argument, key=value: --" .. name .. " " .. v .. "=" .. after
        end
        if s[1] == "list" then
          o[name] = o[name] or {}
          table.insert(o[name], v)
        else
          o[name] = v
        end
      end
    elseif a:sub(1, 1) == "-" and #a > 1 and not tonumber(a) then
      return nil, "moonrl " .. cmd .. ": unknown option '" .. a .. "': accepted " .. table.concat(accepted, ", ")
    else
      o.positional[#o.positional + 1] = a
    end
    i = i + 1
  end
  if #o.positional > max_pos and not o.help then
    return nil, "moonrl " .. cmd .. ": unexpected argument '" .. o.positional[max_pos + 1] .. "'" ..
      (max_pos == 0 and ": this command takes no positional arguments" or
       ": accepted at most " .. max_pos .. " (see moonrl " .. cmd .. " --help)")
  end
  return o
end

function cmdline.int_option(cmd, o, name, min)
  local v = o[name]
  if v == nil then return true end
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or n < min then
    return nil, "moonrl " .. cmd .. ": --" .. name .. " " .. v .. ": expected an integer >= " .. min
  end
  o[name] = n
  return true
end

return cmdline

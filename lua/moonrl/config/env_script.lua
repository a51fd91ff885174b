-- moonrl.config.env_script - a Lua environment written as a table in the
-- experiment script (env = { lua = { observation = ..., reset = function ...
-- end, ... } }), turned into the text of an environment file: the trainer's
-- threads have Lua states of their own, so what reaches them is source
-- text, as a file's (never bytecode: the project refuses it).
--
-- How: each function of the table, and each local function of the script
-- they call, is cut out of the script's text (moonrl.config.funcsource:
-- the cut must compile to the very same bytecode); their upvalues are bound
-- again: numbers, strings and booleans as literals, tables of those as
-- constructors, math.* and bit.* functions by their names (what the
-- environment's sandbox has), the script's other local functions by their
-- own cut. Anything else (a string.* or table.* function, a table holding
-- functions, a nil, a function defined inside another) is refused, naming
-- the function and the upvalue: write the environment in a file then.
--
-- The text keeps the script's line numbers: line 1 names the script
-- (`--[==[moonrl env: PATH]==]`, the label messages use) and declares the
-- upvalues; each function sits on its own lines, as in the script; the
-- last line returns the table. So a Lua error in step reads
-- "exp.lua:52: ..." at the script's line 52.
--
--   script.source(t, text, origin) -> source | nil, err
--       t: the env.lua table; text: the script's source; origin: its path (the label)
--   script.label(source) -> the label a source made by script.source names, or nil

local funcsource = require("moonrl.config.funcsource")
local util = require("moonrl.util")

local script = {}

local MARK_OPEN, MARK_CLOSE = "--[==[moonrl env: ", "]==]"

function script.label(source)
  if type(source) ~= "string" or source:sub(1, #MARK_OPEN) ~= MARK_OPEN then return nil end
  local e = source:find(MARK_CLOSE, #MARK_OPEN + 1, true)
  local nl = source:find("\n", 1, true)
  if not e or (nl and nl < e) then return nil end
  return source:sub(#MARK_OPEN + 1, e - 1)
end

-- The names the environment's sandbox gives library functions.
local function library_names()
  local names = {}
  for _, lib in ipairs({ "math", "bit" }) do
    for k, v in pairs(_G[lib] or {}) do
      if type(v) == "function" then names[v] = lib .. "." .. k end
    end
  end
  for _, k in ipairs({ "assert", "error", "ipairs", "next", "pairs", "select", "tonumber", "tostring", "type",
    "unpack", "rawequal", "rawget" }) do
    if _G[k] then names[_G[k]] = k end
  end
  return names
end

local function is_name(k) return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil end

-- Lua source of a value made of numbers, strings, booleans and tables of them; nil, why otherwise.
local function constructor(v, seen)
  local lit = funcsource.literal(v)
  if lit then
    if type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge then
      for digits = 15, 17 do   -- the shortest that gives the same double back (fmt_number may round)
        local t = string.format("%." .. digits .. "g", v)
        if tonumber(t) == v then return t end
      end
    end
    return lit
  end
  if type(v) ~= "table" then return nil, util.describe(v):sub(1, 60) end
  seen = seen or {}
  if seen[v] then return nil, "a table that holds itself" end
  if getmetatable(v) ~= nil then return nil, "a table with a metatable" end
  seen[v] = true
  local parts, n = {}, #v
  for i = 1, n do
    local s, why = constructor(v[i], seen)
    if not s then return nil, why end
    parts[#parts + 1] = s
  end
  local keys = {}
  for k in pairs(v) do
    if not (type(k) == "number" and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local ks
    if is_name(k) then ks = k
    else
      local kl = funcsource.literal(k)
      if not kl then return nil, "a table with the key " .. util.describe(k):sub(1, 40) end
      ks = "[" .. kl .. "]"
    end
    local s, why = constructor(v[k], seen)
    if not s then return nil, why end
    parts[#parts + 1] = ks .. " = " .. s
  end
  seen[v] = nil
  return "{" .. table.concat(parts, ", ") .. "}"
end

function script.source(t, text, origin)
  if type(t) ~= "table" then return nil, "env.lua: expected a table, got " .. util.describe(t) end
  local read = function(path) return path == origin and text or nil end
  local libs = library_names()
  local where = "env.lua (" .. origin .. ")"
  -- every function to place: the table's (roots) and the local functions they reach
  local fns, order = {}, {}           -- f -> {expr, slot}; order: the fs
  local locals, local_of = {}, {}      -- upvalue name -> its source (or false: a function's slot)
  local function add(f, what)
    if fns[f] then return true end
    local e, why = funcsource.expression(f, read)
    if not e then
      return nil, where .. ": " .. what .. " (" .. funcsource.where(f) .. ") cannot be taken to the trainer's " ..
        "threads: " .. why .. "; write the environment in a file (env.lua = \"my_env.lua\")"
    end
    fns[f] = { e = e }
    order[#order + 1] = f
    for _, u in ipairs(e.upvalues) do
      local v, name = u.value, u.name
      local src
      if type(v) == "function" then
        if libs[v] then
          src = libs[v]
        else
          local info = debug.getinfo(v, "S")
          if info.what == "C" then
            return nil, where .. ": " .. what .. " uses " .. name .. ", a library function a Lua environment " ..
              "does not have (its sandbox: math, bit and the pure base functions; docs/environments.md)"
          end
          local ok, err = add(v, "the local function " .. name .. " (used by " .. what .. ")")
          if not ok then return nil, err end
          if fns[v].slot and fns[v].slot ~= name then
            return nil, where .. ": the local function at " .. funcsource.where(v) .. " is used under two names (" ..
              fns[v].slot .. ", " .. name .. "): give it one"
          end
          fns[v].slot = name
          src = false
        end
      else
        local s, why = constructor(v)
        if not s then
          return nil, where .. ": " .. what .. " uses the upvalue " .. name .. " (" ..
            (v == nil and "nil when the script ran" or why) .. "), which cannot be taken to the trainer's threads: " ..
            "numbers, strings, booleans, tables of them, math.* and bit.* functions and local functions are; " ..
            "or write the environment in a file (env.lua = \"my_env.lua\")"
        end
        src = s
      end
      if locals[name] ~= nil and locals[name] ~= src and not (src == false and local_of[name] == v) then
        return nil, where .. ": two functions use different values named " .. name .. ": rename one"
      end
      locals[name] = src
      if src == false then local_of[name] = v end
    end
    return true
  end
  local decl_keys, fn_keys = {}, {}
  for k, v in pairs(t) do
    if not is_name(k) then return nil, where .. ": the key " .. util.describe(k) .. " is not a name" end
    if type(v) == "function" then fn_keys[#fn_keys + 1] = k else decl_keys[#decl_keys + 1] = k end
  end
  table.sort(decl_keys)
  table.sort(fn_keys)
  for _, k in ipairs(fn_keys) do
    local ok, err = add(t[k], k)
    if not ok then return nil, err end
  end
  -- the roots' slots: their own local (or the local function they also are)
  local ret = {}
  for _, k in ipairs(decl_keys) do
    local s, why = constructor(t[k])
    if not s then return nil, where .. ": " .. k .. " = " .. why .. ": expected numbers, strings, booleans, tables" end
    ret[#ret + 1] = k .. " = " .. s
  end
  for _, k in ipairs(fn_keys) do
    local f = t[k]
    if not fns[f].slot then
      local slot = "moonrl_env_" .. k
      if locals[slot] ~= nil then return nil, where .. ": the name " .. slot .. " is moonrl's here: rename it" end
      fns[f].slot = slot
      locals[slot] = false
    end
    ret[#ret + 1] = k .. " = " .. fns[f].slot
  end
  -- line 1: the label and the locals; then each function on its script lines
  local names, values = {}, {}
  for name in pairs(locals) do names[#names + 1] = name end
  table.sort(names)
  for i, name in ipairs(names) do values[i] = locals[name] or "nil" end
  table.sort(order, function(a, b) return fns[a].e.first < fns[b].e.first end)
  local out = { MARK_OPEN .. origin .. MARK_CLOSE }
  if #names > 0 then out[#out + 1] = " local " .. table.concat(names, ", ") .. " = " .. table.concat(values, ", ") end
  local line = 1
  for i, f in ipairs(order) do
    local e = fns[f].e
    if i > 1 and e.first <= fns[order[i - 1]].e.last then
      return nil, where .. ": the functions at " .. funcsource.where(order[i - 1]) .. " and " .. funcsource.where(f) ..
        " share lines: put each on lines of its own"
    end
    out[#out + 1] = e.first > line and string.rep("\n", e.first - line) or "; "
    out[#out + 1] = fns[f].slot .. " = " .. e.text
    line = e.last
  end
  out[#out + 1] = "\nreturn { " .. table.concat(ret, ", ") .. " }\n"
  return table.concat(out)
end

return script

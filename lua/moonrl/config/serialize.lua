-- moonrl.config.serialize - a config table as Lua source that loads back
-- (through config.load_file) to an equal table: the run directory's
-- config.lua, and the profiles `moonrl doctor` writes.
--
--   serialize.serialize(t [, {header = "text"}]) -> Lua source "return { ... }"
--       known keys in schema order, then anything else sorted; schedules as
--       constructor calls; functions (function schedules, a warmup function,
--       hooks) by their source where config.funcsource can recover it, and
--       otherwise as a comment that names the function and says that this
--       file does not reproduce it
--       opts.read(path) -> text: how funcsource reads source files
--   serialize.lua_string(s) -> s as a Lua string literal
--   serialize.value(v [, read]) -> Lua source | nil, why   (one value)

local schema = require("moonrl.config.schema")
local schedule = require("moonrl.schedule")
local util = require("moonrl.util")
local funcsource = require("moonrl.config.funcsource")

local serialize = {}

function serialize.lua_string(s)
  return (string.format("%q", s):gsub("\\\n", "\\n"))
end

local function lua_number(x)
  if x ~= x then return "0/0" end
  if x == math.huge then return "math.huge" end
  if x == -math.huge then return "-math.huge" end
  return util.fmt_number(x)
end

local function lua_key(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return k end
  if type(k) == "string" then return "[" .. serialize.lua_string(k) .. "]" end
  return "[" .. lua_number(k) .. "]"
end

-- Writes value v (at dotted `path`) as Lua; a function whose source cannot
-- be recovered becomes a comment. opts.read: funcsource's file reader.
local function write_value(out, indent, path, v, e, seen, opts)
  local tv = type(v)
  if tv == "string" then return serialize.lua_string(v) end
  if tv == "number" then return lua_number(v) end
  if tv == "boolean" then return tostring(v) end
  if tv == "function" then
    local src, why = funcsource.source(v, opts.read)
    if src then return src end
    out[#out + 1] = indent .. "-- " .. path .. ": the function at " .. funcsource.where(v) ..
      " is not saved (" .. why .. "): this config does not reproduce it"
    return nil
  end
  if tv == "table" then
    if e and e.type == "schedule" and type(v) == "table" and schedule.is_schedule(v) then
      return schedule.to_lua(v)
    end
    if seen[v] then return nil end
    seen[v] = true
    if util.is_list(v) then
      local parts = {}
      for i = 1, #v do
        local s = write_value(out, indent, path .. "[" .. i .. "]", v[i], nil, seen, opts)
        if s then parts[#parts + 1] = s end
      end
      seen[v] = nil
      return "{" .. table.concat(parts, ", ") .. "}"
    end
    local lines = { "{" }
    local pad = indent .. "  "
    for _, k in ipairs(util.sorted_keys(v)) do
      local sub = path .. "." .. tostring(k)
      local s = write_value(lines, pad, sub, v[k], nil, seen, opts)
      if s then lines[#lines + 1] = pad .. lua_key(k) .. " = " .. s .. "," end
    end
    seen[v] = nil
    return table.concat(lines, "\n") .. "\n" .. indent .. "}"
  end
  out[#out + 1] = indent .. "-- " .. path .. ": a " .. tv .. " (not serialisable)"
  return nil
end

function serialize.value(v, read)
  local note = {}
  local s = write_value(note, "", "value", v, nil, {}, { read = read })
  if s then return s end
  return nil, ((note[1] or "not serialisable"):gsub("^%-%- value: ", ""))
end

function serialize.serialize(t, opts)
  opts = opts or {}
  local out = {}
  if opts.header then
    for line in (opts.header .. "\n"):gmatch("(.-)\n") do out[#out + 1] = "-- " .. line end
  end
  out[#out + 1] = "return {"
  local seen = {}
  local function emit(lines, indent, name, path, v, e)
    local s = write_value(lines, indent, path, v, e, seen, opts)
    if s then lines[#lines + 1] = indent .. lua_key(name) .. " = " .. s .. "," end
  end
  local done = {}
  -- known top-level keys, then sections in schema order, then anything else
  for _, e in ipairs(schema.keys) do
    if not e.section and t[e.key] ~= nil then emit(out, "  ", e.key, e.key, t[e.key], e); done[e.key] = true end
  end
  for _, s in ipairs(schema.sections) do
    local sec = t[s.name]
    done[s.name] = true
    if type(sec) == "table" then
      out[#out + 1] = "  " .. s.name .. " = {"
      local sdone = {}
      for _, e in ipairs(schema.keys) do
        if e.section == s.name and sec[e.name] ~= nil then
          emit(out, "    ", e.name, e.key, sec[e.name], e); sdone[e.name] = true
        end
      end
      for _, k in ipairs(util.sorted_keys(sec)) do
        if not sdone[k] then emit(out, "    ", k, s.name .. "." .. tostring(k), sec[k], nil) end
      end
      out[#out + 1] = "  },"
    elseif sec ~= nil then
      emit(out, "  ", s.name, s.name, sec, nil)
    end
  end
  for _, k in ipairs(util.sorted_keys(t)) do
    if not done[k] then emit(out, "  ", k, tostring(k), t[k], nil) end
  end
  out[#out + 1] = "}"
  return table.concat(out, "\n") .. "\n"
end

return serialize

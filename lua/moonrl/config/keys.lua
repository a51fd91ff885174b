-- moonrl.config.keys - dotted key paths ("ppo.lr") into nested config tables.
-- Shared by the other config modules; not part of the public interface.

local keys = {}

function keys.split(path)
  local parts = {}
  for p in (path .. "."):gmatch("([^.]*)%.") do parts[#parts + 1] = p end
  return parts
end

function keys.get(t, path)
  local cur = t
  for _, p in ipairs(keys.split(path)) do
    if type(cur) ~= "table" then return nil end
    cur = cur[p]
  end
  return cur
end

-- Creates the tables on the way (a --set of env.num_envs makes t.env).
function keys.set(t, path, v)
  local parts = keys.split(path)
  local cur = t
  for i = 1, #parts - 1 do
    if type(cur[parts[i]]) ~= "table" then cur[parts[i]] = {} end
    cur = cur[parts[i]]
  end
  cur[parts[#parts]] = v
end

-- Every part a Lua name: what --set accepts as a key.
function keys.valid(path)
  for _, p in ipairs(keys.split(path)) do
    if not p:match("^[%a_][%w_]*$") then return false end
  end
  return true
end

-- The table that holds schema entry e's value (nil when its section is absent).
function keys.holder_of(t, e)
  if e.section then return t[e.section] end
  return t
end

return keys

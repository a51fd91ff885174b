-- moonrl.config.merge - the built-in defaults and the layering of configs.
--
-- Layers merge deeply, section by section; a schema leaf (a list such as
-- policy.conv_channels, a schedule) is replaced whole, never merged, since
-- half of one list over another means nothing. The merge records, for every
-- leaf, which layer set it (provenance): resolve() uses that to tell a
-- setting the user made from one a profile or level made.
--
--   merge.defaults() -> table                  a fresh table of every default
--   merge.merge(base, over) -> table           deep merge into a new table
--   merge.into(acc, over, prefix, label, prov) in place, recording prov[path] = label
--   merge.fill_defaults(acc, prov)             puts back defaults a layer removed

local schema = require("moonrl.config.schema")
local util = require("moonrl.util")
local keys = require("moonrl.config.keys")

local merge = {}

function merge.defaults()
  local t = {}
  for _, s in ipairs(schema.sections) do t[s.name] = {} end
  for _, e in ipairs(schema.keys) do
    if e.default ~= nil then keys.set(t, e.key, util.deepcopy(e.default)) end
  end
  return t
end

-- Merges `over` into `acc` (in place); records in prov[path] the label of the
-- layer that set each leaf. Schema leaves (lists, schedules) replace; sections
-- merge; unknown map-shaped tables merge so validation can name their keys.
function merge.into(acc, over, prefix, label, prov)
  for _, k in ipairs(util.sorted_keys(over)) do
    local v = over[k]
    local path = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
    local is_section = prefix == nil and type(k) == "string" and schema.section_by_name[k] ~= nil
    if schema.by_key[path] and type(k) == "string" then
      acc[k] = util.deepcopy(v)
      prov[path] = label
    elseif is_section and type(v) == "table" then
      if type(acc[k]) ~= "table" then acc[k] = {} end
      merge.into(acc[k], v, path, label, prov)
    elseif type(v) == "table" and type(acc[k]) == "table" and not util.is_list(v) then
      merge.into(acc[k], v, path, label, prov)
    else
      acc[k] = util.deepcopy(v)
      prov[path] = label
    end
  end
  return acc
end

function merge.merge(base, over)
  local acc = util.deepcopy(base or {})
  return merge.into(acc, over or {}, nil, "merge", {})
end

-- Puts back the defaults of keys a layer removed (a section replaced by a
-- function and then by a partial table, say).
function merge.fill_defaults(acc, prov)
  for _, e in ipairs(schema.keys) do
    if e.default ~= nil then
      local holder = keys.holder_of(acc, e)
      if type(holder) == "table" and holder[e.name] == nil then
        holder[e.name] = util.deepcopy(e.default)
        prov[e.key] = "defaults"
      end
    end
  end
end

return merge

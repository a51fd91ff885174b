-- moonrl.config.warmup - the warm-up strategy, from a table or a function.
--
-- A config's `warmup` is either a table {updates=, restore=, prepare={...}}
-- or a function(info) returning such a table, where info is
-- {device = "cpu"|"cuda", level = "basic"|"advanced"|"ultra"|<path>,
--  num_envs = n|"auto"} (callers may add more fields). Missing fields take
-- the schema defaults; the result is a fresh table the runner can trust.
-- What warm-up does with it (run `updates` updates, snapshot/restore, capture
-- CUDA graphs) is the runner's and the engine's job.
--
-- Public functions
--   warmup.normalize(v, info) -> {updates=, restore=, prepare={...}} | nil, err
--   warmup.defaults() -> the schema defaults as a fresh table (addition)

local schema = require("moonrl.config.schema")
local util = require("moonrl.util")

local warmup = {}

local FIELDS = { "updates", "restore", "prepare" }

function warmup.defaults()
  local d = {}
  for _, f in ipairs(FIELDS) do d[f] = util.deepcopy(schema.by_key["warmup." .. f].default) end
  return d
end

function warmup.normalize(v, info)
  local from_function = false
  if v == nil then return warmup.defaults() end
  if type(v) == "function" then
    from_function = true
    local ok, r = pcall(v, info or {})
    if not ok then return nil, "warmup: the function failed: " .. tostring(r) end
    if r == nil then return warmup.defaults() end
    v = r
  end
  if type(v) ~= "table" then
    return nil, "warmup: " .. (from_function and "the function returned " or "expected a table or function(info), got ") ..
      util.describe(v) .. (from_function and ", expected a table {updates=, restore=, prepare=}" or "")
  end
  local out = warmup.defaults()
  local errs = {}
  for _, k in ipairs(util.sorted_keys(v)) do
    local e = schema.by_key["warmup." .. tostring(k)]
    if not e then
      local msg = "unknown key 'warmup." .. tostring(k) .. "'"
      local near = type(k) == "string" and util.closest(k, FIELDS)
      if near then msg = msg .. " - did you mean 'warmup." .. near .. "'?" end
      errs[#errs + 1] = msg
    else
      local ok, err = schema.check(e, v[k])
      if ok then out[k] = util.deepcopy(v[k]) else errs[#errs + 1] = err end
    end
  end
  if #errs > 0 then
    if from_function then errs[1] = "warmup function result: " .. errs[1] end
    return nil, table.concat(errs, "\n")
  end
  return out
end

return warmup

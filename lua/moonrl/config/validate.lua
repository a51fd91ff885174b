-- moonrl.config.validate - checking configs against moonrl.config.schema: whole
-- tables (validate), single keys (get, set), --set key=value text
-- (parse_set), with "did you mean" for unknown keys and the checks that
-- involve more than one key.
--
--   validate.validate(t [, {partial = true}]) -> true | nil, err (one error a line)
--   validate.recheck(t, path) -> true | nil, err   path's own check and the cross-key rules (one key changed)
--   validate.parse_set("k=v") -> path, value | nil, err
--   validate.get(t, "ppo.lr") -> value | nil, err     (err only for an unknown key)
--   validate.set(t, "ppo.lr", v [, {running = true}]) -> true | nil, err
--   validate.unknown_key(path) -> "unknown key 'x' - did you mean 'y'?"
--   validate.normalize_value(entry, v) -> the value as the resolved table holds it

local schema = require("moonrl.config.schema")
local schedule = require("moonrl.schedule")
local util = require("moonrl.util")
local warmup = require("moonrl.config.warmup")
local keys = require("moonrl.config.keys")
local value = require("moonrl.config.value")

local validate = {}

-- --set key=value ----------------------------------------------------------------

local SANDBOX_NAMES = { "linear", "cosine", "constant", "step" }

-- Adds "did you mean" to "attempt to call global 'linaer'" style errors.
function validate.hint_global(msg)
  local name = msg:match("global '([%w_]+)'")
  if name then
    local near = util.closest(name, SANDBOX_NAMES)
    if near and near ~= name then msg = msg .. " - did you mean '" .. near .. "'?" end
  end
  return msg
end

function validate.parse_set(text)
  if type(text) ~= "string" then
    return nil, "--set expects key=value, got " .. util.describe(text)
  end
  local k, v = text:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
  if not k then
    return nil, "--set " .. util.fmt_value(text) .. ": expected key=value, e.g. ppo.lr=1e-4"
  end
  if #k > validate.MAX_KEY_BYTES then
    return nil, "--set " .. util.fmt_value(text, 40) .. ": the key is " .. #k .. " bytes long: keys are at most " ..
      validate.MAX_KEY_BYTES .. " bytes, dotted names such as ppo.lr"
  end
  if k == "" or not keys.valid(k) then
    return nil, "--set " .. util.fmt_value(text) .. ": bad key " .. util.fmt_value(k) ..
      ": keys are dotted names such as ppo.lr"
  end
  -- A value for a string (or named-choice) key is the text as typed: name=2024,
  -- name=nan and name=true are names; quotes around it are optional.
  local e = schema.by_key[k]
  if e and (e.type == "string" or e.type == "enum") then
    return k, v:match('^"(.*)"$') or v:match("^'(.*)'$") or v
  end
  if v == "true" then return k, true end
  if v == "false" then return k, false end
  local n = tonumber(v)
  if n then return k, n end
  -- A table, a quoted string or a constructor call: read by a parser of the
  -- values' grammar (moonrl.config.value), never run as Lua.
  local first = v:sub(1, 1)
  if first == "{" or first == '"' or first == "'" or v:match("^[%a_][%w_]*%s*%(") then
    local res, err = value.parse(v)
    if res == nil then
      return nil, "--set " .. k .. ": cannot read the value " .. util.fmt_value(util.escape_bytes(v, true), 80) ..
        ": " .. err
    end
    return k, res
  end
  return k, v
end

-- validation ---------------------------------------------------------------------

local function suggest(path)
  local sec, leaf = path:match("^([^.]+)%.(.+)$")
  if not sec then leaf = path end
  local lleaf, lpath = leaf:lower(), path:lower()
  local limit = math.max(1, math.min(4, math.floor(#leaf / 3)))
  local best, best_d
  -- Only names within `limit` of the word's length can be within `limit`
  -- edits of it: the others are not compared (a long key costs nothing).
  local function consider(cand, word, name, penalty)
    if math.abs(#word - #name) + penalty > limit then return end
    local d = util.edit_distance(word, name) + penalty
    if best_d == nil or d < best_d then best, best_d = cand, d end
  end
  if not sec then
    for _, s in ipairs(schema.sections) do consider(s.name, lpath, s.name, 0) end
  end
  for _, e in ipairs(schema.keys) do
    local penalty = ((e.section or "") == (sec or "")) and 0 or 1
    consider(e.key, lleaf, e.name, penalty)
    for _, a in ipairs(e.aliases or {}) do
      consider(e.key, lleaf, a, penalty)
    end
    consider(e.key, lpath, e.key, 0)
  end
  if best_d and best_d <= limit then return best end
  return nil
end

local section_names = {}
for i, s in ipairs(schema.sections) do section_names[i] = s.name end

-- Keys that existed and were removed on purpose, with why: an old config
-- that still sets one learns what happened instead of only "unknown".
validate.REMOVED = {
  ["cuda.cudnn_benchmark"] = "it had no effect (the convolutions do not use cuDNN yet); it comes back with cuDNN",
  ["cuda.algo_cache"] = "it had no effect (the convolutions do not use cuDNN yet); it comes back with cuDNN",
}

-- Keys longer than this are refused at once, without looking for a near
-- one (the longest key moonrl has is under 40 bytes).
validate.MAX_KEY_BYTES = 128

function validate.unknown_key(path)
  if #path > validate.MAX_KEY_BYTES then
    return "unknown key " .. util.fmt_value(path, 40) .. " (" .. #path .. " bytes): keys are at most " ..
      validate.MAX_KEY_BYTES .. " bytes, dotted names such as ppo.lr"
  end
  if validate.REMOVED[path] then
    return "unknown key '" .. path .. "': removed, " .. validate.REMOVED[path] .. "; delete it from the config"
  end
  local msg = "unknown key '" .. path .. "'"
  local near = suggest(path)
  if near then return msg .. " - did you mean '" .. near .. "'?" end
  -- nothing near: name what is accepted there (the section's keys, or the sections)
  local sec = path:match("^([^.]+)%.")
  if sec and schema.section_by_name[sec] then
    local names = {}
    for _, e in ipairs(schema.keys) do
      if e.section == sec and not e.key:find(".", #sec + 2, true) then names[#names + 1] = e.name end
    end
    if #names > 0 then return msg .. "; " .. sec .. " accepts " .. table.concat(names, ", ") end
  end
  local top = {}
  for _, e in ipairs(schema.keys) do
    if (e.section or "") == "" and not e.key:find(".", 1, true) then top[#top + 1] = e.key end
  end
  return msg .. "; accepted at the top: " .. table.concat(top, ", ") .. " and the sections " ..
    table.concat(section_names, ", ") .. " (docs/config.md lists every key)"
end

local function cross_checks(t, errs, bad)
  local env, ppo, alerts = t.env, t.ppo, t.alerts
  local function ok(...)
    for _, k in ipairs({ ... }) do
      if bad[k] or keys.get(t, k) == nil then return false end
    end
    return true
  end
  local f = util.fmt_number
  if ok("env.density_min", "env.density_max") and env.density_min > env.density_max then
    errs[#errs + 1] = "env.density_min = " .. f(env.density_min) .. " is greater than env.density_max = " ..
      f(env.density_max) .. ": accepted density_min <= density_max"
  end
  -- the torus worlds (foraging, reach) place items and see a view of their grid; snake (envs/snake.h) has
  -- a walled board its view may pass and no items; the others (catch's board of 4 .. 32, which the engine
  -- checks; cartpole, pendulum, dials; a Lua file) use neither key
  local name = type(env) == "table" and env.name or "foraging"
  local snake = name == "snake"
  local torus = name == "foraging" or name == "reach"
  if torus and ok("env.density_max", "env.grid_size") and 2 * env.density_max + 1 > env.grid_size ^ 2 then
    errs[#errs + 1] = "env.density_max = " .. f(env.density_max) .. " does not fit a " .. f(env.grid_size) ..
      " x " .. f(env.grid_size) .. " grid: food + poison + the agent need 2 * density_max + 1 <= grid_size^2 cells"
  end
  if snake and ok("env.view_range", "env.grid_size") and env.view_range > env.grid_size - 1 then
    errs[#errs + 1] = "env.view_range = " .. f(env.view_range) .. " sees past the whole board: env.name = snake " ..
      "accepts view_range <= env.grid_size - 1 (" .. f(env.grid_size - 1) .. ")"
  elseif torus and ok("env.view_range", "env.grid_size") and 2 * env.view_range + 1 > env.grid_size then
    errs[#errs + 1] = "env.view_range = " .. f(env.view_range) .. " sees more than the grid: accepted 2 * view_range + 1 <= env.grid_size (" ..
      f(env.grid_size) .. ")"
  end
  if ok("ppo.minibatches", "ppo.rollout_steps", "env.num_envs") and type(env.num_envs) == "number" then
    local batch = env.num_envs * ppo.rollout_steps
    if batch > 2 ^ 31 then
      errs[#errs + 1] = "env.num_envs x ppo.rollout_steps = " .. f(batch) ..
        " samples is too large: accepted up to 2^31 = 2147483648"
    elseif batch % ppo.minibatches ~= 0 then
      errs[#errs + 1] = "ppo.minibatches = " .. f(ppo.minibatches) .. " does not divide the batch of " .. f(batch) ..
        " samples (env.num_envs " .. f(env.num_envs) .. " x ppo.rollout_steps " .. f(ppo.rollout_steps) ..
        "): accepted a divisor of " .. f(batch)
    end
  end
  -- a Lua environment (docs/environments.md): env.lua names it, env.name = lua follows (config.resolve)
  if type(env) == "table" and env.name == "lua" and env.lua == nil then
    errs[#errs + 1] = "env.name = \"lua\" needs env.lua: the path to the environment's .lua file (or a built-in's " ..
      "name, such as \"cartpole\")"
  end
  if ok("alerts.memory_warning", "alerts.memory_critical") and alerts.memory_warning > alerts.memory_critical then
    errs[#errs + 1] = "alerts.memory_warning = " .. f(alerts.memory_warning) .. " is above alerts.memory_critical = " ..
      f(alerts.memory_critical) .. ": accepted memory_warning <= memory_critical"
  end
end

-- Every error, one a line. opts.partial: a layer (profile, level, file), so
-- missing keys and cross-key checks are skipped.
function validate.validate(t, opts)
  opts = opts or {}
  if type(t) ~= "table" then return nil, "config: expected a table, got " .. util.describe(t) end
  local errs, bad = {}, {}
  local function check(e, v)
    local ok, err = schema.check(e, v)
    if not ok then errs[#errs + 1] = err; bad[e.key] = true end
  end
  for _, k in ipairs(util.sorted_keys(t)) do
    local v = t[k]
    local section = type(k) == "string" and schema.section_by_name[k]
    if type(k) ~= "string" then
      errs[#errs + 1] = "unexpected entry [" .. util.fmt_value(k) .. "] = " .. util.fmt_value(v) ..
        " at the top level: config keys are names"
    elseif section then
      if type(v) == "table" then
        for _, kk in ipairs(util.sorted_keys(v)) do
          local path = k .. "." .. tostring(kk)
          local e = type(kk) == "string" and schema.by_key[path]
          if e then check(e, v[kk]) else errs[#errs + 1] = validate.unknown_key(path) end
        end
      elseif not (section.func_ok and type(v) == "function") then
        errs[#errs + 1] = k .. ": expected a table" .. (section.func_ok and " or function(info)" or "") ..
          " (the " .. k .. " section), got " .. util.describe(v)
        bad[k] = true
      end
    elseif schema.by_key[k] then
      check(schema.by_key[k], v)
    elseif type(v) == "table" and next(v) ~= nil and not util.is_list(v)
      and not util.closest(k, section_names) then
      -- An unknown table not named like a section: name its keys, whose
      -- leaf names usually say where they belong (pop.lr -> ppo.lr).
      for _, kk in ipairs(util.sorted_keys(v)) do
        errs[#errs + 1] = validate.unknown_key(k .. "." .. tostring(kk))
      end
    else
      errs[#errs + 1] = validate.unknown_key(k)
    end
  end
  if not opts.partial then
    local missing_section = {}
    for _, e in ipairs(schema.keys) do
      local holder = keys.holder_of(t, e)
      if holder == nil then
        if not e.optional and not missing_section[e.section] then
          missing_section[e.section] = true
          errs[#errs + 1] = e.section .. " is missing: expected a table (the " .. e.section .. " section)"
        end
      elseif type(holder) == "table" and holder[e.name] == nil and not e.optional then
        errs[#errs + 1] = e.key .. " is missing (default " .. util.fmt_value(e.default) .. ")"
        bad[e.key] = true
      end
    end
    cross_checks(t, errs, bad)
  end
  if #errs > 0 then return nil, table.concat(errs, "\n") end
  return true
end

-- The cross-key rules alone, for a config validate() accepted whose one key
-- then changed (config.resolve choosing env.num_envs = "auto"): that key's
-- own check and the rules, not every key again. -> true | nil, err
function validate.recheck(t, path)
  local errs, bad = {}, {}
  local ok, err = schema.check(schema.by_key[path], keys.get(t, path))
  if not ok then errs[1] = err; bad[path] = true end
  cross_checks(t, errs, bad)
  if #errs > 0 then return nil, table.concat(errs, "\n") end
  return true
end

-- get / set ------------------------------------------------------------------------

function validate.get(t, path)
  if type(path) ~= "string" then return nil, "config.get: expected a key, got " .. util.describe(path) end
  if not schema.by_key[path] and not schema.section_by_name[path] then return nil, validate.unknown_key(path) end
  return keys.get(t, path)
end

function validate.normalize_value(e, v)
  if e.type == "schedule" and v ~= nil then return (schedule.normalize(v)) end
  return util.deepcopy(v)
end

function validate.set(t, path, v, opts)
  opts = opts or {}
  if type(path) ~= "string" then return nil, "config.set: expected a key, got " .. util.describe(path) end
  local e = schema.by_key[path]
  if not e then
    if path == "warmup" and not opts.running then
      local ok, err = warmup.normalize(v, {})
      if not ok then return nil, err end
      t.warmup = util.deepcopy(v)
      return true
    end
    if schema.section_by_name[path] then
      return nil, path .. " is a section: set its keys one at a time, e.g. " ..
        (path == "ppo" and "ppo.lr" or path .. ".<key>")
    end
    return nil, validate.unknown_key(path)
  end
  if opts.running and not e.hot then
    return nil, path .. " is not hot: it cannot change while the run is going (hot keys: " ..
      table.concat(schema.hot_keys(), ", ") .. ")"
  end
  local ok, err = schema.check(e, v)
  if not ok then return nil, err end
  if e.section and type(t[e.section]) ~= "table" then t[e.section] = {} end
  keys.set(t, path, validate.normalize_value(e, v))
  return true
end

return validate

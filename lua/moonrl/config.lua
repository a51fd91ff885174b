-- moonrl.config - config tables: defaults, layering, validation, live changes,
-- serialisation and the reference docs.
--
-- A config is a plain Lua table described by moonrl.schema. resolve() builds
-- the one a run uses from layers, each overriding the one before:
--   built-in defaults (schema)  <  hardware profile configs/hardware/<name>.lua
--   <  optimisation level configs/levels/<name>.lua  <  experiment file (or
--   table)  <  --set key=value
-- then validates it and adapts it to the device. Nothing here touches the
-- engine: engine.lua maps the resolved table onto mr_config.
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
--                config_dir = dir|nil (addition; default: <repo>/configs found
--                from this file's path) }
--   config.validate(t [, {partial = true}]) -> true | nil, err (one error a line)
--   config.get(t, "ppo.lr") -> value | nil, err     (err only for an unknown key)
--   config.set(t, "ppo.lr", v [, {running = true}]) -> true | nil, err
--   config.serialize(t [, {header = "text"}]) -> Lua source "return { ... }"
--   config.reference_markdown() -> string           docs/config.md
-- Additions
--   config.config_dir() -> the directory holding hardware/ and levels/
--   config.default_file([dir]) -> path of the built-in default experiment
--                                  (what `moonrl train` with no file runs)
--   config.run_dir(t [, time]) -> t.dir or "runs/<name>-<YYYYmmdd-HHMMSS>"
--   config.sandbox() -> the environment config files run in (a fresh table)
--
-- Config files run with their own globals (nothing leaks into moonrl's): the
-- constructors linear, cosine, constant, step and moonrl.schedule; the pure
-- standard library (string, math, table, bit, pairs, ...), os.time/clock/
-- date/getenv, print and require (hooks defined in a config may need modules).
-- No io, no os.execute, no loadfile/dofile. A config is trusted code like
-- any script; the sandbox keeps it tidy, it is not a security boundary.
--
-- What resolve() does beyond merging
--   - hardware/level names are taken from opts, else --set, else the file,
--     else "auto"/"advanced"; "auto" picks profile cuda when detect().gpus > 0,
--     else cpu. The resolved table records the profile actually used.
--   - Schedules come back normalised: a table {kind, from, to[, gamma, every]}
--     (numbers become constants, step gets its `to`) or a function.
--   - On a cpu device (device = "cpu", or "auto" without a GPU), gpu_only
--     settings that a profile or level set are listed in `notes` as not
--     applying; a non-fp32 precision from a profile/level is reset to fp32
--     with a note, one the user set (file or --set) is an error.
--     env.num_envs = "auto" becomes 192 on cpu (with a note); on a GPU it is
--     chosen from detect().gpu_memory (bytes, optional; 192 without it), so
--     the resolved table always holds a number.
--   - A warmup function is called once with {device, level, num_envs} to check
--     what it returns; the resolved table keeps the function.

local schema = require("moonrl.schema")
local schedule = require("moonrl.schedule")
local util = require("moonrl.util")
local warmup = require("moonrl.warmup")

local config = {}

local CPU_AUTO_NUM_ENVS = 192
local auto_num_envs -- defined with resolve()

-- paths -----------------------------------------------------------------------

local function split_path(path)
  local parts = {}
  for p in (path .. "."):gmatch("([^.]*)%.") do parts[#parts + 1] = p end
  return parts
end

local function get_path(t, path)
  local cur = t
  for _, p in ipairs(split_path(path)) do
    if type(cur) ~= "table" then return nil end
    cur = cur[p]
  end
  return cur
end

local function set_path(t, path, v)
  local parts = split_path(path)
  local cur = t
  for i = 1, #parts - 1 do
    if type(cur[parts[i]]) ~= "table" then cur[parts[i]] = {} end
    cur = cur[parts[i]]
  end
  cur[parts[#parts]] = v
end

function config.config_dir()
  local src = debug.getinfo(1, "S").source
  if src:sub(1, 1) == "@" then
    local root = src:sub(2):match("^(.-)lua/moonrl/config%.lua$")
    if root then return root .. "configs" end
  end
  return "configs"
end

function config.default_file(dir)
  return (dir or config.config_dir()) .. "/default.lua"
end

function config.run_dir(t, time)
  if t.dir then return t.dir end
  return "runs/" .. tostring(t.name or "default") .. "-" .. os.date("%Y%m%d-%H%M%S", time or os.time())
end

-- The table that holds entry e's value (nil when its section is absent).
local function holder_of(t, e)
  if e.section then return t[e.section] end
  return t
end

-- defaults and merging ------------------------------------------------------------

function config.defaults()
  local t = {}
  for _, s in ipairs(schema.sections) do t[s.name] = {} end
  for _, e in ipairs(schema.keys) do
    if e.default ~= nil then set_path(t, e.key, util.deepcopy(e.default)) end
  end
  return t
end

-- Merges `over` into `acc` (in place); records in prov[path] the label of the
-- layer that set each leaf. Schema leaves (lists, schedules) replace; sections
-- merge; unknown map-shaped tables merge so validation can name their keys.
local function merge_into(acc, over, prefix, label, prov)
  for _, k in ipairs(util.sorted_keys(over)) do
    local v = over[k]
    local path = prefix and (prefix .. "." .. tostring(k)) or tostring(k)
    local is_section = prefix == nil and type(k) == "string" and schema.section_by_name[k] ~= nil
    if schema.by_key[path] and type(k) == "string" then
      acc[k] = util.deepcopy(v)
      prov[path] = label
    elseif is_section and type(v) == "table" then
      if type(acc[k]) ~= "table" then acc[k] = {} end
      merge_into(acc[k], v, path, label, prov)
    elseif type(v) == "table" and type(acc[k]) == "table" and not util.is_list(v) then
      merge_into(acc[k], v, path, label, prov)
    else
      acc[k] = util.deepcopy(v)
      prov[path] = label
    end
  end
  return acc
end

function config.merge(base, over)
  local acc = util.deepcopy(base or {})
  return merge_into(acc, over or {}, nil, "merge", {})
end

-- Puts back the defaults of keys a layer removed (a section replaced by a
-- function and then by a partial table, say).
local function fill_defaults(acc, prov)
  for _, e in ipairs(schema.keys) do
    if e.default ~= nil then
      local holder = holder_of(acc, e)
      if type(holder) == "table" and holder[e.name] == nil then
        holder[e.name] = util.deepcopy(e.default)
        prov[e.key] = "defaults"
      end
    end
  end
end

-- config files ------------------------------------------------------------------

function config.sandbox()
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
local function hint_global(msg)
  local name = msg:match("global '([%w_]+)'")
  if name then
    local near = util.closest(name, SANDBOX_NAMES)
    if near and near ~= name then msg = msg .. " - did you mean '" .. near .. "'?" end
  end
  return msg
end

function config.load_file(path)
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
  setfenv(chunk, config.sandbox())
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
    return hint_global(msg)
  end)
  if not ok then return nil, res end
  if type(res) ~= "table" then
    return nil, path .. ": the config file returned " .. util.describe(res) ..
      ", expected a table: end the file with `return { ... }`"
  end
  return res
end

-- --set key=value ----------------------------------------------------------------

local function valid_path(path)
  for _, p in ipairs(split_path(path)) do
    if not p:match("^[%a_][%w_]*$") then return false end
  end
  return true
end

function config.parse_set(text)
  if type(text) ~= "string" then
    return nil, "--set expects key=value, got " .. util.describe(text)
  end
  local k, v = text:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
  if not k then
    return nil, "--set " .. util.fmt_value(text) .. ": expected key=value, e.g. ppo.lr=1e-4"
  end
  if k == "" or not valid_path(k) then
    return nil, "--set " .. util.fmt_value(text) .. ": bad key " .. util.fmt_value(k) ..
      ": keys are dotted names such as ppo.lr"
  end
  if v == "true" then return k, true end
  if v == "false" then return k, false end
  local n = tonumber(v)
  if n then return k, n end
  local first = v:sub(1, 1)
  if first == "{" or first == '"' or first == "'" or v:match("^[%a_][%w_]*%s*%(") then
    local env = schedule.env()
    env.math = math
    local chunk, err = load("return " .. v, "=value", "t", env)
    local ok, res
    if chunk then
      ok, res = pcall(chunk)
      if not ok then err = res end
    end
    if not chunk or not ok then
      err = tostring(err):gsub("^value:%d+: ", "")
      return nil, "--set " .. k .. ": cannot read the value " .. util.fmt_value(v) .. ": " .. hint_global(err)
    end
    if res == nil then
      return nil, "--set " .. k .. ": the value " .. util.fmt_value(v) .. " is nil"
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
  local best, best_d
  local function consider(cand, d)
    if best_d == nil or d < best_d then best, best_d = cand, d end
  end
  if not sec then
    for _, s in ipairs(schema.sections) do consider(s.name, util.edit_distance(lpath, s.name)) end
  end
  for _, e in ipairs(schema.keys) do
    local penalty = ((e.section or "") == (sec or "")) and 0 or 1
    consider(e.key, util.edit_distance(lleaf, e.name) + penalty)
    for _, a in ipairs(e.aliases or {}) do
      consider(e.key, util.edit_distance(lleaf, a) + penalty)
    end
    consider(e.key, util.edit_distance(lpath, e.key))
  end
  local limit = math.max(1, math.min(4, math.floor(#leaf / 3)))
  if best_d and best_d <= limit then return best end
  return nil
end

local section_names = {}
for i, s in ipairs(schema.sections) do section_names[i] = s.name end

local function unknown_key(path)
  local msg = "unknown key '" .. path .. "'"
  local near = suggest(path)
  if near then msg = msg .. " - did you mean '" .. near .. "'?" end
  return msg
end

local function cross_checks(t, errs, bad)
  local env, ppo, alerts = t.env, t.ppo, t.alerts
  local function ok(...)
    for _, k in ipairs({ ... }) do
      if bad[k] or get_path(t, k) == nil then return false end
    end
    return true
  end
  local f = util.fmt_number
  if ok("env.density_min", "env.density_max") and env.density_min > env.density_max then
    errs[#errs + 1] = "env.density_min = " .. f(env.density_min) .. " is greater than env.density_max = " ..
      f(env.density_max) .. ": accepted density_min <= density_max"
  end
  if ok("env.density_max", "env.grid_size") and 2 * env.density_max + 1 > env.grid_size ^ 2 then
    errs[#errs + 1] = "env.density_max = " .. f(env.density_max) .. " does not fit a " .. f(env.grid_size) ..
      " x " .. f(env.grid_size) .. " grid: food + poison + the agent need 2 * density_max + 1 <= grid_size^2 cells"
  end
  if ok("env.view_range", "env.grid_size") and 2 * env.view_range + 1 > env.grid_size then
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
  if ok("alerts.memory_warning", "alerts.memory_critical") and alerts.memory_warning > alerts.memory_critical then
    errs[#errs + 1] = "alerts.memory_warning = " .. f(alerts.memory_warning) .. " is above alerts.memory_critical = " ..
      f(alerts.memory_critical) .. ": accepted memory_warning <= memory_critical"
  end
end

-- Every error, one a line. opts.partial: a layer (profile, level, file), so
-- missing keys and cross-key checks are skipped.
function config.validate(t, opts)
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
          if e then check(e, v[kk]) else errs[#errs + 1] = unknown_key(path) end
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
        errs[#errs + 1] = unknown_key(k .. "." .. tostring(kk))
      end
    else
      errs[#errs + 1] = unknown_key(k)
    end
  end
  if not opts.partial then
    local missing_section = {}
    for _, e in ipairs(schema.keys) do
      local holder = holder_of(t, e)
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

-- get / set ------------------------------------------------------------------------

function config.get(t, path)
  if type(path) ~= "string" then return nil, "config.get: expected a key, got " .. util.describe(path) end
  if not schema.by_key[path] and not schema.section_by_name[path] then return nil, unknown_key(path) end
  return get_path(t, path)
end

local function normalize_value(e, v)
  if e.type == "schedule" and v ~= nil then return (schedule.normalize(v)) end
  return util.deepcopy(v)
end

function config.set(t, path, v, opts)
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
    return nil, unknown_key(path)
  end
  if opts.running and not e.hot then
    return nil, path .. " is not hot: it cannot change while the run is going (hot keys: " ..
      table.concat(schema.hot_keys(), ", ") .. ")"
  end
  local ok, err = schema.check(e, v)
  if not ok then return nil, err end
  if e.section and type(t[e.section]) ~= "table" then t[e.section] = {} end
  set_path(t, path, normalize_value(e, v))
  return true
end

-- resolve ----------------------------------------------------------------------------

local USER_SOURCE = { file = true, config = true, ["--set"] = true }

local function is_user(label)
  return label ~= nil and USER_SOURCE[label:match("^(%S+)")] == true
end

-- A gpu_only value that asks for nothing (off, empty): no note needed.
local function inert(v)
  return v == false or v == "" or (type(v) == "table" and next(v) == nil)
end

local function note_value(v)
  if type(v) == "string" then return v end
  return util.fmt_value(v)
end

-- env.num_envs = "auto" on a GPU. With the engine at hand (detect() gives
-- fit_num_envs and the card's memory, gpu_memory and gpu_memory_free): the
-- most environments whose CUDA trainer - the engine's own plan of every
-- device buffer for these shapes - fits in 90% of what the allocator may take
-- (the card x cuda.memory_fraction, at most what is free now; the 10% leave
-- room for the allocator's rounding, cuBLAS and the CUDA context). Without
-- the engine (a bare config check): an estimate of the training activations
-- in half of that, 64 .. 8192. Without the card's memory: the reference 192.
auto_num_envs = function(acc, info)
  local mem = tonumber(info.gpu_memory)
  if not mem or mem <= 0 then return CPU_AUTO_NUM_ENVS, "GPU memory unknown: the reference setting" end
  local env, policy, ppo = acc.env, acc.policy, acc.ppo
  local limit = mem * acc.cuda.memory_fraction
  local free = tonumber(info.gpu_memory_free)
  if free and free < limit then limit = free end
  if info.fit_num_envs then
    local budget = 0.9 * limit
    local n, err = info.fit_num_envs(acc, budget)
    if not n then return nil, "env.num_envs = auto: " .. tostring(err) end
    return n, string.format("the most whose buffers (the engine's plan for these shapes) fit in %.1f GiB, 90%% of " ..
      "%.1f GiB x cuda.memory_fraction %s%s, and stay within the kernels' 2^31-element buffers", budget / 2 ^ 30,
      mem / 2 ^ 30,
      util.fmt_number(acc.cuda.memory_fraction), free and free < mem * acc.cuda.memory_fraction and
      string.format(", capped by the %.1f GiB free now", free / 2 ^ 30) or "")
  end
  local v2 = (2 * env.view_range + 1) ^ 2
  local channels = 0
  for _, c in ipairs(policy.conv_channels) do channels = channels + c end
  local per_sample = 12 * (channels * v2 + policy.hidden + policy.critic_hidden + 4 * v2)
  local budget = 0.5 * limit
  local n = math.floor(budget * ppo.minibatches / (per_sample * ppo.rollout_steps) / 64) * 64
  n = math.max(64, math.min(8192, n))
  while n > 64 and (n * ppo.rollout_steps) % ppo.minibatches ~= 0 do n = n - 64 end
  return n, string.format("training activations of %d x %d samples in half of %.1f GiB x cuda.memory_fraction %s",
    n, ppo.rollout_steps, mem / 2 ^ 30, util.fmt_number(acc.cuda.memory_fraction))
end

local function layer_file(kind, name, dir)
  if name:match("%.lua$") then return name end
  return dir .. "/" .. kind .. "/" .. name .. ".lua"
end

local function load_layer(kind, name, dir)
  local path = layer_file(kind == "profile" and "hardware" or "levels", name, dir)
  local fh = io.open(path, "r")
  if not fh then
    return nil, (kind == "profile" and "hardware profile " or "level ") .. util.fmt_value(name) ..
      " not found: no file " .. path
  end
  fh:close()
  local t, err = config.load_file(path)
  if not t then return nil, err end
  for _, forbidden in ipairs({ "hardware", "level" }) do
    if t[forbidden] ~= nil then
      return nil, path .. ": a " .. (kind == "profile" and "hardware profile" or "level") ..
        " cannot set " .. forbidden .. " (it is chosen by the experiment)"
    end
  end
  local ok, verr = config.validate(t, { partial = true })
  if not ok then return nil, path .. ":\n" .. verr end
  return t
end

function config.resolve(opts)
  opts = opts or {}
  local errs, notes = {}, {}
  local dir = opts.config_dir or config.config_dir()

  -- the experiment's own layers
  local file_layer, file_label = {}, nil
  if type(opts.file) == "string" then
    local t, err = config.load_file(opts.file)
    if not t then return nil, err end
    file_layer, file_label = t, "file " .. opts.file
  elseif type(opts.file) == "table" then
    file_layer, file_label = util.deepcopy(opts.file), "config table"
  elseif opts.file ~= nil then
    return nil, "config.resolve: file must be a path, a table or nil, got " .. util.describe(opts.file)
  end
  local set_layer = {}
  for _, s in ipairs(opts.sets or {}) do
    local path, v = config.parse_set(s)
    if path then set_path(set_layer, path, v) else errs[#errs + 1] = v end
  end

  -- which profile and level
  local hardware = opts.hardware or set_layer.hardware or file_layer.hardware or "auto"
  local level = opts.level or set_layer.level or file_layer.level or "advanced"
  local bad_name = false
  for _, pair in ipairs({ { "hardware", hardware }, { "level", level } }) do
    local ok, err = schema.check(schema.by_key[pair[1]], pair[2])
    if not ok then errs[#errs + 1] = err; bad_name = true end
  end
  if bad_name then return nil, table.concat(errs, "\n") end

  local info = { gpus = 0 }
  if opts.detect then
    local ok, r = pcall(opts.detect)
    if ok and type(r) == "table" then
      info = r
    else
      notes[#notes + 1] = "hardware detection failed (" .. tostring(ok and util.describe(r) or r) ..
        "): assuming no GPU"
    end
  end
  local gpus = tonumber(info.gpus) or 0
  local profile = hardware
  if hardware == "auto" then
    profile = gpus > 0 and "cuda" or "cpu"
    notes[#notes + 1] = "hardware = auto: " .. gpus .. " GPU" .. (gpus == 1 and "" or "s") ..
      " detected, using profile " .. profile
  end

  local profile_layer, perr = load_layer("profile", profile, dir)
  if not profile_layer then return nil, perr end
  local level_layer, lerr = load_layer("level", level, dir)
  if not level_layer then return nil, lerr end

  -- layering
  local prov = {}
  local acc = config.defaults()
  for _, e in ipairs(schema.keys) do prov[e.key] = "defaults" end
  merge_into(acc, profile_layer, nil, "profile " .. profile, prov)
  merge_into(acc, level_layer, nil, "level " .. level, prov)
  merge_into(acc, file_layer, nil, file_label or "file", prov)
  merge_into(acc, set_layer, nil, "--set", prov)
  fill_defaults(acc, prov)
  acc.hardware, acc.level = profile, level

  local ok, verr = config.validate(acc)
  if not ok then errs[#errs + 1] = verr end
  if #errs > 0 then return nil, table.concat(errs, "\n") end

  -- the device
  local num_envs_was_auto = acc.env.num_envs == "auto"
  local device = acc.device
  if device == "auto" then device = gpus > 0 and "cuda" or "cpu" end
  if device == "cpu" then
    if acc.precision ~= "fp32" then
      local src = prov.precision
      if is_user(src) then
        return nil, "precision = " .. util.fmt_value(acc.precision) .. " (from " .. src ..
          ") needs CUDA, but this run is on cpu (device = " .. util.fmt_value(acc.device) ..
          (acc.device == "auto" and ", no GPU found" or "") ..
          "): the CPU backend runs fp32 only; set precision = \"fp32\", or device = \"cuda\" on a GPU machine"
      end
      notes[#notes + 1] = "precision = " .. acc.precision .. " (from " .. src ..
        ") does not apply on cpu: using fp32"
      acc.precision = "fp32"
      prov.precision = "cpu"
    end
    local by_source, order = {}, {}
    for _, e in ipairs(schema.keys) do
      if e.gpu_only and e.key ~= "precision" and prov[e.key] ~= "defaults" then
        local holder = holder_of(acc, e)
        local v = nil
        if type(holder) == "table" then v = holder[e.name] end
        if v ~= nil and not inert(v) then
          local src = prov[e.key]
          if not by_source[src] then by_source[src] = {}; order[#order + 1] = src end
          table.insert(by_source[src], e.key .. " = " .. note_value(v))
        end
      end
    end
    for _, src in ipairs(order) do
      local list = by_source[src]
      notes[#notes + 1] = table.concat(list, ", ") .. " (from " .. src .. ") " ..
        (#list == 1 and "does" or "do") .. " not apply on cpu"
    end
    if acc.env.num_envs == "auto" then
      acc.env.num_envs = CPU_AUTO_NUM_ENVS
      notes[#notes + 1] = "env.num_envs = auto is chosen by the GPU; on cpu using " .. CPU_AUTO_NUM_ENVS
    end
  elseif acc.env.num_envs == "auto" then
    local n, why = auto_num_envs(acc, info)
    if not n then return nil, why end
    acc.env.num_envs = n
    notes[#notes + 1] = "env.num_envs = auto: " .. n .. " (" .. why .. ")"
  end
  if num_envs_was_auto then
    -- The chosen num_envs must still divide into minibatches and so on.
    local ok2, verr2 = config.validate(acc)
    if not ok2 then return nil, verr2 end
  end

  for _, e in ipairs(schema.keys) do
    if e.type == "schedule" then set_path(acc, e.key, normalize_value(e, get_path(acc, e.key))) end
  end

  if type(acc.warmup) == "function" then
    local w, werr = warmup.normalize(acc.warmup, { device = device, level = level, num_envs = acc.env.num_envs })
    if not w then return nil, werr end
  end
  return acc, notes
end

-- serialisation ----------------------------------------------------------------------

local function lua_string(s)
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
  if type(k) == "string" then return "[" .. lua_string(k) .. "]" end
  return "[" .. lua_number(k) .. "]"
end

-- Writes value v (at dotted `path`) as Lua; functions become comments.
local function write_value(out, indent, path, v, e, seen)
  local tv = type(v)
  if tv == "string" then return lua_string(v) end
  if tv == "number" then return lua_number(v) end
  if tv == "boolean" then return tostring(v) end
  if tv == "table" then
    if e and e.type == "schedule" and schedule.is_schedule(v) then return schedule.to_lua(v) end
    if seen[v] then return nil end
    seen[v] = true
    if util.is_list(v) then
      local parts = {}
      for i = 1, #v do
        local s = write_value(out, indent, path .. "[" .. i .. "]", v[i], nil, seen)
        if s then parts[#parts + 1] = s end
      end
      seen[v] = nil
      return "{" .. table.concat(parts, ", ") .. "}"
    end
    local lines = { "{" }
    local pad = indent .. "  "
    for _, k in ipairs(util.sorted_keys(v)) do
      local sub = path .. "." .. tostring(k)
      local s = write_value(lines, pad, sub, v[k], nil, seen)
      if s then lines[#lines + 1] = pad .. lua_key(k) .. " = " .. s .. "," end
    end
    seen[v] = nil
    return table.concat(lines, "\n") .. "\n" .. indent .. "}"
  end
  out[#out + 1] = indent .. "-- " .. path .. ": a " .. tv .. " (not serialisable)"
  return nil
end

function config.serialize(t, opts)
  opts = opts or {}
  local out = {}
  if opts.header then
    for line in (opts.header .. "\n"):gmatch("(.-)\n") do out[#out + 1] = "-- " .. line end
  end
  out[#out + 1] = "return {"
  local seen = {}
  local function emit(lines, indent, name, path, v, e)
    local s = write_value(lines, indent, path, v, e, seen)
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

-- reference docs ------------------------------------------------------------------------

local function md_cell(s)
  return (tostring(s):gsub("|", "\\|"))
end

local function default_text(e)
  local d = e.default
  if d == nil then return "none" end
  if e.type == "schedule" then return "`" .. schedule.to_lua(d) .. "`" end
  if type(d) == "string" then return "`" .. lua_string(d) .. "`" end
  return "`" .. util.fmt_value(d, 200) .. "`"
end

function config.reference_markdown()
  local L = {}
  local function add(s) L[#L + 1] = s end
  add("# moonrl configuration reference")
  add("")
  add("Generated from `lua/moonrl/schema.lua` by `luajit lua/moonrl/gen_docs.lua`: edit the schema, not")
  add("this file (`spec/gen_docs_spec.lua` fails when the two differ).")
  add("")
  add("A config is a Lua table. The table a run uses is built from layers, each overriding the one")
  add("before: built-in defaults < hardware profile (`configs/hardware/<hardware>.lua`) < optimisation")
  add("level (`configs/levels/<level>.lua`) < experiment file < `--set key=value`. It is validated")
  add("before anything starts: an unknown key, a wrong type or an out-of-range value is an error that")
  add("names the key, the value and what is accepted.")
  add("")
  add("- **Schedules** (`ppo.lr`, `ppo.clip`, `ppo.ent_coef`) take a number (a constant),")
  add("  `linear(from, to)`, `cosine(from, to)`, `constant(v)`, `step(from, gamma, every[, to])`,")
  add("  the table form `{kind = \"linear\", from = ..., to = ...}`, or a Lua `function(progress)`;")
  add("  progress runs from 0 to 1 over training. `step` is `from * gamma^floor(p / every)`, never past `to`.")
  add("- **hot** keys can change while a run is going (`moonrl ctl RUN_DIR set key=value`).")
  add("- **CUDA only** settings are reported as not applying on cpu; a non-fp32 `precision` from a")
  add("  profile or level falls back to fp32 there, while one set by the experiment is an error.")
  add("- `warmup` may also be a `function(info)` returning the `warmup` table, where `info` is")
  add("  `{device = ..., level = ..., num_envs = ...}`.")
  add("")
  add("| key | default | accepted | hot | description |")
  add("|---|---|---|---|---|")
  for _, e in ipairs(schema.keys) do
    local desc = e.desc
    if e.gpu_only then
      desc = desc .. (e.key == "precision" and " (bf16, fp16: CUDA only)" or " (CUDA only)")
    end
    add("| `" .. e.key .. "` | " .. md_cell(default_text(e)) .. " | " .. md_cell(schema.accepted_text(e)) ..
      " | " .. (e.hot and "yes" or "no") .. " | " .. md_cell(desc) .. " |")
  end
  add("")
  return table.concat(L, "\n")
end

return config

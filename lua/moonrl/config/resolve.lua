-- moonrl.config.resolve - the config a run uses, from its layers:
--   built-in defaults (schema)  <  hardware profile configs/hardware/<name>.lua
--   <  optimisation level configs/levels/<name>.lua  <  experiment file (or
--   table)  <  --set key=value
-- then validated and adapted to the device.
--
--   resolve.resolve(opts) -> resolved, notes | nil, err   (config.resolve: see
--                                                         moonrl.config for opts)
--   resolve.line_of(text, path) -> line | nil   where a config file's text sets a key
--
-- An unknown key the experiment's file sets is reported with the file and
-- line: "bad.lua:6: unknown key 'ppo.learnig_rate' - did you mean 'ppo.lr'?".
--
-- What resolve() does beyond merging
--   - hardware/level names are taken from opts, else --set, else the file,
--     else "auto"/"advanced"; "auto" picks profile cuda when detect().gpus > 0,
--     else cpu. The resolved table records the profile actually used.
--   - Schedules come back normalised: a table {kind, from, to[, gamma, every]}
--     (numbers become constants, step gets its `to`) or a function.
--   - On a cpu device (device = "cpu", or "auto" without a GPU), gpu_only
--     settings that a profile or level set are listed in `notes` as not
--     applying; a non-fp32 precision from a profile/level becomes bf16
--     where detect().cpu_bf16 is AMX (bf16 itself then stays silently) and
--     fp32 elsewhere, with a note; bf16 the user set (file or --set) runs
--     on AVX512-BF16 too; one the user set that the CPU cannot run is an
--     error.
--     env.num_envs = "auto" becomes 192 on cpu (with a note); on a GPU it is
--     chosen from detect().gpu_memory (bytes, optional; 192 without it), so
--     the resolved table always holds a number.
--   - A warmup function is called once with {device, level, num_envs} to check
--     what it returns; the resolved table keeps the function.

local schema = require("moonrl.config.schema")
local util = require("moonrl.util")
local warmup = require("moonrl.config.warmup")
local keys = require("moonrl.config.keys")
local loader = require("moonrl.config.load")
local merge = require("moonrl.config.merge")
local resources = require("moonrl.resources")
local validate = require("moonrl.config.validate")

local resolve = {}

-- notes list -> { [text] = true } for the notes of resolve.resolve that only tell how a
-- default resolved (moonrl.run prints those at verbose only); weak: gone with the list
resolve.default_notes = setmetatable({}, { __mode = "k" })

local CPU_AUTO_NUM_ENVS = 192
local DEFAULT_EXPERIMENT = "configs/default.lua"

local USER_SOURCE = { file = true, config = true, ["--set"] = true }

local function is_user(label)
  return label ~= nil and USER_SOURCE[label:match("^(%S+)")] == true
end

-- A gpu_only value that asks for nothing (off, empty): no note needed.
local function inert(v)
  return v == false or v == "" or (type(v) == "table" and next(v) == nil)
end

-- The line of a config file's text where `path` ("ppo.lr", "totl_steps") is
-- set: its leaf name assigned after the line that opens its section (the
-- first such line anywhere when the section's line is not found), or the
-- whole dotted name quoted; nil when neither is there.
function resolve.line_of(text, path)
  local sec, leaf = path:match("^(.-)%.([^.]+)$")
  leaf = leaf or path
  local n, in_sec, first = 0, sec == nil, nil
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local code = line:gsub("%-%-.*$", "")
    if code:find('"' .. path .. '"', 1, true) or code:find("'" .. path .. "'", 1, true) then return n end
    if sec and code:find("%f[%w_]" .. sec:gsub("%p", "%%%0") .. "%s*=%s*{") then in_sec = true end
    local set = code:find("%f[%w_]" .. leaf:gsub("%p", "%%%0") .. "%s*=")
    if set then
      if in_sec then return n end
      first = first or n
    end
  end
  return first
end

-- Validation's messages with the file and line of each unknown key that the
-- experiment's file set (prov[path] is the file's label): "bad.lua:6: unknown
-- key 'ppo.learnig_rate' - did you mean 'ppo.lr'?".
local function in_file(msg, prov, file_label)
  local origin = file_label and file_label:match("^file (.+)$")
  if not origin then return msg end
  local text
  local out = {}
  for line in (msg .. "\n"):gmatch("([^\n]*)\n") do
    local path = line:match("^unknown key '([^']+)'")
    if path and (prov[path] == file_label or prov[path:match("^[^.]+")] == file_label) then
      if not text then
        text = util.read_file(origin)
        if not text then
          local okr, t = pcall(resources.read, origin)
          text = okr and t or ""
        end
      end
      local n = resolve.line_of(text, path)
      line = origin .. (n and (":" .. n) or "") .. ": " .. line
    end
    out[#out + 1] = line
  end
  return table.concat(out, "\n")
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
local function auto_num_envs(acc, info)
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
      "%.1f GiB x cuda.memory_fraction %s%s, and whose every kernel job stays within 2^31 elements (a conv chunk, " ..
      "a linear layer's rows)", budget / 2 ^ 30,
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

function resolve.resolve(opts)
  opts = opts or {}
  local errs, notes = {}, {}
  -- a note that only tells how a default or `auto` was resolved
  -- (resolve.default_notes[notes][text] = true) prints at --verbose only; one
  -- about a setting the user made, or something that went wrong, always (both
  -- always go to train.log)
  local defaults = {}
  resolve.default_notes[notes] = defaults
  local function default_note(text) notes[#notes + 1] = text; defaults[text] = true end
  local function note(by_user, text) if by_user then notes[#notes + 1] = text else default_note(text) end end
  -- nil: profiles, levels and the default experiment through moonrl.resources
  local dir = opts.config_dir

  -- the experiment's own layers
  local file_layer, file_label = {}, nil
  if opts.file == nil and opts.default_experiment then
    local t, err, origin
    if dir then
      origin = dir .. "/default.lua"
      t, err = loader.file(origin)
    else
      origin = DEFAULT_EXPERIMENT
      t, err = loader.resource(origin)
    end
    if not t then return nil, err end
    file_layer, file_label = t, "file " .. origin
  elseif type(opts.file) == "string" then
    -- a file on disk, else the experiment of that name moonrl ships
    local t, origin = loader.experiment(opts.file)
    if not t then return nil, origin end
    file_layer, file_label = t, "file " .. origin
  elseif type(opts.file) == "table" then
    file_layer, file_label = util.deepcopy(opts.file), "config table"
  elseif opts.file ~= nil then
    return nil, "config.resolve: file must be a path, a table or nil, got " .. util.describe(opts.file)
  end
  local set_layer = {}
  for _, s in ipairs(opts.sets or {}) do
    local path, v = validate.parse_set(s)
    if path then keys.set(set_layer, path, v) else errs[#errs + 1] = v end
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
    default_note("hardware = auto: " .. gpus .. " GPU" .. (gpus == 1 and "" or "s") ..
      " detected, using profile " .. profile)
  end

  local profile_layer, perr = loader.layer("profile", profile, dir)
  if not profile_layer then return nil, perr end
  local level_layer, lerr = loader.layer("level", level, dir)
  if not level_layer then return nil, lerr end

  -- layering
  local prov = {}
  local acc = merge.defaults()
  for _, e in ipairs(schema.keys) do prov[e.key] = "defaults" end
  merge.into(acc, profile_layer, nil, "profile " .. profile, prov)
  merge.into(acc, level_layer, nil, "level " .. level, prov)
  -- the GPU-only values before the file: one the file sets to the same value
  -- changes nothing (a run's own config.lua run again), so no note; a --set
  -- always gets one
  local gpu_before = {}
  for _, e in ipairs(schema.keys) do
    if e.gpu_only then
      local holder = keys.holder_of(acc, e)
      if type(holder) == "table" then gpu_before[e.key] = util.deepcopy(holder[e.name]) end
    end
  end
  merge.into(acc, file_layer, nil, file_label or "file", prov)
  merge.into(acc, set_layer, nil, "--set", prov)
  merge.fill_defaults(acc, prov)
  acc.hardware, acc.level = profile, level
  -- a Lua environment: env.lua picks it (env.name follows), its file's path made absolute so the
  -- run's config.lua finds it from anywhere (a built-in's name stays a name)
  if type(acc.env) == "table" and type(acc.env.lua) == "string" then
    if acc.env.name ~= "lua" and is_user(prov["env.name"]) then
      errs[#errs + 1] = "env.lua = " .. util.fmt_value(acc.env.lua) .. " and env.name = " ..
        util.fmt_value(acc.env.name) .. " (from " .. prov["env.name"] .. "): a Lua environment is env.name = " ..
        "\"lua\"; leave env.name out (env.lua sets it)"
    end
    acc.env.name = "lua"
    if acc.env.lua:match("%.lua$") and acc.env.lua:sub(1, 1) ~= "/" then
      local cwd = require("luv").cwd()
      if cwd then acc.env.lua = (cwd .. "/" .. acc.env.lua):gsub("/%./", "/") end
    end
  end

  local ok, verr = validate.validate(acc)
  if not ok then errs[#errs + 1] = in_file(verr, prov, file_label) end
  if #errs > 0 then return nil, table.concat(errs, "\n") end

  -- the device
  local num_envs_was_auto = acc.env.num_envs == "auto"
  local device = acc.device
  if acc.env.name == "lua" then
    -- a Lua environment steps on the CPU's threads (its LuaJIT states): never cuda, never silently
    if device == "cuda" then
      return nil, "device = \"cuda\" (from " .. tostring(prov.device) .. "): env.lua = " ..
        util.fmt_value(acc.env.lua) .. " is a Lua environment, which runs on the cpu only: set device = \"cpu\" " ..
        "(or leave it \"auto\")"
    end
    if device == "auto" and gpus > 0 then note(false, "device = auto: a Lua environment (env.lua) runs on the cpu") end
    device = "cpu"
    acc.device = "cpu"
  end
  if device == "auto" then device = gpus > 0 and "cuda" or "cpu" end
  if device == "cpu" then
    -- the cpu backend runs bf16 (oneDNN's convolutions) where the CPU has
    -- bf16 instructions (detect().cpu_bf16); fp16 never; the levels' reduced
    -- precisions become the nearest the CPU has, with one note. A level or
    -- profile takes bf16 only where it trains faster than fp32: with AMX;
    -- with AVX512-BF16's dot products alone it was no faster than fp32 on a
    -- Zen 4 (BENCHMARKS.md, 2026-11-27, fourth session), so those CPUs run
    -- fp32 unless the experiment asks for bf16
    local cpu_bf16 = info.cpu_bf16
    local bf16_ok = cpu_bf16 and (cpu_bf16 == "avx512_core_amx" or is_user(prov.precision))
    if acc.precision ~= "fp32" and not (acc.precision == "bf16" and bf16_ok) then
      local src = prov.precision
      -- bf16 asked for on a CPU without its instructions is a note, never an
      -- error, so one config runs on every CPU; fp16 is a GPU format
      if is_user(src) and acc.precision ~= "bf16" then
        return nil, "precision = " .. util.fmt_value(acc.precision) .. " (from " .. src ..
          ") needs CUDA, but this run is on cpu (device = " .. util.fmt_value(acc.device) ..
          (acc.device == "auto" and ", no GPU found" or "") .. "): the CPU backend runs fp32" ..
          (cpu_bf16 and " and bf16" or " only on this CPU") ..
          "; set precision = \"fp32\"" .. (cpu_bf16 and " or \"bf16\"" or "") .. ", or device = \"cuda\" on a GPU machine"
      end
      local use = bf16_ok and "bf16" or "fp32"
      note(is_user(src), "precision = " .. acc.precision .. " (from " .. src .. ") does not apply on cpu" ..
        (bf16_ok and "" or cpu_bf16 and " (AVX512-BF16 without AMX on this CPU: bf16 trains no faster than fp32;" ..
          " precision = \"bf16\" in the experiment runs it)"
          or acc.precision == "bf16" and " (no AVX512-BF16 or AMX on this CPU)" or "") ..
        ": using " .. use .. (bf16_ok and " (oneDNN " .. cpu_bf16 .. ")" or ""))
      acc.precision = use
      prov.precision = "cpu"
    end
    local by_source, order = {}, {}
    for _, e in ipairs(schema.keys) do
      if e.gpu_only and e.key ~= "precision" and prov[e.key] ~= "defaults" then
        local holder = keys.holder_of(acc, e)
        local v = nil
        if type(holder) == "table" then v = holder[e.name] end
        local same_as_below = prov[e.key] == (file_label or "file") and util.deep_equal(v, gpu_before[e.key])
        if v ~= nil and not inert(v) and not same_as_below then
          local src = prov[e.key]
          if not by_source[src] then by_source[src] = {}; order[#order + 1] = src end
          table.insert(by_source[src], e.key .. " = " .. note_value(v))
        end
      end
    end
    for _, src in ipairs(order) do
      local list = by_source[src]
      note(is_user(src), table.concat(list, ", ") .. " (from " .. src .. ") " ..
        (#list == 1 and "does" or "do") .. " not apply on cpu")
    end
    if acc.env.num_envs == "auto" then
      acc.env.num_envs = CPU_AUTO_NUM_ENVS
      default_note("env.num_envs = auto is chosen by the GPU; on cpu using " .. CPU_AUTO_NUM_ENVS)
    end
  elseif acc.env.num_envs == "auto" then
    local n, why = auto_num_envs(acc, info)
    if not n then return nil, why end
    acc.env.num_envs = n
    default_note("env.num_envs = auto: " .. n .. " (" .. why .. ")")
  end
  if num_envs_was_auto then
    -- The chosen num_envs must still divide into minibatches and so on
    -- (the other keys were checked above).
    local ok2, verr2 = validate.recheck(acc, "env.num_envs")
    if not ok2 then return nil, verr2 end
  end

  for _, e in ipairs(schema.keys) do
    if e.type == "schedule" then keys.set(acc, e.key, validate.normalize_value(e, keys.get(acc, e.key))) end
  end

  -- where the step budget came from: a profile's budget is what picking it gives
  -- (every rank's steps count: docs/data-parallel.md)
  local ranks = info.ranks or 1
  local per = acc.env.num_envs * acc.ppo.rollout_steps * ranks
  local updates = math.max(1, math.ceil(acc.total_steps / per))
  default_note(string.format("budget: total_steps = %d (%d update%s of %s%d envs x %d steps) from %s",
    acc.total_steps, updates, updates == 1 and "" or "s", ranks > 1 and (ranks .. " ranks x ") or "",
    acc.env.num_envs, acc.ppo.rollout_steps, prov.total_steps or "defaults"))

  if type(acc.warmup) == "function" then
    local w, werr = warmup.normalize(acc.warmup, { device = device, level = level, num_envs = acc.env.num_envs })
    if not w then return nil, werr end
  end
  return acc, notes
end

return resolve

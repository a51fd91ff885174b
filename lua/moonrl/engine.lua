-- moonrl.engine - the FFI bridge between Lua tables and the engine's structs.
--
-- The declarations come from src/engine/moonrl.h itself: the build runs the C
-- preprocessor over the header and embeds the result in the binary
-- (core.cdef()). Nothing here repeats a struct by hand; field lists are read
-- from those declarations, so a field the engine adds shows up in metrics
-- tables and is filled from the config section of the same name without a
-- change here. The few name <-> enum mappings use the header's own enum
-- constants (MR_DEVICE_CPU, MR_SCHED_LINEAR, ...).
--
-- What it is not: validation with friendly messages (moonrl.config does that
-- before anything reaches this file; mr_config_validate is the last check).
--
-- It is the engine's one door: no other module of the library calls the
-- engine's C functions or names its types (engine.C, engine.ffi, ffi.C's mr_*,
-- an "mr_..." ctype); they use the functions below, which say what they do
-- (spec/module_graph_spec.lua checks). Buffers of plain C types (uint8_t,
-- float) a module makes with LuaJIT's ffi itself are not the engine's.
--
-- Public functions
--   engine.C, engine.ffi                    the library and LuaJIT's ffi: for specs of the C API only
--   engine.fields(struct_name) -> {{name=, type=, array=n|nil, pointer=bool}, ...}
--   engine.config(cfg) -> mr_config cdata | nil, err      (resolved config table)
--   engine.validate(c) -> true | nil, err                  mr_config_validate
--   engine.hot_params(cfg) -> mr_hot_params cdata        (cfg: a config table or its mr_config)
--   engine.hot_set(cfg[, steps_base[, c]]) -> hot_bytes, tables | nil, err   what the trainer thread takes
--                                   for the hot keys (mr_hot_params' bytes, schedule_tables), from one mr_config
--   engine.total_updates(cfg) -> integer                   updates the run will make
--   engine.schedule_value(s, p) -> number      mr_schedule_value of a schedule table
--   engine.env_spaces(name[, view_range[, lua]]) -> {observation =, action =, critic =, counters =} | nil, err
--                                   name "lua": the spaces of env.lua = lua (default: the built-in "cartpole"),
--                                   or of lua, an mr_env_program * (a config's env.program)
--   engine.env_program(lua[, checks]) -> mr_env_program * | nil, err    a Lua environment (env.lua: a
--                                   path ending in .lua, or a built-in's name: configs/envs/NAME.lua),
--                                   loaded once per text (src/host/lua_env.c)
--   engine.env_lua_source(lua) -> text, label | nil, err                where env.lua's text comes from
--   engine.env_program_handle(lua[, checks]) -> the same as a lightuserdata (core.evaluate's opts.program)
--   engine.env_evaluation(name) -> {protocol =, success =, counters =} | nil, err   how it is evaluated
--   engine.checkpoint_info(path) -> {config, updates, agent_steps, hot, ranks, run_steps, version, bytes,
--                                   sections} | nil, err     one read of the file (mr_checkpoint_read_info)
--   engine.is_checkpoint(path) -> boolean                   a regular file starting with the magic bytes
--   engine.config_conflicts(run_c, stored_c) -> "key: a vs b, ...", n   what a resume may not change
--   engine.checkpoint_trainer(path) -> T, mr_config, update | nil, err   a cpu trainer holding its network
--   engine.checkpoint_network(path) -> {config, tensors, value_mean, value_std, updates} | nil, err
--   engine.checkpoint_gradients(path, net) -> {[name] = float32 bytes} | nil, err
--   engine.trainer(c) -> T | nil, err      T:update(), T:infer(obs, n, logits, value), T:set_profile(on),
--                                          T:memory(), T:describe(), T:update_forwards(), T:free()
--   engine.env(ec, seed, device, threads) -> E | nil, err   E:step(a), E:step_box(a), E:step_random(seed, n),
--                                          E:read(obs, reward, terminated, truncated), E:free()
--   engine.default_config() -> mr_config ; engine.env_id(name) -> integer (-1 unknown)
--   engine.enum(key, name) -> integer | nil                 an enum key's value ("cpu.conv", "onednn")
--   engine.blas_kernels() -> text ; engine.cpu_conv_chunk() -> integer
--   engine.cpu_conv_macs(conv, H, W, C, OC) -> number
--   engine.cpu_conv_time(convs, H, W, C, OC, chunk, threads, bf16, reps) -> {seconds} | nil, err
--   engine.cuda_conv_time(device, H, W, C, OC, chunk, precision, reps) -> {ms_im2col, ms_cudnn, algo,
--                                          note, machine} | nil, err
--   engine.schedule_tables(cfg[, steps_base[, c]]) -> {["ppo.lr"]=, ...} | nil, err   (the engine's hot schedules)
--   engine.progress_fn(cfg[, steps_base]) -> p(k), total_updates  progress before update k+1
--                                   per-update values of function schedules
--   engine.bytes(cdata) -> string                          the struct's bytes, for core.*
--   engine.metrics(bytes) -> table                         mr_metrics as a plain table
--   engine.eval_config(eval, mode) -> mr_eval_config cdata | nil, err
--                                   eval may also hold protocol ("episodic" | "survival"), episodes, greedy
--   engine.eval_result(bytes) -> table
--   engine.config_from_bytes(bytes) -> mr_config cdata
--   engine.eval_records(bytes) -> {n=, deaths=, rec=}      mr_eval_record array
--   engine.new_records(n) -> {n=, deaths=, rec=}           an empty one to fill
--   engine.eval_episodes(bytes) -> {n=, ended=, rec=}      mr_eval_episode array (the episodic protocol)
--   engine.mode_name(i) -> string | nil ; engine.mode_from_name(s) -> int (-1 unknown)
--   engine.version() -> string ; engine.cuda_device_count() -> integer

local ffi = require("ffi")
local core = require("moonrl.core")
local env_script = require("moonrl.config.env_script")
local sandbox = require("moonrl.sandbox")
local schedule = require("moonrl.schedule")
local schema = require("moonrl.config.schema")

local engine = {}

local CDEF = core.cdef()
ffi.cdef(CDEF)
local C = ffi.C
engine.C, engine.ffi, engine.cdef = C, ffi, CDEF

-- ------------------------------------------------------------ struct fields

local field_cache = {}

-- The members of `typedef struct NAME { ... } NAME;` in the preprocessed header.
function engine.fields(name)
  if field_cache[name] then return field_cache[name] end
  local body = CDEF:match("typedef%s+struct%s+" .. name .. "%s*(%b{})")
  if not body then error("moonrl.engine: no struct " .. name .. " in moonrl.h", 2) end
  local out = {}
  -- One declarator: "*x", "s[256]", "a" -> stars, id, dim; `rest` is what precedes it.
  local function declarator(d)
    local dim = d:match("%[%s*(%d+)%s*%]%s*$")
    d = d:gsub("%s*%[%s*%d*%s*%]%s*$", "")
    local rest, id = d:match("^(.-)([%a_][%w_]*)%s*$")
    if not id then error("moonrl.engine: cannot read member '" .. d .. "' of " .. name) end
    return rest, id, dim and tonumber(dim) or nil
  end
  for decl in body:sub(2, -2):gmatch("([^;]+);") do
    decl = decl:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
    if decl ~= "" then
      local parts = {}
      for piece in decl:gmatch("[^,]+") do parts[#parts + 1] = piece end
      -- The first declarator carries the type: "double a" / "int32_t *x" / "char s[256]".
      local rest, id, dim = declarator(parts[1])
      local ctype = rest:gsub("[%s%*]+$", "")
      for i, d in ipairs(parts) do
        local stars = rest
        if i > 1 then stars, id, dim = declarator(d) end
        out[#out + 1] = { name = id, type = ctype, pointer = stars:find("%*") ~= nil, array = dim }
      end
    end
  end
  field_cache[name] = out
  return out
end

local function is_enum(ctype)
  return ctype:match("^mr_[%w_]+$") ~= nil and CDEF:find("typedef%s+enum%s+" .. ctype .. "%s*{") ~= nil
end

local function struct_of(ctype)
  return ctype:match("^(mr_[%w_]+)$") and CDEF:find("typedef%s+struct%s+" .. ctype .. "%s*{")
    and ctype or nil
end

-- --------------------------------------------------------------- conversions

local SCALAR = { int = true, double = true, float = true, uint64_t = true, int64_t = true,
                 uint32_t = true, int32_t = true, int16_t = true }

-- "cpu" -> MR_DEVICE_CPU, "fp16" -> MR_FP16, cpu.conv "im2col" -> MR_CPU_CONV_IM2COL,
-- cpu.activations "recompute" -> MR_CPU_ACTIVATIONS_RECOMPUTE
-- (schedule kinds: fill_schedule).
local ENUM_PREFIX = { device = "MR_DEVICE_", precision = "MR_", conv = "MR_CPU_CONV_",
                      activations = "MR_CPU_ACTIVATIONS_", name = "MR_ENV_", box_squash = "MR_BOX_SQUASH_",
                      truncation = "MR_TRUNCATION_", epilogue = "MR_CUDA_EPILOGUE_" }

-- a member whose name another section's enum also uses: by its whole key
-- (cuda.conv "cudnn" is MR_CUDA_CONV_CUDNN, not a cpu.conv value)
local ENUM_PREFIX_KEY = { ["cuda.conv"] = "MR_CUDA_CONV_" }

local function enum_value(prefix, s)
  local ok, v = pcall(function() return C[prefix .. s:upper()] end)
  if ok and v ~= nil then return tonumber(v) end
  return nil
end

function engine.mode_from_name(s) return tonumber(C.mr_mode_from_name(s)) end

function engine.mode_name(i)
  local p = C.mr_mode_name(i)
  return p ~= nil and ffi.string(p) or nil
end

-- The environments the engine has (registry.c): { name =, summary =, actions =, codes = { "empty", ... } },
-- in env.name's order.
function engine.env_name(i)
  local p = C.mr_env_name_of(i)
  return p ~= nil and ffi.string(p) or nil
end

local SPACE_KINDS = { [0] = "codes", "image", "vector", "discrete", "multi_discrete", "box" }

local function space_table(sp, observation)
  local kind = SPACE_KINDS[tonumber(sp.kind)]
  local t = { kind = kind }
  if observation then
    t.shape = kind == "vector" and { tonumber(sp.shape[0]) } or
      { tonumber(sp.shape[0]), tonumber(sp.shape[1]), tonumber(sp.shape[2]) }
    if kind == "codes" then t.codes = tonumber(sp.codes) end
  elseif kind == "discrete" then
    t.n = tonumber(sp.n)
  elseif kind == "multi_discrete" then
    t.nvec = {}
    for k = 0, sp.n - 1 do t.nvec[#t.nvec + 1] = tonumber(sp.nvec[k]) end
  else
    t.low, t.high = {}, {}
    for k = 0, sp.n - 1 do
      t.low[#t.low + 1], t.high[#t.high + 1] = tonumber(sp.low[k]), tonumber(sp.high[k])
    end
  end
  return t
end

-- What environment `name` declares with view_range (default: the schema's;
-- or a table of sizes, engine.env_sizes):
-- { observation = {kind = "codes" | "image" | "vector", shape = {C, H, W} | {N}
--   [, codes = n]}, action = {kind = "discrete", n =} | {kind = "multi_discrete",
--   nvec = {...}} | {kind = "box", low = {...}, high = {...}}, critic = {extra = n,
--   ground_truth_view = bool}, counters = {name, ...} } | nil, err
-- The mr_env_spaces environment `name` declares at view_range (a Lua
-- environment: its program, `lua` or the built-in cartpole), and its
-- counters' names; or nil, err.
local function declared_spaces(name, view_range, lua)
  local id = type(name) == "number" and name or tonumber(C.mr_env_from_name(tostring(name)))
  local c = ffi.new("mr_env_config")
  c.name = id
  if id == C.MR_ENV_LUA then
    local p, perr = lua, nil
    if type(lua) ~= "cdata" or lua == nil then p, perr = engine.env_program(lua or "cartpole") end
    if not p then return nil, perr end
    c.program = p
  end
  local by_key = schema.by_key
  if type(view_range) == "table" then   -- env sizes: {view_range =, grid_size =} (engine.env_sizes)
    c.grid_size = tonumber(view_range.grid_size) or by_key["env.grid_size"].default
    c.view_range = tonumber(view_range.view_range) or by_key["env.view_range"].default
  else
    c.grid_size = by_key["env.grid_size"].default
    c.view_range = view_range
  end
  local sp, err = ffi.new("mr_env_spaces"), ffi.new("mr_error")
  if C.mr_env_spaces_of(c, sp, err) ~= 0 then return nil, ffi.string(err.msg) end
  local counters = {}
  for k = 0, sp.counters - 1 do counters[#counters + 1] = ffi.string(sp.counter_names[k]) end
  return sp, counters
end

-- The sizes an environment's spaces depend on, from an env config (a table
-- or an mr_env_config): {view_range =, grid_size =} (catch's image side is
-- env.grid_size), for engine.env_spaces.
function engine.env_sizes(env)
  return { view_range = tonumber(env.view_range), grid_size = tonumber(env.grid_size) }
end

function engine.env_spaces(name, view_range, lua)
  local sp, counters = declared_spaces(name,
    view_range or schema.by_key["env.view_range"].default, lua)
  if not sp then return nil, counters end
  return { observation = space_table(sp.obs, true), action = space_table(sp.act, false),
           critic = { extra = tonumber(sp.critic_extra), ground_truth_view = sp.critic_view ~= 0 },
           counters = counters }
end

-- How environment `name` is evaluated (moonrl.h's mr_env_spaces: eval,
-- success): { protocol = "episodic" | "survival" (its own, moonrl eval's
-- default), success = what makes an episode a success, in words, or nil
-- where it declares none, counters = {name, ...} } | nil, err
function engine.env_evaluation(name, lua)
  local sp, counters = declared_spaces(name, 1, lua)
  if not sp then return nil, counters end
  local success
  if sp.success == C.MR_SUCCESS_TRUNCATED then
    success = "the episode ran to its step limit (truncated, not terminated)"
  elseif sp.success == C.MR_SUCCESS_COUNTER then
    success = "the episode counted " .. (counters[sp.success_counter + 1] or "?") .. " at least once"
  end
  return { protocol = sp.eval == C.MR_EVAL_SURVIVAL and "survival" or "episodic", success = success,
           counters = counters }
end

function engine.environments()
  local out = {}
  for i = 0, 255 do
    if C.mr_env_name_of(i) == nil then break end
    local codes = {}
    for w in ffi.string(C.mr_env_codes(i)):gmatch("%S+") do codes[#codes + 1] = w end
    if i == C.MR_ENV_LUA then
      -- one row per built-in Lua environment (configs/envs/NAME.lua); a file of one's own is env.lua = PATH
      for _, rel in ipairs(require("moonrl.embedded").list("configs/envs/")) do
        local lua = rel:match("([^/]+)%.lua$")
        local sp = lua and engine.env_spaces(i, nil, lua)
        if sp then
          out[#out + 1] = { name = engine.env_name(i), lua = lua, codes = codes, spaces = sp,
                            actions = sp.action.kind == "discrete" and sp.action.n or 0,
                            summary = "env.lua = \"" .. lua .. "\": " .. rel .. ", written in Lua (cpu only; " ..
                              "env.lua = PATH trains a file of one's own: docs/environments.md)" }
        end
      end
    else
      out[#out + 1] = { name = engine.env_name(i), summary = ffi.string(C.mr_env_summary(i)),
                        actions = tonumber(C.mr_env_num_actions(i)), codes = codes,
                        spaces = assert(engine.env_spaces(i)) }
    end
  end
  return out
end

-- ------------------------------------------------------- Lua environments

-- Where env.lua's text comes from: a path ending in .lua is a file (read now:
-- the run keeps this text); another name is a built-in, configs/envs/NAME.lua.
-- -> text, label (what messages and tracebacks call it) | nil, err
function engine.env_lua_source(lua)
  if type(lua) ~= "string" or lua == "" then
    return nil, "env.lua = " .. tostring(lua) .. ": expected a path to a .lua file or a built-in's name"
  end
  local script_label = env_script.label(lua)
  if script_label or lua:find("\n", 1, true) then   -- the text itself (a table in the experiment script)
    return lua, script_label or "env.lua (the config's text)"
  end
  if lua:match("%.lua$") then
    local f, ferr = io.open(lua, "rb")
    if not f then return nil, "env.lua = " .. lua .. ": cannot read it (" .. tostring(ferr) .. ")" end
    local text = f:read("*a")
    f:close()
    local cwd = require("luv").cwd()
    local label = lua
    if cwd and lua:sub(1, #cwd + 1) == cwd .. "/" then label = lua:sub(#cwd + 2) end
    return text, label
  end
  local rel = "configs/envs/" .. lua .. ".lua"
  local text = lua:match("^[%w_%-]+$") and require("moonrl.embedded").get(rel)
  if not text then
    local names = {}
    for _, p in ipairs(require("moonrl.embedded").list("configs/envs/")) do
      names[#names + 1] = p:match("([^/]+)%.lua$")
    end
    return nil, "env.lua = " .. lua .. ": not a file (a path ends in .lua) nor a built-in Lua environment (" ..
      table.concat(names, ", ") .. ")"
  end
  return text, rel
end

local programs = {}   -- label .. text .. checks -> the program (never freed: states may point at it)

function engine.env_program(lua, checks)
  local text, label = engine.env_lua_source(lua)
  if not text then return nil, label end
  local key = label .. "\0" .. (checks and "1" or "0") .. "\0" .. text
  if programs[key] then return programs[key] end
  local ud, err = core.env_program(text, label, checks and true or false, sandbox.LIMITS.memory_kib)
  if not ud then return nil, err end
  local p = ffi.cast("const mr_env_program *", ud)
  programs[key] = p
  programs[p] = ud
  return p
end

-- The same program as the host's handle (a lightuserdata: core.evaluate's opts.program).
function engine.env_program_handle(lua, checks)
  local p, err = engine.env_program(lua, checks)
  if not p then return nil, err end
  return programs[p]
end

-- What environment `name`'s cell codes 0, 1, 2 are ({ "empty", "food", "poison" });
-- for a name the engine does not know, { "empty", "item 1", "item 2" }.
function engine.env_codes(name)
  for _, env in ipairs(engine.environments()) do
    if env.name == name then return env.codes end
  end
  return { "empty", "item 1", "item 2" }
end

-- A moonrl schedule (number, {kind=, from=, to=, gamma=, every=}, function)
-- into an mr_schedule. A function becomes the constant of its value at
-- progress 0: the host replaces it per update (schedule_tables). A step
-- schedule without `to` gets schedule.normalize's bound (the value it
-- reaches at p = 1), which bounds nothing.
local function fill_schedule(dst, v, key)
  if type(v) == "function" then
    local ok, r = pcall(v, 0)
    if not ok or type(r) ~= "number" then
      return nil, key .. ": the schedule function failed at progress 0: " .. tostring(r)
    end
    v = r
  end
  if type(v) == "number" then
    dst.kind, dst.start, dst["end"], dst.gamma, dst.every = C.MR_SCHED_CONSTANT, v, v, 1, 1
    return true
  end
  if type(v) ~= "table" or type(v.kind) ~= "string" then
    return nil, key .. ": expected a number, a schedule table or a function, got " .. type(v)
  end
  local kind = enum_value("MR_SCHED_", v.kind)
  if not kind then return nil, key .. ": unknown schedule kind '" .. v.kind .. "'" end
  local n, why = schedule.normalize(v)
  if not n then return nil, key .. ": " .. why end
  dst.kind, dst.start, dst["end"] = kind, n.from, n.to
  dst.gamma, dst.every = n.gamma or 1, n.every or 1
  return true
end

-- The engine's value of a schedule table (or number) at progress p: what the
-- trainer applies (mr_schedule_value; p is clamped to [0, 1], NaN reads as 0).
local scratch = ffi.new("mr_schedule")
function engine.schedule_value(v, p)
  local ok, err = fill_schedule(scratch, v, "schedule")
  if not ok then error(err, 2) end
  return tonumber(C.mr_schedule_value(scratch, p))
end
schedule.set_evaluator(engine.schedule_value)   -- schedule.value of a table: this one

local function fill_struct(dst, sname, src, path)
  local fields = engine.fields(sname)
  local has = {}
  for _, f in ipairs(fields) do has[f.name] = true end
  for _, f in ipairs(fields) do
    local v = src[f.name]
    local key = path .. f.name
    if v ~= nil then
      local sub = struct_of(f.type)
      if f.type == "mr_schedule" then
        local ok, err = fill_schedule(dst[f.name], v, key)
        if not ok then return nil, err end
      elseif sub then
        if type(v) ~= "table" then return nil, key .. ": expected a table, got " .. type(v) end
        local ok, err = fill_struct(dst[f.name], sub, v, key .. ".")
        if not ok then return nil, err end
      elseif f.array and f.type == "char" then
        if type(v) ~= "string" then return nil, key .. ": expected a string, got " .. type(v) end
        if #v >= f.array then
          return nil, key .. ": at most " .. (f.array - 1) .. " bytes, got " .. #v
        end
        ffi.fill(dst[f.name], f.array)
        ffi.copy(dst[f.name], v)
      elseif f.array then
        if type(v) ~= "table" then return nil, key .. ": expected a list, got " .. type(v) end
        if #v > f.array then return nil, key .. ": at most " .. f.array .. " entries, got " .. #v end
        for i = 0, f.array - 1 do dst[f.name][i] = v[i + 1] or 0 end
        -- A list's length lives beside it: conv_channels -> num_conv.
        local count = "num_" .. f.name:match("^([%a]+)")
        if has[count] then dst[count] = #v end
      elseif SCALAR[f.type] or is_enum(f.type) then
        if type(v) == "boolean" then
          dst[f.name] = v and 1 or 0
        elseif type(v) == "string" then
          local e
          if f.name == "mode" then
            e = engine.mode_from_name(v)
            if e < 0 then e = nil end
          elseif ENUM_PREFIX_KEY[key] or ENUM_PREFIX[f.name] then
            e = enum_value(ENUM_PREFIX_KEY[key] or ENUM_PREFIX[f.name], v)
          end
          if e == nil then return nil, key .. ": '" .. v .. "' is not a value the engine knows" end
          dst[f.name] = e
        elseif type(v) == "number" then
          dst[f.name] = v
        else
          return nil, key .. ": expected a number, got " .. type(v)
        end
      else
        -- a member this filler has no conversion for must not be dropped silently
        return nil, key .. ": the engine's field of type " .. f.type .. " cannot be set from Lua"
      end
    end
  end
  return true
end

-- The resolved config table as an mr_config: engine defaults first, then
-- every member whose name matches a key of the table (env.num_envs ->
-- cfg.env.num_envs). Lua-only sections (warmup, log, hooks...) are ignored.
function engine.config(cfg)
  local c = ffi.new("mr_config")
  C.mr_config_default(c)
  if cfg.env and cfg.env.num_envs == "auto" then
    return nil, 'env.num_envs = "auto" must be resolved before the engine sees it (config.resolve does)'
  end
  local ok, err = fill_struct(c, "mr_config", cfg, "")
  if not ok then return nil, err end
  -- a Lua environment: its program (the config check refuses env.name = lua without one)
  if cfg.env and cfg.env.lua ~= nil then
    -- (the followers of a data-parallel run make theirs from its text: src/host/ranks.c)
    local p, perr = engine.env_program(cfg.env.lua, cfg.env.lua_checks)
    if not p then return nil, perr end
    c.env.program = p
    c.env.name = C.MR_ENV_LUA
  end
  -- the network's outputs and inputs follow the environment (not settings of their own)
  C.mr_config_follow_env(c)
  -- env.proxy_obs_storage lives in mr_policy_config (in what was padding, so
  -- checkpoints keep their layout): "faithful" -> MR_OBS_FAITHFUL, "uint8" -> MR_OBS_UINT8
  local st = cfg.env and cfg.env.proxy_obs_storage
  if st ~= nil then
    local v = type(st) == "string" and enum_value("MR_OBS_", st) or nil
    if not v then return nil, "env.proxy_obs_storage: '" .. tostring(st) .. "' is not a value the engine knows" end
    c.policy.proxy_obs_storage = v
  end
  return c
end

function engine.validate(c)
  local err = ffi.new("mr_error")
  if C.mr_config_validate(c, err) ~= 0 then return nil, ffi.string(err.msg) end
  return true
end

-- An mr_config given, or the one of a config table (built once per call of
-- the functions below; the callers that already hold it pass it).
local function as_config(cfg)
  if ffi.istype("mr_config", cfg) then return cfg end
  return engine.config(cfg)
end

-- The hot parameters a config starts with, as the engine reads them from
-- its mr_config (mr_config_hot_params): which members are hot, and where
-- they live, is the engine's to say. cfg: a config table or an mr_config.
function engine.hot_params(cfg)
  local c, err = as_config(cfg)
  if not c then error(err, 2) end
  local h = ffi.new("mr_hot_params")
  C.mr_config_hot_params(c, h)
  return h
end

-- The processes this run spans (mpirun -n R, srun; docs/data-parallel.md):
-- each steps env.num_envs environments, so an update is R times the agent-steps.
function engine.ranks()
  return core.ranks and core.ranks() or 1
end

-- Updates a run of cfg makes, as the trainer counts them
-- (mr_config_total_updates over every rank's environments); progress for
-- update k+1 is k / this. steps_base: agent-steps of a run resumed on
-- another count of ranks that are not updates x batch (host.h). cfg: a
-- config table or an mr_config.
function engine.total_updates(cfg, steps_base)
  local c, err = as_config(cfg)
  if not c then error(err, 2) end
  c = ffi.new("mr_config", c)   -- a copy: the counts below are the run's, not the config's
  c.env.num_envs = c.env.num_envs * engine.ranks()
  if steps_base and steps_base ~= 0 then
    c.total_steps = math.max(1, tonumber(c.total_steps) - steps_base)
  end
  return tonumber(C.mr_config_total_updates(c))
end

-- What a checkpoint holds, from one read of the file that checks all a load
-- checks (mr_checkpoint_read_info): { config = mr_config (the one it was
-- written with), updates = (the update it holds; its file name is only a
-- label), agent_steps = (the writing trainer's own), hot = mr_hot_params (in
-- force then), ranks = (that wrote it), run_steps = (the run's agent-steps
-- over every rank; nil when the file does not say: updates x batch),
-- version =, bytes =, sections = {{name =, bytes =}, ...} in file order },
-- or nil and the engine's message (a damaged file: what is wrong with it).
function engine.checkpoint_info(path)
  local info, err = ffi.new("mr_checkpoint_info"), ffi.new("mr_error")
  if type(path) ~= "string" then return nil, "engine.checkpoint_info: expected a path, got " .. type(path) end
  if C.mr_checkpoint_read_info(path, info, err) ~= 0 then return nil, ffi.string(err.msg) end
  local sections = {}
  for i = 0, info.sections - 1 do
    sections[#sections + 1] = { name = ffi.string(info.section[i].name), bytes = tonumber(info.section[i].bytes) }
  end
  return { config = ffi.new("mr_config", info.config), hot = ffi.new("mr_hot_params", info.hot),
           updates = tonumber(info.updates), agent_steps = tonumber(info.agent_steps),
           ranks = tonumber(info.ranks.ranks), run_steps = info.ranks.has ~= 0 and tonumber(info.ranks.agent_steps) or nil,
           version = tonumber(info.version), bytes = tonumber(info.bytes), sections = sections }
end

-- true when path is a regular file that starts as a checkpoint (its magic
-- bytes: checkpoint_format.h); reads 8 bytes, never waits on a FIFO.
function engine.is_checkpoint(path)
  return type(path) == "string" and C.mr_checkpoint_is_file(path) ~= 0
end

-- The one check of a run's config against a checkpoint's
-- (mr_checkpoint_config_conflicts): run and stored are mr_configs; the
-- settings the run may not change by going on from that checkpoint (every
-- key but the hot ones and the machine's), as "key: run's vs stored's"
-- joined by ", ", and how many; "" and 0 when it may go on.
function engine.config_conflicts(run, stored)
  local buf = ffi.new("char[?]", 4096)
  local n = tonumber(C.mr_checkpoint_config_conflicts(run, stored, buf, 4096))
  return ffi.string(buf), n
end

-- The run's progress before its update k+1, for k = 0 .. total_updates - 1:
-- agent-steps done over the agent-steps the run makes (total_steps rounded up
-- to whole updates), as the trainer thread counts it
-- (src/host/trainer_thread.h, host_trainer_progress_after). steps_base
-- (host.h): a run resumed where an update had other agent-steps (ranks,
-- environments) goes on without a jump; without
-- one, k / total_updates to the bit. cfg: a config table or an mr_config.
function engine.progress_fn(cfg, steps_base)
  local c, err = as_config(cfg)
  if not c then error(err, 2) end
  local u = engine.total_updates(c, steps_base)
  local base = steps_base or 0
  if base == 0 then return function(k) return k / u end, u end
  local batch = tonumber(c.env.num_envs) * tonumber(c.ppo.rollout_steps) * engine.ranks()
  local total = base + u * batch
  return function(k) return math.min(1, (base + k * batch) / total) end, u
end

-- Lua function schedules, evaluated at the progress of every update (value
-- for update k+1 at engine.progress_fn's p(k)), so the trainer thread applies
-- the exact value at each boundary without calling Lua. The schedules are
-- the engine's hot ones (schema.hot_keys("engine") of type schedule); the
-- tables are keyed by the key, as the host reads them (lua_run.c). c: cfg's
-- mr_config when the caller holds it.
function engine.schedule_tables(cfg, steps_base, c)
  local out, any = {}, false
  local progress, u = engine.progress_fn(c or cfg, steps_base)
  for _, key in ipairs(schema.hot_keys("engine")) do
    local e = schema.by_key[key]
    local holder = e.section and cfg[e.section] or (not e.section and cfg) or nil
    local f = e.type == "schedule" and type(holder) == "table" and holder[e.name] or nil
    if type(f) == "function" and sandbox.is_bounded(f) then
      -- from a live tweak file: sampled under its limits
      local t, err = sandbox.sample(f, u, progress)
      if not t then return nil, key .. ": " .. err end
      out[key], any = t, true
    elseif type(f) == "function" then
      local t = {}
      for k = 0, u - 1 do
        local ok, v = pcall(f, progress(k))
        if not ok then
          return nil, key .. ": the schedule function failed at progress " .. progress(k) .. ": " ..
            tostring(v)
        end
        if type(v) ~= "number" or v ~= v then
          return nil, key .. ": the schedule function returned " .. tostring(v) ..
            " at progress " .. progress(k) .. ": expected a number"
        end
        t[k + 1] = v
      end
      out[key], any = t, true
    end
  end
  return any and out or nil
end

-- What the trainer thread takes for a config's hot keys (core.start's hot and
-- schedules, run:set_hot): the bytes of its mr_hot_params and the per-update
-- tables of its function schedules, from one mr_config (c: given when the
-- caller built it already). -> hot_bytes, tables_or_nil | nil, err
function engine.hot_set(cfg, steps_base, c)
  if not c then
    local err
    c, err = engine.config(cfg)
    if not c then return nil, err end
  end
  local tables, terr = engine.schedule_tables(cfg, steps_base, c)
  if terr then return nil, terr end
  return engine.bytes(engine.hot_params(c)), tables
end

function engine.bytes(cdata)
  return ffi.string(cdata, ffi.sizeof(cdata))
end

local function from_bytes(ctype, s)
  local v = ffi.new(ctype)
  assert(#s == ffi.sizeof(v), "moonrl.engine: " .. ctype .. " size mismatch (rebuild the binary)")
  ffi.copy(v, s, #s)
  return v
end

local function to_table(v, sname)
  local t = {}
  for _, f in ipairs(engine.fields(sname)) do
    if not f.array and not f.pointer then t[f.name] = tonumber(v[f.name]) end
  end
  return t
end

-- Per-episode statistics of an update in which no episode ended are absent
-- (nil: null in metrics.jsonl, an empty cell in metrics.csv, no TensorBoard
-- point), not 0, which would draw false dips into every plot.
engine.EPISODE_FIELDS = { "episode_return_mean", "episode_return_min", "episode_return_max",
  "episode_length_mean", "food_per_episode", "poison_per_episode", "efficiency" }

function engine.metrics(bytes)
  local m = to_table(from_bytes("mr_metrics", bytes), "mr_metrics")
  if not m.episodes or m.episodes <= 0 then
    for _, k in ipairs(engine.EPISODE_FIELDS) do m[k] = nil end
  end
  return m
end
function engine.eval_result(bytes) return to_table(from_bytes("mr_eval_result", bytes), "mr_eval_result") end
function engine.config_from_bytes(bytes) return from_bytes("mr_config", bytes) end

-- The records of mr_trainer_evaluate_records as bytes (core.evaluate with
-- opts.records): {n =, deaths =, rec = const mr_eval_record * (0-based)};
-- the table keeps the bytes alive for as long as rec is used.
function engine.eval_records(bytes)
  local size = ffi.sizeof("mr_eval_record")
  assert(#bytes % size == 0, "engine.eval_records: not a whole number of mr_eval_record")
  local n = #bytes / size
  local rec = ffi.cast("const mr_eval_record *", bytes)
  local deaths = 0
  for i = 0, n - 1 do deaths = deaths + rec[i].died end
  return { n = n, deaths = deaths, rec = rec, bytes = bytes }
end

-- An empty record array of n, for records read back from a file.
function engine.new_records(n)
  local rec = ffi.new("mr_eval_record[?]", math.max(n, 1))
  return { n = n, deaths = 0, rec = rec, bytes = rec }
end

-- The episodic protocol's records (core.evaluate's records bytes when its
-- protocol is "episodic"): {n =, ended =, rec = const mr_eval_episode *
-- (0-based)}; the table keeps the bytes alive for as long as rec is used.
function engine.eval_episodes(bytes)
  local size = ffi.sizeof("mr_eval_episode")
  assert(#bytes % size == 0, "engine.eval_episodes: not a whole number of mr_eval_episode")
  local n = #bytes / size
  local rec = ffi.cast("const mr_eval_episode *", bytes)
  local ended = 0
  for i = 0, n - 1 do if rec[i].ended ~= 0 then ended = ended + 1 end end
  return { n = n, ended = ended, rec = rec, bytes = bytes }
end

-- eval: {num_envs=, steps=, runs=, seed=} (cfg.eval) and the options protocol
-- ("episodic" | "survival" | nil: the environment's own), episodes, greedy
-- (a boolean); mode: a name or nil (the trained mode).
function engine.eval_config(eval, mode)
  local e = ffi.new("mr_eval_config")
  C.mr_eval_config_default(e)
  local src = {}
  for k, v in pairs(eval or {}) do src[k] = v end
  if src.protocol ~= nil then
    local p = ({ episodic = C.MR_EVAL_EPISODIC, survival = C.MR_EVAL_SURVIVAL })[src.protocol]
    if not p then return nil, "eval.protocol: " .. tostring(src.protocol) .. ": accepted episodic, survival" end
    src.protocol = tonumber(p)
  end
  src.mode = mode
  local ok, err = fill_struct(e, "mr_eval_config", src, "eval.")
  if not ok then return nil, err end
  return e
end

function engine.version() return ffi.string(C.mr_version()) end
function engine.build_info() return ffi.string(C.mr_build_info()) end
function engine.cuda_device_count() return tonumber(C.mr_cuda_device_count()) end
-- "avx512_core_bf16" / "avx512_core_amx": the cpu backend runs precision =
-- bf16 with it; nil: this CPU has no bf16 instructions (fp32 only).
function engine.cpu_bf16()
  local s = C.mr_cpu_bf16()
  return s ~= nil and ffi.string(s) or nil
end

-- This CPU's measured arithmetic peak in GFLOP/s on `threads` threads (bf16:
-- AMX tile or AVX512-BF16 dot products, else FMAs), or nil where it has no
-- such instructions, and what it counts ("AMX tile dot products", ...).
-- About 0.2 s (src/engine/cpu/peak.c).
function engine.cpu_peak_gflops(bf16, threads)
  local g = tonumber(C.mr_cpu_peak_gflops(bf16 and 1 or 0, threads or 0))
  return g > 0 and g or nil, ffi.string(C.mr_cpu_peak_what(bf16 and 1 or 0))
end

-- Free and total bytes of CUDA device i, or nil and a message.
function engine.cuda_device_memory(i)
  local f, t, e = ffi.new("uint64_t[1]"), ffi.new("uint64_t[1]"), ffi.new("mr_error")
  if C.mr_cuda_device_memory(i or 0, f, t, e) ~= 0 then return nil, ffi.string(e.msg) end
  return tonumber(f[0]), tonumber(t[0])
end

-- ------------------------------------------------- the engine's own objects

-- The engine's value of the enum config key `key` ("device", "precision",
-- "cpu.conv", "cuda.conv", "cuda.epilogue", "env.name", ...) named `name`
-- ("cuda", "bf16", "onednn", ...): an integer, or nil for a name it does not know.
function engine.enum(key, name)
  local prefix = ENUM_PREFIX_KEY[key] or ENUM_PREFIX[tostring(key):match("([%w_]+)$")]
  if not prefix or type(name) ~= "string" then return nil end
  return enum_value(prefix, name)
end

-- mr_config_default's config (no config table: what a benchmark sets itself).
function engine.default_config()
  local c = ffi.new("mr_config")
  C.mr_config_default(c)
  return c
end

-- The id of the environment named `name` in the engine's registry (env.name's value), -1 unknown.
function engine.env_id(name) return tonumber(C.mr_env_from_name(name)) end

local Trainer = {}
Trainer.__index = Trainer

-- A trainer of mr_config c (mr_trainer_create), freed when collected or by
-- T:free(): T | nil, err. Its methods return nil, the engine's message on failure:
--   T:update() -> the update's mr_metrics (a cdata the next update overwrites)
--   T:infer(obs, n, logits, value) -> true   obs: n observations as bytes (uint8_t
--                           codes, or floats cast to const uint8_t *); logits: n x
--                           actions floats, value: n floats (mr_trainer_infer)
--   T:set_profile(on) -> true; T:memory() -> mr_memory_stats as a table
--   T:describe() -> text; T:update_forwards() -> integer; T:free()
function engine.trainer(c)
  local tp, err = ffi.new("mr_trainer*[1]"), ffi.new("mr_error")
  if C.mr_trainer_create(c, tp, err) ~= 0 then return nil, ffi.string(err.msg) end
  return setmetatable({ handle = ffi.gc(tp[0], C.mr_trainer_free), err = err, metrics = ffi.new("mr_metrics") },
    Trainer)
end

function Trainer:update()
  if C.mr_trainer_update(self.handle, self.metrics, self.err) ~= 0 then return nil, ffi.string(self.err.msg) end
  return self.metrics
end

function Trainer:infer(obs, n, logits, value)
  if C.mr_trainer_infer(self.handle, obs, nil, n, logits, value, self.err) ~= 0 then
    return nil, ffi.string(self.err.msg)
  end
  return true
end

function Trainer:set_profile(on)
  if C.mr_trainer_set_profile(self.handle, on and 1 or 0, self.err) ~= 0 then return nil, ffi.string(self.err.msg) end
  return true
end

function Trainer:memory()
  local m = ffi.new("mr_memory_stats")
  if C.mr_trainer_memory(self.handle, m, self.err) ~= 0 then return nil, ffi.string(self.err.msg) end
  return to_table(m, "mr_memory_stats")
end

function Trainer:describe() return ffi.string(C.mr_trainer_describe(self.handle)) end
function Trainer:update_forwards() return tonumber(C.mr_trainer_update_forwards(self.handle)) end

function Trainer:free()
  if self.handle then
    C.mr_trainer_free(ffi.gc(self.handle, nil))
    self.handle = nil
  end
end

local Env = {}
Env.__index = Env

-- The environments of mr_env_config ec alone (mr_env_create: `seed`, on
-- device = an mr_device, `threads`), freed when collected or by E:free(): E | nil, err.
--   E:step(actions) -> true        uint8_t actions, one per instance (mr_env_step)
--   E:step_box(actions) -> true    floats, a box's dimensions per instance (mr_env_step_box)
--   E:step_random(seed, steps) -> true   actions drawn on the device (mr_env_step_random)
--   E:read(obs, reward, terminated, truncated) -> true   the state into those buffers (mr_env_read)
--   E:free()
-- (nil, the engine's message on failure.)
function engine.env(ec, seed, device, threads)
  local ep, err = ffi.new("mr_env*[1]"), ffi.new("mr_error")
  if C.mr_env_create(ec, seed, device, threads, ep, err) ~= 0 then return nil, ffi.string(err.msg) end
  return setmetatable({ handle = ffi.gc(ep[0], C.mr_env_free), err = err, view = ffi.new("mr_env_view") }, Env)
end

function Env:step(actions)
  if C.mr_env_step(self.handle, actions, self.err) ~= 0 then return nil, ffi.string(self.err.msg) end
  return true
end

function Env:step_box(actions)
  if C.mr_env_step_box(self.handle, actions, self.err) ~= 0 then return nil, ffi.string(self.err.msg) end
  return true
end

function Env:step_random(seed, steps)
  if C.mr_env_step_random(self.handle, seed, steps, nil, self.err) ~= 0 then return nil, ffi.string(self.err.msg) end
  return true
end

function Env:read(obs, reward, terminated, truncated)
  local v = self.view
  v.obs, v.reward, v.terminated, v.truncated = obs, reward, terminated, truncated
  if C.mr_env_read(self.handle, v, self.err) ~= 0 then return nil, ffi.string(self.err.msg) end
  return true
end

function Env:free()
  if self.handle then
    C.mr_env_free(ffi.gc(self.handle, nil))
    self.handle = nil
  end
end

-- ------------------------------------------------------- the machine's convs

-- The OpenBLAS kernels the cpu backend runs (mr_blas_kernels), e.g. "SkylakeX".
function engine.blas_kernels() return ffi.string(C.mr_blas_kernels()) end

-- Samples per conv chunk of the cpu network (mr_cpu_conv_chunk).
function engine.cpu_conv_chunk() return tonumber(C.mr_cpu_conv_chunk()) end

-- Multiply-adds of one 3x3 conv on H x W maps of C -> OC channels as cpu.conv
-- = `conv` ("winograd", "onednn", ...) computes it (mr_cpu_conv_macs).
function engine.cpu_conv_macs(conv, H, W, Cin, OC)
  return tonumber(C.mr_cpu_conv_macs(assert(engine.enum("cpu.conv", conv), conv), H, W, Cin, OC))
end

-- The cpu backend's timing of one conv layer by each of `convs` (cpu.conv
-- names), as warm-up's "algorithms" step searches (mr_cpu_conv_time):
-- {seconds per name, in that order (< 0: that one cannot run it)} | nil, err.
function engine.cpu_conv_time(convs, H, W, Cin, OC, chunk, threads, bf16, reps)
  local ids, secs, err = ffi.new("int[?]", #convs), ffi.new("double[?]", #convs), ffi.new("mr_error")
  for i, name in ipairs(convs) do ids[i - 1] = assert(engine.enum("cpu.conv", name), name) end
  if C.mr_cpu_conv_time(ids, #convs, H, W, Cin, OC, chunk, threads, bf16 and 1 or 0, reps, secs, err) ~= 0 then
    return nil, ffi.string(err.msg)
  end
  local out = {}
  for i = 1, #convs do out[i] = tonumber(secs[i - 1]) end
  return out
end

-- The CUDA backend's timing of one conv layer (cuda.conv = "auto"'s search,
-- mr_cuda_conv_time): {ms_im2col, ms_cudnn, algo = {3 cuDNN algorithms},
-- note, machine} | nil, err.
function engine.cuda_conv_time(device, H, W, Cin, OC, chunk, precision, reps)
  local out, err = ffi.new("mr_cuda_conv_timing"), ffi.new("mr_error")
  if C.mr_cuda_conv_time(device, H, W, Cin, OC, chunk, precision, reps, out, err) ~= 0 then
    return nil, ffi.string(err.msg)
  end
  return { ms_im2col = tonumber(out.ms_im2col), ms_cudnn = tonumber(out.ms_cudnn),
           algo = { tonumber(out.algo[0]), tonumber(out.algo[1]), tonumber(out.algo[2]) },
           note = ffi.string(out.note), machine = ffi.string(out.machine) }
end

-- env.num_envs = "auto": the largest num_envs whose CUDA trainer (the
-- engine's own memory plan for cfg's shapes) fits in budget bytes; nil and a
-- message when none does. cfg is a config table (num_envs may still be "auto").
function engine.fit_num_envs(cfg, budget)
  local t, env = {}, {}
  for k, v in pairs(cfg) do t[k] = v end
  for k, v in pairs(cfg.env or {}) do env[k] = v end
  env.num_envs, t.env = 64, env
  local c, err = engine.config(t)
  if not c then return nil, err end
  local n, e = ffi.new("int[1]"), ffi.new("mr_error")
  if C.mr_config_fit_num_envs(c, budget, n, e) ~= 0 then return nil, ffi.string(e.msg) end
  return tonumber(n[0])
end

-- The tensors of a network as count(obj) and get(obj, i, mr_tensor, err)
-- describe them (mr_trainer_tensor*, mr_config_tensor*): {{name, shape,
-- offset, count}} in the engine's order, or nil, message.
local function tensor_list(count, get, obj)
  local out, ti, err = {}, ffi.new("mr_tensor"), ffi.new("mr_error")
  for i = 0, tonumber(count(obj)) - 1 do
    if get(obj, i, ti, err) ~= 0 then return nil, ffi.string(err.msg) end
    local shape = {}
    for k = 0, ti.ndim - 1 do shape[#shape + 1] = tonumber(ti.shape[k]) end
    out[#out + 1] = { name = ffi.string(ti.name), shape = shape, offset = tonumber(ti.offset),
                      count = tonumber(ti.count) }
  end
  return out
end

-- A trainer holding checkpoint `path`'s network (on the cpu, fp32, one
-- thread, sized for one step as an evaluation is; freed when collected, or by
-- T:free()): T (engine.trainer's), the checkpoint's own mr_config, its
-- update; or nil, message. The file is read twice: its info, then the load.
function engine.checkpoint_trainer(path)
  local info, ierr = engine.checkpoint_info(path)
  if not info then return nil, ierr end
  local cfg = ffi.new("mr_config", info.config)
  cfg.device, cfg.precision, cfg.threads = C.MR_DEVICE_CPU, C.MR_FP32, 1
  cfg.ppo.rollout_steps, cfg.ppo.minibatches = 1, 1
  local t, terr = engine.trainer(cfg)
  if not t then return nil, terr end
  if C.mr_trainer_load(t.handle, path, t.err) ~= 0 then return nil, ffi.string(t.err.msg) end
  return t, info.config, info.updates
end

-- The network of checkpoint `path`, read through engine.checkpoint_trainer: { config = mr_config,
-- tensors = { {name =, shape = {..}, data = float32 bytes}, ... } in the
-- engine's order, value_mean =, value_std = (PopArt: value = mean + std *
-- the value head's output), updates = }, or nil, message.
function engine.checkpoint_network(path)
  local t, stored, updates = engine.checkpoint_trainer(path)
  if not t then return nil, stored end
  local err = ffi.new("mr_error")
  local info, terr = tensor_list(C.mr_trainer_tensor_count, C.mr_trainer_tensor, t.handle)
  if not info then return nil, terr end
  local total = 0
  for _, x in ipairs(info) do total = total + x.count end
  local params = ffi.new("float[?]", total)
  if C.mr_trainer_read_params(t.handle, params, total, err) ~= 0 then return nil, ffi.string(err.msg) end
  for _, x in ipairs(info) do
    x.data = ffi.string(params + x.offset, 4 * x.count)
  end
  local mean, std = ffi.new("double[1]"), ffi.new("double[1]")
  if C.mr_trainer_value_scale(t.handle, mean, std, err) ~= 0 then return nil, ffi.string(err.msg) end
  t:free()
  return { config = stored, tensors = info, value_mean = mean[0], value_std = std[0], updates = updates }
end

-- The gradients a checkpoint holds (log.histograms), cut like net.tensors
-- (engine.checkpoint_network's): { [name] = float32 bytes }, or nil, message.
function engine.checkpoint_gradients(path, net)
  local total = 0
  for _, x in ipairs(net.tensors) do total = total + x.count end
  local g, err = ffi.new("float[?]", total), ffi.new("mr_error")
  if C.mr_checkpoint_read_gradients(path, g, total, err) ~= 0 then return nil, ffi.string(err.msg) end
  local out = {}
  for _, x in ipairs(net.tensors) do out[x.name] = ffi.string(g + x.offset, 4 * x.count) end
  return out
end

-- The weights in the safetensors file at path, as the float32 bytes of the
-- network mr_config c describes (policy.init), or nil and a message naming
-- what does not fit and what is accepted. The path is looked at before it
-- is opened: a missing file, a FIFO or a device (which would block, or never
-- end) and a file larger than this network's weights can be are refused
-- without reading a byte; every weight must be finite.
local INIT_HEADER_MAX = 16 * 1024 * 1024   -- a safetensors header (JSON), at most
function engine.init_params(c, path)
  local uv, util = require("luv"), require("moonrl.util")
  local st, serr = uv.fs_stat(path)
  if not st then
    return nil, "policy.init: no file at " .. path .. " (" .. tostring(serr) .. "); accepted: the path of a " ..
      "safetensors file of this network's weights (moonrl export writes one)"
  end
  if st.type ~= "file" then
    return nil, "policy.init: " .. path .. " " .. util.file_kind(st) .. "; accepted: a safetensors file " ..
      "(a regular file: moonrl export writes one)"
  end
  local list, lerr = tensor_list(C.mr_config_tensor_count, C.mr_config_tensor, c)
  if not list then return nil, lerr end
  local params = 0
  for _, x in ipairs(list) do params = params + x.count end
  local most = 8 + INIT_HEADER_MAX + 4 * params
  if st.size > most then
    return nil, string.format("policy.init: %s is %d bytes; this network's weights (%d parameters, 4 bytes each, " ..
      "and a header of at most 16 MiB) take at most %d: not read", path, st.size, params, most)
  end
  local text = util.read_file(path)
  if not text then return nil, "policy.init: cannot read " .. path .. " (permission denied, or it went away)" end
  local file, derr = require("moonrl.formats.safetensors").decode(text)
  if not file then return nil, "policy.init: " .. path .. " is " .. derr end
  local parts, names, want = {}, {}, {}
  local function shape_text(sh) return "(" .. table.concat(sh, ", ") .. ")" end
  local accepted = "accepted: a file moonrl export wrote from a run of this network (policy.conv_channels, " ..
    "policy.hidden, policy.critic_hidden and env.view_range as in this config)"
  for _, x in ipairs(list) do
    local name, shape = x.name, x.shape
    want[name] = true
    local t = file.tensors[name]
    if not t then return nil, "policy.init: " .. path .. " has no tensor " .. name .. " " .. shape_text(shape) .. "; " .. accepted end
    if t.dtype ~= "F32" then
      return nil, "policy.init: " .. path .. ": tensor " .. name .. " is " .. tostring(t.dtype) .. ", not F32; " .. accepted
    end
    if type(t.shape) ~= "table" or shape_text(t.shape) ~= shape_text(shape) then
      return nil, "policy.init: " .. path .. ": tensor " .. name .. " has the shape " ..
        shape_text(type(t.shape) == "table" and t.shape or {}) .. ", this network's is " .. shape_text(shape) .. "; " .. accepted
    end
    local p, bad = ffi.cast("const float *", t.data), 0
    for i = 0, #t.data / 4 - 1 do
      local v = p[i]
      if v ~= v or v == math.huge or v == -math.huge then bad = bad + 1 end
    end
    if bad > 0 then
      return nil, "policy.init: " .. path .. ": tensor " .. name .. " holds " .. bad .. " value" ..
        (bad == 1 and " that is" or "s that are") .. " not finite (NaN or infinite); accepted: finite weights " ..
        "(a file exported from a checkpoint before its run went non-finite)"
    end
    parts[#parts + 1] = t.data
  end
  for name in pairs(file.tensors) do if not want[name] then names[#names + 1] = name end end
  if #names > 0 then
    table.sort(names)
    return nil, "policy.init: " .. path .. " holds tensors this network does not have (" .. table.concat(names, ", ") ..
      "); " .. accepted
  end
  return table.concat(parts)
end

return engine

-- moonrl.env.program - a Lua environment's file: loaded as text in a
-- sandbox, bounded, and read for what it declares (docs/environments.md,
-- "An environment in Lua"). Pure Lua and LuaJIT's ffi only: it runs in the
-- host's per-thread Lua states (moonrl.env.thread, src/host/lua_env.c) as
-- well as on the loop.
--
-- What a file is: a chunk that returns a table (or sets globals) with
--   observation = { floats = N }                 a vector of N floats, or
--                 { image = { C, V, V } }        a float image, channels first (the CNN's)
--   action      = { discrete = N }               or { box = { low = {...}, high = {...} } }
--   fields      = { name = "double" | "float" | "int32" | "uint32" | "uint8" [.. "[count]"], ... }
--   counters    = { "name", ... }                optional, at most 4 (the episode's counts)
--   success     = "truncated" | a counter's name optional (what the evaluation counts a success)
--   max_steps   = N                              optional: the episode's own step limit
--   reset       = function(s, i) ... end         instance i's new episode: its fields and s.obs
--   step        = function(s, i, action) ... return reward, terminated end
--   step_slice  = function(s, i0, i1, action) ... end   or (or besides) step: instances i0 .. i1-1 at
--                                                once, action[i] theirs, writing s.reward[i] and
--                                                s.terminated[i] (0 or 1); faster (no call per instance)
--
-- The sandbox (moonrl.sandbox.env_globals): math, bit, and the pure base
-- functions (assert, error, ipairs, next, pairs, select, tonumber, tostring,
-- type, unpack); no os, io, require, load, string, table, debug, print,
-- pcall, setmetatable. The globals are read-only once the file has run: an
-- environment keeps its state in its declared fields (what checkpoints save,
-- what makes its bits independent of the threads).
--
-- The bounds (program.LIMITS: moonrl.sandbox.LIMITS, a live file's too): a count hook does not
-- see compiled code, so the text is instrumented instead: every loop body
-- (after each `do` and `repeat`), every function body and every `goto`
-- counts one against a budget the driver sets for each call of reset or
-- step of one instance; past LIMITS.instructions the call stops with
-- "FILE:LINE: step took too long" (the line of the loop or function). Line
-- numbers stay the file's (the counting goes on the same lines). The memory
-- limit is the host's allocator (src/host/lua_env.c). Names starting with
-- __mr_ are the instrumentation's.
--
--   program.LIMITS = {instructions =, memory_kib =}   (moonrl.sandbox.LIMITS, the same table)
--   program.TYPES  {double = 0, float = 1, int32 = 2, uint32 = 3, uint8 = 4} (mr_field_type)
--   program.instrument(text, label) -> text | nil, err
--   program.load(text, label[, opts]) -> spec | nil, err
--       opts.budget: the counter cdata (double[1]) the checks count down (default: a new one)
--       spec: {label, obs = N, act = {kind = "discrete", n =} | {kind = "box", low =, high =},
--              counters = {...}, success = "truncated" | counter | nil, max_steps,
--              fields = {{name =, type =, count =, ctype =}, ...} (sorted by name),
--              reset =, step =, step_slice =, budget =, set_what = function(what)}
--   program.fill(spec, prog) writes the declarations into an mr_env_program cdata
--   program.line_of(text, key) -> the line where `key =` is first set, or nil

local ffi = require("ffi")
local sandbox = require("moonrl.sandbox")
local util = require("moonrl.util")

local program = {}

program.LIMITS = sandbox.LIMITS

program.TYPES = { double = 0, float = 1, int32 = 2, uint32 = 3, uint8 = 4 }
local CTYPES = { double = "double", float = "float", int32 = "int32_t", uint32 = "uint32_t", uint8 = "uint8_t" }
local RANGE = { int32 = { -2147483648, 2147483647 }, uint32 = { 0, 4294967295 }, uint8 = { 0, 255 } }
program.CTYPES, program.RANGE = CTYPES, RANGE
local MAX_COUNT = 16777216          -- MR_PROGRAM_MAX_COUNT
local MAX_FIELDS = 16               -- MR_PROGRAM_MAX_FIELDS
local MAX_NAME = 31                 -- MR_PROGRAM_NAME_LEN - 1
-- what the driver's state table has already (envs/program.c's RESERVED)
local RESERVED = { n = true, seed = true, index0 = true, obs = true, obs_size = true, reward = true,
  terminated = true, truncated = true, steps = true, tick = true, ep_return = true, resets = true,
  uniform = true, below = true, limit = true, sincos = true }

-- ------------------------------------------------------------ instrumenting

local CHECK = "__mr_b[0]=__mr_b[0]-1 if __mr_b[0]<0 then __mr_over() end "

-- The text with a budget check at the start of every block that can repeat
-- (after `do`, `repeat`, a function's parameter list) and before every
-- `goto`; strings and comments are skipped as Lua's lexer skips them.
function program.instrument(text, label)
  local out, from = {}, 1
  local i, n = 1, #text
  local want_paren = false   -- after `function`: its parameter list's ")" opens the body
  local function cut(at, piece)   -- text up to `at` (exclusive), then piece
    out[#out + 1] = text:sub(from, at - 1)
    out[#out + 1] = piece
    from = at
  end
  local function line(at)
    local _, k = text:sub(1, at):gsub("\n", "")
    return k + 1
  end
  while i <= n do
    local c = text:byte(i)
    if c == 45 and text:byte(i + 1) == 45 then                       -- --
      local eq = text:match("^%[(=*)%[", i + 2)
      if eq then
        local _, e = text:find("]" .. eq .. "]", i + 2, true)
        i = (e or n) + 1
      else
        local e = text:find("\n", i, true)
        i = (e or n) + 1
      end
    elseif c == 91 and text:match("^%[=*%[", i) then                 -- [[ ]] [==[ ]==]
      local eq = text:match("^%[(=*)%[", i)
      local _, e = text:find("]" .. eq .. "]", i + 2 + #eq, true)
      i = (e or n) + 1
    elseif c == 34 or c == 39 then                                    -- " '
      local j = i + 1
      while j <= n do
        local d = text:byte(j)
        if d == 92 then j = j + 2
        elseif d == c or d == 10 then break
        else j = j + 1 end
      end
      i = j + 1
    elseif (c >= 65 and c <= 90) or (c >= 97 and c <= 122) or c == 95 then   -- a name
      local _, e = text:find("^[%w_]+", i)
      local w = text:sub(i, e)
      if w == "do" or w == "repeat" then
        cut(e + 1, " " .. CHECK)
      elseif w == "goto" then
        cut(i, CHECK)
      elseif w == "function" then
        want_paren = true
      elseif w:sub(1, 5) == "__mr_" then
        return nil, label .. ":" .. line(i) .. ": the name " .. w .. " is moonrl's (names starting __mr_ are)"
      end
      i = e + 1
    elseif c >= 48 and c <= 57 or (c == 46 and (text:byte(i + 1) or 0) >= 48 and (text:byte(i + 1) or 0) <= 57) then
      local hex = text:match("^0[xX]", i) ~= nil
      local j = i
      repeat
        local _, e = text:find("^[%w_%.]+", j)
        j = e + 1
        local last = text:sub(e, e)
        local more = (hex and last:match("[pP]") or (not hex and last:match("[eE]"))) and text:sub(j, j):match("[%+%-]")
        if more then j = j + 1 end
      until not more
      i = j
    elseif c == 41 and want_paren then                                -- )
      want_paren = false
      cut(i + 1, " " .. CHECK)
      i = i + 1
    else
      i = i + 1
    end
  end
  out[#out + 1] = text:sub(from)
  return table.concat(out)
end

-- --------------------------------------------------------------- loading

function program.line_of(text, key)
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local code = line:gsub("%-%-.*$", "")
    if code:find("%f[%w_]" .. key .. "%s*=") or code:find('%["' .. key .. '"%]%s*=') then return n end
  end
  return nil
end

local function is_int(v) return type(v) == "number" and v == math.floor(v) and v == v end

-- spec.field etc. from the declarations, or nil, "FILE:LINE: ..."
local function declarations(t, text, label)
  local function at(key, msg)
    local l = program.line_of(text, key)
    return nil, label .. (l and (":" .. l) or "") .. ": " .. msg
  end
  local spec = { label = label }
  -- observation
  local o = t.observation
  local expected = "expected { floats = N } (a vector, N in 1 .. 65536) or { image = { C, V, V } } (a float " ..
    "image, channels first: C in 1 .. 16, V in 1 .. 128, C V V <= 65536)"
  if o == nil then
    return at("observation", "declares no observation: expected observation = " .. expected:sub(10))
  end
  local img = type(o) == "table" and o.image
  if type(img) == "table" then
    local c, h, w = img[1], img[2], img[3]
    if #img ~= 3 or not (is_int(c) and is_int(h) and is_int(w)) or c < 1 or c > 16 or h ~= w or h < 1 or h > 128 or
      c * h * w > 65536 then
      return at("observation", "observation = " .. util.fmt_value(o, 60) .. ": " .. expected)
    end
    spec.obs, spec.image = c * h * w, { c, h, w }
  elseif type(o) ~= "table" or not is_int(o.floats) or o.floats < 1 or o.floats > 65536 then
    return at("observation", "observation = " .. util.fmt_value(o, 60) .. ": " .. expected)
  else
    spec.obs = o.floats
  end
  -- action
  local a = t.action
  if a == nil then
    return at("action", "declares no action: expected action = { discrete = N } or { box = { low = {...}, high = {...} } }")
  end
  if type(a) == "table" and a.discrete ~= nil then
    if not is_int(a.discrete) or a.discrete < 2 or a.discrete > 8 then
      return at("action", "action = { discrete = " .. util.fmt_value(a.discrete) .. " }: accepted 2 .. 8 actions")
    end
    spec.act = { kind = "discrete", n = a.discrete }
  elseif type(a) == "table" and type(a.box) == "table" then
    local lo, hi = a.box.low, a.box.high
    if type(lo) ~= "table" or type(hi) ~= "table" or #lo ~= #hi or #lo < 1 or #lo > 4 then
      return at("action", "action.box: expected { low = {...}, high = {...} } of 1 .. 4 numbers each")
    end
    for k = 1, #lo do
      if type(lo[k]) ~= "number" or type(hi[k]) ~= "number" or not (lo[k] < hi[k]) or lo[k] < -1e30 or hi[k] > 1e30 then
        return at("action", "action.box component " .. k .. ": low " .. util.fmt_value(lo[k]) .. ", high " ..
          util.fmt_value(hi[k]) .. ": expected finite numbers with low < high")
      end
    end
    spec.act = { kind = "box", n = #lo, low = lo, high = hi }
  else
    return at("action", "action = " .. util.fmt_value(a, 60) ..
      ": expected { discrete = N } or { box = { low = {...}, high = {...} } }")
  end
  -- counters
  local counters = t.counters or {}
  if type(counters) ~= "table" or #counters > 4 then
    return at("counters", "counters: expected a list of at most 4 names, got " .. util.fmt_value(counters, 60))
  end
  spec.counters = {}
  for k, name in ipairs(counters) do
    if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") or #name > MAX_NAME or RESERVED[name] then
      return at("counters", "counters[" .. k .. "] = " .. util.fmt_value(name) ..
        ": expected a name (letters, digits, _; at most " .. MAX_NAME .. " bytes) the state does not have already")
    end
    spec.counters[k] = name
  end
  -- success
  local s = t.success
  if s ~= nil and s ~= "truncated" then
    local found
    for k, name in ipairs(spec.counters) do if name == s then found = k end end
    if not found then
      return at("success", "success = " .. util.fmt_value(s) .. ": accepted \"truncated\" or one of the counters (" ..
        (#spec.counters > 0 and util.quote_list(spec.counters) or "none declared") .. ")")
    end
  end
  spec.success = s
  -- max_steps
  if t.max_steps ~= nil and (not is_int(t.max_steps) or t.max_steps < 0 or t.max_steps > 2147483647) then
    return at("max_steps", "max_steps = " .. util.fmt_value(t.max_steps) .. ": expected an integer >= 0")
  end
  spec.max_steps = t.max_steps or 0
  -- fields
  local fields = t.fields or {}
  if type(fields) ~= "table" then return at("fields", "fields: expected a table { name = \"double\", ... }") end
  local names = {}
  for name in pairs(fields) do
    if type(name) ~= "string" then
      return at("fields", "fields: the key " .. util.fmt_value(name) .. " is not a name: write { x = \"double\", ... }")
    end
    names[#names + 1] = name
  end
  table.sort(names)
  if #names > MAX_FIELDS then
    return at("fields", #names .. " fields: accepted at most " .. MAX_FIELDS .. " (a field may hold many values: \"double[4]\")")
  end
  spec.fields = {}
  local bytes = 0
  local SIZE = { double = 8, float = 4, int32 = 4, uint32 = 4, uint8 = 1 }
  for _, name in ipairs(names) do
    local decl = fields[name]
    if not name:match("^[%a_][%w_]*$") or #name > MAX_NAME or RESERVED[name] then
      return at(name, "field " .. util.fmt_value(name) .. ": expected a name (letters, digits, _; at most " .. MAX_NAME ..
        " bytes) that the state does not have already (n, seed, index0, obs, obs_size, reward, terminated, " ..
        "truncated, steps, tick, ep_return, resets, uniform, below, limit, sincos)")
    end
    for _, c in ipairs(spec.counters) do
      if c == name then return at(name, "field " .. name .. " has the name of a counter") end
    end
    local ty, count = nil, 1
    if type(decl) == "string" then
      ty = decl:match("^(%a[%w]*)$")
      if not ty then
        local cnt
        ty, cnt = decl:match("^(%a[%w]*)%[(.-)%]$")
        count = tonumber(cnt)
      end
    end
    if not ty or not CTYPES[ty] then
      return at(name, "field " .. name .. " = " .. util.fmt_value(decl) ..
        ": expected \"double\", \"float\", \"int32\", \"uint32\" or \"uint8\", optionally with a count: \"double[4]\"")
    end
    if not is_int(count) or count < 1 or count > MAX_COUNT then
      return at(name, "field " .. name .. " = " .. util.fmt_value(decl) .. ": " .. tostring(count) ..
        " values per instance: accepted 1 .. " .. util.fmt_number(MAX_COUNT))
    end
    bytes = bytes + count * SIZE[ty]
    if bytes > 268435456 then
      return at(name, "the fields up to " .. name .. " take " .. util.fmt_number(bytes) ..
        " bytes per instance: accepted at most 268,435,456 (256 MiB)")
    end
    spec.fields[#spec.fields + 1] = { name = name, type = ty, count = count, ctype = CTYPES[ty] }
  end
  spec.bytes = bytes
  -- the functions: reset, and step or step_slice (or both: step_slice runs)
  if type(t.reset) ~= "function" then
    return at("reset", "declares no reset function: expected reset = function(s, i), got " .. util.describe(t.reset))
  end
  if t.step_slice ~= nil and type(t.step_slice) ~= "function" then
    return at("step_slice", "step_slice = " .. util.describe(t.step_slice) ..
      ": expected step_slice = function(s, i0, i1, action) ... end (or leave it out and define step)")
  end
  if t.step_slice == nil and type(t.step) ~= "function" then
    return at("step", "declares no step function: expected step = function(s, i, action) ... return reward, " ..
      "terminated end (or step_slice = function(s, i0, i1, action)), got " .. util.describe(t.step))
  end
  if t.step ~= nil and type(t.step) ~= "function" then
    return at("step", "step = " .. util.describe(t.step) .. ": expected a function (s, i, action)")
  end
  spec.reset, spec.step, spec.step_slice = t.reset, t.step, t.step_slice
  return spec
end

function program.load(text, label, opts)
  opts = opts or {}
  if type(text) ~= "string" then return nil, label .. ": expected the text of a Lua file" end
  -- on line 1 with the file's first line, so every line keeps its number
  local chunk, err = sandbox.compile(text, label, function(body)
    local inst, ierr = program.instrument(body, label)
    if not inst then return nil, ierr end
    return "local __mr_b, __mr_over = ...; " .. inst
  end)
  if not chunk then return nil, err end
  local env = sandbox.env_globals()
  setfenv(chunk, env)
  local budget = opts.budget or ffi.new("double[1]")
  local limit = program.LIMITS.instructions
  local what = "the file"
  local function over()
    error(what .. " took too long: more than " .. util.fmt_number(limit) .. " loop iterations and calls" ..
      (what == "the file" and "" or what == "step_slice" and " per instance of its slice" or " for one instance") ..
      " (a Lua environment's limit, as a live file's)", 2)
  end
  budget[0] = limit
  local ok, res = pcall(chunk, budget, over)
  if not ok then
    local msg = tostring(res)
    if not msg:find(label, 1, true) then msg = label .. ": " .. msg end
    return nil, msg
  end
  local t = res
  if t == nil then t = env end
  if type(t) ~= "table" then
    return nil, label .. ": returned " .. util.describe(t) .. ": expected a table with observation, action, fields, " ..
      "reset and step (or those as globals)"
  end
  local spec, derr = declarations(t, text, label)
  if not spec then return nil, derr end
  -- from here on the globals are read-only and the checks count one call each
  setmetatable(env, { __newindex = function(_, k)
    error("assignment to the global " .. tostring(k) .. ": a Lua environment keeps its state in its declared " ..
      "fields (or locals of its functions)", 2)
  end })
  spec.budget = budget
  spec.set_what = function(w) what = w end
  return spec
end

-- The declarations into an mr_env_program (the host's, through the ffi).
function program.fill(spec, p)
  local C = ffi.C
  local sp = p.spaces
  if spec.image then   -- a float image: the CNN's input, channels first
    sp.obs.kind = C.MR_SPACE_IMAGE
    sp.obs.shape[0], sp.obs.shape[1], sp.obs.shape[2] = spec.image[1], spec.image[2], spec.image[3]
  else
    sp.obs.kind = C.MR_SPACE_VECTOR
    sp.obs.shape[0], sp.obs.shape[1], sp.obs.shape[2] = spec.obs, 1, 1
  end
  if spec.act.kind == "discrete" then
    sp.act.kind = C.MR_SPACE_DISCRETE
    sp.act.n = spec.act.n
  else
    sp.act.kind = C.MR_SPACE_BOX
    sp.act.n = spec.act.n
    for k = 1, spec.act.n do sp.act.low[k - 1], sp.act.high[k - 1] = spec.act.low[k], spec.act.high[k] end
  end
  sp.counters = #spec.counters
  for k, name in ipairs(spec.counters) do ffi.copy(p.counter_name[k - 1], name) end
  sp.eval = C.MR_EVAL_EPISODIC
  sp.success = C.MR_SUCCESS_NONE
  if spec.success == "truncated" then
    sp.success = C.MR_SUCCESS_TRUNCATED
  elseif spec.success then
    sp.success = C.MR_SUCCESS_COUNTER
    for k, name in ipairs(spec.counters) do if name == spec.success then sp.success_counter = k - 1 end end
  end
  p.max_steps = spec.max_steps
  p.fields = #spec.fields
  for k, f in ipairs(spec.fields) do
    local d = p.field[k - 1]
    ffi.copy(d.name, f.name)
    d.type = program.TYPES[f.type]   -- mr_field_type's order
    d.count = f.count
  end
end

return program

-- moonrl.env.thread - the driver of a Lua environment in one of the host's
-- per-thread Lua states (src/host/lua_env.c): the loops over a thread's
-- slice of instances, in Lua so that LuaJIT compiles each loop with the
-- file's reset and step inlined into it (one call from C per slice, never
-- one per instance).
--
-- A step of instance i: the file's step(s, i, action) -> reward, terminated
-- (a number, and true / false / nil), then the engine's end of a step
-- (mr_program_end_step: the tick, the truncation at the limit, the reward
-- clamped and logged with the counters); an episode that ended starts again
-- at once: the file's reset(s, i), then s.resets[i] counts it. A full reset:
-- the engine's bookkeeping (mr_program_begin), reset(s, i), s.resets[i] + 1.
-- Each call of reset or step gets the budget of program.LIMITS.instructions.
--
-- The state table s the file sees: s.n, s.index0, s.obs_size, s.limit,
-- s.obs (float[n * obs_size]; instance i's at i * obs_size), s.steps,
-- s.tick, s.resets, each declared field (its C type, instance i's values at
-- i * count .. i * count + count - 1), each counter (int32[n]: add to
-- s.NAME[i] when it counts), s.uniform(i, counter, k[, purpose]) ->
-- [0, 1) with 53 bits and s.below(i, counter, k, m[, purpose]) -> 0 .. m-1,
-- keyed (seed, the instance's global index, counter, purpose (default 0:
-- rng.h's MR_RNG_LUA), k) as every environment's draws (rng.h).
--
-- With checks on (env.lua_checks), every array of s is a table that checks
-- each index against the array's length and each value against its type,
-- and the reward is checked to be finite: an error names the file's line.
-- About 20x slower: a mode to find a bug with, not to train in.
--
--   thread.open(cdef, text, label, checks, prog) -> step_slice, reset_slice, handler | nil, err
--       prog: an mr_env_program * to write the declarations into (lightuserdata), or nil
--       step_slice(io, i0, i1, actions), reset_slice(io, i0, i1): io and actions lightuserdata
--       handler(msg): the message and the file's own lines of the traceback

local ffi = require("ffi")
local program = require("moonrl.env.program")
local util = require("moonrl.util")

local thread = {}

local cdef_done = false

local function guard(p, len, name, label, ty)
  local range = program.RANGE[ty]
  local function bad_index(k)
    error(name .. "[" .. util.fmt_value(k) .. "]: outside its " .. len .. " values (0 .. " .. (len - 1) ..
      "; env.lua_checks)", 3)
  end
  return setmetatable({}, {
    __index = function(_, k)
      if type(k) ~= "number" or k < 0 or k >= len or k ~= math.floor(k) then bad_index(k) end
      return p[k]
    end,
    __newindex = function(_, k, v)
      if type(k) ~= "number" or k < 0 or k >= len or k ~= math.floor(k) then bad_index(k) end
      if type(v) ~= "number" or v ~= v then
        error(name .. "[" .. k .. "] = " .. util.describe(v) .. ": expected a number (" .. ty .. "; env.lua_checks)", 2)
      end
      if range and (v ~= math.floor(v) or v < range[1] or v > range[2]) then
        error(name .. "[" .. k .. "] = " .. util.fmt_value(v) .. ": expected an integer in " .. range[1] .. " .. " ..
          range[2] .. " (" .. ty .. "; env.lua_checks)", 2)
      end
      p[k] = v
    end,
  })
end

function thread.open(cdef, text, label, checks, prog)
  if not cdef_done then
    ffi.cdef(cdef)
    cdef_done = true
  end
  local C = ffi.C
  local spec, err = program.load(text, label)
  if not spec then return nil, err end
  if prog then program.fill(spec, ffi.cast("mr_env_program *", prog)) end
  local step, reset, budget, set_what = spec.step, spec.reset, spec.budget, spec.set_what
  local LIMIT = program.LIMITS.instructions
  local step_line = debug.getinfo(step, "S").linedefined
  local box = spec.act.kind == "box"
  local K = spec.act.n

  local s, resets, cur_id
  local function build(io)
    local n = io.n
    s = { n = n, index0 = io.index0, obs_size = io.obs_size, limit = io.limit }
    local seed, index0 = io.seed, io.index0
    s.uniform = function(i, counter, k, purpose)
      return C.mr_program_uniform(seed, index0 + i, counter, purpose or 0, k)
    end
    s.below = function(i, counter, k, m, purpose)
      return C.mr_program_below(seed, index0 + i, counter, purpose or 0, k, m)
    end
    local arrays = {
      { "obs", io.obs_f, n * io.obs_size, "float" }, { "steps", io.steps, n, "int32" },
      { "tick", io.tick, n, "uint32" }, { "resets", io.resets, n, "uint32" },
    }
    for k, name in ipairs(spec.counters) do arrays[#arrays + 1] = { name, io.count[k - 1], n, "int32" } end
    for k, f in ipairs(spec.fields) do
      arrays[#arrays + 1] = { f.name, ffi.cast(f.ctype .. " *", io.field[k - 1]), n * f.count, f.type }
    end
    for _, a in ipairs(arrays) do
      s[a[1]] = checks and guard(a[2], a[3], a[1], label, a[4]) or a[2]
    end
    resets = io.resets
    cur_id = io.id
  end

  local function bad_return(r, term, i)
    error(label .. ":" .. step_line .. ": step returned " .. util.describe(r) .. ", " .. util.describe(term) ..
      " for instance " .. i .. ": expected the reward (a number" .. (checks and ", finite" or "") ..
      ") and terminated (true, false or nil)", 0)
  end

  local IO = ffi.typeof("const mr_program_io *")
  local U8 = ffi.typeof("const uint8_t *")
  local F32 = ffi.typeof("const float *")

  local function step_slice(iop, i0, i1, ap)
    local io = ffi.cast(IO, iop)
    if io.id ~= cur_id then build(io) end
    local st = io.state
    set_what("step")
    if box then
      local a = ffi.cast(F32, ap)
      for i = i0, i1 - 1 do
        budget[0] = LIMIT
        local r, term = step(s, i, a + i * K)
        if type(r) ~= "number" or (term ~= nil and term ~= true and term ~= false) then bad_return(r, term, i) end
        if checks and (r ~= r or r == math.huge or r == -math.huge) then bad_return(r, term, i) end
        if C.mr_program_end_step(st, i, r, term and 1 or 0) ~= 0 then
          set_what("reset")
          budget[0] = LIMIT
          reset(s, i)
          resets[i] = resets[i] + 1
          set_what("step")
        end
      end
    else
      local a = ffi.cast(U8, ap)
      for i = i0, i1 - 1 do
        budget[0] = LIMIT
        local r, term = step(s, i, a[i])
        if type(r) ~= "number" or (term ~= nil and term ~= true and term ~= false) then bad_return(r, term, i) end
        if checks and (r ~= r or r == math.huge or r == -math.huge) then bad_return(r, term, i) end
        if C.mr_program_end_step(st, i, r, term and 1 or 0) ~= 0 then
          set_what("reset")
          budget[0] = LIMIT
          reset(s, i)
          resets[i] = resets[i] + 1
          set_what("step")
        end
      end
    end
  end

  local function reset_slice(iop, i0, i1)
    local io = ffi.cast(IO, iop)
    if io.id ~= cur_id then build(io) end
    local st = io.state
    set_what("reset")
    for i = i0, i1 - 1 do
      C.mr_program_begin(st, i)
      budget[0] = LIMIT
      reset(s, i)
      resets[i] = resets[i] + 1
    end
  end

  -- the message, then the frames of the file's own code
  local function handler(msg)
    msg = tostring(msg)
    local tb = debug.traceback("", 2)
    local lines = { msg }
    for line in tb:gmatch("[^\n]+") do
      if line:find(label, 1, true) and not line:find("moonrl/env/", 1, true) then
        lines[#lines + 1] = "  " .. line:gsub("^%s+", "")
      end
    end
    if #lines > 1 then table.insert(lines, 2, "stack traceback (" .. label .. "):") end
    return table.concat(lines, "\n")
  end

  return step_slice, reset_slice, handler
end

return thread

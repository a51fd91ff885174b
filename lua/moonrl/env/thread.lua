-- moonrl.env.thread - the driver of a Lua environment in one of the host's
-- per-thread Lua states (src/host/lua_env.c): the loops over a thread's
-- slice of instances, in Lua so that LuaJIT compiles each loop with the
-- file's reset and step inlined into it (one call from C per slice, never
-- one per instance).
--
-- A step of the slice: the file's step(s, i, action) -> reward, terminated
-- (a number, and true / false / nil) for each instance, stored into
-- s.reward[i] and s.terminated[i]; or, when the file has it, its
-- step_slice(s, i0, i1, action), which writes those itself. Then the
-- engine's end of the slice's steps in one call (mr_program_end_steps: the
-- tick, the truncation at the limit, the reward clamped and logged with the
-- counters), which lists the episodes that ended; each starts again at
-- once: the file's reset(s, i), then s.resets[i] counts it. A full reset:
-- the engine's bookkeeping (mr_program_begin), reset(s, i), s.resets[i] + 1.
-- Each call of reset or step gets the budget of program.LIMITS.instructions
-- (a step_slice: that times the instances of its slice).
--
-- The state table s the file sees: s.n, s.index0, s.obs_size, s.limit,
-- s.obs (float[n * obs_size]; instance i's at i * obs_size), s.steps,
-- s.tick, s.resets, s.reward, s.terminated, each declared field (its C
-- type, instance i's values at i * count .. i * count + count - 1), each
-- counter (int32[n]: add to s.NAME[i] when it counts), s.uniform(i,
-- counter, k[, purpose]) -> [0, 1) with 53 bits and s.below(i, counter, k,
-- m[, purpose]) -> 0 .. m-1, keyed (seed, the instance's global index,
-- counter, purpose (default 0: rng.h's MR_RNG_LUA), k) as every
-- environment's draws (rng.h), and s.sincos(x, i0, i1) -> sn, cs: sin and
-- cos of the doubles x[i0 .. i1-1] into sn[i], cs[i] (scratch arrays of n,
-- valid until the next call) with the C library's bits (mr_program_sincos).
--
-- Debugging the compiled code: MOONRL_LUA_ENV_JITV=FILE writes LuaJIT's
-- trace log (jit.v: traces, aborts and their reasons) of every
-- environment state, MOONRL_LUA_ENV_JITDUMP=FILE the traces in full
-- (jit.dump: bytecode, IR, machine code).
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
  local jv = os.getenv("MOONRL_LUA_ENV_JITV")   -- LuaJIT's trace log of the environment's state, to a file
  if jv then require("jit.v").on(jv) end
  local jd = os.getenv("MOONRL_LUA_ENV_JITDUMP")   -- LuaJIT's traces in full (jit.dump), to a file
  if jd then require("jit.dump").on("tbimrsx", jd) end
  if not cdef_done then
    ffi.cdef(cdef)
    pcall(ffi.cdef, "void *malloc(size_t); void free(void *);")
    cdef_done = true
  end
  local C = ffi.C
  local spec, err = program.load(text, label)
  if not spec then return nil, err end
  if prog then program.fill(spec, ffi.cast("mr_env_program *", prog)) end
  local step, step_cols, reset, budget, set_what = spec.step, spec.step_slice, spec.reset, spec.budget, spec.set_what
  local LIMIT = program.LIMITS.instructions
  local step_line = step and debug.getinfo(step, "S").linedefined
  local slice_line = step_cols and debug.getinfo(step_cols, "S").linedefined
  local box = spec.act.kind == "box"
  local K = spec.act.n

  -- a buffer of `count` values of `ct` outside the state's memory limit (its size is the instances')
  local function scratch(ct, count)
    local p = C.malloc(math.max(count, 1) * ffi.sizeof(ct))
    if p == nil then error(label .. ": out of memory for " .. count .. " values of scratch", 0) end
    return ffi.gc(ffi.cast(ffi.typeof("$ *", ct), p), C.free)
  end

  local s, resets, cur_id, reward, terminated, ended
  local raw = setmetatable({}, { __mode = "k" })   -- a checked array -> its pointer and length
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
      { "reward", io.reward, n, "float" }, { "terminated", io.terminated, n, "uint8" },
    }
    for k, name in ipairs(spec.counters) do arrays[#arrays + 1] = { name, io.count[k - 1], n, "int32" } end
    for k, f in ipairs(spec.fields) do
      arrays[#arrays + 1] = { f.name, ffi.cast(f.ctype .. " *", io.field[k - 1]), n * f.count, f.type }
    end
    for _, a in ipairs(arrays) do
      if checks then
        local g = guard(a[2], a[3], a[1], label, a[4])
        raw[g] = { a[2], a[3], a[4] }
        s[a[1]] = g
      else
        s[a[1]] = a[2]
      end
    end
    -- s.sincos(x, i0, i1) -> sn, cs: sin and cos of the doubles x[i0 .. i1-1] into sn[i], cs[i]
    local snp, csp, sn, cs   -- the scratch (n doubles each), and what the file gets of it
    s.sincos = function(x, i0, i1)
      if not snp then
        snp, csp = scratch(ffi.typeof("double"), n), scratch(ffi.typeof("double"), n)
        sn, cs = snp, csp
        if checks then sn, cs = guard(snp, n, "sin", label, "double"), guard(csp, n, "cos", label, "double") end
      end
      if checks then
        local r = raw[x]
        if not r or r[3] ~= "double" then
          error("s.sincos: expected a double array of s (a field), got " .. util.describe(x) .. " (env.lua_checks)", 2)
        end
        if not (i0 >= 0 and i1 <= n and i1 <= r[2] and i0 <= i1) then
          error("s.sincos(x, " .. util.fmt_value(i0) .. ", " .. util.fmt_value(i1) .. "): expected 0 <= i0 <= i1 <= " ..
            math.min(n, r[2]) .. " (env.lua_checks)", 2)
        end
        x = r[1]
      end
      C.mr_program_sincos(x + i0, i1 - i0, snp + i0, csp + i0)
      return sn, cs
    end
    resets = io.resets
    reward, terminated = io.reward, io.terminated
    ended = scratch(ffi.typeof("int32_t"), n)
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

  -- the engine's end of the slice's steps (one call), then the ended episodes' resets
  local function finish(st, i0, i1)
    local m = C.mr_program_end_steps(st, i0, i1, ended)
    if m > 0 then
      set_what("reset")
      for k = 0, m - 1 do
        local i = ended[k]
        budget[0] = LIMIT
        reset(s, i)
        resets[i] = resets[i] + 1
      end
    end
  end

  local function step_slice(iop, i0, i1, ap)
    local io = ffi.cast(IO, iop)
    if io.id ~= cur_id then build(io) end
    local st = io.state
    if step_cols then   -- the file steps the slice itself, writing s.reward and s.terminated
      set_what("step_slice")
      budget[0] = LIMIT * (i1 - i0)
      local a = box and ffi.cast(F32, ap) or ffi.cast(U8, ap)
      if checks then
        a = guard(a, io.n * K, "action", label, box and "float" or "uint8")
      end
      step_cols(s, i0, i1, a)
      if checks then
        for i = i0, i1 - 1 do
          local r = reward[i]
          if r ~= r or r == math.huge or r == -math.huge or terminated[i] > 1 then
            error(label .. ":" .. slice_line .. ": step_slice left reward[" .. i .. "] = " .. util.fmt_value(r) ..
              ", terminated[" .. i .. "] = " .. terminated[i] .. ": expected a finite reward and terminated 0 or 1 " ..
              "(env.lua_checks)", 0)
          end
        end
      end
    else
      set_what("step")
      if box then
        local a = ffi.cast(F32, ap)
        for i = i0, i1 - 1 do
          budget[0] = LIMIT
          local r, term = step(s, i, a + i * K)
          if type(r) ~= "number" or (term ~= nil and term ~= true and term ~= false) then bad_return(r, term, i) end
          if checks and (r ~= r or r == math.huge or r == -math.huge) then bad_return(r, term, i) end
          reward[i] = r
          terminated[i] = term and 1 or 0
        end
      else
        local a = ffi.cast(U8, ap)
        for i = i0, i1 - 1 do
          budget[0] = LIMIT
          local r, term = step(s, i, a[i])
          if type(r) ~= "number" or (term ~= nil and term ~= true and term ~= false) then bad_return(r, term, i) end
          if checks and (r ~= r or r == math.huge or r == -math.huge) then bad_return(r, term, i) end
          reward[i] = r
          terminated[i] = term and 1 or 0
        end
      end
    end
    finish(st, i0, i1)
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

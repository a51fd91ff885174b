-- moonrl.sandbox - the globals that Lua text given to moonrl runs in, the
-- bounds on what runs untrusted, and loading such text. One place for the
-- three kinds of file:
--
--   a config file (moonrl.config.load)     trusted code like any script: the
--       sandbox keeps it tidy, it is not a security boundary. Its globals: the
--       constructors linear, cosine, constant, step and moonrl.schedule; the
--       pure standard library (string, math, table, bit, pairs, pcall, ...),
--       os.time/clock/date/getenv, print and require (hooks defined in a
--       config may need modules). No io, no os.execute, no loadfile/dofile.
--   a live tweak file (moonrl.run.tweaks)  bounded: the schedule
--       constructors, math, string, table, bit and a few pure base functions;
--       no os, io, require, load, debug, print or pcall. Run with
--       sandbox.run_bounded: JIT off for its code, so a count hook bounds it
--       to LIMITS.instructions and checks its memory every 10 instructions
--       against LIMITS.memory_kib; the library functions that work in C are
--       wrapped (see "The bounds" below).
--   a Lua environment's file (moonrl.env.program)   math, bit and the pure
--       base functions; no os, io, require, load, string, table, debug,
--       print, pcall. Its bounds are the same LIMITS, enforced otherwise
--       (instrumented text, the host's allocator: moonrl.env.program).
-- Each call gives a fresh table: nothing one file sets reaches another, or
-- moonrl's own globals.
--
-- Source text only, for all three: precompiled bytecode is refused
-- (util.load_text), as LuaJIT does not verify it and a crafted chunk can
-- crash the process.
--
--   sandbox.LIMITS = {instructions =, memory_kib =}   a live file's and a Lua
--       environment's (moonrl.run.live.LIMITS and moonrl.env.program.LIMITS
--       are this table)
--   sandbox.config_globals() -> a config file's globals
--   sandbox.live_globals() -> a live tweak file's globals
--   sandbox.env_globals() -> a Lua environment file's globals
--   sandbox.compile(text, label[, prepare]) -> chunk | nil, err
--       bytecode refused; a first line starting with "#" (a shebang) and a
--       UTF-8 byte order mark dropped, keeping the line numbers; chunk name
--       "@" .. label; a syntax error reads "label:LINE: syntax error: ...".
--       prepare(body) -> body | nil, err: the text changed before loading
--       (moonrl.env.program instruments it)
--   sandbox.run_bounded(chunk) -> ok, result | false, err   in live_globals, bounded
--   sandbox.bounded(fn, ...) -> ok, result | false, err     fn(...) under the bounds
--   sandbox.keep_bounded(f)        f came from a bounded file: call it bounded from now on
--   sandbox.is_bounded(f) -> true for such a function
--   sandbox.call(f, ...) -> ok, res | false, err     f under the file's limits
--   sandbox.sample(f, u[, progress]) -> {f(0/u), ..., f((u-1)/u)} | nil, err   the same, one budget

local schedule = require("moonrl.schedule")
local util = require("moonrl.util")

local sandbox = {}

sandbox.LIMITS = { instructions = 5e7, memory_kib = 65536 }

-- ------------------------------------------------------------ loading text

function sandbox.compile(text, label, prepare)
  if util.is_bytecode(text) then return nil, label .. ": " .. util.BYTECODE_REFUSED end
  local body = text:gsub("^\239\187\191", ""):gsub("^#[^\n]*", "")
  if prepare then
    local perr
    body, perr = prepare(body)
    if not body then return nil, perr end
  end
  local chunk, err = util.load_text(body, "@" .. label, label)
  if not chunk then
    -- "path:3: '}' expected near 'lr'" -> "path:3: syntax error: ..."
    local where, rest = tostring(err):match("^(.-:%d+): (.*)$")
    if where then return nil, where .. ": syntax error: " .. rest end
    return nil, tostring(err)
  end
  return chunk
end

-- ----------------------------------------------------------------- globals

function sandbox.config_globals()
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

function sandbox.env_globals()
  local env = {}
  for _, name in ipairs({ "assert", "error", "ipairs", "next", "pairs", "select", "tonumber", "tostring", "type",
    "unpack", "rawequal", "rawget", "rawlen" }) do
    env[name] = _G[name]
  end
  local m = {}
  for k, v in pairs(math) do m[k] = v end
  env.math = m
  local b = {}
  for k, v in pairs(bit) do b[k] = v end
  env.bit = b
  env._G = env
  return env
end

-- ------------------------------------------------------------- the bounds

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

-- The bounds. A count hook sees only Lua instructions: a C function (a
-- string.rep of a GiB, a pattern that backtracks for minutes) runs to its
-- end unseen. So every library function that can allocate or loop much in
-- C is wrapped: it refuses a call whose result would not fit in the memory
-- left, or whose worst case (patterns: subject length to the power of the
-- pattern's repetitions) is over the instructions left, before calling it;
-- it charges its work to the same instruction budget and checks memory
-- after. During a bounded call the string metatable's __index is the
-- wrapped string table too, so ("x"):rep(n) is covered; the real one is put
-- back when the call ends, error or not.

local meter   -- the bounded call in progress: { used = instructions so far, m0 = KiB at start }

local function kib_used() return collectgarbage("count") - meter.m0 end

local function over_time(what)
  return what .. "took too long: more than " .. util.fmt_number(sandbox.LIMITS.instructions) .. " instructions"
end

local function over_memory(what)
  return what .. "uses too much memory: more than " .. sandbox.LIMITS.memory_kib .. " KiB"
end

-- Raises (at `level` above the caller) when the memory in use is over the limit.
local function check_memory(what, level)
  if kib_used() > sandbox.LIMITS.memory_kib then
    collectgarbage()
    if kib_used() > sandbox.LIMITS.memory_kib then error(over_memory(what), level + 1) end
  end
end

-- Refuses a call that would make `bytes` more when they do not fit.
local function room(name, bytes, level)
  if not meter then return end
  local left = (sandbox.LIMITS.memory_kib - kib_used()) * 1024
  if bytes > left then
    collectgarbage()
    left = (sandbox.LIMITS.memory_kib - kib_used()) * 1024
  end
  if bytes > left then
    error(name .. ": " .. util.fmt_number(math.floor(bytes)) .. " bytes is over the live file's memory limit of " ..
      sandbox.LIMITS.memory_kib .. " KiB", level + 1)
  end
end

-- Counts `steps` of C work against the instruction budget; refuses (before
-- the call) what would go over it.
local function charge(name, steps, level, why)
  if not meter then return end
  if meter.used + steps > sandbox.LIMITS.instructions then
    error(name .. ": " .. (why or "") .. over_time(why and "; a live file " or ""), level + 1)
  end
  meter.used = meter.used + steps
end

-- Worst-case steps of Lua's matcher for pattern p on a subject of n bytes:
-- each * + - may try every length ((n + 1) ways), each ? two, each %b or
-- back-reference scans the subject; an unanchored search starts at every
-- position.
local string_find, string_match, string_gmatch, string_gsub = string.find, string.match, string.gmatch, string.gsub
local string_rep, string_format, string_sub, string_byte = string.rep, string.format, string.sub, string.byte

local function pattern_cost(p, n, plain, anchor)
  local len, n1 = #p, n + 1
  if plain or not string_find(p, "[%^%$%*%+%?%.%(%)%[%]%%%-]") then return n1 * (len + 1) end
  local cost, i = len + 1, 1
  if anchor and string_byte(p, 1) == 94 then i = 2 else cost = cost * n1 end
  while i <= len and cost < math.huge do
    local c = string_sub(p, i, i)
    local e   -- the end of a single-character class, when it is one
    if c == "%" then
      local d = string_sub(p, i + 1, i + 1)
      if d == "b" then cost, i = cost * n1, i + 4
      elseif d == "f" then
        i = i + 2
        if string_sub(p, i, i) == "[" then
          local j = i + 1
          if string_sub(p, j, j) == "^" then j = j + 1 end
          repeat if string_sub(p, j, j) == "%" then j = j + 2 else j = j + 1 end until j > len or string_sub(p, j, j) == "]"
          i = j + 1
        end
      elseif string_find(d, "^%d$") then cost, i = cost * n1, i + 2
      else e = i + 1 end
    elseif c == "[" then
      local j = i + 1
      if string_sub(p, j, j) == "^" then j = j + 1 end
      repeat if string_sub(p, j, j) == "%" then j = j + 2 else j = j + 1 end until j > len or string_sub(p, j, j) == "]"
      e = j
    elseif c == "(" or c == ")" or (c == "$" and i == len) then
      i = i + 1
    else
      e = i
    end
    if e then
      local q = string_sub(p, e + 1, e + 1)
      if q == "*" or q == "+" or q == "-" then cost, i = cost * n1, e + 2
      elseif q == "?" then cost, i = cost * 2, e + 2
      else i = e + 1 end
    end
  end
  return cost
end


local function check_pattern(name, s, p, plain, anchor, level)
  if not meter or type(s) ~= "string" and type(s) ~= "number" or type(p) ~= "string" and type(p) ~= "number" then
    return
  end
  s, p = tostring(s), tostring(p)
  local cost = pattern_cost(p, #s, plain, anchor)
  if meter.used + cost > sandbox.LIMITS.instructions then
    error(name .. ": the pattern " .. util.fmt_value(p, 40) .. " on " .. util.fmt_number(#s) ..
      " bytes could take " .. (cost < math.huge and util.fmt_number(cost) or "unbounded") ..
      " steps, over what is left of the live file's limit of " .. util.fmt_number(sandbox.LIMITS.instructions) ..
      " instructions (a plain find, or a simpler pattern on a shorter string, is cheap)", level + 1)
  end
  meter.used = meter.used + math.min(cost, #s * (#p + 1) + 1)
end

local function after(name)
  if meter then check_memory(name .. ": ", 3) end
end

local wrapped_string = {}
for k, v in pairs(string) do wrapped_string[k] = v end
wrapped_string.dump = nil

function wrapped_string.rep(s, n, sep)
  if meter and (type(s) == "string" or type(s) == "number") and type(n) == "number" and n >= 1 then
    local bytes = #tostring(s) * math.floor(n) + (sep and #tostring(sep) or 0) * (math.floor(n) - 1)
    room("string.rep", bytes, 2)
    charge("string.rep", bytes / 64, 2)
  end
  local r = string_rep(s, n, sep)
  after("string.rep")
  return r
end

function wrapped_string.format(fmt, ...)
  if meter and type(fmt) == "string" then
    local bytes = #fmt
    for i = 1, select("#", ...) do
      local a = select(i, ...)
      bytes = bytes + (type(a) == "string" and 4 * #a or 0) + 128
    end
    room("string.format", bytes, 2)
    charge("string.format", bytes / 64, 2)
  end
  local r = string_format(fmt, ...)
  after("string.format")
  return r
end

for _, name in ipairs({ "upper", "lower", "reverse", "sub" }) do
  local f = string[name]
  wrapped_string[name] = function(s, ...)
    if meter and type(s) == "string" then
      room("string." .. name, #s, 2)
      charge("string." .. name, #s / 64, 2)
    end
    return f(s, ...)
  end
end

function wrapped_string.find(s, p, init, plain)
  check_pattern("string.find", s, p, plain, true, 2)
  local r = { n = 0 }
  local function keep(...) r.n = select("#", ...); for i = 1, r.n do r[i] = (select(i, ...)) end end
  keep(string_find(s, p, init, plain))
  after("string.find")
  return unpack(r, 1, r.n)
end

function wrapped_string.match(s, p, init)
  check_pattern("string.match", s, p, false, true, 2)
  local r = { n = 0 }
  local function keep(...) r.n = select("#", ...); for i = 1, r.n do r[i] = (select(i, ...)) end end
  keep(string_match(s, p, init))
  after("string.match")
  return unpack(r, 1, r.n)
end

function wrapped_string.gmatch(s, p)
  local it = string_gmatch(s, p)
  return function()
    -- each step searches the rest of the subject: charged as a whole search
    check_pattern("string.gmatch", s, p, false, false, 2)
    local r = { n = 0 }
    local function keep(...) r.n = select("#", ...); for i = 1, r.n do r[i] = (select(i, ...)) end end
    keep(it())
    after("string.gmatch")
    return unpack(r, 1, r.n)
  end
end

function wrapped_string.gsub(s, p, repl, n)
  check_pattern("string.gsub", s, p, false, true, 2)
  if meter and (type(s) == "string" or type(s) == "number") then
    local len = #tostring(s)
    local matches = math.min(len + 1, type(n) == "number" and math.max(0, n) or math.huge)
    if type(repl) == "string" or type(repl) == "number" then
      -- literal bytes each time, plus each %0-%9 at most the subject once in all
      -- (matches do not overlap; a position capture is a short number)
      repl = tostring(repl)
      local refs = select(2, string_gsub(repl, "%%[0-9]", ""))
      local literal = #repl - 2 * refs
      room("string.gsub", len + matches * (literal + 24 * refs) + refs * len, 2)
    elseif type(repl) == "function" or type(repl) == "table" then
      local f, t, grown = repl, repl, 0
      local lookup = type(repl) == "table" and function(k) return t[k] end or f
      repl = function(...)
        local v = lookup(...)
        if type(v) == "string" or type(v) == "number" then
          grown = grown + #tostring(v)
          room("string.gsub", grown, 2)
        end
        return v
      end
      jit.off(repl)
    end
  end
  local r, count = string_gsub(s, p, repl, n)
  after("string.gsub")
  return r, count
end

local wrapped_table = {}
for k, v in pairs(table) do wrapped_table[k] = v end
local table_concat, table_insert, table_remove, table_sort, table_maxn =
  table.concat, table.insert, table.remove, table.sort, table.maxn

function wrapped_table.concat(t, sep, i, j)
  if meter and type(t) == "table" then
    i = i or 1
    j = j or #t
    local bytes = 0
    for k = i, j do
      local v = t[k]
      if type(v) == "string" then bytes = bytes + #v
      elseif type(v) == "number" then bytes = bytes + 24
      else break end   -- concat raises there
    end
    bytes = bytes + (type(sep) == "string" and #sep or 0) * math.max(0, j - i)
    room("table.concat", bytes, 2)
    charge("table.concat", bytes / 64, 2)
  end
  local r = table_concat(t, sep, i, j)
  after("table.concat")
  return r
end

-- moving or scanning every element in C: charged per element
for name, f in pairs({ insert = table_insert, remove = table_remove, maxn = table_maxn }) do
  wrapped_table[name] = function(t, ...)
    if type(t) == "table" then charge("table." .. name, #t, 2) end
    return f(t, ...)
  end
end

function wrapped_table.sort(t, cmp)
  if type(t) == "table" then charge("table.sort", #t * math.log(#t + 2) * 4, 2) end
  return table_sort(t, cmp)
end

local function wrapped_unpack(t, i, j)
  if type(t) == "table" then
    local n = (j or #t) - (i or 1)
    if n > 0 then charge("unpack", n, 2) end
  end
  return unpack(t, i, j)
end

for _, t in ipairs({ wrapped_string, wrapped_table }) do
  for _, f in pairs(t) do
    if type(f) == "function" then pcall(jit.off, f) end   -- so the count hook sees their own loops
  end
end
jit.off(wrapped_unpack)

function sandbox.live_globals()
  local env = schedule.env()
  env.moonrl = { schedule = schedule }
  for _, name in ipairs({ "assert", "error", "ipairs", "next", "pairs", "rawequal", "rawget", "select",
    "tonumber", "tostring", "type" }) do
    env[name] = _G[name]
  end
  env.unpack = wrapped_unpack
  env.math = copy(math)
  env.table = copy(wrapped_table)
  env.bit = rawget(_G, "bit") and copy(bit) or nil
  env.string = copy(wrapped_string)
  env._G = env
  return env
end

-- Calls fn(...) with a count hook that bounds instructions and memory, and
-- the wrapped string table behind string methods; the previous hook and
-- __index are put back. -> ok, result_or_err
local bounded

-- What bounded does once fn has returned (or raised): the hook may still
-- fire here, and must not raise (see `mine`).
local function finish(prev, index, outer, ...)
  getmetatable("").__index = index
  if prev[1] then debug.sethook(prev[1], prev[2], prev[3]) else debug.sethook() end
  meter = outer
  return ...
end

-- True when the hook fired in bounded's own code, not fn's.
local function mine()
  local info = debug.getinfo(3, "f")
  return info and (info.func == bounded or info.func == finish)
end

function bounded(fn, ...)
  -- inside another bounded call (a hook from the file calling run:set): its
  -- hook and budget go on counting
  if meter then return pcall(fn, ...) end
  local prev = { debug.gethook() }
  local per = 10   -- often: one instruction can double a string (s = s .. s)
  local outer = nil
  local m = { used = 0, m0 = collectgarbage("count") }
  meter = m
  debug.sethook(function()
    m.used = m.used + per
    if m.used > sandbox.LIMITS.instructions then
      if not mine() then error(over_time(""), 2) end
    elseif collectgarbage("count") - m.m0 > sandbox.LIMITS.memory_kib then
      collectgarbage()
      if collectgarbage("count") - m.m0 > sandbox.LIMITS.memory_kib and not mine() then error(over_memory(""), 2) end
    end
  end, "", per)
  local smt = getmetatable("")
  local index = smt.__index
  smt.__index = wrapped_string
  return finish(prev, index, outer, pcall(fn, ...))
end

sandbox.bounded = bounded

-- A compiled chunk run in a live file's globals, bounded: JIT off for its
-- code (compiled code would never see the count hook), the garbage of before
-- collected (so it does not count as room). -> ok, result_or_err
function sandbox.run_bounded(chunk)
  setfenv(chunk, sandbox.live_globals())
  jit.off(chunk, true)
  collectgarbage()
  return bounded(chunk)
end

-- Functions a live file gave (schedules, hooks) stay bounded after the file
-- was read: moonrl.engine samples such a schedule for every update through
-- sandbox.sample, moonrl.run.hooks calls such a hook through sandbox.call,
-- each sampling or call under the same limits as the file.
local kept = setmetatable({}, { __mode = "k" })

function sandbox.keep_bounded(f) kept[f] = true end

function sandbox.is_bounded(f) return kept[f] == true end

-- -> ok, res | false, err (no traceback: the message names the file's line)
function sandbox.call(f, ...) return bounded(f, ...) end

-- f(progress(k)) for k = 0 .. u - 1 (progress(k) = k / u unless given:
-- moonrl.engine.progress_fn), within one budget -> list | nil, err
function sandbox.sample(f, u, progress)
  local t = {}
  local p = 0
  collectgarbage()
  local ok, err = bounded(function()
    for k = 0, u - 1 do
      p = progress and progress(k) or k / u
      local v = f(p)
      if type(v) ~= "number" or v ~= v then
        error("the schedule function returned " .. util.describe(v) .. " at progress " .. p .. ": expected a number", 0)
      end
      t[k + 1] = v
    end
  end)
  if not ok then
    local msg = tostring(err)
    if not msg:find("^the schedule function") then
      msg = "the schedule function failed at progress " .. p .. " (sampled for " .. u .. " updates): " .. msg
    end
    return nil, msg
  end
  return t
end

return sandbox

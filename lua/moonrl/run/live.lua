-- moonrl.run.live - live tweaks: a file watched while a run trains, whose hot
-- settings are applied at the next update boundary each time it is saved.
--
-- The file is a Lua chunk returning a table of config keys, nested or dotted:
--
--   return { ppo = { lr = 1e-4, ent_coef = 0.01 }, ["log.interval"] = 10 }
--
-- On every save (and once when watching starts, and on SIGHUP) the file is
-- run in a sandbox: the schedule constructors (linear, cosine, constant,
-- step), math, string, table, bit and a few pure base functions - no os, io,
-- require, load, debug, print or pcall; JIT off for its code, so a count hook
-- bounds it to LIMITS.instructions and checks its memory every 10
-- instructions against LIMITS.memory_kib; the library functions that work in
-- C are wrapped (see "The bounds" below). Source text only: bytecode is
-- refused. Then every key is checked against the
-- schema, keys whose value is what is in force already are dropped, and the
-- rest is checked again as a whole config (cross-key rules). Only if all of
-- it passes is anything applied, each key through run:set(key, value,
-- "live <file>") - so it is recorded like any change (moonrl.run.changes). A
-- syntax error, a bad value, an unknown key or a changed cold key (it needs a
-- restart) changes nothing; the message names the line (the key's line when
-- the value was wrong) and the previous values stay. Removing a key from the
-- file does not undo it: the file says what to change, not what to revert to.
--
-- Watching: editors save by writing a new file and renaming it over the old
-- one, which ends a watch on the file itself; so the directory is watched
-- (uv.new_fs_event) and events for the file's name are acted on after a short
-- quiet period (several events come per save). Where an fs_event cannot be
-- had (no inotify, or the directory does not exist yet), the file is polled
-- (uv.new_fs_poll, POLL_MS). A save whose text is what was read last is not
-- read again; SIGHUP re-reads regardless.
--
-- SIGHUP: moonrl.runtime.signals' handler calls live.reread().
--
--   live.watch(run, path[, opts]) -> watcher   opts.poll = true: poll, never fs_event
--   watcher:reload([force]) -> true | nil, err  read, check, apply now
--   watcher:close()
--   watcher.reads, watcher.last_error    reads that were checked; the latest one's
--                                        error (nil when it was applied)
--   live.reread() -> number of files re-read   every watched file, now (SIGHUP)
--   live.read(text, label) -> {key = value} | nil, err     the sandboxed load + flatten
--   live.check(cfg, tweaks, text, label) -> {{key=, value=}, ...} (what differs, schema
--                                           order) | nil, err
--   live.LIMITS = {instructions =, memory_kib =}
--   live.from_file(f) -> true for a function a checked live file gave
--   live.call(f, ...) -> ok, res | false, err     f under the file's limits
--   live.sample(f, u[, progress]) -> {f(0/u), ..., f((u-1)/u)} | nil, err   the same, one budget

local schema = require("moonrl.config.schema")
local schedule = require("moonrl.schedule")
local util = require("moonrl.util")
local validate = require("moonrl.config.validate")

local live = {}

-- one table with a Lua environment's bounds (moonrl.env.program: the same limits)
live.LIMITS = require("moonrl.env.program").LIMITS
live.DEBOUNCE_MS = 40
live.POLL_MS = 250

-- ----------------------------------------------------------------- sandbox

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
  return what .. "took too long: more than " .. util.fmt_number(live.LIMITS.instructions) .. " instructions"
end

local function over_memory(what)
  return what .. "uses too much memory: more than " .. live.LIMITS.memory_kib .. " KiB"
end

-- Raises (at `level` above the caller) when the memory in use is over the limit.
local function check_memory(what, level)
  if kib_used() > live.LIMITS.memory_kib then
    collectgarbage()
    if kib_used() > live.LIMITS.memory_kib then error(over_memory(what), level + 1) end
  end
end

-- Refuses a call that would make `bytes` more when they do not fit.
local function room(name, bytes, level)
  if not meter then return end
  local left = (live.LIMITS.memory_kib - kib_used()) * 1024
  if bytes > left then
    collectgarbage()
    left = (live.LIMITS.memory_kib - kib_used()) * 1024
  end
  if bytes > left then
    error(name .. ": " .. util.fmt_number(math.floor(bytes)) .. " bytes is over the live file's memory limit of " ..
      live.LIMITS.memory_kib .. " KiB", level + 1)
  end
end

-- Counts `steps` of C work against the instruction budget; refuses (before
-- the call) what would go over it.
local function charge(name, steps, level, why)
  if not meter then return end
  if meter.used + steps > live.LIMITS.instructions then
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
  if meter.used + cost > live.LIMITS.instructions then
    error(name .. ": the pattern " .. util.fmt_value(p, 40) .. " on " .. util.fmt_number(#s) ..
      " bytes could take " .. (cost < math.huge and util.fmt_number(cost) or "unbounded") ..
      " steps, over what is left of the live file's limit of " .. util.fmt_number(live.LIMITS.instructions) ..
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

local function sandbox()
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
    if m.used > live.LIMITS.instructions then
      if not mine() then error(over_time(""), 2) end
    elseif collectgarbage("count") - m.m0 > live.LIMITS.memory_kib then
      collectgarbage()
      if collectgarbage("count") - m.m0 > live.LIMITS.memory_kib and not mine() then error(over_memory(""), 2) end
    end
  end, "", per)
  local smt = getmetatable("")
  local index = smt.__index
  smt.__index = wrapped_string
  return finish(prev, index, outer, pcall(fn, ...))
end

-- Functions a live file gave (schedules, hooks) stay bounded after the file
-- was read: moonrl.engine samples such a schedule for every update through
-- live.sample, moonrl.run calls such a hook through live.call, each sampling
-- or call under the same limits as the file.
local from_file = setmetatable({}, { __mode = "k" })

function live.from_file(f) return from_file[f] == true end

-- -> ok, result_or_err (no traceback: the message names the file's line)
function live.call(f, ...) return bounded(f, ...) end

-- f(progress(k)) for k = 0 .. u - 1 (progress(k) = k / u unless given:
-- moonrl.engine.progress_fn), within one budget -> list | nil, err
function live.sample(f, u, progress)
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

-- --------------------------------------------------------------- reading

-- Dotted or nested keys into one flat table; errors name the key.
local function flatten(t, prefix, out, errs)
  for _, k in ipairs(util.sorted_keys(t)) do
    local v = t[k]
    if type(k) ~= "string" then
      errs[#errs + 1] = { msg = "unexpected entry [" .. util.fmt_value(k) .. "]: keys are names such as ppo.lr" }
    else
      local path = prefix and (prefix .. "." .. k) or k
      if schema.by_key[path] then
        if out[path] ~= nil then
          errs[#errs + 1] = { key = path, msg = path .. " is given twice (nested and dotted)" }
        end
        out[path] = v
      elseif schema.section_by_name[path] and type(v) == "table" and not prefix then
        flatten(v, path, out, errs)
      elseif schema.section_by_name[path] then
        errs[#errs + 1] = { key = path, msg = path .. " is a section: give its keys, e.g. " ..
          (path == "ppo" and "ppo = { lr = 1e-4 }" or path .. " = { <key> = ... }") }
      else
        errs[#errs + 1] = { key = path, msg = validate.unknown_key(path) }
      end
    end
  end
end

-- The line of `text` where key (or its last part) is set, or nil.
local function line_of(text, key)
  local leaf = key:match("([^.]+)$")
  local n = 0
  local quoted
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local code = line:gsub("%-%-.*$", "")
    if code:find('"' .. key .. '"', 1, true) or code:find("'" .. key .. "'", 1, true) then return n end
    if not quoted and code:find("%f[%w_]" .. leaf .. "%s*=") then quoted = n end
  end
  return quoted
end

local function where(label, text, e)
  if e.key and text then
    local n = line_of(text, e.key)
    if n then return label .. ":" .. n .. ": " .. e.msg end
  end
  return label .. ": " .. e.msg
end

function live.read(text, label)
  if util.is_bytecode(text) then return nil, label .. ": " .. util.BYTECODE_REFUSED end
  local chunk, err = util.load_text((text:gsub("^#[^\n]*", "")), "@" .. label, label)
  if not chunk then
    local at, rest = tostring(err):match("^(.-:%d+): (.*)$")
    if at then return nil, at .. ": syntax error: " .. rest end
    return nil, tostring(err)
  end
  setfenv(chunk, sandbox())
  jit.off(chunk, true)   -- compiled code would never see the count hook
  collectgarbage()       -- so the garbage of before does not count as room
  local ok, res = bounded(chunk)
  if not ok then
    local msg = tostring(res)
    if not msg:find(label, 1, true) then msg = label .. ": " .. msg end
    return nil, msg
  end
  if res == nil then return {} end
  if type(res) ~= "table" then
    return nil, label .. ": returned " .. util.describe(res) .. ", expected a table of config keys: end the file " ..
      "with `return { ppo = { lr = 1e-4 } }`"
  end
  local flat, errs = {}, {}
  flatten(res, nil, flat, errs)
  if #errs > 0 then
    local lines = {}
    for _, e in ipairs(errs) do lines[#lines + 1] = where(label, text, e) end
    return nil, table.concat(lines, "\n")
  end
  return flat
end

-- --------------------------------------------------------------- checking

local function same(a, b)
  if type(a) == "function" and type(b) == "function" then
    if a == b then return true end
    local oka, da = pcall(string.dump, a, true)
    local okb, db = pcall(string.dump, b, true)
    if not (oka and okb and da == db) then return false end
    for i = 1, debug.getinfo(a, "u").nups do
      local _, va = debug.getupvalue(a, i)
      local _, vb = debug.getupvalue(b, i)
      if not util.deep_equal(va, vb) then return false end
    end
    return true
  end
  return util.deep_equal(a, b)
end

function live.check(cfg, tweaks, text, label)
  local errs, out = {}, {}
  for _, e in ipairs(schema.keys) do
    local v = tweaks[e.key]
    if v ~= nil then
      -- A function schedule is sampled by the check: its code is the file's,
      -- so the same bounds apply.
      local ok, okc, cerr = bounded(schema.check, e, v)
      if not ok then okc, cerr = nil, e.key .. ": " .. tostring(okc) end
      if not okc then
        errs[#errs + 1] = { key = e.key, msg = cerr }
      else
        if type(v) == "function" then from_file[v] = true end
        local norm = validate.normalize_value(e, v)
        if not same(norm, validate.get(cfg, e.key)) then
          if not e.hot then
            errs[#errs + 1] = { key = e.key, msg = e.key .. " = " .. util.fmt_value(v) ..
              " needs a restart: it is not hot (it cannot change while the run is going)" }
          else
            out[#out + 1] = { key = e.key, value = v }
          end
        end
      end
    end
  end
  if #errs == 0 and #out > 0 then
    -- Together with what is in force: the rules that involve two keys.
    local whole = util.deepcopy(cfg)
    for _, c in ipairs(out) do validate.set(whole, c.key, c.value) end
    local ok, verr = validate.validate(whole)
    if not ok then
      for line in (verr .. "\n"):gmatch("([^\n]+)\n") do errs[#errs + 1] = { msg = line } end
    end
  end
  if #errs > 0 then
    local lines = {}
    for _, e in ipairs(errs) do lines[#lines + 1] = where(label, text, e) end
    return nil, table.concat(lines, "\n")
  end
  return out
end

-- --------------------------------------------------------------- watching

local watchers = {}   -- watcher -> true while open

local Watcher = {}
Watcher.__index = Watcher

local function uv() return require("luv") end


function Watcher:_note(msg, is_error)
  local run = self.run
  run.log:line(msg)
  if run.console and run._say then
    run:_say("moonrl: " .. msg)
  elseif is_error then
    io.stderr:write("moonrl: ", msg, "\n")
  end
end

function Watcher:reload(force)
  if self.closed then return nil, "closed" end
  local run = self.run
  local text = util.read_file(self.path)
  if not text then
    if force then self:_note("live " .. self.label .. ": cannot read " .. self.path .. " (the values in force stay)", true) end
    return nil, "cannot read " .. self.path
  end
  if text == self.last_text and not force then return true end
  self.last_text = text
  self.reads = self.reads + 1
  if run.alive and not run:alive() then return nil, "the run has finished" end
  local tweaks, err = live.read(text, self.label)
  local todo
  if tweaks then todo, err = live.check(run.cfg, tweaks, text, self.label) end
  self.last_error = err
  if not todo then
    self:_note("live " .. self.label .. ": not applied, the values in force stay:\n  " ..
      err:gsub("\n", "\n  "), true)
    return nil, err
  end
  if #todo == 0 then
    self:_note("live " .. self.label .. ": read; nothing differs from the values in force")
    return true
  end
  if run.changes then run.changes:remember(self.label, text) end
  local names = {}
  for i, c in ipairs(todo) do names[i] = c.key end
  self:_note("live " .. self.label .. ": read; " .. table.concat(names, ", ") .. " from the next update")
  local keys = {}
  for _, c in ipairs(todo) do
    local ok, serr = run:set(c.key, c.value, "live " .. self.label)
    if not ok then
      self.last_error = serr
      -- Checked above, so only the engine side can refuse here.
      self:_note("live " .. self.label .. ": " .. c.key .. " not applied: " .. tostring(serr) ..
        (#keys > 0 and " (applied before it: " .. table.concat(keys, ", ") .. ")" or ""), true)
      return nil, serr
    end
    keys[#keys + 1] = c.key
  end
  return true
end

function Watcher:_soon(ms)
  if self.closed then return end
  self.timer:stop()
  self.timer:start(ms or live.DEBOUNCE_MS, 0, function()
    local ok, err = pcall(self.reload, self, false)
    if not ok then self:_note("live " .. self.label .. ": " .. tostring(err), true) end
  end)
end

local function split(path)
  local dir, base = path:match("^(.*)/([^/]*)$")
  if not dir then return ".", path end
  if dir == "" then dir = "/" end
  return dir, base
end

function Watcher:_start_fs_event()
  local u = uv()
  local h = u.new_fs_event()
  if not h then return false end
  local ok = h:start(self.dir, {}, function(err, name)
    if err then return end
    if name == nil or name == self.base then self:_soon() end
  end)
  if not ok then h:close() return false end
  h:unref()
  self.fs_event = h
  return true
end

function Watcher:_start_poll()
  local u = uv()
  local h = u.new_fs_poll()
  h:start(self.path, live.POLL_MS, function() self:_soon() end)
  h:unref()
  self.fs_poll = h
  -- The poll's first stat (on the thread pool) is its baseline: a save
  -- between the read at start and that stat would go unseen, so look once more.
  self:_soon(2 * live.POLL_MS)
end

function live.watch(run, path, opts)
  opts = opts or {}
  if type(path) ~= "string" or path == "" then error("live.watch: expected a file path, got " .. util.describe(path), 2) end
  local u = uv()
  local self = setmetatable({ run = run, label = path, path = path, reads = 0 }, Watcher)
  self.dir, self.base = split(path)
  self.timer = u.new_timer()
  self.timer:unref()
  if opts.poll or not self:_start_fs_event() then self:_start_poll() end
  watchers[self] = true
  run.log:line("live " .. path .. ": watching (" .. (self.fs_event and "fs_event on " .. self.dir or "polled every " ..
    live.POLL_MS .. " ms") .. "; SIGHUP re-reads it)")
  if util.read_file(path) then
    self:reload(true)
  else
    self:_note("live " .. path .. ": no such file yet; it is read when it appears")
  end
  return self
end

function Watcher:close()
  if self.closed then return end
  self.closed = true
  for _, h in ipairs({ self.timer, self.fs_event, self.fs_poll }) do
    if h and not h:is_closing() then h:close() end
  end
  watchers[self] = nil
end

-- Re-reads every watched live file now (what SIGHUP does).
function live.reread()
  local n = 0
  for w in pairs(watchers) do
    local ok, err = pcall(w.reload, w, true)
    if not ok then w:_note("live " .. w.label .. ": " .. tostring(err), true) end
    n = n + 1
  end
  return n
end

return live

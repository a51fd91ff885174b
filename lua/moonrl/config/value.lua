-- moonrl.config.value - a config value written as text (`--set KEY=VALUE`,
-- `moonrl ctl set`, the dashboard's set) read as data by a parser of the
-- values' grammar: no Lua runs, whatever the text says, so a value can
-- neither loop, nor allocate, nor reach anything.
--
--   value  = number | string | true | false | table | call
--   number = an optional sign and a Lua numeral: 3, -1e-4, .5, 0x10
--   string = "..." or '...', with Lua's escapes (\n \t \\ \" \' \ddd \xXX)
--   table  = { [field {, field} [,]] }        (";" separates as well)
--   field  = value | name = value | [string or number] = value
--   call   = linear(a, b) | cosine(a, b) | constant(v) | step(from, gamma, every[, to])
--            (moonrl.schedule's constructors; their arguments are values)
--
-- What it deliberately is not: Lua. No operators, no variables, no other
-- function (math.pi, 1e-3 * 2 and function(p) ... end are refused: a config
-- file is where such things go). Nesting is at most MAX_DEPTH deep; the time
-- taken is linear in the text's length.
--
--   value.parse(text) -> v | nil, why        (why names the byte and what is accepted)
--   value.ACCEPTED                           one line: what a value may be
--   value.MAX_DEPTH                          16

local schedule = require("moonrl.schedule")
local util = require("moonrl.util")

local value = {}

value.MAX_DEPTH = 16
value.ACCEPTED = "a value is a number, true, false, a quoted string, a table of values " ..
  "({32, 64} or {kind = \"linear\", from = 1e-3, to = 1e-4}), or linear(from, to), cosine(from, to), " ..
  "constant(v), step(from, gamma, every[, to]) with numbers as arguments"

local CONSTRUCTORS = schedule.env()
local NAMES = {}
for name in pairs(CONSTRUCTORS) do NAMES[#NAMES + 1] = name end
table.sort(NAMES)

local ESCAPES = { a = "\a", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", v = "\v",
  ["\\"] = "\\", ['"'] = '"', ["'"] = "'", ["\n"] = "\n" }

-- A parse in progress: the text and the position; errors are raised as a
-- table {why, at} and caught by value.parse.
local function fail(at, why) error({ why = why, at = at }, 0) end

local function skip(s, i) return s:find("[^ \t\r\n]", i) or #s + 1 end

local function describe_at(s, i)
  if i > #s then return "the end of the text" end
  local c = s:sub(i, i)
  if c:find("[%w%p]") then return "'" .. c .. "'" end
  return string.format("byte 0x%02X", c:byte())
end

local parse_value

local function parse_number(s, i)
  local j = i
  if s:find("^[+-]", j) then j = j + 1 end
  local e = select(2, s:find("^%.?%d[%w%.]*", j))
  if not e then return nil end
  -- an exponent's sign: 1e-4 (not in hex, where e is a digit)
  while s:find("^[eEpP]", e) and s:find("^[+-]", e + 1) and
    (not s:sub(j, e):find("^0[xX]") or s:find("^[pP]", e)) do
    e = select(2, s:find("^[%w%.]*", e + 2))
  end
  local tok = s:sub(i, e)
  local n = tonumber(tok)
  if not n then fail(i, "malformed number " .. util.fmt_value(util.escape_bytes(tok, true), 40)) end
  return n, e + 1
end

local function parse_string(s, i)
  local q = s:sub(i, i)
  local out, j = {}, i + 1
  while true do
    local k = s:find("[\\\r\n" .. q .. "]", j)
    if not k then fail(i, "a string that does not end (no closing " .. q .. ")") end
    out[#out + 1] = s:sub(j, k - 1)
    local c = s:sub(k, k)
    if c == q then return table.concat(out), k + 1 end
    if c ~= "\\" then fail(k, "a line break inside a string (write \\n)") end
    local e = s:sub(k + 1, k + 1)
    if ESCAPES[e] then
      out[#out + 1] = ESCAPES[e]
      j = k + 2
    elseif e:find("%d") then
      local digits = s:match("^%d%d?%d?", k + 1)
      local b = tonumber(digits)
      if b > 255 then fail(k, "the escape \\" .. digits .. " is over 255") end
      out[#out + 1] = string.char(b)
      j = k + 1 + #digits
    elseif e == "x" and s:find("^%x%x", k + 2) then
      out[#out + 1] = string.char(tonumber(s:sub(k + 2, k + 3), 16))
      j = k + 4
    else
      fail(k, "an unknown escape \\" .. util.escape_bytes(e, true) ..
        " in a string (accepted: \\n \\t \\r \\\\ \\\" \\' \\ddd \\xXX)")
    end
  end
end

local function parse_table(s, i, depth)
  local t, n = {}, 0
  local j = skip(s, i + 1)
  while s:sub(j, j) ~= "}" do
    local key
    if s:sub(j, j) == "[" then
      local k2
      key, k2 = parse_value(s, skip(s, j + 1), depth + 1)
      if type(key) ~= "string" and type(key) ~= "number" then
        fail(j, "a table key in [ ] must be a string or a number")
      end
      if key ~= key then fail(j, "a table key cannot be nan") end
      k2 = skip(s, k2)
      if s:sub(k2, k2) ~= "]" then fail(k2, "expected ']' after a table key, found " .. describe_at(s, k2)) end
      k2 = skip(s, k2 + 1)
      if s:sub(k2, k2) ~= "=" then fail(k2, "expected '=' after [key], found " .. describe_at(s, k2)) end
      j = skip(s, k2 + 1)
    else
      local name, after = s:match("^([%a_][%w_]*)()", j)
      if name then
        local eq = skip(s, after)
        if s:sub(eq, eq) == "=" and s:sub(eq + 1, eq + 1) ~= "=" then
          key = name
          j = skip(s, eq + 1)
        end
      end
    end
    local v
    v, j = parse_value(s, j, depth + 1)
    if key == nil then
      n = n + 1
      key = n
    end
    t[key] = v
    j = skip(s, j)
    local c = s:sub(j, j)
    if c == "," or c == ";" then
      j = skip(s, j + 1)
    elseif c ~= "}" then
      fail(j, "expected ',' or '}' in a table, found " .. describe_at(s, j))
    end
  end
  return t, j + 1
end

local function parse_call(s, name, at, i, depth)
  local f = CONSTRUCTORS[name]
  if not f then
    if name == "function" then
      fail(at, "a function cannot be given as text (write it in a config file or a script)")
    end
    local msg = "unknown function '" .. name .. "'"
    local near = util.closest(name, NAMES)
    if near then msg = msg .. " - did you mean '" .. near .. "'?" end
    fail(at, msg .. " (accepted: " .. table.concat(NAMES, ", ") .. ")")
  end
  local args, n = {}, 0
  local j = skip(s, i + 1)
  if s:sub(j, j) ~= ")" then
    while true do
      n = n + 1
      args[n], j = parse_value(s, j, depth + 1)
      j = skip(s, j)
      local c = s:sub(j, j)
      if c == ")" then break end
      if c ~= "," then fail(j, "expected ',' or ')' in " .. name .. "(...), found " .. describe_at(s, j)) end
      j = skip(s, j + 1)
    end
  end
  local ok, res = pcall(f, unpack(args, 1, n))
  if not ok then fail(at, (tostring(res):gsub("^[^\n]-:%d+: ", ""))) end
  return res, j + 1
end

parse_value = function(s, i, depth)
  if depth > value.MAX_DEPTH then fail(i, "values nested more than " .. value.MAX_DEPTH .. " deep") end
  i = skip(s, i)
  local c = s:sub(i, i)
  if c == "" then fail(i, "a value is missing") end
  if c == '"' or c == "'" then return parse_string(s, i) end
  if c == "{" then return parse_table(s, i, depth) end
  if c:find("[%d%.+-]") then
    local n, j = parse_number(s, i)
    if n then return n, j end
    fail(i, "expected a value, found " .. describe_at(s, i))
  end
  local name, after = s:match("^([%a_][%w_]*)()", i)
  if not name then fail(i, "expected a value, found " .. describe_at(s, i)) end
  if name == "true" then return true, after end
  if name == "false" then return false, after end
  local j = skip(s, after)
  if s:sub(j, j) == "(" then return parse_call(s, name, i, j, depth) end
  if name == "nil" then fail(i, "nil is not a value") end
  fail(i, "a bare name '" .. name .. "' (a string is quoted: \"" .. name .. "\"; no variables)")
end

function value.parse(text)
  if type(text) ~= "string" then return nil, "expected text, got " .. util.describe(text) end
  local ok, v, j = pcall(parse_value, text, 1, 1)
  if ok then
    j = skip(text, j)
    if j <= #text then
      ok, v = false, { why = "unexpected " .. describe_at(text, j) .. " after the value", at = j }
    end
  end
  if ok then return v end
  if type(v) ~= "table" then error(v, 0) end   -- a bug here, not bad text
  return nil, v.why .. " (at byte " .. v.at .. "); " .. value.ACCEPTED
end

return value

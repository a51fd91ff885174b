-- moonrl.formats.json - JSON for metrics lines: a small, strict encoder (and a decoder
-- for specs and tools).
--
-- encode: numbers in their shortest round-trip form (NaN and +-inf -> null,
-- as JSON has no spelling for them), 64-bit FFI integers (uint64_t metrics)
-- via tonumber, strings escaped (control characters as \uXXXX; bytes >= 0x80
-- passed through, so UTF-8 stays UTF-8), tables whose keys are exactly 1..n
-- as arrays, other tables as objects with sorted keys (an empty table is {},
-- unless marked by json.array: a list that may be empty, written [] then).
-- Functions, userdata and cycles are errors that name the path.
-- decode: the whole of RFC 8259 except that numbers become Lua numbers; null
-- becomes json.null (a unique sentinel), so arrays keep their length.
--
-- Public functions
--   json.encode(value) -> string          raises on values JSON cannot hold
--   json.decode(text) -> value | nil, err
--   json.null                             the decoded null
--   json.array([t]) -> t                  marks t (default {}) as a list: [] when empty

local util = require("moonrl.util")

local json = {}

json.null = setmetatable({}, { __tostring = function() return "null" end })

local ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return ESC[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function encode_number(x)
  if x ~= x or x == math.huge or x == -math.huge then return "null" end
  return util.fmt_number(x)
end

local encode_value

local ARRAY = { __name = "moonrl.formats.json.array" }   -- the mark of json.array's tables
function json.array(t) return setmetatable(t or {}, ARRAY) end

local function encode_table(t, path, seen)
  if seen[t] then error("json.encode: circular reference at " .. path, 0) end
  seen[t] = true
  local out = {}
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  local is_array = n > 0 or getmetatable(t) == ARRAY
  for i = 1, n do
    if t[i] == nil then is_array = false; break end
  end
  if is_array then
    for i = 1, n do out[i] = encode_value(t[i], path .. "[" .. i .. "]", seen) end
    seen[t] = nil
    return "[" .. table.concat(out, ",") .. "]"
  end
  local keys = {}
  for k in pairs(t) do
    local tk = type(k)
    if tk ~= "string" and tk ~= "number" then
      error("json.encode: a " .. tk .. " key at " .. path .. " (keys must be strings)", 0)
    end
    keys[#keys + 1] = tk == "string" and k or util.fmt_number(k)
  end
  table.sort(keys)
  for i, k in ipairs(keys) do
    local v = t[k]
    if v == nil then v = t[tonumber(k)] end
    out[i] = encode_string(k) .. ":" .. encode_value(v, path .. "." .. k, seen)
  end
  seen[t] = nil
  return "{" .. table.concat(out, ",") .. "}"
end

encode_value = function(v, path, seen)
  local tv = type(v)
  if tv == "string" then return encode_string(v)
  elseif tv == "number" then return encode_number(v)
  elseif tv == "boolean" then return v and "true" or "false"
  elseif tv == "nil" or v == json.null then return "null"
  elseif tv == "table" then return encode_table(v, path, seen)
  elseif tv == "cdata" then
    local n = tonumber(v)
    if n then return encode_number(n) end
  end
  error("json.encode: cannot encode a " .. tv .. " at " .. path, 0)
end

function json.encode(v)
  return encode_value(v, "$", {})
end

-- decoding -------------------------------------------------------------------

local function decoder(s)
  local pos = 1
  local function fail(msg)
    error({ msg = "json.decode: " .. msg .. " at byte " .. pos }, 0)
  end
  local function ws()
    pos = s:find("[^ \t\r\n]", pos) or (#s + 1)
  end
  local value
  local function str()
    pos = pos + 1
    local parts = {}
    while true do
      local c = s:sub(pos, pos)
      if c == "" then fail("unterminated string") end
      if c == '"' then pos = pos + 1; break end
      if c == "\\" then
        local e = s:sub(pos + 1, pos + 1)
        local simple = ({ ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f",
          n = "\n", r = "\r", t = "\t" })[e]
        if simple then
          parts[#parts + 1] = simple
          pos = pos + 2
        elseif e == "u" then
          local hex = s:sub(pos + 2, pos + 5)
          if not hex:match("^%x%x%x%x$") then fail("bad \\u escape") end
          local cp = tonumber(hex, 16)
          pos = pos + 6
          if cp >= 0xD800 and cp <= 0xDBFF and s:sub(pos, pos + 1) == "\\u" then
            local lo = tonumber(s:sub(pos + 2, pos + 5), 16)
            if lo and lo >= 0xDC00 and lo <= 0xDFFF then
              cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
              pos = pos + 6
            end
          end
          if cp < 0x80 then parts[#parts + 1] = string.char(cp)
          elseif cp < 0x800 then
            parts[#parts + 1] = string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64)
          elseif cp < 0x10000 then
            parts[#parts + 1] = string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
          else
            parts[#parts + 1] = string.char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
              0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
          end
        else
          fail("bad escape")
        end
      elseif c:byte() < 0x20 then
        fail("control character in string")
      else
        -- from pos + 1: the character at pos is plain (DEL, 0x7f, is %c yet
        -- needs no escape; searching from pos would find it again forever)
        local stop = s:find('["\\%c]', pos + 1) or (#s + 1)
        parts[#parts + 1] = s:sub(pos, stop - 1)
        pos = stop
      end
    end
    return table.concat(parts)
  end
  value = function()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      pos = pos + 1
      local t = {}
      ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1; return t end
      while true do
        ws()
        if s:sub(pos, pos) ~= '"' then fail("expected a string key") end
        local k = str()
        ws()
        if s:sub(pos, pos) ~= ":" then fail("expected ':'") end
        pos = pos + 1
        t[k] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "}" then return t end
        if d ~= "," then fail("expected ',' or '}'") end
      end
    elseif c == "[" then
      pos = pos + 1
      local t = {}
      ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1; return t end
      while true do
        t[#t + 1] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "]" then return t end
        if d ~= "," then fail("expected ',' or ']'") end
      end
    elseif c == '"' then
      return str()
    elseif s:sub(pos, pos + 3) == "true" then pos = pos + 4; return true
    elseif s:sub(pos, pos + 4) == "false" then pos = pos + 5; return false
    elseif s:sub(pos, pos + 3) == "null" then pos = pos + 4; return json.null
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    if num and num ~= "" and num ~= "-" then
      local n = tonumber(num)
      if n then pos = pos + #num; return n end
    end
    fail("unexpected " .. (c == "" and "end of text" or ("'" .. c .. "'")))
  end
  return function()
    local v = value()
    ws()
    if pos <= #s then fail("trailing text") end
    return v
  end
end

function json.decode(text)
  if type(text) ~= "string" then return nil, "json.decode: expected a string, got " .. type(text) end
  local ok, res = pcall(decoder(text))
  if ok then return res end
  if type(res) == "table" then return nil, res.msg end
  return nil, tostring(res)
end

return json

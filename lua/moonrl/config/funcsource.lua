-- moonrl.config.funcsource - the Lua source of a function, when it can be
-- had, so that a saved config (config.lua, changes.lua) reproduces function
-- schedules, warm-up functions and hooks instead of dropping them.
--
-- LuaJIT keeps no source text, only where a function came from
-- (debug.getinfo: the chunk name and the line range). When the chunk is a
-- file that still exists, the lines are read back and the function
-- expression cut out of them; the cut is accepted only if it compiles to the
-- very same bytecode (string.dump with debug info stripped), so a comment or
-- string that happens to say "function" or "end" cannot fool it, and an
-- edited file is noticed. Upvalues that are plain values (numbers, strings,
-- booleans) are bound again around the function; any other upvalue (a
-- table, a function, the run, a nil) cannot be written, and the function is
-- not reproduced. What it deliberately is not: a decompiler.
--
--   funcsource.source(f [, read]) -> source | nil, why
--       read(path) -> text | nil: how the file is read (default: from disk)
--   funcsource.where(f) -> "file.lua:3-5" (or the chunk name)
--   funcsource.expression(f [, read]) -> {text =, first =, last =, path =, upvalues = {{name =, value =}, ...}}
--       | nil, why: the cut alone, its upvalues not judged (moonrl.config.env_script binds them itself)
--   funcsource.literal(v) -> Lua source of a number, string or boolean, or nil

local util = require("moonrl.util")

local funcsource = {}


function funcsource.where(f)
  local info = debug.getinfo(f, "S")
  if info.what == "C" then return "a C function" end
  local s = info.short_src or "?"
  if info.linedefined == info.lastlinedefined then return s .. ":" .. info.linedefined end
  return s .. ":" .. info.linedefined .. "-" .. info.lastlinedefined
end

local function stripped(f)
  local ok, b = pcall(string.dump, f, true)
  return ok and b or nil
end

-- Every position on `line` where the keyword `word` starts / ends.
local function keyword_at(line, word, ends)
  local out = {}
  local init = 1
  while true do
    local s, e = line:find("%f[%w_]" .. word .. "%f[^%w_]", init)
    if not s then break end
    out[#out + 1] = ends and e or s
    init = e + 1
  end
  return out
end

-- Is g (compiled from the cut text) f? Without upvalues: the same stripped
-- bytecode. With upvalues the bytecode also holds where each one lives in
-- the enclosing function, which differs by construction; then the same
-- size, the same parameters and the same upvalue names in order.
local function same(f, g, uvnames)
  local a, b = stripped(f), stripped(g)
  if not a or not b then return false end
  if #uvnames == 0 then return a == b end
  if #a ~= #b then return false end
  local fi, gi = debug.getinfo(f, "u"), debug.getinfo(g, "u")
  if fi.nups ~= gi.nups or fi.nparams ~= gi.nparams or fi.isvararg ~= gi.isvararg then return false end
  for i = 1, fi.nups do
    if debug.getupvalue(g, i) ~= uvnames[i] then return false end
  end
  return true
end

-- The expression `function ... end` on lines first..last that is f.
local function cut(f, lines, first, last, uvnames)
  local head, tail = lines[first], lines[last]
  local prelude = #uvnames > 0 and "local " .. table.concat(uvnames, ", ") .. "; " or ""
  for _, s in ipairs(keyword_at(head, "function", false)) do
    for _, e in ipairs(keyword_at(tail, "end", true)) do
      local text
      if first == last then
        text = e > s and head:sub(s, e) or nil
      else
        local mid = {}
        for i = first + 1, last - 1 do mid[#mid + 1] = lines[i] end
        text = head:sub(s) .. "\n" .. (#mid > 0 and table.concat(mid, "\n") .. "\n" or "") .. tail:sub(1, e)
      end
      -- `local function name(...)` / `function a.b(...)`: the same function as an expression
      if text then text = text:gsub("^function%s+[%a_][%w_]*%s*%(", "function(", 1):gsub("^function%s+[%a_][%w_.]*%s*%(", "function(", 1) end
      if text then
        -- On the same lines as the original, in case line info leaks into the bytecode.
        local chunk = loadstring(string.rep("\n", first - 1) .. prelude .. "return " .. text, "=funcsource")
        local ok, g = false, nil
        if chunk then ok, g = pcall(chunk) end
        if ok and type(g) == "function" and same(f, g, uvnames) then return text end
      end
    end
  end
  return nil
end

local function literal(v)
  local tv = type(v)
  if tv == "boolean" then return tostring(v) end
  if tv == "string" then return (string.format("%q", v):gsub("\\\n", "\\n")) end
  if tv == "number" then
    if v ~= v then return "0/0" end
    if v == math.huge then return "math.huge" end
    if v == -math.huge then return "-math.huge" end
    return util.fmt_number(v)
  end
  return nil
end

-- Where f's text is: {text = "function ... end", first =, last = (its lines), path =,
-- upvalues = {{name =, value =}, ...} in order}, or nil, why. The upvalues are
-- not judged here (the text compiles to f with them declared as locals).
function funcsource.expression(f, read)
  if type(f) ~= "function" then return nil, "not a function" end
  local info = debug.getinfo(f, "Su")
  if info.what == "C" then return nil, "it is a C function" end
  if info.what == "main" or info.linedefined == 0 then return nil, "it is a whole chunk" end
  local names, upvalues = {}, {}
  for i = 1, info.nups or 0 do
    local name, v = debug.getupvalue(f, i)
    names[#names + 1] = name
    upvalues[#upvalues + 1] = { name = name, value = v }
  end
  local src = info.source or ""
  if src:sub(1, 1) ~= "@" then
    return nil, "it was defined in " .. tostring(info.short_src) .. ", not in a file"
  end
  local path = src:sub(2)
  local text = (read or util.read_file)(path)
  if not text then return nil, "its file " .. path .. " cannot be read" end
  local lines = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local first, last = info.linedefined, info.lastlinedefined
  if not lines[first] or not lines[last] then return nil, path .. " no longer has those lines" end
  local body = cut(f, lines, first, last, names)
  if not body then
    return nil, "lines " .. first .. "-" .. last .. " of " .. path ..
      " do not hold it as one expression (or the file changed since)"
  end
  return { text = body, first = first, last = last, path = path, upvalues = upvalues }
end

function funcsource.source(f, read)
  if type(f) ~= "function" then return nil, "not a function" end
  local info = debug.getinfo(f, "Su")
  if info.what == "C" then return nil, "it is a C function" end
  if info.what == "main" or info.linedefined == 0 then return nil, "it is a whole chunk" end
  -- Upvalues: plain values are bound again; anything else cannot be (a nil
  -- one is usually a variable assigned later, such as the run itself).
  local names, values = {}, {}
  for i = 1, info.nups or 0 do
    local name, v = debug.getupvalue(f, i)
    local lit = literal(v)
    if not lit then
      return nil, "it uses the upvalue '" .. tostring(name) .. "' (" ..
        (v == nil and "nil when saved" or util.describe(v):sub(1, 60)) .. "), which cannot be saved"
    end
    names[#names + 1], values[#values + 1] = name, lit
  end
  local e, why = funcsource.expression(f, read)
  if not e then return nil, why end
  if #names == 0 then return e.text end
  return "(function() local " .. table.concat(names, ", ") .. " = " .. table.concat(values, ", ") ..
    "; return " .. e.text .. " end)()"
end

funcsource.literal = literal

return funcsource

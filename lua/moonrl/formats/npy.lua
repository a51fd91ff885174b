-- moonrl.formats.npy - NumPy's .npy files (format versions 1.0 to 3.0), read
-- and written by hand: the magic "\x93NUMPY", two version bytes, the header's
-- length (2 bytes in 1.0, 4 in 2.0 and 3.0, little-endian), the header (a
-- Python dict literal: 'descr', 'fortran_order', 'shape'), then the data in
-- C order.
--
-- Read: little-endian (or byte-order free) uint8, int32, int64, float32 and
-- float64 arrays in C order; anything else is refused naming what the file
-- has and what is accepted. Written: float32 or uint8, version 1.0.
--
-- Public
--   npy.decode(bytes, what) -> {dtype = "u1" | "i4" | "i8" | "f4" | "f8", shape = {...},
--                               count, data = bytes} | nil, err      what: the file's name, for messages
--   npy.read(path) -> the same | nil, err
--   npy.values(arr) -> a Lua list of the count numbers (for checks and small arrays)
--   npy.encode(dtype, shape, data) -> bytes           dtype "f4" | "u1"; data: raw bytes
--   npy.write(path, dtype, shape, data) -> true | nil, err

local ffi = require("ffi")

local npy = {}

local MAGIC = "\147NUMPY"
local SIZE = { u1 = 1, i4 = 4, i8 = 8, f4 = 4, f8 = 8 }
local ACCEPTED = "uint8, int32, int64, float32 or float64, little-endian, C order"

local function u16(s, i) return s:byte(i) + 256 * s:byte(i + 1) end
local function u32(s, i) return u16(s, i) + 65536 * u16(s, i + 2) end

function npy.decode(s, what)
  what = what or "the .npy file"
  if type(s) ~= "string" or #s < 10 or s:sub(1, 6) ~= MAGIC then
    return nil, what .. " is not a .npy file (no \\x93NUMPY magic): save the array with numpy.save"
  end
  local major = s:byte(7)
  local hlen, start
  if major == 1 then hlen, start = u16(s, 9), 11
  elseif major == 2 or major == 3 then
    if #s < 12 then return nil, what .. " is cut short in its header" end
    hlen, start = u32(s, 9), 13
  else
    return nil, what .. " is .npy format version " .. major .. "." .. s:byte(8) .. ": accepted 1.0 to 3.0"
  end
  if #s < start + hlen - 1 then return nil, what .. " is cut short in its header" end
  local header = s:sub(start, start + hlen - 1)
  local descr = header:match("['\"]descr['\"]%s*:%s*['\"]([^'\"]*)['\"]")
  local fortran = header:match("['\"]fortran_order['\"]%s*:%s*(%a+)")
  local shape_text = header:match("['\"]shape['\"]%s*:%s*(%b())")
  if not (descr and fortran and shape_text) then
    return nil, what .. ": its header is not the dict numpy writes (descr, fortran_order, shape): " .. header:sub(1, 120)
  end
  local order, code = descr:match("^([<>|=]?)(%a%d+)$")
  if not code or not SIZE[code] or order == ">" or (SIZE[code] > 1 and order == "|") then
    return nil, what .. " holds dtype '" .. descr .. "': accepted " .. ACCEPTED
  end
  if fortran ~= "False" then
    return nil, what .. " is in Fortran order: accepted C order (numpy.ascontiguousarray before numpy.save)"
  end
  local shape, count = {}, 1
  for d in shape_text:sub(2, -2):gmatch("[^,%s]+") do
    local n = tonumber(d)
    if not n or n < 0 or n % 1 ~= 0 then return nil, what .. ": its shape " .. shape_text .. " is not a tuple of sizes" end
    shape[#shape + 1] = n
    count = count * n
  end
  local bytes = count * SIZE[code]
  local data = s:sub(start + hlen)
  if #data ~= bytes then
    return nil, string.format("%s: its header says %s of %s (%d bytes) but %d bytes follow", what, shape_text, descr,
      bytes, #data)
  end
  return { dtype = code, shape = shape, count = count, data = data }
end

function npy.read(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot open " .. tostring(err) end
  local s = f:read("*a")
  f:close()
  return npy.decode(s or "", path)
end

local CTYPE = { u1 = "const uint8_t *", i4 = "const int32_t *", i8 = "const int64_t *", f4 = "const float *",
  f8 = "const double *" }

function npy.values(arr)
  local p = ffi.cast(CTYPE[arr.dtype], arr.data)
  local out = {}
  for i = 0, arr.count - 1 do out[i + 1] = tonumber(p[i]) end
  return out
end

function npy.encode(dtype, shape, data)
  assert(dtype == "f4" or dtype == "u1", "npy.encode: dtype f4 or u1")
  local dims = {}
  for i, n in ipairs(shape) do dims[i] = tostring(n) end
  local shape_text = "(" .. table.concat(dims, ", ") .. (#dims == 1 and ",)" or ")")
  local header = "{'descr': '" .. (dtype == "f4" and "<f4" or "|u1") .. "', 'fortran_order': False, 'shape': " ..
    shape_text .. ", }"
  -- padded with spaces and a newline so that the data starts at a multiple of 64 bytes
  local pad = 64 - (10 + #header + 1) % 64
  if pad == 64 then pad = 0 end
  header = header .. string.rep(" ", pad) .. "\n"
  return MAGIC .. "\1\0" .. string.char(#header % 256, math.floor(#header / 256)) .. header .. data
end

function npy.write(path, dtype, shape, data)
  local f, err = io.open(path, "wb")
  if not f then return nil, "cannot write " .. tostring(err) end
  f:write(npy.encode(dtype, shape, data))
  local ok, werr = f:close()
  if not ok then return nil, "cannot write " .. path .. ": " .. tostring(werr) end
  return true
end

return npy

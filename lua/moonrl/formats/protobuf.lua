-- moonrl.formats.protobuf - the protocol-buffers wire format, as far as the
-- files moonrl writes need it (TensorBoard events: formats/tensorboard.lua;
-- ONNX models: formats/onnx.lua). Numbers are written little-endian through
-- the FFI (byte-swapped on a big-endian host).
--
--   pb.varint(n) -> bytes      n an integer below 2^53, or negative (10-byte
--                              two's complement, as int64 demands)
--   pb.key(field, wire) -> bytes           wire 0 varint, 1 64-bit, 2 bytes, 5 32-bit
--   pb.int_field(field, n), pb.bytes_field(field, s), pb.float_field(field, x),
--   pb.double_field(field, x) -> bytes     one field, key included
--   pb.float_le(x), pb.double_le(x) -> the 4 / 8 bytes of x
--   pb.u32le(n), pb.u64le(n) -> bytes       unsigned little-endian integers (n < 2^53);
--   pb.read_u64le(s, i) -> n                 read back from s at byte i (the files'
--                                            framing: TensorBoard records, safetensors)

local ffi = require("ffi")

local char, floor = string.char, math.floor

local pb = {}

function pb.varint(n)
  local out = {}
  if n >= 0 and n < 9007199254740992 then
    n = floor(n)
    while n >= 128 do
      out[#out + 1] = char(n % 128 + 128)
      n = floor(n / 128)
    end
    out[#out + 1] = char(n)
    return table.concat(out)
  end
  local x = ffi.cast("uint64_t", ffi.cast("int64_t", n))
  while x >= 128ULL do
    out[#out + 1] = char(tonumber(x % 128ULL) + 128)
    x = x / 128ULL
  end
  out[#out + 1] = char(tonumber(x))
  return table.concat(out)
end

local LITTLE = ffi.abi("le")
local dbuf, fbuf = ffi.new("double[1]"), ffi.new("float[1]")

local function le_bytes(buf, v, n)
  buf[0] = v
  local s = ffi.string(buf, n)
  return LITTLE and s or s:reverse()
end

function pb.float_le(x) return le_bytes(fbuf, x, 4) end

function pb.u32le(n)
  return char(n % 256, floor(n / 256) % 256, floor(n / 65536) % 256, floor(n / 16777216) % 256)
end
function pb.u64le(n) return pb.u32le(n % 4294967296) .. pb.u32le(floor(n / 4294967296)) end
function pb.read_u64le(s, i)
  local v = 0
  for k = 7, 0, -1 do v = v * 256 + s:byte(i + k) end
  return v
end
function pb.double_le(x) return le_bytes(dbuf, x, 8) end
function pb.key(field, wire) return pb.varint(field * 8 + wire) end
function pb.int_field(field, n) return pb.key(field, 0) .. pb.varint(n) end
function pb.bytes_field(field, s) return pb.key(field, 2) .. pb.varint(#s) .. s end
function pb.float_field(field, x) return pb.key(field, 5) .. pb.float_le(x) end
function pb.double_field(field, x) return pb.key(field, 1) .. pb.double_le(x) end

return pb

-- moonrl.formats.safetensors - the safetensors file format
-- (https://github.com/huggingface/safetensors): an 8-byte little-endian
-- header length, a JSON header naming every tensor's dtype, shape and byte
-- range, then the tensors' bytes, one after another. Written here (it is a
-- few lines); checked against the real library in spec/export_spec.lua.
--
--   safetensors.encode(tensors, metadata) -> string
--       tensors: list of { name =, shape = {d1, ...}, data = string of
--       little-endian float32 bytes (#data = 4 x the shape's product) };
--       metadata: table of string -> string (the header's __metadata__).
--       The header is padded with spaces to a multiple of 8 bytes, so every
--       tensor starts 8-byte aligned, as the library writes it.
--   safetensors.decode(bytes) -> {tensors = {name = {dtype, shape, data}}, metadata} | nil, why

local json = require("moonrl.formats.json")

local safetensors = {}

local pb = require("moonrl.formats.protobuf")

function safetensors.encode(tensors, metadata)
  local header, parts, offset = {}, {}, 0
  if metadata then
    for k, v in pairs(metadata) do
      assert(type(k) == "string" and type(v) == "string", "safetensors: metadata must map strings to strings")
    end
    header.__metadata__ = metadata
  end
  for _, t in ipairs(tensors) do
    local n = 1
    for _, d in ipairs(t.shape) do n = n * d end
    assert(#t.data == 4 * n, "safetensors: " .. t.name .. " has " .. #t.data .. " bytes for " .. n .. " floats")
    assert(header[t.name] == nil and t.name ~= "__metadata__", "safetensors: tensor name " .. t.name .. " twice")
    header[t.name] = { dtype = "F32", shape = t.shape, data_offsets = { offset, offset + #t.data } }
    parts[#parts + 1] = t.data
    offset = offset + #t.data
  end
  local text = json.encode(header)
  text = text .. string.rep(" ", (8 - #text % 8) % 8)
  return pb.u64le(#text) .. text .. table.concat(parts)
end

-- safetensors.decode(bytes) -> { tensors = {name = {dtype =, shape =, data =}},
-- metadata = {..} } | nil, why (a file that is not safetensors, or damaged).
function safetensors.decode(s)
  if #s < 8 then return nil, "not a safetensors file (" .. #s .. " bytes)" end
  local n = pb.read_u64le(s, 1)
  if n < 2 or 8 + n > #s then return nil, "not a safetensors file (its header length " .. n .. " does not fit)" end
  local ok, header = pcall(json.decode, s:sub(9, 8 + n))
  if not ok or type(header) ~= "table" then return nil, "not a safetensors file (its header is not JSON)" end
  local data_at, size = 9 + n, #s - 8 - n
  local out = { tensors = {}, metadata = header.__metadata__ or {} }
  for name, t in pairs(header) do
    if name ~= "__metadata__" then
      local o = type(t) == "table" and t.data_offsets
      if type(o) ~= "table" or type(o[1]) ~= "number" or type(o[2]) ~= "number" or o[1] > o[2] or o[2] > size then
        return nil, "damaged: tensor " .. name .. "'s bytes lie outside the file"
      end
      out.tensors[name] = { dtype = t.dtype, shape = t.shape, data = s:sub(data_at + o[1], data_at + o[2] - 1) }
    end
  end
  return out
end

return safetensors

-- moonrl.formats.onnx - an ONNX model file (onnx.proto's ModelProto, protocol
-- buffers' wire format) for a graph of float tensors: what `moonrl export
-- --format onnx` needs and no more. Checked with the real onnx checker and
-- onnxruntime in spec/export_spec.lua.
--
--   onnx.model{ inputs = {{name, dims}}, outputs = {{name, dims}},
--               initializers = {{name, dims, data = float32 LE bytes}},
--               nodes = {{op, inputs = {..}, outputs = {..}, attrs = {name = value}}},
--               metadata = {key = string}, producer = "moonrl", version = "0.1.0" } -> string
--   dims: numbers, or a string for a symbolic dimension ("batch").
--   attrs: an integer -> INT, a non-integer number -> FLOAT, a list of
--   integers -> INTS.

local onnx = {}

local IR_VERSION, OPSET = 8, 17
local FLOAT, INT, INTS = 1, 2, 7   -- AttributeProto.AttributeType
local TENSOR_FLOAT = 1             -- TensorProto.DataType

local pb = require("moonrl.formats.protobuf")
local int_field, bytes_field, float_field = pb.int_field, pb.bytes_field, pb.float_field

local function shape(dims)
  local d = {}
  for _, x in ipairs(dims) do
    d[#d + 1] = bytes_field(1, type(x) == "string" and bytes_field(2, x) or int_field(1, x))
  end
  return table.concat(d)
end

local function value_info(v)
  local tensor_type = int_field(1, TENSOR_FLOAT) .. bytes_field(2, shape(v.dims))
  return bytes_field(1, v.name) .. bytes_field(2, bytes_field(1, tensor_type))
end

local function attribute(name, v)
  local s = bytes_field(1, name)
  if type(v) == "table" then
    for _, x in ipairs(v) do s = s .. int_field(8, x) end
    return s .. int_field(20, INTS)
  elseif v == math.floor(v) then
    return s .. int_field(3, v) .. int_field(20, INT)
  end
  return s .. float_field(2, v) .. int_field(20, FLOAT)
end

local function node(n, i)
  local s = {}
  for _, x in ipairs(n.inputs) do s[#s + 1] = bytes_field(1, x) end
  for _, x in ipairs(n.outputs) do s[#s + 1] = bytes_field(2, x) end
  s[#s + 1] = bytes_field(3, n.name or (n.op .. "_" .. i))
  s[#s + 1] = bytes_field(4, n.op)
  local names = {}
  for k in pairs(n.attrs or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do s[#s + 1] = bytes_field(5, attribute(k, n.attrs[k])) end
  return table.concat(s)
end

local function initializer(t)
  local s = {}
  for _, d in ipairs(t.dims) do s[#s + 1] = int_field(1, d) end
  s[#s + 1] = int_field(2, TENSOR_FLOAT)
  s[#s + 1] = bytes_field(8, t.name)
  s[#s + 1] = bytes_field(9, t.data)
  return table.concat(s)
end

function onnx.model(m)
  local g = {}
  for i, n in ipairs(m.nodes) do g[#g + 1] = bytes_field(1, node(n, i)) end
  g[#g + 1] = bytes_field(2, m.name or "moonrl_policy")
  for _, t in ipairs(m.initializers) do g[#g + 1] = bytes_field(5, initializer(t)) end
  for _, v in ipairs(m.inputs) do g[#g + 1] = bytes_field(11, value_info(v)) end
  for _, v in ipairs(m.outputs) do g[#g + 1] = bytes_field(12, value_info(v)) end
  local s = { int_field(1, IR_VERSION), bytes_field(2, m.producer or "moonrl"),
    bytes_field(3, m.version or ""), bytes_field(7, table.concat(g)),
    bytes_field(8, bytes_field(1, "") .. int_field(2, OPSET)) }
  local keys = {}
  for k in pairs(m.metadata or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do s[#s + 1] = bytes_field(14, bytes_field(1, k) .. bytes_field(2, m.metadata[k])) end
  return table.concat(s)
end

return onnx

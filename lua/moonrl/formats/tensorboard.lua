-- moonrl.formats.tensorboard - TensorBoard event files, written by hand.
--
-- An event file is a sequence of TFRecords:
--   uint64 length (little-endian) | uint32 masked_crc32c(length bytes)
--   | data | uint32 masked_crc32c(data)
-- with masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32) and
-- CRC32C the Castagnoli CRC (reflected polynomial 0x82F63B78), table-driven
-- here with LuaJIT's `bit` library. Each record's data is a protobuf Event:
--   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
--             Summary summary = 5; }
--   Summary { repeated Value value = 1; }
--   Value   { string tag = 1; float simple_value = 2; }
-- The first record of a file is Event{wall_time, file_version =
-- "brain.Event:2"}; the sink then writes one Event per scalar per update.
-- This is the small subset TensorBoard needs for scalars; nothing else of
-- protobuf is implemented (moonrl.formats.protobuf: the wire format).
--
-- Public functions
--   tb.crc32c(s [, crc]) -> unsigned 32-bit number (crc continues a running CRC)
--   tb.masked_crc32c(s) -> unsigned 32-bit number
--   tb.record(data) -> framed TFRecord bytes
--   tb.varint(n) -> bytes (n a non-negative integer below 2^53, or negative:
--                   10-byte two's complement as int64 demands)
--   tb.encode_event{wall_time=, step=, file_version=, values={{tag=, simple_value=}, ...}}
--                 -> Event bytes (fields left nil are left out)
--   tb.file_version_event(wall_time) -> Event bytes
--   tb.scalar_event(wall_time, step, tag, value) -> Event bytes
--   tb.session_start_event(wall_time, step) -> Event bytes: SessionLog START
--                   (Event field 7, SessionLog.status = 1): TensorBoard drops
--                   the steps >= step it read before (a resumed run)
--   tb.text_event(wall_time, step, tag, text) -> Event bytes: the text plugin
--   tb.hparams_event(wall_time, hparams) -> Event bytes: the hparams plugin's
--                   session start (name -> number | string | boolean)
--   tb.hparams_experiment_event(wall_time, hparams, metrics) -> Event bytes: the
--                   hyperparameters' types and the metric columns ({tag=, name=})
--   tb.hparams_end_event(wall_time, status[, step]) -> Event bytes: the session's end
--                   ("success" | "failure" | "running" | "unknown"), at its last step
--   tb.histogram_event(wall_time, step, tag, p, n [, buckets]) -> Event bytes: a histogram
--                   of the n floats at FFI pointer p
--   tb.filename(time, host) -> "events.out.tfevents.<time>.<host>"

local bit = require("bit")
local pb = require("moonrl.formats.protobuf")

local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local rshift, lshift = bit.rshift, bit.lshift
local char, byte, floor = string.char, string.byte, math.floor

local tb = {}

local CRC_TABLE = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if band(c, 1) ~= 0 then c = bxor(rshift(c, 1), 0x82F63B78) else c = rshift(c, 1) end
  end
  CRC_TABLE[i] = c
end

function tb.crc32c(s, crc)
  local c = bnot(crc or 0)
  for i = 1, #s do
    c = bxor(rshift(c, 8), CRC_TABLE[band(bxor(c, byte(s, i)), 0xff)])
  end
  return bnot(c) % 4294967296
end

local function mask(crc)
  return (bor(rshift(crc, 15), lshift(crc, 17)) % 4294967296 + 0xa282ead8) % 4294967296
end

function tb.masked_crc32c(s)
  return mask(tb.crc32c(s))
end

local u32le, u64le = pb.u32le, pb.u64le

function tb.record(data)
  local len = u64le(#data)
  return len .. u32le(mask(tb.crc32c(len))) .. data .. u32le(mask(tb.crc32c(data)))
end

tb.varint = pb.varint
local key, bytes_field = pb.key, pb.bytes_field

function tb.encode_event(ev)
  local parts = {}
  if ev.wall_time then parts[#parts + 1] = pb.double_field(1, ev.wall_time) end
  if ev.step then parts[#parts + 1] = key(2, 0) .. tb.varint(ev.step) end
  if ev.file_version then parts[#parts + 1] = bytes_field(3, ev.file_version) end
  if ev.values then
    local vals = {}
    for i, v in ipairs(ev.values) do
      vals[i] = bytes_field(1, bytes_field(1, v.tag) .. pb.float_field(2, v.simple_value))
    end
    parts[#parts + 1] = bytes_field(5, table.concat(vals))
  end
  return table.concat(parts)
end

-- A Summary.Value of a plugin's tensor: tag, SummaryMetadata{plugin_data{
-- plugin_name, content}} (field 9) and a TensorProto (field 8).
local function plugin_value(tag, plugin, content, tensor)
  local plugin_data = bytes_field(1, plugin) .. (content and bytes_field(2, content) or "")
  return bytes_field(1, tag) .. bytes_field(9, bytes_field(1, plugin_data)) .. bytes_field(8, tensor)
end

local function summary_event(wall_time, step, value)
  return pb.double_field(1, wall_time) .. key(2, 0) .. tb.varint(step) .. bytes_field(5, bytes_field(1, value))
end

-- The text plugin: a scalar DT_STRING tensor (dtype 7) holding markdown.
function tb.text_event(wall_time, step, tag, text)
  return summary_event(wall_time, step, plugin_value(tag, "text", nil, pb.int_field(1, 7) ..
    bytes_field(2, "") .. bytes_field(8, text)))
end

-- The hparams plugin's summaries (tensorboard/plugins/hparams/
-- plugin_data.proto and api.proto): HParamsPluginData{version 0, one of
-- experiment (2), session_start_info (3), session_end_info (4)} as the
-- content of a value whose tensor is a scalar DT_FLOAT 0, as TensorBoard's
-- own hparams summaries carry.
local function hparams_value(tag, data)
  return plugin_value(tag, "hparams", pb.int_field(1, 0) .. data,
    pb.int_field(1, 1) .. bytes_field(2, "") .. pb.float_field(5, 0))
end

-- A google.protobuf.Value: number_value 2, string_value 3, bool_value 4.
local function pb_value(v)
  if type(v) == "number" then return pb.double_field(2, v) end
  if type(v) == "boolean" then return pb.int_field(4, v and 1 or 0) end
  return bytes_field(3, tostring(v))
end

local function sorted_names(t)
  local names = {}
  for k in pairs(t) do names[#names + 1] = k end
  table.sort(names)
  return names
end

-- The session start, tag "_hparams_/session_start_info": what TensorBoard's
-- HParams view lists a run by. hparams: name -> number | string | boolean
-- (a number is a number there: numeric axes, filters by interval).
function tb.hparams_event(wall_time, hparams)
  local entries = {}
  for _, k in ipairs(sorted_names(hparams)) do
    entries[#entries + 1] = bytes_field(1, bytes_field(1, k) .. bytes_field(2, pb_value(hparams[k])))
  end
  local start = bytes_field(3, table.concat(entries) .. pb.double_field(5, wall_time))
  return summary_event(wall_time, 0, hparams_value("_hparams_/session_start_info", start))
end

-- The experiment, tag "_hparams_/experiment": each hyperparameter's type
-- (from its value: FLOAT64, BOOL or STRING) and the metrics the HParams view
-- shows as columns, {tag = "episode/return_mean", name = "return"} each
-- (MetricName{group "", tag}: scalars of the same run).
local DATA_TYPE = { number = 3, boolean = 2, string = 1 }
function tb.hparams_experiment_event(wall_time, hparams, metrics)
  local parts = {}
  for _, k in ipairs(sorted_names(hparams)) do
    parts[#parts + 1] = bytes_field(4, bytes_field(1, k) .. pb.int_field(4, DATA_TYPE[type(hparams[k])] or 1))
  end
  for _, m in ipairs(metrics or {}) do
    parts[#parts + 1] = bytes_field(5, bytes_field(1, bytes_field(2, m.tag)) ..
      (m.name and bytes_field(3, m.name) or ""))
  end
  parts[#parts + 1] = pb.double_field(3, wall_time)
  return summary_event(wall_time, 0, hparams_value("_hparams_/experiment", bytes_field(2, table.concat(parts))))
end

-- The session's end, tag "_hparams_/session_end_info": status "success",
-- "failure", "running" or "unknown" (api.proto's Status), at the run's last
-- step (so that a resume from an earlier update cuts it with the steps after).
local STATUS = { unknown = 0, success = 1, failure = 2, running = 3 }
function tb.hparams_end_event(wall_time, status, step)
  local code = assert(STATUS[status], "hparams_end_event: status success, failure, running or unknown")
  local info = bytes_field(4, pb.int_field(1, code) .. pb.double_field(2, wall_time))
  return summary_event(wall_time, step or 0, hparams_value("_hparams_/session_end_info", info))
end

-- A histogram (Summary.Value.histo, field 5: HistogramProto{min, max, num,
-- sum, sum_squares, bucket_limit (the buckets' right edges), bucket (their
-- counts)}) of the n floats at p (an FFI float pointer), in `buckets` equal
-- buckets from the smallest to the largest value.
function tb.histogram_event(wall_time, step, tag, p, n, buckets)
  buckets = buckets or 30
  local lo, hi, sum, sq = math.huge, -math.huge, 0, 0
  for i = 0, n - 1 do
    local v = p[i]
    if v < lo then lo = v end
    if v > hi then hi = v end
    sum, sq = sum + v, sq + v * v
  end
  if n == 0 then lo, hi = 0, 0 end
  local width = (hi - lo) / buckets
  local counts = {}
  for b = 1, buckets do counts[b] = 0 end
  for i = 0, n - 1 do
    local b = width > 0 and math.floor((p[i] - lo) / width) + 1 or 1
    if b > buckets then b = buckets end
    counts[b] = counts[b] + 1
  end
  local limits, cs = {}, {}
  for b = 1, buckets do
    limits[b] = pb.double_le(b == buckets and hi or lo + b * width)
    cs[b] = pb.double_le(counts[b])
  end
  local histo = pb.double_field(1, lo) .. pb.double_field(2, hi) .. pb.double_field(3, n) .. pb.double_field(4, sum) ..
    pb.double_field(5, sq) .. bytes_field(6, table.concat(limits)) .. bytes_field(7, table.concat(cs))
  return summary_event(wall_time, step, bytes_field(1, tag) .. bytes_field(5, histo))
end

function tb.file_version_event(wall_time)
  return tb.encode_event { wall_time = wall_time, file_version = "brain.Event:2" }
end

function tb.scalar_event(wall_time, step, tag, value)
  return tb.encode_event { wall_time = wall_time, step = step, values = { { tag = tag, simple_value = value } } }
end

function tb.session_start_event(wall_time, step)
  return pb.double_field(1, wall_time) .. key(2, 0) .. tb.varint(step) ..
    bytes_field(7, key(1, 0) .. tb.varint(1))
end

function tb.filename(time, host)
  host = tostring(host or "localhost"):gsub("[^%w%.%-_]", "_")
  return string.format("events.out.tfevents.%d.%s", floor(time), host)
end

return tb

-- The TensorBoard writer checked by a reader written here from the format's
-- description alone: a bitwise CRC32C (no table), its own varint and
-- protobuf field parser, IEEE-754 decoding by arithmetic (no FFI).
local tb = require("moonrl.formats.tensorboard")
local TbSink = require("moonrl.run.sinks.tensorboard")
local support = require("support")
local json = require("moonrl.formats.json")
local uv = support.uv
local bit = require("bit")

-- CRC-32C, bit by bit: reflected polynomial 0x82F63B78, init and xorout ~0.
local function crc32c_bitwise(s)
  local crc = 0xFFFFFFFF
  for i = 1, #s do
    crc = bit.bxor(crc, s:byte(i))
    for _ = 1, 8 do
      local lsb = bit.band(crc, 1)
      crc = bit.rshift(crc, 1)
      if lsb == 1 then crc = bit.bxor(crc, 0x82F63B78) end
    end
  end
  return bit.bxor(crc, 0xFFFFFFFF) % 2 ^ 32
end

local function masked(crc)
  local rot = (math.floor(crc / 2 ^ 15) + (crc % 2 ^ 15) * 2 ^ 17) % 2 ^ 32
  return (rot + 0xa282ead8) % 2 ^ 32
end

local function le(s, i, n)
  local v = 0
  for k = n - 1, 0, -1 do v = v * 256 + s:byte(i + k) end
  return v
end

local function varint(s, i)
  local v, mul = 0, 1
  while true do
    local b = s:byte(i)
    assert(b, "truncated varint")
    v = v + (b % 128) * mul
    mul = mul * 128
    i = i + 1
    if b < 128 then return v, i end
  end
end

local function ieee(s, i, n)
  local ebits = n == 8 and 11 or 8
  local mbits = n * 8 - 1 - ebits
  local raw_hi = s:byte(i + n - 1)
  local sign = raw_hi >= 128 and -1 or 1
  local v = le(s, i, n)
  local mant = v % 2 ^ mbits
  local exp = math.floor(v / 2 ^ mbits) % 2 ^ ebits
  local bias = 2 ^ (ebits - 1) - 1
  if exp == 2 ^ ebits - 1 then return mant == 0 and sign * math.huge or 0 / 0 end
  if exp == 0 then return sign * mant * 2 ^ (1 - bias - mbits) end
  return sign * (1 + mant / 2 ^ mbits) * 2 ^ (exp - bias)
end

-- Fields of one protobuf message: list of {field, wire, value}.
local function fields(s)
  local out, i = {}, 1
  while i <= #s do
    local key
    key, i = varint(s, i)
    local field, wire = math.floor(key / 8), key % 8
    local value
    if wire == 0 then value, i = varint(s, i)
    elseif wire == 1 then value = ieee(s, i, 8); i = i + 8
    elseif wire == 5 then value = ieee(s, i, 4); i = i + 4
    elseif wire == 2 then
      local len
      len, i = varint(s, i)
      value = s:sub(i, i + len - 1)
      assert(#value == len, "truncated bytes field")
      i = i + len
    else error("unexpected wire type " .. wire) end
    out[#out + 1] = { field = field, wire = wire, value = value }
  end
  return out
end

local function read_event(data)
  local ev = { values = {} }
  for _, f in ipairs(fields(data)) do
    if f.field == 1 then assert.equal(1, f.wire); ev.wall_time = f.value
    elseif f.field == 2 then assert.equal(0, f.wire); ev.step = f.value
    elseif f.field == 3 then assert.equal(2, f.wire); ev.file_version = f.value
    elseif f.field == 5 then
      for _, v in ipairs(fields(f.value)) do
        assert.equal(1, v.field)
        local val = {}
        for _, x in ipairs(fields(v.value)) do
          if x.field == 1 then val.tag = x.value elseif x.field == 2 then assert.equal(5, x.wire); val.simple_value = x.value
          elseif x.field == 9 then   -- SummaryMetadata: plugin_data.plugin_name
            val.plugin = fields(fields(x.value)[1].value)[1].value
          elseif x.field == 8 then   -- TensorProto: a string_val, if any
            for _, t in ipairs(fields(x.value)) do if t.field == 8 then val.text = t.value end end
          end
        end
        ev.values[#ev.values + 1] = val
      end
    end
  end
  return ev
end

-- Every record of a TFRecord stream, CRCs checked.
local function read_records(s)
  local out, i = {}, 1
  while i <= #s do
    assert(#s - i + 1 >= 12, "truncated header")
    local header = s:sub(i, i + 7)
    local len = le(s, i, 8)
    if masked(crc32c_bitwise(header)) ~= le(s, i + 8, 4) then error("length crc mismatch at byte " .. i) end
    local data = s:sub(i + 12, i + 11 + len)
    assert(#data == len, "truncated data")
    if masked(crc32c_bitwise(data)) ~= le(s, i + 12 + len, 4) then error("data crc mismatch at byte " .. i) end
    out[#out + 1] = data
    i = i + 16 + len
  end
  return out
end

local function util_index(list, x)
  for i, v in ipairs(list) do if v == x then return i end end
end

describe("TensorBoard event files", function()
  it("CRC32C matches the known test vectors (both implementations)", function()
    local zeros, ones, inc, dec = string.rep("\0", 32), string.rep("\255", 32), {}, {}
    for i = 0, 31 do inc[#inc + 1] = string.char(i); dec[#dec + 1] = string.char(31 - i) end
    local vectors = {
      { "123456789", 0xE3069283 },
      { "", 0 },
      { zeros, 0x8A9136AA },
      { ones, 0x62A8AB43 },
      { table.concat(inc), 0x46DD794E },
      { table.concat(dec), 0x113FDB5C },
    }
    for _, v in ipairs(vectors) do
      assert.equal(v[2], crc32c_bitwise(v[1]))
      assert.equal(v[2], tb.crc32c(v[1]))
    end
    -- running CRC over pieces = CRC of the whole
    assert.equal(0xE3069283, tb.crc32c("6789", tb.crc32c("12345")))
    assert.equal(masked(0xE3069283), tb.masked_crc32c("123456789"))
  end)

  it("varints, including negative int64", function()
    assert.equal("\0", tb.varint(0))
    assert.equal("\172\2", tb.varint(300))
    assert.equal(2 ^ 40 + 5, (varint(tb.varint(2 ^ 40 + 5), 1)))
    local neg = tb.varint(-1)
    assert.equal(10, #neg)
    assert.equal(string.rep("\255", 9) .. "\1", neg)
  end)

  it("frames records and encodes events the reader understands", function()
    local rec = tb.record(tb.scalar_event(1700000000.25, 4096, "loss/policy", -0.125))
    local datas = read_records(rec)
    assert.equal(1, #datas)
    local ev = read_event(datas[1])
    assert.equal(1700000000.25, ev.wall_time)
    assert.equal(4096, ev.step)
    assert.same({ { tag = "loss/policy", simple_value = -0.125 } }, ev.values)
    local fv = read_event(read_records(tb.record(tb.file_version_event(12.5)))[1])
    assert.equal("brain.Event:2", fv.file_version)
    assert.equal(12.5, fv.wall_time)
    assert.is_nil(fv.step)
  end)

  it("the reader catches a damaged record", function()
    local rec = tb.record(tb.scalar_event(1, 2, "a", 3))
    local damaged = rec:sub(1, 20) .. string.char((rec:byte(21) + 1) % 256) .. rec:sub(22)
    assert.has_error(function() read_records(damaged) end)
    local bad_len = rec:sub(1, 8) .. "\0\0\0\0" .. rec:sub(13)
    assert.has_error(function() read_records(bad_len) end)
  end)

  describe("the sink", function()
    local dir
    before_each(function() dir = support.tmpdir() end)
    after_each(function() support.rm_rf(dir) end)

    it("writes events.out.tfevents.<time>.<host> through luv", function()
      local t = 1700000000
      local clock = function() t = t + 0.5; return t end
      local errors = {}
      local sink = TbSink.new(dir, {}, { uv = uv, clock = clock, hostname = "box",
        on_error = function(m) errors[#errors + 1] = m end })
      assert.equal(dir .. "/events.out.tfevents.1700000000.box", sink.path)
      sink:update({ update = 1, agent_steps = 4096, episode_return_mean = 1.5, sps = 25000, lr = 3e-4,
        memory_peak_bytes = 123456789, custom_metric = 7 })
      sink:update({ update = 2, agent_steps = 8192, episode_return_mean = 2.25, sps = 26000, lr = 2.5e-4,
        policy_loss = 0 / 0 })
      local closed = false
      sink:close(function(err) assert.is_nil(err); closed = true end)
      support.run_until(function() return closed end)
      assert.same({}, errors)
      assert.same({ "events.out.tfevents.1700000000.box" }, support.files(dir))

      local datas = read_records(support.read_file(sink.path))
      local first = read_event(datas[1])
      assert.equal("brain.Event:2", first.file_version)
      assert.equal(1700000000.5, first.wall_time)
      local got, plugins = {}, {}
      for i = 2, #datas do
        local ev = read_event(datas[i])
        assert.equal(1, #ev.values)
        if ev.values[1].plugin then
          plugins[#plugins + 1] = ev.values[1]
        else
          got[#got + 1] = { ev.step, ev.values[1].tag, ev.values[1].simple_value, ev.wall_time }
        end
      end
      -- first the config as text and the hparams plugin's experiment and session start
      assert.equal(3, #plugins)
      assert.equal("run/config", plugins[1].tag)
      assert.equal("text", plugins[1].plugin)
      assert.equal("_hparams_/experiment", plugins[2].tag)
      assert.equal("_hparams_/session_start_info", plugins[3].tag)
      assert.equal("hparams", plugins[3].plugin)
      local function find(step, tag)
        for _, g in ipairs(got) do if g[1] == step and g[2] == tag then return g end end
      end
      assert.equal(1.5, find(4096, "episode/return_mean")[3])
      assert.equal(2.25, find(8192, "episode/return_mean")[3])
      assert.equal(25000, find(4096, "perf/sps")[3])
      assert.is_true(math.abs(find(4096, "schedule/lr")[3] - 3e-4) < 1e-10)   -- a float
      assert.equal(123456792, find(4096, "memory/peak_bytes")[3])            -- float rounding
      assert.equal(7, find(4096, "metrics/custom_metric")[3])
      local nan = find(8192, "loss/policy")[3]
      assert.is_true(nan ~= nan)
      assert.equal(1700000001, find(4096, "perf/sps")[4])
      assert.equal(5 + 4, #got)
    end)

    it("reports a write error instead of raising", function()
      local errors = {}
      local sink = TbSink.new(dir .. "/missing", {}, { uv = uv, hostname = "h",
        on_error = function(m) errors[#errors + 1] = m end })
      sink:update({ update = 1, agent_steps = 1, sps = 1 })
      local closed = false
      sink:close(function() closed = true end)
      support.run_until(function() return closed end)
      assert.equal(1, #errors)
      assert.matches("^cannot open .*/missing/events.out.tfevents.%d+.h: ENOENT", errors[1])
    end)
  end)

  -- The real TensorBoard (requirements.txt, installed by `make test` into
  -- build/venv) reading a run's event file with its own reader.
  it("a run's event file, read by TensorBoard's own reader: every scalar as in metrics.jsonl, the config and " ..
    "a live change as text, the hyperparameters, the evaluation, the weights' histograms",
    function()
      local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
      if not io.open(BIN, "rb") then return pending("no binary at " .. BIN .. " (build it: make build)") end
      if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end
      local py = support.VENV_PY
      local missing = support.venv_lacks("tensorboard")
      if missing then return pending(missing) end
      local dir = support.tmpdir()
      -- a run whose hook changes a hot key at update 2: in force from update 3
      support.write_file(dir .. "/train.lua", [[
local moonrl = require("moonrl")
local run
run = moonrl.train({
  name = "tb", device = "cpu", threads = 1, seed = 9, total_steps = 16 * 8 * 5, warmup = { updates = 0 },
  env = { num_envs = 16, grid_size = 16, density_min = 4, density_max = 8 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8, lr = moonrl.schedule.linear(0.001, 0.0003), ent_coef = 0.013333333333333334 },
  log = { console = false, tensorboard = true, histograms = true, checkpoint_interval = 2 }, eval = { num_envs = 4, steps = 4 },
  hooks = { on_update = function(m) if m.update == 2 then assert(run:set("ppo.vf_coef", 0.25, "spec")) end end },
}, { dir = "run" })
run:wait()
]])
      support.write_file(dir .. "/read.py", [[
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0, "histograms": 0})
acc.Reload()
texts = {t: [[e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode()] for e in acc.Tensors(t)]
         for t in acc.Tags()["tensors"] if t.startswith("run/") or t.startswith("eval/")}
hpc = acc.PluginTagToContent("hparams")
hp = plugin_data_pb2.HParamsPluginData.FromString(hpc["_hparams_/session_start_info"])
hparams = {k: v.WhichOneof("kind") + ":" + str(getattr(v, v.WhichOneof("kind")))
           for k, v in hp.session_start_info.hparams.items()}
ex = plugin_data_pb2.HParamsPluginData.FromString(hpc["_hparams_/experiment"]).experiment
end = plugin_data_pb2.HParamsPluginData.FromString(hpc["_hparams_/session_end_info"]).session_end_info
experiment = {"types": {h.name: h.type for h in ex.hparam_infos},
              "metrics": [m.name.tag for m in ex.metric_infos], "status": end.status}
with open("read.json", "w") as f:
    json.dump({"scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]},
               "texts": texts, "hparams": hparams, "experiment": experiment, "text_plugin": sorted(acc.PluginTagToContent("text").keys()),
               "histograms": {t: [[e.step, e.histogram_value.num, e.histogram_value.min, e.histogram_value.max]
                                  for e in acc.Histograms(t)] for t in acc.Tags()["histograms"]}}, f)
]])
      local p = io.popen(string.format("cd %q && %q run train.lua 2>&1 && %q eval run --envs 8 --steps 16 2>&1 && " ..
        "env -u PYTHONPATH %q read.py run 2>&1", dir, BIN, BIN, py))
      local out = p:read("*a")
      p:close()
      local all = json.decode(support.read_file(dir .. "/read.json") or "")
      assert.is_table(all, out)
      local scalars = all.scalars
      -- the config as text, the live change as a line at its update's step
      assert.are.same({ "eval/table", "run/changes", "run/config" }, all.text_plugin)
      assert.truthy(all.texts["run/config"][1][2]:find("vf_coef", 1, true), out)
      local change = all.texts["run/changes"][1]
      assert.are.equal(3 * 16 * 8, change[1], out)   -- set in update 2's hook: in force from update 3
      assert.truthy(change[2]:find("update 3: `ppo.vf_coef` 0.5 -> 0.25 (spec)", 1, true), change[2])
      -- the evaluation (moonrl eval run): its numbers and table at the checkpoint's step
      assert.are.equal(5 * 16 * 8, all.texts["eval/table"][1][1], out)
      assert.truthy(all.texts["eval/table"][1][2]:find("energy/1k", 1, true), out)
      local energy = assert(all.scalars["eval/ground_truth/energy_per_1k"], out)
      assert.are.equal(5 * 16 * 8, energy[1][1])
      local table_energy = all.texts["eval/table"][1][2]:match("energy/1k%s*|%s*([-+%d.]+)")
      assert.is_true(math.abs(energy[1][2] - tonumber(table_energy)) < 0.051, table_energy)   -- the table rounds to 0.1
      for tag in pairs(all.scalars) do
        if tag:match("^eval/") then all.scalars[tag] = nil end   -- the training scalars are checked below
      end
      -- log.histograms: every tensor's weights at each checkpoint (updates 2, 4 and the final 5)
      local h = assert(all.histograms["weights/conv0.w"], out)
      local hsteps = {}
      for _, x in ipairs(h) do
        hsteps[#hsteps + 1] = x[1]
        assert.are.equal(4 * 3 * 3 * 2, x[2])
        assert.is_true(x[3] < x[4])
      end
      assert.are.same({ 2 * 128, 4 * 128, 5 * 128 }, hsteps)
      assert.is_table(all.histograms["weights/value.b"])
      -- and of each tensor's gradient at the same steps, the last optimizer step's as the checkpoint
      -- holds it: the final one's "grads" section read here by its own parser (conv0.w is floats 0 .. 71)
      local gh = assert(all.histograms["gradients/conv0.w"], out)
      assert.are.equal(3, #gh)
      local bytes = support.checkpoint_section(dir .. "/run/checkpoints/update_0000005.mrck", "grads")
      local grads = require("ffi").cast("const float *", bytes)
      local lo, hi = math.huge, -math.huge
      for i = 0, 71 do lo, hi = math.min(lo, grads[i]), math.max(hi, grads[i]) end
      assert.are.same({ 5 * 128, 72, lo, hi }, gh[3])
      assert.is_true(lo < 0 and hi > 0, "a gradient has both signs: " .. lo .. " " .. hi)
      assert.is_table(all.histograms["gradients/value.b"])
      -- the hyperparameters, by their dotted names
      assert.are.equal("number_value:0.5", all.hparams["ppo.vf_coef"])
      assert.are.equal("string_value:4", all.hparams["policy.conv_channels"])
      assert.are.equal("string_value:ground_truth", all.hparams["env.mode"])
      assert.are.equal("bool_value:True", all.hparams["policy.popart"])
      assert.is_nil(all.hparams.dir)   -- where a run is written is no hyperparameter
      -- numbers as numbers (a numeric axis in the HParams view), a schedule as its start value and its text
      assert.are.equal("number_value:0.013333333333333334", all.hparams["ppo.ent_coef"])
      assert.are.equal("number_value:0.001", all.hparams["ppo.lr"])
      assert.are.equal("string_value:linear(0.001, 0.0003)", all.hparams["ppo.lr.schedule"])
      -- the settings in force: a CPU run records no GPU-only key
      assert.is_nil(all.hparams["cuda.graphs"])
      assert.are.equal("string_value:cpu", all.hparams["device"])
      -- the experiment declares each hyperparameter's type (3 FLOAT64, 1 STRING, 2 BOOL) and the metric columns
      assert.are.equal(3, all.experiment.types["ppo.lr"])
      assert.are.equal(1, all.experiment.types["ppo.lr.schedule"])
      assert.are.equal(2, all.experiment.types["policy.popart"])
      assert.truthy(util_index(all.experiment.metrics, "episode/return_mean"), out)
      assert.are.equal(1, all.experiment.status)   -- STATUS_SUCCESS: the run finished
      local rows = {}
      for line in support.read_file(dir .. "/run/metrics.jsonl"):gmatch("[^\n]+") do
        local r = json.decode(line)
        if not r.event then rows[#rows + 1] = r end   -- the change's own line
      end
      support.rm_rf(dir)
      assert.are.equal(5, #rows)
      local n = 0
      for tag, points in pairs(scalars) do
        n = n + 1
        assert.is_true(#points >= 1 and #points <= 5, tag)
      end
      assert.is_true(n >= 30, "TensorBoard read " .. n .. " tags")
      -- the same numbers as metrics.jsonl, at the same steps (agent-steps), as float32
      for _, pair in ipairs({ { "loss/entropy", "entropy" }, { "schedule/lr", "lr" }, { "loss/value", "value_loss" } }) do
        local points = assert(scalars[pair[1]], pair[1] .. " missing: " .. out)
        assert.are.equal(5, #points, pair[1])
        for i, r in ipairs(rows) do
          assert.are.equal(r.agent_steps, points[i][1], pair[1])
          local want = r[pair[2]]
          assert.is_true(math.abs(points[i][2] - want) <= 1e-6 * math.max(1, math.abs(want)),
            pair[1] .. " at update " .. i .. ": " .. points[i][2] .. " against " .. tostring(want))
        end
      end
    end)

  it("a resumed run keeps every evaluation, read by TensorBoard's own reader", function()
    local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
    if not io.open(BIN, "rb") then return pending("no binary at " .. BIN .. " (build it: make build)") end
    if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end
    local missing = support.venv_lacks("tensorboard")
    if missing then return pending(missing) end
    local dir = support.tmpdir()
    support.write_file(dir .. "/cfg.lua", [[
return { name = "tbr", device = "cpu", threads = 1, seed = 3, total_steps = 16 * 8 * 3, warmup = { updates = 0 },
  env = { num_envs = 16, grid_size = 16, density_min = 4, density_max = 8 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 }, ppo = { rollout_steps = 8 },
  log = { console = false, tensorboard = true, checkpoint_interval = 1 }, eval = { num_envs = 4, steps = 4 } }
]])
    support.write_file(dir .. "/read.py", [[
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
acc.Reload()
with open("read.json", "w") as f:
    json.dump({t: [e.step for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}, f)
]])
    -- 3 updates and their evaluation, then the run resumed to 5 and evaluated again (a second later:
    -- the files' names are in seconds)
    local p = io.popen(string.format("cd %q && %q train cfg.lua --dir run 2>&1 && sleep 1 && " ..
      "%q train --resume run --set total_steps=%d 2>&1 && env -u PYTHONPATH %q read.py run 2>&1",
      dir, BIN, BIN, 16 * 8 * 5, support.VENV_PY))
    local out = p:read("*a")
    p:close()
    local scalars = json.decode(support.read_file(dir .. "/read.json") or "")
    assert.is_table(scalars, out)
    support.rm_rf(dir)
    local evals = 0
    for tag, steps in pairs(scalars) do
      if tag:match("^eval/") then
        evals = evals + 1
        assert.are.same({ 3 * 128, 5 * 128 }, steps, tag)
      end
    end
    assert.is_true(evals >= 5, "eval scalars: " .. evals .. "\n" .. out)
    assert.are.equal(5, #scalars["loss/entropy"], out)   -- the training's, the resumed session's included
  end)
end)

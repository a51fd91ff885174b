-- moonrl export: the safetensors file holds the checkpoint's parameters bit
-- for bit, read two independent ways: by this spec's own reader of the
-- checkpoint's "params" section and of the safetensors layout, and by the
-- real safetensors library (requirements.txt, installed by `make test` into
-- build/venv; the spec says so and is pending where it could not be).

local support = require("support")
local json = require("moonrl.formats.json")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end
local VENV_PY = support.VENV_PY

local function run(dir, cmd)
  local p = io.popen(string.format("cd %q && %s 2>&1; echo \"rc=$?\"", dir, cmd))
  local out = p:read("*a")
  p:close()
  return tonumber(out:match("rc=(%d+)%s*$")), out
end

local section = support.checkpoint_section
local function u32(s, i) local a, b, c, d = s:byte(i, i + 3) return a + b * 256 + c * 65536 + d * 16777216 end
local function u64(s, i) return u32(s, i) + u32(s, i + 4) * 4294967296 end

-- The engine's own inference (mr_trainer_infer, extra = zeros) on 64 random
-- observations of checkpoint ck, in dir: obs.bin (codes), engine_logits.bin,
-- engine_value.bin.
-- n = 64 random observations of VV cells (codes 0 .. ncodes - 1; default
-- foraging's 11 x 11 and 3 codes) and the engine's logits (NA each) and values
local function engine_outputs(dir, ck, VV, NA, ncodes)
  support.write_file(dir .. "/infer.lua", string.format([[
local engine = require("moonrl.engine")
local ffi, C = engine.ffi, engine.C
local cfg, err = ffi.new("mr_config"), ffi.new("mr_error")
assert(C.mr_checkpoint_read_config(%q, cfg, err) == 0, ffi.string(err.msg))
cfg.device, cfg.threads = C.MR_DEVICE_CPU, 1
local tp = ffi.new("mr_trainer*[1]")
assert(C.mr_trainer_create(cfg, tp, err) == 0, ffi.string(err.msg))
assert(C.mr_trainer_load(tp[0], %q, err) == 0, ffi.string(err.msg))
local n, VV, NA = 64, %d, %d
local obs, logits, value = ffi.new("uint8_t[?]", n * VV), ffi.new("float[?]", n * NA), ffi.new("float[?]", n)
local seed = 12345
for i = 0, n * VV - 1 do
  seed = (seed * 1103515245 + 12345) %% 2147483648
  obs[i] = seed %% %d
end
assert(C.mr_trainer_infer(tp[0], obs, nil, n, logits, value, err) == 0, ffi.string(err.msg))
for name, v in pairs({ ["obs.bin"] = ffi.string(obs, n * VV), ["engine_logits.bin"] = ffi.string(logits, 4 * n * NA),
                       ["engine_value.bin"] = ffi.string(value, 4 * n) }) do
  local f = io.open(name, "wb")
  f:write(v)
  f:close()
end
C.mr_trainer_free(tp[0])
]], ck, ck, VV or 121, NA or 8, ncodes or 3))
  local rc, out = run(dir, string.format("%q run infer.lua", BIN))
  assert.are.equal(0, rc, out)
end

local venv_lacks = support.venv_lacks

describe("moonrl export", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  local function trained()
    support.write_file(dir .. "/cfg.lua", [[return {
      name = "export", device = "cpu", threads = 1, seed = 5, total_steps = 16 * 8 * 3, warmup = { updates = 0 },
      env = { num_envs = 16, grid_size = 16, density_min = 4, density_max = 8, mode = "proxy" },
      policy = { conv_channels = { 4, 8 }, hidden = 16, critic_hidden = 24 },
      ppo = { rollout_steps = 8 },
      log = { console = false, tensorboard = false }, eval = { num_envs = 4, steps = 4 } }]])
    local rc, out = run(dir, string.format("%q train cfg.lua --dir run", BIN))
    assert.are.equal(0, rc, out)
    return dir .. "/run/checkpoints/update_0000003.mrck"
  end

  it("writes every parameter tensor, bit for bit, with the network described in the metadata", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local ck = trained()
    local rc, out = run(dir, string.format("%q export run", BIN))
    assert.are.equal(0, rc, out)
    local file = dir .. "/run/checkpoints/update_0000003.safetensors"
    assert.truthy(out:find(file:sub(#dir + 2), 1, true), out)
    local s = assert(support.read_file(file))
    local n = u64(s, 1)
    assert.are.equal(0, (8 + n) % 8, "the data starts 8-byte aligned")
    local header = assert(json.decode(s:sub(9, 8 + n)))
    local data = s:sub(9 + n)
    -- the tensors, in the order of their bytes, are the checkpoint's params section
    local list = {}
    for name, t in pairs(header) do
      if name ~= "__metadata__" then list[#list + 1] = { name = name, t = t } end
    end
    table.sort(list, function(a, b) return a.t.data_offsets[1] < b.t.data_offsets[1] end)
    local names, at = {}, 0
    for _, x in ipairs(list) do
      assert.are.equal("F32", x.t.dtype)
      assert.are.equal(at, x.t.data_offsets[1], x.name .. " does not follow the one before")
      local count = 1
      for _, d in ipairs(x.t.shape) do count = count * d end
      assert.are.equal(x.t.data_offsets[1] + 4 * count, x.t.data_offsets[2], x.name)
      at = x.t.data_offsets[2]
      names[#names + 1] = x.name
    end
    assert.are.equal(#data, at)
    assert.are.same({ "conv0.w", "conv0.b", "conv1.w", "conv1.b", "fc.w", "fc.b", "actor.w", "actor.b",
      "critic.w", "critic.b", "value.w", "value.b" }, names)
    assert.is_true(data == section(ck, "params"), "the tensors' bytes are not the checkpoint's parameters")
    assert.are.same({ 8, 3, 3, 4 }, header["conv1.w"].shape)
    assert.are.same({ 16, 11 * 11 * 8 }, header["fc.w"].shape)
    assert.are.same({ 24, 16 + 2 + 2 * 121 }, header["critic.w"].shape)
    local meta = header.__metadata__
    local net = json.decode(meta["moonrl.network"])
    assert.are.same({ 4, 8 }, net.conv_channels)
    assert.are.equal(11, net.view)
    assert.are.equal(8, net.actions)
    assert.is_true(net.value_std > 0)
    local obs = json.decode(meta["moonrl.observation"])
    assert.are.equal("proxy", obs.mode)
    assert.truthy(obs.channels:find("0.5 for poison", 1, true))
    assert.are.equal(3, json.decode(meta["moonrl.checkpoint"]).update)
    -- the spaces the environment declares, as moonrl envs --json has them
    local spaces = json.decode(meta["moonrl.spaces"])
    assert.are.same({ kind = "codes", shape = { 2, 11, 11 }, codes = 3 }, spaces.observation)
    assert.are.same({ kind = "discrete", n = 8 }, spaces.action)
    assert.are.same({ "food", "poison" }, spaces.counters)
    assert.are.equal(2, net.input_channels)
    assert.are.equal(2, net.extra_critic_inputs)
  end)

  it("is read by the real safetensors library: names, shapes, values and metadata", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local missing = venv_lacks("safetensors, numpy")
    if missing then return pending(missing) end
    local ck = trained()
    local rc, out = run(dir, string.format("%q export %q --out policy.safetensors", BIN, ck))
    assert.are.equal(0, rc, out)
    support.write_file(dir .. "/read.py", [[
import json, sys
from safetensors import safe_open
with safe_open("policy.safetensors", framework="numpy") as f:
    meta = f.metadata()
    names = sorted(f.keys())
    arrays = {k: f.get_tensor(k) for k in names}
order = ["conv0.w", "conv0.b", "conv1.w", "conv1.b", "fc.w", "fc.b", "actor.w", "actor.b",
         "critic.w", "critic.b", "value.w", "value.b"]
assert names == sorted(order), names
with open("params.bin", "wb") as out:
    for k in order:
        a = arrays[k]
        assert str(a.dtype) == "float32", (k, a.dtype)
        out.write(a.astype("<f4").tobytes())
print(json.dumps({"shapes": {k: list(arrays[k].shape) for k in order},
                  "network": json.loads(meta["moonrl.network"])}))
]])
    rc, out = run(dir, string.format("env -u PYTHONPATH %q read.py", VENV_PY))
    assert.are.equal(0, rc, out)
    local r = assert(json.decode(out:match("(%b{})")), out)
    assert.are.same({ 8, 3, 3, 4 }, r.shapes["conv1.w"])
    assert.are.same({ 1, 24 }, r.shapes["value.w"])
    assert.are.same({ 4, 8 }, r.network.conv_channels)
    assert.is_true(support.read_file(dir .. "/params.bin") == section(ck, "params"),
      "the library's arrays are not the checkpoint's parameters")

    -- docs/export.md's forward pass, in numpy from the file, against the
    -- engine's own inference (mr_trainer_infer) on 64 random observations
    engine_outputs(dir, ck)
    local doc = assert(support.read_file((os.getenv("PWD") or ".") .. "/docs/export.md"))
    local snippet = assert(doc:match("```python\n(.-)```"), "docs/export.md has no python block")
    local before = #snippet
    snippet = snippet:gsub("x = np%.zeros[^\n]*", "x = X", 1)   -- the observation: the test's
    assert.is_true(#snippet < before, "docs/export.md's snippet no longer starts from x = np.zeros(...)")
    support.write_file(dir .. "/doc_forward.py", table.concat({
      "import numpy as np",
      "codes = np.fromfile('obs.bin', np.uint8).reshape(64, 11, 11)",
      "engine = np.fromfile('engine_logits.bin', np.float32).reshape(64, 8)",
      "worst = 0.0",
      "for k in range(64):",
      "    c = codes[k]",
      "    X = np.stack([np.where(c == 1, 1.0, np.where(c == 2, 0.5, 0.0))] * 2, -1).astype(np.float32)  # proxy",
      "    exec(open('snippet.py').read().replace('policy.safetensors', 'policy.safetensors'))",
      "    worst = max(worst, float(np.max(np.abs(logits - engine[k])) / (np.max(np.abs(engine[k])) + 1e-30)))",
      "print('worst', worst)",
    }, "\n") .. "\n")
    support.write_file(dir .. "/snippet.py", snippet)
    rc, out = run(dir, string.format("env -u PYTHONPATH %q doc_forward.py", VENV_PY))
    assert.are.equal(0, rc, out)
    local worst = tonumber(out:match("worst (%S+)"))
    assert.truthy(worst and worst < 1e-4, "docs/export.md's forward pass against the engine: " .. out)
  end)

  it("as ONNX: passes onnx's checker, and onnxruntime gives the engine's logits and values", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local missing = venv_lacks("onnx, onnxruntime, numpy")
    if missing then return pending(missing) end
    local ck = trained()
    local rc, out = run(dir, string.format("%q export run --format onnx", BIN))
    assert.are.equal(0, rc, out)
    engine_outputs(dir, ck)
    support.write_file(dir .. "/ort.py", [[
import json, numpy as np, onnx, onnxruntime as ort
path = "run/checkpoints/update_0000003.onnx"
m = onnx.load(path)
onnx.checker.check_model(m, full_check=True)
meta = {p.key: p.value for p in m.metadata_props}
codes = np.fromfile("obs.bin", np.uint8).reshape(64, 11, 11)
proxy = np.where(codes == 1, 1.0, np.where(codes == 2, 0.5, 0.0)).astype(np.float32)   # the run's mode: proxy
obs = np.stack([proxy, proxy], -1)
truth = np.stack([(codes == 1), (codes == 2)], -1).astype(np.float32).reshape(64, -1)  # cell by cell: food, poison
logits, value = ort.InferenceSession(path).run(None, {"observation": obs, "extra": np.zeros((64, 2), np.float32),
                                                       "truth": truth})
el = np.fromfile("engine_logits.bin", np.float32).reshape(64, 8)
ev = np.fromfile("engine_value.bin", np.float32).reshape(64, 1)
rel = lambda a, b: float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
print(json.dumps({"logits": rel(logits, el), "value": rel(value, ev), "mode": json.loads(meta["moonrl.checkpoint"])["mode"]}))
]])
    rc, out = run(dir, string.format("env -u PYTHONPATH %q ort.py", VENV_PY))
    assert.are.equal(0, rc, out)
    local r = assert(json.decode(out:match("(%b{})")), out)
    assert.are.equal("proxy", r.mode)
    assert.truthy(r.logits < 1e-5, "logits: onnxruntime against the engine: " .. out)
    assert.truthy(r.value < 1e-5, "value: onnxruntime against the engine: " .. out)
  end)

  it("a snake checkpoint (4 one-hot input channels) as ONNX: onnxruntime gives the engine's logits and values",
    function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local missing = venv_lacks("onnx, onnxruntime, numpy")
    if missing then return pending(missing) end
    support.write_file(dir .. "/snake.lua", [[return {
      name = "snake", device = "cpu", threads = 1, seed = 5, total_steps = 16 * 8 * 3, warmup = { updates = 0 },
      env = { name = "snake", num_envs = 16, grid_size = 6, view_range = 3, max_episode_steps = 50 },
      policy = { conv_channels = { 4, 8 }, hidden = 16, critic_hidden = 24 },
      ppo = { rollout_steps = 8 },
      log = { console = false, tensorboard = false }, eval = { num_envs = 4, steps = 4 } }]])
    local rc, out = run(dir, string.format("%q train snake.lua --dir srun", BIN))
    assert.are.equal(0, rc, out)
    rc, out = run(dir, string.format("%q export srun --format onnx --out snake.onnx", BIN))
    assert.are.equal(0, rc, out)
    engine_outputs(dir, dir .. "/srun/checkpoints/update_0000003.mrck", 49, 4, 6)   -- codes 0 .. 5: 5 reads as empty
    support.write_file(dir .. "/ort_snake.py", [[
import json, numpy as np, onnx, onnxruntime as ort
m = onnx.load("snake.onnx")
onnx.checker.check_model(m, full_check=True)
meta = {p.key: p.value for p in m.metadata_props}
codes = np.fromfile("obs.bin", np.uint8).reshape(64, 7, 7)
obs = np.stack([(codes == k) for k in (1, 2, 3, 4)], -1).astype(np.float32)   # one-hot: code k is channel k-1
logits, value = ort.InferenceSession("snake.onnx").run(None, {"observation": obs, "extra": np.zeros((64, 2), np.float32),
                                                              "truth": obs.reshape(64, -1)})
el = np.fromfile("engine_logits.bin", np.float32).reshape(64, 4)
ev = np.fromfile("engine_value.bin", np.float32).reshape(64, 1)
rel = lambda a, b: float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
net = json.loads(meta["moonrl.network"])
print(json.dumps({"logits": rel(logits, el), "value": rel(value, ev), "channels": net["input_channels"]}))
]])
    rc, out = run(dir, string.format("env -u PYTHONPATH %q ort_snake.py", VENV_PY))
    assert.are.equal(0, rc, out)
    local r = assert(json.decode(out:match("(%b{})")), out)
    assert.are.equal(4, r.channels)
    assert.truthy(r.logits < 1e-5, "logits: onnxruntime against the engine: " .. out)
    assert.truthy(r.value < 1e-5, "value: onnxruntime against the engine: " .. out)
  end)

  it("starts a new run from the exported weights (policy.init), and refuses a file of another network by name",
    function()
      if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
      local ck = trained()
      local rc, out = run(dir, string.format("%q export run --out w.safetensors", BIN))
      assert.are.equal(0, rc, out)
      -- one update at lr 0 without PopArt (which rescales the value head): the weights stay the file's
      local base = [[return {
        name = "init", device = "cpu", threads = 1, seed = 77, total_steps = 16 * 8, warmup = { updates = 0 },
        env = { num_envs = 16, grid_size = 16, density_min = 4, density_max = 8 },
        policy = { conv_channels = { 4, %s }, hidden = 16, critic_hidden = 24, popart = false, init = "w.safetensors" },
        ppo = { rollout_steps = 8, lr = 0 },
        log = { console = false, tensorboard = false }, eval = { num_envs = 4, steps = 4 } }]]
      support.write_file(dir .. "/init.lua", string.format(base, "8"))
      rc, out = run(dir, string.format("%q train init.lua --dir b --no-eval", BIN))
      assert.are.equal(0, rc, out)
      assert.is_true(section(dir .. "/b/checkpoints/update_0000001.mrck", "params") == section(ck, "params"),
        "the new run did not start from the file's weights")
      -- another network: refused, naming the tensor and both shapes; no run directory is made
      support.write_file(dir .. "/other.lua", string.format(base, "6"))
      rc, out = run(dir, string.format("%q train other.lua --dir c", BIN))
      assert.are_not.equal(0, rc, out)
      assert.truthy(out:find("tensor conv1.w has the shape (8, 3, 3, 4), this network's is (6, 3, 3, 4)", 1, true), out)
      assert.is_nil(support.read_file(dir .. "/c/config.lua"))
      -- not a safetensors file
      support.write_file(dir .. "/bad.lua", (string.format(base, "8"):gsub("w%.safetensors", "init.lua")))
      rc, out = run(dir, string.format("%q train bad.lua --dir d", BIN))
      assert.are_not.equal(0, rc, out)
      assert.truthy(out:find("policy.init: init.lua is not a safetensors file", 1, true), out)
    end)

  it("keeps an existing file, refuses what is not a checkpoint or a format it does not write", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    trained()
    local rc, out = run(dir, string.format("%q export run", BIN))
    assert.are.equal(0, rc, out)
    rc, out = run(dir, string.format("%q export run", BIN))
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("exists: kept (--force replaces it", 1, true), out)
    rc, out = run(dir, string.format("%q export run --force", BIN))
    assert.are.equal(0, rc, out)
    rc, out = run(dir, string.format("%q export cfg.lua", BIN))
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("is not a moonrl checkpoint", 1, true), out)
    rc, out = run(dir, string.format("%q export nowhere", BIN))
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("'nowhere' not found", 1, true), out)
    rc, out = run(dir, string.format("%q export run --format tflite", BIN))
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("accepted safetensors or onnx", 1, true), out)
  end)
end)

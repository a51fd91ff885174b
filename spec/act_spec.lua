-- `moonrl act` and moonrl.policy: the engine's inference on a user's
-- observations, checked against the ONNX export under onnxruntime and the
-- numpy forward pass of docs/export.md, and the reference pair that
-- examples/reference/ ships (docs/export.md, "Checking your own
-- preprocessing"). .npy files are read with this repository's reader and,
-- where the test venv has it, with numpy itself.
local support = require("support")
local npy = require("moonrl.formats.npy")
local json = require("moonrl.formats.json")

local BIN = support.BIN
local ROOT = (os.getenv("PWD") or ".")
local REF = ROOT .. "/examples/reference"

local function sh(dir, cmd)
  local p = io.popen(string.format("cd %q && ( %s ) 2>&1; echo \"rc=$?\"", dir, cmd))
  local out = p:read("*a")
  p:close()
  return tonumber(out:match("rc=(%d+)%s*$")), out
end

local function rel(a, b)
  local num, den = 0, 0
  for i = 1, #b do
    num = math.max(num, math.abs(a[i] - b[i]))
    den = math.max(den, math.abs(b[i]))
  end
  return num / (den + 1e-30)
end

describe("moonrl.formats.npy", function()
  it("reads what it writes, and refuses what it cannot read, naming it", function()
    local bytes = npy.encode("f4", { 2, 3 }, require("ffi").string(require("ffi").new("float[6]", { 1, 2, 3, 4, 5, 6 }), 24))
    assert.are.equal(0, (#bytes - 24) % 64)   -- the data starts at a multiple of 64, as numpy aligns it
    local a = assert(npy.decode(bytes, "x.npy"))
    assert.are.same({ 2, 3 }, a.shape)
    assert.are.same({ 1, 2, 3, 4, 5, 6 }, npy.values(a))
    local big = bytes:gsub("<f4", ">f4")
    assert.truthy(select(2, npy.decode(big, "x.npy")):find("dtype '>f4': accepted", 1, true))
    assert.truthy(select(2, npy.decode("PK\3\4", "x.npz")):find("not a .npy file", 1, true))
    assert.truthy(select(2, npy.decode(bytes:sub(1, -5), "x.npy")):find("but 20 bytes follow", 1, true))
    local fortran = bytes:gsub("'fortran_order': False", "'fortran_order': True ")
    assert.truthy(select(2, npy.decode(fortran, "x.npy")):find("Fortran order", 1, true))
  end)
end)

describe("moonrl act", function()
  if not support.have_bin then
    it("needs the binary", function() pending("no binary at " .. BIN .. " (build it: make build)") end)
    return
  end

  it("gives the reference pair of examples/reference (the engine's logits and values of obs.npy)", function()
    local dir = support.tmpdir()
    local rc, out = sh(dir, string.format("%q act %q %q --out o", BIN, REF .. "/policy.mrck", REF .. "/obs.npy"))
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("16 observations", 1, true), out)
    for _, f in ipairs({ "logits.npy", "value.npy" }) do
      local got, want = assert(npy.read(dir .. "/o/" .. f)), assert(npy.read(REF .. "/" .. f))
      assert.are.same(want.shape, got.shape)
      assert.truthy(rel(npy.values(got), npy.values(want)) < 1e-5, f)
    end
    -- --json: the same numbers; the greedy action is the largest logit
    local _, lines = sh(dir, string.format("%q act %q %q --json", BIN, REF .. "/policy.mrck", REF .. "/obs.npy"))
    local first = assert(json.decode(lines:match("^[^\n]+")), lines)
    local want = npy.values(assert(npy.read(REF .. "/logits.npy")))
    local best = 1
    for a = 1, 8 do
      assert.truthy(math.abs(first.logits[a] - want[a]) <= 1e-5 * math.max(1, math.abs(want[a])))
      if want[a] > want[best] then best = a end
    end
    assert.are.equal(best - 1, first.action)
    local psum = 0
    for _, p in ipairs(first.probs) do psum = psum + p end
    assert.truthy(math.abs(psum - 1) < 1e-9)
    support.rm_rf(dir)
  end)

  it("moonrl.policy(ckpt):act(obs) from Lua gives what the command gives", function()
    local dir = support.tmpdir()
    support.write_file(dir .. "/p.lua", string.format([[
local moonrl = require("moonrl")
local npy = require("moonrl.formats.npy")
local p = assert(moonrl.policy(%q))
local all = assert(p:act(assert(npy.read(%q))))
-- the second observation alone, as a Lua list of its 121 codes
local codes = npy.values(assert(npy.read(%q)))
local one = {}
for i = 122, 242 do one[#one + 1] = codes[i] end
local r = assert(p:act(one))
-- the same as the batch's second row to float rounding, not bit for bit: the CPU's GEMM takes other
-- kernels for 1 row than for 16 (on AVX-512, 1-ulp differences in a logit; on AVX2 none)
local close = math.abs(r.value[1] - all.value[2]) <= 1e-5 * math.max(1, math.abs(all.value[2]))
for a = 1, p.actions do
  close = close and math.abs(r.logits[1][a] - all.logits[2][a]) <= 1e-5 * math.max(1, math.abs(all.logits[2][a]))
end
print(p.env, p.mode, p.update, p.observation.view, p.actions, all.n, r.n, close, r.logits[1][3] ~= all.logits[1][3])
print(select(2, p:act({ 1, 2, 3 })))
p:close()
]], REF .. "/policy.mrck", REF .. "/obs.npy", REF .. "/obs.npy"))
    local rc, out = sh(dir, string.format("%q run p.lua", BIN))
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("foraging\tground_truth\t6\t11\t8\t16\t1\ttrue\ttrue", 1, true), out)
    assert.truthy(out:find("the observation has shape (3): ", 1, true), out)
    assert.truthy(out:find("takes uint8 cell codes of shape (n, 11, 11), (11, 11) or (n, 121)", 1, true), out)
    support.rm_rf(dir)
  end)

  it("agrees with the ONNX export under onnxruntime and with docs/export.md's numpy forward pass", function()
    local missing = support.venv_lacks("onnxruntime, numpy, safetensors")
    if missing then return pending(missing) end
    local dir = support.tmpdir()
    local rc, out = sh(dir, string.format("%q export %q --format onnx --out p.onnx && %q act %q %q --out o", BIN,
      REF .. "/policy.mrck", BIN, REF .. "/policy.mrck", REF .. "/obs.npy"))
    assert.are.equal(0, rc, out)
    local doc = assert(support.read_file(ROOT .. "/docs/export.md"))
    local snippet = assert(doc:match("```python\n(.-)```"), "docs/export.md has no python block")
    snippet = snippet:gsub("x = np%.zeros[^\n]*", "x = X", 1):gsub("policy%.safetensors", REF .. "/policy.safetensors")
    support.write_file(dir .. "/snippet.py", snippet)
    support.write_file(dir .. "/check.py", string.format([[
import json, numpy as np, onnxruntime as ort
codes = np.load(%q)
n = codes.shape[0]
X_all = np.stack([(codes == 1), (codes == 2)], -1).astype(np.float32)   # ground_truth: food, poison
act = np.load("o/logits.npy")
shipped = np.load(%q)
logits_onnx, _ = ort.InferenceSession("p.onnx").run(None, {"observation": X_all, "extra": np.zeros((n, 2), np.float32),
                                                             "truth": X_all.reshape(n, -1)})
doc = []
for k in range(n):
    X = X_all[k]
    exec(open("snippet.py").read())
    doc.append(logits)
rel = lambda a, b: float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
print(json.dumps({"onnx": rel(logits_onnx, act), "doc": rel(np.array(doc), act), "shipped": rel(shipped, act),
                  "shape": list(act.shape), "dtype": str(act.dtype)}))
]], REF .. "/obs.npy", REF .. "/logits.npy"))
    rc, out = sh(dir, string.format("env -u PYTHONPATH %q check.py", support.VENV_PY))
    assert.are.equal(0, rc, out)
    local r = assert(json.decode(out:match("(%b{})")), out)
    assert.are.same({ 16, 8 }, r.shape)   -- numpy reads the files moonrl act writes
    assert.are.equal("float32", r.dtype)
    assert.truthy(r.onnx < 1e-5, "onnxruntime against moonrl act: " .. out)
    assert.truthy(r.doc < 1e-4, "docs/export.md's forward against moonrl act: " .. out)
    assert.truthy(r.shipped < 1e-5, out)
    support.rm_rf(dir)
  end)

  it("on the MLP (cartpole; pendulum's box with tanh; dials' multi-discrete): ONNX under onnxruntime gives " ..
    "what moonrl act gives", function()
    local missing = support.venv_lacks("onnx, onnxruntime, numpy")
    if missing then return pending(missing) end
    local dir = support.tmpdir()
    support.write_file(dir .. "/check.py", [[
import json, sys, numpy as np, onnx, onnxruntime as ort
env, D = sys.argv[1], int(sys.argv[2])
m = onnx.load(env + ".onnx")
onnx.checker.check_model(m, full_check=True)
sess = ort.InferenceSession(env + ".onnx")
obs = np.load(env + "_obs.npy")
feeds = {"observation": obs}
for i in sess.get_inputs():
    if i.name == "extra": feeds["extra"] = np.zeros((obs.shape[0], i.shape[1]), np.float32)
lo, vo = sess.run(None, feeds)
la, va = np.load(env + "_out/logits.npy"), np.load(env + "_out/value.npy")
rel = lambda a, b: float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
print(json.dumps({"logits": rel(lo, la), "value": rel(vo[:, 0], va), "shape": list(lo.shape)}))
]])
    for _, c in ipairs({ { "cartpole", 4, "", 2 }, { "pendulum", 3, " --set policy.box_squash=tanh", 2 },
                         { "dials", 4, "", 6 } }) do
      local env, D = c[1], c[2]
      local bytes = {}
      for k = 1, 16 * D do bytes[k] = math.sin(k * 0.37) * 2 end
      support.write_file(dir .. "/" .. env .. "_obs.npy", npy.encode("f4", { 16, D },
        require("ffi").string(require("ffi").new("float[?]", 16 * D, bytes), 4 * 16 * D)))
      local rc, out = sh(dir, string.format("%q train %s --set total_steps=2048 --set log.console=false --dir %s " ..
        "--no-eval%s && %q export %s --format onnx --out %s.onnx && %q act %s %s_obs.npy --out %s_out && " ..
        "env -u PYTHONPATH %q check.py %s %d", BIN, env, env, c[3], BIN, env, env, BIN, env, env, env,
        support.VENV_PY, env, D))
      assert.are.equal(0, rc, out)
      local r = assert(json.decode(out:match('({"logits".-})') or ""), out)
      assert.are.same({ 16, c[4] }, r.shape, env)
      assert.truthy(r.logits < 1e-5 and r.value < 1e-5, env .. ": " .. out)
    end
    support.rm_rf(dir)
  end)

  it("on a float image (catch): ONNX under onnxruntime and the numpy forward of docs/export.md give what " ..
    "moonrl act gives", function()
    local missing = support.venv_lacks("onnx, onnxruntime, numpy, safetensors")
    if missing then return pending(missing) end
    local dir = support.tmpdir()
    support.write_file(dir .. "/check.py", [==[
import json, numpy as np, onnx, onnxruntime as ort
from safetensors import safe_open
m = onnx.load("catch.onnx")
onnx.checker.check_model(m, full_check=True)
sess = ort.InferenceSession("catch.onnx")
assert [i.name for i in sess.get_inputs()] == ["observation"], [i.name for i in sess.get_inputs()]
obs = np.load("obs.npy")
lo, vo = sess.run(None, {"observation": obs})
la, va = np.load("out/logits.npy"), np.load("out/value.npy")
# docs/export.md: the image read channels last, the convs, fc, the actor; the critic over
# features ++ extra (0: catch declares none) ++ the image channels last
with safe_open("catch.safetensors", framework="numpy") as f:
    net = json.loads(f.metadata()["moonrl.network"])
    w = {k: f.get_tensor(k).astype(np.float64) for k in f.keys()}
ln, vn = [], []
for img in obs.astype(np.float64):
    x = img.transpose(1, 2, 0)
    for l in range(len(net["conv_channels"])):
        W, b = w[f"conv{l}.w"], w[f"conv{l}.b"]
        p = np.pad(x, ((1, 1), (1, 1), (0, 0)))
        x = np.maximum(0, b + sum(np.einsum("rci,oi->rco", p[ky:ky + x.shape[0], kx:kx + x.shape[1]], W[:, ky, kx])
                                  for ky in range(3) for kx in range(3)))
    feat = np.maximum(0, w["fc.w"] @ x.reshape(-1) + w["fc.b"])
    ln.append(w["actor.w"] @ feat + w["actor.b"])
    cin = np.concatenate([feat, [0.0, 0.0], img.transpose(1, 2, 0).reshape(-1)])
    h = np.maximum(0, w["critic.w"] @ cin + w["critic.b"])
    vn.append(net["value_mean"] + net["value_std"] * (w["value.w"] @ h + w["value.b"])[0])
rel = lambda a, b: float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
print(json.dumps({"onnx_logits": rel(lo, la), "onnx_value": rel(vo[:, 0], va), "np_logits": rel(np.array(ln), la),
                  "np_value": rel(np.array(vn), va), "shape": list(lo.shape)}))
]==])
    -- 16 images of 2 x 8 x 8: a ball (1.0), where it was (0.5), a paddle in the bottom row, and grey noise
    local vals = {}
    for i = 0, 16 * 128 - 1 do
      local c, cell = math.floor(i / 64) % 2, i % 64
      local n = math.floor(i / 128)
      vals[i + 1] = (c == 0 and cell == (n * 5) % 56 and 1) or (c == 0 and cell == (n * 5) % 56 + 8 and 0.5) or
        (c == 1 and cell == 56 + n % 8 and 1) or (math.sin(i * 0.71) > 0.9 and 0.25) or 0
    end
    local ffi = require("ffi")
    support.write_file(dir .. "/obs.npy", npy.encode("f4", { 16, 2, 8, 8 },
      ffi.string(ffi.new("float[?]", 16 * 128, vals), 4 * 16 * 128)))
    local rc, out = sh(dir, string.format("%q train catch --set total_steps=4096 --set log.console=false --dir run " ..
      "--no-eval && %q export run --format onnx --out catch.onnx && %q export run --out catch.safetensors && " ..
      "%q act run obs.npy --out out && env -u PYTHONPATH %q check.py", BIN, BIN, BIN, BIN, support.VENV_PY))
    assert.are.equal(0, rc, out)
    local r = assert(json.decode(out:match('({"onnx_logits".-})') or ""), out)
    assert.are.same({ 16, 3 }, r.shape)
    assert.truthy(r.onnx_logits < 1e-5 and r.onnx_value < 1e-5, out)
    assert.truthy(r.np_logits < 1e-5 and r.np_value < 1e-5, out)
    -- an image of another shape is refused, naming what fits
    support.write_file(dir .. "/wrong.npy", npy.encode("f4", { 1, 3, 8, 8 }, string.rep("\0", 4 * 192)))
    rc, out = sh(dir, string.format("%q act run wrong.npy", BIN))
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("takes float32 images of shape (n, 2, 8, 8), (2, 8, 8) or (n, 128), channels first", 1,
      true), out)
    support.rm_rf(dir)
  end)

  it("refuses observations of another shape or kind, and files that are not .npy, naming what fits", function()
    local dir = support.tmpdir()
    support.write_file(dir .. "/small.npy", npy.encode("u1", { 2, 7, 7 }, string.rep("\0", 98)))
    support.write_file(dir .. "/floats.npy", npy.encode("f4", { 1, 11, 11 }, string.rep("\0", 4 * 121)))
    support.write_file(dir .. "/text.npy", "not numpy\n")
    local ck = REF .. "/policy.mrck"
    local cases = {
      { "small.npy", "takes uint8 cell codes of shape (n, 11, 11), (11, 11) or (n, 121)" },
      { "floats.npy", "holds floats: foraging's observations are cell codes" },
      { "text.npy", "is not a .npy file" },
      { "missing.npy", "cannot open" },
    }
    for _, c in ipairs(cases) do
      local rc, out = sh(dir, string.format("%q act %q %s", BIN, ck, c[1]))
      assert.are.equal(2, rc, out)
      assert.truthy(out:find(c[2], 1, true), out)
    end
    local rc, out = sh(dir, string.format("%q act %q", BIN, ck))
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("moonrl act CHECKPOINT|RUN_DIR OBS.npy", 1, true), out)
    rc, out = sh(dir, string.format("%q act small.npy small.npy", BIN))
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("is not a moonrl checkpoint", 1, true), out)
    -- --out keeps what is there
    rc, out = sh(dir, string.format("%q act %q %q --out o && %q act %q %q --out o", BIN, ck, REF .. "/obs.npy",
      BIN, ck, REF .. "/obs.npy"))
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("o/logits.npy exists: kept", 1, true), out)
    support.rm_rf(dir)
  end)
end)

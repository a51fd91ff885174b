-- cuda.conv = "auto" / "cudnn" (lua/moonrl/run/conv_algorithms.lua's
-- resolve_cuda): the cache of the GPU's per-layer choice, without a GPU.
-- The timing is a stand-in (opts.time: made-up milliseconds, counted) and
-- the machine's key is given (opts.machine), so what is checked is the cache
-- itself: a search writes it, a second resolve reads it without timing, the
-- choice and cuDNN's algorithms reach the engine's config (c.cuda.conv_layers),
-- a damaged file is named in a note and replaced by the next search (or
-- ignored without one), "cudnn" takes cached algorithms and never searches,
-- "im2col" touches nothing. The real timing (mr_cuda_conv_time) is
-- test_cuda_conv_cudnn's GPU half. Runs in the moonrl binary (the engine's FFI).

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end
local ROOT = os.getenv("PWD") or "."

local PRELUDE = [[
local engine = require("moonrl.engine")
local ca = require("moonrl.run.conv_algorithms")
local json = require("moonrl.formats.json")
local C, ffi = engine.C, engine.ffi
local PATH = "cache/cuda_conv_algorithms.json"
local calls = 0
-- made-up timings: cuDNN faster where C < OC, im2col otherwise
local function time(l, H, W, cin, cout, chunk, precision, reps)
  calls = calls + 1
  assert(H == 11 and W == 11 and reps == ca.REPS, "shape")
  return { ms_im2col = 2.0, ms_cudnn = cin < cout and 1.0 or 3.0, algo = { 1, 0, 1 + l }, note = "" }
end
local function config(conv)
  local c = ffi.new("mr_config")
  C.mr_config_default(c)
  c.policy.num_conv = 4
  for i, ch in ipairs({ 8, 16, 32, 16 }) do c.policy.conv_channels[i - 1] = ch end
  c.env.view_range = 5
  c.cuda.conv = C["MR_CUDA_CONV_" .. conv:upper()]
  return c
end
local function resolve(conv, search, c)
  c = c or config(conv)
  calls = 0
  local notes = ca.resolve_cuda({ cuda = { conv = conv } }, c, search,
    { time = time, machine = "Test GPU|sm_90|cuDNN 91900", path = PATH })
  local out = {}
  for l = 1, 3 do
    local e = c.cuda.conv_layers[l]
    out[l] = string.format("%d:%d/%d/%d", e.impl, e.algo[0], e.algo[1], e.algo[2])
  end
  print("calls=" .. calls)
  print("layers=" .. table.concat(out, " "))
  for _, n in ipairs(notes) do print("note=" .. n) end
  return c
end
]]

local function run(dir, body)
  support.write_file(dir .. "/s.lua", PRELUDE .. body)
  os.execute(string.format("cd %q && MOONRL_LUA_PATH=%q timeout 120 %q run s.lua >out 2>err; echo $? >rc", dir,
    ROOT, BIN))
  local out = support.read_file(dir .. "/out") or ""
  assert.are.equal(0, tonumber(support.read_file(dir .. "/rc")), out .. (support.read_file(dir .. "/err") or ""))
  return out
end

describe("cuda.conv's algorithm cache", function()
  if not have_bin then
    it("needs the binary", function() pending("no binary at " .. BIN .. " (build it: make build)") end)
    return
  end
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() if dir then support.rm_rf(dir) end end)

  local CUDNN, IM2COL = 1, 2   -- mr_cuda_conv (moonrl.h)
  local SEARCHED = string.format("%d:1/0/2 %d:1/0/3 %d:-1/-1/-1", CUDNN, CUDNN, IM2COL)

  it("searches, writes, then reads without timing; the choice reaches the engine", function()
    local out = run(dir, [[
resolve("auto", true)
print("--")
resolve("auto", true)
print("--")
resolve("auto", false)
local t = json.decode(io.open(PATH):read("*a"))
print("format=" .. t.format)
local n = 0
for k, e in pairs(t.entries) do
  n = n + 1
  print("entry=" .. k:match("^[^|]+") .. " " .. e.choice .. " " .. (e.algo and table.concat(e.algo, ",") or "-") ..
    " " .. e.ms.im2col .. " " .. e.ms.cudnn .. (k:find("|Test GPU|sm_90|cuDNN 91900|11x11|", 1, true) and " keyed" or ""))
end
print("entries=" .. n)
]])
    local parts = {}
    for p in (out .. "--\n"):gmatch("(.-)%-%-\n") do parts[#parts + 1] = p end
    assert.truthy(parts[1]:find("calls=3\n", 1, true), out)   -- three shapes: 8->16, 16->32, 32->16
    assert.truthy(parts[1]:find("layers=" .. SEARCHED, 1, true), out)
    assert.truthy(parts[1]:find("wrote the choice to cache/cuda_conv_algorithms.json", 1, true), out)
    assert.truthy(parts[2]:find("calls=0\n", 1, true), out)
    assert.truthy(parts[2]:find("layers=" .. SEARCHED, 1, true), out)
    assert.truthy(parts[2]:find("from the cache", 1, true), out)
    assert.is_nil(parts[2]:find("wrote", 1, true), out)
    assert.truthy(parts[3]:find("calls=0\n", 1, true), out)
    assert.truthy(parts[3]:find("layers=" .. SEARCHED, 1, true), out)
    assert.truthy(out:find("format=moonrl cuda conv algorithms 1", 1, true), out)
    assert.truthy(out:find("entries=3", 1, true), out)
    assert.truthy(out:find("entry=16->32 cudnn 1,0,3 2 1 keyed", 1, true), out)
    assert.truthy(out:find("entry=32->16 im2col - 2 3 keyed", 1, true), out)
  end)

  it("names a damaged cache, replaces it with a search, ignores it without one", function()
    for _, bad in ipairs({
      "not json",
      '{"format": "moonrl cuda conv algorithms 0", "entries": {}}',
      '{"format": "moonrl cuda conv algorithms 1"}',
      '{"format": "moonrl cuda conv algorithms 1", "entries": {"k": {"choice": "winograd"}}}',
      '{"format": "moonrl cuda conv algorithms 1", "entries": {"k": {"choice": "cudnn", "algo": [1, -1, 2]}}}',
      '{"format": "moonrl cuda conv algorithms 1", "entries": {"k": {"choice": "cudnn"}}}',
    }) do
      support.write_file(dir .. "/bad.json", bad)
      local out = run(dir, [[
os.execute("mkdir -p cache && cp bad.json " .. PATH)
resolve("auto", false)
print("--")
resolve("auto", true)
print("--")
resolve("auto", false)
]])
      local parts = {}
      for p in (out .. "--\n"):gmatch("(.-)%-%-\n") do parts[#parts + 1] = p end
      assert.truthy(parts[1]:find("note=the CUDA conv algorithm cache cache/cuda_conv_algorithms.json is damaged",
        1, true), bad .. "\n" .. out)
      assert.truthy(parts[1]:find(": ignored; im2col where it has no answer", 1, true), out)
      assert.truthy(parts[1]:find("calls=0\nlayers=2:-1/-1/-1 2:-1/-1/-1 2:-1/-1/-1", 1, true), out)
      assert.truthy(parts[2]:find("searching again and rewriting it", 1, true), out)
      assert.truthy(parts[2]:find("calls=3\nlayers=" .. SEARCHED, 1, true), out)
      assert.is_nil(parts[3]:find("damaged", 1, true), out)
      assert.truthy(parts[3]:find("calls=0\nlayers=" .. SEARCHED, 1, true), out)
    end
  end)

  it("cudnn takes the cached algorithms and never searches; im2col touches nothing", function()
    local out = run(dir, [[
resolve("cudnn", true)
print("--")
resolve("auto", true)
print("--")
resolve("cudnn", true)
print("--")
resolve("im2col", true)
]])
    local parts = {}
    for p in (out .. "--\n"):gmatch("(.-)%-%-\n") do parts[#parts + 1] = p end
    -- no cache yet: every layer cuDNN with its heuristics (-1), nothing timed
    assert.truthy(parts[1]:find("calls=0\nlayers=1:-1/-1/-1 1:-1/-1/-1 1:-1/-1/-1", 1, true), out)
    assert.truthy(parts[1]:find("not in the cache: cuDNN's heuristics", 1, true), out)
    assert.truthy(parts[2]:find("calls=3\n", 1, true), out)
    -- the cached cuDNN algorithms where the search chose cuDNN, the heuristics where it chose im2col
    assert.truthy(parts[3]:find("calls=0\nlayers=1:1/0/2 1:1/0/3 1:-1/-1/-1", 1, true), out)
    assert.truthy(parts[3]:find("the cached choice is im2col: cuDNN's heuristics", 1, true), out)
    assert.truthy(parts[4]:find("calls=0\nlayers=0:0/0/0 0:0/0/0 0:0/0/0", 1, true), out)
  end)
end)

-- `moonrl bench --compare` as a user runs it: its options and their
-- refusals, the reference process really running on the malloc asked for
-- (bench/reference/launch.py re-executes it; the reference reports what is
-- mapped into it and its allocator variables), and the precision of each side
-- (moonrl's cpu engine refusing bf16, on a CPU without it, is said on the row). The
-- cases that run the reference are pending without PyTorch.

local support = require("support")
local json = require("moonrl.formats.json")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

-- Runs the binary with a clean allocator environment; returns exit code, stdout, stderr.
-- env: "VAR=value ..." added to that environment.
local function moonrl(args, dir, env)
  local out, err, rc = dir .. "/stdout", dir .. "/stderr", dir .. "/rc"
  os.execute(string.format("cd %q && env -u LD_PRELOAD -u MALLOC_MMAP_MAX_ -u MALLOC_TRIM_THRESHOLD_ " ..
    "-u MALLOC_TOP_PAD_ -u MALLOC_CONF -u MOONRL_REF_ALLOCATOR %s timeout 300 %q %s >%q 2>%q; echo $? >%q",
    dir, env or "", BIN, args, out, err, rc))
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

-- the reference's python (build/venv-bench's, else the system's), or nil and why not
local bench_py, no_torch = support.bench_python()

local function installed(soname)
  local ok = os.execute("ldconfig -p | grep -q " .. soname)
  return ok == 0 or ok == true
end

local function rows(out)
  local t = {}
  for line in out:gmatch("[^\n]+") do
    if line:match("^{") then t[#t + 1] = json.decode(line) end
  end
  return t
end

describe("moonrl bench --compare", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() if dir then support.rm_rf(dir) end end)

  it("refuses bad options with a message naming what is accepted", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local cases = {
      { "--compare --precision fp8", 2, "--precision = fp8: accepted fp32, bf16, fp16" },
      { "--compare --precision", 2, "--precision needs a value" },
      { "--compare --ref-allocator mimalloc", 2,
        "--ref-allocator = mimalloc: accepted auto, tcmalloc, jemalloc, glibc-tuned, system" },
      { "--compare --rows small,gpu", 2, "--rows: 'gpu': accepted env, small, ref" },
      { "--compare --rows ,", 2, "--rows needs at least one of env, small, ref" },
      { "--compare --ref-layout nhwc", 2, "--ref-layout = nhwc: accepted nchw, channels_last, mixed" },
      { "--compare --device cpu --precision fp16", 1, "needs CUDA; accepted on a cpu: fp32, bf16" },
      { "--compare --compile --no-compile", 2, "--compile and --no-compile: choose one" },
    }
    -- As this machine is, and as a machine without PyTorch is (the options are
    -- checked before the reference is looked for).
    for _, env in ipairs({ "", support.without_optional_env() }) do
      for _, c in ipairs(cases) do
        local rc, out, err = moonrl("bench " .. c[1], dir, env)
        assert.are.equal(c[2], rc, env .. " " .. c[1] .. ": " .. out .. err)
        assert.truthy(err:find(c[3], 1, true), env .. " " .. c[1] .. ": " .. err)
        assert.falsy(err:find("traceback", 1, true), err)
      end
    end
  end)

  it("says it needs PyTorch, and how to install it, where PyTorch cannot be imported", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out, err = moonrl("bench --compare --rows env", dir, support.without_optional_env())
    assert.are.equal(1, rc, out .. err)
    assert.truthy(err:find("--compare needs PyTorch for the reference: `make bench` installs it (build/venv-bench, " ..
      "requirements-bench.txt)", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
  end)

  it("starts the reference on the malloc asked for, which the reference process reports", function()
    if not have_bin then return pending("no binary at " .. BIN) end
    if not bench_py then return pending(no_torch) end
    local function setup(alloc)
      local rc, out, err = moonrl("bench --compare --rows env --envs 64 --reps 1 --json --device cpu" ..
        (alloc and " --ref-allocator " .. alloc or ""), dir)
      assert.are.equal(0, rc, out .. err)
      local r = rows(out)[1]
      assert.truthy(r.commands.reference:find("--allocator " .. (alloc or "auto"), 1, true), r.commands.reference)
      return r.reference_setup.allocator
    end
    local a = setup("glibc-tuned")
    assert.are.equal("glibc-tuned", a.name)
    assert.are.same({ MALLOC_MMAP_MAX_ = "0", MALLOC_TRIM_THRESHOLD_ = tostring(2 ^ 40),
                      MALLOC_TOP_PAD_ = tostring(256 * 2 ^ 20) }, a.env)
    assert.are.equal(json.null, a.loaded)
    a = setup("system")
    assert.are.equal("system", a.name)
    assert.is_nil(next(a.env or {}))
    assert.are.equal(json.null, a.loaded)
    if not installed("libtcmalloc_minimal.so.4") then
      return pending("libtcmalloc-minimal4 is not installed (make bench-deps installs it)")
    end
    a = setup(nil)   -- the default
    assert.are.equal("tcmalloc", a.name)
    assert.are.equal("libtcmalloc_minimal.so.4", a.env.LD_PRELOAD)
    assert.truthy(tostring(a.loaded):match("^libtcmalloc_minimal%.so%.4"), tostring(a.loaded))
    if installed("libjemalloc.so.2") then
      a = setup("jemalloc")
      assert.are.equal("libjemalloc.so.2", a.loaded)
    end
  end)

  it("asks both sides for bf16 and marks the row when moonrl's engine runs fp32 instead", function()
    if not have_bin then return pending("no binary at " .. BIN) end
    if not bench_py then return pending(no_torch) end
    local args = "bench --compare --rows small --envs 8 --rollout 8 --reps 1 --device cpu --precision bf16"
    local rc, out, err = moonrl(args .. " --json", dir)
    assert.are.equal(0, rc, out .. err)
    local r = rows(out)[1]
    assert.are.equal("bf16", r.precision.reference)
    assert.truthy(r.commands.reference:find("--precision bf16", 1, true), r.commands.reference)
    assert.is_true(r.moonrl.median > 0 and r.reference.median > 0, out)
    -- the versions, and the compiled column where the peer's torch has torch.compile: the ratio is
    -- against the faster of eager and compiled
    assert.truthy(r.versions.torch:match("^%d+%.%d+"), out)
    assert.truthy(r.versions.python:match("^3%.%d+%.%d+$"), out)
    assert.are.equal(r.versions.compile_available, r.versions.compile, out)
    assert.is_true(r.reference_eager.median > 0, out)
    if r.versions.compile then
      assert.truthy(r.commands.reference_compiled:find("--compile", 1, true), r.commands.reference_compiled)
      assert.falsy(r.commands.reference:find("--compile", 1, true), r.commands.reference)
      assert.is_true(r.reference_compiled.median > 0, out)
      assert.are.equal(r.reference_compiled.median > r.reference_eager.median and "compiled" or "eager",
        r.reference_best)
      assert.is_true(math.abs(r.ratio_compiled - r.moonrl.median / r.reference_compiled.median) < 1e-9, out)
    else
      assert.are.equal("eager", r.reference_best)
      assert.is_nil(r.reference_compiled)
    end
    assert.are.equal(r.reference_best == "compiled" and r.reference_compiled.median or r.reference_eager.median,
      r.reference.median)
    assert.is_true(math.abs(r.ratio - r.moonrl.median / r.reference.median) < 1e-9, out)
    if r.moonrl_refused then
      assert.are.equal("fp32", r.precision.moonrl)
      assert.truthy(r.moonrl_refused:find("bf16", 1, true), r.moonrl_refused)
      assert.truthy(r.commands.moonrl:find("--precision fp32", 1, true), r.commands.moonrl)
    else
      assert.are.equal("bf16", r.precision.moonrl)
      assert.truthy(r.commands.moonrl:find("--precision bf16", 1, true), r.commands.moonrl)
    end
    -- the arithmetic: the small net (conv 2->16->32 on 11 x 11, fc 3872->128, actor 128->8, critic
    -- (128 + 2 + 242)->128->1) is 1,136,800 multiply-adds forward; an agent-step costs the rollout's
    -- forward and 4 epochs of forward + backward, less the first conv's input gradient (34,848 MACs)
    local k = r.work
    assert.are.equal(2 * 1136800 + 4 * 2 * (3 * 1136800 - 34848), k.flops_per_agent_step)
    assert.is_true(math.abs(k.moonrl_gflops - r.moonrl.median * k.flops_per_agent_step / 1e9) < 1e-6)
    assert.is_true(math.abs(k.reference_gflops - r.reference.median * k.flops_per_agent_step / 1e9) < 1e-6)
    if k.reference_peak_gflops then   -- a CPU with the instructions: the ceiling follows from the peak
      assert.is_true(math.abs(k.ceiling_ratio - k.reference_peak_gflops / k.reference_gflops) < 1e-9)
      assert.is_true(k.reference_fraction_of_peak > 0 and k.reference_fraction_of_peak < 1.2, out)
    end
    rc, out, err = moonrl(args, dir)
    assert.are.equal(0, rc, out .. err)
    if k.reference_peak_gflops and k.moonrl_peak_gflops then
      assert.truthy(out:find("train small  29.3 MFLOP per agent-step: moonrl ", 1, true), out)
      assert.truthy(out:find("ceiling          this CPU's peak / pytorch's GFLOP/s", 1, true), out)
    end
    -- a training row: the reference's setup line names oneDNN and the layout, and the versions
    assert.truthy(out:find("convolutions in oneDNN (torch.backends.mkldnn on), layout nchw", 1, true), out)
    assert.truthy(out:find("  pytorch    torch " .. r.versions.torch .. " (python " .. r.versions.python, 1, true), out)
    local line = out:match("\n(train small, 8 x 8[^\n]*)")
    if r.versions.compile then
      assert.truthy(out:find("  compile    training rows: the reference eager and with torch.compile", 1, true), out)
      assert.truthy(line:match("x (%a+)%s"), line)
    else
      assert.truthy(out:find("  compile    not measured: torch ", 1, true), out)
      assert.truthy(line:find(" - ", 1, true), line)
    end
    if r.moonrl_refused then
      assert.truthy(out:find("moonrl ran fp32: its engine refused bf16", 1, true), out)
      assert.truthy(out:find("train small, 8 x 8 *", 1, true), out)
      assert.truthy(out:find("unequal precisions: moonrl fp32 against pytorch bf16", 1, true), out)
    else
      assert.truthy(out:find("  precision  bf16 on both sides", 1, true), out)
    end
  end)

  it("prints a table a newcomer can read: setup on top, one row per case, what each column means", function()
    if not have_bin then return pending("no binary at " .. BIN) end
    if not bench_py then return pending(no_torch) end
    local rc, out, err = moonrl("bench --compare --rows env --envs 64 --reps 2 --device cpu", dir)
    assert.are.equal(0, rc, out .. err)
    for _, want in ipairs({ "  machine    ", "  precision  fp32 on both sides", " (python 3.",
                            "  pytorch    torch ", "malloc ", "  method     2 repetitions per side",
                            "ratio            moonrl's median / pytorch's median", "per pair   ",
                            "peak memory      each process's resident-set high-water mark" }) do
      assert.truthy(out:find(want, 1, true), want .. " missing from:\n" .. out)
    end
    assert.truthy(out:match("\n  threads    %d+ on both sides\n"), out)
    local line = out:match("\n(env, 64 envs[^\n]*)")
    assert.truthy(line, out)
    -- moonrl, pytorch eager, no compiled column (the env row runs eager), ratio, the setting it is
    -- against, two per-pair ratios, both peaks
    local ratio, vs, p1, p2, m1, m2 = line:match(" %- +(%d+%.%d%d)x (%a+)%s+(%d+%.%d%d) (%d+%.%d%d)%s+(%d+) MiB / (%d+) MiB")
    assert.truthy(ratio, line)
    assert.are.equal("eager", vs)
    assert.is_true(tonumber(m1) > 0 and tonumber(m2) > 0, line)
    local lo, hi = math.min(tonumber(p1), tonumber(p2)), math.max(tonumber(p1), tonumber(p2))
    -- the ratio of the medians lies between the pairs' ratios (rounding aside)
    assert.is_true(tonumber(ratio) >= lo * 0.9 and tonumber(ratio) <= hi * 1.1, line)
  end)

  it("ends with the rows it measured in the shape of BENCHMARKS.md's 'Where moonrl stands' tables", function()
    if not have_bin then return pending("no binary at " .. BIN) end
    -- rows as compare.row returns them (no PyTorch needed to check the shape)
    support.write_file(dir .. "/standing.lua", [[
local compare = require("moonrl.bench.compare")
local o = { device = "cpu", reps = 5, threads = 2, cpu_conv = "auto" }
local v = { torch = "2.15.0+cu132", python = "3.11.7" }
print(compare.standing(o, {
  { row = "env", num_envs = 4096, moonrl = { median = 37.45e6 }, reference = { median = 919.1e3 }, ratio = 40.74,
    pair_ratios = { 39.53, 42.11 }, versions = v },
  { row = "train", net = "small", num_envs = 64, rollout = 64, moonrl = { median = 9500 },
    reference_eager = { median = 4200 }, reference_compiled = { median = 3600 }, ratio = 2.29, reference_best = "eager",
    pair_ratios = { 2.13, 2.48 }, moonrl_peak_bytes = 187 * 2^20, reference_peak_bytes = 1029 * 2^20,
    precision = { moonrl = "fp32", reference = "fp32" }, versions = v },
}, "2026-11-27"))
]])
    local rc, out, err = moonrl("run standing.lua", dir)
    assert.are.equal(0, rc, out .. err)
    local bench_md = assert(support.read_file((os.getenv("PWD") or ".") .. "/BENCHMARKS.md"))
    -- the headers are the tables' own
    for _, header in ipairs({
      "| network, envs x rollout | precision | moonrl | PyTorch eager / compiled | ratio | peak memory moonrl / PyTorch | date | machine | peer | command |",
      "| where | envs | moonrl | PyTorch reference | ratio | date | machine | peer | command |" }) do
      assert.truthy(out:find(header, 1, true), out)
      assert.truthy(bench_md:find(header, 1, true), "BENCHMARKS.md has no table headed " .. header)
    end
    assert.truthy(out:find("| small, 64 x 64 | fp32 | 9.5 k | 4.2 k / 3.6 k | 2.29x eager (pairs 2.13 2.48) | " ..
      "187 MiB / 1029 MiB | 2026-11-27 | ", 1, true), out)
    assert.truthy(out:find(" | torch 2.15.0+cu132 | `moonrl bench --compare --rows small --envs 64 --rollout 64 --reps 5` |",
      1, true), out)
    assert.truthy(out:find("| CPU, 2 threads | 4096 | 37.45 M | 919.1 k | 40.74x eager (pairs 39.53 42.11) | 2026-11-27 | ",
      1, true), out)
    assert.truthy(out:find("`moonrl bench --compare --rows env --envs 4096 --reps 5` |", 1, true), out)
  end)
end)

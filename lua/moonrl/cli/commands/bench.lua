-- `moonrl bench`: its command line and the rows it prints; the
-- measurements are moonrl.bench, the side-by-side comparison
-- moonrl.bench.compare, both loaded only when the command runs (they load
-- the engine).

local cmdline = require("moonrl.cli.cmdline")

local function compare() return require("moonrl.bench.compare") end

local function print_row(r)
  local bench = require("moonrl.bench")
  local fmt_rate = bench.fmt_rate
  local what = r.row == "env" and string.format("env%s, %d envs%s", r.env and r.env ~= "foraging" and " " .. r.env or "",
      r.num_envs, r.actions == "device" and " (device actions)" or "")
    or r.row == "infer" and string.format("infer, net %s, batch %d", r.net, r.batch)
    or string.format("train, net %s, %d envs x %d", r.net, r.num_envs, r.rollout)
  if r.skipped then
    io.write(string.format("%-34s skipped: %s\n", what, r.skipped))
    return
  end
  io.write(string.format("%-34s %12s %-14s (%s .. %s, n=%d)\n", what, fmt_rate(r.rate.median), r.unit,
    fmt_rate(r.rate.min), fmt_rate(r.rate.max), r.rate.n))
  if r.row == "train" then
    local conv = r.cpu_conv and ("; cpu.conv " .. r.cpu_conv ..
      (r.conv_layers and (" (" .. bench.layers_text(r.conv_layers) .. ")") or "")) or
      r.cuda_conv and ("; cuda.conv " .. r.cuda_conv .. "; cuda.epilogue " .. (r.cuda_epilogue or "separate")) or ""
    io.write(string.format("%-34s %s%s; rollout %.4f s (env %.4f, inference %.4f), gae %.4f s, update %.4f s, " ..
      "other %.4f s; planned %.1f MiB, peak %.1f MiB\n", "", r.precision, conv, r.time_rollout, r.time_env,
      r.time_inference, r.time_gae, r.time_update, r.time_idle, r.planned_bytes / 2 ^ 20, r.peak_memory_bytes / 2 ^ 20))
    local rest = r.time_update - r.time_gather - r.time_forward - r.time_loss - r.time_backward - r.time_optimizer
    io.write(string.format("%-34s update: gather %.4f s, forward %.4f, loss %.4f, backward %.4f, optimizer %.4f, " ..
      "rest %.4f\n", "", r.time_gather, r.time_forward, r.time_loss, r.time_backward, r.time_optimizer,
      math.max(0, rest)))
    io.write(string.format("%-34s update at %.2f TFLOP/s%s\n", "", r.update_tflops,
      r.mfu and string.format(" = %.1f%% of %.0f TFLOP/s (--peak-tflops)", 100 * r.mfu, r.peak_tflops or 0) or ""))
  end
end

local USAGE = [[
usage: moonrl bench [env|infer|train|all] [options]
       moonrl bench --compare [options]
       moonrl bench --scaling 16,64,256 [--out file.csv] [options]
  --device cpu|cuda|auto   backend (default auto)
  --net ref|small          network: ref = the reference network of docs/environment.md (default), small = conv 16,32 hidden 128
  --env NAME               the env row's environment (default foraging): any `moonrl envs` lists
  --envs N                 instances (default: env 4096, infer 192, train 192; compare 64)
  --rollout T              rollout steps per update (default 128; compare 64)
  --reps R                 timed repetitions (default 5; compare: 5 fresh-process pairs)
  --threads T              CPU threads, 0 = all (default 0)
  --cpu-conv C             the cpu backend's convolutions (cpu.conv): auto, onednn, im2col, winograd
                           (default auto, each layer's implementation chosen as a run at the default
                           level chooses it: measured once per machine, then cached); --compare runs
                           moonrl's side with it
  --host-actions           the env row on cuda: copy host actions each step (as before) instead of drawing
                           them in the step kernel (mr_env_step_random, the default there)
  --cuda-conv C            the cuda backend's convolutions (cuda.conv): im2col (default), cudnn (cuDNN's
                           heuristics or the cached algorithms), auto (each layer searched once per GPU
                           model, then cached; docs/cuda.md)
  --cuda-epilogue E        the cuda backend's epilogues (cuda.epilogue): separate (default: element-wise
                           kernels after each cuBLAS product), fused (cuBLASLt epilogues; docs/cuda.md)
  --precision P            fp32 (default), bf16, fp16 (cuda only); --compare asks both sides for it
                           (the reference: torch.autocast, fp32 master weights) and says so where
                           moonrl's engine refuses it (bf16 on a cpu without AVX512-BF16 or AMX)
  --compile                --compare: insist on the reference's torch.compile column (an error where its torch has
                           none); measured by default where it has (torch 2.x): eager and compiled, the ratio
                           against the faster
  --no-compile             --compare: the reference eager only
  --ref-allocator A        --compare: the reference's malloc (bench/reference/launch.py): auto (default:
                           tcmalloc if installed, else glibc-tuned), tcmalloc, jemalloc, glibc-tuned, system
  --ref-layout L           --compare: the reference's convolution layout: nchw (default), channels_last,
                           mixed (as before 2026-11-23); bench/reference/README.md has the measurements
  --peak-tflops X          the GPU's measured matrix rate: the train row reports its fraction (MFU)
  --json                   one JSON object per row
  --compare                moonrl against bench/reference (PyTorch), alternating fresh processes
  --rows env,small,ref,cartpole
                           the comparison's rows (default env,small, a few minutes on 2 cores;
                           ref = the reference net, ~40 s an update a side: make bench-full;
                           --net R means --rows R); sizes: env 4096 envs, small 64 x 64, ref 192 x 128
                           (cuda: env 65536 envs, small and ref 192 x 128); cartpole: moonrl's cartpole
                           against Gymnasium's CartPoleVectorEnv and SyncVectorEnv, 4096 envs, on the cpu
]]

-- The options of `moonrl bench`, for cmdline.parse (the CLI's one parser).
local OPTIONS = {
  device = { "value", "cpu|cuda|auto" }, net = { "value", "ref|small" }, env = { "value", "NAME" },
  envs = { "value", "N" },
  rollout = { "value", "T" }, reps = { "value", "R" }, threads = { "value", "T" },
  precision = { "value", "fp32|bf16|fp16" }, compile = { "flag" }, ["no-compile"] = { "flag" }, ["peak-tflops"] = { "value", "X" },
  json = { "flag" }, compare = { "flag" }, scaling = { "value", "N,N,..." }, rows = { "value", "env,small,ref" },
  ["ref-layout"] = { "value", "L" }, ["ref-allocator"] = { "value", "A" }, out = { "value", "file.csv" },
  ["cpu-conv"] = { "value", "C" }, ["cuda-conv"] = { "value", "C" }, ["host-actions"] = { "flag" },
  ["cuda-epilogue"] = { "value", "E" },
}

local function one_of(name, v, accepted)
  for _, n in ipairs(accepted) do if n == v then return v end end
  error("--" .. name .. " = " .. v .. ": accepted " .. table.concat(accepted, ", "), 0)
end

local function int(p, name, lo)
  local v = tonumber(p[name])
  if not v or v % 1 ~= 0 or v < lo then
    error(string.format("--%s = %s: accepted an integer >= %d", name, tostring(p[name]), lo), 0)
  end
  return v
end

-- argv -> options; raises the message of a bad command line.
local function parse_args(args)
  local bench = require("moonrl.bench")
  local p, err = cmdline.parse("bench", args, OPTIONS, 1)
  if not p then error({ usage = err }, 0) end
  local o = { what = "all", device = "auto", net = "ref", reps = nil, threads = 0, json = p.json or false,
              env_steps = 100, infer_samples = 8192, help = p.help, compile = p.compile, compare = p.compare,
              no_compile = p["no-compile"],
              out = p.out }
  if p.out then   -- said before any benchmark runs: a new path or a regular file (replaced)
    local ok, why = require("moonrl.util").check_output(p.out, { replace = true })
    if not ok then error("--out " .. why, 0) end
  end
  if p.positional[1] then
    o.what = p.positional[1]
    if not ({ env = true, infer = true, train = true, all = true })[o.what] then
      error("unknown argument '" .. o.what .. "': accepted env, infer, train, all\n" .. USAGE, 0)
    end
  end
  if p.device then o.device = one_of("device", p.device, { "cpu", "cuda", "auto" }) end
  if p.net then
    o.net, o.net_given = p.net, true
    if not bench.NETS[o.net] then error("--net = " .. o.net .. ": accepted ref, small", 0) end
  end
  if p.env then
    o.env = bench.check_env(p.env)
    if p.compare or p.scaling or o.what == "infer" or o.what == "train" then
      error("--env " .. p.env .. ": only the env row measures other environments (moonrl bench env --env " ..
        p.env .. "); --compare has --rows cartpole", 0)
    end
  end
  if p.envs then o.envs = int(p, "envs", 1) end
  if p.rollout then o.rollout = int(p, "rollout", 1) end
  if p.reps then o.reps = int(p, "reps", 1) end
  if p.threads then o.threads = int(p, "threads", 0) end
  if p.precision then
    o.precision = p.precision
    if not bench.PRECISIONS[o.precision] then error("--precision = " .. o.precision .. ": accepted fp32, bf16, fp16", 0) end
  end
  if p["cpu-conv"] then o.cpu_conv = one_of("cpu-conv", p["cpu-conv"], { "auto", "onednn", "im2col", "winograd" }) end
  if p["host-actions"] then o.host_actions = true end
  if p["cuda-conv"] then o.cuda_conv = one_of("cuda-conv", p["cuda-conv"], { "auto", "cudnn", "im2col" }) end
  if p["cuda-epilogue"] then
    o.cuda_epilogue = one_of("cuda-epilogue", p["cuda-epilogue"], { "separate", "fused" })
  end
  if p["peak-tflops"] then
    o.peak_tflops = tonumber(p["peak-tflops"])
    if not o.peak_tflops or o.peak_tflops <= 0 then
      error("--peak-tflops = " .. p["peak-tflops"] .. ": accepted a positive number", 0)
    end
  end
  if p.scaling then
    o.scaling = {}
    for n in p.scaling:gmatch("[^,]+") do
      local v = tonumber(n)
      if not v or v < 1 then error("--scaling: '" .. n .. "' is not a positive integer", 0) end
      o.scaling[#o.scaling + 1] = v
    end
  end
  if p.rows then
    o.rows = {}
    local rows, accepted = compare().ROWS, table.concat(compare().ROW_ORDER, ", ")
    for r in p.rows:gmatch("[^,]+") do
      if not rows[r] then error("--rows: '" .. r .. "': accepted " .. accepted, 0) end
      o.rows[#o.rows + 1] = r
    end
    if #o.rows == 0 then error("--rows needs at least one of " .. accepted, 0) end
  end
  if o.compile and o.no_compile then error("--compile and --no-compile: choose one", 0) end
  if p["ref-layout"] then
    o.ref_layout = one_of("ref-layout", p["ref-layout"], compare().LAYOUTS)
  end
  if p["ref-allocator"] then
    o.ref_allocator = one_of("ref-allocator", p["ref-allocator"], compare().ALLOCATORS)
  end
  return o
end

local function run(o)
  local engine, json = require("moonrl.engine"), require("moonrl.formats.json")
  local bench = require("moonrl.bench")
  if o.device == "auto" then o.device = engine.cuda_device_count() > 0 and "cuda" or "cpu" end
  -- the default level's warm-up has "algorithms": a default run's convolutions are auto's choice, so the bench's are
  if not o.cpu_conv and o.device ~= "cuda" then o.cpu_conv = "auto" end
  if o.compare then
    o.reps = o.reps or 5
    compare().run(o)
    return 0
  end
  o.rollout, o.reps = o.rollout or 128, o.reps or 5
  if o.scaling then bench.scaling(o) return 0 end
  local rows = {}
  if o.what == "env" or o.what == "all" then
    local oo = setmetatable({ envs = o.envs or 4096 }, { __index = o })
    rows[#rows + 1] = bench.env(oo)
  end
  if o.what == "infer" or o.what == "all" then
    local oo = setmetatable({ envs = o.envs or 192 }, { __index = o })
    rows[#rows + 1] = bench.infer(oo)
  end
  if o.what == "train" or o.what == "all" then
    local oo = setmetatable({ envs = o.envs or 192 }, { __index = o })
    rows[#rows + 1] = bench.train(oo)
  end
  for _, r in ipairs(rows) do
    if o.json then print(json.encode(r)) else print_row(r) end
  end
  return 0
end

local function main(args)
  local ok, o = pcall(parse_args, args)
  if not ok then
    if type(o) == "table" then io.stderr:write(o.usage, "\n") return 2 end   -- cmdline.parse's own message
    io.stderr:write("moonrl bench: ", tostring(o), "\n")
    return 2
  end
  if o.help then io.write(USAGE) return 0 end
  -- A refusal (no GPU, a bad size) is a message; a bug keeps its traceback.
  local ok2, rc = xpcall(run, function(e)
    if type(e) == "string" and not e:match("^[^\n]-%.lua:%d+:") then return e end
    return debug.traceback(tostring(e), 2)
  end, o)
  if not ok2 then
    io.stderr:write("moonrl bench: ", tostring(rc), "\n")
    return 1
  end
  return rc
end

return {
  name = "bench",
  order = 50,
  usage = "bench [env|infer|train] [--compare]",
  summary = "throughput (env --env NAME: any environment); --compare runs the peers side by side",
  help = USAGE,
  run = main,
}

-- moonrl.bench.compare - `moonrl bench --compare`: moonrl and the PyTorch
-- reference (bench/reference) measured side by side on the same machine.
--
-- Each repetition runs moonrl, then the reference, each in a fresh process
-- (alternating, so both see the same machine state), and each reports its
-- own rate and peak memory as one JSON line. The table gives the medians, the
-- ratio of the medians and the ratio of every pair, with the machine, the
-- threads, the precision of each side and the reference's setup (its malloc,
-- oneDNN) on top, so a reader can tell what was compared.
--
-- Both sides run at one precision. Where moonrl's engine refuses the asked
-- precision (bf16 on a CPU without AVX512-BF16 or AMX), moonrl runs fp32 instead and the
-- table says so on the row and below it: the ratio then compares unequal
-- precisions, and is marked.
--
-- The reference's PyTorch is build/venv-bench's (`make bench` installs the
-- pinned PyPI release of requirements-bench.txt there), else the system's
-- python3 with torch (Debian's python3-torch, 1.13: `make bench`'s fallback
-- where PyPI cannot be reached). Where that torch has torch.compile (2.x),
-- every training row measures the reference twice per repetition, eager and
-- compiled (the network and the PPO loss, dynamic=False; the compilation is
-- in the untimed warm-up update), and the ratio compares moonrl with the
-- faster of the two: the peer's best setting. The table and the JSON name
-- the torch and Python versions and whether compile ran.
--
-- The cartpole row (--rows cartpole) compares moonrl's cartpole environment
-- alone (bench/env_alone.lua, on the cpu) with Gymnasium's own CartPole-v1
-- (bench/reference/cartpole_env.py): CartPoleVectorEnv, the dynamics
-- vectorised in NumPy, at the same instances and steps (the ratio), and
-- SyncVectorEnv of gymnasium.make("CartPole-v1") at the same instances and
-- fewer steps (a Python loop over the instances, beside it). Its peer is the
-- first interpreter that imports Gymnasium (build/venv-bench's: make bench
-- installs it; else build/venv's, make test's), not PyTorch.
--
-- What this is not: a statistics package. Three to five alternating pairs on
-- a shared machine give a median and its spread, nothing more.

local json = require("moonrl.formats.json")
local uv = require("luv")

local compare = {}

-- The comparison rows and their default sizes: the environment alone at 4096
-- instances; the small net at 64 x 64 (a CPU-sized batch); the reference net
-- at the reference 192 x 128 (about 40 s an update per side on 2 cores, so
-- only on request: --rows ref, make bench-full). --envs / --rollout override.
-- cartpole: moonrl's cartpole environment alone against Gymnasium's at 4096 instances, 100
-- steps a repetition (SyncVectorEnv: 20 steps, its Python loop steps 60-80 k instances a second).
compare.ROWS = {
  env = { envs = 4096, gpu = { envs = 65536 } },
  small = { envs = 64, rollout = 64, gpu = { envs = 192, rollout = 128 } },
  ref = { envs = 192, rollout = 128 },
  cartpole = { envs = 4096, steps = 100, sync_steps = 20 },
}
compare.ROW_ORDER = { "env", "small", "ref", "cartpole" }
compare.DEFAULT_ROWS = { "env", "small" }
-- bench/reference/launch.py's --allocator choices (auto: tcmalloc if installed, else glibc-tuned)
compare.ALLOCATORS = { "auto", "tcmalloc", "jemalloc", "glibc-tuned", "system" }
-- bench/reference/model.py's layouts for the convolutions' input (nchw: the default, the fastest measured)
compare.LAYOUTS = { "nchw", "channels_last", "mixed" }

local function home() return require("moonrl.core").home() end

-- The interpreters tried for the reference, in order: build/venv-bench's
-- (beside the binary, then in the source tree), then the system's.
function compare.pythons()
  local list = {}
  local exe_dir = (uv.exepath() or ""):match("^(.*)/[^/]*$")
  if exe_dir then list[#list + 1] = exe_dir .. "/venv-bench/bin/python" end
  local ok, h = pcall(home)
  if ok and h then list[#list + 1] = h .. "/build/venv-bench/bin/python" end
  list[#list + 1] = "/usr/bin/python3"
  list[#list + 1] = "python3"
  return list
end

-- The first interpreter that imports torch, and what it has: { path, torch, python, compile }
-- (compile: torch.compile exists); nil where none does. PYTHONPATH is left as it is, so
-- spec/without_optional hides torch from every one of them.
local PROBE = [[import sys, torch; print("moonrl-probe", torch.__version__, "%d.%d.%d" % sys.version_info[:3], ]] ..
  [[int(hasattr(torch, "compile")))]]
function compare.python()
  local seen = {}
  for _, p in ipairs(compare.pythons()) do
    if not seen[p] and (not p:find("/", 1, true) or io.open(p, "rb")) then
      seen[p] = true
      local f = io.popen(string.format("%q -c %q 2>/dev/null", p, PROBE))
      local out = f and f:read("*a") or ""
      if f then f:close() end
      local tv, pv, c = out:match("moonrl%-probe (%S+) (%S+) (%d)")
      if tv then return { path = p, torch = tv, python = pv, compile = c == "1" } end
    end
  end
  return nil
end

-- The first interpreter that imports Gymnasium's CartPoleVectorEnv (the cartpole row's peer):
-- { path, gymnasium, numpy, python }; nil where none does. build/venv-bench's first (make bench
-- installs Gymnasium there), then build/venv's (make test's), then the system's.
local GYM_PROBE = [[import sys, numpy, gymnasium; ]] ..
  [[from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv; ]] ..
  [[print("moonrl-probe", gymnasium.__version__, numpy.__version__, "%d.%d.%d" % sys.version_info[:3])]]
function compare.gym_python()
  local list = compare.pythons()
  local exe_dir = (uv.exepath() or ""):match("^(.*)/[^/]*$")
  local ok, h = pcall(home)
  local venvs = { exe_dir and exe_dir .. "/venv/bin/python" or nil, ok and h and h .. "/build/venv/bin/python" or nil }
  for i = #venvs, 1, -1 do table.insert(list, #list - 1, venvs[i]) end   -- before the system's two
  -- build/venv's packages are make test's, not optional: its python runs without PYTHONPATH (as the
  -- specs run it), so spec/without_optional, which hides what make test does not install, leaves them
  local test_venv = {}
  for _, v in ipairs(venvs) do test_venv[v] = true end
  local seen = {}
  for _, p in ipairs(list) do
    if not seen[p] and (not p:find("/", 1, true) or io.open(p, "rb")) then
      seen[p] = true
      local cmd = (test_venv[p] and "env -u PYTHONPATH " or "") .. string.format("%q", p)
      local f = io.popen(string.format("%s -c %q 2>/dev/null", cmd, GYM_PROBE))
      local out = f and f:read("*a") or ""
      if f then f:close() end
      local gv, nv, pv = out:match("moonrl%-probe (%S+) (%S+) (%S+)")
      if gv then return { path = p, cmd = cmd, gymnasium = gv, numpy = nv, python = pv } end
    end
  end
  return nil
end

-- Runs cmd; returns its last JSON line decoded, or nil and the last line it
-- printed that is not JSON (the refusal or the exception).
local function run_json(cmd)
  local f = io.popen(cmd .. " 2>&1")
  local last, said
  for line in f:lines() do
    if line:match("^%s*{") then last = line
    elseif line:match("%S") then said = line end
  end
  f:close()
  if last then return json.decode(last) end
  return nil, said or "(no output)"
end

local function threads_of(o)
  return o.threads > 0 and o.threads or (uv.available_parallelism and uv.available_parallelism() or 2)
end

-- The precision both sides are asked for: fp32 on a cpu; on a GPU the
-- original's fp16 with dynamic loss scaling, unless --precision says otherwise.
function compare.precision(o)
  return o.precision or (o.device == "cuda" and "fp16" or "fp32")
end

-- The two commands of a row (moonrl's at precision mprec, the reference's at
-- precision rprec, compiled or eager), each printing a JSON line with the row's rate.
function compare.commands(o, row, py, mprec, rprec, compiled)
  local dev = o.device == "cuda" and "cuda" or "cpu"
  local d = compare.ROWS[row]
  if dev == "cuda" and d.gpu then d = setmetatable(d.gpu, { __index = d }) end
  local envs, rollout = o.envs or d.envs, o.rollout or d.rollout
  local alloc = " --allocator " .. (o.ref_allocator or "auto")
  if row == "env" then
    return string.format("%s bench env --json --reps 3 --envs %d --threads %d --device %s",
        uv.exepath(), envs, o.threads, o.device),
      string.format("%s %s/bench/reference/bench_env.py --device %s --num-envs %d --reps 3 --threads %d%s",
        py, home(), dev, envs, threads_of(o), alloc),
      envs, nil
  end
  local n = require("moonrl.bench").NETS[row]
  return string.format("%s bench train --json --reps 1 --net %s --envs %d --rollout %d --threads %d --device %s " ..
      "--precision %s%s", uv.exepath(), row, envs, rollout, o.threads, o.device, mprec,
      o.cpu_conv and (" --cpu-conv " .. o.cpu_conv) or ""),
    string.format("%s %s/bench/reference/train.py --json --device %s --num-envs %d --rollout %d " ..
      "--updates 2 --conv %s --hidden %d --critic-hidden %d --threads %d --precision %s%s%s",
      py, home(), dev, envs, rollout, table.concat(n.conv_channels, ","), n.hidden, n.critic_hidden,
      threads_of(o), rprec, compiled and " --compile" or "",
      alloc .. (o.ref_layout and " --layout " .. o.ref_layout or "")),
    envs, rollout
end

-- The cartpole row's four commands: moonrl's environment alone (on the cpu), Gymnasium's
-- CartPoleVectorEnv and its SyncVectorEnv, and moonrl's cartpole written in Lua
-- (configs/envs/cartpole.lua), each printing a JSON line.
function compare.cartpole_commands(o, py)
  local d = compare.ROWS.cartpole
  local envs = o.envs or d.envs
  local function mine(env)
    return string.format("%s run %s/bench/env_alone.lua --json --env %s --reps 3 --envs %d --steps %d " ..
      "--threads %d --device cpu", uv.exepath(), home(), env, envs, d.steps, o.threads)
  end
  return mine("cartpole"),
    string.format("%s %s/bench/reference/cartpole_env.py --impl vector --num-envs %d --steps %d --reps 3",
      py, home(), envs, d.steps),
    string.format("%s %s/bench/reference/cartpole_env.py --impl sync --num-envs %d --steps %d --reps 3",
      py, home(), envs, d.sync_steps),
    envs, mine("lua:cartpole")
end

-- The cartpole row: R alternating fresh-process repetitions of moonrl, CartPoleVectorEnv and
-- SyncVectorEnv. The ratio is moonrl's over CartPoleVectorEnv's; SyncVectorEnv's is beside it.
function compare.cartpole_row(o, gym)
  local stats = require("moonrl.bench").stats
  local mine, vec, sync, envs, lua = compare.cartpole_commands(o, gym.cmd or gym.path)
  local a, b, c, l, ma, mb, mc, ml = {}, {}, {}, {}, {}, {}, {}, {}
  local r1, r2, r3, r4
  for rep = 1, o.reps do
    local e1, e2, e3, e4
    r1, e1 = run_json(mine)
    if not r1 then error("moonrl: " .. e1 .. "\n  (command: " .. mine .. ")", 0) end
    r4, e4 = run_json(lua)
    if not r4 then error("moonrl (Lua): " .. e4 .. "\n  (command: " .. lua .. ")", 0) end
    l[#l + 1], ml[#ml + 1] = r4.rate.median, r4.peak_memory_bytes
    r2, e2 = run_json(vec)
    if not r2 then error("reference: " .. e2 .. "\n  (command: " .. vec .. ")", 0) end
    r3, e3 = run_json(sync)
    if not r3 then error("reference: " .. e3 .. "\n  (command: " .. sync .. ")", 0) end
    a[#a + 1], ma[#ma + 1] = r1.rate.median, r1.peak_memory_bytes
    b[#b + 1], mb[#mb + 1] = r2.sps_median, r2.peak_memory_bytes
    c[#c + 1], mc[#mc + 1] = r3.sps_median, r3.peak_memory_bytes
    io.stderr:write(string.format("  cartpole rep %d/%d: moonrl %.0f (Lua %.0f), CartPoleVectorEnv %.0f, " ..
      "SyncVectorEnv %.0f agent-steps/s\n", rep, o.reps, a[#a], l[#l], b[#b], c[#c]))
  end
  local sa, sb, sc, sl = stats(a), stats(b), stats(c), stats(l)
  local pairs_, sync_pairs, lua_pairs, lua_c = {}, {}, {}, {}
  for i = 1, #a do
    pairs_[i], sync_pairs[i], lua_pairs[i], lua_c[i] = a[i] / b[i], a[i] / c[i], l[i] / b[i], l[i] / a[i]
  end
  return {
    row = "cartpole", env = "cartpole", num_envs = envs, device = "cpu", threads = threads_of(o),
    steps_per_rep = r1.steps_per_rep, sync_steps_per_rep = r3.steps_per_rep,
    moonrl = sa, reference = sb, reference_sync = sc, ratio = sa.median / sb.median, pair_ratios = pairs_,
    ratio_sync = sa.median / sc.median, sync_pair_ratios = sync_pairs,
    moonrl_lua = sl, ratio_lua = sl.median / sb.median, lua_pair_ratios = lua_pairs,
    lua_over_c = sl.median / sa.median, lua_c_pair_ratios = lua_c, moonrl_lua_peak_bytes = stats(ml).max,
    versions = { gymnasium = gym.gymnasium, numpy = gym.numpy, python = gym.python, python_path = gym.path },
    moonrl_peak_bytes = stats(ma).max, reference_peak_bytes = stats(mb).max, reference_sync_peak_bytes = stats(mc).max,
    commands = { moonrl = mine, reference = vec, reference_sync = sync, moonrl_lua = lua },
  }
end

-- Whether a row measures the reference compiled too: a training row, where the peer's torch has
-- torch.compile, unless --no-compile.
function compare.compiles(o, row, peer)
  return row ~= "env" and peer.compile and not o.no_compile
end

-- One comparison row: R alternating fresh-process repetitions of each side
-- (moonrl, the reference eager, and the reference compiled where it runs).
function compare.row(o, row, peer)
  local stats = require("moonrl.bench").stats
  local py = peer.path
  local prec = row ~= "env" and compare.precision(o) or nil
  local mprec, refused = prec, nil
  local mine, ref, envs, rollout = compare.commands(o, row, py, mprec, prec)
  local with_compile = compare.compiles(o, row, peer)
  local _, refc = compare.commands(o, row, py, mprec, prec, true)
  local a, b, c, ma, mb, mc, r1, r2, r3 = {}, {}, {}, {}, {}, {}, nil, nil, nil
  local compile_error
  for rep = 1, o.reps do
    local e1
    r1, e1 = run_json(mine)
    if not r1 and rep == 1 and prec and prec ~= "fp32" and e1:find("precision", 1, true) then
      -- the engine refused the precision: moonrl runs fp32, and the table says so
      refused, mprec = e1:gsub("^moonrl bench: ", ""):gsub("^trainer: ", ""), "fp32"
      mine = compare.commands(o, row, py, mprec, prec)
      io.stderr:write(string.format("  %s: moonrl refused %s (%s): moonrl runs fp32 against pytorch %s\n",
        row, prec, e1, prec))
      r1, e1 = run_json(mine)
    end
    if not r1 then error("moonrl: " .. e1 .. "\n  (command: " .. mine .. ")", 0) end
    local e2
    r2, e2 = run_json(ref)
    if not r2 then error("reference: " .. e2 .. "\n  (command: " .. ref .. ")", 0) end
    a[#a + 1], ma[#ma + 1] = r1.rate and r1.rate.median or r1.sps_median, r1.peak_memory_bytes
    b[#b + 1], mb[#mb + 1] = r2.sps_median, r2.peak_memory_bytes
    local said = ""
    if with_compile then
      local r, e3 = run_json(refc)
      if r then
        r3, c[#c + 1], mc[#mc + 1] = r, r.sps_median, r.peak_memory_bytes
        said = string.format(", compiled %.0f", c[#c])
      else
        -- torch.compile did not run here: the row goes on eager only, and says why
        if o.compile then error("reference, compiled: " .. e3 .. "\n  (command: " .. refc .. ")", 0) end
        compile_error, with_compile = e3, false
        c, mc = {}, {}
        io.stderr:write(string.format("  %s: the compiled reference failed (%s): eager only\n", row, e3))
      end
    end
    io.stderr:write(string.format("  %s rep %d/%d: moonrl %.0f, pytorch %.0f%s agent-steps/s\n", row, rep, o.reps,
      a[#a], b[#b], said))
  end
  local sa, sb = stats(a), stats(b)
  local sc = with_compile and #c > 0 and stats(c) or nil
  -- the peer's best setting: the faster median of eager and compiled
  local best = sc and sc.median > sb.median and "compiled" or "eager"
  local bv, bm, sbest, rbest = b, mb, sb, r2
  if best == "compiled" then bv, bm, sbest, rbest = c, mc, sc, r3 end
  local pairs_ = {}
  for i = 1, #a do pairs_[i] = a[i] / bv[i] end
  return {
    row = row == "env" and "env" or "train", net = row ~= "env" and row or nil, num_envs = envs,
    rollout = rollout, device = o.device, threads = threads_of(o),
    precision = prec and { moonrl = mprec, reference = rbest.precision or prec } or nil, moonrl_refused = refused,
    moonrl = sa, reference = sbest, ratio = sa.median / sbest.median, pair_ratios = pairs_,
    reference_best = best, reference_eager = sb, reference_compiled = sc,
    ratio_eager = sa.median / sb.median, ratio_compiled = sc and sa.median / sc.median or nil,
    compile_error = compile_error,
    versions = { torch = peer.torch, python = peer.python, python_path = py, compile = sc ~= nil,
                 compile_available = peer.compile },
    moonrl_peak_bytes = ma[1] and stats(ma).max or nil, reference_peak_bytes = bm[1] and stats(bm).max or nil,
    reference_eager_peak_bytes = mb[1] and stats(mb).max or nil,
    reference_compiled_peak_bytes = mc[1] and stats(mc).max or nil,
    describe = r1.describe, openblas_coretype = os.getenv("OPENBLAS_CORETYPE"),
    commands = { moonrl = mine, reference = ref, reference_compiled = sc and refc or nil },
    reference_setup = { torch = r2.torch, python = r2.python, allocator = r2.allocator, mkldnn = r2.mkldnn, cudnn = r2.cudnn,
                        threads = r2.threads, layout = r2.layout,
                        compile_scope = r3 and r3.compile_scope or nil },
    work = row ~= "env" and compare.work(o, row, mprec, prec, sa.median, sbest.median, r1) or nil,
  }
end

-- What a training row's rates mean in arithmetic (cpu only): the model's
-- products per agent-step (the rollout's forward, then 4 epochs of forward
-- and backward: bench.macs_per_agent_step), so rate x work is each side's
-- GFLOP/s counted in the model's FLOPs (moonrl's Winograd path computes
-- fewer, printed beside), and this CPU's measured peak for the precision (mr_cpu_peak_gflops:
-- FMAs for fp32; AMX or AVX512-BF16 dot products for bf16) bounds them both. The
-- ceiling, peak / pytorch's GFLOP/s, is the highest ratio any implementation
-- of the same arithmetic could reach over that pytorch on this machine.
compare.EPOCHS = 4   -- docs/environment.md's, what bench train and bench/reference/train.py both run
function compare.work(o, row, mprec, rprec, moonrl_sps, reference_sps, moonrl_row)
  if o.device == "cuda" then return nil end
  local bench = require("moonrl.bench")
  local net = bench.NETS[row]
  -- what each side computes per agent-step: the model's multiply-adds (pytorch's direct
  -- convolutions), and moonrl's path's (fewer with Winograd: beyond the same-arithmetic ceiling)
  local macs_model = bench.macs_per_agent_step(net, compare.EPOCHS)
  -- (moonrl's row counts what its process ran: with --cpu-conv auto, each layer's choice)
  local layers = moonrl_row and moonrl_row.conv_layers
  local macs_moonrl = moonrl_row and moonrl_row.macs_per_agent_step or
    bench.macs_per_agent_step(net, compare.EPOCHS, o.cpu_conv)
  local per_step = 2 * macs_model   -- the model's FLOPs, both sides' rates are counted in
  local function peak(prec)
    local g, what = require("moonrl.engine").cpu_peak_gflops(prec == "bf16", threads_of(o))
    return g and g > 0 and g or nil, what
  end
  local pm, what = peak(mprec)
  local pr = pm
  if rprec ~= mprec then pr = peak(rprec) end
  local gm, gr = moonrl_sps * per_step / 1e9, reference_sps * per_step / 1e9
  return {
    flops_per_agent_step = per_step, moonrl_gflops = gm, reference_gflops = gr,
    moonrl_macs_per_agent_step = macs_moonrl, reference_macs_per_agent_step = macs_model,
    cpu_conv = layers and next(layers) and (o.cpu_conv or "auto") .. ": " .. bench.layers_text(layers) or o.cpu_conv,
    moonrl_peak_gflops = pm, reference_peak_gflops = pr, moonrl_peak_counts = what,
    moonrl_fraction_of_peak = pm and gm / pm, reference_fraction_of_peak = pr and gr / pr,
    ceiling_ratio = pr and pr / gr,
  }
end

-- --------------------------------------------------------------- the table

local function fmt_peak(b) return b and string.format("%.0f MiB", b / 2 ^ 20) or "-" end

local function setup_line(s, v)
  if not s then return "-" end
  local parts = { "torch " .. tostring(v and v.torch or s.torch) ..
    (v and string.format(" (python %s, %s)", tostring(v.python), tostring(v.python_path)) or "") }
  if type(s.cudnn) == "table" and s.cudnn.version then   -- a GPU reference (null on a CPU): its convolutions are cuDNN's, whatever mkldnn says
    parts[#parts + 1] = string.format("convolutions in cuDNN %s (torch.backends.cudnn.benchmark %s)",
      tostring(s.cudnn.version), s.cudnn.benchmark and "on" or "off") .. (s.layout and ", layout " .. s.layout or "")
  elseif s.mkldnn ~= nil then
    parts[#parts + 1] = (s.mkldnn and "convolutions in oneDNN (torch.backends.mkldnn on)" or "oneDNN OFF") ..
      (s.layout and ", layout " .. s.layout or "")
  end
  local al = s.allocator
  if type(al) == "table" then
    local env = {}
    for k, v in pairs(al.env or {}) do env[#env + 1] = k .. "=" .. tostring(v) end
    table.sort(env)
    parts[#parts + 1] = string.format("malloc %s (%s%s)", tostring(al.name),
      type(al.loaded) == "string" and ("mapped " .. al.loaded) or "glibc's own",
      #env > 0 and "; " .. table.concat(env, " ") or "")
  end
  return table.concat(parts, ", ")
end

-- The rows measured, as rows of BENCHMARKS.md's "Where moonrl stands"
-- tables: a training row in the shape of the CPU (or GPU) table, the env row
-- in the environment table's, each with today's date, this machine with its
-- CPU flags, the peer's version and the command that measures that row
-- alone. `date` defaults to today.
function compare.standing(o, rows, date)
  local fmt_rate = require("moonrl.bench").fmt_rate
  date = date or os.date("%Y-%m-%d")
  local machine = require("moonrl.runtime.hardware").cpu_description() .. ", " .. #uv.cpu_info() .. " cores"
  local prec = compare.precision(o)
  local train, env, cartpole, others = {}, {}, {}, {}
  for _, r in ipairs(rows) do
    if r.row == "cartpole" then
      local v, pr = r.versions or {}, {}
      for i, x in ipairs(r.pair_ratios or {}) do pr[i] = string.format("%.2f", x) end
      cartpole[#cartpole + 1] = string.format("| CPU, moonrl %d thread%s, Gymnasium 1 | %d | %s | %s | " ..
        "**%.2fx** (pairs %s) | %s (%d steps) | %.0fx | %s | %s | gymnasium %s, numpy %s (python %s) | " ..
        "`moonrl bench --compare --rows cartpole --envs %d --reps %d%s` |", r.threads, r.threads == 1 and "" or "s",
        r.num_envs, fmt_rate(r.moonrl.median), fmt_rate(r.reference.median), r.ratio, table.concat(pr, " "),
        fmt_rate(r.reference_sync.median), r.sync_steps_per_rep, r.ratio_sync, date, machine, tostring(v.gymnasium),
        tostring(v.numpy), tostring(v.python), r.num_envs, o.reps, o.threads > 0 and " --threads " .. o.threads or "")
      if r.moonrl_lua then
        local lp = {}
        for i, x in ipairs(r.lua_pair_ratios or {}) do lp[i] = string.format("%.2f", x) end
        cartpole[#cartpole + 1] = string.format("| the same, cartpole written in Lua (%.2f of the C one's rate) | %d | " ..
          "%s | %s | **%.2fx** (pairs %s) | %s | %.0fx | %s | %s | the same | the same |", r.lua_over_c, r.num_envs,
          fmt_rate(r.moonrl_lua.median), fmt_rate(r.reference.median), r.ratio_lua, table.concat(lp, " "),
          fmt_rate(r.reference_sync.median), r.moonrl_lua.median / r.reference_sync.median, date, machine)
      end
    else
      others[#others + 1] = r
    end
  end
  for _, r in ipairs(others) do
    local v = r.versions or {}
    local peer = "torch " .. tostring(v.torch or (r.reference_setup and r.reference_setup.torch) or "?")
    local cmd = { "moonrl bench --compare --rows", r.row == "env" and "env" or r.net }
    if o.device == "cuda" then cmd[#cmd + 1] = "--device cuda" end
    cmd[#cmd + 1] = "--envs " .. r.num_envs
    if r.row ~= "env" then cmd[#cmd + 1] = "--rollout " .. r.rollout end
    cmd[#cmd + 1] = "--reps " .. o.reps
    if prec ~= "fp32" then cmd[#cmd + 1] = "--precision " .. prec end
    if o.cpu_conv and o.cpu_conv ~= "auto" and o.device ~= "cuda" then cmd[#cmd + 1] = "--cpu-conv " .. o.cpu_conv end
    local pr = {}
    for i, x in ipairs(r.pair_ratios or {}) do pr[i] = string.format("%.2f", x) end
    local ratio = string.format("%.2fx %s (pairs %s)", r.ratio, r.reference_best or "eager", table.concat(pr, " "))
    local eager = r.reference_eager or r.reference
    local where = o.device == "cuda" and "GPU" or ("CPU, " .. threads_of(o) .. " threads")
    if r.row == "env" then
      env[#env + 1] = string.format("| %s | %s | %s | %s | %s | %s | %s | %s | `%s` |", where,
        r.num_envs, fmt_rate(r.moonrl.median), fmt_rate(eager.median), ratio, date, machine, peer,
        table.concat(cmd, " "))
    else
      local moonrl_prec = r.precision and r.precision.moonrl or prec
      train[#train + 1] = string.format("| %s, %d x %d | %s | %s | %s / %s | %s | %s / %s | %s | %s | %s | `%s` |",
        r.net == "ref" and "reference" or r.net, r.num_envs, r.rollout,
        moonrl_prec == prec and prec or (prec .. " asked, moonrl ran " .. moonrl_prec),
        fmt_rate(r.moonrl.median), fmt_rate(eager.median),
        r.reference_compiled and fmt_rate(r.reference_compiled.median) or "-", ratio,
        fmt_peak(r.moonrl_peak_bytes), fmt_peak(r.reference_peak_bytes), date, machine, peer, table.concat(cmd, " "))
    end
  end
  local out = {}
  if #train > 0 then
    out[#out + 1] = "| network, envs x rollout | precision | moonrl | PyTorch eager / compiled | ratio | " ..
      "peak memory moonrl / PyTorch | date | machine | peer | command |"
    out[#out + 1] = "|---|---|---|---|---|---|---|---|---|---|"
    for _, l in ipairs(train) do out[#out + 1] = l end
  end
  if #env > 0 then
    if #out > 0 then out[#out + 1] = "" end
    out[#out + 1] = "| where | envs | moonrl | PyTorch reference | ratio | date | machine | peer | command |"
    out[#out + 1] = "|---|---|---|---|---|---|---|---|---|"
    for _, l in ipairs(env) do out[#out + 1] = l end
  end
  if #cartpole > 0 then
    if #out > 0 then out[#out + 1] = "" end
    out[#out + 1] = "| where | envs | moonrl | Gymnasium CartPoleVectorEnv | ratio | Gymnasium SyncVectorEnv | ratio | " ..
      "date | machine | peer | command |"
    out[#out + 1] = "|---|---|---|---|---|---|---|---|---|---|---|"
    for _, l in ipairs(cartpole) do out[#out + 1] = l end
  end
  return table.concat(out, "\n") .. "\n"
end

local function machine_line(o, load0, load1)
  io.write(string.format("  machine    %s, %d cores; load average (1 min) %.1f at the start, %.1f at the end\n" ..
    "             (the benchmark's own processes count: a side busy on %d threads adds about %d)\n",
    require("moonrl.runtime.hardware").cpu_description(), #uv.cpu_info(), load0, load1, threads_of(o), threads_of(o)))
end

-- The PyTorch reference's rows (env, small, ref).
local function print_torch(o, rows, load0, load1)
  local fmt_rate = require("moonrl.bench").fmt_rate
  local prec = compare.precision(o)
  local w = io.write
  w("moonrl bench --compare: moonrl against the PyTorch reference (bench/reference), side by side\n")
  machine_line(o, load0, load1)
  w(string.format("  threads    %d on both sides\n", threads_of(o)))
  local refused
  for _, r in ipairs(rows) do refused = refused or r.moonrl_refused end
  if refused then
    w(string.format("  precision  %s asked; the reference ran %s, moonrl ran fp32: its engine refused %s (\"%s\")\n",
      prec, prec, prec, refused))
  else
    w(string.format("  precision  %s on both sides%s\n", prec,
      prec ~= "fp32" and (o.device == "cuda" and "" or ", fp32 master weights") or ""))
  end
  for _, r in ipairs(rows) do
    if r.describe then w("  moonrl     " .. r.describe .. "\n") break end
  end
  local setup = rows[1] and rows[1].reference_setup
  for _, r in ipairs(rows) do   -- a training row's setup says more (oneDNN, layout)
    if r.reference_setup and r.reference_setup.mkldnn ~= nil then setup = r.reference_setup break end
  end
  local v = rows[1] and rows[1].versions
  w("  pytorch    " .. setup_line(setup, v) .. "\n")
  local compiled, compile_error, scope
  for _, r in ipairs(rows) do
    compiled = compiled or r.reference_compiled ~= nil
    compile_error = compile_error or r.compile_error
    scope = scope or r.reference_setup and r.reference_setup.compile_scope
  end
  if compiled then
    w("  compile    training rows: the reference eager and with torch.compile (" ..
      (scope == "model" and "the network" or "the network and the PPO loss") ..
      ", dynamic=False; compiled in the untimed warm-up update); the ratio is against the faster\n")
  elseif compile_error then
    w("  compile    torch.compile failed here, eager only: " .. compile_error .. "\n")
  elseif o.no_compile then
    w("  compile    not measured (--no-compile): the reference runs eager\n")
  elseif v and not v.compile_available then
    w("  compile    not measured: torch " .. tostring(v.torch) .. " has no torch.compile (make bench installs " ..
      "torch 2.x into build/venv-bench)\n")
  elseif v and v.compile_available then
    w("  compile    the env row runs eager only: the step draws from its torch.Generator, where torch.compile\n" ..
      "             breaks the graph, and it was no faster (bench/reference/README.md)\n")
  end
  w(string.format("  method     %d repetitions per side, each in a fresh process, alternating moonrl / pytorch\n\n",
    o.reps))
  local pw = math.max(10, 6 * o.reps)   -- the per-pair column: "1.23 " a pair
  w(string.format("%-24s %10s %10s %10s %8s %-8s %-" .. pw .. "s %s\n", "row", "moonrl", "pt eager",
    "pt compile", "ratio", "vs", "per pair", "peak memory moonrl / pytorch"))
  for _, r in ipairs(rows) do
    local what = r.row == "env" and string.format("env, %d envs", r.num_envs)
      or string.format("train %s, %d x %d", r.net, r.num_envs, r.rollout)
    local unequal = r.precision and r.precision.moonrl ~= r.precision.reference
    if unequal then what = what .. " *" end
    local pr = {}
    for i, x in ipairs(r.pair_ratios) do pr[i] = string.format("%.2f", x) end
    local eager = r.reference_eager or r.reference
    w(string.format("%-24s %10s %10s %10s %7.2fx %-8s %-" .. pw .. "s %s / %s\n", what, fmt_rate(r.moonrl.median),
      fmt_rate(eager.median), r.reference_compiled and fmt_rate(r.reference_compiled.median) or "-", r.ratio,
      r.reference_best or "eager", table.concat(pr, " "), fmt_peak(r.moonrl_peak_bytes),
      fmt_peak(r.reference_peak_bytes)))
  end
  local worked
  for _, r in ipairs(rows) do
    local k = r.work
    if k and k.moonrl_peak_gflops and k.reference_peak_gflops then
      if not worked then
        w("\narithmetic (GFLOP/s of the model's products, whatever each side computes; this CPU's peak measured " ..
          "now, on the same threads)\n")
        worked = true
      end
      w(string.format("  train %-6s %.1f MFLOP per agent-step: moonrl %.0f GFLOP/s = %.0f%% of the %s peak %.0f " ..
        "(%s), pytorch %.0f = %.0f%% of %.0f; ceiling %.2fx\n", r.net, k.flops_per_agent_step / 1e6, k.moonrl_gflops,
        100 * k.moonrl_fraction_of_peak, r.precision and r.precision.moonrl or "fp32", k.moonrl_peak_gflops,
        k.moonrl_peak_counts or "?",
        k.reference_gflops, 100 * k.reference_fraction_of_peak, k.reference_peak_gflops, k.ceiling_ratio))
      w(string.format("  %-12s multiply-adds per agent-step: moonrl %.2f M (cpu.conv %s), pytorch %.2f M (direct)%s\n",
        "", k.moonrl_macs_per_agent_step / 1e6, k.cpu_conv or "default", k.reference_macs_per_agent_step / 1e6,
        k.moonrl_macs_per_agent_step < k.reference_macs_per_agent_step and string.format(
          ": %.2fx fewer, so the ceiling above is %.2fx for moonrl's path", k.reference_macs_per_agent_step /
          k.moonrl_macs_per_agent_step, k.ceiling_ratio * k.reference_macs_per_agent_step / k.moonrl_macs_per_agent_step) or ""))
    end
  end
  w("\n")
  w("moonrl, pt eager, pt compile\n" ..
    "                 agent-steps per second, the median of the repetitions (higher is faster) of moonrl and\n" ..
    "                 of the PyTorch reference eager and with torch.compile (- where not measured); training\n" ..
    "                 rows time whole updates (rollout + GAE + learning) after one warm-up update\n")
  w("ratio            moonrl's median / pytorch's median in its best setting (vs: the faster of eager and\n" ..
    "                 compile): above 1, moonrl is faster\n")
  w("per pair         the same ratio for each alternating pair, in order (the spread the machine gave)\n")
  if worked then
    w("multiply-adds    per agent-step, what each side computes (rollout forward, 4 epochs of forward and\n" ..
      "                 backward): pytorch the model's (direct convolutions); moonrl fewer where Winograd runs,\n" ..
      "                 and one forward fewer where the rollout's acts keep the first epoch's (one minibatch);\n" ..
      "                 counted dense on both sides: moonrl's first conv and its critic's view add terms only\n" ..
      "                 for FOOD and POISON cells (0.8-3% of the default grid's cells)\n")
    w("ceiling          this CPU's peak / pytorch's GFLOP/s: no implementation of the same arithmetic can be\n" ..
      "                 faster than pytorch by more than this on this machine (peak: FMAs for fp32; for bf16 AMX\n" ..
      "                 tile dot products where the CPU has AMX, else AVX512-BF16 dot products; measured by a\n" ..
      "                 register-resident loop: mr_cpu_peak_gflops)\n")
  end
  w(o.device == "cuda"
    and "peak memory      device memory: moonrl's allocator peak, torch.cuda.max_memory_allocated\n"
    or "peak memory      each process's resident-set high-water mark (VmHWM, ru_maxrss), the largest of its reps\n" ..
       "                 (pytorch's: in its best setting)\n")
  if refused then
    w(string.format("*                unequal precisions: moonrl fp32 against pytorch %s (moonrl refused %s)\n",
      prec, prec))
  end
  if os.getenv("OPENBLAS_CORETYPE") then
    w("OPENBLAS_CORETYPE=" .. os.getenv("OPENBLAS_CORETYPE") .. " is set: it applies to both sides (PyTorch's BLAS too)\n")
  end
end

-- The cartpole rows: moonrl's environment alone against Gymnasium's CartPoleVectorEnv and SyncVectorEnv.
local function print_cartpole(o, rows, load0, load1, header)
  local fmt_rate = require("moonrl.bench").fmt_rate
  local w = io.write
  if header then
    w("moonrl bench --compare: moonrl's cartpole against Gymnasium's CartPole-v1, side by side\n")
    machine_line(o, load0, load1)
  else
    w("\n")
  end
  local r1 = rows[1]
  local v = r1.versions
  w(string.format("  gymnasium  %s, numpy %s (python %s, %s)\n", v.gymnasium, v.numpy, v.python, v.python_path))
  w(string.format("  threads    moonrl %d; Gymnasium one (NumPy's elementwise operations and SyncVectorEnv's " ..
    "loop run on one)\n", r1.threads))
  w(string.format("  method     %d repetitions per side, each in a fresh process, alternating moonrl / " ..
    "CartPoleVectorEnv / SyncVectorEnv;\n             each process: 10 warm-up steps, then the median of 3 timed " ..
    "repetitions of %d steps (SyncVectorEnv %d),\n             random actions drawn before timing and cycled " ..
    "through 16 batches on every side\n\n", o.reps, r1.steps_per_rep, r1.sync_steps_per_rep))
  local pw = math.max(10, 6 * o.reps)
  w(string.format("%-24s %10s %10s %8s %-" .. pw .. "s %10s %9s %s\n", "row", "moonrl", "gym vector", "ratio",
    "per pair", "gym sync", "ratio", "peak memory moonrl / vector / sync"))
  for _, r in ipairs(rows) do
    local pr = {}
    for i, x in ipairs(r.pair_ratios) do pr[i] = string.format("%.2f", x) end
    w(string.format("%-24s %10s %10s %7.2fx %-" .. pw .. "s %10s %8.0fx %s / %s / %s\n",
      string.format("env cartpole, %d envs", r.num_envs), fmt_rate(r.moonrl.median), fmt_rate(r.reference.median),
      r.ratio, table.concat(pr, " "), fmt_rate(r.reference_sync.median), r.ratio_sync, fmt_peak(r.moonrl_peak_bytes),
      fmt_peak(r.reference_peak_bytes), fmt_peak(r.reference_sync_peak_bytes)))
    if r.moonrl_lua then
      local lp = {}
      for i, x in ipairs(r.lua_pair_ratios) do lp[i] = string.format("%.2f", x) end
      w(string.format("%-24s %10s %10s %7.2fx %-" .. pw .. "s %10s %8.0fx %s (%.2f of the C one's rate)\n",
        "  written in Lua", fmt_rate(r.moonrl_lua.median), fmt_rate(r.reference.median), r.ratio_lua,
        table.concat(lp, " "), fmt_rate(r.reference_sync.median), r.moonrl_lua.median / r.reference_sync.median,
        fmt_peak(r.moonrl_lua_peak_bytes), r.lua_over_c))
    end
  end
  w("\n")
  w("moonrl           agent-steps per second of moonrl's cartpole alone (bench/env_alone.lua), the median\n" ..
    "                 of the repetitions (higher is faster)\n")
  w("written in Lua   the same cartpole as a Lua environment (configs/envs/cartpole.lua, env.lua = \"cartpole\"),\n" ..
    "                 measured in the same alternation; the last column: its rate over the C cartpole's\n")
  w("gym vector       gymnasium.envs.classic_control.cartpole.CartPoleVectorEnv, the same instances and steps\n")
  w("ratio            moonrl's median / CartPoleVectorEnv's median: above 1, moonrl is faster\n")
  w("per pair         the same ratio for each alternating pair, in order (the spread the machine gave)\n")
  w("gym sync         gymnasium.vector.SyncVectorEnv of gymnasium.make(\"CartPole-v1\"), the same instances, fewer\n" ..
    "                 steps; its ratio: moonrl's median / its median\n")
  w("peak memory      each process's resident-set high-water mark (VmHWM, ru_maxrss), the largest of its reps\n")
end

-- Prints the side-by-side tables for the rows (text for a person; --json prints the rows instead).
function compare.print(o, rows, load0, load1)
  local torch_rows, gym_rows = {}, {}
  for _, r in ipairs(rows) do
    if r.row == "cartpole" then gym_rows[#gym_rows + 1] = r else torch_rows[#torch_rows + 1] = r end
  end
  if #torch_rows > 0 then print_torch(o, torch_rows, load0, load1) end
  if #gym_rows > 0 then print_cartpole(o, gym_rows, load0, load1, #torch_rows == 0) end
  io.write("\nthe rows above as rows of BENCHMARKS.md's \"Where moonrl stands\" tables:\n\n")
  io.write(compare.standing(o, rows))
end

function compare.run(o)
  -- The options first: a wrong one is wrong whether or not PyTorch is installed.
  if o.device ~= "cuda" and compare.precision(o) == "fp16" then
    error("--compare --precision fp16 on " .. o.device .. ": the reference's fp16 (autocast + GradScaler) " ..
      "needs CUDA; accepted on a cpu: fp32, bf16", 0)
  end
  local names = o.rows or (o.net_given and { o.net }) or compare.DEFAULT_ROWS
  -- each row's peer: PyTorch for the reference's rows, Gymnasium for cartpole's
  local torch_rows, gym_rows = false, false
  for _, name in ipairs(names) do
    if name == "cartpole" then gym_rows = true else torch_rows = true end
  end
  local peer, gym
  if torch_rows then
    peer = compare.python()
    if not peer then
      error("--compare needs PyTorch for the reference: `make bench` installs it (build/venv-bench, " ..
        "requirements-bench.txt)", 0)
    end
    if o.compile and not peer.compile then
      error("--compile: the reference's torch " .. peer.torch .. " (" .. peer.path .. ") has no torch.compile " ..
        "(2.x has: make bench installs it)", 0)
    end
  end
  if gym_rows then
    gym = compare.gym_python()
    if not gym then
      error("--compare --rows cartpole needs Gymnasium (and NumPy) for its peer, CartPoleVectorEnv: `make bench` " ..
        "installs them (build/venv-bench, requirements-bench.txt)", 0)
    end
  end
  local load0 = uv.loadavg()
  local rows = {}
  for _, name in ipairs(names) do
    rows[#rows + 1] = name == "cartpole" and compare.cartpole_row(o, gym) or compare.row(o, name, peer)
  end
  local load1 = uv.loadavg()
  if o.json then
    for _, r in ipairs(rows) do
      r.loadavg = { start = load0, ["end"] = load1 }
      print(json.encode(r))
    end
    return
  end
  compare.print(o, rows, load0, load1)
end

return compare

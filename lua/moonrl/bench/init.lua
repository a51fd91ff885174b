-- moonrl.bench - `moonrl bench`: throughput of the environment alone, policy
-- inference and whole training updates, and the side-by-side comparison with
-- the PyTorch reference (bench/reference/train.py).
--
--   moonrl bench [env|infer|train|all] [--device cpu|cuda] [--net ref|small]
--                [--envs N] [--reps R] [--threads T] [--json]
--   moonrl bench --compare [--rows env,small,ref,cartpole] [--reps R] [--envs N] [--rollout T]
--                [--precision fp32|bf16] [--ref-allocator auto|tcmalloc|jemalloc|glibc-tuned|system]
--   moonrl bench --scaling 16,64,256,1024 [--net small] [--out docs/scaling.csv]
--
-- Every result is the median of R timed repetitions after warm-up, with the
-- spread (min .. max). Training is timed as docs/environment.md counts throughput: whole
-- updates (rollout + GAE + update), after one discarded warm-up update.
-- bench.env measures any registered environment (o.env; bench/env_alone.lua
-- runs it for one by name: moonrl run bench/env_alone.lua --env cartpole).
-- --compare (moonrl.bench.compare) runs moonrl and the reference each in a
-- fresh process per repetition, alternating, so both see the same machine
-- state and each reports its own peak memory (peak RSS on the CPU, the
-- allocator's peak on a GPU); it prints the ratio moonrl / reference per row.
--
-- This is a command-line tool: it blocks the loop while it measures, which is
-- what a benchmark wants (nothing else runs). The command line, its options
-- and the printed rows are moonrl.cli.commands.bench.

local engine = require("moonrl.engine")
local uv = require("luv")

local ffi = require("ffi")   -- the actions', observations' and outputs' buffers (uint8_t, float): no engine type
local bench = {}

local NETS = {
  ref = { conv_channels = { 32, 64, 64 }, hidden = 512, critic_hidden = 512 },
  small = { conv_channels = { 16, 32 }, hidden = 128, critic_hidden = 128 },
}
bench.NETS = NETS

local function now() return uv.hrtime() / 1e9 end

bench.PRECISIONS = { fp32 = engine.enum("precision", "fp32"), bf16 = engine.enum("precision", "bf16"),
  fp16 = engine.enum("precision", "fp16") }
-- --cpu-conv: the config's cpu.conv, so the implementations can be timed in turn with one binary
bench.CONVS = {}
for _, name in ipairs({ "auto", "onednn", "im2col", "winograd" }) do bench.CONVS[name] = engine.enum("cpu.conv", name) end

-- Multiply-adds of one sample's forward pass through the network (the reference network's
-- layers: 3x3 convs with padding 1 on V x V maps, fc, actor, critic). conv: a cpu.conv
-- choice, or each layer's ({[l] = name}, cpu.conv = auto's); "winograd" counts what that
-- path computes for the convs after the first (mr_cpu_conv_macs: fewer products plus the
-- tiles' transforms); any other, the direct count both sides of a comparison share.
function bench.forward_macs(net, view_range, conv)
  local V = 2 * (view_range or 5) + 1
  local VV, macs, cin = V * V, 0, 2
  for i, ch in ipairs(net.conv_channels) do
    -- conv: one choice for layers 1.., or a table of each layer's ({[1] = "winograd", ...})
    local own = i > 1 and (type(conv) == "table" and conv[i - 1] or conv) == "winograd"
    macs = macs + (own and engine.cpu_conv_macs("winograd", V, V, cin, ch) or VV * 9 * cin * ch)
    cin = ch
  end
  local flat = VV * cin
  macs = macs + flat * net.hidden + net.hidden * 8
  local critic_in = net.hidden + 2 + 2 * VV
  return macs + critic_in * net.critic_hidden + net.critic_hidden
end

-- Multiply-adds of one sample in one epoch of the learning phase: its
-- forward and the backward's two products per layer, less the first conv's
-- input gradient (nothing needs it). conv: as forward_macs (a Winograd
-- path's backward passes are Winograd too, the same count as its forward).
local function learn_macs(net, view_range, conv)
  local V = 2 * (view_range or 5) + 1
  local first = V * V * 9 * 2 * net.conv_channels[1]
  return 3 * bench.forward_macs(net, view_range, conv) - first
end

-- Multiply-adds one agent-step costs in training: its forward in the
-- rollout, then each epoch's learn_macs; forwards (default epochs): the
-- update's forward passes, one fewer where the rollout's acts keep the first
-- epoch's (mr_trainer_update_forwards).
function bench.macs_per_agent_step(net, epochs, conv, view_range, forwards)
  local fwd = bench.forward_macs(net, view_range, conv)
  return fwd + epochs * learn_macs(net, view_range, conv) - (epochs - (forwards or epochs)) * fwd
end

-- FLOPs (2 per multiply-add) of one update's learning phase over `samples`.
function bench.update_flops(net, samples, epochs, view_range)
  return 2 * samples * epochs * learn_macs(net, view_range)
end

-- "layer 1 winograd, layer 2 onednn" of a per-layer choice {[l] = name}.
function bench.layers_text(layers)
  local t = {}
  for l = 1, #layers do t[#t + 1] = "layer " .. l .. " " .. tostring(layers[l]) end
  return table.concat(t, ", ")
end

local function stats(xs)
  local s = {}
  for i, v in ipairs(xs) do s[i] = v end
  table.sort(s)
  local n = #s
  local med = n % 2 == 1 and s[(n + 1) / 2] or 0.5 * (s[n / 2] + s[n / 2 + 1])
  return { median = med, min = s[1], max = s[n], n = n }
end
bench.stats = stats

local function peak_rss_bytes()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local text = f:read("*a")
  f:close()
  local kb = text:match("VmHWM:%s*(%d+)")
  return kb and tonumber(kb) * 1024 or 0
end

-- An mr_config for a benchmark row (defaults < net < options).
local function make_config(o)
  local c = engine.default_config()
  local net = NETS[o.net]
  c.policy.num_conv = #net.conv_channels
  for i, ch in ipairs(net.conv_channels) do c.policy.conv_channels[i - 1] = ch end
  c.policy.hidden, c.policy.critic_hidden = net.hidden, net.critic_hidden
  c.env.num_envs = o.envs
  c.ppo.rollout_steps = o.rollout
  c.threads = o.threads
  c.device = engine.enum("device", (o.device == "cuda" or o.device == "cpu") and o.device or "auto")
  c.precision = bench.PRECISIONS[o.precision or "fp32"]
  if o.cpu_conv then c.cpu.conv = bench.CONVS[o.cpu_conv] end
  if o.cuda_conv then c.cuda.conv = assert(engine.enum("cuda.conv", o.cuda_conv), o.cuda_conv) end
  if o.cuda_epilogue then c.cuda.epilogue = assert(engine.enum("cuda.epilogue", o.cuda_epilogue), o.cuda_epilogue) end
  c.total_steps = (o.reps + 4) * o.envs * o.rollout
  return c
end

-- what an engine call returned (ok, err): ok, or an error naming `what`.
local function check(what, ok, err)
  if not ok then error(what .. ": " .. tostring(err), 0) end
  return ok
end

-- The environments bench.env accepts (--env): the engine's (registry.c), in env.name's order.
function bench.env_names()
  local names = {}
  for i = 0, 255 do
    local name = engine.env_name(i)
    if not name then break end
    names[#names + 1] = name
  end
  return names
end

-- name, or an error naming the environments accepted (what --env says). A Lua
-- environment is lua:NAME (a built-in, configs/envs/NAME.lua) or lua:PATH.lua.
function bench.check_env(name)
  local names = bench.env_names()
  for _, n in ipairs(names) do if n == name and n ~= "lua" then return name end end
  local lua = type(name) == "string" and name:match("^lua:(.+)$")
  if lua then
    local ok, err = engine.env_program(lua)
    if not ok then error("--env = " .. name .. ": " .. err, 0) end
    return name
  end
  local shown = {}
  for _, n in ipairs(names) do if n ~= "lua" then shown[#shown + 1] = n end end
  error("--env = " .. tostring(name) .. ": accepted " .. table.concat(shown, ", ") ..
    ", or lua:NAME / lua:PATH.lua (a Lua environment: lua:cartpole)", 0)
end

-- Environment alone: agent-steps/s with observations written. o.env: which
-- environment (default foraging); uniformly random actions (over its action
-- count, or a box's bounds), drawn before timing and cycled through 16 batches.
function bench.env(o)
  local name = bench.check_env(o.env or "foraging")
  local c = make_config(o)
  local ec = c.env
  local lua = name:match("^lua:(.+)$")
  ec.name = engine.env_id(lua and "lua" or name)
  if lua then ec.program = assert(engine.env_program(lua)) end
  local env = engine.env(ec, 1, c.device, o.threads)
  if not env then
    -- a board the default sizes do not fit (catch's, 4 .. 32): its built-in experiment's sizes
    local loader = require("moonrl.config.load")
    local ok, exp = pcall(function() return loader.resource(loader.experiment_path(name)) end)
    local own = ok and type(exp) == "table" and type(exp.env) == "table" and exp.env.name == name and exp.env or {}
    for _, k in ipairs({ "grid_size", "view_range" }) do
      if type(own[k]) == "number" then ec[k] = own[k] end
    end
    env = check("env", engine.env(ec, 1, c.device, o.threads))
  end
  local spaces = assert(engine.env_spaces(lua and "lua" or name, engine.env_sizes(ec), lua))
  local n, steps = o.envs, o.env_steps
  local act = spaces.action
  local actions, step, per = nil, env.step, n   -- per: an instance-step's actions, a batch's elements
  if act.kind == "box" then
    -- floats uniform in each dimension's [low, high], stepped by mr_env_step_box
    local dims = #act.low
    per, step = n * dims, env.step_box
    actions = ffi.new("float[?]", per * 16)
    for i = 0, per * 16 - 1 do
      local d = i % dims + 1
      actions[i] = act.low[d] + math.random() * (act.high[d] - act.low[d])
    end
  else
    local na = act.n
    actions = ffi.new("uint8_t[?]", n * 16)
    for i = 0, n * 16 - 1 do actions[i] = math.random(0, na - 1) end
  end
  for k = 0, 9 do check("env step", step(env, actions + (k % 16) * per)) end
  -- On a GPU a step is only queued: each repetition ends by reading the
  -- state back, which waits for every queued step.
  -- an observation's bytes: a vector's floats, else the grid worlds' (2r+1)^2 cell codes
  local ob = spaces.observation
  local obs_bytes = ob.kind == "vector" and 4 * ob.shape[1] or
    ob.kind == "image" and 4 * ob.shape[1] * ob.shape[2] * ob.shape[3] or ob.shape[2] * ob.shape[3]
  -- (the buffers stay referenced here: a pointer stored in a struct does not
  -- keep an FFI array alive)
  local bufs = { ffi.new("uint8_t[?]", n * obs_bytes), ffi.new("float[?]", n), ffi.new("uint8_t[?]", n),
                 ffi.new("uint8_t[?]", n) }
  -- on a GPU the actions are drawn in the step kernel (mr_env_step_random: no copy from the host per
  -- step, one wait per repetition) unless --host-actions; the cpu and a box keep the host's
  local drawn = o.device == "cuda" and act.kind ~= "box" and not o.host_actions
  local rates = {}
  for _ = 1, o.reps do
    local t0 = now()
    if drawn then
      check("env step (actions drawn on the device)", env:step_random(1, steps))
    else
      for k = 0, steps - 1 do step(env, actions + (k % 16) * per) end
    end
    check("env read", env:read(bufs[1], bufs[2], bufs[3], bufs[4]))
    rates[#rates + 1] = n * steps / (now() - t0)
  end
  env:free()
  bufs = nil
  return { row = "env", env = name, num_envs = n, steps_per_rep = steps, rate = stats(rates), unit = "agent-steps/s",
           actions = drawn and "device" or "host", peak_memory_bytes = peak_rss_bytes() }
end

-- A trainer for a benchmark row: config, trainer (engine.trainer's).
local function new_trainer(o)
  local c = make_config(o)
  -- --cpu-conv auto: each conv layer's implementation as `moonrl train` picks it with warm-up's
  -- "algorithms" step (measured once on this machine, then read from the cache)
  if o.cpu_conv == "auto" and o.device ~= "cuda" then
    o.conv_notes, o.conv_layers = require("moonrl.run.conv_algorithms").resolve({ cpu = { conv = "auto" } }, c, true)
  end
  -- --cuda-conv auto | cudnn: each layer as `moonrl train` picks it (searched once on this GPU, then cached)
  if o.device == "cuda" and (o.cuda_conv == "auto" or o.cuda_conv == "cudnn") then
    o.conv_notes = require("moonrl.run.conv_algorithms").resolve_cuda({ cuda = { conv = o.cuda_conv } }, c, true)
  end
  return c, check("trainer", engine.trainer(c))
end

-- Policy inference alone: samples/s through the network.
function bench.infer(o)
  if o.device == "cuda" then
    return { row = "infer", net = o.net, batch = o.envs, skipped =
      "on cuda, mr_trainer_infer runs on a cpu copy of the weights; the GPU's inference time is the " ..
      "train row's rollout phase" }
  end
  local c, t = new_trainer(o)
  local n = o.envs
  local VV = (2 * c.env.view_range + 1) ^ 2
  local obs = ffi.new("uint8_t[?]", n * VV)
  for i = 0, n * VV - 1 do obs[i] = math.random(0, 15) < 1 and 1 or 0 end
  local logits, value = ffi.new("float[?]", n * 8), ffi.new("float[?]", n)
  check("infer", t:infer(obs, n, logits, value))
  local iters = math.max(1, math.floor(o.infer_samples / n))
  local rates = {}
  for _ = 1, o.reps do
    local t0 = now()
    for _ = 1, iters do t:infer(obs, n, logits, value) end
    rates[#rates + 1] = n * iters / (now() - t0)
  end
  t:free()
  return { row = "infer", net = o.net, batch = n, rate = stats(rates), unit = "samples/s" }
end

-- The parts of an update the engine times (mr_metrics): the rollout's
-- (environment, inference) and the update's, per minibatch.
bench.PARTS = { "time_env", "time_inference", "time_gather", "time_forward", "time_loss", "time_backward",
  "time_optimizer" }

-- Whole training updates: agent-steps/s, phases, memory.
function bench.train(o)
  local c, t = new_trainer(o)
  local m = t.metrics   -- what t:update() fills
  -- warm-up: on cuda two updates, the first queued kernel by kernel, the
  -- second recording the CUDA graphs the timed ones replay
  for _ = 1, o.device == "cuda" and 2 or 1 do check("warm-up update", t:update()) end
  local sps, roll, gae, upd, wall = {}, {}, {}, {}, {}
  local parts = {}   -- the rollout's and the update's parts (bench.PARTS), per update
  for _, k in ipairs(bench.PARTS) do parts[k] = {} end
  local function keep_parts()
    for _, k in ipairs(bench.PARTS) do table.insert(parts[k], m[k]) end
  end
  for _ = 1, o.reps do
    local t0 = now()
    check("update", t:update())
    local dt = now() - t0
    sps[#sps + 1] = o.envs * o.rollout / dt
    roll[#roll + 1], gae[#gae + 1], upd[#upd + 1], wall[#wall + 1] = m.time_rollout, m.time_gae, m.time_update, dt
    keep_parts()
  end
  if o.device == "cuda" then
    -- the split needs events around every step and minibatch phase (and no
    -- graphs): one more update, profiled, outside the timed ones
    check("profile", t:set_profile(true))
    check("profiled update", t:update())
    check("profile", t:set_profile(false))
    for _, k in ipairs(bench.PARTS) do parts[k] = {} end
    keep_parts()
  end
  local mem = t:memory() or {}
  local describe = t:describe()
  local forwards = t:update_forwards()
  t:free()
  local dev_peak = tonumber(mem.device_peak_bytes) or 0
  local r = {
    row = "train", net = o.net, num_envs = o.envs, rollout = o.rollout, precision = o.precision or "fp32",
    rate = stats(sps), unit = "agent-steps/s", time_rollout = stats(roll).median, time_gae = stats(gae).median,
    time_update = stats(upd).median, time_wall = stats(wall).median, planned_bytes = tonumber(mem.host_planned_bytes),
    peak_memory_bytes = dev_peak > 0 and dev_peak or peak_rss_bytes(), describe = describe,
  }
  for _, k in ipairs(bench.PARTS) do r[k] = stats(parts[k]).median end
  -- what the phases leave out of the wall clock: host work, waits, launch gaps
  r.time_idle = math.max(0, r.time_wall - r.time_rollout - r.time_gae - r.time_update)
  -- the update's achieved rate (the model FLOPs of its forward and backward passes)
  local net, view_range = NETS[o.net], tonumber(c.env.view_range)
  r.forward_macs = bench.forward_macs(net, view_range)
  -- what this path computes per agent-step (fewer than the model's with Winograd)
  r.cpu_conv = o.device ~= "cuda" and (o.cpu_conv or "default") or nil
  r.cuda_conv = o.device == "cuda" and (o.cuda_conv or "im2col") or nil
  r.cuda_epilogue = o.device == "cuda" and (o.cuda_epilogue or "separate") or nil
  r.conv_layers = o.conv_layers and next(o.conv_layers) and o.conv_layers or nil
  r.macs_per_agent_step = bench.macs_per_agent_step(net, tonumber(c.ppo.epochs), r.conv_layers or o.cpu_conv,
    view_range, forwards)
  r.model_macs_per_agent_step = bench.macs_per_agent_step(net, tonumber(c.ppo.epochs), nil, view_range)
  local flops = bench.update_flops(net, o.envs * o.rollout, tonumber(c.ppo.epochs), view_range)
  r.update_tflops = r.time_update > 0 and flops / r.time_update / 1e12 or 0
  if o.peak_tflops then r.mfu, r.peak_tflops = r.update_tflops / o.peak_tflops, o.peak_tflops end
  return r
end

-- ------------------------------------------------------------------ output

local function fmt_rate(x)
  if x >= 1e9 then return string.format("%.2f G", x / 1e9) end
  if x >= 1e6 then return string.format("%.2f M", x / 1e6) end
  if x >= 1e3 then return string.format("%.1f k", x / 1e3) end
  return string.format("%.0f", x)
end
bench.fmt_rate = fmt_rate

-- ---------------------------------------------------------------- scaling

function bench.scaling(o)
  local out = {}
  print(string.format("training throughput against num_envs, net %s, %s", o.net, o.device))
  print(string.format("%10s %14s %12s", "num_envs", "agent-steps/s", "update s"))
  for _, n in ipairs(o.scaling) do
    local oo = {}
    for k, v in pairs(o) do oo[k] = v end
    oo.envs = n
    local ok, r = pcall(bench.train, oo)
    if not ok then
      -- where the sweep ends (memory, the engine's limits) is a result too; larger sizes would end the same way
      print(string.format("%10d  refused: %s", n, (tostring(r):gsub("^[^\n]-%.lua:%d+: ", ""))))
      break
    end
    out[#out + 1] = { n, r.rate.median, r.time_update }
    print(string.format("%10d %14.0f %12.3f", n, r.rate.median, r.time_update))
  end
  if o.out then
    local lines = { "num_envs,agent_steps_per_s,update_s\n" }
    for _, row in ipairs(out) do lines[#lines + 1] = string.format("%d,%.1f,%.4f\n", row[1], row[2], row[3]) end
    local ok, werr = require("moonrl.util").write_output(o.out, table.concat(lines), { replace = true })
    if not ok then error("moonrl bench: --out " .. werr, 0) end
    print("wrote " .. o.out)
  end
end

return bench

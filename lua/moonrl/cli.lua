-- moonrl.cli - the `moonrl` command line. main.c runs this file with the
-- process arguments (`...`); the command itself runs as the main coroutine on
-- the loop (moonrl._main), so a failure there is the process's failure.
--
-- Exit codes: 0 success; 1 a failure while working (a run that failed, an
-- evaluation error, an error in a script); 2 a bad command line or config
-- (the message names the argument and what is accepted).
--
-- Commands that live elsewhere (bench, ctl) plug in as modules
-- `moonrl.commands.<name>` returning function(args) -> exit code, run as the
-- main coroutine like the built-in ones; they are not listed in the help here.

local core = require("moonrl.core")
local moonrl = require("moonrl")
local uv = require("luv")

local args = { ... }

local function out(...) io.stdout:write(...) io.stdout:flush() end
local function err(...) io.stderr:write(...) io.stderr:flush() end

-- ------------------------------------------------------------------ usage

local USAGE = {}
USAGE.main = [[
usage: moonrl <command> [arguments]

commands:
  train [config.lua] [--set k=v ...]   train; no file = the built-in default (configs/default.lua)
  run script.lua [args]                run an experiment script (as a coroutine on the event loop)
  eval checkpoint [--mode M ...]       evaluation table of a checkpoint (ENV_SPEC.md protocol)
  doctor [--output profile.lua]        detect the hardware; optionally write a hardware profile
  bench [env|infer|train] [--compare]  throughput; --compare runs the PyTorch reference side by side
  version                              versions of moonrl and its parts

`moonrl <command> --help` tells more.
]]
USAGE.train = [[
usage: moonrl train [config.lua] [options]

Trains the config (a Lua file returning a table; default configs/default.lua),
layered over the built-in defaults, a hardware profile and an optimisation
level. Prints the run directory, progress, and at the end a summary with an
evaluation of the trained policy (cfg.eval settings).

options:
  --set key=value     override a config key (repeatable), e.g. --set ppo.lr=1e-4
  --dir DIR           run directory (default runs/<name>-<YYYYmmdd-HHMMSS>)
  --hardware H        hardware profile: auto, cpu, cuda, debug, ci, production, or a .lua path
  --level L           optimisation level: basic, advanced, ultra, or a .lua path
  --no-eval           skip the evaluation at the end
  --help              this text
]]
USAGE.run = [[
usage: moonrl run script.lua [args...]

Runs a Lua script as a coroutine on moonrl's event loop. The script gets its
arguments in `arg` (arg[0] = the script) and as `...`; `require "moonrl"`
and `require "luv"` (the same loop) are available. The process exits when the
script and everything it started (runs, timers) are done; an error in the
script exits with status 1 and its traceback.
]]
USAGE.eval = [[
usage: moonrl eval checkpoint [options]

Evaluates a checkpoint with the continuous-survival protocol of ENV_SPEC.md
and prints the table: mode, energy/1k, efficiency, survival, deaths/1k,
food/1k, poison/1k.

options:
  --mode M      ground_truth, ground_truth_blinded, proxy_mortal, proxy, or all
                (default: the mode it was trained in)
  --envs N      environments per run (default 1024)
  --steps S     steps per run (default 4096)
  --runs R      runs, averaged (default 1)
  --seed X      evaluation seed (default 12345)
  --device D    auto, cpu or cuda (default: as trained)
  --threads T   CPU threads, 0 = all cores
  --help        this text
]]
USAGE.doctor = [[
usage: moonrl doctor [--output profile.lua]

Reports CPU cores, memory, GPUs (with nvidia-smi when present), CUDA and cuDNN
versions. With --output, writes a hardware profile for this machine that
`moonrl train --hardware profile.lua` reads.
]]
USAGE.version = [[
usage: moonrl version

Prints the versions of moonrl, LuaJIT and libuv.
]]

-- Returns a parsed table or nil, message. spec: option name -> "flag" |
-- "value" | "list" (repeatable), plus the value's description for messages.
local function parse(cmd, argv, spec, max_pos)
  local o = { _pos = {} }
  local accepted = {}
  for name in pairs(spec) do accepted[#accepted + 1] = "--" .. name end
  table.sort(accepted)
  accepted[#accepted + 1] = "--help"
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then
      o.help = true
    elseif a:sub(1, 2) == "--" and #a > 2 then
      local name, inline = a:sub(3):match("^([^=]+)=(.*)$")
      name = name or a:sub(3)
      local s = spec[name]
      if not s then
        local near = require("moonrl.util").closest("--" .. name, accepted)
        return nil, "moonrl " .. cmd .. ": unknown option '" .. a .. "': accepted " ..
          table.concat(accepted, ", ") .. (near and (" - did you mean '" .. near .. "'?") or "")
      end
      if s[1] == "flag" then
        if inline then return nil, "moonrl " .. cmd .. ": option --" .. name .. " takes no value" end
        o[name] = true
      else
        local v = inline
        if v == nil then
          i = i + 1
          v = argv[i]
          if v == nil then
            return nil, "moonrl " .. cmd .. ": option --" .. name .. " needs a value (" .. s[2] .. ")"
          end
        end
        if s[1] == "list" then
          o[name] = o[name] or {}
          table.insert(o[name], v)
        else
          o[name] = v
        end
      end
    elseif a:sub(1, 1) == "-" and #a > 1 and not tonumber(a) then
      return nil, "moonrl " .. cmd .. ": unknown option '" .. a .. "': accepted " .. table.concat(accepted, ", ")
    else
      o._pos[#o._pos + 1] = a
    end
    i = i + 1
  end
  if #o._pos > max_pos and not o.help then
    return nil, "moonrl " .. cmd .. ": unexpected argument '" .. o._pos[max_pos + 1] .. "'" ..
      (max_pos == 0 and ": this command takes no positional arguments" or
       ": accepted at most " .. max_pos .. " (see moonrl " .. cmd .. " --help)")
  end
  return o
end

local function usage_error(msg)
  err(msg, "\n")
  core.set_exit_code(2)
end

local function int_option(cmd, o, name, min)
  local v = o[name]
  if v == nil then return true end
  local n = tonumber(v)
  if not n or n ~= math.floor(n) or n < min then
    return nil, "moonrl " .. cmd .. ": --" .. name .. " " .. v .. ": expected an integer >= " .. min
  end
  o[name] = n
  return true
end

-- ------------------------------------------------------------------ train

local function print_summary(s)
  local m = s.metrics or {}
  out(string.format("\n%s: %s after %d updates, %d agent-steps, %.1f s (%.0f agent-steps/s)\n",
    s.dir, s.status, s.updates, s.agent_steps, s.seconds, s.sps))
  if s.error then out("  error: ", s.error, "\n") end
  if s.metrics then
    out(string.format("  last update: return %.3f, efficiency %.1f%%, entropy %.3f, lr %.3g\n",
      m.episode_return_mean or 0, 100 * (m.efficiency or 0), m.entropy or 0, m.lr or 0))
  end
  if s.describe then out("  engine: ", s.describe, "\n") end
  if s.checkpoint then out("  checkpoint: ", s.checkpoint, "\n") end
  local hooks = {}
  for k, v in pairs(s.hook_errors or {}) do hooks[#hooks + 1] = k .. " x" .. v end
  if #hooks > 0 then out("  hook failures: ", table.concat(hooks, ", "), "\n") end
end

local function cmd_train(argv)
  local o, e = parse("train", argv, {
    set = { "list", "key=value" }, dir = { "value", "a directory" },
    hardware = { "value", "a profile name or .lua path" }, level = { "value", "a level name or .lua path" },
    ["no-eval"] = { "flag" },
  }, 1)
  if not o then return usage_error(e) end
  if o.help then return out(USAGE.train) end
  local file = o._pos[1]
  if file and not uv.fs_stat(file) then
    return usage_error("moonrl train: config file '" .. file .. "' not found")
  end
  local cfg, notes = moonrl.resolve(file, { sets = o.set, hardware = o.hardware, level = o.level, dir = o.dir })
  if not cfg then return usage_error("moonrl train: " .. notes) end
  local run = moonrl._start(cfg, notes, {})
  out("run directory: ", run.dir, "\n")
  local s = run:wait()
  print_summary(s)
  if s.status == "error" then
    core.set_exit_code(1)
    return
  end
  if o["no-eval"] or not s.checkpoint then return end
  out(string.format("\nevaluation (%d envs x %d steps x %d runs):\n", cfg.eval.num_envs, cfg.eval.steps, cfg.eval.runs))
  local r, ee = moonrl.evaluate(run)
  if not r then
    err("moonrl train: evaluation failed: ", ee, "\n")
    core.set_exit_code(1)
    return
  end
  out(moonrl.eval_table({ r }), "\n")
end

-- ------------------------------------------------------------------- eval

local MODES = { "ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy" }

local function cmd_eval(argv)
  local o, e = parse("eval", argv, {
    mode = { "value", "a mode or all" }, envs = { "value", "an integer >= 1" },
    steps = { "value", "an integer >= 1" }, runs = { "value", "an integer >= 1" },
    seed = { "value", "an integer >= 0" }, device = { "value", "auto, cpu or cuda" },
    threads = { "value", "an integer >= 0" },
  }, 1)
  if not o then return usage_error(e) end
  if o.help then return out(USAGE.eval) end
  local path = o._pos[1]
  if not path then return usage_error("moonrl eval: missing the checkpoint: moonrl eval <checkpoint> [options]") end
  if not uv.fs_stat(path) then return usage_error("moonrl eval: checkpoint '" .. path .. "' not found") end
  for _, spec in ipairs({ { "envs", 1 }, { "steps", 1 }, { "runs", 1 }, { "seed", 0 }, { "threads", 0 } }) do
    local ok, ie = int_option("eval", o, spec[1], spec[2])
    if not ok then return usage_error(ie) end
  end
  if o.device and o.device ~= "auto" and o.device ~= "cpu" and o.device ~= "cuda" then
    return usage_error("moonrl eval: --device " .. o.device .. ": accepted auto, cpu, cuda")
  end
  local modes = { o.mode or false }   -- false: the mode it was trained in
  if o.mode == "all" then
    modes = MODES
  elseif o.mode ~= nil then
    local known = false
    for _, m in ipairs(MODES) do known = known or m == o.mode end
    if not known then
      local near = require("moonrl.util").closest(o.mode, MODES)
      return usage_error("moonrl eval: --mode " .. o.mode .. ": accepted " .. table.concat(MODES, ", ") ..
        ", all" .. (near and (" - did you mean " .. near .. "?") or ""))
    end
  end
  local rows = {}
  for _, mode in ipairs(modes) do
    local r, ee = moonrl.evaluate(path, {
      mode = mode or nil, num_envs = o.envs, steps = o.steps, runs = o.runs, seed = o.seed,
      device = o.device, threads = o.threads,
    })
    if not r then
      err("moonrl eval: ", ee, "\n")
      core.set_exit_code(1)
      return
    end
    rows[#rows + 1] = r
  end
  out(moonrl.eval_table(rows), "\n")
end

-- ------------------------------------------------------------------ doctor

-- Runs a program and returns its stdout, or nil, why (not found, failed, timed out).
local function capture(cmd, argv, timeout_ms)
  return moonrl._await("capture", function(done)
    local pipe = uv.new_pipe(false)
    local chunks, exited, eof, code = {}, false, false, nil
    local timer = uv.new_timer()
    local handle
    local function finish()
      if not (exited and eof) then return end
      timer:close()
      if code == 0 then done(table.concat(chunks)) else done(nil, cmd .. " exited with " .. tostring(code)) end
    end
    local spawn_err
    handle, spawn_err = uv.spawn(cmd, { args = argv, stdio = { nil, pipe, nil } }, function(c)
      code = c
      exited = true
      handle:close()
      finish()
    end)
    if not handle then
      pipe:close()
      timer:close()
      return done(nil, tostring(spawn_err))
    end
    timer:start(timeout_ms, 0, function()
      if not exited then handle:kill("sigkill") end
    end)
    pipe:read_start(function(rerr, data)
      if data then
        chunks[#chunks + 1] = data
      else
        pipe:close()
        eof = true
        finish()
      end
    end)
  end)
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local t = f:read("*a")
  f:close()
  return t
end

local function cuda_version()
  local j = read_file("/usr/local/cuda/version.json")
  local v = j and j:match('"cuda"%s*:%s*{[^}]-"version"%s*:%s*"([^"]+)"')
  if v then return v end
  local t = read_file("/usr/local/cuda/version.txt")
  v = t and t:match("CUDA Version%s+([%d%.]+)")
  if v then return v end
  -- Toolkits installed from wheels have neither file; the runtime header says it.
  local h = read_file("/usr/local/cuda/include/cuda_runtime_api.h")
  local n = h and tonumber(h:match("#define%s+CUDART_VERSION%s+(%d+)"))
  return n and string.format("%d.%d (toolkit headers)", math.floor(n / 1000), math.floor(n % 1000 / 10)) or nil
end

local function cudnn_version()
  for _, dir in ipairs({ "/usr/local/cuda/include", "/usr/include", "/usr/include/x86_64-linux-gnu" }) do
    local h = read_file(dir .. "/cudnn_version.h")
    if h then
      local a, b, c = h:match("CUDNN_MAJOR%s+(%d+)"), h:match("CUDNN_MINOR%s+(%d+)"), h:match("CUDNN_PATCHLEVEL%s+(%d+)")
      if a then return a .. "." .. (b or "0") .. "." .. (c or "0") end
    end
  end
  return nil
end

local function fmt_bytes(b)
  if not b then return "unknown" end
  return string.format("%.1f GiB", b / 2 ^ 30)
end

local function cmd_doctor(argv)
  local o, e = parse("doctor", argv, { output = { "value", "a .lua path" } }, 0)
  if not o then return usage_error(e) end
  if o.help then return out(USAGE.doctor) end
  if o.output and not o.output:match("%.lua$") then
    return usage_error("moonrl doctor: --output " .. o.output .. ": expected a path ending in .lua")
  end
  local hw = moonrl.detect()
  local cpu = uv.cpu_info() or {}
  out("moonrl ", moonrl.version, "\n")
  out(string.format("cpu:     %d cores usable%s\n", hw.cores, cpu[1] and (" (" .. cpu[1].model .. ")") or ""))
  out("memory:  ", fmt_bytes(hw.memory), " (/proc/meminfo)\n")
  out("gpus:    ", hw.gpus, " usable by this build (mr_cuda_device_count)\n")
  local gpus = {}
  local smi, why = capture("nvidia-smi", { "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader" }, 10000)
  if smi then
    for line in smi:gmatch("[^\n]+") do
      local name, mem, cap = line:match("^%s*(.-)%s*,%s*(.-)%s*,%s*(.-)%s*$")
      if name then
        gpus[#gpus + 1] = { name = name, memory = mem, compute_cap = cap }
        out(string.format("  gpu %d: %s, %s, compute capability %s\n", #gpus - 1, name, mem, cap))
      end
    end
  else
    out("  nvidia-smi: not available (", why, ")\n")
  end
  out("cuda:    ", cuda_version() or "not found", "\n")
  out("cudnn:   ", cudnn_version() or "not found", "\n")
  if hw.gpus == 0 and #gpus > 0 then
    out("note: nvidia-smi sees a GPU but this build cannot use it (built without CUDA, or no driver access)\n")
  end

  if o.output then
    local on_gpu = hw.gpus > 0
    local cap = gpus[1] and tonumber(gpus[1].compute_cap) or 0
    local profile = {
      device = on_gpu and "cuda" or "cpu",
      threads = 0,
      env = { num_envs = on_gpu and "auto" or 64 },
      policy = not on_gpu and { conv_channels = { 16, 32 }, hidden = 128, critic_hidden = 128 } or nil,
      ppo = not on_gpu and { rollout_steps = 64 } or nil,
      precision = on_gpu and (cap >= 8 and "bf16" or "fp16") or nil,
    }
    local ok, verr = moonrl.config.validate(profile, { partial = true })
    if not ok then
      err("moonrl doctor: the detected profile does not validate (a bug): ", verr, "\n")
      core.set_exit_code(1)
      return
    end
    local header = "Hardware profile written by `moonrl doctor` on " .. os.date("%Y-%m-%d") .. ": " ..
      hw.cores .. " cores, " .. fmt_bytes(hw.memory) ..
      (gpus[1] and (", " .. gpus[1].name .. " (" .. gpus[1].memory .. ")") or ", no GPU") ..
      ".\nUse it with: moonrl train --hardware " .. o.output
    local text = moonrl.config.serialize(profile, { header = header })
    local f, ferr = io.open(o.output, "w")
    if not f then
      err("moonrl doctor: cannot write ", o.output, ": ", tostring(ferr), "\n")
      core.set_exit_code(1)
      return
    end
    f:write(text)
    f:close()
    out("profile: ", o.output, "\n")
  end
end

-- -------------------------------------------------------------------- run

local function cmd_run(argv)
  local script = argv[1]
  if script == nil or script == "--help" or script == "-h" then
    if script == nil then return usage_error("moonrl run: missing the script: moonrl run script.lua [args...]") end
    return out(USAGE.run)
  end
  if not uv.fs_stat(script) then return usage_error("moonrl run: script '" .. script .. "' not found") end
  local chunk, lerr = loadfile(script)
  if not chunk then
    err("moonrl run: ", lerr, "\n")
    core.set_exit_code(1)
    return
  end
  local sargs = { [0] = script }
  for i = 2, #argv do sargs[i - 1] = argv[i] end
  rawset(_G, "arg", sargs)
  return chunk(unpack(sargs, 1, #sargs))
end

-- ---------------------------------------------------------------- version

local function cmd_version(argv)
  local o, e = parse("version", argv, {}, 0)
  if not o then return usage_error(e) end
  if o.help then return out(USAGE.version) end
  out("moonrl ", moonrl.version, "\n")
  out(jit and jit.version or _VERSION, "\n")
  out("libuv ", uv.version_string(), "\n")
end

-- --------------------------------------------------------------- dispatch

local COMMANDS = { train = cmd_train, run = cmd_run, eval = cmd_eval, doctor = cmd_doctor, version = cmd_version }

local name = args[1]
if name == nil then
  err(USAGE.main)
  core.set_exit_code(2)
  return
end
if name == "--help" or name == "-h" or name == "help" then
  local topic = args[2]
  out(topic and USAGE[topic] or USAGE.main)
  return
end
if name == "--version" then name = "version" end
local fn = COMMANDS[name]
if not fn then
  local ok, ext = pcall(require, "moonrl.commands." .. name)
  if ok and type(ext) == "function" then
    fn = function(a) local code = ext(a) if type(code) == "number" then core.set_exit_code(code) end end
  elseif ok and type(ext) == "table" and type(ext.run) == "function" then
    fn = function(a) local code = ext.run(a) if type(code) == "number" then core.set_exit_code(code) end end
  elseif not ok and not tostring(ext):find("module 'moonrl.commands." .. name .. "' not found", 1, true) then
    core.report("cannot load command " .. name, tostring(ext))
    core.set_exit_code(1)
    return
  end
end
if not fn then
  local known = { "train", "run", "eval", "doctor", "version" }
  local near = require("moonrl.util").closest(name, known)
  usage_error("moonrl: unknown command '" .. name .. "': accepted " .. table.concat(known, ", ") ..
    (near and (" - did you mean '" .. near .. "'?") or "") .. " (moonrl --help)")
  return
end
local rest = {}
for i = 2, #args do rest[#rest + 1] = args[i] end
moonrl._main(fn, rest)

-- `moonrl doctor`: what this machine has (cores, memory, GPUs, CUDA and cuDNN
-- versions) and, with --output, a hardware profile for it.

local cmdline = require("moonrl.cli.cmdline")
local util = require("moonrl.util")

local doctor = {
  name = "doctor",
  order = 40,
  usage = "doctor [--output profile.lua]",
  summary = "detect the hardware; optionally write a hardware profile",
  help = [[
usage: moonrl doctor [--output profile.lua]

Reports CPU cores, memory, GPUs (with nvidia-smi when present), CUDA and cuDNN
versions. With --output, writes a hardware profile for this machine that
`moonrl train --hardware profile.lua` reads.
]],
}

local out, err, usage_error = cmdline.out, cmdline.err, cmdline.usage_error

-- Runs a program and returns its stdout, or nil, why (not found, failed, timed out).
local function capture(cmd, argv, timeout_ms)
  local uv = require("luv")
  return require("moonrl.runtime.tasks").await("capture", function(done)
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


local function cuda_version()
  local j = util.read_file("/usr/local/cuda/version.json")
  local v = j and j:match('"cuda"%s*:%s*{[^}]-"version"%s*:%s*"([^"]+)"')
  if v then return v end
  local t = util.read_file("/usr/local/cuda/version.txt")
  v = t and t:match("CUDA Version%s+([%d%.]+)")
  if v then return v end
  -- Toolkits installed from wheels have neither file; the runtime header says it.
  local h = util.read_file("/usr/local/cuda/include/cuda_runtime_api.h")
  local n = h and tonumber(h:match("#define%s+CUDART_VERSION%s+(%d+)"))
  return n and string.format("%d.%d (toolkit headers)", math.floor(n / 1000), math.floor(n % 1000 / 10)) or nil
end

local function cudnn_version()
  for _, dir in ipairs({ "/usr/local/cuda/include", "/usr/include", "/usr/include/x86_64-linux-gnu" }) do
    local h = util.read_file(dir .. "/cudnn_version.h")
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

function doctor.run(argv)
  local moonrl, uv = require("moonrl"), require("luv")
  local o, e = cmdline.parse("doctor", argv, { output = { "value", "a .lua path" } }, 0)
  if not o then return usage_error(e) end
  if o.help then return out(doctor.help) end
  if o.output and not o.output:match("%.lua$") then
    return usage_error("moonrl doctor: --output " .. o.output .. ": expected a path ending in .lua")
  end
  if o.output then   -- a new path or a regular file (replaced); said before the probing
    local can, why = require("moonrl.util").check_output(o.output, { replace = true })
    if not can then return usage_error("moonrl doctor: --output " .. why) end
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
      return 1
    end
    local header = "Hardware profile written by `moonrl doctor` on " .. os.date("%Y-%m-%d") .. ": " ..
      hw.cores .. " cores, " .. fmt_bytes(hw.memory) ..
      (gpus[1] and (", " .. gpus[1].name .. " (" .. gpus[1].memory .. ")") or ", no GPU") ..
      ".\nUse it with: moonrl train --hardware " .. o.output
    local text = moonrl.config.serialize(profile, { header = header })
    local written, werr = require("moonrl.util").write_output(o.output, text, { replace = true })
    if not written then
      err("moonrl doctor: --output ", werr, "\n")
      return 1
    end
    out("profile: ", o.output, "\n")
  end
end

return doctor

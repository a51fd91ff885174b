-- moonrl.runtime.hardware - what this machine has, as config's hardware =
-- "auto" sees it (moonrl.detect).
--
--   hardware.detect() -> {gpus =, cores =, memory =, cpu_bf16 =,
--                         gpu_memory_free =, gpu_memory =, fit_num_envs =,   (the GPU fields with a GPU)
--                         ranks =}   (the processes of this run: mpirun -n, srun; 1 alone)
--   hardware.cpu_description() -> "MODEL (avx2 avx512f ...)": the CPU's model name and the
--                         flags that decide the CPU kernels (printed with every benchmark figure)

local uv = require("luv")

local hardware = {}

local function meminfo_bytes()
  local f = io.open("/proc/meminfo", "r")
  if not f then return nil end
  local text = f:read("*a")
  f:close()
  local kb = text:match("MemTotal:%s*(%d+)")
  return kb and tonumber(kb) * 1024 or nil
end

local detected
function hardware.detect()
  if not detected then
    local engine = require("moonrl.engine")
    local cores = uv.available_parallelism and uv.available_parallelism() or #(uv.cpu_info() or {})
    detected = { gpus = engine.cuda_device_count(), cores = cores, memory = meminfo_bytes(),
                 cpu_bf16 = engine.cpu_bf16(), ranks = engine.ranks() }
    if detected.gpus > 0 then
      -- for env.num_envs = "auto": the card's memory and the engine's plan
      detected.gpu_memory_free, detected.gpu_memory = engine.cuda_device_memory(0)
      detected.fit_num_envs = engine.fit_num_envs
    end
  end
  return detected
end

-- The flags the CPU kernels depend on, in this order where present.
hardware.KERNEL_FLAGS = { "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16" }

function hardware.cpu_description()
  local f = io.open("/proc/cpuinfo")
  local text = f and f:read("*a") or ""
  if f then f:close() end
  local flags = {}
  for _, k in ipairs(hardware.KERNEL_FLAGS) do
    if text:find("%f[%w_]" .. k .. "%f[^%w_]") then flags[#flags + 1] = k end
  end
  return string.format("%s (%s)", text:match("model name%s*:%s*([^\n]+)") or "unknown cpu",
    #flags > 0 and table.concat(flags, " ") or "none of " .. table.concat(hardware.KERNEL_FLAGS, " "))
end

return hardware

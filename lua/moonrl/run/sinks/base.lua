-- moonrl.run.sinks.base - what the metric sinks share: options, the clock, the
-- metric fields every file carries, and a guard so that a sink never raises
-- into its caller (a failure goes to on_error instead).
--
-- Public
--   base.FIELDS                      the metrics every jsonl/csv row carries, in order
--   base.options(opts) -> opts       fills uv (require "luv"), on_error, clock
--   base.scalars(metrics) -> table   the number/boolean/string fields (FFI integers as numbers)
--   base.guard(self, what, fn, ...)  calls fn(...) and reports an error through self.on_error

local base = {}

-- mr_metrics field names (moonrl.h) every row has, null/empty when absent.
base.FIELDS = {
  "update", "agent_steps", "sps", "episode_return_mean", "episode_length_mean", "efficiency",
  "food_per_episode", "poison_per_episode", "policy_loss", "value_loss", "entropy", "approx_kl",
  "clip_fraction", "explained_variance", "lr", "grad_norm", "memory_peak_bytes",
}

local function default_on_error(msg)
  io.stderr:write("moonrl: ", tostring(msg), "\n")
end

function base.options(opts)
  opts = opts or {}
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.uv = o.uv or require("luv")
  o.on_error = o.on_error or default_on_error
  if not o.clock then
    local uv = o.uv
    o.clock = function()
      if uv.gettimeofday then
        local s, us = uv.gettimeofday()
        if s then return s + (us or 0) / 1e6 end
      end
      return os.time()
    end
  end
  return o
end

function base.scalars(m)
  local out = {}
  for k, v in pairs(m or {}) do
    local tv = type(v)
    if type(k) == "string" then
      if tv == "number" or tv == "boolean" or tv == "string" then
        out[k] = v
      elseif tv == "cdata" then
        out[k] = tonumber(v)
      end
    end
  end
  return out
end

function base.guard(self, what, fn, ...)
  local ok, err = pcall(fn, ...)
  if not ok then
    pcall(self.on_error, what .. ": " .. tostring(err))
  end
  return ok
end

return base

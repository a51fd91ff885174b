-- moonrl.run.alerts - turns one update's metrics into alerts, once per crossing.
--
-- The caller keeps `state` (start with {}) and calls check() after every
-- update with the live cfg.alerts, so a changed threshold applies at once.
-- An alert fires when a condition starts to hold and not again until it has
-- stopped holding for an update (memory: until peak memory falls back below
-- the warning level; rising from warning to critical fires the critical one).
--   sps            metrics.sps < alerts.sps_min (sps_min > 0; the first update
--                  checked is skipped: it carries warm-up and start-up costs)
--   memory         metrics.memory_peak_bytes / metrics.memory_limit_bytes
--                  reaches alerts.memory_warning / memory_critical (both
--                  metrics must be present and the limit > 0)
--   nonfinite      metrics.nonfinite set, or a loss / gradient norm not finite
--                  (when alerts.nonfinite); a run's metrics carry bad_streak
--                  (moonrl.run): then every such update fires, each one a
--                  skipped optimizer step that brings faults.max_bad_updates nearer
--   skipped_steps  metrics.skipped_steps (a running total) grew: fp16 steps
--                  skipped for inf/nan (when alerts.nonfinite; not in an
--                  update whose nonfinite alert covers them)
--
-- Public
--   alerts.check(metrics, cfg_alerts, state) -> list of
--       {level = "warning"|"critical", kind = "sps"|"memory"|"nonfinite"|"skipped_steps",
--        message = "...", update = metrics.update}

local util = require("moonrl.util")

local alerts = {}

local function num(v)
  if type(v) == "cdata" then return tonumber(v) end
  if type(v) == "number" then return v end
  if type(v) == "boolean" then return v and 1 or 0 end
  return nil
end

local finite = require("moonrl.number").finite

local function bytes(n)
  local units = { "B", "KiB", "MiB", "GiB", "TiB" }
  local i = 1
  while n >= 1024 and i < #units do n = n / 1024; i = i + 1 end
  return (i == 1 and string.format("%d %s", n, units[i])) or string.format("%.1f %s", n, units[i])
end

local function update_text(m)
  local u = num(m.update)
  return u and (" in update " .. util.fmt_number(u)) or ""
end

local NUMERIC = { "policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm", "grad_norm_policy", "grad_norm_value" }

function alerts.check(m, cfg, state)
  cfg = cfg or {}
  state = state or {}
  local out = {}
  local function fire(level, kind, message)
    out[#out + 1] = { level = level, kind = kind, message = message, update = num(m.update) }
  end

  -- throughput
  local sps_min = num(cfg.sps_min) or 0
  local sps = num(m.sps)
  state.checked = (state.checked or 0) + 1
  if sps_min > 0 and sps and state.checked > 1 then
    if sps < sps_min then
      if not state.sps_low then
        state.sps_low = true
        fire("warning", "sps", string.format("throughput %s agent-steps/s%s is below alerts.sps_min = %s",
          util.fmt_number(math.floor(sps + 0.5)), update_text(m), util.fmt_number(sps_min)))
      end
    else
      state.sps_low = false
    end
  elseif sps_min <= 0 then
    state.sps_low = false
  end

  -- memory
  local peak, limit = num(m.memory_peak_bytes), num(m.memory_limit_bytes)
  if peak and limit and limit > 0 then
    local ratio = peak / limit
    local warn, crit = num(cfg.memory_warning) or 0.9, num(cfg.memory_critical) or 0.95
    local level = (ratio >= crit and 2) or (ratio >= warn and 1) or 0
    local before = state.memory_level or 0
    if level > before then
      local name = level == 2 and "critical" or "warning"
      local threshold = level == 2 and crit or warn
      fire(name, "memory", string.format("memory peak %s is %.0f%% of the %s limit%s (alerts.memory_%s = %s)",
        bytes(peak), ratio * 100, bytes(limit), update_text(m), name, util.fmt_number(threshold)))
    end
    state.memory_level = level
  end

  -- numerics
  if cfg.nonfinite ~= false then
    local bad
    if num(m.nonfinite) and num(m.nonfinite) ~= 0 then bad = "the engine reported a non-finite value" end
    for _, k in ipairs(NUMERIC) do
      local v = num(m[k])
      if v and not finite(v) then
        bad = (bad and (bad .. ", ") or "") .. k .. " = " .. util.fmt_number(v)
      end
    end
    if bad then
      if not state.nonfinite or (num(m.bad_streak) or 0) > 0 then
        state.nonfinite = true
        fire("critical", "nonfinite", "non-finite loss or gradient" .. update_text(m) .. ": " .. bad)
      end
    else
      state.nonfinite = false
    end

    -- Skipped steps are fp16's overflow handling; in an update with a
    -- non-finite value (any precision) they are that update's, said above.
    local skipped = num(m.skipped_steps)
    if skipped then
      local new = skipped - (state.skipped_total or 0)
      if bad then
        state.skipping = false
      elseif new > 0 then
        if not state.skipping then
          state.skipping = true
          local scale = num(m.loss_scale)
          fire("warning", "skipped_steps", string.format("%s fp16 optimizer step%s skipped for inf/nan%s%s",
            util.fmt_number(new), new == 1 and "" or "s", update_text(m),
            scale and (" (loss scale now " .. util.fmt_number(scale) .. ")") or ""))
        end
      else
        state.skipping = false
      end
      state.skipped_total = skipped
    end
  end
  return out
end

return alerts

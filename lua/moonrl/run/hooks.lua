-- moonrl.run.hooks - calling a run's Lua hooks (cfg.hooks.*) on the loop
-- thread: what a run in this process (moonrl.run) and a run of several
-- ranks launched from it (moonrl.run.launched) share.
--
-- A failing hook is reported with its traceback the first time, then every
-- REPORT_EVERY failures; training goes on. After faults.max_hook_failures
-- failures in a row of the same function the hook is disabled for the rest
-- of the run, said once (stderr and the log). A new function set in its place
-- starts with no failures, so setting it again enables it.
--
--   hooks.state() -> state                     the counts of one run
--   hooks.call(state, ctx, name, ...)          calls cfg.hooks[name](...) if set
--       ctx = { cfg =, dir =, update = n, log = function(line) }   (log: the run's log)
--   hooks.failures(state) -> { [name] = n }    for the summary's hook_errors
--   hooks.episode_stats(m) -> t | nil          what on_episode_stats gets for the
--                                              update's metrics (nil: no episode ended)

local core = require("moonrl.core")
local sandbox = require("moonrl.sandbox")

local hooks = {}

hooks.REPORT_EVERY = 100

local function traceback(e)
  return debug.traceback(tostring(e), 2)
end

function hooks.state()
  return { failures = {}, streak = {}, disabled = {} }
end

function hooks.failures(state)
  local out = {}
  for k, v in pairs(state.failures) do out[k] = v end
  return out
end

function hooks.call(state, ctx, name, ...)
  local fn = ctx.cfg.hooks and ctx.cfg.hooks[name]
  if type(fn) ~= "function" or state.disabled[name] == fn then return end
  local ok, err
  if sandbox.is_bounded(fn) then
    ok, err = sandbox.call(fn, ...)   -- from a live tweak file: under its limits
  else
    ok, err = xpcall(fn, traceback, ...)
  end
  if ok then return end
  local n = (state.failures[name] or 0) + 1
  state.failures[name] = n
  -- failures of the function in force: a new one starts again from 0
  local streak = state.streak[name]
  if not streak or streak.fn ~= fn then
    streak = { fn = fn, n = 0 }
    state.streak[name] = streak
  end
  streak.n = streak.n + 1
  local max = ctx.cfg.faults.max_hook_failures or 0
  local where = "hooks." .. name .. " failed (" .. ctx.dir .. ", update " .. ctx.update .. ")"
  if n == 1 then
    core.report(where, tostring(err) .. "\n(training goes on; further failures of this hook are counted and " ..
      (max > 0 and ("it is disabled after " .. max .. " (faults.max_hook_failures)")
        or ("reported every " .. hooks.REPORT_EVERY)) .. ")")
  elseif n % hooks.REPORT_EVERY == 0 then
    core.report(where, n .. " failures so far; latest: " .. tostring(err):match("^[^\n]*"))
  end
  ctx.log("hooks." .. name .. " failed: " .. tostring(err):match("^[^\n]*"))
  if max > 0 and streak.n >= max then
    state.disabled[name] = fn
    local msg = "hooks." .. name .. " failed " .. streak.n .. " times: disabled for the rest of this run " ..
      "(faults.max_hook_failures = " .. max .. "; setting the hook again enables it); training goes on"
    ctx.log(msg)
    core.report("run " .. ctx.dir, msg)
  end
end

function hooks.episode_stats(m)
  if not (m.episodes and m.episodes > 0) then return nil end
  return {
    update = m.update, episodes = m.episodes,
    return_mean = m.episode_return_mean, return_min = m.episode_return_min,
    return_max = m.episode_return_max, length_mean = m.episode_length_mean,
    food = m.food_per_episode, poison = m.poison_per_episode,
    efficiency = m.efficiency, deaths = m.deaths,
  }
end

return hooks

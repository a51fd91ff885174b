-- moonrl.runtime.shutdown - what the process stops on its way out, and how.
--
-- The runs a process trains and the other things a stop signal stops (a
-- sweep) are registered here. On the way out (a stop signal, the main
-- script's error) every live run stops after its update in progress with a
-- final checkpoint, and once the last one has closed its files the loop
-- stops and the process exits with `code`. Asked again meanwhile, it exits
-- at once: the last complete checkpoint stays as it is (they are written
-- atomically).
--
--   shutdown.stop_all(code, reason)     stop everything, then exit `code`
--   shutdown.stopping() -> {code =, reason =} | nil   once stop_all ran
--   shutdown.add_run(run, note)         a run that trains (installs the signal handlers);
--                                       note(msg): a line in its train.log
--   shutdown.run_ended(run)             ... and has ended
--   shutdown.track(obj, how)            something else a stop signal stops (a sweep:
--                                       obj:stop{reason =}, obj:checkpoint(), obj.dir;
--                                       how = {note = fn(msg), abort = fn()}: the second signal)
--   shutdown.untrack(obj)               ... once it has ended
--   shutdown.runs() -> list of the runs still going
--   shutdown.on_run(fn)                 fn(run) as each run starts from now on, once registered;
--                                       it may return a function, called as that run ends. For
--                                       what serves a run from above the run layer (the
--                                       dashboard of a run with dashboard = true), which
--                                       announces its runs only here

local core = require("moonrl.core")

local shutdown = {}

local stopping = nil   -- { code =, reason = } once the process is on its way out
local live = {}        -- run -> true while it trains
local tracked = {}     -- what else a stop signal stops (a sweep) -> its {note =, abort =} while it goes
local notes = setmetatable({}, { __mode = "k" })   -- run or tracked object -> fn(msg)

function shutdown.stopping() return stopping end

function shutdown.runs()
  local out = {}
  for r in pairs(live) do out[#out + 1] = r end
  return out
end

local function exit_when_idle()
  if stopping and not next(live) and not next(tracked) then core.shutdown(stopping.code) end
end

function shutdown.stop_all(code, reason)
  if stopping then
    io.stderr:write("moonrl: ", reason, " again: exiting now, without waiting for the runs\n")
    for _, how in pairs(tracked) do if how.abort then pcall(how.abort) end end   -- a sweep's trials quit too
    core.exit_now(code)
    return
  end
  stopping = { code = code, reason = reason }
  if not next(live) and not next(tracked) then return core.shutdown(code) end
  for r in pairs(live) do r:stop({ reason = reason }) end
  for s in pairs(tracked) do s:stop({ reason = reason }) end
end

local function runs_list()
  local out = {}
  for r in pairs(live) do out[#out + 1] = r end
  for r in pairs(tracked) do out[#out + 1] = r end
  table.sort(out, function(a, b) return a.dir < b.dir end)
  return out
end

local function watch_signals()
  require("moonrl.runtime.signals").install({
    runs = runs_list, stop_all = shutdown.stop_all, stopping = function() return stopping ~= nil end,
    note = function(obj, msg) if notes[obj] then notes[obj](msg) end end,
  })
end

local watchers = {}   -- shutdown.on_run's functions
local enders = setmetatable({}, { __mode = "k" })   -- run -> what its watchers want called at its end

function shutdown.on_run(fn) watchers[#watchers + 1] = fn end

local function report(what, err) core.report(what, tostring(err)) end

function shutdown.add_run(run, note)
  live[run] = true
  notes[run] = note
  watch_signals()
  for _, fn in ipairs(watchers) do
    local ok, ender = pcall(fn, run)
    if not ok then report("a watcher of the run " .. tostring(run.dir) .. " failed", ender)
    elseif type(ender) == "function" then enders[run] = enders[run] or {} table.insert(enders[run], ender) end
  end
end

function shutdown.run_ended(run)
  live[run] = nil
  for _, fn in ipairs(enders[run] or {}) do
    local ok, err = pcall(fn)
    if not ok then report("a watcher of the run " .. tostring(run.dir) .. " failed at its end", err) end
  end
  enders[run] = nil
  exit_when_idle()
end

function shutdown.track(obj, how)
  tracked[obj] = how or {}
  notes[obj] = how and how.note
  watch_signals()
end

function shutdown.untrack(obj)
  tracked[obj] = nil
  exit_when_idle()
end

return shutdown

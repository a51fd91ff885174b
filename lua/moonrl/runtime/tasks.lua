-- moonrl.runtime.tasks - scripts and the CLI's commands as coroutines on the
-- host's libuv loop, and the blocking-looking calls that yield while the loop
-- goes on (run:wait(), moonrl.wait(), moonrl.evaluate()). Called outside a
-- coroutine (in a luv callback, say) they raise an error that says so.
--
--   tasks.resume(co, ...) -> ok, ...     resume with error reporting
--   tasks.spawn(fn, ...) -> coroutine    runs fn as a coroutine; errors reported
--   tasks.main(fn, ...) -> coroutine     the CLI's entry: the coroutine whose failure is
--                                        the process's failure (every run stops, exit 1;
--                                        2 when it was bad input that moonrl refused)
--   tasks.await(what, arm) -> ...        suspends the running coroutine until arm(wake)
--                                        has wake(...) called; returns what it got
--   tasks.wait(seconds)                  yields for that many seconds (moonrl.wait)
--   tasks.sleep(ms)                      the old form, in milliseconds: deprecated (moonrl.sleep)

local core = require("moonrl.core")
local util = require("moonrl.util")
local shutdown = require("moonrl.runtime.shutdown")
local uv = require("luv")

local tasks = {}

local main_co = nil

local function current()
  local co, is_main = coroutine.running()
  if co == nil or is_main then return nil end
  return co
end

local function report_co(co, err)
  -- a refusal of the user's input is its message; anything else keeps its traceback
  local tb = util.is_refusal(err) and err or core.traceback(co, tostring(err))
  if co == main_co then
    core.report("error in the main script", tb)
    main_co = nil
    -- The script is what the user ran: it failed, so the process does too,
    -- once the runs it started have stopped with their final checkpoints and
    -- closed their files (a stop already under way ends it anyway).
    -- A config or other input moonrl refused (util.refuse kind "input") is
    -- bad input, exit 2, as on the command line.
    if not shutdown.stopping() then
      shutdown.stop_all(util.is_bad_input(err) and 2 or 1, "error in the main script: " .. (tostring(err):match("^[^\n]*") or "?"))
    end
  else
    core.report("error in a coroutine", tb)
  end
end

-- Every resume of a moonrl-managed coroutine goes through here, so an error
-- is reported with the coroutine's own traceback wherever it was resumed from.
function tasks.resume(co, ...)
  local res = { coroutine.resume(co, ...) }
  if not res[1] then report_co(co, res[2]) end
  return unpack(res)
end

function tasks.spawn(fn, ...)
  if type(fn) ~= "function" then error("moonrl.spawn: expected a function, got " .. type(fn), 2) end
  local co = coroutine.create(fn)
  tasks.resume(co, ...)
  return co
end

function tasks.main(fn, ...)
  local co = coroutine.create(fn)
  main_co = co
  tasks.resume(co, ...)
  return co
end

function tasks.await(what, arm)
  local co = current()
  if not co then
    error(what .. " must be called from a coroutine (scripts run as one); " ..
      "in a callback, use moonrl.spawn(function() ... end)", 3)
  end
  local done, early = false, nil
  arm(function(...)
    if done then return end
    done = true
    if coroutine.status(co) == "suspended" then
      tasks.resume(co, ...)
    else
      early = { ... } -- fired before we yielded (synchronously)
    end
  end)
  if early then return unpack(early) end
  return coroutine.yield()
end

-- moonrl.wait(seconds): yields for that many seconds (fractions too:
-- moonrl.wait(0.5)), like every other duration moonrl takes. moonrl.sleep(ms)
-- is the old form, in milliseconds; it still works, and says once that it
-- is deprecated.
local function sleep_ms(what, ms)
  return tasks.await(what, function(wake)
    local t = uv.new_timer()
    uv.update_time()   -- count from now, not from the loop's last tick
    t:start(ms, 0, function()
      t:close()
      wake()
    end)
  end)
end

function tasks.wait(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds < 0 or seconds == math.huge then
    error("moonrl.wait: expected a number of seconds >= 0 (moonrl.wait(0.5): half a second), got " ..
      (type(seconds) == "number" and tostring(seconds) or type(seconds)) ..
      (type(seconds) == "table" and "; to wait for a run, run:wait()" or ""), 2)
  end
  return sleep_ms("moonrl.wait", math.floor(seconds * 1000 + 0.5))
end

local sleep_noted = false
function tasks.sleep(ms)
  if type(ms) ~= "number" or ms ~= ms or ms < 0 or ms == math.huge then
    error("moonrl.sleep: expected milliseconds >= 0, got " .. tostring(ms) ..
      " (moonrl.sleep is deprecated: moonrl.wait(seconds))", 2)
  end
  if not sleep_noted then
    sleep_noted = true
    local info = debug.getinfo(2, "Sl")
    local where = info and info.short_src and (info.short_src .. ":" .. (info.currentline or "?") .. ": ") or ""
    io.stderr:write("moonrl: note: ", where, "moonrl.sleep(ms) counts milliseconds and is deprecated; ",
      "use moonrl.wait(seconds), which counts seconds like every other duration ",
      "(moonrl.sleep(", tostring(ms), ") = moonrl.wait(", tostring(ms / 1000), "))\n")
  end
  return sleep_ms("moonrl.sleep", math.floor(ms))
end

return tasks

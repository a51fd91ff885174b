-- moonrl.runtime.signals - what a signal does to a moonrl process and its runs.
--
-- Installed by the first run a process starts (moonrl.train, moonrl train),
-- once; the handles are unreferenced, so they never keep the loop alive.
--
--   SIGINT, SIGTERM,    stop: every run ends the update in progress, writes a
--   SIGQUIT, SIGXCPU,   checkpoint and closes its files (train.log, metrics,
--   SIGPWR              TensorBoard), then the process exits with 128 + the
--                       signal's number: 130, 143, 131, 152, 158. `moonrl
--                       train` skips its evaluation; during one (no run
--                       training) the process says so and quits at once. A second stop signal
--                       exits at once: a checkpoint being written stays a
--                       *.tmp beside the last complete one, which is untouched.
--   SIGUSR1             every run writes a checkpoint and goes on
--   SIGHUP              handlers.sighup: re-reads what was registered
--                       (on_reread: the live tweak files); the runs go on
--   SIGUSR2, SIGALRM,   logged and otherwise ignored (by default they would end
--   SIGVTALRM, SIGXFSZ  the process without a checkpoint); past the file-size
--                       limit (SIGXFSZ) the write itself fails and says so
-- A stop signal the event loop does not see within 2 s (a hook, a timer or a
-- script that has not returned holds the loop) ends the process from a
-- watchdog thread with the same exit code and a message saying why, without
-- a final checkpoint (src/host/signal_watchdog.c).
-- Left alone: SIGPIPE (main.c ignores it: a closed pipe is a write error),
-- SIGPROF (LuaJIT's profiler uses it), SIGCHLD, SIGWINCH, SIGURG, SIGCONT
-- (ignored by default), SIGTSTP, SIGTTIN, SIGTTOU (they pause the process,
-- SIGCONT resumes it), the signals of a bug (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
-- SIGABRT, SIGTRAP, SIGSYS) and SIGKILL, SIGSTOP, which no process can catch.
-- For those that end the process, checkpoints are written atomically (temp
-- file, fsync, rename): the newest complete *.mrck in RUN_DIR/checkpoints
-- loads whatever moment the process died at.
--
-- Public
--   signals.install(host)    host = { runs = fn() -> list of live runs,
--                                     stop_all = fn(code, reason),
--                                     stopping = fn() -> true once stop_all ran,
--                                     note = fn(run, msg): a line in its log }
--                            a listed object with a string `stop_note` does not
--                            train (a dashboard): a stop signal says that note for
--                            it instead of "stopping after the update in progress"
--                            (moonrl.runtime.shutdown: stops every run, exits `code`
--                            once their files are closed; called again, exits at once)
--   signals.handlers[name](ctx)   what signal `name` ("sighup", ...) does; ctx =
--                            { name =, code = 128 + its number, runs = list of live
--                              runs, note = fn(msg): stderr and each run's train.log,
--                              host = host }. Replace or wrap an entry to change it.
--   signals.on_reread(fn)    fn() -> n: SIGHUP calls it and says it re-read n files
--                            (moonrl.run registers moonrl.run.live.reread); once per fn
--   signals.exit_code() -> 128 + n of the first stop signal received, or nil
--   signals.code(name) -> 128 + the signal's number

local uv = require("luv")
local core = require("moonrl.core")

local signals = {}

-- How long a stop signal may wait for the loop before the process ends
-- without it (a hook or script that does not return: signal_watchdog.c).
signals.WATCHDOG_MS = 2000

local STOP = { "sigint", "sigterm", "sigquit", "sigxcpu", "sigpwr" }
local IGNORE = { "sigusr2", "sigalrm", "sigvtalrm", "sigxfsz" }

local received_stop = nil   -- exit code of the first stop signal

function signals.code(name)
  local n = uv.constants and uv.constants[name:upper()]
  return n and (128 + n) or nil
end

function signals.exit_code() return received_stop end

local function stop(ctx)
  received_stop = received_stop or ctx.code
  -- what trains (a run, a sweep) stops after its update; what does not (a
  -- dashboard: its stop_note says what a stop does to it) just closes
  local training, notes = 0, {}
  for _, r in ipairs(ctx.runs) do
    if type(r.stop_note) == "string" then notes[#notes + 1] = r.stop_note else training = training + 1 end
  end
  if training > 0 and not ctx.host.stopping() then
    io.stderr:write("\nmoonrl: ", ctx.name:upper(), ": stopping after the update in progress (final checkpoint); ",
      ctx.name:upper(), " again to quit now\n")
  elseif #notes > 0 and not ctx.host.stopping() then
    io.stderr:write("\nmoonrl: ", ctx.name:upper(), ": ", table.concat(notes, "; "), "\n")
  elseif #ctx.runs == 0 then
    -- nothing to checkpoint: what is left (an evaluation, say) is abandoned;
    -- every run directory is already complete and closed
    io.stderr:write("\nmoonrl: ", ctx.name:upper(), ": quitting: nothing is training (an evaluation in progress ",
      "is abandoned; `moonrl eval RUN_DIR` evaluates a finished run)\n")
  end
  ctx.host.stop_all(ctx.code, ctx.name:upper())
end

signals.handlers = {}
for _, name in ipairs(STOP) do signals.handlers[name] = stop end

signals.handlers.sigusr1 = function(ctx)
  if #ctx.runs == 0 then return ctx.note("SIGUSR1: no run to checkpoint") end
  ctx.note("SIGUSR1: writing a checkpoint (the run goes on)")
  for _, r in ipairs(ctx.runs) do r:checkpoint() end
end

-- What SIGHUP re-reads, registered from above (moonrl.run: the live tweak
-- files), in the order registered.
local rereaders = {}

function signals.on_reread(fn)
  if type(fn) ~= "function" then error("signals.on_reread: expected a function() -> count, got " .. type(fn), 2) end
  for _, f in ipairs(rereaders) do if f == fn then return end end
  rereaders[#rereaders + 1] = fn
end

-- The place to re-read whatever a running job reads live.
signals.handlers.sighup = function(ctx)
  local n = 0
  for _, fn in ipairs(rereaders) do n = n + (fn() or 0) end
  if n > 0 then
    ctx.note("SIGHUP: re-read " .. n .. " live tweak file" .. (n == 1 and "" or "s") .. " (the run goes on)")
    return
  end
  ctx.note("SIGHUP: nothing to re-read (the run goes on)")
end

for _, name in ipairs(IGNORE) do
  signals.handlers[name] = function(ctx)
    ctx.note(ctx.name:upper() .. ": ignored (the run goes on)")
  end
end

local installed = nil

local function context(name, host)
  local runs = host.runs()
  return {
    name = name, code = signals.code(name), runs = runs, host = host,
    note = function(msg)
      local function say() io.stderr:write("moonrl: ", msg, "\n"); io.stderr:flush() end
      local console
      for _, r in ipairs(runs) do
        local c = r.console_sink
        if c and c.aside and c.drawn then console = c; break end
      end
      -- on a terminal, the note on a line of its own and the progress bar redrawn after it
      if not (console and pcall(console.aside, console, say)) then say() end
      for _, r in ipairs(runs) do host.note(r, msg) end
    end,
  }
end

function signals.install(host)
  if installed then return end
  installed = {}
  local names = {}
  for name in pairs(signals.handlers) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local sig = uv.new_signal()
    local stopping = false
    for _, s in ipairs(STOP) do stopping = stopping or s == name end
    local ok = pcall(sig.start, sig, name, function()
      if stopping then core.signal_seen() end   -- the loop answers: the watchdog stands down
      local h = signals.handlers[name]
      if h then h(context(name, host)) end
    end)
    if ok then
      sig:unref() -- never keeps the process alive by itself
      installed[#installed + 1] = sig
    else
      sig:close() -- a platform without this signal
    end
  end
  -- A stop signal the loop does not see within WATCHDOG_MS (a hook or script
  -- that has not returned holds it) ends the process from a thread of its
  -- own, saying why (src/host/signal_watchdog.c). After the handles above:
  -- its handler goes in front of libuv's.
  local numbers = {}
  for _, name in ipairs(STOP) do
    local n = uv.constants and uv.constants[name:upper()]
    if n then numbers[#numbers + 1] = n end
  end
  if core.signal_watchdog then core.signal_watchdog({ signals = numbers, ms = signals.WATCHDOG_MS }) end
end

return signals

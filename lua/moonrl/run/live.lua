-- moonrl.run.live - live tweaks: a file watched while a run trains, whose hot
-- settings are applied at the next update boundary each time it is saved.
--
-- The file is a Lua chunk returning a table of config keys, nested or dotted
-- (moonrl.run.tweaks reads and checks it, in moonrl.sandbox's bounded
-- sandbox):
--
--   return { ppo = { lr = 1e-4, ent_coef = 0.01 }, ["log.interval"] = 10 }
--
-- On every save (and once when watching starts, and on SIGHUP) the file is
-- read and checked; only if all of it passes is anything applied, each key
-- through run:set(key, value, "live <file>") - so it is recorded like any
-- change (moonrl.run.changes). A file that fails changes nothing; the
-- message names the line and the previous values stay. Removing a key from
-- the file does not undo it: the file says what to change, not what to
-- revert to.
--
-- Watching: editors save by writing a new file and renaming it over the old
-- one, which ends a watch on the file itself; so the directory is watched
-- (uv.new_fs_event) and events for the file's name are acted on after a short
-- quiet period (several events come per save). Where an fs_event cannot be
-- had (no inotify, or the directory does not exist yet), the file is polled
-- (uv.new_fs_poll, POLL_MS). A save whose text is what was read last is not
-- read again; SIGHUP re-reads regardless.
--
-- SIGHUP: moonrl.run registers live.reread with moonrl.runtime.signals
-- (signals.on_reread), whose handler calls it.
--
--   live.watch(run, path[, opts]) -> watcher   opts.poll = true: poll, never fs_event
--   watcher:reload([force]) -> true | nil, err  read, check, apply now
--   watcher:close()
--   watcher.reads, watcher.last_error    reads that were checked; the latest one's
--                                        error (nil when it was applied)
--   live.reread() -> number of files re-read   every watched file, now (SIGHUP)
-- and, under the names they had here, what other modules hold:
--   live.read, live.check          moonrl.run.tweaks.read, .check
--   live.LIMITS                    moonrl.sandbox.LIMITS (the same table)
--   live.from_file, live.call, live.sample   moonrl.sandbox.is_bounded, .call, .sample

local sandbox = require("moonrl.sandbox")
local tweaks = require("moonrl.run.tweaks")
local util = require("moonrl.util")

local live = {}

live.DEBOUNCE_MS = 40
live.POLL_MS = 250

live.read, live.check = tweaks.read, tweaks.check
live.LIMITS = sandbox.LIMITS
live.from_file, live.call, live.sample = sandbox.is_bounded, sandbox.call, sandbox.sample

local watchers = {}   -- watcher -> true while open

local Watcher = {}
Watcher.__index = Watcher

local function uv() return require("luv") end


function Watcher:_note(msg, is_error)
  local run = self.run
  run.log:line(msg)
  if run.console and run._say then
    run:_say("moonrl: " .. msg)
  elseif is_error then
    io.stderr:write("moonrl: ", msg, "\n")
  end
end

function Watcher:reload(force)
  if self.closed then return nil, "closed" end
  local run = self.run
  local text = util.read_file(self.path)
  if not text then
    if force then self:_note("live " .. self.label .. ": cannot read " .. self.path .. " (the values in force stay)", true) end
    return nil, "cannot read " .. self.path
  end
  if text == self.last_text and not force then return true end
  self.last_text = text
  self.reads = self.reads + 1
  if run.alive and not run:alive() then return nil, "the run has finished" end
  local read, err = tweaks.read(text, self.label)
  local todo
  if read then todo, err = tweaks.check(run.cfg, read, text, self.label) end
  self.last_error = err
  if not todo then
    self:_note("live " .. self.label .. ": not applied, the values in force stay:\n  " ..
      err:gsub("\n", "\n  "), true)
    return nil, err
  end
  if #todo == 0 then
    self:_note("live " .. self.label .. ": read; nothing differs from the values in force")
    return true
  end
  if run.changes then run.changes:remember(self.label, text) end
  local names = {}
  for i, c in ipairs(todo) do names[i] = c.key end
  self:_note("live " .. self.label .. ": read; " .. table.concat(names, ", ") .. " from the next update")
  local keys = {}
  for _, c in ipairs(todo) do
    local ok, serr = run:set(c.key, c.value, "live " .. self.label)
    if not ok then
      self.last_error = serr
      -- Checked above, so only the engine side can refuse here.
      self:_note("live " .. self.label .. ": " .. c.key .. " not applied: " .. tostring(serr) ..
        (#keys > 0 and " (applied before it: " .. table.concat(keys, ", ") .. ")" or ""), true)
      return nil, serr
    end
    keys[#keys + 1] = c.key
  end
  return true
end

function Watcher:_soon(ms)
  if self.closed then return end
  self.timer:stop()
  self.timer:start(ms or live.DEBOUNCE_MS, 0, function()
    local ok, err = pcall(self.reload, self, false)
    if not ok then self:_note("live " .. self.label .. ": " .. tostring(err), true) end
  end)
end

local function split(path)
  local dir, base = path:match("^(.*)/([^/]*)$")
  if not dir then return ".", path end
  if dir == "" then dir = "/" end
  return dir, base
end

function Watcher:_start_fs_event()
  local u = uv()
  local h = u.new_fs_event()
  if not h then return false end
  local ok = h:start(self.dir, {}, function(err, name)
    if err then return end
    if name == nil or name == self.base then self:_soon() end
  end)
  if not ok then h:close() return false end
  h:unref()
  self.fs_event = h
  return true
end

function Watcher:_start_poll()
  local u = uv()
  local h = u.new_fs_poll()
  h:start(self.path, live.POLL_MS, function() self:_soon() end)
  h:unref()
  self.fs_poll = h
  -- The poll's first stat (on the thread pool) is its baseline: a save
  -- between the read at start and that stat would go unseen, so look once more.
  self:_soon(2 * live.POLL_MS)
end

function live.watch(run, path, opts)
  opts = opts or {}
  if type(path) ~= "string" or path == "" then error("live.watch: expected a file path, got " .. util.describe(path), 2) end
  local u = uv()
  local self = setmetatable({ run = run, label = path, path = path, reads = 0 }, Watcher)
  self.dir, self.base = split(path)
  self.timer = u.new_timer()
  self.timer:unref()
  if opts.poll or not self:_start_fs_event() then self:_start_poll() end
  watchers[self] = true
  run.log:line("live " .. path .. ": watching (" .. (self.fs_event and "fs_event on " .. self.dir or "polled every " ..
    live.POLL_MS .. " ms") .. "; SIGHUP re-reads it)")
  if util.read_file(path) then
    self:reload(true)
  else
    self:_note("live " .. path .. ": no such file yet; it is read when it appears")
  end
  return self
end

function Watcher:close()
  if self.closed then return end
  self.closed = true
  for _, h in ipairs({ self.timer, self.fs_event, self.fs_poll }) do
    if h and not h:is_closing() then h:close() end
  end
  watchers[self] = nil
end

-- Re-reads every watched live file now (what SIGHUP does).
function live.reread()
  local n = 0
  for w in pairs(watchers) do
    local ok, err = pcall(w.reload, w, true)
    if not ok then w:_note("live " .. w.label .. ": " .. tostring(err), true) end
    n = n + 1
  end
  return n
end

return live

-- moonrl.run.changes - the record of every change made to a running job, from
-- any source (run:set in a script, a live tweak file, the control socket),
-- with the update it is in force from and its old and new values.
--
-- Each change goes to three places once its update is known:
--   train.log       "update 12: ppo.lr 0.0003 -> 0.0001 (live tweaks.lua)"
--   metrics.jsonl   {"event":"change","update":12,"key":"ppo.lr","old":...,"new":...,"source":...}
--                   (through every sink that has an event() method; readers of
--                   metrics skip lines with an "event" field)
--   changes.lua     in the run directory: Lua that reads back (config.load_file,
--                   or changes.load) as the list of changes in order:
--                     return {
--                       { update = 12, key = "ppo.lr", value = 0.0001, old = linear(0.0003, 0.0001),
--                         source = "live tweaks.lua" },
--                     }
--                   A function value is written by its source (config.funcsource);
--                   where that cannot be had the entry has no value, a `note`
--                   saying so, and a comment.
--
-- When a change is in force: an engine key (schema hot = "engine") goes to
-- the trainer's mailbox and applies from the update after the boundary where
-- the thread takes it; the thread's "hot" event names that boundary and the
-- set it took (a sequence number: the mailbox keeps only the latest set, which
-- carries every earlier change too), so the record says exactly which update
-- first ran with it. A Lua key (hot = "lua": log, alerts, hooks) is read by the
-- loop as each update's metrics arrive, so it is in force from the next update
-- the loop handles.
--
-- changes.lua is rewritten whole at each change (small, rare: written
-- synchronously, through a temporary file and a rename).
--
--   Changes.new(run[, resume_update]) -> rec   run: dir, log (a line() method), sinks, _say, updates;
--                                    resumed from a checkpoint of resume_update: the
--                                    file's changes up to that update stay
--   rec:set(key, old, new, source, seq)  after config.set took it; seq from set_hot
--                                        (engine keys) or nil (in force from the next update)
--   rec:hot(from, refusal, seq)      the trainer's "hot" event
--   rec:finish()                     the run ended: what never reached an update is logged
--   rec:remember(path, text)         the text a function's source is read from (the
--                                    live file as loaded, not as it may be by then)
--   rec.list                         the changes recorded so far, in update order
--   Changes.display(v) -> "0.0001", "linear(0.0003, 0.0001)", "function at tweaks.lua:3"
--   Changes.load(path) -> list | nil, err

local schedule = require("moonrl.schedule")
local serialize = require("moonrl.config.serialize")
local funcsource = require("moonrl.config.funcsource")
local util = require("moonrl.util")

local Changes = {}
Changes.__index = Changes

local FILE = "changes.lua"

local function is_constant(v)
  return type(v) == "table" and v.kind == "constant" and type(v.from) == "number"
end

function Changes.display(v)
  if is_constant(v) then return util.fmt_number(v.from) end
  if type(v) == "table" and schedule.to_lua(v) then return schedule.to_lua(v) end
  if type(v) == "function" then return "function at " .. funcsource.where(v) end
  return util.fmt_value(v, 200)
end

-- The value as JSON takes it: a constant schedule is its number, a function
-- its description.
local function json_value(v)
  if is_constant(v) then return v.from end
  if type(v) == "function" then return Changes.display(v) end
  if type(v) == "table" then return util.deepcopy(v) end
  return v
end

-- The entries of an earlier session's changes.lua in force from update
-- `upto` or before, as written (their values' source text included); nil
-- when the file is there but not as this module writes it.
local function earlier(path, upto)
  local fh = io.open(path, "rb")
  if not fh then return {} end
  local text = fh:read("*a")
  fh:close()
  if not Changes.load(path) then return nil end
  local out, cur = {}, nil
  for line in text:gmatch("[^\n]+") do
    local u = line:match("^  { update = (%d+),")
    if u then
      cur = { update = tonumber(u), lines = { line } }
      out[#out + 1] = cur
    elseif cur and line:match("^    ") then
      cur.lines[#cur.lines + 1] = line
    else
      cur = nil
    end
  end
  local kept = {}
  for _, e in ipairs(out) do
    if e.update <= upto then kept[#kept + 1] = { update = e.update, raw = table.concat(e.lines, "\n") } end
  end
  return kept
end

function Changes.new(run, resume_update)
  local self = setmetatable({ run = run, list = {}, pending = {}, texts = {} }, Changes)
  self.path = run.dir .. "/" .. FILE
  if resume_update then
    -- a resumed run: the changes up to its checkpoint stay (later ones were
    -- undone with the updates after it, as metrics.jsonl's are cut)
    local kept = earlier(self.path, resume_update)
    if kept then
      self.list = kept
    else
      local to = self.path .. ".old-" .. os.date("%Y%m%d-%H%M%S")
      os.rename(self.path, to)
      run.log:line("changes.lua was not as moonrl writes it: kept as " .. to .. "; a new one starts")
    end
  end
  local okc, core = pcall(require, "moonrl.core")
  local version = okc and core.version and core.version() or "?"
  self.header = "-- moonrl " .. version .. ": the changes made to the run in this directory while it trained,\n" ..
    "-- in order, each in force from update `update` on (source: who made it). Read it back with\n" ..
    "-- require(\"moonrl.run.changes\").load(path); the run's own config is config.lua.\n"
  self:_write()
  return self
end

function Changes:remember(path, text)
  self.texts[path] = text
end

-- Lua source of v for changes.lua, decided now (the file it was read from
-- may change later): source | nil, why.
function Changes:_source(v)
  if is_constant(v) then return serialize.value(v.from) end
  if type(v) == "table" and schedule.to_lua(v) then return schedule.to_lua(v) end
  return serialize.value(v, function(path)
    local t = self.texts[path]
    if t then return t end
    local fh = io.open(path, "rb")
    if not fh then return nil end
    local text = fh:read("*a")
    fh:close()
    return text
  end)
end

function Changes:set(key, old, new, source, seq)
  local c = { key = key, old = old, new = new, source = source or "run:set", seq = seq }
  c.value_src, c.value_why = self:_source(new)
  c.old_src = self:_source(old)
  if seq then
    self.pending[#self.pending + 1] = c
  else
    self:_record(c, (self.run.updates or 0) + 1)
  end
end

function Changes:hot(from, refusal, seq)
  local keep = {}
  for _, c in ipairs(self.pending) do
    if seq == nil or c.seq <= seq then
      if refusal then
        self.run.log:line("not applied: " .. c.key .. " -> " .. Changes.display(c.new) .. " (" .. c.source ..
          "): the engine refused it: " .. refusal)
      else
        self:_record(c, from + 1)
      end
    else
      keep[#keep + 1] = c
    end
  end
  self.pending = keep
end

function Changes:finish()
  for _, c in ipairs(self.pending) do
    self.run.log:line("not applied: " .. c.key .. " -> " .. Changes.display(c.new) .. " (" .. c.source ..
      "): the run ended before another update")
  end
  self.pending = {}
end

function Changes:_record(c, update)
  c.update = update
  -- In update order: a Lua key set after an engine key may be in force
  -- earlier (the trainer runs ahead of the loop).
  local at = #self.list + 1
  while at > 1 and self.list[at - 1].update > update do at = at - 1 end
  table.insert(self.list, at, c)
  local line = "update " .. update .. ": " .. c.key .. " " .. Changes.display(c.old) .. " -> " ..
    Changes.display(c.new) .. " (" .. c.source .. ")"
  local run = self.run
  run.log:line(line)
  if run._say then run:_say("moonrl: " .. line) end
  local ev = { event = "change", update = update, key = c.key, old = json_value(c.old), new = json_value(c.new),
    source = c.source }
  require("moonrl.run.sinks").each(run.sinks, "event", run._sink_error and function(name, err)
    run:_sink_error(name, err)
  end, ev)
  local ok, err = self:_write()
  if not ok then
    local okc, core = pcall(require, "moonrl.core")
    if okc then core.report("run " .. tostring(run.dir), err .. " (the change is in force; train.log has it)") end
    run.log:line(err)
  end
end

local function entry(c)
  if c.raw then return c.raw end   -- an earlier session's, as it wrote it
  local ls = serialize.lua_string
  local parts = { "update = " .. c.update, "key = " .. ls(c.key) }
  if c.value_src then parts[#parts + 1] = "value = " .. c.value_src end
  if c.old_src then parts[#parts + 1] = "old = " .. c.old_src end
  parts[#parts + 1] = "source = " .. ls(c.source)
  local text = "  { " .. table.concat(parts, ", ")
  if not c.value_src then
    local note = "the function at " .. funcsource.where(c.new) .. " is not saved (" .. tostring(c.value_why) ..
      "): replaying this file does not reproduce it"
    text = text .. ",\n    note = " .. ls(note)
  end
  return text .. " },"
end

function Changes:_write()
  local out = { self.header, "return {" }
  for _, c in ipairs(self.list) do out[#out + 1] = entry(c) end
  out[#out + 1] = "}\n"
  return util.write_file_atomic(self.path, table.concat(out, "\n"))
end

function Changes.load(path)
  local t, err = require("moonrl.config.load").file(path)
  if not t then return nil, err end
  for i, c in ipairs(t) do
    if type(c) ~= "table" or type(c.update) ~= "number" or type(c.key) ~= "string" then
      return nil, path .. ": entry " .. i .. " is not {update = n, key = \"...\", value = ...}"
    end
  end
  return t
end

return Changes

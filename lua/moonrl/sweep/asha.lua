-- moonrl.sweep.asha - asynchronous successive halving (ASHA, Li et al. 2018):
-- which trials of a sweep go on and which stop early. Pure logic: it sees
-- numbers, never processes; moonrl.sweep feeds it and stops the trials.
--
-- Rungs sit at grace_steps * reduction^k agent-steps (k = 0, 1, ...). When a
-- trial reaches a rung its metric there is recorded, and it goes on only if
-- it is among the top max(1, floor(n / reduction)) of the n trials recorded
-- at that rung so far, itself included (ties go on: only values strictly
-- better count against it). Decisions are taken as trials arrive - nobody
-- waits for a rung to fill - so the first trial at a rung always goes on,
-- and a trial is never judged against trials that arrive later.
-- A trial whose metric is missing at a rung (no episode ended yet) goes on
-- and is not recorded there.
--
--   asha.new{ grace_steps =, reduction = 3, mode = "max" | "min", max_rungs = nil } -> scheduler
--   s:rung_steps(k) -> agent-steps of rung k (k = 1, 2, ...: grace_steps * reduction^(k-1))
--   s:decide(id, k, value) -> "continue" | "stop", why     records value at rung k, and decides
--   s:record(id, k, value)     records without deciding (a decision read back on resume)
--   s:crossed(id, steps) -> the rungs k <= `steps` not yet decided for id, in order
--   s:describe() -> "asha(grace_steps = 200000, reduction = 3)"
--   s.recorded[k] = { [id] = value, ... }

local util = require("moonrl.util")

local asha = {}

local Asha = {}
Asha.__index = Asha

function asha.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("moonrl.asha: expected a table { grace_steps =, reduction = }", 2) end
  local g, r = opts.grace_steps, opts.reduction or 3
  if type(g) ~= "number" or g <= 0 or g ~= g then
    error("moonrl.asha: grace_steps must be a number of agent-steps > 0, got " .. util.fmt_value(g), 2)
  end
  if type(r) ~= "number" or r <= 1 or r ~= r then
    error("moonrl.asha: reduction must be a number > 1, got " .. util.fmt_value(r), 2)
  end
  local mode = opts.mode or "max"
  if mode ~= "max" and mode ~= "min" then error("moonrl.asha: mode must be \"max\" or \"min\"", 2) end
  if opts.max_rungs ~= nil and (type(opts.max_rungs) ~= "number" or opts.max_rungs < 1) then
    error("moonrl.asha: max_rungs must be an integer >= 1 or nil", 2)
  end
  return setmetatable({
    kind = "asha", grace_steps = g, reduction = r, mode = mode, max_rungs = opts.max_rungs,
    recorded = {}, decided = {},
  }, Asha)
end

function Asha:describe()
  return "asha(grace_steps = " .. util.fmt_number(self.grace_steps) .. ", reduction = " ..
    util.fmt_number(self.reduction) .. ")"
end

function Asha:rung_steps(k)
  return self.grace_steps * self.reduction ^ (k - 1)
end

local function mark(self, id, k)
  self.decided[id] = self.decided[id] or {}
  self.decided[id][k] = true
end

function Asha:record(id, k, value)
  mark(self, id, k)
  if type(value) == "number" and value == value then
    self.recorded[k] = self.recorded[k] or {}
    self.recorded[k][id] = value
  end
end

function Asha:crossed(id, steps)
  local out = {}
  local done = self.decided[id] or {}
  local k = 1
  while steps >= self:rung_steps(k) and (not self.max_rungs or k <= self.max_rungs) do
    if not done[k] then out[#out + 1] = k end
    k = k + 1
  end
  return out
end

function Asha:decide(id, k, value)
  self:record(id, k, value)
  if type(value) ~= "number" or value ~= value then
    return "continue", "no value of the metric at rung " .. k .. ": goes on"
  end
  local n, better = 0, 0
  for _, v in pairs(self.recorded[k]) do
    n = n + 1
    if (self.mode == "max" and v > value) or (self.mode == "min" and v < value) then better = better + 1 end
  end
  local keep = math.max(1, math.floor(n / self.reduction))
  local where = string.format("rung %d (%s agent-steps): %s is #%d of %d, top %d go on", k,
    util.fmt_number(self:rung_steps(k)), util.fmt_number(tonumber(string.format("%.4g", value))), better + 1, n, keep)
  if better < keep then return "continue", where end
  return "stop", where
end

return asha

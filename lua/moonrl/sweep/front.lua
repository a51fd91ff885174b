-- moonrl.sweep.front - the best result a sweep reached within each budget:
-- the Pareto front of cost (agent-steps, or seconds of training) against its
-- metric, as CARBS and PufferLib's Protein report a sweep - the best result
-- for each budget, not one winner.
--
-- Points. Every update of every trial is a result that trial had by then
-- (an anytime result): its value at update k costs the agent-steps and the
-- training seconds up to k (results.curve_add: `steps`, `seconds`, the
-- sum of the updates' time_total; results.lua's header says why that sum).
-- The value at k is the sweep's own: the mean of the trial's last `smooth`
-- values of the metric up to k (results.curve_value), and a point needs a
-- full window of `smooth` values, so that one noisy update does not make the
-- front; a finished trial with fewer values than that in all counts once, at
-- its end, with the value the table shows. A metric with no curve
-- (metric = "eval.<key>", or a function the status command cannot call) has
-- one point per finished trial: its result at its total cost. Failed trials
-- are left out (as from the best: their values are no result); running,
-- stopped early and interrupted trials count with what they reached.
--
-- The front. For a cost axis, the points sorted by cost; a point is on the
-- front when its value is strictly better (mode "max": larger; "min":
-- smaller) than every point at no more cost. So the best within budget B is
-- the last front point whose cost is <= B. Ties: at one cost, only the best
-- value (between equal values, the lower trial, then the earlier update); a
-- value that equals the best so far at a higher cost is not on the front.
-- Points without a finite value or cost are left out.
--
--   front.points(list, opts) -> points   list: trials as moonrl.sweep.plot.trials returns
--       them (status, curve, value, steps, train_seconds, trial, label, params);
--       opts.smooth. A point: { trial, label, params, update, steps, seconds, value }
--   front.pareto(points, mode, cost) -> front   cost: "steps" | "seconds"; sorted by cost
--   front.best_within(front, cost, budget) -> point | nil
--   front.rows(front, cost [, max_rows = 8]) -> { {budget =, point =}, ... }: budgets
--       at round numbers (when the front spans more than a decade 1, 2, 5 x 10^k, or,
--       where those give more than max_rows rows, 1, 3 x 10^k, then 10^k; within a
--       decade even steps of 1, 2 or 5 x 10^k), each row a point of the front that is
--       the best within its budget and not within the row before; thinned to at most
--       max_rows (evenly, the last row kept) when no grid gives so few
--   front.of_sweep(list, info) -> summary { metric, mode, smooth, points,
--       steps = { front =, rows = }, seconds = { front =, rows = } }
--   front.text(summary, keys) -> text   the two budget tables (keys: params to show)
--   front.json(summary) -> table         for `moonrl sweep status --json` (the front's
--       points without their params; the rows with them)

local results = require("moonrl.sweep.results")
local number = require("moonrl.number")
local util = require("moonrl.util")

local front = {}

local finite = number.finite

local COSTS = { "steps", "seconds" }
front.COSTS = COSTS

local function point_of(r, e, value)
  return { trial = r.trial, label = r.label or string.format("trial-%03d", r.trial), params = r.params,
    update = e.update, steps = e.steps, seconds = e.seconds, value = value }
end

function front.points(list, opts)
  local smooth = math.max(1, math.floor(tonumber(opts and opts.smooth) or 1))
  local pts = {}
  for _, r in ipairs(list) do
    if r.status ~= "failed" and r.status ~= "pending" then
      local curve = r.curve or {}
      local n = 0   -- values in the curve so far
      local last
      for i, e in ipairs(curve) do
        if e.value then
          n = n + 1
          last = i
          if n >= smooth then pts[#pts + 1] = point_of(r, e, results.curve_value(curve, smooth, i)) end
        end
      end
      local finished = r.status == "done" or r.status == "stopped"
      if last and n < smooth and finished then
        pts[#pts + 1] = point_of(r, curve[last], results.curve_value(curve, smooth, last))
      elseif not last and finished and type(r.value) == "number" then
        -- no curve of the metric: the result at the trial's total cost
        pts[#pts + 1] = point_of(r, { update = r.updates, steps = r.steps, seconds = r.train_seconds }, r.value)
      end
    end
  end
  return pts
end

local function better(a, b, mode)
  if mode == "min" then return a < b end
  return a > b
end

function front.pareto(points, mode, cost)
  cost = cost or "steps"
  local usable = {}
  for _, p in ipairs(points) do
    if finite(p[cost]) and finite(p.value) then usable[#usable + 1] = p end
  end
  table.sort(usable, function(a, b)
    if a[cost] ~= b[cost] then return a[cost] < b[cost] end
    if a.value ~= b.value then return better(a.value, b.value, mode) end
    if a.trial ~= b.trial then return a.trial < b.trial end
    return (a.update or 0) < (b.update or 0)
  end)
  local out, best = {}, nil
  for _, p in ipairs(usable) do
    if best == nil or better(p.value, best, mode) then
      out[#out + 1] = p
      best = p.value
    end
  end
  return out
end

function front.best_within(f, cost, budget)
  local found
  for _, p in ipairs(f) do
    if p[cost] <= budget then found = p else break end
  end
  return found
end

-- 1, 2 or 5 x 10^k: the smallest at or above x (x > 0)
local function nice_step(x)
  local p = 10 ^ math.floor(math.log10(x))
  for _, m in ipairs({ 1, 2, 5, 10 }) do
    if x <= m * p * (1 + 1e-12) then return m * p end
  end
  return 10 * p
end

-- the smallest budget of the grid at or above c
local function round_up(c, grid)
  if grid.ms then
    local e = math.floor(math.log10(c))
    for k = e - 1, e + 1 do
      for _, m in ipairs(grid.ms) do
        local v = k >= 0 and m * 10 ^ k or m / 10 ^ (-k)
        if v >= c * (1 - 1e-12) then return v end
      end
    end
    return 10 ^ (e + 1)
  end
  return math.ceil(c / grid.step - 1e-9) * grid.step
end

function front.rows(f, cost, max_rows)
  max_rows = max_rows or 8
  if #f == 0 then return {} end
  local lo, hi = f[1][cost], f[#f][cost]
  local grids = {}
  if lo > 0 and hi / lo > 10 then
    grids = { { ms = { 1, 2, 5 } }, { ms = { 1, 3 } }, { ms = { 1 } } }
  elseif hi > 0 then
    for _, n in ipairs({ 8, 4, 2, 1 }) do grids[#grids + 1] = { step = nice_step(hi / n) } end
  else
    grids = { { step = 1 } }   -- every cost 0
  end
  local rows
  for _, grid in ipairs(grids) do
    rows = {}
    local j = 1   -- budgets rise with the points: the best within one is found walking on
    for _, p in ipairs(f) do
      local b = round_up(p[cost], grid)
      while j < #f and f[j + 1][cost] <= b do j = j + 1 end
      if #rows == 0 or rows[#rows].point ~= f[j] then rows[#rows + 1] = { budget = b, point = f[j] } end
    end
    if #rows <= max_rows then return rows end
  end
  -- still too many: evenly spaced rows, the last (the best of all) kept
  local kept = {}
  for i = 1, max_rows do kept[i] = rows[math.floor(i * #rows / max_rows + 0.5)] end
  return kept
end

function front.of_sweep(list, info)
  info = info or {}
  local mode = info.mode == "min" and "min" or "max"
  local s = { metric = info.metric, mode = mode, smooth = tonumber(info.smooth) or 1 }
  s.points = front.points(list, { smooth = s.smooth })
  for _, cost in ipairs(COSTS) do
    local f = front.pareto(s.points, mode, cost)
    s[cost] = { front = f, rows = front.rows(f, cost) }
  end
  return s
end

local function fmt_seconds(x)
  if type(x) ~= "number" then return "-" end
  return results.fmt(x)
end

local AXIS = {
  steps = { name = "agent-steps", head = "<= steps", fmt = results.thousands },
  seconds = { name = "training seconds", head = "<= seconds", fmt = fmt_seconds },
}

function front.text(s, keys)
  keys = keys or {}
  local metric = type(s.metric) == "string" and s.metric or "metric"
  local out = {}
  for _, cost in ipairs(COSTS) do
    local rows = s[cost].rows
    if #rows > 0 then
      local ax = AXIS[cost]
      out[#out + 1] = string.format("best %s (%s) within a budget of %s (the front%s; failed trials left out):",
        metric, s.mode, ax.name, s.smooth > 1 and (": every update of every trial at the mean of its last " ..
          s.smooth .. " values") or ": every update of every trial")
      local head = { ax.head, metric, "trial", "update", "steps", "train s" }
      for _, k in ipairs(keys) do head[#head + 1] = k end
      local tab = { head }
      local right = { true, true, false, true, true, true }
      for i = 1, #keys do right[6 + i] = true end
      for _, row in ipairs(rows) do
        local p = row.point
        local line = { ax.fmt(row.budget), results.fmt(p.value), p.label, p.update and tostring(p.update) or "end",
          results.thousands(p.steps), fmt_seconds(p.seconds) }
        for _, k in ipairs(keys) do line[#line + 1] = results.fmt((p.params or {})[k]) end
        tab[#tab + 1] = line
      end
      out[#out + 1] = util.md_table(tab, right)
    end
  end
  return table.concat(out, "\n")
end

function front.json(s)
  local o = { event = "front", metric = s.metric, mode = s.mode, smooth = s.smooth }
  for _, cost in ipairs(COSTS) do
    local f, rows = {}, {}
    for i, p in ipairs(s[cost].front) do
      f[i] = { trial = p.trial, update = p.update, steps = p.steps, seconds = p.seconds, value = p.value }
    end
    for i, row in ipairs(s[cost].rows) do
      local p = row.point
      rows[i] = { budget = row.budget, trial = p.trial, label = p.label, update = p.update, steps = p.steps,
        seconds = p.seconds, value = p.value, params = p.params }
    end
    o[cost] = { front = f, rows = rows }
  end
  return o
end

return front

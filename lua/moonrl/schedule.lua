-- moonrl.schedule - values that change with training progress.
--
-- A schedule is one of
--   a number                      a constant
--   a table {kind=, from=, to=, gamma=, every=}   the form the C engine reads
--     (mr_schedule: kind, start = from, end = to, gamma, every)
--   a Lua function(progress) -> number            evaluated on the Lua side
-- and progress p is updates done / total updates, clamped to [0, 1].
--
-- The math is the C engine's (mr_schedule_value, declared in moonrl.h),
-- and schedule.value asks the engine for it rather than repeating it
-- (moonrl.engine hands its evaluator over when it loads: set_evaluator;
-- this module requires nothing above it):
--   constant  from
--   linear    (1 - p) from + p to                 (= from + (to - from) p, exact at p = 0 and 1)
--   cosine    w = (1 + cos(pi p)) / 2;  (1 - w) to + w from
--   step      from * gamma ^ floor(p / every + 1e-9), never past `to`:
--             max(v, to) when from > to (decay), min(v, to) when from < to,
--             `to` when they are equal; the 1e-9 puts p = k * every on step k
--             (0.3 / 0.1 is 2.9999999999999996 in doubles)
-- The engine accepts step schedules with 0 < gamma <= 10 and 0 < every <= 1.
-- A step schedule made without `to` gets, on normalize(), the value it
-- reaches at p = 1 (from * gamma ^ floor(1 / every + 1e-9)), which bounds nothing.
-- A function schedule cannot reach the C engine (the trainer never calls
-- Lua): the runner evaluates it at each update boundary and sends the
-- number as a constant.
--
-- Public functions
--   schedule.linear(from, to)              -> {kind="linear", from=, to=}
--   schedule.cosine(from, to)              -> {kind="cosine", from=, to=}
--   schedule.constant(v)                   -> {kind="constant", from=v, to=v}
--   schedule.step(from, gamma, every [, to]) -> {kind="step", ...}
--   schedule.is_schedule(v)                -> true | false, why
--   schedule.value(s, progress)            -> number (tables: the engine's value;
--                                             needs the moonrl binary)
--   schedule.set_evaluator(fn)             fn(s, p) -> number evaluates tables from now on
--                                             (moonrl.engine's mr_schedule_value)
--   schedule.normalize(v)                  -> table | function | nil, err
--   schedule.from_through(kind, v, q, to [, gamma, every]) -> from | nil
--                                          the `from` of the linear, cosine or step schedule
--                                          ending at `to` whose value at progress q (< 1) is v
--                                          (a resume that re-anchors a schedule, a sweep's
--                                          finish that starts one at a trial's value); nil for
--                                          another kind
--   schedule.to_lua(s)                     -> "linear(0.0003, 0.0001)" (addition:
--                                             serialize and the docs use it)
--   schedule.kinds                         -> {"constant", "linear", "cosine", "step"}
--   schedule.env()                         -> a fresh table of the constructors
--                                             (addition: config files' sandbox)

local util = require("moonrl.util")

local schedule = {}

schedule.kinds = { "constant", "linear", "cosine", "step" }

local FIELDS = {
  constant = { required = { "from" }, optional = { "to" } },
  linear = { required = { "from", "to" }, optional = {} },
  cosine = { required = { "from", "to" }, optional = {} },
  step = { required = { "from", "gamma", "every" }, optional = { "to" } },
}

local finite = require("moonrl.number").finite

local function check_arg(fname, argname, v)
  if not finite(v) then
    error(string.format("%s: %s must be a finite number, got %s",
      fname, argname, util.describe(v)), 3)
  end
end

function schedule.linear(from, to)
  check_arg("linear(from, to)", "from", from)
  check_arg("linear(from, to)", "to", to)
  return { kind = "linear", from = from, to = to }
end

function schedule.cosine(from, to)
  check_arg("cosine(from, to)", "from", from)
  check_arg("cosine(from, to)", "to", to)
  return { kind = "cosine", from = from, to = to }
end

function schedule.constant(v)
  check_arg("constant(v)", "v", v)
  return { kind = "constant", from = v, to = v }
end

function schedule.step(from, gamma, every, to)
  local name = "step(from, gamma, every, to)"
  check_arg(name, "from", from)
  check_arg(name, "gamma", gamma)
  check_arg(name, "every", every)
  if not (gamma > 0 and gamma <= 10) then error(name .. ": gamma must be > 0 and <= 10, got " .. util.fmt_number(gamma), 2) end
  if not (every > 0 and every <= 1) then error(name .. ": every must be > 0 and <= 1, got " .. util.fmt_number(every), 2) end
  if to ~= nil then check_arg(name, "to", to) end
  return { kind = "step", from = from, gamma = gamma, every = every, to = to }
end

-- true | false, why. `why` names the field and what is accepted.
function schedule.is_schedule(v)
  local tv = type(v)
  if tv == "number" then
    if finite(v) then return true end
    return false, "a constant schedule must be finite, got " .. util.fmt_number(v)
  end
  if tv == "function" then return true end
  if tv ~= "table" then
    return false, "expected a number, a schedule table or a function(progress), got " .. util.describe(v)
  end
  local kind = v.kind
  local spec = FIELDS[kind]
  if not spec then
    local msg = "kind = " .. util.fmt_value(kind) .. ": accepted " .. util.quote_list(schedule.kinds)
    local near = type(kind) == "string" and util.closest(kind, schedule.kinds)
    if near then msg = msg .. " - did you mean " .. util.fmt_value(near) .. "?" end
    return false, msg
  end
  local allowed = { kind = true }
  for _, f in ipairs(spec.required) do allowed[f] = true end
  for _, f in ipairs(spec.optional) do allowed[f] = true end
  for _, k in ipairs(util.sorted_keys(v)) do
    if not allowed[k] then
      local names = {}
      for name in pairs(allowed) do names[#names + 1] = name end
      table.sort(names)
      local msg = "unknown field " .. util.fmt_value(k) .. " in a " .. kind ..
        " schedule: accepted " .. table.concat(names, ", ")
      local near = type(k) == "string" and util.closest(k, names)
      if near then msg = msg .. " - did you mean " .. near .. "?" end
      return false, msg
    end
  end
  for _, f in ipairs(spec.required) do
    if v[f] == nil then
      return false, "a " .. kind .. " schedule needs " .. table.concat(spec.required, ", ") ..
        "; " .. f .. " is missing"
    end
  end
  for _, f in ipairs({ "from", "to", "gamma", "every" }) do
    if v[f] ~= nil and not finite(v[f]) then
      return false, f .. " must be a finite number, got " .. util.describe(v[f])
    end
  end
  if kind == "step" then
    if not (v.gamma > 0 and v.gamma <= 10) then
      return false, "gamma must be > 0 and <= 10, got " .. util.fmt_number(v.gamma)
    end
    if not (v.every > 0 and v.every <= 1) then
      return false, "every must be > 0 and <= 1 (a fraction of training), got " .. util.fmt_number(v.every)
    end
  end
  return true
end

local function clamp01(p)
  if p ~= p or p < 0 then return 0 end
  if p > 1 then return 1 end
  return p
end

-- How a table is evaluated: the engine's mr_schedule_value through the FFI,
-- set by moonrl.engine when it loads, and by moonrl.cli (the binary's entry)
-- to load the engine when first needed. Config files, validation and the
-- docs use this module where no engine is loaded, or can be.
local evaluate = nil

function schedule.set_evaluator(fn)
  if type(fn) ~= "function" then error("schedule.set_evaluator: expected a function(s, p), got " .. util.describe(fn), 2) end
  evaluate = fn
end

-- The value of schedule s at progress p (clamped to [0, 1]). A table or
-- number is evaluated by the engine itself, so what Lua reports is what the
-- trainer applies; only a function is Lua's own.
function schedule.value(s, p)
  local ts = type(s)
  if ts == "number" then return s end
  if ts == "function" then return s(clamp01(p or 0)) end
  local ok, why = schedule.is_schedule(s)
  if not ok then error("schedule.value: not a schedule: " .. why, 2) end
  if not evaluate then
    error("schedule.value: " .. s.kind .. " schedules are evaluated by the moonrl engine " ..
      "(mr_schedule_value), which is not loaded here: run inside the moonrl binary (moonrl run script.lua)", 2)
  end
  return evaluate(s, p or 0)
end

-- The formulas above, solved for `from`.
function schedule.from_through(kind, v, q, to, gamma, every)
  if kind == "linear" then return (v - to * q) / (1 - q) end
  if kind == "cosine" then
    local w = (1 + math.cos(math.pi * q)) / 2
    return (v - (1 - w) * to) / w
  end
  if kind == "step" then return v / gamma ^ math.floor(q / every + 1e-9) end
  return nil
end

-- The table form the engine reads (a fresh table), or the function itself.
function schedule.normalize(v)
  local ok, why = schedule.is_schedule(v)
  if not ok then return nil, why end
  if type(v) == "number" then return { kind = "constant", from = v, to = v } end
  if type(v) == "function" then return v end
  local n = { kind = v.kind, from = v.from, to = v.to, gamma = v.gamma, every = v.every }
  if n.kind == "constant" then n.to = n.from end
  if n.kind == "step" and n.to == nil then
    n.to = n.from * n.gamma ^ math.floor(1 / n.every + 1e-9)
  end
  return n
end

-- Lua source that the config sandbox reads back: "linear(0.0003, 0.0001)".
function schedule.to_lua(s)
  if type(s) == "number" then return util.fmt_number(s) end
  if type(s) ~= "table" then return nil end
  local f = util.fmt_number
  if s.kind == "constant" then return "constant(" .. f(s.from) .. ")" end
  if s.kind == "linear" or s.kind == "cosine" then
    return s.kind .. "(" .. f(s.from) .. ", " .. f(s.to) .. ")"
  end
  if s.kind == "step" then
    local args = f(s.from) .. ", " .. f(s.gamma) .. ", " .. f(s.every)
    if s.to ~= nil then args = args .. ", " .. f(s.to) end
    return "step(" .. args .. ")"
  end
  return nil
end

function schedule.env()
  return {
    linear = schedule.linear,
    cosine = schedule.cosine,
    constant = schedule.constant,
    step = schedule.step,
  }
end

return schedule

-- moonrl.sweep.definition - what decides a sweep's trials: the options of
-- moonrl.sweep{...} checked, and the definition (space, method, seed, number
-- of trials, resolved base config) that sweep.json keeps and a re-run
-- compares.
--
--   definition.check(spec) -> options         raises the error of a bad option
--                                             at moonrl.sweep's caller
--   definition.of(sweep) -> definition        as text: key path -> value text
--   definition.changes(old, new) -> lines     what differs, in words
--   definition.waits_at_rungs(executor, ranks) -> true | false
--                                             whether a trial can wait at ASHA's
--                                             rungs (--pause-at-steps): one on this
--                                             machine (the local executor), of one rank

local util = require("moonrl.util")
local space = require("moonrl.sweep.space")
local results = require("moonrl.sweep.results")

local definition = {}

-- executor: moonrl.sweep{executor =} ("local", "slurm", nil, a table) or the executor object
function definition.waits_at_rungs(executor, ranks)
  local name = type(executor) == "table" and executor.name or executor or "local"
  return name == "local" and (tonumber(ranks) or 1) == 1
end

-- What decides the trials, as text that sweep.json keeps and a re-run
-- compares: the space, the method (and TPE's options), the seed, the number
-- of trials and the resolved base config (key path -> value text).
local function leaf_text(v)
  if type(v) == "function" then return "<function>" end
  if type(v) == "table" and v.kind then return results.fmt(v) end   -- a schedule
  if type(v) == "number" then return util.fmt_number(v) end
  return util.fmt_value(v, 200)
end

local function flatten(t, prefix, out)
  for _, k in ipairs(util.sorted_keys(t)) do
    local v = t[k]
    local path = prefix .. tostring(k)
    if type(v) == "table" and not v.kind and type(k) == "string" and next(v) ~= nil and #v == 0 then
      flatten(v, path .. ".", out)
    else
      out[path] = leaf_text(v)
    end
  end
  return out
end

function definition.of(self)
  local base = flatten(self.base_cfg, "", {})
  base.dashboard = nil   -- whether a page is served decides nothing of the trials (and older sweep.json lack it)
  local sp = {}
  for _, k in ipairs(self.keys) do sp[k] = space.describe(self.space[k]) end
  return { space = sp, method = self.method_name or (type(self.method) == "string" and self.method or "<function>"),
    tpe = self.method_name == "tpe" and require("moonrl.sweep.tpe").describe(self.tpe) or nil,
    pbt = self.method == "pbt" and require("moonrl.sweep.pbt").describe(self.pbt) or nil,
    seed = tostring(self.seed), trials = tostring(self.trials), base = base,
    repeats = self.repeats > 1 and tostring(self.repeats) or nil, budget = self.budget and tostring(self.budget) or nil,
    finish = self.finish and tostring(self.finish) or nil,
    finish_schedules = self.finish and self.finish_schedules ~= "constant" and self.finish_schedules or nil,
    -- the results' values are of this metric: another one would rank them as if they were of it
    metric = type(self.metric) == "string" and (self.metric .. " " .. tostring(self.mode)) or nil }
end

-- The differences between an earlier run's definition and this one, as lines.
function definition.changes(old, new)
  local lines = {}
  for _, part in ipairs({ "space", "base" }) do
    local a, b = old[part], new[part]
    if type(a) == "table" then
      local keys, seen = {}, {}
      for k in pairs(a) do if not seen[k] then seen[k] = true keys[#keys + 1] = k end end
      for k in pairs(b) do if not seen[k] then seen[k] = true keys[#keys + 1] = k end end
      table.sort(keys)
      for _, k in ipairs(keys) do
        if a[k] == nil then lines[#lines + 1] = string.format("%s: added %s = %s", part, k, b[k])
        elseif b[k] == nil then lines[#lines + 1] = string.format("%s: removed %s (was %s)", part, k, tostring(a[k]))
        elseif a[k] ~= b[k] then lines[#lines + 1] = string.format("%s: changed %s: %s before, %s now", part, k, tostring(a[k]), b[k]) end
      end
    end
  end
  for _, k in ipairs({ "method", "tpe", "pbt", "seed", "trials", "repeats", "budget", "finish", "finish_schedules",
    "metric" }) do
    -- tpe, pbt: when both are of that method (else the method's line says it)
    if old[k] ~= nil and old[k] ~= new[k] and ((k ~= "tpe" and k ~= "pbt") or new[k] ~= nil) then
      lines[#lines + 1] = string.format("%s: %s before, %s now", k, tostring(old[k]), new[k])
    end
  end
  return lines
end

-- ------------------------------------------------------------- checking

function definition.check(spec)
  if type(spec) ~= "table" then error("moonrl.sweep: expected a table { base =, space =, ... }, got " .. type(spec), 3) end
  local known = { base = 1, sets = 1, hardware = 1, level = 1, space = 1, method = 1, trials = 1, parallel = 1,
    metric = 1, mode = 1, scheduler = 1, executor = 1, dir = 1, seed = 1, time_limit = 1, kill_grace = 1,
    smooth = 1, poll_ms = 1, console = 1, hooks = 1, extend = 1, repeats = 1, ranks = 1, population = 1, pbt = 1, tpe = 1,
    dashboard = 1, budget = 1, finish = 1, finish_schedules = 1, command = 1 }
  if spec.command ~= nil and (type(spec.command) ~= "string" or spec.command == "") then
    error("moonrl.sweep: command must be the text of the command that runs this sweep again (sweep.json keeps " ..
      "it; default: moonrl run SCRIPT ARGS), got " .. util.fmt_value(spec.command), 3)
  end
  for k in pairs(spec) do
    if not known[k] then
      local near = util.closest(tostring(k), util.sorted_keys(known))
      error("moonrl.sweep: unknown option " .. util.fmt_value(k) .. (near and (" - did you mean " .. near .. "?") or ""), 3)
    end
  end
  local function int_opt(name, min, default)
    local v = spec[name]
    if v == nil then return default end
    if type(v) ~= "number" or v ~= math.floor(v) or v < min then
      error("moonrl.sweep: " .. name .. " must be an integer >= " .. min .. ", got " .. util.fmt_value(v), 4)
    end
    return v
  end
  local function num_opt(name, min, default)
    local v = spec[name]
    if v == nil then return default end
    if type(v) ~= "number" or v ~= v or v < min then
      error("moonrl.sweep: " .. name .. " must be a number >= " .. min .. ", got " .. util.fmt_value(v), 4)
    end
    return v
  end
  local o = {
    parallel = int_opt("parallel", 1, 1), trials = int_opt("trials", 1, nil), smooth = int_opt("smooth", 1, 1),
    poll_ms = int_opt("poll_ms", 10, 500), time_limit = num_opt("time_limit", 0, 0),
    kill_grace = num_opt("kill_grace", 0, 30), seed = int_opt("seed", 0, nil), repeats = int_opt("repeats", 1, 1),
    ranks = int_opt("ranks", 1, 1),   -- processes per trial (docs/data-parallel.md)
    budget = num_opt("budget", 1, nil),   -- agent-steps in all (tpe or a method function)
    finish = int_opt("finish", 1, nil),   -- agent-steps the best trial trains on once the search ended
    console = spec.console ~= false, hooks = spec.hooks or {},
    dashboard = spec.dashboard == true,   -- the sweep's directory served live (moonrl.dashboard)
  }
  if spec.dashboard ~= nil and type(spec.dashboard) ~= "boolean" then
    error("moonrl.sweep: dashboard must be true or false, got " .. util.fmt_value(spec.dashboard), 3)
  end
  local method = spec.method or (spec.trials and "random" or "grid")
  if spec.population ~= nil and spec.method == nil then method = "pbt" end
  if method ~= "grid" and method ~= "random" and method ~= "pbt" and method ~= "tpe" and type(method) ~= "function" then
    error("moonrl.sweep: method must be \"grid\", \"random\", \"pbt\", \"tpe\" or a function(history, ctx) -> point, got " ..
      util.fmt_value(method), 3)
  end
  o.method = method
  if method == "pbt" then
    -- population-based training (moonrl.sweep.pbt): the whole population trains at once
    o.population = int_opt("population", 2, nil)
    if not o.population then error("moonrl.sweep: method = \"pbt\" needs population = N (2 or more members)", 3) end
    if spec.trials ~= nil and spec.trials ~= o.population then
      error("moonrl.sweep: method = \"pbt\" runs population = " .. o.population .. " members; trials cannot be given", 3)
    end
    if spec.parallel ~= nil and spec.parallel ~= o.population then
      error("moonrl.sweep: method = \"pbt\" trains all " .. o.population .. " members at once; parallel cannot be " ..
        util.fmt_value(spec.parallel), 3)
    end
    o.trials, o.parallel = o.population, o.population
    for _, k in ipairs({ "scheduler", "repeats" }) do
      if spec[k] ~= nil then error("moonrl.sweep: method = \"pbt\" takes no " .. k .. " (its exploit is its early stopping)", 3) end
    end
    if o.ranks > 1 then error("moonrl.sweep: method = \"pbt\" with ranks > 1 is not built (a member of several ranks cannot adopt weights while it runs)", 3) end
    o.pbt = require("moonrl.sweep.pbt").check(spec.pbt, spec)
  elseif spec.pbt ~= nil or spec.population ~= nil then
    error("moonrl.sweep: pbt and population are options of method = \"pbt\"", 3)
  end
  if method == "tpe" then
    -- the Tree-structured Parzen Estimator (moonrl.sweep.tpe), through the method-function path
    if not o.trials then error("moonrl.sweep: method = \"tpe\" needs trials = N (how many points it proposes)", 3) end
    o.tpe = require("moonrl.sweep.tpe").check(spec.tpe)
  elseif spec.tpe ~= nil then
    error("moonrl.sweep: tpe is an option of method = \"tpe\" (its startup, gamma, candidates)", 3)
  end
  if o.budget and method ~= "tpe" and method ~= "random" and type(method) ~= "function" then
    error("moonrl.sweep: budget (agent-steps in all) works with method = \"random\", \"tpe\" or a method " ..
      "function, which propose trials one by one; with " .. tostring(method) .. ", choose trials", 3)
  end
  o.finish_schedules = spec.finish_schedules or "constant"
  if o.finish_schedules ~= "constant" and o.finish_schedules ~= "base" then
    error("moonrl.sweep: finish_schedules must be \"constant\" (the finish keeps the trial's values) or " ..
      "\"base\" (each swept key the base schedules goes from the trial's value to the base's end ratio over " ..
      "the finish), got " .. util.fmt_value(spec.finish_schedules), 3)
  end
  if spec.finish_schedules ~= nil and not o.finish then
    error("moonrl.sweep: finish_schedules is an option of finish (agent-steps the best trial trains on)", 3)
  end
  if o.finish then
    if o.repeats > 1 then
      error("moonrl.sweep: finish with repeats = " .. o.repeats .. " is not built (the best is a setting of several " ..
        "runs, not one trial to go on with)", 3)
    end
    if o.budget and o.finish >= o.budget then
      error(string.format("moonrl.sweep: finish = %s must be less than budget = %s (the search spends the budget " ..
        "less the finish)", util.fmt_value(o.finish), util.fmt_value(o.budget)), 3)
    end
  end
  o.metric = spec.metric or "efficiency"
  if type(o.metric) ~= "string" and type(o.metric) ~= "function" then
    error("moonrl.sweep: metric must be a metrics.jsonl field name (\"efficiency\"), \"eval.<key>\" (a number " ..
      "of the trial's own evaluation) or a function(record), got " .. util.fmt_value(o.metric), 3)
  end
  -- "eval.<key>": what each trial's evaluation at its end (moonrl eval's protocol) reports
  if type(o.metric) == "string" and o.metric:sub(1, 5) == "eval." then
    local key, keys = o.metric:sub(6), {}
    for _, m in ipairs(require("moonrl.eval.table").METRICS) do keys[#keys + 1] = m.key end
    for _, k in ipairs(require("moonrl.eval.episodic").KEYS) do keys[#keys + 1] = k end
    -- the episodic protocol's counters: <counter>_per_episode, whatever the environment names them
    local known = key:match("^[%a][%w_]*_per_episode$") ~= nil
    for _, k in ipairs(keys) do known = known or k == key end
    if not known then
      error("moonrl.sweep: metric " .. util.fmt_value(o.metric) .. ": accepted eval." .. table.concat(keys, ", eval.") ..
        ", eval.<counter>_per_episode", 3)
    end
    if spec.scheduler ~= nil and not definition.waits_at_rungs(spec.executor, spec.ranks) then
      -- ASHA evaluates each trial at its rungs, where it waits
      error("moonrl.sweep: metric " .. o.metric .. " with ASHA evaluates each trial paused at its rungs, which " ..
        "needs the local executor and ranks = 1; with another executor or ranks, use a training metric", 3)
    end
    o.eval_key = key
  end
  o.mode = spec.mode or "max"
  if o.mode ~= "max" and o.mode ~= "min" then error("moonrl.sweep: mode must be \"max\" or \"min\", got " .. util.fmt_value(o.mode), 3) end
  if type(o.hooks) ~= "table" then error("moonrl.sweep: hooks must be a table of functions", 3) end
  for k, fn in pairs(o.hooks) do
    if k ~= "on_trial_start" and k ~= "on_trial_result" and k ~= "on_trial_failed" then
      error("moonrl.sweep: hooks." .. tostring(k) .. ": accepted on_trial_start, on_trial_result, on_trial_failed", 3)
    end
    if type(fn) ~= "function" then error("moonrl.sweep: hooks." .. k .. " must be a function", 3) end
  end
  if spec.extend ~= nil and type(spec.extend) ~= "boolean" then
    error("moonrl.sweep: extend must be true or false, got " .. util.fmt_value(spec.extend), 3)
  end
  o.extend = spec.extend == true
  if spec.dir ~= nil and (type(spec.dir) ~= "string" or spec.dir == "") then
    error("moonrl.sweep: dir must be a directory path", 3)
  end
  if spec.scheduler ~= nil and (type(spec.scheduler) ~= "table" or type(spec.scheduler.decide) ~= "function") then
    error("moonrl.sweep: scheduler must be moonrl.asha{...} or nil", 3)
  end
  if o.repeats > 1 and (type(method) == "function" or method == "tpe" or spec.scheduler ~= nil or o.budget) then
    error("moonrl.sweep: repeats = " .. o.repeats .. " works with method = \"grid\" or \"random\", no " ..
      "scheduler and no budget (repeats with a method function, TPE, ASHA or a budget is not built)", 3)
  end
  return o
end

return definition

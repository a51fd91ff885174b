-- moonrl.sweep.pbt - population-based training (Jaderberg et al. 2017) on a
-- sweep's trials: moonrl.sweep{ method = "pbt", population = N, pbt = {...} }.
--
-- The N trials (members) train at once. Each time a member has run another
-- `interval` updates, the driver ranks the members by the sweep's metric (the
-- mean of its last `smooth` values); a member in the bottom `fraction`
-- copies a member of the top `fraction` (exploit: its weights and its
-- explored keys) and changes those keys (explore), without restarting:
-- through the member's control socket, as `moonrl ctl` would,
--   1. the donor writes a checkpoint (ctl checkpoint), kept in DIR/pbt/;
--   2. the member takes its weights, Adam moments and PopArt (ctl adopt;
--      mr_trainer_load_learned: it keeps its own environments and progress);
--   3. the member's explored keys become the donor's, explored (ctl set,
--      source "pbt: explore");
--   4. the member writes a checkpoint, so a resume continues from the new state.
-- Each exploit is an event in DIR/results.jsonl, written as soon as the member
-- has the weights: {event = "exploit", trial, from, update (the member's, from
-- which the new state is in force), donor_update, checkpoint, old (the
-- member's keys before), donor (the donor's), new, value, donor_value}; a set
-- the member refused adds {event = "explore_refused"} (it kept its keys).
-- `moonrl sweep lineage DIR` reads them back (pbt.lineage). A driver killed
-- (SIGKILL) and run again follows the members that still run, knows every
-- recorded exploit, and goes on; a member that dies is resumed (`restarts`).
--
-- With metric = "eval.<key>", each decision first evaluates the member: it
-- writes a checkpoint, `moonrl eval` evaluates it in a child process (the
-- protocol of `moonrl eval`, the base's eval.* sizes and seed, files in
-- DIR/pbt/eval/; a "pbt_eval" event), and members are ranked by their latest
-- evaluation. Make the base's eval.num_envs and eval.steps small: every
-- member is evaluated every interval.
--
-- Options (pbt = {...}):
--   interval   updates between a member's decisions (default 10)
--   fraction   the bottom and top share of the ranking (default 0.25; at least one member each)
--   explore    { [key] = "perturb" | "resample" | function(value, rng) -> value }: hot keys
--              (schema hot; ppo.lr, ppo.ent_coef, ppo.clip, ...); "perturb" multiplies by
--              one of `factors` (a schedule: its from and to), kept inside the key's space range
--              when it has one; "resample" draws from the sweep's space; a function gets the
--              value and rng() (uniform in [0, 1), seeded from the sweep's seed)
--   factors    default { 0.8, 1.2 }
--   restarts   how often a member that died (a crash, SIGKILL, the OOM killer) is resumed from its
--              newest checkpoint over the sweep's life (default 2; 0: it is a failed trial)
--   test       "welch" (default): a member in the bottom copies the drawn donor only when the donor's
--              recent values of the metric are measurably better than its own: a one-sided Welch
--              t-test at level `alpha` over each one's last `window` values since its own last
--              exploit (fewer than 2 each: no decision yet); "none": on the ranking alone (the
--              behaviour before the test). Not applied with metric = "eval.<key>" (one value each).
--   alpha      the test's level (default 0.05)
--   window     values per member in the test (default: interval, at least 2)
--   ready      agent-steps a member trains from its start and from its last exploit before it may
--              copy again (default 0: one interval)
--   sync       true: a synchronous population (Jaderberg et al.'s synchronous variant; Ray
--              Tune's synch = True). Every member pauses at the same agent-step counts, every
--              `interval` updates of the population's largest batch (`moonrl train
--              --pause-at-steps`: exact, whatever the load or the driver's polls); once all
--              have paused there, they are ranked together, the bottom ones copy and explore,
--              and all go on. false (default): each member is looked at when it has run
--              another interval, while it trains on - a decision comes a poll later, which on a
--              run of a few seconds can be after its end
--   explore = "pb2"      every key of the space that a running member can change and that has a
--              numeric range is explored by PB2 (moonrl.sweep.pb2: a GP-UCB bandit over those keys
--              with a time-varying kernel, Parker-Holder et al. 2020) instead of perturbed;
--              explore = "perturb": those keys, perturbed by `factors`.
--              A table may also name "pb2" for some keys (each must have a numeric range).
--
--   pbt.check(spec_pbt, sweep_options) -> options | raises (at moonrl.sweep's caller)
--   pbt.new(sweep, options) -> controller;  controller:poll(trial)   after its metrics were read
--   pbt.lineage(dir) -> lineage | nil, err  the best member's history (see there)
--   pbt.replay_config(dir, lineage) -> Lua source of a plain run with that schedule

local uv = require("luv")
local util = require("moonrl.util")
local config = require("moonrl.config")
local schema = require("moonrl.config.schema")
local space = require("moonrl.sweep.space")
local results = require("moonrl.sweep.results")
local tasks = require("moonrl.runtime.tasks")

local pbt = {}

local Controller = {}
Controller.__index = Controller

function pbt.check(o, sweep_spec)
  if o == nil then o = {} end
  if type(o) ~= "table" then error("moonrl.sweep: pbt must be a table {interval =, fraction =, explore =, factors =}", 4) end
  local known = { interval = true, fraction = true, explore = true, factors = true, restarts = true, test = true,
    alpha = true, window = true, ready = true, sync = true }
  for k in pairs(o) do
    if not known[k] then
      error("moonrl.sweep: pbt." .. tostring(k) .. ": accepted interval, fraction, explore, factors, restarts, test, alpha, " ..
        "window, ready, sync", 4)
    end
  end
  local out = { interval = o.interval or 10, fraction = o.fraction or 0.25, factors = o.factors or { 0.8, 1.2 }, explore = {},
    restarts = o.restarts or 2, test = o.test or "welch", alpha = o.alpha or 0.05, ready = o.ready or 0, sync = o.sync or false }
  if type(out.sync) ~= "boolean" then
    error("moonrl.sweep: pbt.sync must be true (the members pause at the same agent-steps and are ranked together) " ..
      "or false, got " .. util.fmt_value(o.sync), 4)
  end
  if out.test ~= "welch" and out.test ~= "none" then
    error("moonrl.sweep: pbt.test must be \"welch\" (copy only on a measured difference) or \"none\", got " ..
      util.fmt_value(o.test), 4)
  end
  if type(out.alpha) ~= "number" or not (out.alpha > 0 and out.alpha < 0.5) then
    error("moonrl.sweep: pbt.alpha must be a number in (0, 0.5) (the test's level), got " .. util.fmt_value(o.alpha), 4)
  end
  if type(out.ready) ~= "number" or not (out.ready >= 0) or out.ready == math.huge then
    error("moonrl.sweep: pbt.ready must be a number of agent-steps >= 0, got " .. util.fmt_value(o.ready), 4)
  end
  if type(out.restarts) ~= "number" or out.restarts ~= math.floor(out.restarts) or out.restarts < 0 then
    error("moonrl.sweep: pbt.restarts must be a whole number >= 0 (how often a member that died is resumed), got " ..
      util.fmt_value(o.restarts), 4)
  end
  if type(out.interval) ~= "number" or out.interval ~= math.floor(out.interval) or out.interval < 1 then
    error("moonrl.sweep: pbt.interval must be a whole number of updates >= 1, got " .. util.fmt_value(o.interval), 4)
  end
  if o.window ~= nil and (type(o.window) ~= "number" or o.window ~= math.floor(o.window) or o.window < 2) then
    error("moonrl.sweep: pbt.window must be a whole number of values >= 2, got " .. util.fmt_value(o.window), 4)
  end
  out.window = o.window or math.max(2, out.interval)   -- the test needs 2 values a side
  if type(out.fraction) ~= "number" or not (out.fraction > 0 and out.fraction <= 0.5) then
    error("moonrl.sweep: pbt.fraction must be a number in (0, 0.5], got " .. util.fmt_value(o.fraction), 4)
  end
  if type(out.factors) ~= "table" or #out.factors == 0 then
    error("moonrl.sweep: pbt.factors must be a list of positive numbers, got " .. util.fmt_value(o.factors), 4)
  end
  for _, f in ipairs(out.factors) do
    if type(f) ~= "number" or not (f > 0) or f == math.huge then
      error("moonrl.sweep: pbt.factors must be a list of positive numbers, got " .. util.fmt_value(o.factors), 4)
    end
  end
  local explore = o.explore or {}
  if explore == "pb2" or explore == "perturb" then
    -- every key of the space a running member can change (with a numeric range, for pb2)
    local how, keys = explore, {}
    for k, d in pairs(sweep_spec.space or {}) do
      local e = schema.by_key[k]
      if e and e.hot and not k:match("^hooks%.") and k ~= "total_steps" and space.is_dist(d) and d.lo and d.lo ~= d.hi then
        keys[k] = how
      end
    end
    if next(keys) == nil then
      error("moonrl.sweep: pbt.explore = \"" .. how .. "\" explores the space's hot keys with a numeric range " ..
        "(uniform, loguniform, randint), and the space has none", 4)
    end
    explore = keys
  end
  if type(explore) ~= "table" or next(explore) == nil then
    error("moonrl.sweep: pbt.explore must name the hot keys to explore, e.g. { [\"ppo.lr\"] = \"perturb\" }", 4)
  end
  for k, how in pairs(explore) do
    local e = schema.by_key[k]
    if not e then
      local _, err = config.get({}, tostring(k))
      error("moonrl.sweep: pbt.explore: " .. tostring(err or ("unknown key " .. tostring(k))), 4)
    end
    if not e.hot or e.hot == false or k:match("^hooks%.") or k == "total_steps" then
      error("moonrl.sweep: pbt.explore: " .. k .. " is not a key a running member can change (the hot keys: docs/config.md)", 4)
    end
    if how ~= "perturb" and how ~= "resample" and how ~= "pb2" and type(how) ~= "function" then
      error("moonrl.sweep: pbt.explore[\"" .. k .. "\"]: accepted \"perturb\", \"resample\", \"pb2\" or a function(value, rng), got " ..
        util.fmt_value(how), 4)
    end
    if how == "pb2" then
      local _, derr = require("moonrl.sweep.pb2").dims(sweep_spec.space or {}, { k })
      if derr then error("moonrl.sweep: pbt.explore[\"" .. k .. "\"] = \"pb2\": " .. derr, 4) end
    end
    if how == "resample" and not (sweep_spec.space and sweep_spec.space[k] ~= nil) then
      error("moonrl.sweep: pbt.explore[\"" .. k .. "\"] = \"resample\" draws from the space, which has no " .. k, 4)
    end
    out.explore[k] = how
  end
  return out
end

-- The options that decide what the population does, as text for sweep.json's
-- definition (a re-run with other ones is refused unless extend = true);
-- restarts is not among them: a re-run may allow more.
function pbt.describe(o)
  local fac, ex = {}, {}
  for i, f in ipairs(o.factors) do fac[i] = util.fmt_number(f) end
  for _, k in ipairs(util.sorted_keys(o.explore)) do
    local how = o.explore[k]
    ex[#ex + 1] = k .. ":" .. (type(how) == "function" and "<function>" or how)
  end
  local text = string.format("interval=%d fraction=%s factors=%s explore=%s", o.interval, util.fmt_number(o.fraction),
    table.concat(fac, ","), table.concat(ex, ","))
  -- (the options added later only when they differ from what came before them)
  if o.test ~= "none" then
    text = text .. string.format(" test=%s alpha=%s window=%d", o.test, util.fmt_number(o.alpha), o.window)
  end
  if o.ready > 0 then text = text .. " ready=" .. util.fmt_number(o.ready) end
  if o.sync then text = text .. " sync" end
  return text
end

-- Is b measurably better than a? A one-sided Welch t-test of mean(b) > mean(a)
-- (mode "min": smaller) at level alpha. -> true | false, p-value (nil with
-- fewer than 2 values on either side)
function pbt.measured_better(a, b, mode, alpha)
  local stats = require("moonrl.eval.stats")
  local t, _, p
  if mode == "min" then t, _, p = stats.welch_greater(b, a) else t, _, p = stats.welch_greater(a, b) end
  if not t then return false, nil end
  return p < alpha, p
end

function pbt.new(sweep, o)
  local self = setmetatable({ sweep = sweep, o = o, rng = space.rng(sweep.seed or 0, 0, "pbt"),
    restarts = util.deepcopy(sweep.prev.restarts or {}) }, Controller)
  -- what an earlier run of this sweep did: every member's keys as they are now
  for _, ev in ipairs(sweep.prev.exploits or {}) do
    local t = sweep.trials_list[ev.trial]
    if t and type(ev.new) == "table" then
      for k, v in pairs(ev.new) do t.params[k] = v end
      t.pbt_next = math.max(t.pbt_next or 0, (ev.update or 0) + o.interval)
      t.pbt_exploit_update = math.max(t.pbt_exploit_update or 0, ev.update or 0)
      if t.cfg then t.pbt_ready_from = t.pbt_exploit_update * t.cfg.env.num_envs * t.cfg.ppo.rollout_steps end
    end
  end
  return self
end

-- The value of key that member t has now (its point, else its config's).
local function current(t, key)
  if t.params[key] ~= nil then return t.params[key] end
  return util.deepcopy((config.get(t.cfg, key)))
end

local function clamp_to_space(d, v)
  if space.is_dist(d) and d.lo and d.hi then return math.min(d.hi, math.max(d.lo, v)) end
  return v
end

-- The explored keys member m has now.
function Controller:_keys(m)
  local out = {}
  for k in pairs(self.o.explore) do out[k] = current(m, k) end
  return out
end

-- Member t's explored keys now (old) and after copying a donor whose keys
-- were donor_keys (Controller:_keys) when its weights were taken: those
-- values, explored (new).
function Controller:_explore(t, donor_keys)
  local old, new = {}, {}
  local pb2_new = self:_pb2_choice(t)
  for _, k in ipairs(util.sorted_keys(self.o.explore)) do
    local how, v = self.o.explore[k], donor_keys[k]
    old[k] = current(t, k)
    local d = self.sweep.space[k]
    if how == "perturb" then
      local f = self.o.factors[1 + math.floor(self.rng() * #self.o.factors)]
      if type(v) == "number" then
        new[k] = clamp_to_space(d, v * f)
        local e = schema.by_key[k]
        if e and e.type == "integer" then new[k] = math.max(1, math.floor(new[k] + 0.5)) end
      elseif type(v) == "table" and v.kind then
        local s = util.deepcopy(v)
        s.from = s.from and clamp_to_space(d, s.from * f)
        s.to = s.to and s.to * f
        new[k] = s
      else
        new[k] = v
      end
    elseif how == "pb2" then
      new[k] = pb2_new and pb2_new[k]
      if new[k] == nil then new[k] = v end
    elseif how == "resample" then
      new[k] = space.point({ [k] = d }, "random", self.sweep.seed or 0, math.floor(self.rng() * 2 ^ 31))[k]
    else
      new[k] = how(util.deepcopy(v), self.rng)
    end
  end
  return old, new
end

-- Where member m is in PB2's time: its decisions so far (pbt.sync: the population's)
function Controller:_time(m)
  if self.o.sync then return self.gen or 0 end
  return math.floor((m.updates or 0) / self.o.interval)
end

-- PB2: the keys explored by "pb2", in order, with their ranges
function Controller:_pb2_dims()
  if self.pb2_dims_cache ~= nil then return self.pb2_dims_cache or nil end
  local keys = {}
  for _, k in ipairs(util.sorted_keys(self.o.explore)) do
    if self.o.explore[k] == "pb2" then keys[#keys + 1] = k end
  end
  self.pb2_dims_cache = #keys > 0 and assert(require("moonrl.sweep.pb2").dims(self.sweep.space, keys)) or false
  return self.pb2_dims_cache or nil
end

function Controller:_pb2_x(m)
  local pb2 = require("moonrl.sweep.pb2")
  local x = {}
  for i, dim in ipairs(self:_pb2_dims()) do x[i] = pb2.to_unit(dim, current(m, dim.key)) end
  return x
end

-- At member m's decision: the interval that ended is a data point (t, x) -> change of its value
function Controller:_pb2_observe(m)
  if not self:_pb2_dims() then return end
  local v = self:_value(m)
  if v == nil or v ~= v then return end
  local t_now = self:_time(m)
  local prev = m.pb2_prev
  if prev and prev.t < t_now then
    local dy = v - prev.value
    if self.sweep.mode == "min" then dy = -dy end
    self.pb2_data = self.pb2_data or {}
    table.insert(self.pb2_data, { t = prev.t, x = prev.x, y = dy })
  end
  m.pb2_prev = { t = t_now, x = self:_pb2_x(m), value = v }
end

-- The values PB2 gives member t that is about to copy a donor: { key = value } | nil
function Controller:_pb2_choice(t)
  local dims = self:_pb2_dims()
  if not dims then return nil end
  local pb2 = require("moonrl.sweep.pb2")
  local pending = {}
  for _, m in ipairs(self.sweep.running) do
    if m ~= t and m.status == "running" then pending[#pending + 1] = self:_pb2_x(m) end
  end
  local t_now = self:_time(t)
  local x = pb2.select(self.pb2_data or {}, pending, t_now, #dims, self.rng)
  local out = {}
  for i, dim in ipairs(dims) do out[dim.key] = pb2.from_unit(dim, x[i]) end
  return out
end

-- One request to member t's control socket, from a coroutine: reply | nil, err.
local function ask(t, req) return require("moonrl.control.client").ask(t.dir, req) end

local snapshot = require("moonrl.sweep.trial_checkpoint").copy

local function json_value(v)
  if type(v) == "table" and v.kind == "constant" then return v.from end
  if type(v) == "table" and v.kind then return { kind = v.kind, from = v.from, to = v.to, gamma = v.gamma, every = v.every } end
  return v
end

-- Member t copies donor d and explores, from a coroutine; returns once done
-- (or failed: said and recorded, t trains on as it was).
function Controller:_exploit_now(t, d)
  local sweep = self.sweep
  local t_value, d_value = self:_value(t), self:_value(d)   -- the ranking's (they move on while this goes)
  t.pbt_busy = true
  local function failed(err)
    sweep:say(string.format("%s: pbt: copying %s failed: %s (it trains on as it was)", t.label, d.label, tostring(err)))
    results.append(sweep.dir, { event = "exploit_failed", trial = t.index, from = d.index, error = tostring(err) })
    t.pbt_busy = false
  end
  -- the donor's keys with the weights its checkpoint holds: read now, and the donor is
  -- not exploited itself (Controller:poll) until its checkpoint is written
  local donor_keys = self:_keys(d)
  d.pbt_lending = (d.pbt_lending or 0) + 1
  local donor_update
  local kept, err = snapshot(d, function(path)
    donor_update = tonumber(path:match("update_(%d+)%.mrck$")) or d.updates
    return string.format("%s/pbt/%s-from-%s-update_%07d.mrck", sweep.dir, t.label, d.label, donor_update)
  end)
  d.pbt_lending = d.pbt_lending - 1
  if not kept then return failed(err) end
  local abs = kept:sub(1, 1) == "/" and kept or (uv.cwd() .. "/" .. kept)
  local old, new = self:_explore(t, donor_keys)
  local adopted
  adopted, err = ask(t, { cmd = "adopt", path = abs, source = "pbt: exploit " .. d.label })
  if not adopted then return failed(err) end
  if sweep.eval_key then t.pbt_value = d_value end   -- its weights are the donor's until it is evaluated again
  -- recorded at once: a driver killed from here on leaves the exploit in
  -- the records (results.read applies a later explore_refused to it)
  local ev = { event = "exploit", trial = t.index, from = d.index, update = adopted.update, donor_update = donor_update,
    checkpoint = kept, old = {}, new = {}, donor = {}, value = t_value, donor_value = d_value }
  for k, v in pairs(old) do ev.old[k] = json_value(v) end
  for k, v in pairs(new) do ev.new[k] = json_value(v) end
  for k in pairs(new) do ev.donor[k] = json_value(donor_keys[k]) end
  results.append(sweep.dir, ev)
  local set
  set, err = ask(t, { cmd = "set", values = ev.new, source = "pbt: explore" })
  if not set then
    sweep:say(string.format("%s: pbt: explore refused: %s (it keeps its keys)", t.label, tostring(err)))
    results.append(sweep.dir, { event = "explore_refused", trial = t.index, update = adopted.update, error = tostring(err) })
    new = old
  end
  -- a resume continues from the new state. A set is in force from the member's
  -- next update: a member that ends first (an exploit decided near its end, on a
  -- loaded machine) never trained with the keys, so the record says so
  local ck, cerr = ask(t, { cmd = "checkpoint" })
  if set and not ck then
    local why = "the member ended before its explored keys took effect (" .. tostring(cerr) .. ")"
    sweep:say(string.format("%s: pbt: %s", t.label, why))
    results.append(sweep.dir, { event = "explore_refused", trial = t.index, update = adopted.update, error = why })
    new = old
  end
  for k, v in pairs(new) do t.params[k] = v end
  -- the test and the ready time count from here; PB2's next data point starts at the new keys
  t.pbt_ready_from, t.pbt_exploit_update = t.steps or 0, adopted.update
  if self:_pb2_dims() then
    t.pb2_prev = { t = self:_time(t), x = self:_pb2_x(t), value = d_value }
  end
  local parts = {}
  for _, k in ipairs(util.sorted_keys(new)) do
    parts[#parts + 1] = k .. " " .. results.fmt(old[k]) .. " -> " .. results.fmt(new[k])
  end
  sweep:say(string.format("%s: pbt: copied %s (update %d, %s %s against %s) from update %d; %s", t.label, d.label,
    donor_update, type(sweep.metric) == "string" and sweep.metric or "metric", results.fmt(d_value), results.fmt(t_value), adopted.update,
    table.concat(parts, ", ")))
  t.pbt_busy = false
end

function Controller:_exploit(t, d)
  t.pbt_busy = true
  tasks.spawn(function() self:_exploit_now(t, d) end)
end

-- Member t's process ended before its budget, not stopped by the sweep (a
-- crash, SIGKILL, the OOM killer): resumed from its newest checkpoint, at
-- most `restarts` times over the sweep's life (its re-runs too), so the
-- population keeps its size. -> true when resumed (else the sweep records
-- the failure as for any trial).
function Controller:revive(t, exit, complete)
  local sweep = self.sweep
  if complete or sweep.stopping or t.stop_why or t.timed_out then return false end
  if exit.code == 0 and exit.signal == 0 then return false end
  local n = self.restarts[t.index] or 0
  if n >= self.o.restarts then return false end
  local ck = require("moonrl.run.resume").newest(t.dir)
  if not ck then return false end
  local why = exit.signal ~= 0 and ("killed by signal " .. exit.signal .. " (" .. (exit.signal_name or "?"):upper() .. ")")
    or ("exit code " .. exit.code)
  self.restarts[t.index] = n + 1
  results.append(sweep.dir, { event = "restart", trial = t.index, error = why, update = ck.update, restart = n + 1 })
  sweep:say(string.format("%s: pbt: the member died (%s) after %s agent-steps; resuming it from its checkpoint at update %d " ..
    "(restart %d of pbt.restarts = %d)", t.label, why, results.thousands(t.steps or 0), ck.update, n + 1, self.o.restarts))
  t.status, t.job, t.pbt_busy, t.restarting = "pending", nil, false, true
  sweep:_start_trial(t)
  return true
end

-- pbt.sync: the agent-steps between the population's decisions, `interval`
-- updates of its largest batch
function Controller:_sync_steps()
  if not self.sync_steps then
    local batch = 1
    for _, m in pairs(self.sweep.trials_list) do
      if m.cfg then batch = math.max(batch, m.cfg.env.num_envs * m.cfg.ppo.rollout_steps) end
    end
    self.sync_steps = self.o.interval * batch
  end
  return self.sync_steps
end

-- The agent-step counts member t pauses at (`moonrl train --pause-at-steps`):
-- pbt.sync's decision points ahead of it (and of the population's last
-- decision), before its end; nil without sync.
function Controller:pause_marks(t)
  if not self.o.sync or not t.cfg or t.finishing then return nil end
  local every, from, marks = self:_sync_steps(), math.max(t.resumed_steps or 0, self.gen_point or 0), {}
  local k = math.floor(from / every) + 1
  while k * every < t.cfg.total_steps and #marks < 100000 do
    marks[#marks + 1] = k * every
    k = k + 1
  end
  return marks
end

-- pbt.sync: once every member of the population that has not ended has
-- reached the next decision point (and so paused there; one not started yet,
-- or being resumed, has not), the population is ranked together: each member
-- in the bottom copies one of the top and explores; then all go on.
local ENDED = { done = true, failed = true, stopped = true, interrupted = true }
function Controller:_sync_poll()
  if self.gen_busy then return end
  local every = self:_sync_steps()
  local members, low = {}, math.huge
  for _, m in pairs(self.sweep.trials_list) do
    if not ENDED[m.status] then
      if m.status ~= "running" then return end
      members[#members + 1] = m
      low = math.min(low, m.steps or 0)
    end
  end
  if #members == 0 then return end
  table.sort(members, function(a, b) return a.index < b.index end)
  local point = math.floor(low / every) * every   -- the decision point every member has passed
  if point < every or point <= (self.gen_point or 0) then return end
  self.gen_busy, self.gen_point = true, point
  self.gen = (self.gen or 0) + 1
  local sweep = self.sweep
  tasks.spawn(function()
    -- each is paused at the point (its metrics row can come before its pause; a pause
    -- asked for here is the same one): what follows sees the state of that update
    for _, m in ipairs(members) do ask(m, { cmd = "pause" }) end
    if sweep.eval_key then
      for _, m in ipairs(members) do self:_evaluate_now(m) end
    else
      for _, m in ipairs(members) do self:_pb2_observe(m) end
    end
    local copies = {}
    for _, m in ipairs(members) do
      local d = m.status == "running" and self:_donor_for(m)
      if d then copies[#copies + 1] = { m, d } end
    end
    for _, c in ipairs(copies) do self:_exploit_now(c[1], c[2]) end
    for _, m in ipairs(members) do
      if m.status == "running" then ask(m, { cmd = "resume" }) end
    end
    self.gen_busy = false
  end)
end

-- After member t's metrics were read: decide when it has run another interval.
function Controller:poll(t)
  if t.finishing then return end   -- the population has ended: its best member trains on alone (sweep's finish)
  if self.o.sync then return self:_sync_poll() end
  -- (a member lending its weights is not exploited until its checkpoint is written: it is looked at again next time)
  if t.pbt_busy or (t.pbt_lending or 0) > 0 or not t.updates or t.status ~= "running" then return end
  t.pbt_next = t.pbt_next or self.o.interval
  if t.updates < t.pbt_next then return end
  t.pbt_next = (math.floor(t.updates / self.o.interval) + 1) * self.o.interval
  if not self.sweep.eval_key then self:_pb2_observe(t) end
  -- in its last interval a copy would hardly train (and races the member's end)
  local batch = t.cfg.env.num_envs * t.cfg.ppo.rollout_steps
  if (t.updates + self.o.interval) * batch >= t.cfg.total_steps then return end
  if self.sweep.eval_key then return self:_evaluate(t) end
  self:_rank(t)
end

-- metric = "eval.<key>": member t writes a checkpoint, which `moonrl eval`
-- evaluates in a child process (the base's eval settings, no bootstrap; files
-- in DIR/pbt/eval/); its value ranks t from then on, and t is ranked.
-- From a coroutine: true once t has its value (false: no evaluation this time, said).
function Controller:_evaluate_now(t)
  local sweep = self.sweep
  t.pbt_busy = true
  local value, checkpoint = require("moonrl.sweep.trial_checkpoint").evaluate(t, sweep.eval_key, function(path)
    return string.format("%s/pbt/eval/%s-%s", sweep.dir, t.label, path:match("([^/]+)%.mrck$") or "now")
  end)
  local err = value == nil and checkpoint or nil
  t.pbt_busy = false
  if value == nil then
    sweep:say(string.format("%s: pbt: no evaluation at update %s: %s (not ranked this time)", t.label,
      tostring(t.updates), tostring(err)))
    return false
  end
  t.pbt_value = value
  self:_pb2_observe(t)
  results.append(sweep.dir, { event = "pbt_eval", trial = t.index, checkpoint = checkpoint, value = value })
  return true
end

function Controller:_evaluate(t)
  t.pbt_busy = true
  tasks.spawn(function()
    if self:_evaluate_now(t) and t.status == "running" then self:_rank(t) end
  end)
end

-- Member m's last `window` values of the metric since its last exploit (the test's sample)
function Controller:_recent(m)
  local out = {}
  local curve = m.curve or {}
  for i = #curve, 1, -1 do
    local e = curve[i]
    if m.pbt_exploit_update and e.update <= m.pbt_exploit_update then break end
    if e.value ~= nil and e.value == e.value then out[#out + 1] = e.value end
    if #out >= self.o.window then break end
  end
  return out
end

-- The value members are ranked by: the sweep's metric, or their last evaluation.
function Controller:_value(m)
  if self.sweep.eval_key then return m.pbt_value end
  return m.value
end

-- Member t at a decision: in the bottom, it copies one of the top.
function Controller:_rank(t)
  local d = self:_donor_for(t)
  if d then self:_exploit(t, d) end
end

-- The member t copies at its decision: one of the top when t is in the
-- bottom, ready, and (pbt.test) measurably worse; else nil.
function Controller:_donor_for(t)
  local ranked = {}
  for _, m in ipairs(self.sweep.running) do
    local v = self:_value(m)
    if v ~= nil and v == v and m.status == "running" then ranked[#ranked + 1] = m end
  end
  if #ranked < 2 then return end
  local sign = self.sweep.mode == "min" and -1 or 1
  table.sort(ranked, function(a, b)
    local va, vb = self:_value(a), self:_value(b)
    if va ~= vb then return sign * va > sign * vb end
    return a.index < b.index
  end)
  local q = math.max(1, math.floor(#ranked * self.o.fraction + 0.5))
  if 2 * q > #ranked then q = math.floor(#ranked / 2) end
  if q < 1 then return end
  local pos
  for i, m in ipairs(ranked) do if m == t then pos = i end end
  if not pos or pos <= #ranked - q then return end   -- not in the bottom
  if self.o.ready > 0 and (t.steps or 0) - (t.pbt_ready_from or 0) < self.o.ready then return end
  local d = ranked[1 + math.floor(self.rng() * q)]
  if d == t or d.pbt_busy then return end
  if self.o.test == "welch" and not self.sweep.eval_key then
    local better, p = pbt.measured_better(self:_recent(t), self:_recent(d), self.sweep.mode, self.o.alpha)
    if not better then
      results.append(self.sweep.dir, { event = "exploit_held", trial = t.index, from = d.index, update = t.updates,
        p = p, value = self:_value(t), donor_value = self:_value(d) })
      return
    end
  end
  return d
end

-- ------------------------------------------------------------- lineage

-- The best member's history, from DIR/results.jsonl: lineage = {
--   best = trial index, value =, segments = { {trial =, from =, to =, params =, batch =}, ... } }
-- in training order: the weights the best member ended with were trained
-- by segments[1]'s member in its updates after `from` up to `to`, then by the
-- next one, ...; each segment's params are the member's keys in force then,
-- batch its agent-steps an update (nil when its config cannot be read).
function pbt.lineage(dir)
  local prev = results.read(dir)
  if not prev.info then return nil, dir .. " holds no sweep (no sweep.json)" end
  if prev.info.method ~= "pbt" then return nil, dir .. " is a " .. tostring(prev.info.method) .. " sweep, not pbt: no lineage" end
  local list = {}
  for _, r in pairs(prev.results) do if r.value ~= nil then list[#list + 1] = r end end
  if #list == 0 then return nil, dir .. ": no member has a result yet" end
  local best = results.sorted(list, prev.info.mode)[1]
  local by_trial = {}
  for _, ev in ipairs(prev.exploits) do
    by_trial[ev.trial] = by_trial[ev.trial] or {}
    table.insert(by_trial[ev.trial], ev)
  end
  -- a member's keys at update u: its start's point, then each exploit's new values up to u
  local function params_at(trial, u)
    local p = util.deepcopy(prev.starts[trial] and prev.starts[trial].params or {})
    for _, ev in ipairs(by_trial[trial] or {}) do
      if ev.update <= u then for k, v in pairs(ev.new or {}) do p[k] = v end end
    end
    return p
  end
  -- each member's batch (its config file): members of a space with the batch's shape train
  -- different agent-steps an update, so the replay counts in agent-steps
  local batches = {}
  local function batch_of(trial)
    if batches[trial] == nil then
      local c = require("moonrl.config.load").file(string.format("%s/trial-%03d.lua", dir, trial))
      batches[trial] = type(c) == "table" and type(c.env) == "table" and type(c.ppo) == "table" and
        tonumber(c.env.num_envs) and tonumber(c.ppo.rollout_steps) and c.env.num_envs * c.ppo.rollout_steps or false
    end
    return batches[trial] or nil
  end
  local segs = {}
  local trial, upto = best.trial, best.updates or math.huge
  while true do
    local last
    for _, ev in ipairs(by_trial[trial] or {}) do
      if ev.update <= upto and (not last or ev.update > last.update) then last = ev end
    end
    -- an exploit's update is the first the copied state trained (in force from it): the
    -- segment is its updates after `from` up to `to`, so update - 1 to upto
    local from = last and last.update - 1 or 0
    table.insert(segs, 1, { trial = trial, from = from, to = upto, params = params_at(trial, last and last.update or 0),
      batch = batch_of(trial) })
    if not last then break end
    trial, upto = last.from, last.donor_update
    if #segs > 10000 then break end
  end
  return { best = best.trial, value = best.value, mode = prev.info.mode, metric = prev.info.metric, segments = segs,
    label = best.label }
end

function pbt.replay_config(dir, lin)
  local root = lin.segments[1]
  local label = string.format("trial-%03d", root.trial)
  local text = util.read_file(dir .. "/" .. label .. ".lua")
  if not text then return nil, "cannot read " .. dir .. "/" .. label .. ".lua (the root member's config)" end
  local serialize = require("moonrl.config.serialize")
  -- the replay trains the root member's batch; each segment lasts the agent-steps its member
  -- trained (its updates x its batch), so a change lands at the update of the root's batch
  -- nearest that count (the same update when the batches agree)
  local root_batch = root.batch
  local at, total, steps = {}, 0, 0
  for i, s in ipairs(lin.segments) do
    local len = (s.to == math.huge and 0 or s.to) - s.from
    steps = steps + len * (s.batch or root_batch or 1)
    if root_batch then len = math.floor(steps / root_batch + 0.5) - total end
    if i > 1 then
      -- the keys a running run can change; the others (the batch, epochs, ...) stay the root's
      local vals = {}
      for _, k in ipairs(util.sorted_keys(s.params)) do
        local v, e = s.params[k], schema.by_key[k]
        if e and e.hot then
          if type(v) == "table" and v.kind then v = setmetatable(v, nil) end
          vals[#vals + 1] = "[" .. serialize.lua_string(k) .. "] = " .. assert(serialize.value(v))
        end
      end
      if #vals > 0 then at[#at + 1] = string.format("  [%d] = { %s },", total, table.concat(vals, ", ")) end
    end
    total = total + len
  end
  local first = {}
  for _, k in ipairs(util.sorted_keys(root.params)) do
    first[#first + 1] = string.format("cfg = set(cfg, %s, %s)", serialize.lua_string(k), assert(serialize.value(root.params[k])))
  end
  return table.concat({
    "-- moonrl sweep lineage " .. dir .. ": the hyperparameters the best member (" .. (lin.label or "") ..
      ") saw along its lineage, as one plain run: `moonrl train` this file.",
    "-- Its weights came from " .. #lin.segments .. " segment(s) of the population; this run trains one network",
    "-- from the root member's config with the same keys at the same updates (" .. total .. " updates).",
    "local cfg = (function()",
    text,
    "end)()",
    "local function set(c, key, v)",
    "  local t = c",
    "  local parts = {}",
    "  for p in key:gmatch(\"[^.]+\") do parts[#parts + 1] = p end",
    "  for i = 1, #parts - 1 do t[parts[i]] = t[parts[i]] or {}; t = t[parts[i]] end",
    "  t[parts[#parts]] = v",
    "  return c",
    "end",
    table.concat(first, "\n"),
    "cfg.dir = nil",
    "cfg.total_steps = " .. total .. " * cfg.env.num_envs * cfg.ppo.rollout_steps",
    "-- after update k, these keys change (in force from update k + 1: the on_update hand-shake)",
    "local CHANGES = {",
    table.concat(at, "\n"),
    "}",
    "cfg.hooks = cfg.hooks or {}",
    "cfg.hooks.on_update = function(m, run)",
    "  local c = CHANGES[m.update]",
    "  if c then assert(run:set_many(c, \"lineage\")) end",
    "end",
    "return cfg",
    "",
  }, "\n")
end

return pbt

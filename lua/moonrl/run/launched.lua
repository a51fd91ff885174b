-- moonrl.run.launched - a run of several ranks that a script starts:
-- moonrl.train{ranks = R, ...} (or moonrl.train(cfg, {ranks = R})).
--
-- The ranks are other processes: `mpirun -n R moonrl train CONFIG --dir DIR
-- --no-eval`, started by moonrl.run.process (the same launcher,
-- $MOONRL_MPIRUN, as a sweep's trials of several ranks). This object, in
-- the script's process, is the run as the script sees it, with the methods
-- of a run in this process (moonrl.run):
--
--   run.dir, run.ranks, run.last_checkpoint, run.status, run.describe (at the end)
--   run:metrics()   the last update's metrics (read from DIR/metrics.jsonl as it grows)
--   run:wait()      yields until the processes have ended; returns the summary
--                   (rank 0's DIR/summary.json, plus ranks and exit_code; a job
--                   that ended without one, killed, gets status "failed" and an
--                   error naming the exit)
--   run:get(key)    the value in force
--   run:set(key, value[, source]) / run:set_many(values[, source])
--   run:pause() / run:resume() / run:checkpoint() / run:stop([{checkpoint =, reason =}])
--                   through the run's control socket (docs/control.md), as
--                   `moonrl ctl` does: from a coroutine they wait for the
--                   answer and return it (true | nil, err; the path written);
--                   elsewhere (a hook) they send and return true at once, and
--                   a refusal is reported on stderr
--   run:alive(), run:summary()
--
-- Hooks (cfg.hooks) run here, in the script's process, not in the ranks:
-- on_update, on_episode_stats and on_alert for each metrics row as it is
-- read, on_checkpoint for each checkpoint file as it appears, on_finish at
-- the end. They are asynchronous: the ranks do not wait for them, so a
-- run:set in on_update of update k is in force from a later update (k + 1
-- or after), not always k + 1 as in one process.

local uv = require("luv")
local core = require("moonrl.core")
local config = require("moonrl.config")
local util = require("moonrl.util")
local json = require("moonrl.formats.json")
local hooks = require("moonrl.run.hooks")
local tasks = require("moonrl.runtime.tasks")
local shutdown = require("moonrl.runtime.shutdown")

local launched = {}

local Launched = {}
Launched.__index = Launched

launched.POLL_MS = 200
launched.CONFIG_FILE = ".launch.lua"            -- the config given to rank 0, removed at the end
launched.CHANGES_FILE = ".launch-changes.lua"   -- a resume's changes, likewise
local SOCKET_WAIT_MS = 60000                    -- how long a request waits for the socket to appear
local REQUEST_TIMEOUT_MS = 120000

-- ranks as moonrl.train takes it: a whole number >= 1.
function launched.check_ranks(ranks)
  if ranks == nil then return 1 end
  if type(ranks) ~= "number" or ranks ~= math.floor(ranks) or ranks < 1 or ranks > 65536 then
    return nil, "ranks: expected a whole number of processes, 1 or more (mpirun -n), got " ..
      (type(ranks) == "string" and string.format("%q (a string)", ranks) or tostring(ranks))
  end
  return ranks
end

-- json.null (NaN and infinities in metrics.jsonl) and nested ones -> nil.
local function plain(v)
  if v == json.null then return nil end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = plain(x) end
  return out
end

-- cfg without its hooks (they run here) and without dir (given as --dir).
local function for_ranks(cfg)
  local sent = {}
  for k, v in pairs(cfg) do
    if k ~= "hooks" and k ~= "dir" then sent[k] = v end
  end
  return sent
end

local function checkpoint_names(dir)
  local out = {}
  local req = uv.fs_scandir(dir .. "/checkpoints")
  while req do
    local name = uv.fs_scandir_next(req)
    if not name then break end
    if name:match("^update_%d+%.mrck$") then out[#out + 1] = name end
  end
  table.sort(out)
  return out
end

-- launched.start(cfg, notes, opts) -> run
--   cfg: resolved (moonrl.run.start); opts.ranks >= 2; opts.console, quiet,
--   verbose, force as moonrl.train's; opts.resume: a moonrl.resume plan, with
--   opts.changes (its changes: a file or a table) and opts.sets.
function launched.start(cfg, notes, opts)
  local stopping = shutdown.stopping()
  if stopping then util.refuse("not starting a run: moonrl is stopping (" .. stopping.reason .. ")", 3) end
  if core.ranks and core.ranks() > 1 then
    util.refuse("moonrl.train{ranks = " .. opts.ranks .. "}: this process is itself one of " .. core.ranks() ..
      " ranks (mpirun or srun); launch the script as one process", 3)
  end
  local rs = opts.resume
  notes = { unpack(notes or {}) }
  local dir, derr
  if rs then dir = rs.dir else dir, derr = require("moonrl.run.dir").new(cfg, opts.force, notes) end
  if not dir then util.refuse(derr, 3) end
  local ok, err = util.mkdir_p(dir)
  if not ok then util.refuse(err, 3) end

  local argv
  if rs then
    argv = { "train", "--resume", dir }
    local changes = opts.changes
    if type(changes) == "table" then
      local path = dir .. "/" .. launched.CHANGES_FILE
      ok, err = util.write_file(path, config.serialize(for_ranks(changes), { header = "moonrl.train: the changes of a resume" }))
      if not ok then util.refuse(err, 3) end
      argv[#argv + 1] = path
    elseif type(changes) == "string" then
      argv[#argv + 1] = changes
    end
    for _, s in ipairs(opts.sets or {}) do argv[#argv + 1] = "--set"; argv[#argv + 1] = s end
  else
    local path = dir .. "/" .. launched.CONFIG_FILE
    ok, err = util.write_file(path, config.serialize(for_ranks(cfg), {
      header = "moonrl.train{ranks = " .. opts.ranks .. "}: the config rank 0 starts from (removed at the end)",
    }))
    if not ok then util.refuse(err, 3) end
    argv = { "train", path, "--dir", dir }
  end
  argv[#argv + 1] = "--no-eval"
  if opts.verbose then argv[#argv + 1] = "--verbose" end

  local self = setmetatable({
    dir = dir, ranks = opts.ranks, cfg = cfg, status = "starting", updates = rs and rs.update or 0,
    hook_state = hooks.state(), alert_state = {}, alerts = {}, waiters = {}, seen = {},
    tail = require("moonrl.run.dir").tail(dir .. "/metrics.jsonl"), quiet = opts.quiet,
  }, Launched)
  if rs then
    for _, name in ipairs(checkpoint_names(dir)) do self.seen[name] = true end
    self.tail.offset = (uv.fs_stat(dir .. "/metrics.jsonl") or { size = 0 }).size   -- what it held before
  end
  -- the notes of this side (a run moved aside); rank 0 prints its own
  for _, n in ipairs(notes) do
    if n:match("^%-%-force") and not opts.quiet then io.stderr:write("moonrl: note: ", n, "\n") end
  end

  local to_file = opts.console == false or opts.quiet
  local job, jerr = require("moonrl.run.process").start({
    argv = argv, dir = dir, ranks = opts.ranks, output = to_file and (dir .. "/output.log") or nil,
    on_exit = function(exit) self:_exited(exit) end,
  })
  if not job then util.refuse("moonrl.train{ranks = " .. opts.ranks .. "}: " .. tostring(jerr), 3) end
  self.job = job
  self.timer = uv.new_timer()
  self.timer:start(launched.POLL_MS, launched.POLL_MS, function() self:_poll() end)
  shutdown.add_run(self, function() end)   -- a stop signal stops it (run:stop)
  return self
end

-- ------------------------------------------------------------ following

function Launched:_hook(name, ...)
  hooks.call(self.hook_state, { cfg = self.cfg, dir = self.dir, update = self.updates, log = function() end }, name, ...)
end

function Launched:_metrics(m)
  self.last, self.updates = m, m.update
  if self.status == "starting" then self.status = "running" end
  local okm, alerts = pcall(require("moonrl.run.alerts").check, m, self.cfg.alerts, self.alert_state)
  for _, a in ipairs(okm and alerts or {}) do
    self.alerts[#self.alerts + 1] = a
    self:_hook("on_alert", a, self)
  end
  self:_hook("on_update", m, self)
  local stats = hooks.episode_stats(m)
  if stats then self:_hook("on_episode_stats", stats, self) end
end

function Launched:_poll()
  for _, rec in ipairs(self.tail:read()) do
    if rec.event == nil and type(rec.update) == "number" then
      local ok, err = xpcall(self._metrics, debug.traceback, self, plain(rec))
      if not ok then core.report("run " .. self.dir, tostring(err)) end
    end
  end
  for _, name in ipairs(checkpoint_names(self.dir)) do
    if not self.seen[name] then
      self.seen[name] = true
      self.last_checkpoint = self.dir .. "/checkpoints/" .. name
      self:_hook("on_checkpoint", self.last_checkpoint, self)
    end
  end
end

local function exit_text(exit)
  if exit.signal_name then return "killed by " .. exit.signal_name:upper() end
  return "exit code " .. tostring(exit.code)
end

function Launched:_exited(exit)
  self:_poll()
  if self.timer and not self.timer:is_closing() then self.timer:close() end
  os.remove(self.dir .. "/" .. launched.CONFIG_FILE)
  os.remove(self.dir .. "/" .. launched.CHANGES_FILE)
  local text = util.read_file(self.dir .. "/" .. require("moonrl.run").SUMMARY_FILE)
  local s = text and plain(json.decode(text))
  if type(s) ~= "table" then
    local m = self.last or {}
    s = {
      status = "failed", dir = self.dir, updates = self.updates, agent_steps = m.agent_steps or 0,
      metrics = self.last, checkpoint = self.last_checkpoint,
      error = "the run's " .. self.ranks .. " ranks ended (mpirun: " .. exit_text(exit) .. ") without a summary" ..
        (self.quiet and (": see " .. self.dir .. "/output.log") or ": see the output above") ..
        "; moonrl.train{resume = \"" .. self.dir .. "\", ranks = " .. self.ranks .. "} continues from its newest checkpoint",
    }
  end
  s.ranks, s.exit_code = self.ranks, exit.code
  s.hook_errors = hooks.failures(self.hook_state)
  s.alerts = #self.alerts
  self.describe, self.status = s.describe, s.status
  self.last_checkpoint = s.checkpoint or self.last_checkpoint
  self._summary = s
  self:_hook("on_finish", s, self)
  shutdown.run_ended(self)
  local waiters = self.waiters
  self.waiters = {}
  for _, w in ipairs(waiters) do w(s) end
end

-- ------------------------------------------------------------- control

-- One request to rank 0's control socket; cb(reply | nil, err). Waits for the
-- socket while the ranks start.
function Launched:_request(req, cb)
  local client = require("moonrl.control.client")
  local path = client.socket_path(self.dir)
  local waited = 0
  local function try()
    if not uv.fs_stat(path) then
      if not self:alive() then return cb(nil, "the run has finished") end
      if waited >= SOCKET_WAIT_MS then return cb(nil, "no control socket at " .. path .. " after " .. waited / 1000 .. " s") end
      waited = waited + 100
      local t = uv.new_timer()
      return t:start(100, 0, function() t:close() try() end)
    end
    client.call(path, req, { timeout_ms = REQUEST_TIMEOUT_MS }, cb)
  end
  try()
end

-- From a coroutine: waits and returns what done(reply) makes of the answer.
-- Elsewhere: sends, returns true, and reports a refusal.
function Launched:_ask(what, req, done)
  local co, is_main = coroutine.running()
  if co == nil or is_main then
    self:_request(req, function(reply, err)
      if reply then done(reply) else core.report("run " .. self.dir .. ": " .. what, tostring(err)) end
    end)
    return true
  end
  return tasks.await(what, function(wake)
    self:_request(req, function(reply, err)
      if not reply then return wake(nil, what .. ": " .. tostring(err)) end
      wake(done(reply))
    end)
  end)
end

function Launched:alive() return self._summary == nil end
function Launched:metrics() return self.last end
function Launched:summary() return self._summary end

function Launched:wait()
  if self._summary then return self._summary end
  return tasks.await("run:wait()", function(wake) self.waiters[#self.waiters + 1] = wake end)
end

function Launched:get(key)
  return config.get(self.cfg, key)
end

-- values -> true | nil, err. Hooks change here; the other keys are checked
-- here as config.set checks them, then sent to rank 0.
function Launched:set_many(values, source)
  if type(values) ~= "table" then error("run:set_many: expected a table {key = value, ...}, got " .. type(values), 2) end
  if source ~= nil and type(source) ~= "string" then
    error("run:set: source must be a string (who made the change), got " .. type(source), 2)
  end
  if not self:alive() then return nil, "run:set: the run has finished" end
  local trial = util.deepcopy(self.cfg)
  local sent, any = {}, false
  for _, k in ipairs(util.sorted_keys(values)) do
    local ok, err = config.set(trial, k, values[k], { running = true })
    if not ok then return nil, err end
    if not k:match("^hooks%.") then
      local okj = pcall(json.encode, values[k])
      if not okj then
        return nil, k .. ": a run of " .. self.ranks .. " ranks takes a number, a string, a boolean or a table of " ..
          "them (it goes to rank 0 as JSON, as moonrl ctl set sends it)"
      end
      sent[k], any = values[k], true
    end
  end
  local function apply()
    for _, k in ipairs(util.sorted_keys(values)) do config.set(self.cfg, k, values[k], { running = true }) end
    return true
  end
  if not any then return apply() end
  return self:_ask("run:set", { cmd = "set", values = sent, source = source or "run:set" }, apply)
end

function Launched:set(key, value, source)
  if source ~= nil and type(source) ~= "string" then
    error("run:set: source must be a string (who made the change), got " .. type(source), 2)
  end
  return self:set_many({ [key] = value }, source)
end

function Launched:pause(opts)
  if opts ~= nil then error("run:pause: at_steps is not built for a run of several ranks", 2) end
  if not self:alive() then return nil, "run:pause: the run has finished" end
  return self:_ask("run:pause", { cmd = "pause" }, function(r) self.status = r.status return true end)
end

function Launched:resume()
  if not self:alive() then return nil, "run:resume: the run has finished" end
  return self:_ask("run:resume", { cmd = "resume" }, function(r) self.status = r.status return true end)
end

function Launched:checkpoint(path)
  if path ~= nil then
    error("run:checkpoint: a run of several ranks writes its checkpoints to its own checkpoints/ (no path)", 2)
  end
  if not self:alive() then return nil, "run:checkpoint: the run has finished" end
  return self:_ask("run:checkpoint", { cmd = "checkpoint" }, function(r) return r.path end)
end

-- Rank 0's own stop (the update in progress, then the final checkpoint);
-- before its socket is there, SIGTERM to mpirun, which rank 0 takes the same way.
function Launched:stop(opts)
  require("moonrl.run.options").check_stop(opts)
  if not self:alive() then return true end
  local req = { cmd = "stop", checkpoint = not (opts and opts.checkpoint == false), reason = opts and opts.reason }
  local client = require("moonrl.control.client")
  client.call(client.socket_path(self.dir), req, { timeout_ms = REQUEST_TIMEOUT_MS }, function(reply)
    if not reply and self:alive() and self.job.pid then uv.kill(self.job.pid, "sigterm") end
  end)
  return true
end

function Launched:__tostring()
  return "moonrl run " .. tostring(self.dir) .. " (" .. tostring(self.status) .. ", " .. self.ranks .. " ranks)"
end

return launched

-- moonrl.eval.evaluate - a checkpoint (or a run directory's newest valid
-- one, or a finished run) evaluated off the loop thread, and the evaluation
-- table of the results: moonrl.evaluate and moonrl.eval_table (lua/moonrl/init.lua has
-- their options and what a result holds).
--
--   evaluate.evaluate(checkpoint_or_run, opts) -> result | nil, err
--   evaluate.eval_table(results, opts) -> string

local core = require("moonrl.core")
local uv = require("luv")
local tasks = require("moonrl.runtime.tasks")

local evaluate = {}

-- The checkpoint to evaluate and the eval settings of its run (or nil).
local function eval_args(target, on_skip)
  local path
  if type(target) == "string" then
    path = target
    local rs = require("moonrl.run.resume")
    local st = uv.fs_stat(target)
    local run_dir = st and st.type == "directory" and target or rs.run_dir_of(target)
    local defaults, env
    if run_dir then
      local now = run_dir .. "/" .. rs.NOW_FILE   -- the config in force after changes, else the one it started with
      local t = require("moonrl.config").load_file(uv.fs_stat(now) and now or run_dir .. "/config.lua")
      defaults = type(t) == "table" and type(t.eval) == "table" and t.eval or nil
      env = type(t) == "table" and type(t.env) == "table" and t.env or nil
    end
    if st and st.type == "directory" then
      local ck, err = rs.newest(target)
      if not ck then return nil, "moonrl.evaluate: " .. err end
      for _, d in ipairs(ck.damaged) do
        if on_skip then on_skip(d.path, d.error) end
      end
      path = ck.path
    end
    return path, defaults, env
  elseif getmetatable(target) == require("moonrl.run") then
    if target:alive() then
      return nil, "moonrl.evaluate: the run is still training; wait for it (run:wait()) or pass a checkpoint path"
    end
    path = target.last_checkpoint
    if not path then return nil, "moonrl.evaluate: the run wrote no checkpoint (it failed before its first one)" end
    return path, nil, target.cfg and target.cfg.env
  else
    return nil, "moonrl.evaluate: expected a checkpoint path or a run, got " .. type(target)
  end
  return path
end

function evaluate.evaluate(target, opts)
  opts = opts or {}
  local engine = require("moonrl.engine")
  local cb = opts.callback
  local function finish(res, err)
    if cb then cb(res, err) end
    return res, err
  end
  local path, run_eval, run_env = eval_args(target, opts.on_skip)   -- run_eval: the error when no path
  if not path then return finish(nil, run_eval) end
  local eval = {}
  local defaults = type(target) == "table" and target.cfg and target.cfg.eval or run_eval or {}
  for _, k in ipairs({ "num_envs", "steps", "runs", "seed" }) do
    local v = opts[k]
    if v == nil then v = defaults[k] end
    if v ~= nil then
      if type(v) ~= "number" or v ~= math.floor(v) or v < (k == "seed" and 0 or 1) then
        return finish(nil, "moonrl.evaluate: " .. k .. " must be an integer >= " .. (k == "seed" and 0 or 1) ..
          ", got " .. tostring(v))
      end
      eval[k] = v
    end
  end
  if opts.episodes ~= nil then
    local v = opts.episodes
    if type(v) ~= "number" or v ~= math.floor(v) or v < 1 then
      return finish(nil, "moonrl.evaluate: episodes must be an integer >= 1, got " .. tostring(v))
    end
    eval.episodes = v
  end
  if opts.greedy ~= nil then
    if type(opts.greedy) ~= "boolean" then
      return finish(nil, "moonrl.evaluate: greedy must be true or false, got " .. tostring(opts.greedy))
    end
    eval.greedy = opts.greedy
  end
  if opts.protocol ~= nil then
    if opts.protocol ~= "episodic" and opts.protocol ~= "survival" then
      return finish(nil, "moonrl.evaluate: protocol " .. tostring(opts.protocol) .. ": accepted episodic (every " ..
        "environment's), survival (foraging's own)")
    end
    eval.protocol = opts.protocol
  end
  if opts.mode ~= nil and (type(opts.mode) ~= "string" or engine.mode_from_name(opts.mode) < 0) then
    return finish(nil, "moonrl.evaluate: mode " .. tostring(opts.mode) ..
      " is not a mode: accepted ground_truth, ground_truth_blinded, proxy_mortal, proxy")
  end
  local ec, eerr = engine.eval_config(eval, opts.mode)
  if not ec then return finish(nil, "moonrl.evaluate: " .. eerr) end
  local copts = {}
  if opts.device ~= nil then
    local d = ({ auto = true, cpu = true, cuda = true })[opts.device] and engine.enum("device", opts.device)
    if not d then return finish(nil, "moonrl.evaluate: device " .. tostring(opts.device) .. ": accepted auto, cpu, cuda") end
    copts.device = tonumber(d)
  end
  if opts.threads ~= nil then copts.threads = opts.threads end
  -- a Lua environment (env.lua): opts.lua, else the run's config names its file
  local lua = opts.lua or (run_env and run_env.lua)
  if lua ~= nil then
    local h, herr = engine.env_program_handle(lua, opts.lua_checks or (run_env and run_env.lua_checks))
    if not h then return finish(nil, "moonrl.evaluate: " .. herr) end
    copts.program = h
  end
  if opts.records ~= false then copts.records = true end   -- the table's numbers come from them
  if opts.progress ~= nil and opts.progress ~= false and type(opts.progress) ~= "function" then
    return finish(nil, "moonrl.evaluate: progress must be a function, or false for none")
  end
  if type(opts.progress) == "function" then
    copts.progress = opts.progress
  elseif opts.progress == nil and not opts.quiet then
    -- a script's evaluation says how far it is once it has taken 2 s (a short one stays silent)
    copts.progress = require("moonrl.eval.progress").printer({ prefix = "moonrl.evaluate: ",
      label = path:match("([^/]+/checkpoints/[^/]+)$") or path, after = 2 })
  end

  local function start(done)
    core.evaluate(path, engine.bytes(ec), copts, function(rbytes, err, describe, cfg_bytes, rec_bytes, protocol)
      if rbytes == nil then return done(nil, err) end
      -- the survival protocol's aggregates; the episodic one has its records alone
      local r = rbytes and engine.eval_result(rbytes) or {}
      r.protocol = protocol
      local trained = engine.config_from_bytes(cfg_bytes)
      r.mode = opts.mode or engine.mode_name(trained.env.mode)
      r.checkpoint, r.describe = path, describe
      r.update = require("moonrl.eval.table").update_of(path)
      r.trained_mode, r.train_seed = engine.mode_name(trained.env.mode), tonumber(trained.seed)
      r.environment = engine.env_name(tonumber(trained.env.name))
      r.eval = { num_envs = ec.num_envs, steps = ec.steps, runs = ec.runs, seed = tonumber(ec.seed) }
      if protocol == "episodic" then
        local how = engine.env_evaluation(tonumber(trained.env.name),
          trained.env.program ~= nil and trained.env.program or nil) or {}
        r.eval.episodes, r.eval.greedy = ec.episodes > 0 and ec.episodes or nil, ec.greedy ~= 0
        r.counters, r.success = how.counters or {}, how.success
        if opts.records ~= false then r.records = engine.eval_episodes(rec_bytes) end
      else
        if ec.greedy ~= 0 then r.eval.greedy = true end
        if rec_bytes then r.records = engine.eval_records(rec_bytes) end
      end
      done(r)
    end)
  end
  if cb then
    start(cb)
    return nil
  end
  return tasks.await("moonrl.evaluate (without opts.callback)", start)
end

-- The evaluation table (docs/evaluation.md) of results of moonrl.evaluate:
-- the same computation as `moonrl eval` (moonrl.eval.table, from the
-- records): what was evaluated, one column per result (its `label`, else its
-- mode), every metric with its 95% interval, the definitions. opts: boot
-- (resamples, default 1000), boot_seed (1), unit ("agents" | "runs").
function evaluate.eval_table(results, opts)
  opts = opts or {}
  local protocols = require("moonrl.eval.protocols")
  if type(results) ~= "table" or #results == 0 then
    error("moonrl.eval_table: expected a list of results of moonrl.evaluate, got " ..
      (type(results) == "table" and "an empty list" or type(results)), 2)
  end
  local summaries = {}
  for k, r in ipairs(results) do
    if type(r) ~= "table" or type(r.records) ~= "table" or type(r.eval) ~= "table" then
      error("moonrl.eval_table: result " .. k .. " has no records: pass what moonrl.evaluate returns " ..
        "(without records = false)", 2)
    end
    local s = protocols.of(r).summarise(r, { boot = opts.boot or 1000, boot_seed = opts.boot_seed or 1,
                                             unit = opts.unit })
    if r.label ~= nil then s.label = tostring(r.label) end
    summaries[k] = s
  end
  local P, perr = protocols.common(summaries)
  if not P then error("moonrl.eval_table: " .. perr, 2) end
  return P.table(summaries)
end

return evaluate

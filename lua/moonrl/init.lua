-- moonrl - what experiment scripts `require "moonrl"`.
--
--   local moonrl = require "moonrl"
--   local run = moonrl.train("my_experiment.lua", { sets = { "ppo.lr=1e-4" } })
--   print(run.dir)                      -- runs/<name>-<YYYYmmdd-HHMMSS>
--   run:set("ppo.lr", 5e-5)             -- hot keys only; true | nil, err
--   local summary = run:wait()          -- yields this coroutine until the end
--   local res = moonrl.evaluate(run)    -- the final checkpoint, off the loop thread
--
-- Scripts run as coroutines on the host's libuv loop (`moonrl run script.lua`,
-- and the CLI's own commands), so the blocking-looking calls - run:wait(),
-- moonrl.wait(), moonrl.evaluate() - yield and the loop keeps serving
-- timers, sockets and the trainer's metrics meanwhile. Called outside a
-- coroutine (in a luv callback, say) they raise an error that says so;
-- evaluate() takes a callback there instead.
--
-- Public functions (docs/lua-api.md is the reference users read; spec/lua_api_spec.lua
-- keeps it and this module naming the same functions)
--   moonrl.train(cfg_or_path, opts) -> run         starts at once (see moonrl.run)
--       opts: sets = {"k=v", ...}, hardware =, level =, dir =, hooks = {on_update=, ...},
--             console = false (no progress line), quiet = true (no notes),
--             verbose = true (also the notes that only tell how defaults resolved),
--             resume = RUN_DIR (continue that run from its newest valid checkpoint;
--             cfg_or_path and sets then hold changes: hot keys only, see moonrl.resume)
--             force = true (a dir that holds a run: move that run aside to
--             <dir>.old-<time> and start anew; without it such a dir is refused)
--   moonrl.train{resume = RUN_DIR, <config keys to change>...}   the same, in one table
--   moonrl.resolve(cfg_or_path, opts) -> cfg, notes | nil, err   what train() would run
--   moonrl.evaluate(checkpoint_or_run, opts) -> result | nil, err
--       checkpoint_or_run: a checkpoint file, a run directory (its newest valid
--             checkpoint) or a finished run
--       opts: mode = name (default: the trained mode), num_envs, steps, runs, seed
--             (default: the run's cfg.eval - a run directory's config.lua, also for
--             a checkpoint in its checkpoints/ - else the engine's), device =
--             "cpu"|"cuda", threads, progress = function(done, total) (steps of
--             runs x steps, on the loop while it works), on_skip = function(path, err)
--             (a damaged checkpoint of a run directory passed over),
--             callback = function(result, err) (then it returns at once),
--             records = false (no result.records: saves their memory, but
--             moonrl.eval_table needs them; by default every death and
--             survivor, engine.eval_records, which moonrl.evaltable summarises)
--       result: mode, checkpoint, update (of update_NNNNNNN.mrck), describe,
--               trained_mode, train_seed, eval = {num_envs, steps, runs, seed},
--               records, and the engine's own aggregates (mr_eval_result, kept
--               in eval.json as engine_table): energy_per_1k, efficiency (per-env
--               mean), survival (mean of all episodes, not censored),
--               deaths_per_1k, food_per_1k, poison_per_1k
--   moonrl.eval_table(results, opts) -> string     the evaluation table of `moonrl eval`
--       (docs/evaluation.md): the checkpoint and update, every metric with its 95%
--       interval; opts: boot, boot_seed, unit
--   moonrl.wait(seconds)                           yields for that many seconds (0.5: half a second)
--   moonrl.sleep(ms)                               the old form, in milliseconds: deprecated (a note, once)
--   moonrl.spawn(fn, ...) -> coroutine             runs fn as a coroutine; errors reported
--   moonrl.resume(co, ...) -> ok, ...              resume with error reporting
--   moonrl.runs() -> list of runs still going
--   moonrl.detect() -> {gpus=, cores=, memory=, cpu_bf16=}    what config's hardware = "auto" sees
--   moonrl.sweep{base =, space =, ...} -> sweep    a hyperparameter sweep: trials as child
--       processes, early stopping, results.jsonl, resumable (moonrl.sweep's header)
--   moonrl.uniform(lo, hi), moonrl.loguniform(lo, hi), moonrl.randint(lo, hi),
--   moonrl.choice{...}, moonrl.grid{...}            what a sweep's space holds
--   moonrl.asha{grace_steps =, reduction = 3}      early stopping for a sweep
--   moonrl.slurm{partition =, time =, gpus =, ...}  a sweep's executor: trials as Slurm
--       array tasks (lua/moonrl/sweep/slurm_executor.lua)
--   moonrl.schedule, moonrl.config                 re-exports
--   moonrl.version, moonrl.home

local core = require("moonrl.core")
local util = require("moonrl.util")
local uv = require("luv")

local moonrl = {}

moonrl.version = core.version()
moonrl.home = core.home()
moonrl.schedule = require("moonrl.schedule")
moonrl.config = require("moonrl.config")

local space = require("moonrl.sweep.space")
for _, name in ipairs({ "uniform", "loguniform", "randint", "choice", "grid" }) do moonrl[name] = space[name] end
function moonrl.asha(opts) return require("moonrl.sweep.asha").new(opts) end
function moonrl.sweep(spec) return require("moonrl.sweep").start(spec) end
function moonrl.slurm(opts) return require("moonrl.sweep.slurm_executor").new(opts) end

-- ------------------------------------------------------------- coroutines

local main_co = nil

local function current()
  local co, is_main = coroutine.running()
  if co == nil or is_main then return nil end
  return co
end

local stopping = nil   -- { code =, reason = } once the process is on its way out (moonrl._stop_all)

local function report_co(co, err)
  -- a refusal of the user's input is its message; anything else keeps its traceback
  local tb = util.is_refusal(err) and err or core.traceback(co, tostring(err))
  if co == main_co then
    core.report("error in the main script", tb)
    main_co = nil
    -- The script is what the user ran: it failed, so the process does too,
    -- once the runs it started have stopped with their final checkpoints and
    -- closed their files (a stop already under way ends it anyway).
    if not stopping then
      moonrl._stop_all(1, "error in the main script: " .. (tostring(err):match("^[^\n]*") or "?"))
    end
  else
    core.report("error in a coroutine", tb)
  end
end

-- Every resume of a moonrl-managed coroutine goes through here, so an error
-- is reported with the coroutine's own traceback wherever it was resumed from.
function moonrl.resume(co, ...)
  local res = { coroutine.resume(co, ...) }
  if not res[1] then report_co(co, res[2]) end
  return unpack(res)
end

function moonrl.spawn(fn, ...)
  if type(fn) ~= "function" then error("moonrl.spawn: expected a function, got " .. type(fn), 2) end
  local co = coroutine.create(fn)
  moonrl.resume(co, ...)
  return co
end

-- The CLI's entry: the script whose failure is the process's failure.
function moonrl._main(fn, ...)
  local co = coroutine.create(fn)
  main_co = co
  moonrl.resume(co, ...)
  return co
end

-- Suspends the running coroutine until `arm(resume_fn)` arranges for
-- resume_fn(...) to be called; returns what it is called with.
function moonrl._await(what, arm)
  local co = current()
  if not co then
    error(what .. " must be called from a coroutine (scripts run as one); " ..
      "in a callback, use moonrl.spawn(function() ... end)", 3)
  end
  local done, early = false, nil
  arm(function(...)
    if done then return end
    done = true
    if coroutine.status(co) == "suspended" then
      moonrl.resume(co, ...)
    else
      early = { ... } -- fired before we yielded (synchronously)
    end
  end)
  if early then return unpack(early) end
  return coroutine.yield()
end

-- moonrl.wait(seconds): yields for that many seconds (fractions too:
-- moonrl.wait(0.5)), like every other duration moonrl takes. moonrl.sleep(ms)
-- is the old form, in milliseconds; it still works, and says once that it
-- is deprecated.
local function sleep_ms(what, ms)
  return moonrl._await(what, function(wake)
    local t = uv.new_timer()
    uv.update_time()   -- count from now, not from the loop's last tick
    t:start(ms, 0, function()
      t:close()
      wake()
    end)
  end)
end

function moonrl.wait(seconds)
  if type(seconds) ~= "number" or seconds ~= seconds or seconds < 0 or seconds == math.huge then
    error("moonrl.wait: expected a number of seconds >= 0 (moonrl.wait(0.5): half a second), got " ..
      (type(seconds) == "number" and tostring(seconds) or type(seconds)) ..
      (type(seconds) == "table" and "; to wait for a run, run:wait()" or ""), 2)
  end
  return sleep_ms("moonrl.wait", math.floor(seconds * 1000 + 0.5))
end

local sleep_noted = false
function moonrl.sleep(ms)
  if type(ms) ~= "number" or ms ~= ms or ms < 0 or ms == math.huge then
    error("moonrl.sleep: expected milliseconds >= 0, got " .. tostring(ms) ..
      " (moonrl.sleep is deprecated: moonrl.wait(seconds))", 2)
  end
  if not sleep_noted then
    sleep_noted = true
    local info = debug.getinfo(2, "Sl")
    local where = info and info.short_src and (info.short_src .. ":" .. (info.currentline or "?") .. ": ") or ""
    io.stderr:write("moonrl: note: ", where, "moonrl.sleep(ms) counts milliseconds and is deprecated; ",
      "use moonrl.wait(seconds), which counts seconds like every other duration ",
      "(moonrl.sleep(", tostring(ms), ") = moonrl.wait(", tostring(ms / 1000), "))\n")
  end
  return sleep_ms("moonrl.sleep", math.floor(ms))
end

-- --------------------------------------------------------------- hardware

local function meminfo_bytes()
  local f = io.open("/proc/meminfo", "r")
  if not f then return nil end
  local text = f:read("*a")
  f:close()
  local kb = text:match("MemTotal:%s*(%d+)")
  return kb and tonumber(kb) * 1024 or nil
end

local detected
function moonrl.detect()
  if not detected then
    local engine = require("moonrl.engine")
    local cores = uv.available_parallelism and uv.available_parallelism() or #(uv.cpu_info() or {})
    detected = { gpus = engine.cuda_device_count(), cores = cores, memory = meminfo_bytes(),
                 cpu_bf16 = engine.cpu_bf16() }
    if detected.gpus > 0 then
      -- for env.num_envs = "auto": the card's memory and the engine's plan
      detected.gpu_memory_free, detected.gpu_memory = engine.cuda_device_memory(0)
      detected.fit_num_envs = engine.fit_num_envs
    end
  end
  return detected
end

-- ---------------------------------------------------------------- training

local function resolve(cfg_or_path, opts)
  local config = moonrl.config
  opts = opts or {}
  local file = cfg_or_path
  if file ~= nil and type(file) ~= "string" and type(file) ~= "table" then
    return nil, "expected a config table or the path of a config file, got " .. type(file)
  end
  if type(file) == "string" then
    local st = uv.fs_stat(file)
    local rs = require("moonrl.resume")
    if (st and st.type == "directory") or rs.is_checkpoint(file) then return nil, rs.hint(file) end
  end
  if opts.sets ~= nil and type(opts.sets) ~= "table" then
    return nil, "opts.sets: expected a list of \"key=value\" strings, got " .. type(opts.sets)
  end
  local cfg, notes = config.resolve {
    file = file, sets = opts.sets, hardware = opts.hardware, level = opts.level, detect = moonrl.detect,
    default_experiment = true,   -- no file: configs/default.lua (moonrl.resources)
  }
  if not cfg then return nil, notes end
  if opts.dir ~= nil then
    local ok, err = config.set(cfg, "dir", opts.dir)
    if not ok then return nil, err end
  end
  if opts.hooks ~= nil then
    if type(opts.hooks) ~= "table" then return nil, "opts.hooks: expected a table of functions" end
    for k, fn in pairs(opts.hooks) do
      local ok, err = config.set(cfg, "hooks." .. tostring(k), fn)
      if not ok then return nil, "opts.hooks: " .. err end
    end
  end
  return cfg, notes
end

function moonrl.resolve(cfg_or_path, opts)
  return resolve(cfg_or_path, opts)
end

local live = {}   -- run -> true while it trains
local tracked = {}   -- what else a stop signal stops (a sweep) -> true while it goes

function moonrl.runs()
  local out = {}
  for r in pairs(live) do out[#out + 1] = r end
  return out
end

-- The process on its way out (a stop signal, the main script's error): every
-- live run stops after its update in progress with a final checkpoint, and
-- once the last one has closed its files the loop stops and the process exits
-- with `code`. Asked again meanwhile, it exits at once: the last complete
-- checkpoint stays as it is (they are written atomically).
function moonrl._stop_all(code, reason)
  if stopping then
    io.stderr:write("moonrl: ", reason, " again: exiting now, without waiting for the runs\n")
    for s in pairs(tracked) do if s._abort then pcall(s._abort, s) end end   -- a sweep's trials quit too
    core.exit_now(code)
    return
  end
  stopping = { code = code, reason = reason }
  if not next(live) and not next(tracked) then return core.shutdown(code) end
  for r in pairs(live) do r:stop({ reason = reason }) end
  for s in pairs(tracked) do s:stop({ reason = reason }) end
end

local function runs_list()
  local out = {}
  for r in pairs(live) do out[#out + 1] = r end
  for r in pairs(tracked) do out[#out + 1] = r end
  table.sort(out, function(a, b) return a.dir < b.dir end)
  return out
end

local function watch_signals()
  require("moonrl.signals").install({
    runs = runs_list, stop_all = moonrl._stop_all, stopping = function() return stopping ~= nil end,
  })
end

-- Something that a stop signal stops as it stops runs (a sweep: obj:stop{reason =},
-- obj:_note(msg), obj:checkpoint(), obj.dir); it untracks itself once it has ended.
function moonrl._track(obj)
  tracked[obj] = true
  watch_signals()
end

function moonrl._untrack(obj)
  tracked[obj] = nil
  if stopping and not next(live) and not next(tracked) then core.shutdown(stopping.code) end
end

-- Starts a run of an already resolved config (the CLI resolves first, to
-- tell a config error from a failure to start).
function moonrl._start(cfg, notes, opts)
  opts = opts or {}
  if stopping then
    util.refuse("not starting a run: moonrl is stopping (" .. stopping.reason .. ")", 3)
  end
  local Run = require("moonrl.run")
  local run = Run.start(cfg, {
    notes = notes, console = opts.console, quiet = opts.quiet, resume = opts.resume, force = opts.force,
    verbose = opts.verbose or moonrl._verbose,   -- moonrl._verbose: `moonrl run --verbose`
    on_end = function(r)
      live[r] = nil
      if stopping and not next(live) and not next(tracked) then core.shutdown(stopping.code) end
    end,
  })
  live[run] = true
  watch_signals()
  return run
end

-- What moonrl.train would resume: the plan of moonrl.resume (plan.cfg, plan.notes).
function moonrl._resume_plan(cfg_or_path, opts)
  local dir = opts.resume
  local changes = cfg_or_path
  if type(cfg_or_path) == "table" and cfg_or_path.resume ~= nil then
    dir = dir or cfg_or_path.resume
    changes = {}
    for k, v in pairs(cfg_or_path) do if k ~= "resume" then changes[k] = v end end
  end
  if opts.dir ~= nil then
    return nil, "resume: a resumed run keeps its directory (" .. tostring(dir) .. "); dir cannot be given"
  end
  if changes ~= nil and type(changes) ~= "string" and type(changes) ~= "table" then
    return nil, "expected a config table or the path of a config file, got " .. type(changes)
  end
  return require("moonrl.resume").prepare(dir, {
    file = changes, sets = opts.sets, hardware = opts.hardware, level = opts.level, hooks = opts.hooks,
  })
end

function moonrl.train(cfg_or_path, opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("moonrl.train: opts must be a table, got " .. type(opts), 2) end
  if opts.resume ~= nil or (type(cfg_or_path) == "table" and cfg_or_path.resume ~= nil) then
    local plan, err = moonrl._resume_plan(cfg_or_path, opts)
    if not plan then util.refuse("moonrl.train: " .. err, 2) end
    if plan.finished then util.refuse("moonrl.train: " .. plan.finished:gsub("moonrl train %-%-resume (%S+) %-%-set total_steps=N",
      "moonrl.train{resume = %1, total_steps = N}"), 2) end
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.resume = plan
    return moonrl._start(plan.cfg, plan.notes, o)
  end
  local cfg, notes = resolve(cfg_or_path, opts)
  if not cfg then util.refuse(notes, 2) end
  return moonrl._start(cfg, notes, opts)
end

-- -------------------------------------------------------------- evaluation

-- The checkpoint to evaluate and the eval settings of its run (or nil).
local function eval_args(target, on_skip)
  local path
  if type(target) == "string" then
    path = target
    local rs = require("moonrl.resume")
    local st = uv.fs_stat(target)
    local run_dir = st and st.type == "directory" and target or rs.run_dir_of(target)
    local defaults
    if run_dir then
      local now = run_dir .. "/" .. rs.NOW_FILE   -- the config in force after changes, else the one it started with
      local t = require("moonrl.config").load_file(uv.fs_stat(now) and now or run_dir .. "/config.lua")
      defaults = type(t) == "table" and type(t.eval) == "table" and t.eval or nil
    end
    if st and st.type == "directory" then
      local ck, err = rs.newest(target)
      if not ck then return nil, "moonrl.evaluate: " .. err end
      for _, d in ipairs(ck.damaged) do
        if on_skip then on_skip(d.path, d.error) end
      end
      path = ck.path
    end
    return path, defaults
  elseif getmetatable(target) == require("moonrl.run") then
    if target:alive() then
      return nil, "moonrl.evaluate: the run is still training; wait for it (run:wait()) or pass a checkpoint path"
    end
    path = target.last_checkpoint
    if not path then return nil, "moonrl.evaluate: the run wrote no checkpoint (it failed before its first one)" end
  else
    return nil, "moonrl.evaluate: expected a checkpoint path or a run, got " .. type(target)
  end
  return path
end

function moonrl.evaluate(target, opts)
  opts = opts or {}
  local engine = require("moonrl.engine")
  local cb = opts.callback
  local function finish(res, err)
    if cb then cb(res, err) end
    return res, err
  end
  local path, run_eval = eval_args(target, opts.on_skip)   -- run_eval: the error when no path
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
  if opts.mode ~= nil and (type(opts.mode) ~= "string" or engine.mode_from_name(opts.mode) < 0) then
    return finish(nil, "moonrl.evaluate: mode " .. tostring(opts.mode) ..
      " is not a mode: accepted ground_truth, ground_truth_blinded, proxy_mortal, proxy")
  end
  local ec, eerr = engine.eval_config(eval, opts.mode)
  if not ec then return finish(nil, "moonrl.evaluate: " .. eerr) end
  local copts = {}
  if opts.device ~= nil then
    local d = ({ auto = 0, cpu = engine.C.MR_DEVICE_CPU, cuda = engine.C.MR_DEVICE_CUDA })[opts.device]
    if not d then return finish(nil, "moonrl.evaluate: device " .. tostring(opts.device) .. ": accepted auto, cpu, cuda") end
    copts.device = tonumber(d)
  end
  if opts.threads ~= nil then copts.threads = opts.threads end
  if opts.records ~= false then copts.records = true end   -- the table's numbers come from them
  if opts.progress ~= nil then
    if type(opts.progress) ~= "function" then return finish(nil, "moonrl.evaluate: progress must be a function") end
    copts.progress = opts.progress
  end

  local function start(done)
    core.evaluate(path, engine.bytes(ec), copts, function(rbytes, err, describe, cfg_bytes, rec_bytes)
      if not rbytes then return done(nil, err) end
      local r = engine.eval_result(rbytes)
      local trained = engine.config_from_bytes(cfg_bytes)
      r.mode = opts.mode or engine.mode_name(trained.env.mode)
      r.checkpoint, r.describe = path, describe
      r.update = require("moonrl.evaltable").update_of(path)
      r.trained_mode, r.train_seed = engine.mode_name(trained.env.mode), tonumber(trained.seed)
      r.eval = { num_envs = ec.num_envs, steps = ec.steps, runs = ec.runs, seed = tonumber(ec.seed) }
      if rec_bytes then r.records = engine.eval_records(rec_bytes) end
      done(r)
    end)
  end
  if cb then
    start(cb)
    return nil
  end
  return moonrl._await("moonrl.evaluate (without opts.callback)", start)
end

-- The evaluation table (docs/evaluation.md) of results of moonrl.evaluate:
-- the same computation as `moonrl eval` (moonrl.evaltable, from the
-- records): what was evaluated, one column per result (its `label`, else its
-- mode), every metric with its 95% interval, the definitions. opts: boot
-- (resamples, default 1000), boot_seed (1), unit ("agents" | "runs").
function moonrl.eval_table(results, opts)
  opts = opts or {}
  local et = require("moonrl.evaltable")
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
    local s = et.summarise(r, { boot = opts.boot or 1000, boot_seed = opts.boot_seed or 1, unit = opts.unit })
    if r.label ~= nil then s.label = tostring(r.label) end
    summaries[k] = s
  end
  return et.table(summaries)
end

return moonrl

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
--             pause_at_steps = N or {N, ...} (pause where the agent-steps reach each: run:pause)
--             force = true (a dir that holds a run: move that run aside to
--             <dir>.old-<time> and start anew; without it such a dir is refused)
--             ranks = R (R >= 2: one run of R processes through mpirun; the
--             run object is moonrl.run.launched's, hooks run here)
--   moonrl.train{resume = RUN_DIR, <config keys to change>...}   the same, in one table
--   moonrl.train{ranks = R, <config keys>...}       ranks likewise, taken out of the table
--   moonrl.resolve(cfg_or_path, opts) -> cfg, notes | nil, err   what train() would run
--   moonrl.evaluate(checkpoint_or_run, opts) -> result | nil, err
--       checkpoint_or_run: a checkpoint file, a run directory (its newest valid
--             checkpoint) or a finished run
--       opts: mode = name (default: the trained mode), num_envs, steps, runs, seed
--             (default: the run's cfg.eval - a run directory's config.lua, also for
--             a checkpoint in its checkpoints/ - else the engine's), device =
--             "cpu"|"cuda", threads, lua = a Lua environment's env.lua (default: the
--             run's config.lua's), progress = function(done, total) (steps of
--             runs x steps, on the loop while it works; default: lines on stderr
--             once it has taken 2 s; false or quiet = true: none), on_skip = function(path, err)
--             (a damaged checkpoint of a run directory passed over),
--             callback = function(result, err) (then it returns at once),
--             records = false (no result.records: saves their memory, but
--             moonrl.eval_table needs them), protocol = "episodic" | "survival"
--             (default: the environment's own: survival for foraging, else
--             episodic), episodes = K (episodic: stop a run once K episodes
--             ended), greedy = true (the most likely action, not a sample)
--       result: protocol, mode, checkpoint, update (of update_NNNNNNN.mrck), describe,
--               trained_mode, train_seed, environment (env.name), eval = {num_envs, steps,
--               runs, seed[, episodes, greedy]}, records;
--               episodic: counters (their names), success (what counts as one, in
--               words, or nil), records = every episode (engine.eval_episodes,
--               which moonrl.eval.episodic summarises);
--               survival: records = every death and survivor (engine.eval_records,
--               which moonrl.eval.table summarises), and the engine's own aggregates
--               (mr_eval_result, kept in eval.json as engine_table): energy_per_1k,
--               efficiency (per-env mean), survival (mean of all episodes, not
--               censored), deaths_per_1k, food_per_1k, poison_per_1k
--   moonrl.eval_table(results, opts) -> string     the evaluation table of `moonrl eval`
--       (docs/evaluation.md): the checkpoint and update, every metric with its 95%
--       interval (results of one protocol, and episodic ones of one environment);
--       opts: boot, boot_seed, unit
--   moonrl.policy(checkpoint_or_run) -> p | nil, err   a checkpoint's policy on your observations:
--       p:act(obs) -> {n, logits, probs, action, value} (moonrl.policy's header; `moonrl act`)
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
--   moonrl.dashboard{dirs =, port =, host =, token_file =} -> d | nil, err   the live
--       dashboard in the browser, on this loop (moonrl.dashboard's header, docs/dashboard.md)
--   moonrl.schedule, moonrl.config                 re-exports
--   moonrl.version, moonrl.home
--
-- This module only re-exports: the loop and its coroutines are
-- moonrl.runtime.tasks, the stop of everything moonrl.runtime.shutdown,
-- starting a run moonrl.run.start, evaluating moonrl.eval.evaluate.
--
-- The library, by folder (spec/module_graph_spec.lua keeps it free of
-- require cycles, its packages in docs/architecture.md's order, and free of
-- calls into another module's _-prefixed helpers):
--   runtime/   the process: tasks (coroutines on the loop), shutdown (stop all),
--              signals, hardware (detect), asyncfile, libc (flock, geteuid, strerror)
--   run/       a run (init), start, its directory (dir: also finding run directories
--              and following their files; dirlock), resume, changes, live tweaks
--              (live: the watcher, tweaks: reading and checking the file), alerts,
--              hooks (calling cfg.hooks), process (moonrl as a child process), options (the
--              argument checks a run and launched share), launched
--              (a run of several ranks through mpirun), trim_metrics (its metrics cut back
--              to a checkpoint on resume), sinks/ (console, jsonl, csv, tensorboard)
--   control/   a run's control socket: socket (path, trust), server, client
--   config/    configs: load, merge, resolve, validate, schema, warmup, serialize, docs,
--              env_script (an env.lua table in the script as text)
--   env/       Lua environments: program (a file's declarations), thread (a thread's loops)
--   sweep/     sweeps: init (its life), definition, space, spaces (each experiment's default), asha, tpe,
--              pbt, pb2 and gp (PB2's bandit), results, plot, front, executors
--   dashboard/ the live dashboard: init (routes, token, checks), http (the server), data (the files read), page/
--   eval/      evaluate, table (the evaluation table), stats, files (eval.json, SVG)
--   formats/   json, svg, tensorboard (event files)
--   bench/     throughput measurements (init) and the PyTorch comparison (compare)
--   cli/       the `moonrl` command line: init (dispatch), cmdline (the one argument
--              parser), commands/ (one module a command)
--   engine.lua (the C engine through the FFI), schedule.lua, sandbox.lua (what
--   config, live and environment files run in, and the bounds), resources.lua
--   (the files moonrl ships), util.lua, number.lua (finite, thousands),
--   policy.lua, gen_docs.lua (writes docs/config.md)

local core = require("moonrl.core")
local tasks = require("moonrl.runtime.tasks")
local shutdown = require("moonrl.runtime.shutdown")
local hardware = require("moonrl.runtime.hardware")
local start = require("moonrl.run.start")
local evaluate = require("moonrl.eval.evaluate")

local moonrl = {}

moonrl.version = core.version()
moonrl.home = core.home()
moonrl.schedule = require("moonrl.schedule")
moonrl.config = require("moonrl.config")

local space = require("moonrl.sweep.space")
for _, name in ipairs({ "uniform", "loguniform", "randint", "choice", "grid" }) do moonrl[name] = space[name] end
function moonrl.asha(opts) return require("moonrl.sweep.asha").new(opts) end
function moonrl.sweep(spec)   -- dashboard = true: the sweep is served by moonrl.dashboard (which reads sweeps)
  return require("moonrl.sweep").start(spec, { dashboard = require("moonrl.dashboard").serve_for })
end
function moonrl.slurm(opts) return require("moonrl.sweep.slurm_executor").new(opts) end
moonrl.dashboard = require("moonrl.dashboard").serve   -- loaded here: it serves the runs started with dashboard = true

moonrl.resume = tasks.resume
moonrl.spawn = tasks.spawn
moonrl.wait = tasks.wait
moonrl.sleep = tasks.sleep
moonrl.runs = shutdown.runs
moonrl.detect = hardware.detect
moonrl.resolve = start.resolve
moonrl.train = start.train
moonrl.evaluate = evaluate.evaluate
moonrl.policy = function(path) return require("moonrl.policy").load(path) end
moonrl.eval_table = evaluate.eval_table

return moonrl

-- `moonrl train`: resolve a config, train it with a progress line, print the
-- summary and evaluate the trained policy.

local cmdline = require("moonrl.cmdline")

local train = {
  name = "train",
  order = 10,
  usage = "train [config.lua] [--set k=v ...]",
  summary = "train; no file = the built-in default (configs/default.lua)",
  help = [[
usage: moonrl train [config.lua] [options]

Trains the config (a Lua file returning a table; default configs/default.lua),
layered over the built-in defaults, a hardware profile and an optimisation
level. Prints the run directory, progress, and at the end a summary with an
evaluation of the trained policy (cfg.eval settings).

options:
  --set key=value     override a config key (repeatable), e.g. --set ppo.lr=1e-4
  --dir DIR           run directory (default runs/<name>-<YYYYmmdd-HHMMSS>)
  --hardware H        hardware profile: auto, cpu, cuda, debug, ci, production, or a .lua path
  --level L           optimisation level: basic, advanced, ultra, or a .lua path
  --no-eval           skip the evaluation at the end
  --help              this text

signals (the run directory keeps its last complete checkpoint whatever happens):
  SIGINT (Ctrl-C), SIGTERM   finish the update in progress, write a checkpoint,
                      close the metrics and log files, skip the evaluation and
                      exit 130 / 143 (SIGQUIT, SIGXCPU, SIGPWR likewise: 131,
                      152, 158); the same signal again exits at once
  SIGUSR1             write a checkpoint and go on
  SIGHUP              logged; training goes on

exit codes:
  0    trained (and evaluated)
  1    the run failed: an engine error, a checkpoint that could not be written,
       faults.max_bad_updates non-finite updates in a row (the final checkpoint
       is then the last good state), or the evaluation failed
  2    a bad command line or config
  128+N  stopped by signal N: 130 SIGINT, 143 SIGTERM (a final checkpoint written)
]],
}

local out, err, usage_error = cmdline.out, cmdline.err, cmdline.usage_error

local function print_summary(s)
  local m = s.metrics or {}
  out(string.format("\n%s: %s after %d updates, %d agent-steps, %.1f s (%.0f agent-steps/s)\n",
    s.dir, s.status, s.updates, s.agent_steps, s.seconds, s.sps))
  if s.error then out("  error: ", s.error, "\n") end
  if s.metrics then
    out(string.format("  last update: return %.3f, efficiency %.1f%%, entropy %.3f, lr %.3g\n",
      m.episode_return_mean or 0, 100 * (m.efficiency or 0), m.entropy or 0, m.lr or 0))
  end
  if s.describe then out("  engine: ", s.describe, "\n") end
  if s.checkpoint then out("  checkpoint: ", s.checkpoint, "\n") end
  local hooks = {}
  for k, v in pairs(s.hook_errors or {}) do hooks[#hooks + 1] = k .. " x" .. v end
  if #hooks > 0 then out("  hook failures: ", table.concat(hooks, ", "), "\n") end
end

function train.run(argv)
  local moonrl, uv = require("moonrl"), require("luv")
  local o, e = cmdline.parse("train", argv, {
    set = { "list", "key=value" }, dir = { "value", "a directory" },
    hardware = { "value", "a profile name or .lua path" }, level = { "value", "a level name or .lua path" },
    ["no-eval"] = { "flag" },
  }, 1)
  if not o then return usage_error(e) end
  if o.help then return out(train.help) end
  local file = o._pos[1]
  if file and not uv.fs_stat(file) then
    return usage_error("moonrl train: config file '" .. file .. "' not found")
  end
  local cfg, notes = moonrl.resolve(file, { sets = o.set, hardware = o.hardware, level = o.level, dir = o.dir })
  if not cfg then return usage_error("moonrl train: " .. notes) end
  local run = moonrl._start(cfg, notes, {})
  out("run directory: ", run.dir, "\n")
  local s = run:wait()
  print_summary(s)
  if s.status == "error" then return 1 end
  local stopped_by = require("moonrl.signals").exit_code()
  if stopped_by then return stopped_by end   -- no evaluation: the user wants the process to end
  if o["no-eval"] or not s.checkpoint then return end
  out(string.format("\nevaluation (%d envs x %d steps x %d runs):\n", cfg.eval.num_envs, cfg.eval.steps, cfg.eval.runs))
  local r, ee = moonrl.evaluate(run)
  if not r then
    err("moonrl train: evaluation failed: ", ee, "\n")
    return 1
  end
  out(moonrl.eval_table({ r }), "\n")
end

return train

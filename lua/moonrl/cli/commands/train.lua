-- `moonrl train`: resolve a config (or resume a run: moonrl.resume), train it
-- with a progress line, print the summary and evaluate the trained policy.

local cmdline = require("moonrl.cli.cmdline")

local train = {
  name = "train",
  order = 10,
  usage = "train [config.lua] [--set k=v ...]",
  summary = "train; no file = the built-in default (configs/default.lua), a name = configs/experiments/NAME.lua; --resume RUN_DIR continues a run",
  help = [[
usage: moonrl train [config.lua | NAME] [options]
       moonrl train --resume RUN_DIR [changes.lua] [--set key=value ...]

Trains the config (a Lua file returning a table; default configs/default.lua),
layered over the built-in defaults, a hardware profile and an optimisation
level. Prints the run directory, progress, and at the end a summary with an
evaluation of the trained policy (cfg.eval settings): the same table, with
intervals, and the same files as `moonrl eval` of the final checkpoint, in
RUN_DIR/eval/update_NNNNNNN (docs/evaluation.md).

A NAME that is no file is an experiment moonrl ships (embedded in the
binary, found from any directory): `default` (configs/default.lua) or one of
configs/experiments/, e.g. `moonrl train foraging`. A file of that name in
the working directory comes first. An unknown name lists the built-in ones.

With --resume, continues the run in RUN_DIR from its newest valid checkpoint
(RUN_DIR/checkpoints; a damaged one is reported and the next older one used)
with the run's own config.lua, in the same directory: metrics written after
that checkpoint are dropped and the files go on from it. A changes file and
--set may change hot keys (total_steps, ppo.lr, ...) and output settings
(log.*, eval.*, alerts.*); other keys need a new run. After changes made
while it trained the run continues from RUN_DIR/config.now.lua (the config
in force after the last change) instead. A hot key edited in that file is
applied with a note (old and new value); another key edited is refused.
A finished run (total_steps reached) is said to be, and left as it is
(exit 0): --set total_steps=N with a larger N trains it further. On the
cpu a resumed run is bit for bit the run that was not interrupted.

Started by `mpirun -n R` or `srun --ntasks=R`, it is one run of R ranks
(processes), each stepping env.num_envs environments of its own and all
averaging their gradients (Open MPI); rank 0 writes the one run directory
and answers moonrl ctl. total_steps counts every rank's steps. A run resumes
on any count of ranks (docs/data-parallel.md).

options:
  --resume RUN_DIR    continue that run (see above)
  --set key=value     override a config key (repeatable), e.g. --set ppo.lr=1e-4
  --dir DIR           run directory (default runs/<name>-<YYYYmmdd-HHMMSS>); a directory
                      that holds a run is refused (--resume DIR continues it)
  --force             with --dir: move a run already there aside to DIR.old-<time>
                      (nothing is deleted; the note says where) and start anew
  --live FILE         watch FILE while training: each save applies its hot keys at
                      the next update (a Lua file returning e.g. { ppo = { lr = 1e-4 } });
                      SIGHUP re-reads it; the config key `live` does the same
  --hardware H        hardware profile: auto, cpu, cuda, debug, ci, production, or a .lua path
  --level L           optimisation level: basic, advanced, ultra, or a .lua path
  --no-eval           skip the evaluation at the end
  --pause-at-steps N[,N...]
                      pause at the end of the first update that reaches each of
                      those agent-step counts (moonrl ctl RUN_DIR resume goes on);
                      what a sweep's trials use for exact decision points
  --verbose           also print the notes that only tell how a default was resolved
                      (the budget, hardware = auto, a level's settings that do not apply
                      on the cpu); without it they go to RUN_DIR/train.log only
  --help              this text

signals (the run directory keeps its last complete checkpoint whatever happens):
  SIGINT (Ctrl-C), SIGTERM   finish the update in progress, write a checkpoint,
                      close the metrics and log files, skip the evaluation and
                      exit 130 / 143 (SIGQUIT, SIGXCPU, SIGPWR likewise: 131,
                      152, 158); the same signal again exits at once
  SIGUSR1             write a checkpoint and go on
  SIGHUP              re-reads the --live tweak files (else logs "nothing to
                      re-read"); training goes on

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
  out(string.format("\n%s: %s after %d update%s, %d agent-steps, %.1f s%s (%.0f agent-steps/s)\n",
    s.dir, s.status, s.updates, s.updates == 1 and "" or "s", s.agent_steps, s.seconds,
    s.resumed_from and (" since resuming from update " .. s.resumed_from) or "", s.sps))
  if s.error then out("  error: ", s.error, "\n") end
  if s.metrics then
    out(string.format("  last update: return %s, efficiency %s, entropy %.3f, lr %.3g\n",
      m.episode_return_mean and string.format("%.3f", m.episode_return_mean) or "- (no episode ended)",
      m.efficiency and string.format("%.1f%%", 100 * m.efficiency) or "-", m.entropy or 0, m.lr or 0))
  end
  if s.describe then out(table.concat(require("moonrl.util").engine_lines(s.describe, "  engine: ", "    "), "\n"), "\n") end
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
    ["no-eval"] = { "flag" }, force = { "flag" }, verbose = { "flag" }, resume = { "value", "a run directory" }, live = { "value", "a tweak file" },
    ["pause-at-steps"] = { "value", "agent-step counts, N[,N...]" },
  }, 1)
  if not o then return usage_error(e) end
  if o.help then return out(train.help) end
  local pause_marks
  if o["pause-at-steps"] then
    local perr
    pause_marks, perr = require("moonrl.run.options").pause_marks_text(o["pause-at-steps"], "--pause-at-steps")
    if not pause_marks then return usage_error("moonrl train: " .. perr .. ", e.g. --pause-at-steps 50000,100000") end
  end
  local file = o.positional[1]
  -- without --resume, a name that is no file may be a built-in experiment
  -- (configs/experiments/<name>.lua): moonrl.resolve finds it or lists them
  if file and o.resume and not uv.fs_stat(file) then
    -- the first mistake: the experiment's name again (`moonrl train cartpole --resume RUN`)
    local loader = require("moonrl.config.load")
    local builtin = false
    for _, name in ipairs(loader.experiments()) do builtin = builtin or name == file end
    if builtin then
      return usage_error("moonrl train --resume " .. o.resume .. ": '" .. file .. "' is a built-in experiment, " ..
        "but a resumed run keeps its own config: drop '" .. file .. "' (moonrl train --resume RUN_DIR " ..
        "[changes.lua] [--set key=value ...])")
    end
    return usage_error("moonrl train: config file '" .. file .. "' not found (with --resume, a file of config " ..
      "changes: moonrl train --resume RUN_DIR [changes.lua])")
  end
  local cfg, notes, plan
  if o.resume then
    if o.dir then return usage_error("moonrl train: --resume continues in the run's own directory; drop --dir") end
    if o.force then return usage_error("moonrl train: --resume continues the run in its directory; --force is for a new run") end
    if file and (require("moonrl.run.resume").is_checkpoint(file) or uv.fs_stat(file).type == "directory") then
      return usage_error("moonrl train --resume " .. o.resume .. ": '" .. file .. "' is not a file of config " ..
        "changes; moonrl train --resume RUN_DIR [changes.lua] [--set k=v ...]")
    end
    local perr
    plan, perr = require("moonrl.run.start").resume_plan(file, { resume = o.resume, sets = o.set, hardware = o.hardware, level = o.level })
    if not plan then return usage_error("moonrl train --resume: " .. perr) end
    cfg, notes = plan.cfg, plan.notes
    if plan.finished then   -- nothing to train: said, and the run left as it is
      for _, n in ipairs(notes) do err("moonrl: note: ", n, "\n") end
      out(plan.finished, "\n")
      return 0
    end
  else
    cfg, notes = moonrl.resolve(file, { sets = o.set, hardware = o.hardware, level = o.level, dir = o.dir })
    if not cfg then return usage_error("moonrl train: " .. notes) end
    -- a run's own config.lua of an older moonrl names its directory: a copy is a new run
    local from_run = file and require("moonrl.run.resume").run_dir_of(file:gsub("config%.lua$", "checkpoints/x"))
    if file and not o.dir and cfg.dir and from_run and cfg.dir:gsub("/+$", "") == from_run then
      cfg.dir = nil
      notes[#notes + 1] = file .. " names its own run's directory (dir = " .. from_run .. "): this new run gets " ..
        "a new one (--dir DIR to choose it)"
    end
    if cfg.dir then
      local found = require("moonrl.run.dir").occupied(cfg.dir)
      if #found > 0 then
        local lock, lerr = require("moonrl.run.dirlock").take(cfg.dir)
        if not lock then   -- a process runs there: that is the news
          err("moonrl train: ", lerr, "\n")
          return 1
        end
        lock:release()
        if not o.force then
          return usage_error("moonrl train: " .. require("moonrl.run.dir").occupied_message(cfg.dir, found, true))
        end
      end
    end
  end
  if o.live then
    local ok, lerr = moonrl.config.set(cfg, "live", o.live)
    if not ok then return usage_error("moonrl train: --live: " .. lerr) end
  end
  -- a config the engine or the machine refuses is said plainly, before any run directory exists
  local started, run = pcall(require("moonrl.run.start").start, cfg, notes, { resume = plan, force = o.force, verbose = o.verbose,
    pause_at_steps = pause_marks })
  if not started then   -- bad input (the config, policy.init) exits 2, anything else 1
    -- the position of moonrl's own raise goes; a user file's (a Lua environment's "FILE:LINE: ") stays
    err("moonrl train: ", (tostring(run):gsub("^[^\n]-lua/moonrl/[^\n]-%.lua:%d+: ", "")), "\n")
    return require("moonrl.util").is_bad_input(run) and 2 or 1
  end
  out("run directory: ", run.dir, "\n")
  local s = run:wait()
  print_summary(s)
  if s.status == "error" then return 1 end
  local stopped_by = require("moonrl.runtime.signals").exit_code()
  if stopped_by then return stopped_by end   -- no evaluation: the user wants the process to end
  if o["no-eval"] or not s.checkpoint then return end
  out(string.format("\nevaluation (%d envs x %d steps x %d run%s):\n", cfg.eval.num_envs, cfg.eval.steps, cfg.eval.runs,
    cfg.eval.runs == 1 and "" or "s"))
  -- the same computation, table and files as `moonrl eval CHECKPOINT` (RUN_DIR/eval/update_NNNNNNN)
  local e = cfg.eval
  if require("moonrl.cli.commands.eval").evaluate({ s.checkpoint },
      { envs = e.num_envs, steps = e.steps, runs = e.runs, seed = e.seed },
      "moonrl train (its evaluation at the end, as moonrl eval " .. s.checkpoint .. ")") then
    err("moonrl train: evaluation failed (above)\n")
    return 1
  end
end

return train

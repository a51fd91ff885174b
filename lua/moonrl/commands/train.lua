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
  --live FILE         watch FILE while training: each save applies its hot keys at
                      the next update (a Lua file returning e.g. { ppo = { lr = 1e-4 } });
                      SIGHUP re-reads it; the config key `live` does the same
  --hardware H        hardware profile: auto, cpu, cuda, debug, ci, production, or a .lua path
  --level L           optimisation level: basic, advanced, ultra, or a .lua path
  --no-eval           skip the evaluation at the end
  --help              this text
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
    ["no-eval"] = { "flag" }, live = { "value", "a tweak file" },
  }, 1)
  if not o then return usage_error(e) end
  if o.help then return out(train.help) end
  local file = o._pos[1]
  if file and not uv.fs_stat(file) then
    return usage_error("moonrl train: config file '" .. file .. "' not found")
  end
  local cfg, notes = moonrl.resolve(file, { sets = o.set, hardware = o.hardware, level = o.level, dir = o.dir })
  if not cfg then return usage_error("moonrl train: " .. notes) end
  if o.live then
    local ok, lerr = moonrl.config.set(cfg, "live", o.live)
    if not ok then return usage_error("moonrl train: --live: " .. lerr) end
  end
  local run = moonrl._start(cfg, notes, {})
  out("run directory: ", run.dir, "\n")
  local s = run:wait()
  print_summary(s)
  if s.status == "error" then return 1 end
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

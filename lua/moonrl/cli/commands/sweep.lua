-- `moonrl sweep status|plot|lineage|report DIR`: a sweep directory (moonrl.sweep) seen from
-- outside - while it runs or after it ended.

local cmdline = require("moonrl.cli.cmdline")

local sweep = {
  name = "sweep",
  order = 25,
  usage = "sweep EXP|status|report|... DIR",
  summary = "a hyperparameter sweep's table (status), its SVG plots (plot), a PBT winner's history (lineage) or what it found (report: the best against the default, which keys mattered); sweeps are scripts: moonrl.sweep{...}, or EXP: a shipped experiment over its default space",
  help = [[
usage: moonrl sweep status DIR [--json]
       moonrl sweep plot DIR
       moonrl sweep lineage DIR
       moonrl sweep report DIR [--default RUN,RUN,...]
       moonrl sweep EXPERIMENT [--method M] [--trials N] [--parallel N] [--asha STEPS]
                    [--budget STEPS] [--finish STEPS] [--finish-schedules base] [--dir DIR]
                    [--set key=value]... [--metric M]
                    [--smooth N] [--seed N]

moonrl sweep EXPERIMENT (a shipped experiment's name: foraging, reach,
cartpole, ...) runs a sweep of it over its default search space
(docs/sweeps.md, "Default spaces"; moonrl.sweep.spaces) without a script:
  --method     random (default), tpe, grid, pbt (a population of --trials
               members, PB2's explore over the space's hot keys, synchronous:
               pbt.sync, as members of other batches reach a count apart)
  --trials     trials (default 16; pbt: the population, default 4)
  --parallel   trials at once (default 1)
  --asha       early stopping from this many agent-steps (ASHA, reduction 3);
               with --method tpe the model is fitted on its rungs (BOHB-style)
  --budget     agent-steps in all (random, tpe): trials start while theirs
               fit (with --asha, while their first rung fits, and the one
               running when it is spent is stopped); --trials is then the
               most trials (default 64). With --finish, the search spends
               the budget less the finish
  --finish     once every trial ended, the best one trains on from its
               last checkpoint by this many agent-steps (pbt: the best
               member, alone, once the population ended)
  --finish-schedules
               constant (default): the finish keeps the trial's values;
               base: each swept key the experiment schedules (lr, clip,
               ent_coef) goes from the trial's value to the experiment's
               end ratio over the finish (measured: better on dials, worse
               on cartpole; docs/sweeps.md, "A finish")
  --dir        the sweep directory (default runs/<name>-sweep; the same
               one resumes)
  --set        key=value over the experiment, for every trial (repeatable)
  --metric     default efficiency for foraging, episode_return_mean else;
               eval.return_mean (eval.<key>) ranks by each trial's own
               evaluation at its end, PBT evaluates every member at every
               decision and ASHA every trial at its rungs: slower, and it
               keeps better networks
               (docs/sweeps.md, "Ranking by evaluation"); keep the
               evaluation small (--set eval.num_envs=16 --set eval.steps=1000)
  --smooth     a trial's value: the mean of its last N values (default 5)
  --seed       the sweep seed

A sweep is started from a script (moonrl run sweep.lua; see
docs/sweeps.md) and keeps its state in its directory DIR:
sweep.json, results.jsonl (a line per start, rung decision and result),
best.lua (the best trial's config, runnable: moonrl train DIR/best.lua) and
one run directory per trial (DIR/trial-NNN).

  status   the trials sorted by the sweep's metric, with their settings,
           status (done, failed, stopped early, running, interrupted,
           pending), agent-steps, seed and run directory; a running trial
           shows its latest value (its control socket is asked whether it runs;
           for a Slurm sweep, squeue: queued or running); a sweep with
           repeats also lists each setting's mean and 95% interval over its
           seeds, and which settings the best cannot be told from; then
           the best result within a budget: for a few round budgets of
           agent-steps, then of seconds of training, the best value any
           trial reached at no more cost (the Pareto front of cost against
           the metric: every update of every trial counts, at the mean of
           its last `smooth` values; failed trials do not), with the trial,
           the update, its cost and its settings
  plot     writes DIR/plots/curves.svg (each trial's metric against
           agent-steps), DIR/plots/param_<key>.svg (the metric against each
           swept key), DIR/plots/front.svg and front_seconds.svg (the best
           within each budget of agent-steps, of seconds, as a step line
           over every trial's curve); the sweep writes them itself when it
           ends
  lineage  population-based training (method = "pbt"): the best member's
           history - whose weights it trained on, from which update to
           which, with which values of the explored keys - and
           DIR/lineage.lua, one plain run with those values at those
           updates (moonrl train DIR/lineage.lua)
  report   what the sweep found, printed and written to DIR/report/
           (report.md, importance.svg, parallel.svg, slice_<key>.svg):
           the best setting with its interval against the default's and
           a verdict (over training seeds where a side has several: a
           sweep's repeats, or --default runs); which keys mattered
           (fANOVA over a random forest of the finished trials; needs 4);
           the metric against the two keys that mattered most; every
           trial across the keys (parallel coordinates). The default: the
           --default runs, else the trial with the base config's value of
           every swept key, else none (the best is then set against the
           median setting, and the report says so)

options:
  --default RUN,RUN,...   report: run directories of the default (the
           base config trained on its own; several seeds for a verdict
           over seeds)
  --json   status: one JSON line per trial (its costs: steps, the
           agent-steps; train_seconds, the seconds of training over every
           process that trained it), then one line {"event": "front", ...}:
           for "steps" and "seconds", the front's points and the budget rows
  --help   this text
]],
}

local out, err, usage_error = cmdline.out, cmdline.err, cmdline.usage_error

local function status(dir, o)
  local control, json = require("moonrl.control.client"), require("moonrl.formats.json")
  local results, plot = require("moonrl.sweep.results"), require("moonrl.sweep.plot")
  local list, info = plot.trials(dir)
  -- started without a result: running, or left by an interrupted sweep?
  local ask = {}
  for _, r in ipairs(list) do if r.status == "running" then ask[#ask + 1] = r end end
  if #ask > 0 and info.executor == "slurm" then
    -- a Slurm task's control socket is on its node: ask squeue instead
    local ids = {}
    for _, r in ipairs(ask) do ids[#ids + 1] = r.job end
    local live = require("moonrl.sweep.slurm_executor").new({}):adopt(ids)
    for _, r in ipairs(ask) do
      local st = live[r.job]
      r.status = (st == "PENDING" and "queued") or (st and "running") or "interrupted"
    end
    ask = {}
  end
  if #ask > 0 then
    local dirs = {}
    for i, r in ipairs(ask) do dirs[i] = r.dir end
    local replies = require("moonrl.runtime.tasks").await("moonrl sweep status", function(wake)
      control.request_all(dirs, { cmd = "status" }, { timeout_ms = 2000 }, wake)
    end)
    for i, r in ipairs(ask) do
      if not (replies[i].reply and replies[i].reply.ok) then r.status = "interrupted" end
    end
  end
  local front = require("moonrl.sweep.front")
  local summary = front.of_sweep(list, info)
  if o.json then
    for _, r in ipairs(list) do
      r.curve = nil
      out(json.encode(r), "\n")
    end
    out(json.encode(front.json(summary)), "\n")
    return 0
  end
  local c = {}
  for _, r in ipairs(list) do c[r.status] = (c[r.status] or 0) + 1 end
  -- with a budget, `trials` is a cap: how many more start is the budget's to say, not pending
  local budget = type(info.definition) == "table" and tonumber(info.definition.budget) or nil
  local pending = budget and 0 or math.max(0, (tonumber(info.trials) or #list) - #list)
  local taken = 0
  for _, r in ipairs(list) do taken = taken + (tonumber(r.steps) or 0) end
  local keys = {}
  for k in pairs(info.space or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  out(string.format("sweep %s: %s over %s, metric %s (%s), %s; %s: %d done, %d failed, %d stopped early, " ..
    "%d running, %s%d interrupted, %d pending%s\n", dir, tostring(info.method), #keys > 0 and table.concat(keys, ", ") or "nothing",
    tostring(info.metric), tostring(info.mode or "max"), tostring(info.scheduler or "no early stopping"),
    budget and string.format("%d trial(s) at most", tonumber(info.trials) or #list) or
      string.format("%d trial(s)", tonumber(info.trials) or #list),
    c.done or 0, c.failed or 0, c.stopped or 0, c.running or 0,
    c.queued and (c.queued .. " queued in Slurm, ") or "", c.interrupted or 0, pending,
    budget and string.format("; budget: %s of %s agent-steps trained", results.thousands(taken), results.thousands(budget)) or ""))
  out(results.table(list, { metric = info.metric, mode = info.mode, keys = keys }), "\n")
  local best = results.best(list, info.mode)
  if best then
    out(string.format("best: %s, %s %s (%s)", best.label, tostring(info.metric), results.fmt(best.value),
      best.dir), require("luv").fs_stat(dir .. "/best.lua") and ("; its config: " .. dir .. "/best.lua") or "", "\n")
  end
  for _, r in ipairs(list) do
    if r.status == "failed" then
      out(string.format("%s failed: %s\n", r.label, tostring(r.error)))
    end
  end
  local repeats = tonumber(info.repeats) or 1
  if repeats > 1 then   -- each setting over its seeds
    out(results.settings_text(results.settings(list, info.mode, repeats), { metric = info.metric, keys = keys }), "\n")
  end
  local text = front.text(summary, keys)
  if text ~= "" then out(text, "\n") end
  return 0
end

local function lineage(dir)
  local pbt, results = require("moonrl.sweep.pbt"), require("moonrl.sweep.results")
  local lin, lerr = pbt.lineage(dir)
  if not lin then
    err("moonrl sweep lineage: ", lerr, "\n")
    return 1
  end
  out(string.format("%s: the best member is %s (%s %s); its weights were trained by:\n", dir,
    string.format("trial-%03d", lin.best), tostring(lin.metric), results.fmt(lin.value)))
  local at = 0
  for _, s in ipairs(lin.segments) do
    local len = s.to - s.from
    local keys = {}
    for _, k in ipairs(require("moonrl.util").sorted_keys(s.params)) do keys[#keys + 1] = k .. "=" .. results.fmt(s.params[k]) end
    out(string.format("  updates %5d-%-5d trial-%03d (its updates %d-%d)  %s\n", at, at + len, s.trial, s.from + 1, s.to,
      table.concat(keys, " ")))
    at = at + len
  end
  local text, terr = pbt.replay_config(dir, lin)
  if not text then
    err("moonrl sweep lineage: ", terr, "\n")
    return 1
  end
  local ok, werr = require("moonrl.util").write_file(dir .. "/lineage.lua", text)
  if not ok then
    err("moonrl sweep lineage: ", werr, "\n")
    return 1
  end
  out("replay as one plain run: moonrl train ", dir, "/lineage.lua\n")
  return 0
end

-- `moonrl sweep report DIR [--default RUN,...]`: moonrl.sweep.report, printed and written.
local function report(dir, o)
  local default = nil
  if o.default then
    default = {}
    for p in o.default:gmatch("[^,]+") do default[#default + 1] = (p:gsub("(.)/+$", "%1")) end
    if #default == 0 then return usage_error("moonrl sweep report: --default: expected run directories RUN[,RUN...]") end
  end
  local files, text, r = require("moonrl.sweep.report").write(dir, { default = default })
  if not files then
    err("moonrl sweep report: ", text, "\n")
    return 1
  end
  out(text, "\n")
  if not r.importance then err("moonrl sweep report: no importance: ", r.importance_why, "\n") end
  err("moonrl sweep report: wrote ", table.concat(files, ", "), "\n")
  return 0
end

-- `moonrl sweep EXPERIMENT [options]`: its default space, no script.
local function run_default(name, o, argv)
  local spaces = require("moonrl.sweep.spaces")
  if not spaces.of(name) or not require("moonrl.config.load").experiment_path(name) then
    return usage_error("moonrl sweep: '" .. name .. "' is neither a subcommand (status, plot, lineage) nor a shipped " ..
      "experiment with a default space: accepted " .. table.concat(spaces.names(), ", "))
  end
  for _, k in ipairs({ "trials", "parallel", "smooth", "seed", "asha", "finish", "budget" }) do
    local ok, e = cmdline.int_option("sweep", o, k, k == "seed" and 0 or 1)
    if not ok then return usage_error(e) end
  end
  local method = o.method or "random"
  if method ~= "random" and method ~= "tpe" and method ~= "grid" and method ~= "pbt" then
    return usage_error("moonrl sweep: --method " .. method .. ": accepted random, tpe, grid, pbt")
  end
  local moonrl = require("moonrl")
  local fs = o["finish-schedules"]
  if fs and fs ~= "constant" and fs ~= "base" then
    return usage_error("moonrl sweep: --finish-schedules " .. fs .. ": accepted constant, base")
  end
  if fs and not o.finish then
    return usage_error("moonrl sweep: --finish-schedules goes with --finish (the agent-steps the best trial trains on)")
  end
  local spec = { base = name, sets = o.set, method = method, dir = o.dir, metric = o.metric, finish_schedules = fs,
    smooth = tonumber(o.smooth) or 5, seed = tonumber(o.seed), parallel = tonumber(o.parallel), finish = tonumber(o.finish),
    budget = tonumber(o.budget) }
  -- sweep.json's command, which runs it again (and resumes it): this one
  local words = { "moonrl", "sweep" }
  for _, w in ipairs(argv) do words[#words + 1] = require("moonrl.util").shell_word(w) end
  spec.command = table.concat(words, " ")
  if method == "pbt" then
    spec.population, spec.parallel = tonumber(o.trials) or 4, nil
    -- synchronous: a default space's members have batches of their own, so they are
    -- compared at the same agent-steps (docs/sweeps.md)
    spec.pbt = { explore = "pb2", sync = true }
    if o.asha then return usage_error("moonrl sweep: --asha does not go with --method pbt (its exploit is its early stopping)") end
    if o.budget then
      return usage_error("moonrl sweep: --budget does not go with --method pbt (a population of --trials members, " ..
        "each of the experiment's total_steps); accepted with random and tpe")
    end
  else
    if o.budget and method == "grid" then
      return usage_error("moonrl sweep: --budget does not go with --method grid (its trials are the grid's points); " ..
        "accepted with random and tpe")
    end
    spec.trials = tonumber(o.trials) or (method ~= "grid" and (o.budget and 64 or 16) or nil)
    if o.asha then spec.scheduler = moonrl.asha{ grace_steps = tonumber(o.asha), reduction = 3 } end
  end
  -- what moonrl.sweep refuses (a definition that changed in DIR, a bad --set) is a usage error
  -- here: its own message, without the Lua position of this file
  local oks, s = pcall(moonrl.sweep, spec)
  if not oks then
    err((tostring(s):gsub("^[^\n]-%.lua:%d+: ", "")), "\n")
    return 2
  end
  local summary = s:wait()
  out(s:table(), "\n")
  return summary.status == "done" and 0 or 1
end

function sweep.run(argv)
  local uv = require("luv")
  local o, e = cmdline.parse("sweep", argv, { json = { "flag" }, method = { "value", "random|tpe|grid|pbt" },
    trials = { "value", "N" }, parallel = { "value", "N" }, asha = { "value", "agent-steps" }, dir = { "value", "DIR" },
    finish = { "value", "agent-steps" }, budget = { "value", "agent-steps" },
    ["finish-schedules"] = { "value", "constant|base" },
    set = { "list", "key=value" }, metric = { "value", "name" }, smooth = { "value", "N" }, seed = { "value", "N" },
    default = { "value", "RUN[,RUN...]" } }, 2)
  if not o then return usage_error(e) end
  if o.help then return out(sweep.help) end
  local what, dir = o.positional[1], o.positional[2]
  local SUB = { status = true, plot = true, lineage = true, report = true }
  if what and not SUB[what] and not dir then return run_default(what, o, argv) end
  if not SUB[what] then
    return usage_error("moonrl sweep: " .. (what and ("unknown subcommand '" .. what .. "'") or "missing the subcommand") ..
      ": accepted status, plot, lineage, report (moonrl sweep status|plot|lineage|report DIR)")
  end
  if not dir then return usage_error("moonrl sweep " .. what .. ": missing the sweep directory DIR") end
  if o.default and what ~= "report" then return usage_error("moonrl sweep " .. what .. ": --default is report's option") end
  dir = dir:gsub("(.)/+$", "%1")
  local st = uv.fs_stat(dir)
  if not st then return usage_error("moonrl sweep " .. what .. ": " .. dir .. " not found (a sweep directory: sweep.json, trial-NNN/)") end
  if st.type ~= "directory" then return usage_error("moonrl sweep " .. what .. ": " .. dir .. " is not a directory (a sweep directory: sweep.json, trial-NNN/)") end
  if not uv.fs_stat(dir .. "/sweep.json") then
    local parent = dir:match("^(.*)/[^/]+$") or "."
    if uv.fs_stat(parent .. "/sweep.json") then
      return usage_error("moonrl sweep " .. what .. ": " .. dir .. " is a trial of the sweep " .. parent ..
        ", not a sweep directory: moonrl sweep " .. what .. " " .. parent)
    end
    if uv.fs_stat(dir .. "/config.lua") then
      return usage_error("moonrl sweep " .. what .. ": " .. dir .. " is a run directory, not a sweep's (no sweep.json; " ..
        "a sweep directory holds sweep.json, results.jsonl and trial-NNN/: the dir of moonrl.sweep{...} or moonrl sweep EXP)")
    end
    return usage_error("moonrl sweep " .. what .. ": " .. dir .. " is not a sweep directory (no sweep.json)")
  end
  if what == "status" then return status(dir, o) end
  if what == "report" then return report(dir, o) end
  if what == "lineage" then return lineage(dir) end
  local files, perr = require("moonrl.sweep.plot").write(dir)
  if not files then
    err("moonrl sweep plot: ", perr, "\n")
    return 1
  end
  for _, f in ipairs(files) do out(f, "\n") end
  return 0
end

return sweep

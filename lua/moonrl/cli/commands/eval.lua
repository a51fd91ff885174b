-- `moonrl eval`: the evaluation table of a checkpoint or of a run directory's
-- newest valid checkpoint (docs/evaluation.md: the episodic protocol every
-- environment has, foraging's continuous survival of docs/environment.md),
-- with progress on stderr; the records, settings, table and figure go to a
-- folder beside it (moonrl.eval.protocols, moonrl.eval.files).
-- --compare A B ... sets each against the first (A1,A2,A3 B1,B2,B3: arms of
-- several training runs, compared over their seeds: moonrl.eval.seeds);
-- --from DIR recomputes the table from what an earlier `moonrl eval` wrote.

local cmdline = require("moonrl.cli.cmdline")

local eval = {
  name = "eval",
  order = 30,
  usage = "eval checkpoint|run [--compare B]",
  summary = "evaluation table of a checkpoint or a run directory, with intervals; --compare",
  help = [[
usage: moonrl eval CHECKPOINT|RUN_DIR [options]
       moonrl eval --compare A B [C ...] [options]
       moonrl eval --compare A1,A2[,...] B1,B2[,...] [...] [options]
       moonrl eval --from DIR

Evaluates a checkpoint (a .mrck file, or a run directory: its newest valid
checkpoint, a damaged one reported and skipped) with the environment's
protocol (docs/evaluation.md); progress goes to stderr as it works.

The episodic protocol, every environment's (cartpole, pendulum, reach, ...):
episodes as trained, one record per episode, and the table gives the
return, episode length, success (where the environment declares one) and
each declared counter per episode, means over the episodes that ended, each
with a 95% interval.

Foraging's own, continuous survival (docs/environment.md): every death and
every agent alive at the end (right-censored) is recorded, and the table
gives per mode: energy/1k, efficiency overall, per death and per
environment, survival as the mean over deaths and as a Kaplan-Meier median,
deaths/1k, food/1k and poison/1k, each with a 95% interval. The table's
definitions follow it.

Beside the table, in the --out folder (by default one per checkpoint:
RUN_DIR/eval/update_NNNNNNN, so evaluating an older checkpoint leaves the
others' results alone): eval.md (the table), records.csv (or .jsonl: one
line per episode, or per death or survivor), eval.json (checkpoints, seeds,
settings and the numbers) and eval.svg (distributions of return and length,
or Kaplan-Meier curves and efficiency distributions), so every figure can
be recomputed (--from). `moonrl train` evaluates its final checkpoint this
same way. The table's first line names the checkpoint and update evaluated.

--compare evaluates A, B, ... (each in the mode it was trained in, unless
--mode) and reports for each against A the difference in every metric with
its interval and Cohen's d, and says whether it is measurably worse. Those
intervals hold the evaluation's noise only, not the spread between training
seeds: the comparison says so and how many seeds a side a verdict on the
configurations would need. Give each side as several runs joined by commas
(--compare A1,A2,A3 B1,B2,B3: the same configuration trained with different
seeds) and the verdict is over the training runs: each run's evaluation is
shown with its interval, and the arms are compared by Welch's t-test over
the runs' values (docs/evaluation.md, "Verdicts over training seeds").

The sizes default to the run's own evaluation settings (eval.* of its
config.lua, for a run directory or a checkpoint in its checkpoints/), else
to those below.

options:
  --mode M        ground_truth, ground_truth_blinded, proxy_mortal, proxy, or all
                  (default: the mode it was trained in)
  --envs N        environments per run (default: the run's eval.num_envs, else 1024)
  --steps S       steps per run (default: the run's eval.steps, else 4096)
  --runs R        independent runs, pooled (default: the run's eval.runs, else 1)
  --seed X        evaluation seed; run r uses X + r x 1000003 (default: the run's
                  eval.seed, else 12345)
  --episodes K    episodic: stop a run once K episodes ended (instance i records (K + i) / envs
                  of them), or at --steps (default: --steps alone)
  --greedy        the most likely action (argmax; a Gaussian's mean) instead of a sample
  --protocol P    episodic or survival (default: the environment's own; survival is
                  foraging's and needs a grid world counting two items: foraging, reach)
  --device D      auto, cpu or cuda (default: as trained)
  --threads T     CPU threads, 0 = all cores
  --compare       the checkpoints given are compared with the first; A1,A2,... an arm of
                  several training runs (at least 2 a side), compared over seeds
  --out DIR       where the files go (default: RUN_DIR/eval/<checkpoint name>, e.g.
                  eval/update_0000010, or RUN_DIR/eval-compare for --compare; for a
                  checkpoint in no run, eval/<name> beside it); none = no files
  --records F     csv or jsonl (default csv)
  --boot B        bootstrap resamples for the intervals (default 1000; 0 = none)
  --boot-seed X   the bootstrap's seed (default 1)
  --ci U          bootstrap unit: agents (default) or runs (needs --runs >= 2)
  --from DIR      recompute the table (and comparison) from DIR's eval.json and records;
                  DIR may be RUN_DIR/eval or RUN_DIR: the newest checkpoint's folder
  --help          this text
]],
}

local out, err, usage_error = cmdline.out, cmdline.err, cmdline.usage_error

local MODES = { "ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy" }

-- A progress function for moonrl.evaluate (moonrl.eval.progress): lines on
-- stderr as it works; `label` names the row.
function eval.progress(label)
  return require("moonrl.eval.progress").printer({ prefix = "moonrl eval: ", label = label, write = function(s) err(s) end })
end

local function basename(p) return (p:gsub("/+$", ""):match("([^/]+)$") or p) end

-- The checkpoint of a path (a run directory: its newest valid one) and the
-- run directory it belongs to, or nil, message.
local function checkpoint_of(path)
  local uv, rs = require("luv"), require("moonrl.run.resume")
  local st = uv.fs_stat(path)
  if not st then return nil, "checkpoint or run directory '" .. path .. "' not found" end
  if st.type == "directory" then
    if path:match("%.mrck/*$") and not uv.fs_stat(path .. "/checkpoints") then
      return nil, "checkpoint '" .. path .. "' is a directory, not a checkpoint file (nor a run directory: " ..
        "it has no checkpoints/)"
    end
    local ck, ce = rs.newest(path)
    if not ck then return nil, ce end
    for _, d in ipairs(ck.damaged) do err("moonrl eval: skipped damaged checkpoint ", d.path, ": ", d.error, "\n") end
    err("moonrl eval: ", path, ": checkpoint ", ck.path, " (update ", ck.update, ")\n")
    return ck.path, path
  end
  return path, rs.run_dir_of(path)
end

local function check_mode(m)
  for _, x in ipairs(MODES) do if x == m then return true end end
  local near = require("moonrl.util").closest(m, MODES)
  return nil, "moonrl eval: --mode " .. m .. ": accepted " .. table.concat(MODES, ", ") ..
    ", all" .. (near and (" - did you mean " .. near .. "?") or "")
end

-- The table (and comparisons) of summaries, printed; nil, err when they
-- cannot share one (two protocols, or two environments evaluated episodically).
-- arms: lists of indices into summaries, the training runs of each arm (an
-- arm of several: compared over seeds, moonrl.eval.seeds), or nil.
local function print_results(summaries, compare, arms)
  local P, perr = require("moonrl.eval.protocols").common(summaries)
  if not P then return nil, perr end
  local seeds = require("moonrl.eval.seeds")
  local text = {}
  if compare and arms then
    local function pick(idx)
      local out = {}
      for i, k in ipairs(idx) do out[i] = summaries[k] end
      return out
    end
    -- arm k is named by a letter (A, B, ...), its runs listed once
    local function names(idx)
      local out = {}
      for i, k in ipairs(idx) do out[i] = summaries[k].label end
      return table.concat(out, ", ")
    end
    for k = 2, #arms do
      local la, lb = string.char(64 + 1), k <= 26 and string.char(64 + k) or ("arm " .. k)
      local t = seeds.compare_text(pick(arms[1]), pick(arms[k]), { la, lb })
      text[#text + 1] = string.format("comparison over training seeds: %s against %s\n  %s: %s\n  %s: %s\n\n%s", lb, la,
        la, names(arms[1]), lb, names(arms[k]), t)
    end
  elseif compare then
    for k = 2, #summaries do
      local t, c = P.compare_text(summaries[1], summaries[k])
      text[#text + 1] = "comparison: " .. summaries[k].label .. " against " .. summaries[1].label .. "\n\n" ..
        t .. "\n\n" .. seeds.single_note(c)
    end
  end
  table.insert(text, 1, P.table(summaries))
  local s = table.concat(text, "\n\n")
  out(s, "\n")
  return s
end

-- --from DIR: the summaries again from the files an earlier run wrote.
local function from_files(dir, o)
  local json, ef = require("moonrl.formats.json"), require("moonrl.eval.files")
  local found, ferr = ef.newest(dir)
  if not found then
    err("moonrl eval: --from ", ferr, "\n")
    return 1
  end
  if found ~= dir:gsub("/+$", "") then err("moonrl eval: --from ", dir, ": the newest checkpoint's evaluation, ", found, "\n") end
  dir = found
  local text = require("moonrl.util").read_file(dir .. "/eval.json")
  local meta = text and json.decode(text)
  if type(meta) ~= "table" or type(meta.sources) ~= "table" then
    err("moonrl eval: --from ", dir, ": no readable eval.json there (written by moonrl eval)\n")
    return 1
  end
  local recs, rerr = ef.read_records(dir .. "/" .. meta.records.file, meta.records.format, meta)
  if not recs then
    err("moonrl eval: --from ", dir, ": ", rerr, "\n")
    return 1
  end
  local b = meta.bootstrap or {}
  local summaries = {}
  local P = require("moonrl.eval.protocols").of(meta)
  for k, src in ipairs(meta.sources) do
    local e = type(src) == "table" and src.eval
    if type(e) ~= "table" or type(e.num_envs) ~= "number" or type(e.runs) ~= "number" then
      err("moonrl eval: --from ", dir, ": eval.json's sources[", k, "] has no eval.num_envs and eval.runs (as " ..
        "moonrl eval writes them)\n")
      return 1
    end
    local counters = {}   -- the episodic protocol's: names, as written
    for _, name in ipairs(type(src.counters) == "table" and src.counters or {}) do
      if type(name) == "string" then counters[#counters + 1] = name end
    end
    local res = { label = src.label, mode = src.mode, checkpoint = src.checkpoint, eval = e,
                  environment = src.environment, counters = counters,
                  success = type(src.success) == "string" and src.success or nil,
                  records = recs[k] or { n = 0, deaths = 0, ended = 0, rec = {} } }
    local ok, s = pcall(P.summarise, res, { boot = tonumber(o.boot) or b.resamples,
      boot_seed = tonumber(o["boot-seed"]) or b.seed, unit = o.ci or b.unit })
    if not ok then
      err("moonrl eval: --from ", dir, ": ", tostring(s), "\n")
      return 1
    end
    summaries[k] = s
  end
  local arms = nil   -- written by --compare A1,A2 B1,B2: lists of source indices
  if type(meta.arms) == "table" and #meta.arms >= 2 then
    arms = {}
    for i, a in ipairs(meta.arms) do
      if type(a) ~= "table" then arms = nil break end
      arms[i] = {}
      for j, k in ipairs(a) do
        if type(k) ~= "number" or not summaries[k] then arms = nil break end
        arms[i][j] = k
      end
      if not arms then break end
    end
  end
  local ok, perr = print_results(summaries, meta.compare, arms)
  if not ok then
    err("moonrl eval: --from ", dir, ": ", perr, "\n")
    return 1
  end
end

function eval.run(argv)
  local o, e = cmdline.parse("eval", argv, {
    mode = { "value", "a mode or all" }, envs = { "value", "an integer >= 1" },
    steps = { "value", "an integer >= 1" }, runs = { "value", "an integer >= 1" },
    seed = { "value", "an integer >= 0" }, device = { "value", "auto, cpu or cuda" },
    threads = { "value", "an integer >= 0" }, compare = { "flag" }, out = { "value", "a folder or none" },
    records = { "value", "csv or jsonl" }, boot = { "value", "an integer >= 0" },
    ["boot-seed"] = { "value", "an integer >= 0" }, ci = { "value", "agents or runs" },
    from = { "value", "a folder moonrl eval wrote" }, episodes = { "value", "an integer >= 1" },
    greedy = { "flag" }, protocol = { "value", "episodic or survival" },
  }, 64)
  if not o then return usage_error(e) end
  if o.help then return out(eval.help) end
  if o.out and o.out ~= "none" then   -- a folder, new or existing: said before evaluating
    local st = require("luv").fs_stat(o.out)
    if st and st.type ~= "directory" then
      return usage_error("moonrl eval: --out " .. o.out .. " " ..
        (st.type == "file" and "is a file" or require("moonrl.util").file_kind(st)) ..
        "; accepted: a folder (new or existing) or none")
    end
  end
  for _, spec in ipairs({ { "envs", 1 }, { "steps", 1 }, { "runs", 1 }, { "seed", 0 }, { "threads", 0 },
                          { "boot", 0 }, { "boot-seed", 0 }, { "episodes", 1 } }) do
    local ok, ie = cmdline.int_option("eval", o, spec[1], spec[2])
    if not ok then return usage_error(ie) end
  end
  if o.protocol and o.protocol ~= "episodic" and o.protocol ~= "survival" then
    return usage_error("moonrl eval: --protocol " .. o.protocol .. ": accepted episodic (every environment's), " ..
      "survival (foraging's own)")
  end
  if o.episodes and o.protocol == "survival" then
    return usage_error("moonrl eval: --episodes is the episodic protocol's; the survival protocol runs --steps " ..
      "steps and never ends an episode early")
  end
  if o.ci and o.ci ~= "agents" and o.ci ~= "runs" then
    return usage_error("moonrl eval: --ci " .. o.ci .. ": accepted agents, runs")
  end
  if o.records and o.records ~= "csv" and o.records ~= "jsonl" then
    return usage_error("moonrl eval: --records " .. o.records .. ": accepted csv, jsonl")
  end
  if o.from then return from_files(o.from, o) end
  local paths = o.positional
  if #paths == 0 then return usage_error("moonrl eval: missing the checkpoint: moonrl eval <checkpoint|run directory> [options]") end
  if not o.compare and #paths > 1 then
    return usage_error("moonrl eval: unexpected argument '" .. paths[2] .. "': one checkpoint, or --compare A B ...")
  end
  if o.compare and #paths < 2 then
    return usage_error("moonrl eval: --compare needs two or more checkpoints or run directories")
  end
  if o.compare then
    local arms, ae = eval.arms(paths)
    if not arms then return usage_error(ae) end
    if arms.grouped then paths, o.arms = arms.paths, arms end
  end
  for _, p in ipairs(paths) do
    if not require("luv").fs_stat(p) then
      return usage_error("moonrl eval: checkpoint or run directory '" .. p .. "' not found")
    end
  end
  if o.device and o.device ~= "auto" and o.device ~= "cpu" and o.device ~= "cuda" then
    return usage_error("moonrl eval: --device " .. o.device .. ": accepted auto, cpu, cuda")
  end
  if o.mode == "all" then
    if o.compare then return usage_error("moonrl eval: --compare takes one --mode (or none), not all") end
  elseif o.mode ~= nil then
    local ok, me = check_mode(o.mode)
    if not ok then return usage_error(me) end
  end
  return eval.evaluate(paths, o, "moonrl eval " .. table.concat(argv, " "))
end

-- --compare's arguments as arms: "A1,A2,A3" is an arm of three training runs
-- (a path that exists as written is one run, commas and all). -> {paths =
-- the runs in order, [k] = the indices of arm k's runs, grouped = true when
-- an arm has several} | nil, err (an arm of one run beside arms of several).
function eval.arms(args)
  local uv = require("luv")
  local arms = { paths = {} }
  for k, a in ipairs(args) do
    local list = {}
    if a:find(",", 1, true) and not uv.fs_stat(a) then
      for p in a:gmatch("[^,]+") do list[#list + 1] = p end
    else
      list[1] = a
    end
    arms[k] = {}
    for _, p in ipairs(list) do
      arms.paths[#arms.paths + 1] = p
      arms[k][#arms[k] + 1] = #arms.paths
    end
    if #list > 1 then arms.grouped = true end
  end
  if arms.grouped then
    for k, a in ipairs(arms) do
      if #a < 2 then
        return nil, string.format("moonrl eval: --compare: %s is one run beside arms of several: a verdict over " ..
          "training seeds needs at least 2 runs a side (--compare A1,A2,A3 B1,B2,B3); with one run a side, " ..
          "give single paths (--compare A B)", args[k])
      end
    end
  end
  return arms
end

-- Evaluates the checkpoints (or run directories) of `paths` with the
-- options o of `moonrl eval` (mode, envs, steps, runs, seed, device,
-- threads, compare, out, records, boot, boot-seed, ci; absent: the defaults),
-- prints the table and writes the files: the one computation behind
-- `moonrl eval` and the evaluation at the end of `moonrl train`. `command`
-- goes into eval.json. Returns nil, or 1 after saying what failed.
function eval.evaluate(paths, o, command)
  local moonrl = require("moonrl")
  local modes = { o.mode or false }   -- false: the mode it was trained in
  if o.mode == "all" then modes = MODES end
  local results, first_run, first_ck = {}, nil, nil
  for k, p in ipairs(paths) do
    local ck, run_dir = checkpoint_of(p)
    if not ck then
      err("moonrl eval: ", run_dir, "\n")
      return 1
    end
    if k == 1 then first_run, first_ck = run_dir, ck end
    for _, mode in ipairs(modes) do
      local r, ee = moonrl.evaluate(ck, {
        mode = mode or nil, num_envs = o.envs, steps = o.steps, runs = o.runs, seed = o.seed, records = true,
        device = o.device, threads = o.threads, progress = eval.progress(o.compare and basename(p) or mode or nil),
        protocol = o.protocol, episodes = tonumber(o.episodes), greedy = o.greedy or nil,
      })
      if not r then
        err("moonrl eval: ", ee, "\n")
        return 1
      end
      r.label = r.mode
      if o.compare then
        r.label = basename(run_dir or ck) .. " (" .. r.mode .. ")"
        for _, q in ipairs(results) do
          if q.label == r.label then r.label = r.label .. " #" .. k end
        end
      end
      results[#results + 1] = r
    end
  end
  local protocols, ef = require("moonrl.eval.protocols"), require("moonrl.eval.files")
  local summaries = {}
  local sopts = { boot = tonumber(o.boot) or 1000, boot_seed = tonumber(o["boot-seed"]) or 1, unit = o.ci or "agents" }
  for k, r in ipairs(results) do summaries[k] = protocols.of(r).summarise(r, sopts) end
  local arms = nil   -- lists of indices into summaries (eval.json keeps them)
  if o.compare and o.arms and o.arms.grouped then
    arms = {}
    for k, a in ipairs(o.arms) do arms[k] = a end
  end
  local text, perr = print_results(summaries, o.compare, arms)
  if not text then
    err("moonrl eval: ", perr, "\n")
    return 1
  end
  -- the files beside the table: one folder per checkpoint (RUN_DIR/eval/update_NNNNNNN)
  local dir = o.out
  if not dir then
    if o.compare then
      dir = (first_run or (first_ck:match("^(.*)/[^/]*$") or ".")) .. "/eval-compare"
    else
      dir = ef.dir_for(first_ck, first_run)
    end
  end
  if dir == "none" then return end
  local files, we = ef.save(dir, results, summaries, text, {
    records = o.records or "csv", compare = o.compare or false, command = command, arms = arms,
    bootstrap = { resamples = sopts.boot, seed = sopts.boot_seed, unit = sopts.unit },
  })
  if not files then
    err("moonrl eval: ", we, "\n")
    return 1
  end
  err("moonrl eval: wrote ", dir, "/{", table.concat(files, ", "), "}\n")
  if first_run and not o.compare then
    local tbe = eval.tensorboard(first_run, first_ck, summaries, text)
    if tbe then err("moonrl eval: ", tbe, "\n") end
  end
end

-- A run that writes TensorBoard files gets the evaluation there too, at its
-- checkpoint's step: eval/<mode>/<metric> (the point estimates; none for a
-- metric the evaluation could not define, n/a in the table) and the
-- table as the text eval/table, in a file of its own per checkpoint,
-- events.out.tfevents.<now>.<host>.eval.<checkpoint>, which replaces an
-- earlier evaluation's of the same checkpoint. Named by the time it is
-- written, as TensorBoard's readers expect: they read a run's files in name
-- order, and a resumed training file's SessionLog START drops the points
-- read before it at later steps, so an evaluation's file must sort after the
-- training files it follows (a name of time 0 lost every evaluation of a
-- resumed run). Returns nil, or what failed.
function eval.tensorboard(run_dir, ck, summaries, text)
  local util = require("moonrl.util")
  local has_tb = false
  for _, path in ipairs(require("moonrl.run.dir").event_files(run_dir)) do
    has_tb = has_tb or not path:find("%.eval%.[^/]*$")   -- the training's, not an earlier evaluation's
  end
  if not has_tb then return nil end
  local info, ierr = require("moonrl.engine").checkpoint_info(ck)
  if not info then return ierr end
  local tb = require("moonrl.formats.tensorboard")
  -- the run's agent-steps where the file says them (a run of several ranks,
  -- whose engine counted only rank 0's), else the engine's count
  local now, step = os.time(), info.run_steps or info.agent_steps
  local out = { tb.record(tb.file_version_event(now)) }
  for _, s in ipairs(summaries) do
    for _, m in ipairs(s.metrics) do
      local v = s.point and s.point[m.key]
      if type(v) == "number" and v == v and v > -math.huge and v < math.huge then   -- "n/a" has no point
        out[#out + 1] = tb.record(tb.scalar_event(now, step, "eval/" .. s.label .. "/" .. m.key, v))
      end
    end
  end
  out[#out + 1] = tb.record(tb.text_event(now, step, "eval/table", text))
  local name = (ck:match("([^/]+)%.mrck$") or "checkpoint")
  local suffix = ".eval." .. name
  local path = run_dir .. "/" .. tb.filename(now, require("luv").os_gethostname() or "localhost") .. suffix
  local ok, we = util.write_file(path, table.concat(out))
  if not ok then return "TensorBoard: " .. tostring(we) end
  for _, old in ipairs(require("moonrl.run.dir").event_files(run_dir)) do   -- an earlier evaluation of it
    if old ~= path and old:sub(-#suffix) == suffix then os.remove(old) end
  end
  return nil
end

return eval

-- `moonrl eval`: the evaluation table of a checkpoint or of a run directory's
-- newest valid checkpoint (docs/environment.md protocol), with progress on stderr.

local cmdline = require("moonrl.cmdline")

local eval = {
  name = "eval",
  order = 30,
  usage = "eval checkpoint|run [--mode M]",
  summary = "evaluation table of a checkpoint or a run directory (docs/environment.md protocol)",
  help = [[
usage: moonrl eval CHECKPOINT|RUN_DIR [options]

Evaluates a checkpoint (a .mrck file, or a run directory: its newest valid
checkpoint, a damaged one reported and skipped) with the continuous-survival
protocol of docs/environment.md and prints the table: mode, energy/1k, efficiency,
survival, deaths/1k, food/1k, poison/1k. Progress goes to stderr as it works.

The sizes default to the run's own evaluation settings (eval.* of its
config.lua, for a run directory or a checkpoint in its checkpoints/), else
to those below.

options:
  --mode M      ground_truth, ground_truth_blinded, proxy_mortal, proxy, or all
                (default: the mode it was trained in)
  --envs N      environments per run (default: the run's eval.num_envs, else 1024)
  --steps S     steps per run (default: the run's eval.steps, else 4096)
  --runs R      runs, averaged (default: the run's eval.runs, else 1)
  --seed X      evaluation seed (default: the run's eval.seed, else 12345)
  --device D    auto, cpu or cuda (default: as trained)
  --threads T   CPU threads, 0 = all cores
  --help        this text
]],
}

local out, err, usage_error = cmdline.out, cmdline.err, cmdline.usage_error

local MODES = { "ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy" }

-- A progress function for moonrl.evaluate: a line on stderr at the first
-- 10% of the steps, then at each further 10% once a second has passed since
-- the last line, and at the end, with the time taken; `label` names the row.
function eval.progress(label)
  local uv = require("luv")
  local t0 = uv.hrtime()
  local shown, last = -1, t0
  return function(done, total)
    local tenth = math.floor(10 * done / total)
    if tenth == shown then return end
    local now = uv.hrtime()
    if shown >= 0 and tenth < 10 and now - last < 1e9 then return end
    shown, last = tenth, now
    err(string.format("moonrl eval: %s%d%% of %d steps, %.1f s\n", label and (label .. ": ") or "",
      10 * tenth, total, (now - t0) / 1e9))
  end
end

function eval.run(argv)
  local moonrl, uv = require("moonrl"), require("luv")
  local o, e = cmdline.parse("eval", argv, {
    mode = { "value", "a mode or all" }, envs = { "value", "an integer >= 1" },
    steps = { "value", "an integer >= 1" }, runs = { "value", "an integer >= 1" },
    seed = { "value", "an integer >= 0" }, device = { "value", "auto, cpu or cuda" },
    threads = { "value", "an integer >= 0" },
  }, 1)
  if not o then return usage_error(e) end
  if o.help then return out(eval.help) end
  local path = o._pos[1]
  if not path then return usage_error("moonrl eval: missing the checkpoint: moonrl eval <checkpoint|run directory> [options]") end
  if not uv.fs_stat(path) then return usage_error("moonrl eval: checkpoint or run directory '" .. path .. "' not found") end
  for _, spec in ipairs({ { "envs", 1 }, { "steps", 1 }, { "runs", 1 }, { "seed", 0 }, { "threads", 0 } }) do
    local ok, ie = cmdline.int_option("eval", o, spec[1], spec[2])
    if not ok then return usage_error(ie) end
  end
  if o.device and o.device ~= "auto" and o.device ~= "cpu" and o.device ~= "cuda" then
    return usage_error("moonrl eval: --device " .. o.device .. ": accepted auto, cpu, cuda")
  end
  local modes = { o.mode or false }   -- false: the mode it was trained in
  if o.mode == "all" then
    modes = MODES
  elseif o.mode ~= nil then
    local known = false
    for _, m in ipairs(MODES) do known = known or m == o.mode end
    if not known then
      local near = require("moonrl.util").closest(o.mode, MODES)
      return usage_error("moonrl eval: --mode " .. o.mode .. ": accepted " .. table.concat(MODES, ", ") ..
        ", all" .. (near and (" - did you mean " .. near .. "?") or ""))
    end
  end
  if uv.fs_stat(path).type == "directory" then
    -- A run: its newest valid checkpoint (whose run's eval settings apply).
    local ck, ce = require("moonrl.resume").newest(path)
    if not ck then
      err("moonrl eval: ", ce, "\n")
      return 1
    end
    for _, d in ipairs(ck.damaged) do err("moonrl eval: skipped damaged checkpoint ", d.path, ": ", d.error, "\n") end
    err("moonrl eval: ", path, ": checkpoint ", ck.path, " (update ", ck.update, ")\n")
    path = ck.path
  end
  local rows = {}
  for _, mode in ipairs(modes) do
    local r, ee = moonrl.evaluate(path, {
      mode = mode or nil, num_envs = o.envs, steps = o.steps, runs = o.runs, seed = o.seed,
      device = o.device, threads = o.threads, progress = eval.progress(mode or nil),
    })
    if not r then
      err("moonrl eval: ", ee, "\n")
      return 1
    end
    rows[#rows + 1] = r
  end
  out(moonrl.eval_table(rows), "\n")
end

return eval

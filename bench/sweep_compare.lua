-- bench/sweep_compare.lua - do sweeps pay for themselves? (issue 47) Arms
-- at the same total agent-steps, on tasks where the default is not at the
-- ceiling, each kept policy evaluated with `moonrl eval` intervals.
--
--   moonrl run bench/sweep_compare.lua [SEEDS] [SCALE] [TASKS] [ARMS] [FIRST]
--
--   SEEDS  seeds per arm (default 5): seed s runs every arm of every task once
--   SCALE  a factor on every task's budget (default 1; 0.25 for a quick run)
--   TASKS  comma-separated (default cartpole,dials,reach16): see TASKS below
--   ARMS   comma-separated (default default,random_eval,tpe_eval,asha_tpe_eval,pbt_eval,
--          random_eval_fin,tpe_eval_fin,pbt_eval_fin; below)
--   FIRST  the first seed (default 1): seeds FIRST .. FIRST + SEEDS - 1, so that
--          a method tuned on seeds 1-5 can be confirmed on fresh ones
--
-- With B a task's budget (agent-steps per arm) and its default search space
-- (moonrl.sweep.spaces, the experiment's own):
--   default   one run of the experiment as it stands, B agent-steps
--   random    8 trials of B / 8 at random points, one at a time; the best by
--             the training metric (smooth 5) is kept
--   tpe       the same with method = "tpe": 3 random trials (startup 3: the
--             very points and seeds of random's first 3), then the model. No
--             enqueued default (tpe.points): at a trial's share of the
--             budget the experiment's own settings, tuned for its whole
--             budget, were the worst first trial of the three tasks (mean
--             63 against 100 for random's trials on cartpole, 7.8 against
--             12 on dials, -1.2 against -0.3 on reach16;
--             docs/benchmarks-log.md)
--   asha_tpe  trials of B / 4 under ASHA with one rung at B / 8 (grace B / 8,
--             reduction 3: a trial goes on past it only in the top third of
--             the trials there), TPE (startup 3) fitted on the rungs
--             (tpe.level_history), proposed one at a time until the sweep's
--             budget B is spent: moonrl.sweep{budget =} charges the steps
--             trials ran, starts one while its first rung fits, and stops the
--             one running when B is spent; the best trial that ran its whole
--             B / 4 is kept. No enqueued default: ASHA lets the first trial at
--             a rung go on, so it would take a whole B / 4 of the budget
--   asha_random  the same with random points (TPE that stays in its startup
--             trials, whose points are random search's): what ASHA does without the
--             model (so that a gain of asha_tpe over random can be put down
--             to the rungs or to TPE)
--   pbt       a population of 4 members of B / 4 each, PB2's explore over the
--             space's hot keys (lr, ent_coef, clip), synchronous (pbt.sync:
--             every member pauses at the same agent-steps, every 1/8 of a
--             member's updates at the experiment's batch, and the population
--             is ranked there), truncation selection (the bottom quarter
--             copies the top quarter, pbt.test = "none") once a member has
--             trained B / 16 since its start or its last copy (pbt.ready);
--             the best member is kept
--   ARM_eval  random, tpe, asha_tpe, asha_random or pbt ranked by evaluation (metric =
--             "eval.<key>"): each trial's value is its own evaluation at its
--             end, PBT evaluates every member at every decision
--             (DIR/pbt/eval/) and ASHA every trial paused at its rung
--             (DIR/asha/eval/), at the task's `select` sizes and on an
--             evaluation seed of its own (777), so the kept network's
--             measurement below (seed 12345) is on episodes the selection
--             never saw. Without _eval they rank by the training metric
--             (smooth 5), which on cartpole kept networks that had collapsed
--             after their last episodes ended (a trial of 2 x 8 agents ends
--             an episode of 200 steps about every 25 updates): 37.9 at
--             evaluation against 184 in training
--   ARM_fin   random, tpe, asha_tpe, asha_random or pbt with a finish (moonrl.sweep{finish
--             =}): 8 trials of B / 16 (pbt: 4 members of B / 8; asha_tpe:
--             trials of B / 8, their rung at B / 16, spending B / 2), then
--             the best trains on from its checkpoint by B / 2 (the sweep's
--             finish), so its kept network trained 9B / 16 (pbt and
--             asha_tpe: 5B / 8), unless the finished network evaluated
--             below another trial's: the sweep keeps the best it has, and
--             so does this bench (8 to 10 of 80 on cartpole, where PPO at a
--             constant learning rate collapses now and then)
--   ARM_fins  the same finish on the experiment's schedules (moonrl.sweep{finish_schedules =
--             "base"}): each swept key the experiment schedules (lr, clip, ent_coef) goes over
--             the finish from the trial's value to the experiment's end ratio (cartpole's lr
--             and clip to 0, dials' lr to a tenth and ent_coef to 0); pbt's members keep theirs.
--             On 200 cartpole seeds it lost 77 to the constant, on 100 dials seeds it gained
--             2.3 (docs/benchmarks-log.md, "sixth")
-- The "against random search" column sets each arm against the random search
-- ranked as it is and with its finish (random_eval_fin for tpe_eval_fin)
-- where that ran, else random_eval, else random.
-- The default spaces hold the batch's shape (env.num_envs, ppo.rollout_steps:
-- the experiment's, a half, a quarter), so a trial of B / 8 may trade samples
-- per update for updates.
-- The sweeps poll their trials every 10 ms: a cartpole trial runs about 100
-- updates a second, and at the default 500 ms (or the 200 ms this bench used
-- before) ASHA's stops and PBT's copies came after the trials had finished.
-- Since then ASHA's trials pause at their rungs and PBT is synchronous (both
-- on `--pause-at-steps`), so their decisions no longer hang on the polls.
-- Every run trains with 1 thread. The kept network is evaluated (`moonrl
-- eval`, the task's eval size, evaluation seed 12345 for all); the tables give
-- each run's value with its 95% interval, each arm's mean over seeds with the
-- 95% Student-t interval over seeds, and paired verdicts (each arm against
-- default and against random: the mean of the per-seed differences and its
-- 95% t interval; "better"/"worse" when it excludes 0, else "not
-- distinguishable"). Everything goes under runs/sweep_compare/ (or
-- $SWEEP_COMPARE_ROOT); a re-run resumes (finished arms are read back).

local moonrl = require "moonrl"
local uv = require "luv"
local json = require "moonrl.formats.json"
local stats = require "moonrl.eval.stats"

local SEEDS = tonumber(arg[1]) or 5
local FIRST = tonumber(arg[5]) or 1   -- the first seed: seeds FIRST .. FIRST + SEEDS - 1
local SCALE = tonumber(arg[2]) or 1
local ROOT = os.getenv("SWEEP_COMPARE_ROOT") or "runs/sweep_compare"

-- Each task: an experiment, --sets over it, the budget per arm, the training
-- metric the sweeps rank by, and the evaluation key compared.
local TASKS = {
  -- cartpole at a quarter of its 100,000 steps: the default does not reach 500 yet
  cartpole = { experiment = "cartpole", budget = 32768, metric = "episode_return_mean", key = "return_mean",
    sets = {}, eval = { "--envs", "32", "--steps", "1000" },
    select = { "eval.seed=777", "eval.num_envs=16", "eval.steps=1000" } },
  -- the same at two thirds of its steps: trials of B / 8 = 32 updates, long enough to learn
  cartpole64k = { experiment = "cartpole", budget = 65536, metric = "episode_return_mean", key = "return_mean",
    sets = {}, eval = { "--envs", "32", "--steps", "1000" },
    select = { "eval.seed=777", "eval.num_envs=16", "eval.steps=1000" } },
  -- reach on a 16 x 16 torus (the experiment's is 8 x 8), 200,000 steps
  reach16 = { experiment = "reach", budget = 196608, metric = "episode_return_mean", key = "return_mean",
    sets = { "env.grid_size=16", "env.max_episode_steps=128" }, eval = { "--envs", "64", "--steps", "512" },
    select = { "eval.seed=777", "eval.num_envs=32", "eval.steps=256" } },
  -- dials at a third of its 100,000 steps: 32 updates of 16 x 64; the default is tuned
  -- (it reaches about 33 of the 37.3 possible here), so this measures what splitting costs
  dials = { experiment = "dials", budget = 32768, metric = "episode_return_mean", key = "return_mean",
    sets = {}, eval = { "--envs", "64", "--steps", "400" },
    select = { "eval.seed=777", "eval.num_envs=32", "eval.steps=200" } },
  -- pendulum at about a quarter of its 500,000 steps (the default passes -250 within them)
  pendulum = { experiment = "pendulum", budget = 131072, metric = "episode_return_mean", key = "return_mean",
    sets = {}, eval = { "--envs", "64", "--steps", "1000" },
    select = { "eval.seed=777", "eval.num_envs=16", "eval.steps=400" } },
  -- foraging, proxy_mortal on the cpu profile's network, 262,144 steps
  proxy_mortal = { experiment = "foraging", budget = 262144, metric = "efficiency", key = "eff_overall",
    sets = { "hardware=cpu", "env.mode=proxy_mortal" }, eval = { "--envs", "128", "--steps", "512" } },
}
local TASK_NAMES = {}
for name in (arg[3] or "cartpole,dials,reach16"):gmatch("[^,]+") do
  assert(TASKS[name], "unknown task " .. name .. ": accepted cartpole, cartpole64k, reach16, dials, pendulum, proxy_mortal")
  TASK_NAMES[#TASK_NAMES + 1] = name
end
local ARMS = {}
for name in (arg[4] or "default,random_eval,tpe_eval,asha_tpe_eval,pbt_eval,random_eval_fin,tpe_eval_fin,pbt_eval_fin"):gmatch("[^,]+") do
  ARMS[#ARMS + 1] = name
end
-- the random search an arm is set against: the one ranked as it is and with its finish
-- (ARM_eval against random_eval, ARM_eval_fin against random_eval_fin) where that ran, else
-- random_eval, else random
local RANDOM = "random"
for _, a in ipairs(ARMS) do if a == "random_eval" then RANDOM = a end end
local function random_for(arm)
  local want = "random" .. (arm:match("_eval") and "_eval" or "") .. (arm:match("_fins?$") or "")
  for _, a in ipairs(ARMS) do if a == want then return a end end
  return RANDOM
end
-- the last column's arm: random search for every arm but the default and random search itself;
-- a random arm with _fins is set against the same with _fin (what the schedules' finish does)
local function column_for(arm)
  if arm:match("^random") and arm:match("_fins$") then
    for _, a in ipairs(ARMS) do if a == arm:sub(1, -2) then return a end end
  end
  if arm == "default" or arm:match("^random") then return nil end
  return random_for(arm)
end

local function read_json(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local t = f:read("*a")
  f:close()
  return json.decode(t)
end

local function sets_of(task, total, seed)
  local s = { "threads=1", "total_steps=" .. total, "seed=" .. seed, "log.console=false", "log.checkpoint_interval=1000000" }
  for _, x in ipairs(task.sets) do s[#s + 1] = x end
  return s
end

-- `moonrl eval DIR` (the newest checkpoint), once: DIR/bench_eval/ is kept and read back
local function evaluate(task, dir)
  local out = dir .. "/bench_eval"
  local doc = read_json(out .. "/eval.json")
  if not doc then
    local bin = require("moonrl.sweep.local_executor").binary()
    local cmd = string.format("%q eval %q --out %q --threads 1 --seed 12345 %s > %q/bench_eval.log 2>&1", bin, dir, out,
      table.concat(task.eval, " "), dir)
    assert(os.execute(cmd) == 0, "moonrl eval " .. dir .. " failed: see " .. dir .. "/bench_eval.log")
    doc = assert(read_json(out .. "/eval.json"), out .. "/eval.json")
  end
  local r = doc.results[1]
  local ci = r.ci and r.ci[task.key] or {}
  return { value = r.point[task.key], lo = ci[1], hi = ci[2], dir = dir }
end

local function arm_run(task, arm, seed)
  local B = math.floor(task.budget * SCALE)
  local dir = string.format("%s/%s/seed%d/%s", ROOT, task.name, seed, arm)
  if arm == "default" then
    local s = read_json(dir .. "/summary.json")
    if not (s and s.status == "done") then
      local run = moonrl.train(task.experiment, { dir = dir, sets = sets_of(task, B, seed), force = true, console = false })
      local sum = run:wait()
      assert(sum.status == "done", dir .. ": " .. tostring(sum.status))
    end
    local r = evaluate(task, dir)
    r.kept, r.spent = "the run", B
    return r
  end
  local spec = { base = task.experiment, seed = seed, dir = dir, metric = task.metric, mode = "max", smooth = 5,
    console = false, poll_ms = 10 }
  -- ARM[_eval][_fin]: ranked by evaluation; with a finish
  local by_fin, by_fins = arm:match("_fins?$"), arm:match("_fins$")
  if by_fin then arm = arm:sub(1, -1 - #by_fin) end
  if by_fins then spec.finish_schedules = "base" end
  local by_eval = arm:match("_eval$")
  if by_eval then arm = arm:sub(1, -6) end
  if by_fin and arm ~= "random" and arm ~= "tpe" and arm ~= "pbt" and arm ~= "asha_tpe" and arm ~= "asha_random" then
    error("_fin, _fins: random, tpe, asha_tpe, asha_random and pbt only")
  end
  if arm == "random" or arm == "tpe" then
    -- 8 trials of B / 8, or of B / 16 and a finish of B / 2
    local each = math.floor(by_fin and B / 16 or B / 8)
    spec.sets, spec.trials, spec.method = sets_of(task, each, seed), 8, arm
    if by_fin then spec.finish = B - 8 * each end
    if arm == "tpe" then
      -- no enqueued default: at a trial's share of the budget the experiment's own settings
      -- (tuned for its whole budget) were the worst first trial on all three tasks
      spec.tpe = { startup = 3 }
    end
  elseif arm == "asha_tpe" or arm == "asha_random" then
    -- trials of B / 4 spending B, or of B / 8 spending B / 2 and a finish of B / 2
    local M = math.floor(by_fin and B / 8 or B / 4)
    spec.sets, spec.method, spec.trials, spec.budget = sets_of(task, M, seed), "tpe", 64, B
    if by_fin then spec.finish = math.floor(B / 2) end
    -- no enqueued default here: ASHA lets the first trial at a rung go on, so it would run its whole B / 4
    -- asha_random: TPE that never leaves its startup, whose points are random search's
    -- (a budget needs trials proposed one by one)
    spec.tpe = { startup = arm == "asha_tpe" and 3 or spec.trials }
    spec.scheduler = moonrl.asha{ grace_steps = math.floor(M / 2), reduction = 3 }
  elseif arm == "pbt" then
    -- 4 members of B / 4, or of B / 8 and a finish of B / 2
    local M = math.floor(by_fin and B / 8 or B / 4)
    spec.sets, spec.method, spec.population = sets_of(task, M, seed), "pbt", 4
    if by_fin then spec.finish = B - 4 * M end
    spec.pbt = { explore = "pb2", test = "none", ready = math.floor(M / 4), sync = true }
  else
    error("unknown arm " .. arm .. ": accepted default, random, tpe, asha_tpe, asha_random, pbt, each but default " ..
      "with _eval, each but default with _fin or _fins")
  end
  if by_eval then
    spec.metric = "eval." .. task.key
    for _, x in ipairs(task.select) do spec.sets[#spec.sets + 1] = x end
  end
  if spec.pbt then
    -- decisions every 1/8 of a member's updates at the experiment's batch (as resolved): with
    -- pbt.sync, interval updates of the population's largest batch, which is that one or less
    local base = assert(require("moonrl.run.start").resolve(spec.base, { sets = spec.sets }))
    local updates = math.floor(base.total_steps / (base.env.num_envs * base.ppo.rollout_steps))
    spec.pbt.interval = math.max(2, math.floor(updates / 8))
    spec.pbt.window = math.max(2, spec.pbt.interval)
  end
  local s = moonrl.sweep(spec):wait()
  local spent = 0
  for _, r in ipairs(s.results) do spent = spent + (r.steps or 0) end
  -- the sweep's best (moonrl.sweep.results.best): the best trial that ran its whole budget (an
  -- ASHA-stopped one trained less)
  local kept = s.best
  assert(kept and (kept.status == "done" or not arm:match("^asha")), dir .. ": no trial ran to its end")
  local r = evaluate(task, kept.dir)
  r.kept, r.spent, r.trials = kept.label, spent, #s.results
  r.finish, r.params, r.finish_value = kept.finish, kept.params, kept.value
  return r
end

local function mean_ci(xs)
  local m, lo, hi = stats.mean_interval(xs)
  return m, (hi - lo) / 2
end

local function fmt(v) return v and string.format("%.3f", v) or "-" end

-- What a finish kept: does a trial's value at the trials' budget (the sweep's
-- selection, evaluation seed 777) foretell its value after the finish (the same
-- evaluation)? Per _fin arm, the means before and after and their correlation
-- over seeds; over all _fin arms, the same by the kept trial's batch shape
-- (env.num_envs x ppo.rollout_steps), where a shape that looks best at the
-- trials' budget may finish worst (docs/benchmarks-log.md, "what the finish keeps")
local function pearson(xs, ys)
  local n = #xs
  if n < 3 then return nil end
  local mx, my = stats.mean(xs), stats.mean(ys)
  local sxy, sxx, syy = 0, 0, 0
  for i = 1, n do
    sxy, sxx, syy = sxy + (xs[i] - mx) * (ys[i] - my), sxx + (xs[i] - mx) ^ 2, syy + (ys[i] - my) ^ 2
  end
  if sxx == 0 or syy == 0 then return nil end
  return sxy / math.sqrt(sxx * syy)
end

local function fidelity(task, rows)
  local by_arm, by_shape, arms, shapes = {}, {}, {}, {}
  for _, r in ipairs(rows) do
    local f = r.finish
    if r.arm:match("_fins?$") and type(f) == "table" and type(f.from_value) == "number" and r.params then
      local a = by_arm[r.arm]
      if not a then a = { from = {}, after = {} }; by_arm[r.arm] = a; arms[#arms + 1] = r.arm end
      local after = r.finish_value
      a.from[#a.from + 1], a.after[#a.after + 1] = f.from_value, after
      local ne, rs = r.params["env.num_envs"], r.params["ppo.rollout_steps"]
      -- a finish on the experiment's schedules (_fins) ends elsewhere: its rows of their own
      local key = ((ne and rs) and string.format("%d x %d", ne, rs) or "the experiment's") ..
        (r.arm:match("_fins$") and ", _fins" or "")
      local sh = by_shape[key]
      if not sh then sh = { from = {}, after = {}, size = (ne or 0) * (rs or 0) }; by_shape[key] = sh; shapes[#shapes + 1] = key end
      sh.from[#sh.from + 1], sh.after[#sh.after + 1] = f.from_value, after
    end
  end
  if #arms == 0 then return end
  print(string.format("What the finish kept: its %s at the trials' budget (the selection) and after the finish, both by the sweep's evaluation", task.key))
  print("")
  print("| arm | kept trials | at the trials' budget | after the finish | correlation over seeds |")
  print("|---|---|---|---|---|")
  for _, arm in ipairs(arms) do
    local a = by_arm[arm]
    local c = pearson(a.from, a.after)
    print(string.format("| %s | %d | %.3f | %.3f | %s |", arm, #a.from, stats.mean(a.from), stats.mean(a.after), c and string.format("%+.2f", c) or "-"))
  end
  print("")
  table.sort(shapes, function(x, y) return by_shape[x].size < by_shape[y].size or (by_shape[x].size == by_shape[y].size and x < y) end)
  print("| kept trial's batch (envs x steps) | kept trials | at the trials' budget | after the finish |")
  print("|---|---|---|---|")
  for _, key in ipairs(shapes) do
    local sh = by_shape[key]
    print(string.format("| %s | %d | %.3f | %.3f |", key, #sh.from, stats.mean(sh.from), stats.mean(sh.after)))
  end
  print("")
end

for _, tname in ipairs(TASK_NAMES) do
  local task = TASKS[tname]
  task.name = tname
  local rows, by_arm = {}, {}
  for seed = FIRST, FIRST + SEEDS - 1 do
    for _, arm in ipairs(ARMS) do
      local t0 = uv.hrtime()
      local r = arm_run(task, arm, seed)
      r.arm, r.seed, r.seconds = arm, seed, (uv.hrtime() - t0) / 1e9
      rows[#rows + 1] = r
      by_arm[arm] = by_arm[arm] or {}
      by_arm[arm][seed] = r
      io.stderr:write(string.format("%s seed %d %-9s %s %s [%s, %s]  kept %s, %d agent-steps spent (%.0f s)\n", tname, seed,
        arm, task.key, fmt(r.value), fmt(r.lo), fmt(r.hi), r.kept, r.spent, r.seconds))
    end
  end
  print(string.format("## %s (%s, %s), %d seeds, %s agent-steps per arm", tname, task.experiment,
    #task.sets > 0 and table.concat(task.sets, " ") or "as shipped", SEEDS, math.floor(task.budget * SCALE)))
  print("")
  print(string.format("| seed | arm | %s [95%%] | kept | agent-steps spent |", task.key))
  print("|---|---|---|---|---|")
  for _, r in ipairs(rows) do
    print(string.format("| %d | %s | %s [%s, %s] | %s | %d |", r.seed, r.arm, fmt(r.value), fmt(r.lo), fmt(r.hi), r.kept, r.spent))
  end
  print("")
  print(string.format("| arm | %s, mean over seeds +- 95%% (t) | against default: mean difference +- 95%% | against random search (random ARM_fins: against ARM_fin) |", task.key))
  print("|---|---|---|---|")
  for _, arm in ipairs(ARMS) do
    local xs = {}
    for seed = FIRST, FIRST + SEEDS - 1 do xs[#xs + 1] = by_arm[arm][seed].value end
    local m, h = mean_ci(xs)
    local function paired(other)
      if arm == other or not by_arm[other] then return "-" end
      local d = {}
      for seed = FIRST, FIRST + SEEDS - 1 do d[#d + 1] = by_arm[arm][seed].value - by_arm[other][seed].value end
      local dm, dh = mean_ci(d)
      local verdict = (dh == dh and dm - dh > 0) and "better" or ((dh == dh and dm + dh < 0) and "worse" or "not distinguishable")
      return string.format("%+.3f +- %s: %s", dm, dh == dh and string.format("%.3f", dh) or "n/a", verdict)
    end
    print(string.format("| %s | %.3f +- %s | %s | %s |", arm, m, h == h and string.format("%.3f", h) or "n/a",
      paired("default"), column_for(arm) and (column_for(arm) .. ": " .. paired(column_for(arm))) or "-"))
  end
  print("")
  fidelity(task, rows)
end

-- Real sweeps with the binary (build/moonrl, or $MOONRL_BIN): a sweep script
-- run by `moonrl run`, its trials child processes on a tiny network (an
-- update takes milliseconds), one of them crashing on purpose
-- (debug.crash_at_update: SIGKILL, as the OOM killer would); a sweep
-- interrupted with SIGINT and run again; config errors caught before anything
-- starts; `moonrl sweep status|plot`.

local support = require("support")
local json = require("moonrl.formats.json")
local uv = support.uv

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

local function need_bin()
  if not have_bin then pending("no binary at " .. BIN .. " (build it: make build)") end
  return have_bin
end

local wait_for = support.wait_for
local function spawn(dir, args) return support.spawn(BIN, dir, args, { wait = 120000 }) end

local function moonrl(dir, args)
  local p = spawn(dir, args)
  return p.wait(), p.out(), p.err()
end

-- The sweep script: arg[1] = sweep directory, arg[2] = the case.
local SCRIPT = [==[
local moonrl = require "moonrl"
local dir, case = arg[1], arg[2]
local base = {
  name = "e2e", hardware = "ci", threads = 1, total_steps = 64 * 12, warmup = { updates = 0 },
  env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8, max_episode_steps = 16 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8 },
  log = { console = false, tensorboard = false, csv = false, checkpoint_interval = 5 },
}
local spec = {
  base = base, dir = dir, metric = "episode_return_mean", mode = "max", smooth = 4, poll_ms = 50, kill_grace = 20,
  hooks = {
    on_trial_start = function(t) print("hook start " .. t.label) end,
    on_trial_result = function(r) print("hook result " .. r.label .. " " .. r.status) end,
    on_trial_failed = function(r) print("hook failed " .. r.label .. " " .. tostring(r.error)) end,
  },
}
if case == "crash" then
  spec.space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 1e-3), ["debug.crash_at_update"] = moonrl.grid{ 0, 0, 3 } }
  spec.method, spec.parallel = "grid", 2
elseif case == "resume" then
  -- trial 1 fails at once; trial 2 trains long enough to be interrupted
  spec.space = { ["debug.crash_at_update"] = moonrl.grid{ 2, 0 }, total_steps = moonrl.grid{ 64 * 1500 } }
  spec.method, spec.parallel = "grid", 1
elseif case == "adopt" then
  -- two trials at once, long enough to be caught running
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 5e-4 } }
  spec.method, spec.parallel = "grid", 2
  base.total_steps = 64 * 600
elseif case == "edit" then
  -- arg[3]: "edited" (another space and base), "extend" (the same, extend = true)
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3 } }
  if arg[3] then
    spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 5e-4 }, ["ppo.ent_coef"] = moonrl.grid{ 0.01 } }
    base.total_steps = 64 * 16
    spec.extend = arg[3] == "extend" or nil
  end
elseif case == "long" then
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3 } }
  base.total_steps = 64 * 1000000
elseif case == "asha" then
  -- the metric is the learning rate itself (a constant schedule), so the decisions are known:
  -- trial 2 (3e-4) is below trial 1 (1e-3) at the first rung and stops; trial 3 (2e-3) leads
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 3e-4, 2e-3 } }
  spec.method, spec.parallel, spec.metric, spec.smooth = "grid", 1, "lr", 1
  spec.scheduler = moonrl.asha{ grace_steps = 64 * 5, reduction = 3 }
  base.total_steps = 64 * 1000
elseif case == "timeout" then
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3 } }
  spec.time_limit = 2
  base.total_steps = 64 * 1000000
elseif case == "function" then
  -- proposes from the results so far: half the last lr, then a bad point, then no more
  spec.trials, spec.parallel = 5, 1
  spec.method = function(history, ctx)
    print("propose " .. ctx.index .. " after " .. #history .. " result(s)")
    if ctx.index == 1 then return { ["ppo.lr"] = 1e-3 } end
    if ctx.index == 2 then return { ["ppo.lr"] = history[1].params["ppo.lr"] / 2 } end
    if ctx.index == 3 then return { ["ppo.lr"] = 5 } end
    return nil
  end
elseif case == "evalmetric" then
  -- the metric is each trial's own evaluation at its end (the base's eval settings)
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 3e-4 } }
  spec.method, spec.parallel, spec.metric = "grid", 2, "eval.energy_per_1k"
  base.eval = { num_envs = 4, steps = 32 }
elseif case == "evalasha" then
  -- ASHA on each trial's evaluation at its rung (update 4 of 12), one at a time: with reduction
  -- 100 only the best so far goes on (the first always does). Mode min: these three evaluate
  -- at -56.9, -41.3 and -25.6 there, so the first goes on and the others stop
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 3e-4, 2e-3 } }
  spec.method, spec.parallel, spec.metric, spec.mode = "grid", 1, "eval.energy_per_1k", "min"
  spec.scheduler = moonrl.asha{ grace_steps = 64 * 4, reduction = 100 }
  base.eval = { num_envs = 4, steps = 32 }
elseif case == "repeats" then
  -- two settings, each with 3 seeds; the metric is the (constant) learning rate, so the means are known
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 3e-4 } }
  spec.method, spec.parallel, spec.metric, spec.smooth, spec.repeats = "grid", 2, "lr", 1, 3
elseif case == "finish" or case == "finish_long" or case == "finish_crash" then
  -- the metric is the (constant) learning rate, so the best is known: trial 3 (2e-3)
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 3e-4, 2e-3 } }
  spec.method, spec.parallel, spec.metric, spec.smooth = "grid", 1, "lr", 1
  spec.finish = case == "finish_long" and 64 * 1500 or 64 * 8
  -- the long one anneals over its finish (the base resolves lr to linear(3e-4, 1e-4): a line from 2e-3
  -- to 2e-3 / 3)
  spec.finish_schedules = case == "finish_long" and "base" or nil
  if case == "finish_crash" then
    -- the best trial ends its 12 updates, and its finish dies at update 15 (SIGKILL)
    spec.space = { ["ppo.lr"] = moonrl.grid{ 2e-3, 1e-3 }, ["debug.crash_at_update"] = moonrl.grid{ 15 } }
  end
elseif case == "budget_evalasha" then
  -- ASHA on each trial's evaluation and a budget of one whole trial and one first rung: the second
  -- trial starts (its first rung fits) and spends the budget at that rung, where it is evaluated
  -- and decided before the budget stops it
  spec.space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 1e-3) }
  spec.method, spec.trials, spec.parallel, spec.metric, spec.mode = "random", 4, 1, "eval.energy_per_1k", "min"
  spec.scheduler = moonrl.asha{ grace_steps = 64 * 4, reduction = 3 }
  spec.budget = 64 * 12 + 64 * 4
  base.eval = { num_envs = 4, steps = 32 }
elseif case == "finish_asha" then
  -- ASHA (rung at update 4 of 12) spending 2 trials' worth, then a finish of 12 updates: trials
  -- past the search's budget are stopped, the finish is not (it has its own share)
  spec.space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 1e-3) }
  spec.method, spec.trials, spec.metric, spec.smooth, spec.parallel = "tpe", 8, "lr", 1, 1
  spec.scheduler = moonrl.asha{ grace_steps = 64 * 4, reduction = 3 }
  spec.budget, spec.finish = 64 * 12 * 3, 64 * 12
elseif case == "finish_anneal" then
  -- the base anneals lr from 1e-3 to 1e-4; the one trial holds 2e-3 for its 12 updates, then its
  -- finish of 8 updates anneals from there to a tenth of it, as the base's schedule would
  base.ppo.lr = { kind = "linear", from = 1e-3, to = 1e-4 }
  spec.space = { ["ppo.lr"] = moonrl.grid{ 2e-3 } }
  spec.method, spec.parallel, spec.metric, spec.smooth, spec.finish = "grid", 1, "lr", 1, 64 * 8
  spec.finish_schedules = "base"
elseif case == "finish_pbt" then
  -- a population of 2, then its best member alone by 8 updates
  spec.method, spec.population, spec.finish, spec.metric, spec.smooth = "pbt", 2, 64 * 8, "lr", 1
  spec.space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 1e-3) }
  spec.pbt = { explore = { ["ppo.lr"] = "perturb" }, interval = 4, sync = true, test = "none" }
elseif case == "bad_metric" then
  spec.space, spec.method, spec.parallel, spec.metric = { ["ppo.lr"] = moonrl.grid{ 1e-3, 5e-4 } }, "grid", 1, "episode_retrun_mean"
elseif case == "bad_point" then
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 5 } }
elseif case == "bad_base" then
  base.ppo.lrr = 1
  spec.space = { ["ppo.lr"] = moonrl.grid{ 1e-3 } }
end
local sweep = moonrl.sweep(spec)
local s = sweep:wait()
print("summary " .. s.status .. " " .. #s.results .. " best " .. (s.best and s.best.label or "-"))
print(sweep:table())
if s.settings then
  for i, g in ipairs(s.settings) do print(string.format("setting %d %d %g %d", i, g.setting, g.mean, g.n)) end
end
]==]

local function read_results(path)
  local out = { results = {}, starts = {}, rungs = {} }
  for line in (support.read_file(path) or ""):gmatch("[^\n]+") do
    local o = assert(json.decode(line))
    if o.event == "start" then table.insert(out.starts, o)
    elseif o.event == "rung" then table.insert(out.rungs, o)
    elseif o.event == nil then table.insert(out.results, o) end
  end
  return out
end

local function has(text, s) return text:find(s, 1, true) ~= nil end

describe("moonrl.sweep (the binary)", function()
  local dir
  before_each(function()
    dir = support.tmpdir()
    support.write_file(dir .. "/sweep.lua", SCRIPT)
  end)
  after_each(function() support.rm_rf(dir) end)

  it("runs trials two at once; a crashing trial is recorded as failed while the others finish", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw crash")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(3, #rec.results)
    assert.equal(3, #rec.starts)
    local by = {}
    for _, r in ipairs(rec.results) do by[r.trial] = r end
    for i = 1, 2 do
      assert.equal("done", by[i].status, json.encode(by[i]))
      assert.equal(768, by[i].steps)
      assert.equal(12, by[i].updates)
      assert.is_number(by[i].value)
      assert.equal(0, by[i].params["debug.crash_at_update"])
    end
    local failed = by[3]
    assert.equal("failed", failed.status)
    assert.equal(9, failed.signal)
    assert.equal("killed by signal 9 (SIGKILL)", failed.error)
    -- killed right after update 3's metrics went to the (asynchronous) metrics.jsonl writer
    assert.is_true(failed.updates == nil or failed.updates <= 3, tostring(failed.updates))
    assert.is_true(has(table.concat(failed.log_tail, "\n"), "debug.crash_at_update = 3"), json.encode(failed.log_tail))
    -- seeds derive from the sweep seed (the base's: 1) and the index
    local space = require("moonrl.sweep.space")
    for i = 1, 3 do assert.equal(space.trial_seed(1, i), by[i].seed) end
    -- the two healthy trials ran at the same time
    local s1, s2 = rec.starts[1], rec.starts[2]
    assert.equal(1, s1.trial)
    assert.equal(2, s2.trial)
    -- hooks, table, summary
    assert.is_true(has(out, "hook start trial-001"))
    assert.is_true(has(out, "hook result trial-002 done"))
    assert.is_true(has(out, "hook failed trial-003 killed by signal 9 (SIGKILL)"))
    assert.is_true(has(out, "summary done 3 best trial-00"))
    assert.matches("| trial%-003 | failed ", out)
    assert.is_true(has(out, "sweep: trial-003 failed: killed by signal 9 (SIGKILL); last output:"))
    -- best.lua: the best trial's config, runnable (no directory of its own)
    local best = require("moonrl.config").load_file(dir .. "/sw/best.lua")
    assert.is_table(best)
    assert.is_nil(best.dir)
    local best_trial = out:match("summary done 3 best (trial%-%d+)")
    assert.equal(by[tonumber(best_trial:match("%d+"))].seed, best.seed)
    -- plots
    for _, f in ipairs({ "curves.svg", "param_ppo.lr.svg", "param_debug.crash_at_update.svg", "front.svg", "front_seconds.svg" }) do
      local svg = support.read_file(dir .. "/sw/plots/" .. f)
      assert.is_string(svg, f)
      assert.matches("^<svg ", svg)
    end
    -- moonrl sweep status / plot
    local scode, sout, serr = moonrl(dir, "sweep status sw")
    assert.equal(0, scode, serr)
    assert.is_true(has(sout, "3 trial(s): 2 done, 1 failed, 0 stopped early, 0 running, 0 interrupted, 0 pending"), sout)
    assert.is_true(has(sout, "trial-003 failed: killed by signal 9 (SIGKILL)"))
    assert.is_true(has(sout, "its config: sw/best.lua"))
    local pcode, pout = moonrl(dir, "sweep plot sw")
    assert.equal(0, pcode)
    assert.is_true(has(pout, "sw/plots/curves.svg"))
    local bcode, _, berr = moonrl(dir, "sweep status nowhere")
    assert.equal(2, bcode)
    assert.is_true(has(berr, "nowhere not found (a sweep directory: sweep.json, trial-NNN/)"), berr)
  end)

  it("re-run after SIGINT: finished trials are not repeated, the interrupted one resumes from its checkpoint", function()
    if not need_bin() then return end
    local p = spawn(dir, "run sweep.lua sw resume")
    local metrics = dir .. "/sw/trial-002/metrics.jsonl"
    local ok = wait_for(function()
      local text = support.read_file(metrics) or ""
      return select(2, text:gsub("\n", "")) >= 30 or p.done
    end, 60000)
    assert.is_true(ok and not p.done, "trial-002 did not get going:\n" .. p.out() .. p.err())
    uv.kill(p.pid, "sigint")
    assert.equal(130, p.wait())
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(1, #rec.results)
    assert.equal("failed", rec.results[1].status)
    assert.is_true(has(p.out(), "trial-002: interrupted after"), p.out())
    assert.is_true(#support.files(dir .. "/sw/trial-002/checkpoints") > 0)

    local code, out, err = moonrl(dir, "run sweep.lua sw resume")
    assert.equal(0, code, err .. out)
    rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(2, #rec.results)
    assert.equal("done", rec.results[2].status, json.encode(rec.results[2]))
    assert.equal(64 * 1500, rec.results[2].steps)
    -- trial 1 started once; trial 2 twice, the second time resumed
    assert.equal(3, #rec.starts)
    assert.equal(1, rec.starts[1].trial)
    assert.equal(2, rec.starts[3].trial)
    assert.is_true(rec.starts[3].resume)
    assert.is_true(has(out, "resuming: 1 result(s) read back"))
    assert.is_false(has(out, "hook start trial-001"))
    -- every update once in the resumed trial's metrics
    local seen, n, time = {}, 0, 0
    for line in support.read_file(metrics):gmatch("[^\n]+") do
      local m = json.decode(line)
      if m.event == nil then
        assert.is_nil(seen[m.update], "update " .. tostring(m.update) .. " twice")
        seen[m.update], n = true, n + 1
        time = time + m.time_total
      end
    end
    assert.equal(1500, n)
    -- its seconds of training are both processes' (every update's time_total), not the last one's
    assert.is_true(math.abs(rec.results[2].train_seconds - time) <= 1e-9 * time, rec.results[2].train_seconds .. " s, " ..
      time .. " s in its metrics.jsonl")
  end)

  it("re-run after the driver was SIGKILLed: a live trial is followed again, a dead one resumed, none failed", function()
    if not need_bin() then return end
    local dirlock = require("moonrl.run.dirlock")
    local p = spawn(dir, "run sweep.lua sw adopt")
    local function lock_pid(i)
      local text = support.read_file(string.format("%s/sw/trial-%03d/.lock", dir, i)) or ""
      return tonumber(text:match("^(%d+)"))
    end
    local function has_ck(i)   -- a complete checkpoint (one being written is NAME.tmp)
      for _, f in ipairs(support.files(string.format("%s/sw/trial-%03d/checkpoints", dir, i))) do
        if f:match("%.mrck$") then return true end
      end
    end
    local ok = wait_for(function() return (has_ck(1) and has_ck(2) and lock_pid(1) and lock_pid(2)) or p.done end, 60000)
    assert.is_true(ok and not p.done, "the trials did not get going:\n" .. p.out() .. p.err())
    local pid1, pid2 = lock_pid(1), lock_pid(2)
    -- trial 1 held still (alive, holding its lock) so that it is surely running at the re-run
    uv.kill(pid1, "sigstop")
    uv.kill(pid2, "sigstop")   -- (and trial 2 kept from finishing before it is killed)
    uv.kill(p.pid, "sigkill")   -- the driver only: the trials run in sessions of their own
    p.wait()
    assert.equal(9, p.signal)
    uv.kill(pid2, "sigkill")
    -- trial 2's lock is free once it is gone
    assert.is_true(wait_for(function()
      local l = dirlock.take(dir .. "/sw/trial-002")
      if l then l:release() return true end
    end, 30000))
    assert.is_nil(dirlock.take(dir .. "/sw/trial-001"))   -- trial 1 still holds its own

    local q = spawn(dir, "run sweep.lua sw adopt")
    local followed = wait_for(function() return has(q.out(), "trial-001: following pid " .. pid1 .. " again") or q.done end, 60000)
    uv.kill(pid1, "sigcont")
    assert.is_true(followed and not q.done, q.out() .. q.err())
    local code = q.wait()
    local out, err = q.out(), q.err()
    assert.equal(0, code, err .. out)
    assert.is_false(has(out, "failed:"), out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(2, #rec.results, out)
    for _, r in ipairs(rec.results) do
      assert.equal("done", r.status, json.encode(r))
      assert.equal(64 * 600, r.steps)
    end
    -- trial 1: started once, then followed (the same pid), never restarted
    local starts = { {}, {} }
    for _, st in ipairs(rec.starts) do table.insert(starts[st.trial], st) end
    assert.equal(2, #starts[1])
    assert.is_true(starts[1][2].adopted)
    assert.equal("pid " .. pid1, starts[1][2].job)
    -- trial 2: resumed from its checkpoint
    assert.equal(2, #starts[2])
    assert.is_true(starts[2][2].resume)
    assert.is_true(has(out, "trial-002 resumed:"), out)
    for i = 1, 2 do
      local seen, n = {}, 0
      for line in support.read_file(string.format("%s/sw/trial-%03d/metrics.jsonl", dir, i)):gmatch("[^\n]+") do
        local m = json.decode(line)
        if m and m.event == nil then
          assert.is_nil(seen[m.update], "update " .. tostring(m.update) .. " twice")
          seen[m.update], n = true, n + 1
        end
      end
      assert.is_true(seen[600], "trial " .. i)
      if i == 1 then
        assert.equal(600, n)   -- followed, never stopped: every update
      else
        -- SIGKILLed: rows still in the asynchronous metrics writer then are lost (a
        -- checkpoint may be newer than the last row written); none is repeated
        assert.is_true(n >= 590, "trial 2: " .. n .. " updates")
      end
    end
  end)

  it("refuses a re-run with an edited definition, showing what changed, unless extend = true", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw edit")
    assert.equal(0, code, err .. out)
    assert.equal(1, #read_results(dir .. "/sw/results.jsonl").results)
    -- the same definition again: nothing to do, no refusal
    code, out, err = moonrl(dir, "run sweep.lua sw edit")
    assert.equal(0, code, err .. out)
    local before = support.read_file(dir .. "/sw/results.jsonl")
    code, out, err = moonrl(dir, "run sweep.lua sw edit edited")
    assert.equal(1, code, err .. out)
    assert.is_true(has(err, "error in the main script: sweep.lua:"), err)   -- the script's line that started it
    assert.is_true(has(err, "sw holds a sweep with another definition"), err)
    assert.is_false(has(err, "stack traceback"), err)   -- a refusal is its message
    assert.is_true(has(err, "space: added ppo.ent_coef = grid{ 0.01 }"), err)
    assert.is_true(has(err, "space: changed ppo.lr: grid{ 0.001 } before, grid{ 0.001, 0.0005 } now"), err)
    assert.is_true(has(err, "base: changed total_steps: 768 before, 1024 now"), err)
    assert.is_true(has(err, "trials: 1 before, 2 now"), err)
    assert.is_true(has(err, "set extend = true in the sweep table"), err)
    assert.equal(before, support.read_file(dir .. "/sw/results.jsonl"))   -- nothing was started or written
    code, out, err = moonrl(dir, "run sweep.lua sw edit extend")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "extended: space: added ppo.ent_coef"), out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(2, #rec.results)
    assert.equal(2, #rec.starts)   -- trial 1's result stands; only trial 2 ran
    assert.equal(2, rec.starts[2].trial)
    assert.equal(5e-4, rec.results[2].params["ppo.lr"])
    assert.equal(1024, rec.results[2].steps)
    -- the extended definition is the one a later re-run compares with
    code, out, err = moonrl(dir, "run sweep.lua sw edit extend")
    assert.equal(0, code, err .. out)
    assert.is_false(has(out, "extended:"), out)
  end)

  it("moonrl ps lists a sweep's trials, under a line naming the sweep", function()
    if not need_bin() then return end
    local p = spawn(dir, "run sweep.lua sw long")
    local metrics = dir .. "/sw/trial-001/metrics.jsonl"
    local ok = wait_for(function()
      return select(2, (support.read_file(metrics) or ""):gsub("\n", "")) >= 3 or p.done
    end, 60000)
    assert.is_true(ok and not p.done, p.out() .. p.err())
    for _, where in ipairs({ dir, dir .. "/sw" }) do
      local code, out, err = moonrl(dir, "ps " .. where)
      assert.equal(0, code, err)
      local lines = support.lines(out)
      assert.truthy(lines[2]:match("^" .. (dir .. "/sw"):gsub("%p", "%%%0") .. " +%(sweep%) +1 trial%(s%) here$"), out)
      assert.truthy(lines[3]:match("^  " .. (dir .. "/sw/trial-001"):gsub("%p", "%%%0") .. " +e2e +"), out)
      code, out = moonrl(dir, "ps --json " .. where)
      local rec = json.decode(support.lines(out)[1])
      assert.equal(dir .. "/sw/trial-001", rec.dir)
      assert.equal(dir .. "/sw", rec.sweep)
      assert.is_true(rec.running, out)
    end
    uv.kill(p.pid, "sigint")
    assert.equal(130, p.wait())
  end)

  it("stops the trials ASHA drops through their stop path, and a trial past its time limit", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw asha")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    local by = {}
    for _, r in ipairs(rec.results) do by[r.trial] = r end
    assert.equal("done", by[1].status)
    assert.equal("stopped", by[2].status)
    assert.equal("rung 1 (320 agent-steps): 0.0003 is #2 of 2, top 1 go on", by[2].why)
    -- paused at its rung (--pause-at-steps), so the stop lands there exactly
    assert.equal(320, by[2].steps)
    assert.equal(130, by[2].exit_code)   -- SIGINT: the run's own stop, with its final checkpoint
    local ck = support.files(dir .. "/sw/trial-002/checkpoints")
    assert.equal(string.format("update_%07d.mrck", by[2].updates), ck[#ck])
    assert.equal("done", by[3].status)
    assert.equal(64 * 1000, by[3].steps)
    assert.is_true(has(out, "summary done 3 best trial-003"))
    assert.is_true(has(support.read_file(dir .. "/sw/best.lua"), "lr = constant(0.002)"))

    code, out, err = moonrl(dir, "run sweep.lua sw2 timeout")
    assert.equal(0, code, err .. out)
    rec = read_results(dir .. "/sw2/results.jsonl")
    assert.equal(1, #rec.results)
    assert.equal("failed", rec.results[1].status)
    assert.equal("time limit of 2 s reached: stopped with its final checkpoint", rec.results[1].error)
    assert.is_true(#support.files(dir .. "/sw2/trial-001/checkpoints") > 0)
  end)

  it("runs what a method function proposes from the results so far; a bad proposal is a failed trial", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw function")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "propose 1 after 0 result(s)"))
    assert.is_true(has(out, "propose 2 after 1 result(s)"))
    assert.is_true(has(out, "propose 4 after 3 result(s)"))
    assert.is_false(has(out, "propose 5"))
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(3, #rec.results)
    assert.equal(2, #rec.starts)   -- the bad point never started
    assert.equal(5e-4, rec.results[2].params["ppo.lr"])
    assert.equal("failed", rec.results[3].status)
    assert.is_true(has(rec.results[3].error, "config error: ppo.lr = 5 is out of range"), rec.results[3].error)
    assert.is_true(has(out, "summary done 3 best"))
  end)

  it("moonrl.eval_table names a column by its result's label (a trial's), else by its mode", function()
    if not need_bin() then return end
    support.write_file(dir .. "/table.lua", [[
local moonrl = require "moonrl"
-- two agents of 10 steps: one dies at 4 (1 food, 2 poison) and lives on 6 (2 food), one lives 10 (3 food, 1 poison)
local function r(label, mode)
  local rec = { [0] = { run = 0, env = 0, died = 1, steps = 4, start = 0, food = 1, poison = 2 },
    { run = 0, env = 0, died = 0, steps = 6, start = 4, food = 2, poison = 0 },
    { run = 0, env = 1, died = 0, steps = 10, start = 0, food = 3, poison = 1 } }
  return { label = label, mode = mode, checkpoint = "t/checkpoints/update_0000004.mrck",
    eval = { num_envs = 2, steps = 10, runs = 1, seed = 7 }, records = { n = 3, deaths = 1, rec = rec } }
end
print(moonrl.eval_table({ r("trial-004", "ground_truth"), r(nil, "proxy") }, { boot = 50 }))
]])
    local code, out, err = moonrl(dir, "run table.lua")
    assert.equal(0, code, err)
    local lines = support.lines(out)
    assert.equal("evaluated: t/checkpoints/update_0000004.mrck (update 4); 2 envs x 10 steps x 1 run, eval seed 7", lines[1])
    assert.truthy(lines[3]:match("^| metric +| +trial%-004 | +proxy |$"), lines[3])
    assert.truthy(out:find("efficiency, overall", 1, true), out)
  end)

  it("repeats: every setting runs with several seeds; the summary gives each setting's mean and interval", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw repeats")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(6, #rec.results)
    local seeds, lr = {}, {}
    for _, r in ipairs(rec.results) do
      assert.is_nil(seeds[r.seed], "seed " .. tostring(r.seed) .. " twice")
      seeds[r.seed] = true
      lr[r.trial] = r.params["ppo.lr"]
    end
    assert.same({ 1e-3, 1e-3, 1e-3, 3e-4, 3e-4, 3e-4 }, lr)   -- trials 1-3 are setting 1, 4-6 setting 2
    -- the means of constant metrics are the learning rates, each over 3 seeds, best first
    assert.is_true(has(out, "setting 1 1 0.001 3"), out)
    assert.is_true(has(out, "setting 2 2 0.0003 3"), out)
    assert.is_true(has(out, "settings (lr: mean [95% interval] over their seeds, best first):"), out)
    assert.is_true(has(out, "ppo.lr=0.0003  0.0003 [0.0003, 0.0003]  n = 3  worse than the best"), out)
    -- sweep.json records the repeats; a re-run with another count is another definition
    local info = json.decode(support.read_file(dir .. "/sw/sweep.json"))
    assert.equal(3, info.repeats)
    -- and the command that made it, which moonrl train --resume on the sweep's directory points to
    assert.equal("moonrl run sweep.lua sw repeats", info.command)
    code, out, err = moonrl(dir, "train --resume sw")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "run the sweep again to resume it (moonrl run sweep.lua sw repeats)"), err)
    -- moonrl sweep status shows the settings too
    code, out, err = moonrl(dir, "sweep status sw")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "  1. ppo.lr=0.001  0.001 [0.001, 0.001]  n = 3  best"), out)
  end)

  it("metric = \"eval.<key>\": each trial ends in its evaluation, whose number is the trial's value", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw evalmetric")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(2, #rec.results)
    for _, r in ipairs(rec.results) do
      assert.equal("done", r.status)
      assert.equal("eval.energy_per_1k", r.metric)
      -- the value is the trial's eval.json, read here on its own
      local doc = json.decode(support.read_file(r.dir:gsub("^sw/", dir .. "/sw/") .. "/eval/update_0000012/eval.json"))
      assert.equal(doc.results[1].point.energy_per_1k, r.value)
      assert.is_true(r.value ~= 0 and r.value == r.value, tostring(r.value))   -- a real number, not a default
    end
    -- ASHA evaluates trials paused at their rungs: with Slurm's executor, refused, saying so
    support.write_file(dir .. "/bad.lua", "local moonrl = require 'moonrl'\n" ..
      "moonrl.sweep{ base = { total_steps = 64 }, space = { ['ppo.lr'] = moonrl.grid{ 1e-3 } }, executor = 'slurm', " ..
      "metric = 'eval.eff_overall', scheduler = moonrl.asha{ grace_steps = 64 } }\n")
    code, out, err = moonrl(dir, "run bad.lua")
    assert.is_true(code ~= 0, out .. err)
    assert.is_true(has(out .. err, "with ASHA evaluates each trial paused at its rungs, which needs the local executor"),
      out .. err)
    support.write_file(dir .. "/bad2.lua", "local moonrl = require 'moonrl'\n" ..
      "moonrl.sweep{ base = { total_steps = 64 }, space = { ['ppo.lr'] = moonrl.grid{ 1e-3 } }, metric = 'eval.nope' }\n")
    code, out, err = moonrl(dir, "run bad2.lua")
    assert.is_true(code ~= 0 and has(out .. err, "accepted eval.energy_per_1k, eval.eff_overall"), out .. err)
  end)

  it("metric = \"eval.<key>\" with ASHA: each trial is evaluated paused at its rung and decided on that", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw_asha evalasha")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw_asha/results.jsonl")
    assert.equal(3, #rec.results)
    local rungs, best, stops = {}, nil, 0
    for _, ev in ipairs(rec.rungs) do rungs[ev.trial] = ev end
    for i = 1, 3 do
      local ev = assert(rungs[i], "no rung event for trial " .. i)
      assert.equal(256, ev.steps)
      -- the value at the rung is that of the evaluation in DIR/asha/eval/, read here on its own
      local doc = json.decode(support.read_file(string.format("%s/sw_asha/asha/eval/trial-%03d-rung1/eval.json", dir, i)))
      assert.equal(doc.results[1].point.energy_per_1k, ev.value)
      assert.is_truthy(tostring(ev.checkpoint):find("trial%-00" .. i .. "/checkpoints/update_0000004%.mrck$"), tostring(ev.checkpoint))
      -- reduction 100: only a value better (mode min: lower) than every earlier one goes on (the
      -- first always does)
      local goes_on = best == nil or ev.value < best
      assert.equal(goes_on and "continue" or "stop", ev.decision, ev.why)
      best = best and math.min(best, ev.value) or ev.value
      if not goes_on then stops = stops + 1 end
      local r = rec.results[i]
      if goes_on then
        assert.equal("done", r.status)
        local final = json.decode(support.read_file(r.dir:gsub("^sw_asha/", dir .. "/sw_asha/") .. "/eval/update_0000012/eval.json"))
        assert.equal(final.results[1].point.energy_per_1k, r.value)
      else
        -- stopped at the rung: its value is its evaluation there, and it trained no further
        assert.equal("stopped", r.status)
        assert.equal(ev.value, r.value)
        assert.equal(256, r.steps)
      end
    end
    assert.is_true(stops >= 1, "no trial stopped: the stop is untested")
  end)

  it("a budget spent at a rung evaluated for ASHA: the trial is evaluated and decided there, then stopped with that value", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw budget_evalasha")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(2, #rec.results)
    local r2 = rec.results[2]
    assert.equal(2, r2.trial)
    assert.equal("stopped", r2.status)
    assert.equal(256, r2.steps)
    local ev
    for _, e in ipairs(rec.rungs) do if e.trial == 2 then ev = e end end
    assert.is_truthy(ev, "trial 2 has no rung decision: the budget stopped it before its evaluation")
    local doc = json.decode(support.read_file(dir .. "/sw/asha/eval/trial-002-rung1/eval.json"))
    assert.equal(doc.results[1].point.energy_per_1k, ev.value)
    assert.equal(ev.value, r2.value)   -- its value is the rung's evaluation, not none
    assert.is_false(has(out .. err, "no evaluation at rung"), out .. err)
  end)

  it("finish: the best trial trains on from its checkpoint; a re-run does not finish again", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw finish")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    -- 3 trials, then trial 3 (the best: lr 2e-3) again from its checkpoint, by 8 updates
    assert.equal(4, #rec.results)
    assert.equal(4, #rec.starts)
    local last = rec.results[4]
    assert.equal(3, last.trial)
    assert.equal("done", last.status)
    assert.equal(64 * 20, last.steps)
    assert.same({ from_steps = 64 * 12, from_value = 2e-3 }, last.finish)
    assert.is_true(rec.starts[4].resume)
    assert.equal(64 * 20, rec.starts[4].finish)
    for i = 1, 3 do assert.equal(64 * 12, rec.results[i].steps) end
    assert.is_true(has(out, "finish: trial-003, the best (lr 0.002 after 768 agent-steps), trains on by 512"), out)
    assert.is_true(has(out, "summary done 3 best trial-003"), out)
    -- every update once in its metrics: the finish went on from update 12
    local n = 0
    for line in support.read_file(dir .. "/sw/trial-003/metrics.jsonl"):gmatch("[^\n]+") do
      local m = json.decode(line)
      if m.event == nil then n = n + 1 assert.equal(n, m.update) end
    end
    assert.equal(20, n)
    -- the report takes it at the trials' budget, and says so
    code, out, err = moonrl(dir, "sweep report sw")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "trial-003 trained on by 512 agent-steps after the search (the sweep's finish) and reached " ..
      "lr 0.002 there; this report takes it at the trials' budget, 0.002 after 768 agent-steps, as the others"), out)
    -- run again: nothing starts, the finished result stands
    code, out, err = moonrl(dir, "run sweep.lua sw finish")
    assert.equal(0, code, err .. out)
    rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(4, #rec.starts)
    assert.is_true(has(out, "summary done 3 best trial-003"), out)
  end)

  it("finish: a key the base schedules goes from the trial's constant to the base's end ratio over the finish", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw finish_anneal")
    assert.equal(0, code, err .. out)
    local lr = {}
    for line in support.read_file(dir .. "/sw/trial-001/metrics.jsonl"):gmatch("[^\n]+") do
      local m = json.decode(line)
      if m.event == nil then lr[m.update] = m.lr end
    end
    assert.equal(20, #lr)
    for u = 1, 12 do assert.is_true(math.abs(lr[u] - 2e-3) < 1e-12, "update " .. u .. ": " .. lr[u]) end
    -- the reference: a straight line in updates, from 2e-3 at the first of the finish (update 13) to
    -- 2e-4 (2e-3 times the base's 1e-4 / 1e-3) where a 21st update would start
    for u = 13, 20 do
      local want = 2e-3 + (2e-4 - 2e-3) * (u - 13) / (21 - 13)
      assert.is_true(math.abs(lr[u] - want) < 1e-9, "update " .. u .. ": " .. lr[u] .. ", expected " .. want)
    end
    assert.is_true(has(support.read_file(dir .. "/sw/trial-001/output.log"), "ppo.lr = {from = "), "the resume names the change")
  end)

  it("finish with ASHA and a budget: the search spends the budget less the finish, and the finish runs to its end", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw finish_asha")
    assert.equal(0, code, err .. out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    local text = support.read_file(dir .. "/sw/results.jsonl")
    local last = rec.results[#rec.results]
    assert.equal("done", last.status, last.note)
    assert.is_truthy(last.finish, "the last result is no finish")
    assert.equal(64 * 12, last.finish.from_steps)
    assert.equal(64 * 24, last.steps)
    -- the search's results (all but the finish) spent no more than the budget less the finish, and
    -- no budget stop fell on the finishing trial
    local spent = 0
    for i = 1, #rec.results - 1 do spent = spent + rec.results[i].steps end
    assert.is_true(spent <= 64 * 12 * 2 + 64, "the search spent " .. spent)
    for line in text:gmatch("[^\n]+") do
      local ev = json.decode(line)
      if ev.event == "budget_stop" then assert.are_not.equal(last.trial, ev.trial, line) end
    end
  end)

  it("finish: stopped during it, a re-run goes on to the same count; a finish that dies leaves the result before it; PBT's best member goes on alone", function()
    if not need_bin() then return end
    local p = spawn(dir, "run sweep.lua sw finish_long")
    local metrics = dir .. "/sw/trial-003/metrics.jsonl"
    local ok = wait_for(function()
      local text = support.read_file(metrics) or ""
      return select(2, text:gsub("\n", "")) >= 40 or p.done
    end, 60000)
    assert.is_true(ok and not p.done, "the finish did not get going:\n" .. p.out() .. p.err())
    uv.kill(p.pid, "sigint")
    assert.equal(130, p.wait())
    assert.is_true(has(p.out(), "trial-003: interrupted after"), p.out())
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(3, #rec.results)
    -- status shows it as what it is, not as the result before its finish
    local scode, sout, serr = moonrl(dir, "sweep status sw")
    assert.equal(0, scode, serr .. sout)
    assert.truthy(sout:find("trial%-003 | interrupted"), sout)
    local code, out, err = moonrl(dir, "run sweep.lua sw finish_long")
    assert.equal(0, code, err .. out)
    rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(4, #rec.results)
    assert.equal(3, rec.results[4].trial)
    assert.equal(64 * (12 + 1500), rec.results[4].steps)
    assert.equal(64 * 12, rec.results[4].finish.from_steps)
    assert.equal(5, #rec.starts)
    assert.equal(3, rec.starts[5].trial)
    assert.equal(64 * (12 + 1500), rec.starts[5].finish)
    -- its lr went on along one line across the interruption (the last line of each update: a resumed
    -- run logs again the updates after its checkpoint), from 2e-3 at update 13 to 2e-3 / 3 where a
    -- 1513th would start
    local lr = {}
    for line in support.read_file(metrics):gmatch("[^\n]+") do
      local m = json.decode(line)
      if m.event == nil then lr[m.update] = m.lr end
    end
    assert.equal(1512, #lr)
    for u = 13, 1512 do
      local want = 2e-3 + (2e-3 / 3 - 2e-3) * (u - 13) / (1513 - 13)
      assert.is_true(math.abs(lr[u] - want) < 1e-9, "update " .. u .. ": " .. lr[u] .. ", expected " .. want)
    end

    code, out, err = moonrl(dir, "run sweep.lua sc finish_crash")
    assert.equal(0, code, err .. out)
    rec = read_results(dir .. "/sc/results.jsonl")
    -- trial 1 (2e-3) done at 12 updates; its finish killed at update 15; the result at 12 written again
    local last = rec.results[#rec.results]
    assert.equal(1, last.trial)
    assert.equal("done", last.status)
    assert.equal(64 * 12, last.steps)
    assert.is_nil(last.finish)
    assert.truthy(last.note and last.note:find("the finish to 1,280 agent%-steps ended failed: killed by signal 9"), last.note)
    assert.is_true(has(out, "summary done 2 best trial-001"), out)
    assert.is_true(has(out, "trial-001: the finish ended failed"), out)

    code, out, err = moonrl(dir, "run sweep.lua sp finish_pbt")
    assert.equal(0, code, err .. out)
    rec = read_results(dir .. "/sp/results.jsonl")
    assert.equal(3, #rec.results)
    last = rec.results[3]
    assert.equal(64 * 20, last.steps)
    assert.equal(64 * 12, last.finish.from_steps)
    -- the member that went on is the better one (its value before the finish)
    assert.equal(math.max(rec.results[1].value, rec.results[2].value), last.finish.from_value)
    assert.equal(last.trial, rec.results[1].value > rec.results[2].value and rec.results[1].trial or rec.results[2].trial)
    assert.is_true(has(out, "trains on to 1,280 agent-steps (the finish)"), out)
  end)

  it("stops after the first trial when the metric is no field of its metrics.jsonl, naming the fields", function()
    if not need_bin() then return end
    local code, out, err = moonrl(dir, "run sweep.lua sw bad_metric")
    assert.equal(0, code, err .. out)
    assert.is_true(has(err, 'metric "episode_retrun_mean" is no field of the trials\' metrics.jsonl (trial-001 ran to its end without it); accepted: '), err)
    assert.is_true(has(err, "episode_return_mean, "), err)
    assert.is_true(has(out, "summary stopped 1 best -"), out)
    local rec = read_results(dir .. "/sw/results.jsonl")
    assert.equal(1, #rec.starts)
    assert.equal("metric episode_retrun_mean is no field of its metrics.jsonl", rec.results[1].note)
  end)

  it("refuses repeats with a method function or a scheduler, naming what works", function()
    if not need_bin() then return end
    support.write_file(dir .. "/bad.lua", "local moonrl = require 'moonrl'\n" ..
      "moonrl.sweep{ base = { total_steps = 64 }, space = { ['ppo.lr'] = moonrl.grid{ 1e-3 } }, repeats = 2, " ..
      "scheduler = moonrl.asha{ grace_steps = 64 } }\n")
    local code, out, err = moonrl(dir, "run bad.lua")
    assert.is_true(code ~= 0, out .. err)
    assert.is_true(has(out .. err, "repeats = 2 works with method = \"grid\" or \"random\", no scheduler and no budget"), out .. err)
  end)

  it("reports a config error in a point or in the base before anything starts", function()
    if not need_bin() then return end
    local code, _, err = moonrl(dir, "run sweep.lua sw bad_point")
    assert.equal(1, code)
    assert.is_true(has(err, "config error in 1 of the trials; nothing was started"), err)
    assert.is_true(has(err, "trial-002 (ppo.lr=5): ppo.lr = 5 is out of range"), err)
    assert.is_nil(uv.fs_stat(dir .. "/sw"))
    code, _, err = moonrl(dir, "run sweep.lua sw bad_base")
    assert.equal(1, code)
    assert.is_true(has(err, "moonrl.sweep: base config:"), err)
    assert.is_true(has(err, "ppo.lrr"), err)
    assert.is_nil(uv.fs_stat(dir .. "/sw"))
  end)

  it("moonrl sweep EXPERIMENT runs its default space without a script; budget caps a TPE sweep's agent-steps", function()
    if not need_bin() then return end
    -- 4 updates of 8 envs x 32 steps a trial; a budget of 3 trials' worth, 5 trials allowed
    local code, out, err = moonrl(dir, "sweep cartpole --method tpe --trials 2 --dir sw --set total_steps=1024 " ..
      "--set log.checkpoint_interval=1000")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "space: the default space of the cartpole experiment"), out)
    local info = json.decode(support.read_file(dir .. "/sw/sweep.json"))
    assert.equal("loguniform(0.0003, 0.003)", info.definition.space["ppo.lr"])
    assert.equal("randint(5, 20)", info.definition.space["ppo.epochs"])
    assert.equal("episode_return_mean", info.metric)
    assert.equal(2, #read_results(dir .. "/sw/results.jsonl").results)
    -- the same directory with another definition: the sweep's own refusal, a usage error
    code, out, err = moonrl(dir, "sweep cartpole --method tpe --trials 3 --dir sw --set total_steps=1024 " ..
      "--set log.checkpoint_interval=1000")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "moonrl.sweep: sw holds a sweep with another definition (its sweep.json); what changed:\n  trials: 2 before, 3 now"), err)
    assert.is_false(has(err, "error in the main script"), err)
    -- or another metric: the results' values are of the one they were ranked by
    code, out, err = moonrl(dir, "sweep cartpole --method tpe --trials 2 --dir sw --set total_steps=1024 " ..
      "--set log.checkpoint_interval=1000 --metric lr")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "metric: episode_return_mean max before, lr max now"), err)
    -- the batch's shape is in the space; --method pbt is a synchronous population
    assert.equal("choice{ 2, 4, 8 }", info.definition.space["env.num_envs"])
    code, out, err = moonrl(dir, "sweep cartpole --method pbt --trials 2 --dir sp --set total_steps=4096 " ..
      "--set log.checkpoint_interval=1000")
    assert.equal(0, code, err .. out)
    info = json.decode(support.read_file(dir .. "/sp/sweep.json"))
    assert.truthy(info.definition.pbt:find("explore=ppo.clip:pb2,ppo.ent_coef:pb2,ppo.lr:pb2 test=welch alpha=0.05 window=10 sync", 1, true), info.definition.pbt)
    -- budget
    support.write_file(dir .. "/budget.lua", "local moonrl = require 'moonrl'\n" ..
      "local s = moonrl.sweep{ base = 'cartpole', sets = { 'total_steps=1024', 'log.checkpoint_interval=1000' }, " ..
      "method = 'tpe', trials = 5, budget = 3 * 1024, dir = 'sb' }\nlocal r = s:wait()\nprint('trials ' .. #r.results)\n")
    code, out, err = moonrl(dir, "run budget.lua")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "trials 3"), out)
    assert.is_true(has(out, "budget: 3,072 of 3,072 agent-steps spent; no room for another trial of 1,024"), out)
    -- with a finish, the search spends the budget less the finish, and the best trial trains on by it
    support.write_file(dir .. "/finish.lua", "local moonrl = require 'moonrl'\n" ..
      "local s = moonrl.sweep{ base = 'cartpole', sets = { 'total_steps=1024', 'log.checkpoint_interval=1000' }, " ..
      "method = 'tpe', trials = 5, budget = 4 * 1024, finish = 1024, dir = 'sf' }\nlocal r = s:wait()\n" ..
      "local n = 0\nfor _, x in ipairs(r.results) do n = n + x.steps end\nprint('trials ' .. #r.results .. ' steps ' .. n)\n")
    code, out, err = moonrl(dir, "run finish.lua")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "trials 3 steps 4096"), out)
    assert.is_true(has(out, "budget: 3,072 of 4,096 agent-steps spent (1,024 kept for the finish); no room for another trial of 1,024"), out)
    -- a finish must fit in the budget
    support.write_file(dir .. "/toolong.lua", "local moonrl = require 'moonrl'\n" ..
      "moonrl.sweep{ base = 'cartpole', method = 'tpe', trials = 5, budget = 1024, finish = 1024, dir = 'st' }\n")
    code, out, err = moonrl(dir, "run toolong.lua")
    assert.equal(1, code, err .. out)
    assert.is_true(has(err, "finish = 1024 must be less than budget = 1024 (the search spends the budget less the finish)"), err)
    code, out, err = moonrl(dir, "sweep cartpole --finish 0 --dir sy")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "--finish"), err)
    code, out, err = moonrl(dir, "sweep cartpole --finish-schedules base --dir sy")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "--finish-schedules goes with --finish"), err)
    code, out, err = moonrl(dir, "sweep cartpole --finish 512 --finish-schedules linear --dir sy")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "--finish-schedules linear: accepted constant, base"), err)
    -- --budget on the command line, with random search: its own points, one at a time, while they fit
    code, out, err = moonrl(dir, "sweep cartpole --budget 3072 --dir sr --seed 5 --set total_steps=1024 " ..
      "--set log.checkpoint_interval=1000")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "budget: 3,072 of 3,072 agent-steps spent; no room for another trial of 1,024"), out)
    assert.is_true(has(out, "0 pending, budget: 3,072 of 3,072 agent-steps taken"), out)   -- not the 61 never to run
    info = json.decode(support.read_file(dir .. "/sr/sweep.json"))
    assert.equal("random", info.definition.method)
    -- the command that runs it again is this one (not "moonrl run <the binary> sweep ...")
    assert.equal("moonrl sweep cartpole --budget 3072 --dir sr --seed 5 --set total_steps=1024 " ..
      "--set log.checkpoint_interval=1000", info.command)
    code, out, err = moonrl(dir, "sweep status sr")
    assert.equal(0, code, err .. out)
    assert.is_true(has(out, "64 trial(s) at most: 3 done, 0 failed, 0 stopped early, 0 running, 0 interrupted, " ..
      "0 pending; budget: 3,072 of 3,072 agent-steps trained"), out)
    code, out, err = moonrl(dir, "train --resume sr")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "run the sweep again to resume it (moonrl sweep cartpole --budget 3072 --dir sr"), err)
    local rr = read_results(dir .. "/sr/results.jsonl").results
    assert.equal(3, #rr)
    local space = require("moonrl.sweep.space")
    local sp = require("moonrl.sweep.spaces").of("cartpole")
    for _, r in ipairs(rr) do   -- random search's points and seeds, as without a budget
      local want = space.point(sp, "random", 5, r.trial)
      for k, v in pairs(want) do assert.equal(v, r.params[k], k) end
      assert.equal(space.trial_seed(5, r.trial), r.seed)
    end
    code, out, err = moonrl(dir, "sweep cartpole --method grid --budget 3072 --dir sg")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "--budget does not go with --method grid"), err)
    code, out, err = moonrl(dir, "sweep cartpole --method pbt --budget 3072 --dir sg")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "--budget does not go with --method pbt"), err)
    -- not a subcommand, not an experiment
    code, out, err = moonrl(dir, "sweep nosuch")
    assert.equal(2, code, err .. out)
    assert.is_true(has(err, "'nosuch' is neither a subcommand (status, plot, lineage) nor a shipped experiment"), err)
    assert.is_true(has(err, "cartpole, cartpole_lua, catch, default, dials"), err)
  end)
end)

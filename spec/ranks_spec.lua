-- One run over several processes (docs/data-parallel.md): the built binary
-- under a real `mpirun -n 2` (Open MPI; --oversubscribe on a 2-core machine,
-- the ALLOW variables as root), with a network small enough that an update
-- takes milliseconds. Checked: one run directory; the steps of both ranks
-- counted; the same bits twice; the first update's episodes pooled as one
-- process of 2 x E environments has them; a `moonrl ctl set` in force on
-- both ranks from the same update; resuming on 1 rank from 2 and on 2 from
-- 1 (the environments re-seeded, said) and on 2 from 2 bit for bit; a rank
-- killed: the job ends naming it, and resumes from its newest checkpoint; a
-- Lua environment (env.lua) on 2 ranks, pooled and resumed as a C one.

local support = require("support")
local json = require("moonrl.formats.json")
local uv = support.uv

local BIN = support.BIN
local MPI_ENV = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1"

local function have_mpirun()
  local p = io.popen("command -v mpirun 2>/dev/null")
  local got = p:read("*a")
  p:close()
  return got ~= ""
end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

-- `[mpirun -n ranks] moonrl ARGS` in dir; exit code, stdout, stderr.
local function run(ranks, args, dir)
  local out, err, rc = dir .. "/stdout", dir .. "/stderr", dir .. "/rc"
  local launch = ranks > 1 and string.format("env %s mpirun -n %d ", MPI_ENV, ranks) or ""
  sh(string.format("cd %q && timeout 180 %s%q %s >%q 2>%q; echo $? >%q", dir, launch, BIN, args, out, err, rc))
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

-- A case runs where the binary is built and Open MPI is installed (make
-- installs openmpi-bin, so CI runs every case).
local function ready()
  if not support.have_bin then pending("no binary at " .. BIN .. " (build it: make build)") return false end
  if not have_mpirun() then pending("mpirun not found (make installs openmpi-bin)") return false end
  return true
end

local E, T, UPDATES = 8, 8, 8
local BATCH = E * T                 -- one rank's agent-steps per update

local EXPERIMENT = [[
return {
  name = "ranks", device = "cpu", threads = 1, seed = 11, hardware = "ci", level = "basic",
  total_steps = ]] .. UPDATES * 2 * BATCH .. [[,
  warmup = { updates = 1, restore = true },
  env = { num_envs = ]] .. E .. [[, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = ]] .. T .. [[, epochs = 2, lr = linear(1e-3, 1e-4),
          ent_coef = function(p) return 0.01 * (1 - p) end },
  log = { console = false, tensorboard = false, checkpoint_interval = 1, checkpoint_keep = 0 },
}
]]

local function ckpt(dir, n) return string.format("%s/checkpoints/update_%07d.mrck", dir, n) end

local function copy(from, to) assert(sh(string.format("cp -r %q %q", from, to))) end
-- As if the run had stopped after update k: its later checkpoints gone.
local function interrupt(run_dir, k, last)
  for n = k + 1, last do assert(os.remove(ckpt(run_dir, n))) end
end

local function rows(run_dir)   -- metric rows; event lines (changes) apart
  local out, events = {}, {}
  for _, line in ipairs(support.lines(support.read_file(run_dir .. "/metrics.jsonl") or "")) do
    local r = json.decode(line)
    if r.event == nil then out[#out + 1] = r else events[#events + 1] = r end
  end
  return out, events
end

local function column(rs, key)
  local out = {}
  for _, r in ipairs(rs) do out[#out + 1] = r[key] end
  return out
end

-- Progress is the run's agent-steps over those it makes, continuous across a
-- change of ranks, and each update's lr the schedule's value at the progress
-- before it (docs/data-parallel.md).
local function continuous(rs, total)
  local before = 0
  for i, r in ipairs(rs) do
    local p = r.agent_steps / total
    assert.is_true(math.abs(r.progress - p) < 1e-12,
      string.format("update %d: progress %.6f, agent-steps %d / %d = %.6f", r.update, r.progress, r.agent_steps, total, p))
    local lr = 1e-3 + (1e-4 - 1e-3) * before
    assert.is_true(math.abs(r.lr - lr) < 1e-6 * lr,
      string.format("update %d: lr %.8g, linear(1e-3, 1e-4) at progress %.6f = %.8g", r.update, r.lr, before, lr))
    local ent = 0.01 * (1 - before)   -- a Lua function: the host's table (engine.schedule_tables)
    assert.is_true(math.abs(r.ent_coef - ent) < 1e-6 * ent,
      string.format("update %d: ent_coef %.8g, the function at progress %.6f = %.8g", r.update, r.ent_coef, before, ent))
    before = p
    assert(i == r.update)
  end
end

local function entries(dir)
  local out = {}
  for _, n in ipairs(support.files(dir)) do out[n] = true end
  return out
end

describe("moonrl train under mpirun -n 2", function()
  local dir, two
  setup(function()
    if not support.have_bin or not have_mpirun() then return end
    dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    local rc, out, err = run(2, "train exp.lua --dir two --no-eval", dir)
    assert(rc == 0, out .. err)
    two = dir .. "/two"
  end)
  teardown(function()
    if dir then support.rm_rf(dir) end
  end)

  it("is one run: one directory, every rank's steps, the same bits twice", function()
    if not ready() then return end
    local rs = rows(two)
    assert.equal(UPDATES, #rs)
    for i, r in ipairs(rs) do assert.equal(i * 2 * BATCH, r.agent_steps) end
    -- the ranks wrote nothing of their own: the run directory is the only new entry
    local seen = entries(dir)
    for _, n in ipairs({ "exp.lua", "two", "stdout", "stderr", "rc" }) do seen[n] = nil end
    assert.same({}, seen)
    local log = support.read_file(two .. "/train.log")
    assert.truthy(log:find("2 ranks (Open MPI", 1, true), log)
    assert.truthy(log:find("budget: total_steps = 1024 (8 updates of 2 ranks x 8 envs x 8 steps)", 1, true), log)
    -- the allreduce's share, at the end: one per optimizer step, 1 minibatch x 2 epochs x (8 + 1 warm-up) updates
    assert.truthy(log:find("note: 2 ranks: 18 allreduces of the gradient took", 1, true), log)
    -- a second run of the same seed: the same checkpoint, byte for byte
    local rc, out, err = run(2, "train exp.lua --dir again --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.equal(support.read_file(ckpt(two, UPDATES)), support.read_file(ckpt(dir .. "/again", UPDATES)))
    support.rm_rf(dir .. "/again")
  end)

  it("on a terminal, prints lines, not a bar that a rank's note lands on", function()
    if not ready() then return end
    if not sh("command -v script >/dev/null 2>&1") then return pending("script(1) not found (bsdutils)") end
    -- mpirun hands a rank a pty for stdout and a pipe for stderr, relayed apart: a note on stderr
    -- once landed on the progress bar's line ("eff 58.3%\27[Kmoonrl: note: 2 ranks: ...")
    local cfg = EXPERIMENT:gsub("console = false", "console = true, interval = 1")
    support.write_file(dir .. "/tty.lua", cfg)
    sh(string.format("cd %q && timeout 180 script -qec %q /dev/null >tty.out 2>&1", dir,
      string.format("env %s mpirun -n 2 %q train tty.lua --dir tty --no-eval", MPI_ENV, BIN)))
    local out = support.read_file(dir .. "/tty.out") or ""
    support.rm_rf(dir .. "/tty")
    assert.truthy(out:find("update 8/8", 1, true), out)
    assert.is_nil(out:find("\27[K", 1, true), out)
    for line in out:gmatch("[^\n]+") do
      assert.is_nil(line:find("%%.+moonrl: note"), line)   -- a note on a line of its own
    end
    assert.truthy(out:find("\nmoonrl: note: 2 ranks: ", 1, true), out)
  end)

  it("pools the first update's episodes as one process of 2 x E environments has them", function()
    if not ready() then return end
    -- the first rollout runs the same instances (keyed by their global
    -- index) with the same weights: the same episodes, counted once
    local rc, out, err = run(1, "train exp.lua --dir one --no-eval --set env.num_envs=" .. 2 * E, dir)
    assert.equal(0, rc, out .. err)
    local a, b = rows(two)[1], rows(dir .. "/one")[1]
    assert.is_true(a.episodes > 0)
    for _, k in ipairs({ "episodes", "deaths", "episode_return_min", "episode_return_max", "agent_steps" }) do
      assert.equal(b[k], a[k], k)
    end
    -- means: the engine sums in float32, the ranks' are pooled in float64
    for _, k in ipairs({ "episode_return_mean", "episode_length_mean", "food_per_episode", "poison_per_episode",
                         "efficiency" }) do
      assert.near(b[k], a[k], 1e-6 * math.max(1, math.abs(b[k])), k)
    end
    support.rm_rf(dir .. "/one")
  end)

  it("resumes on 1 rank from 2, on 2 from 1 (the environments afresh, said), and on 2 from 2 bit for bit", function()
    if not ready() then return end
    -- 2 -> 2: the uninterrupted run's bytes
    copy(two, dir .. "/r22")
    interrupt(dir .. "/r22", 4, UPDATES)
    local rc, out, err = run(2, "train --resume r22 --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.falsy((out .. err):find("start afresh", 1, true), out .. err)
    assert.equal(support.read_file(ckpt(two, UPDATES)), support.read_file(ckpt(dir .. "/r22", UPDATES)))

    -- 2 -> 1: 4 updates of 2 x BATCH done, the rest at BATCH per update
    copy(two, dir .. "/r21")
    interrupt(dir .. "/r21", 4, UPDATES)
    rc, out, err = run(1, "train --resume r21 --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.truthy(err:find("was written by 2 ranks of 8 environments, this run has 1", 1, true), err)
    assert.truthy(err:find("the environments start afresh from the seed", 1, true), err)
    local rs = rows(dir .. "/r21")
    assert.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, column(rs, "update"))
    assert.equal(4 * 2 * BATCH + BATCH, rs[5].agent_steps)
    assert.equal(UPDATES * 2 * BATCH, rs[12].agent_steps)
    continuous(rs, UPDATES * 2 * BATCH)

    -- 1 -> 2: a one-process run, resumed on two ranks
    rc, out, err = run(1, "train exp.lua --dir r12 --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.equal(2 * UPDATES, #rows(dir .. "/r12"))   -- one rank: BATCH per update
    interrupt(dir .. "/r12", 4, 2 * UPDATES)
    rc, out, err = run(2, "train --resume r12 --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.truthy(err:find("was written by 1 rank of 8 environments, this run has 2", 1, true), err)
    rs = rows(dir .. "/r12")
    -- 4 x BATCH done, 12 x BATCH left at 2 x BATCH per update
    assert.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, column(rs, "update"))
    assert.equal(4 * BATCH + 2 * BATCH, rs[5].agent_steps)
    assert.equal(UPDATES * 2 * BATCH, rs[10].agent_steps)
    continuous(rs, UPDATES * 2 * BATCH)
    continuous(rows(two), UPDATES * 2 * BATCH)   -- and the uninterrupted run of 2 ranks
  end)
end)

-- Every head and observation the policy takes, on 2 ranks: a box (pendulum's Gaussian head), a
-- multi-discrete action (dials) and a float image (catch), each the same bits twice, its first
-- update's episodes those of one process of 2 x E environments, and resumed on 1 rank.
describe("moonrl train under mpirun -n 2, for each kind of space", function()
  it("trains a box, a multi-discrete action and a float image as one process of 2 x E environments does",
    function()
    if not ready() then return end
    local dir = support.tmpdir()
    local common = " --set threads=1 --set seed=5 --set ppo.rollout_steps=8 --set warmup.updates=0 " ..
      "--set log.console=false --set log.tensorboard=false --set log.checkpoint_interval=1 --no-eval"
    for _, c in ipairs({ { "pendulum", " --set env.max_episode_steps=6" }, { "dials", " --set env.max_episode_steps=5" },
                         { "catch", " --set env.grid_size=5" } }) do
      local env, args = c[1], c[2] .. common
      local rc, out, err = run(2, string.format("train %s --dir %s2 --set env.num_envs=%d --set total_steps=%d%s",
        env, env, E, 4 * 2 * E * 8, args), dir)
      assert.equal(0, rc, env .. ": " .. out .. err)
      local rs = rows(dir .. "/" .. env .. "2")
      assert.equal(4, #rs, env)
      assert.equal(4 * 2 * E * 8, rs[4].agent_steps, env)
      rc, out, err = run(2, string.format("train %s --dir %sb --set env.num_envs=%d --set total_steps=%d%s",
        env, env, E, 4 * 2 * E * 8, args), dir)
      assert.equal(0, rc, env .. ": " .. out .. err)
      assert.equal(support.read_file(ckpt(dir .. "/" .. env .. "2", 4)), support.read_file(ckpt(dir .. "/" .. env ..
        "b", 4)), env .. ": the same seed twice, another checkpoint")
      -- the first rollout: the same instances (keyed by their global index), the same weights
      rc, out, err = run(1, string.format("train %s --dir %s1 --set env.num_envs=%d --set total_steps=%d%s",
        env, env, 2 * E, 2 * E * 8, args), dir)
      assert.equal(0, rc, env .. ": " .. out .. err)
      local a, b = rs[1], rows(dir .. "/" .. env .. "1")[1]
      assert.is_true(a.episodes > 0, env)
      for _, k in ipairs({ "episodes", "deaths", "episode_return_min", "episode_return_max", "agent_steps" }) do
        assert.equal(b[k], a[k], env .. ": " .. k)
      end
      -- and on from there on 1 rank (the environments afresh)
      rc, out, err = run(1, string.format("train --resume %s2 --set total_steps=%d%s", env,
        5 * 2 * E * 8, args), dir)
      assert.equal(0, rc, env .. ": " .. out .. err)
    end
    support.rm_rf(dir)
  end)
end)

describe("a run of 2 ranks in the background", function()
  local dir, proc
  before_each(function() dir = support.have_bin and have_mpirun() and support.tmpdir() or nil end)
  after_each(function()
    if proc and not proc.done then proc.kill("sigkill") end
    if dir then support.rm_rf(dir) end
  end)

  -- A long run (a total it does not reach in the test), checkpoints every 4.
  local function start(name)
    support.write_file(dir .. "/long.lua", EXPERIMENT:gsub("total_steps = %d+", "total_steps = 100000000")
      :gsub("checkpoint_interval = 1", "checkpoint_interval = 4"))
    proc = support.spawn("mpirun", dir, string.format("-n 2 %q train long.lua --dir %s --no-eval", BIN, name),
      { env = MPI_ENV, wait = 60000 })
    return dir .. "/" .. name
  end

  local function wait_rows(run_dir, n)
    assert(support.wait_for(function() return #rows(run_dir) >= n end, 60000),
      "fewer than " .. n .. " updates:\n" .. proc.out() .. proc.err())
  end

  it("takes a moonrl ctl set on both ranks from the same update", function()
    if not ready() then return end
    local rd = start("live")
    wait_rows(rd, 3)
    local rc, out, err = support.moonrl("ctl live set ppo.lr=0.00012345", dir)
    assert.equal(0, rc, out .. err)
    local _, events = rows(rd)
    assert(support.wait_for(function()
      _, events = rows(rd)
      return #events > 0
    end, 20000), "no change event in metrics.jsonl")
    local from = events[1].update   -- the update it is in force from (moonrl.run.changes)
    assert.equal("ppo.lr", events[1].key)
    -- past the next check of the ranks' parameters (every 8 updates)
    wait_rows(rd, from + 10)
    rc, out, err = support.moonrl("ctl live stop", dir)
    assert.equal(0, rc, out .. err)
    assert.equal(0, proc.wait(), proc.out() .. proc.err())
    local rs = rows(rd)
    for _, r in ipairs(rs) do
      -- the ranks' metrics disagreeing on lr, or their parameters, would have failed the run
      if r.update >= from then assert.equal(0.00012345, r.lr, "update " .. r.update) else
        assert.are_not.equal(0.00012345, r.lr) end
    end
    assert.truthy(support.read_file(rd .. "/train.log"):find("stopped", 1, true))
  end)

  it("stops on SIGTERM to mpirun as one process does: the update in progress, a final checkpoint", function()
    if not ready() then return end
    local rd = start("term")
    wait_rows(rd, 3)
    proc.kill("sigterm")
    proc.wait(30000)
    local rs = rows(rd)
    local last = rs[#rs].update
    assert.truthy(support.read_file(rd .. "/train.log"):find("finished: stopped", 1, true),
      support.read_file(rd .. "/train.log"))
    assert.truthy(uv.fs_stat(ckpt(rd, last)), "no final checkpoint at update " .. last)
  end)

  it("ends the job when a rank is killed, naming it, and resumes from its newest checkpoint", function()
    if not ready() then return end
    local rd = start("killed")
    wait_rows(rd, 9)
    -- rank 1: the process whose launcher variables say so
    local p = io.popen("for p in $(pgrep -f 'moonrl.*train long.lua'); do " ..
      "tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && echo $p; done")
    local pid = tonumber(p:read("*l") or "")
    p:close()
    assert(pid, "rank 1's process not found")
    local t0 = uv.hrtime()
    uv.kill(pid, "sigkill")
    local code = proc.wait(30000)
    assert.are_not.equal(0, code)
    assert.is_true((uv.hrtime() - t0) / 1e9 < 20, "the job took more than 20 s to end")
    assert.truthy((proc.out() .. proc.err()):find("rank 1", 1, true), proc.out() .. proc.err())
    -- its newest checkpoint is whole: the run resumes from it
    local rc, out, err = run(2, "train --resume killed --no-eval --set total_steps=" ..
      (#rows(rd) + 2) * 2 * BATCH, dir)
    assert.equal(0, rc, out .. err)
    assert.truthy(out:find("since resuming from update", 1, true), out)
  end)
end)

describe("a sweep whose trials have 2 ranks", function()
  it("starts each trial with mpirun on the local executor: one run of 2 ranks per trial", function()
    if not ready() then return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    support.write_file(dir .. "/sweep.lua", [[
      local moonrl = require "moonrl"
      local s = moonrl.sweep{ base = "exp.lua", dir = "sw", ranks = 2, parallel = 1, poll_ms = 50, console = false,
        space = { ["ppo.lr"] = moonrl.grid{ 1e-3, 3e-4 } } }
      local r = s:wait()
      for _, t in ipairs(r.results) do print(t.label .. " " .. t.status) end
    ]])
    local rc, out, err = support.moonrl("run sweep.lua", dir, { env = MPI_ENV })
    assert.equal(0, rc, out .. err)
    assert.truthy(out:find("trial-001 done", 1, true), out .. err)
    assert.truthy(out:find("trial-002 done", 1, true), out .. err)
    for _, t in ipairs({ "trial-001", "trial-002" }) do
      local td = dir .. "/sw/" .. t
      assert.truthy(support.read_file(td .. "/train.log"):find("2 ranks (Open MPI", 1, true), t)
      local rs = rows(td)
      assert.equal(UPDATES, #rs, t)
      assert.equal(UPDATES * 2 * BATCH, rs[#rs].agent_steps, t)
    end
    support.rm_rf(dir)
  end)
end)

describe("moonrl.train{ranks = 2} from a script", function()
  it("is one run of 2 ranks through mpirun, awaited, steered and hooked like a run in the script's process", function()
    if not ready() then return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    local rc0, out0, err0 = run(2, "train exp.lua --dir cli --no-eval", dir)
    assert(rc0 == 0, out0 .. err0)
    support.write_file(dir .. "/script.lua", [[
      local moonrl = require "moonrl"
      local seen, ckpts, finished = {}, {}, nil
      local run = moonrl.train("exp.lua", { ranks = 2, dir = "lua2", hooks = {
        on_update = function(m, r) seen[#seen + 1] = m.update .. ":" .. m.agent_steps end,
        on_checkpoint = function(path) ckpts[#ckpts + 1] = path end,
        on_finish = function(s) finished = s.status end,
      } })
      local s = run:wait()
      print("summary " .. s.status .. " " .. s.updates .. " " .. s.agent_steps .. " " .. s.ranks .. " " .. s.exit_code)
      print("hooks " .. table.concat(seen, ",") .. " checkpoints " .. #ckpts .. " finish " .. tostring(finished))

      -- steered: set from a coroutine (the answer awaited), pause, checkpoint, stop with a reason
      local r = moonrl.train("exp.lua", { ranks = 2, dir = "steer", sets = { "total_steps=1000000" } })
      while not r:metrics() do moonrl.wait(0.02) end
      print("set " .. tostring(r:set("ppo.lr", 1e-3, "script")))
      local ok, err = r:set("ppo.lr", "fast")
      print("bad set " .. tostring(ok) .. " " .. err)
      print("pause " .. tostring(r:pause()) .. " " .. r.status)
      print("checkpoint " .. tostring(r:checkpoint()))
      print("resume " .. tostring(r:resume()) .. " " .. r.status)
      r:stop({ reason = "seen enough" })
      local s2 = r:wait()
      print("stopped " .. s2.status .. " " .. tostring(s2.stop_reason) .. " " .. s2.ranks .. " lr " .. s2.metrics.lr)

      -- resumed on 2 ranks, to its end
      local r3 = moonrl.train({ resume = "steer", total_steps = (s2.updates + 2) * 2 * ]] .. BATCH .. [[ }, { ranks = 2 })
      local s3 = r3:wait()
      print("resumed " .. s3.status .. " " .. tostring(s3.resumed_from) .. " " .. s3.updates)
    ]])
    local rc, out, err = support.moonrl("run script.lua", dir, { env = MPI_ENV })
    assert.equal(0, rc, out .. err)
    local hooks = {}
    for u = 1, UPDATES do hooks[#hooks + 1] = u .. ":" .. u * 2 * BATCH end
    assert.truthy(out:find("summary done " .. UPDATES .. " " .. UPDATES * 2 * BATCH .. " 2 0", 1, true), out .. err)
    assert.truthy(out:find("hooks " .. table.concat(hooks, ",") .. " checkpoints " .. UPDATES .. " finish done", 1, true),
      out .. err)   -- checkpoint_interval = 1
    -- the same run as `mpirun -n 2 moonrl train`: the same bits
    local a, b = rows(dir .. "/cli"), rows(dir .. "/lua2")
    assert.same(column(a, "loss_policy"), column(b, "loss_policy"))
    assert.same(column(a, "episode_return_mean"), column(b, "episode_return_mean"))
    assert.truthy(support.read_file(dir .. "/lua2/train.log"):find("2 ranks (Open MPI", 1, true))
    assert.is_nil(entries(dir .. "/lua2")[".launch.lua"])
    assert.truthy(entries(dir .. "/lua2")["summary.json"])

    assert.truthy(out:find("set true", 1, true), out .. err)
    assert.truthy(out:find('bad set nil ppo.lr: expected a number or schedule, got string "fast"', 1, true), out .. err)
    assert.truthy(out:find("pause true paused", 1, true), out .. err)
    assert.truthy(out:find("checkpoint " .. "steer/checkpoints/update_", 1, true), out .. err)
    assert.truthy(out:find("resume true running", 1, true), out .. err)
    assert.truthy(out:find("stopped stopped seen enough 2 lr 0.001", 1, true), out .. err)
    local changes = support.read_file(dir .. "/steer/changes.lua")
    assert.truthy(changes:find('key = "ppo.lr", value = 0.001', 1, true), changes)
    assert.truthy(changes:find('source = "script"', 1, true), changes)
    local resumed_from, updates = out:match("resumed done (%d+) (%d+)")
    assert.truthy(resumed_from, out .. err)
    assert.equal(tonumber(resumed_from) + 2, tonumber(updates))
    support.rm_rf(dir)
  end)

  it("ends with status failed and says how to resume when a rank dies", function()
    if not ready() then return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    support.write_file(dir .. "/script.lua", [[
      local moonrl = require "moonrl"
      local r = moonrl.train("exp.lua", { ranks = 2, dir = "dies", console = false, sets = { "debug.crash_at_update=3" } })
      local s = r:wait()
      print("ended " .. s.status .. " | " .. s.error .. " | " .. tostring(s.checkpoint))
    ]])
    local rc, out, err = support.moonrl("run script.lua", dir, { env = MPI_ENV })
    assert.equal(0, rc, out .. err)
    assert.truthy(out:find("ended failed | the run's 2 ranks ended (mpirun: ", 1, true), out .. err)
    assert.truthy(out:find('moonrl.train{resume = "dies", ranks = 2} continues from its newest checkpoint', 1, true), out .. err)
    -- debug.crash_at_update kills rank 0 once update 3's metrics are handled, before its checkpoint
    assert.truthy(out:find("dies/checkpoints/update_0000002.mrck", 1, true), out .. err)
    assert.truthy(support.read_file(dir .. "/dies/output.log"):find("crash_at_update", 1, true))
    support.rm_rf(dir)
  end)

  it("trains a Lua environment (env.lua) on 2 ranks: the first update's episodes as one process of 2 x E has them",
    function()
    if not ready() then return end
    local dir = support.tmpdir()
    -- the built-in Lua cartpole; each rank's threads load its text, sent by rank 0
    support.write_file(dir .. "/lua.lua", [[
return {
  name = "ranks_lua", device = "cpu", threads = 1, seed = 5, hardware = "ci", level = "basic",
  total_steps = ]] .. 4 * 2 * E * 32 .. [[, warmup = { updates = 0 },
  env = { lua = "cartpole", num_envs = ]] .. E .. [[ },
  policy = { mlp_widths = { 8 }, critic_hidden = 8, popart = false },
  ppo = { rollout_steps = 32, epochs = 1 },   -- 32 steps: episodes end within the first update
  log = { console = false, tensorboard = false, checkpoint_interval = 1, checkpoint_keep = 0 },
}
]])
    local rc, out, err = run(2, "train lua.lua --dir two --no-eval", dir)
    assert.equal(0, rc, out .. err)
    rc, out, err = run(1, "train lua.lua --dir one --no-eval --set env.num_envs=" .. 2 * E, dir)
    assert.equal(0, rc, out .. err)
    local two, one = rows(dir .. "/two"), rows(dir .. "/one")
    assert.equal(4, #two)
    assert.equal(4 * 2 * E * 32, two[4].agent_steps)   -- both ranks' steps counted
    local a, b = two[1], one[1]
    assert.is_true(a.episodes > 0)
    for _, k in ipairs({ "episodes", "deaths", "episode_return_min", "episode_return_max", "agent_steps" }) do
      assert.equal(b[k], a[k], k)
    end
    assert.near(b.episode_length_mean, a.episode_length_mean, 1e-6 * b.episode_length_mean)
    -- and 2 -> 2 from its checkpoint: the environments' fields come back on each rank, bit for bit
    copy(dir .. "/two", dir .. "/r")
    interrupt(dir .. "/r", 2, 4)
    rc, out, err = run(2, "train --resume r --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.equal(support.read_file(ckpt(dir .. "/two", 4)), support.read_file(ckpt(dir .. "/r", 4)))
    support.rm_rf(dir)
  end)

  it("refuses a count of ranks that is no whole number >= 1, and ranks given twice", function()
    if not support.have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    support.write_file(dir .. "/script.lua", [[
      local moonrl = require "moonrl"
      for _, bad in ipairs({ 0, 1.5, "2", -1 }) do
        local ok, err = pcall(moonrl.train, { ranks = bad, total_steps = 64 })
        print(tostring(ok) .. " " .. err)
      end
      print(select(2, pcall(moonrl.train, { ranks = 2 }, { ranks = 2 })))
    ]])
    local rc, out, err = support.moonrl("run script.lua", dir)
    assert.equal(0, rc, out .. err)
    for _, got in ipairs({ "got 0", "got 1.5", 'got "2" (a string)', "got -1" }) do
      assert.truthy(out:find("false moonrl.train: ranks: expected a whole number of processes, 1 or more (mpirun -n), " .. got,
        1, true), got .. "\n" .. out .. err)
    end
    assert.truthy(out:find("ranks is given twice (in the config table and in opts)", 1, true), out .. err)
    support.rm_rf(dir)
  end)
end)

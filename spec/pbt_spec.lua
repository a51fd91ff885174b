-- Population-based training (moonrl.sweep.pbt) with the binary: a real
-- population of 3 members on a tiny network, each a `moonrl train` child
-- process steered through its control socket. Checked: members in the
-- bottom copy a member of the top while they run (ctl adopt: their train.log
-- names the copied checkpoint, kept in DIR/pbt/) and change their explored
-- keys to the donor's times one of the factors (changes.lua, source "pbt:
-- explore"); every exploit is in results.jsonl; a member SIGKILLed is resumed
-- from its checkpoint and a driver SIGKILLed and run again follows the
-- members and finishes with the records it had; `moonrl sweep lineage` prints the winner's
-- history and writes lineage.lua, which trains as one plain run with the
-- same keys at the same updates; bad options are refused before anything
-- starts.

local support = require("support")
local json = require("moonrl.formats.json")

-- 8 envs x 32 steps an update: the members train long enough for the decisions. With 8 steps
-- a member's 300 updates took about half a second (2026-11-27), less than the exploits,
-- checkpoint copies and evaluations between them: at times no exploit happened at all.
local EXPERIMENT = [[
return {
  name = "pbt", device = "cpu", threads = 1, seed = 11, hardware = "ci", level = "basic",
  total_steps = 300 * 8 * 32, warmup = { updates = 0 },
  env = { num_envs = 8, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 32, epochs = 2, lr = 3e-4 },
  log = { console = false, tensorboard = false, checkpoint_interval = 50, checkpoint_keep = 2 },
}
]]

local function ready()
  if not support.have_bin then pending("no binary at " .. support.BIN .. " (build it: make build)") return false end
  return true
end

local function events(dir)
  local out = {}
  for _, line in ipairs(support.lines(support.read_file(dir .. "/results.jsonl") or "")) do
    local o = json.decode(line)
    if type(o) == "table" then out[#out + 1] = o end
  end
  return out
end

describe("moonrl.sweep{method = \"pbt\"} (the binary)", function()
  it("exploits and explores members while they train, records it, and replays the winner's lineage as one run", function()
    if not ready() then return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    support.write_file(dir .. "/pbt.lua", [[
      local moonrl = require "moonrl"
      local s = moonrl.sweep{ base = "exp.lua", dir = "sw", method = "pbt", population = 3, poll_ms = 20,
        metric = "episode_return_mean", smooth = 4, console = true,
        space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 3e-3) },
        pbt = { interval = 25, fraction = 0.34, test = "none", explore = { ["ppo.lr"] = "perturb", ["ppo.vf_coef"] = "perturb" } } }
      local r = s:wait()
      for _, t in ipairs(r.results) do print("result " .. t.label .. " " .. t.status) end
    ]])
    local rc, out, err = support.moonrl("run pbt.lua", dir)
    assert.equal(0, rc, out .. err)
    for i = 1, 3 do assert.truthy(out:find(string.format("result trial-%03d done", i), 1, true), out .. err) end
    local sw = dir .. "/sw"
    local exploits, starts = {}, {}
    for _, e in ipairs(events(sw)) do
      if e.event == "exploit" then exploits[#exploits + 1] = e end
      if e.event == "start" then starts[e.trial] = e end
    end
    assert.is_true(#exploits >= 1, "no exploit happened:\n" .. out .. err)
    local base_vf, explored = 0.5, 0
    for _, e in ipairs(exploits) do
      explored = explored + (e.explore_error and 0 or 1)
      local label = string.format("trial-%03d", e.trial)
      assert.are_not.equal(e.trial, e.from)
      -- the copied checkpoint is kept, and the member took it while running
      assert.truthy(support.read_file(dir .. "/" .. e.checkpoint), e.checkpoint)
      local log = support.read_file(sw .. "/" .. label .. "/train.log")
      assert.truthy(log:find("update " .. e.update .. ": the weights, Adam moments and PopArt of ", 1, true), log)
      assert.truthy(log:find(e.checkpoint:match("[^/]+$"), 1, true), log)
      -- explore: each key the donor's times one of the factors (lr kept in its space's range)
      for _, k in ipairs(e.explore_error and {} or { "ppo.lr", "ppo.vf_coef" }) do
        local old, new = e.donor[k], e.new[k]
        assert.is_number(old, k)
        local r = new / old
        local in_range = k == "ppo.lr" and (math.abs(new - 1e-4) < 1e-12 or math.abs(new - 3e-3) < 1e-12)
        assert.is_true(math.abs(r - 0.8) < 1e-9 or math.abs(r - 1.2) < 1e-9 or in_range, k .. ": " .. old .. " -> " .. new)
      end
      if not e.explore_error then
        local changes = support.read_file(sw .. "/" .. label .. "/changes.lua")
        assert.truthy(changes:find('key = "ppo.vf_coef", value = ' .. require("moonrl.util").fmt_number(e.new["ppo.vf_coef"]),
          1, true), changes)
        assert.truthy(changes:find('source = "pbt: explore"', 1, true), changes)
      end
    end
    assert.is_true(explored >= 1, "no exploit changed its keys:\n" .. out .. err)
    -- the donor's keys each exploit started from: its point, then what its own exploits set, in order
    local now = {}
    for trial, st in pairs(starts) do now[trial] = { ["ppo.lr"] = st.params["ppo.lr"], ["ppo.vf_coef"] = base_vf } end
    for _, e in ipairs(exploits) do
      for _, k in ipairs({ "ppo.lr", "ppo.vf_coef" }) do
        assert.is_true(math.abs(now[e.from][k] - e.donor[k]) <= 1e-12 * math.abs(e.donor[k]), k .. " of the donor")
        assert.is_true(math.abs(now[e.trial][k] - e.old[k]) <= 1e-12 * math.abs(e.old[k]), k .. " of the member")
      end
      for k, v in pairs(e.new) do now[e.trial][k] = v end
    end
    -- the first exploit of a member starts from its own point (vf_coef the base's)
    local firsts = {}
    for _, e in ipairs(exploits) do if not firsts[e.trial] then firsts[e.trial] = e end end
    for trial, e in pairs(firsts) do
      assert.equal(base_vf, e.old["ppo.vf_coef"])
      assert.equal(starts[trial].params["ppo.lr"], e.old["ppo.lr"])
    end

    -- the lineage: printed, and as one plain run
    local lrc, lout, lerr = support.moonrl("sweep lineage sw", dir)
    assert.equal(0, lrc, lout .. lerr)
    assert.truthy(lout:find("the best member is trial%-00%d"), lout)
    assert.truthy(lout:find("replay as one plain run: moonrl train sw/lineage.lua", 1, true), lout)
    local segs = {}
    for a, b, trial in lout:gmatch("updates%s+(%d+)%-(%d+)%s+trial%-(%d+)") do
      segs[#segs + 1] = { a = tonumber(a), b = tonumber(b), trial = tonumber(trial) }
    end
    assert.is_true(#segs >= 1, lout)
    assert.equal(0, segs[1].a)
    for i = 2, #segs do assert.equal(segs[i - 1].b, segs[i].a, lout) end
    local prc, pout, perr = support.moonrl("train sw/lineage.lua --dir replay --no-eval", dir)
    assert.equal(0, prc, pout .. perr)
    local rows = 0
    for _, line in ipairs(support.lines(support.read_file(dir .. "/replay/metrics.jsonl"))) do
      if not line:find('"event"', 1, true) then rows = rows + 1 end
    end
    assert.equal(segs[#segs].b, rows)
    local rchanges = support.read_file(dir .. "/replay/changes.lua")
    for i = 2, #segs do
      assert.truthy(rchanges:find("update = " .. (segs[i].a + 1) .. ', key = "ppo.lr"', 1, true), rchanges)
    end

    -- the same sweep again with another interval: refused, the difference shown
    support.write_file(dir .. "/pbt.lua", (support.read_file(dir .. "/pbt.lua"):gsub("interval = 25", "interval = 30")))
    local xrc, xout, xerr = support.moonrl("run pbt.lua", dir)
    assert.are_not.equal(0, xrc)
    assert.truthy((xout .. xerr):find("pbt: interval=25 fraction=0.34 factors=0.8,1.2 explore=ppo.lr:perturb,ppo.vf_coef:perturb " ..
      "before, interval=30 fraction=0.34", 1, true), xout .. xerr)
    support.rm_rf(dir)
  end)

  it("survives a SIGKILL of a member (resumed from its checkpoint) and of the driver (a re-run follows the members and goes on)",
    function()
    if not ready() then return end
    local uv = support.uv
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", (EXPERIMENT:gsub("total_steps = 300", "total_steps = 1500")))
    support.write_file(dir .. "/pbt.lua", [[
      local moonrl = require "moonrl"
      local s = moonrl.sweep{ base = "exp.lua", dir = "sw", method = "pbt", population = 4, poll_ms = 20,
        metric = "episode_return_mean", smooth = 4, console = true,
        space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 3e-3) },
        pbt = { interval = 25, test = "none", explore = { ["ppo.lr"] = "perturb" } } }
      local r = s:wait()
      for _, t in ipairs(r.results) do print("result " .. t.label .. " " .. t.status .. " " .. t.steps) end
    ]])
    local sw = dir .. "/sw"
    local function lock_pid(i)
      return tonumber((support.read_file(string.format("%s/trial-%03d/.lock", sw, i)) or ""):match("^(%d+)"))
    end
    local function count(kind)
      local n = 0
      for _, e in ipairs(events(sw)) do if e.event == kind then n = n + 1 end end
      return n
    end
    local p = support.spawn(support.BIN, dir, "run pbt.lua", { wait = 120000 })
    -- a member killed as the OOM killer would, after the population has exploited once
    assert.is_true(support.wait_for(function()
      return p.done or (count("exploit") >= 1 and lock_pid(2) ~= nil and
        (table.concat(support.files(sw .. "/trial-002/checkpoints"), "\n") .. "\n"):find("%.mrck\n") ~= nil)
    end, 60000) and not p.done, "no exploit before the members ended:\n" .. p.out() .. p.err())
    local victim = lock_pid(2)
    uv.kill(victim, "sigkill")
    assert.is_true(support.wait_for(function() return p.done or count("restart") >= 1 end, 30000) and not p.done,
      p.out() .. p.err())
    assert.truthy(p.out():find("trial-002: pbt: the member died (killed by signal 9 (SIGKILL))", 1, true), p.out())
    -- the driver killed, with every member held still so that they surely run at the re-run
    assert.is_true(support.wait_for(function()
      return p.done or (lock_pid(1) and lock_pid(2) and lock_pid(3) and lock_pid(4) and lock_pid(2) ~= victim)
    end, 30000) and not p.done, p.out() .. p.err())
    local pids = {}
    for i = 1, 4 do pids[i] = lock_pid(i) uv.kill(pids[i], "sigstop") end
    p.kill("sigkill")
    p.wait()
    local before = support.read_file(sw .. "/results.jsonl")
    before = before:sub(1, #before - #(before:match("[^\n]*$")))   -- a line cut short by the kill is not a record

    local q = support.spawn(support.BIN, dir, "run pbt.lua", { wait = 180000 })
    local followed = support.wait_for(function()
      if q.done then return true end
      for i = 1, 4 do
        if not q.out():find(string.format("trial-%03d: following pid %d again", i, pids[i]), 1, true) then return false end
      end
      return true
    end, 60000)
    for i = 1, 4 do uv.kill(pids[i], "sigcont") end
    assert.is_true(followed and not q.done, q.out() .. q.err())
    assert.equal(0, q.wait(), q.out() .. q.err())
    local out = q.out()
    for i = 1, 4 do
      assert.truthy(out:find(string.format("result trial-%03d done %d", i, 1500 * 256), 1, true), out .. q.err())
    end
    -- the records: the first run's, kept as they were, then the re-run's
    local after = support.read_file(sw .. "/results.jsonl")
    assert.equal(before, after:sub(1, #before))
    local restarts, per_trial = {}, {}
    for _, e in ipairs(events(sw)) do
      if e.event == "restart" then restarts[#restarts + 1] = e end
      if e.event == nil then per_trial[e.trial] = (per_trial[e.trial] or 0) + 1 end
    end
    assert.equal(1, #restarts)
    assert.equal(2, restarts[1].trial)
    assert.equal("killed by signal 9 (SIGKILL)", restarts[1].error)
    for i = 1, 4 do assert.equal(1, per_trial[i], "trial " .. i .. " has one result") end
    -- every member trained each update once, to its budget
    for i = 1, 4 do
      local seen, n = {}, 0
      for _, line in ipairs(support.lines(support.read_file(string.format("%s/trial-%03d/metrics.jsonl", sw, i)))) do
        local m = json.decode(line)
        if m and m.event == nil then
          assert.is_nil(seen[m.update], "trial " .. i .. ": update " .. tostring(m.update) .. " twice")
          seen[m.update], n = true, n + 1
        end
      end
      assert.is_true(seen[1500], "trial " .. i)
    end
    local lrc, lout, lerr = support.moonrl("sweep lineage sw", dir)
    assert.equal(0, lrc, lout .. lerr)
    support.rm_rf(dir)
  end)

  it("ranks members by an evaluation (metric = \"eval.<key>\"): each decision evaluates a checkpoint of the member", function()
    if not ready() then return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", (EXPERIMENT:gsub("total_steps = 300", "total_steps = 600")
      :gsub("level = \"basic\",", "level = \"basic\", eval = { num_envs = 8, steps = 64 },")))
    support.write_file(dir .. "/pbt.lua", [[
      local moonrl = require "moonrl"
      local s = moonrl.sweep{ base = "exp.lua", dir = "sw", method = "pbt", population = 2, poll_ms = 20,
        metric = "eval.energy_per_1k", console = true,
        space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 3e-3) },
        pbt = { interval = 100, fraction = 0.5, test = "none", explore = { ["ppo.lr"] = "perturb" } } }
      local r = s:wait()
      for _, t in ipairs(r.results) do print("result " .. t.label .. " " .. t.status .. " " .. tostring(t.value)) end
    ]])
    local rc, out, err = support.moonrl("run pbt.lua", dir)
    assert.equal(0, rc, out .. err)
    local sw = dir .. "/sw"
    local evals, exploits = {}, {}
    for _, e in ipairs(events(sw)) do
      if e.event == "pbt_eval" then
        evals[#evals + 1] = e
        -- the value is that checkpoint's evaluation, as moonrl eval wrote it
        local name = e.checkpoint:match("([^/]+)%.mrck$")
        local doc = json.decode(support.read_file(string.format("%s/pbt/eval/trial-%03d-%s/eval.json", sw, e.trial, name)))
        assert.equal(doc.results[1].point.energy_per_1k, e.value)
        assert.equal(64, doc.results[1].agent_steps / 8)
      elseif e.event == "exploit" then
        exploits[#exploits + 1] = e
      end
    end
    assert.is_true(#evals >= 2, out .. err)
    assert.is_true(#exploits >= 1, out .. err)
    -- the exploit's values are evaluations it was decided on: one of the donor's
    -- (or the value it carried from a copy of its own)
    local had = { {}, {} }
    for _, e in ipairs(events(sw)) do
      if e.event == "pbt_eval" then had[e.trial][e.value] = true end
      if e.event == "exploit" then
        assert.is_true(had[e.from][e.donor_value], "donor value " .. tostring(e.donor_value))
        assert.is_true(had[e.trial][e.value], "member value " .. tostring(e.value))
        assert.is_true(e.donor_value >= e.value)
        had[e.trial][e.donor_value] = true
      end
    end
    -- the results: each member's own final evaluation
    for i = 1, 2 do
      assert.truthy(out:find(string.format("result trial%%-%03d done %%-?%%d", i)), out)
    end
    support.rm_rf(dir)
  end)

  it("copies only on a measured difference (pbt.test = \"welch\"), and PB2 chooses the copy's keys", function()
    if not ready() then return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", (EXPERIMENT:gsub("total_steps = 300 %* 8 %* 32", "total_steps = 150 * 8 * 32")))
    -- the metric: the same constant for every member (no difference to measure), or the member's
    -- learning rate (a difference with no noise: measured at once)
    support.write_file(dir .. "/pbt.lua", [[
      local moonrl = require "moonrl"
      local case = ...
      local metric = case == "same" and function() return 1 end or function(rec) return rec.lr end
      local s = moonrl.sweep{ base = "exp.lua", dir = case, method = "pbt", population = 3, poll_ms = 20,
        metric = metric, smooth = 4, console = true,
        space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 3e-3), ["ppo.clip"] = moonrl.uniform(0.1, 0.3) },
        pbt = { interval = 20, explore = "pb2" } }
      s:wait()
    ]])
    local rc, out, err = support.moonrl("run pbt.lua same", dir)
    assert.equal(0, rc, out .. err)
    local held, copied = 0, 0
    for _, e in ipairs(events(dir .. "/same")) do
      if e.event == "exploit" then copied = copied + 1 end
      if e.event == "exploit_held" then
        held = held + 1
        assert.equal(1, e.p)   -- equal constants: no evidence at all
      end
    end
    assert.equal(0, copied, out)
    assert.is_true(held >= 1, "no decision was held back:\n" .. out .. err)
    rc, out, err = support.moonrl("run pbt.lua lr", dir)
    assert.equal(0, rc, out .. err)
    local exploits = {}
    for _, e in ipairs(events(dir .. "/lr")) do if e.event == "exploit" then exploits[#exploits + 1] = e end end
    assert.is_true(#exploits >= 1, "no exploit happened:\n" .. out .. err)
    for _, e in ipairs(exploits) do
      -- PB2's keys: inside the space, not the donor's times a factor
      local lr, clip = e.new["ppo.lr"], e.new["ppo.clip"]
      assert.is_true(lr >= 1e-4 and lr <= 3e-3, tostring(lr))
      assert.is_true(clip >= 0.1 and clip <= 0.3, tostring(clip))
      local r = lr / e.donor["ppo.lr"]
      assert.is_false(math.abs(r - 0.8) < 1e-9 or math.abs(r - 1.2) < 1e-9, "a perturbation, not PB2's choice")
      assert.truthy(e.donor_value > e.value, "copied a worse donor")
    end
    local info = json.decode(support.read_file(dir .. "/lr/sweep.json"))
    assert.truthy(info.definition.pbt:find("explore=ppo.clip:pb2,ppo.lr:pb2 test=welch alpha=0.05 window=20", 1, true),
      info.definition.pbt)
    support.rm_rf(dir)
  end)

  it("pbt.sync: every member pauses at the same agent-steps, and copies happen there, whatever their batches", function()
    if not ready() then return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", (EXPERIMENT:gsub("total_steps = 300 %* 8 %* 32", "total_steps = 60 * 8 * 32")))
    -- the metric: the member's learning rate (noise-free), so the bottom copies at every decision
    support.write_file(dir .. "/pbt.lua", [[
      local moonrl = require "moonrl"
      local s = moonrl.sweep{ base = "exp.lua", dir = "s", method = "pbt", population = 3, poll_ms = 20, seed = 3,
        metric = function(rec) return rec.lr end, smooth = 1, console = true,
        space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 3e-3), ["env.num_envs"] = moonrl.choice{ 2, 4, 8 } },
        pbt = { interval = 10, explore = "pb2", test = "none", sync = true } }
      s:wait()
    ]])
    local rc, out, err = support.moonrl("run pbt.lua", dir)
    assert.equal(0, rc, out .. err)
    local batch, exploits = {}, {}
    for _, e in ipairs(events(dir .. "/s")) do
      if e.event == "start" then batch[e.trial] = e.params["env.num_envs"] * 32 end
      if e.event == "exploit" then exploits[#exploits + 1] = e end
    end
    local every = 0
    for _, b in pairs(batch) do every = math.max(every, 10 * b) end
    assert.is_true(#exploits >= 3, "fewer copies than decisions:\n" .. out .. err)
    local points = {}
    for _, e in ipairs(exploits) do
      -- the member took the weights at the update that reached the point (in force from the
      -- next), the donor's checkpoint was written there too: both paused at the same count
      local at, donor_at = (e.update - 1) * batch[e.trial], e.donor_update * batch[e.from]
      assert.equal(donor_at, at, "member and donor at different agent-steps:\n" .. out)
      assert.equal(0, at % every, at .. " is no decision point (every " .. every .. ")")
      points[at] = true
    end
    assert.is_true(next(points, next(points)) ~= nil, "every copy at one decision point:\n" .. out)
    local info = json.decode(support.read_file(dir .. "/s/sweep.json"))
    assert.truthy(info.definition.pbt:find(" sync", 1, true), info.definition.pbt)
    -- every member's train.log: paused at each mark, resumed
    local log = support.read_file(dir .. "/s/trial-001/train.log")
    assert.truthy(log:find("the mark at " .. every .. ")", 1, true), log)
    -- the lineage of members with other batches replays as one run of the root's batch, for the
    -- same agent-steps; the batch (not hot) stays the root's, the explored keys change
    local lrc, lout, lerr = support.moonrl("sweep lineage s", dir)
    assert.equal(0, lrc, lout .. lerr)
    local prc, pout, perr = support.moonrl("train s/lineage.lua --dir replay --no-eval", dir)
    assert.equal(0, prc, pout .. perr .. support.read_file(dir .. "/s/lineage.lua"))
    local last
    for _, line in ipairs(support.lines(support.read_file(dir .. "/replay/metrics.jsonl"))) do
      local o = json.decode(line)
      if type(o) == "table" and o.agent_steps then last = o end
    end
    assert.equal(60 * 8 * 32, last.agent_steps)
    assert.is_nil(support.read_file(dir .. "/s/lineage.lua"):find('%["env.num_envs"%] ='), "a cold key among the changes")
    support.rm_rf(dir)
  end)

  it("refuses bad PBT options before anything starts, naming what is accepted", function()
    if not ready() then return end
    local dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    support.write_file(dir .. "/bad.lua", [[
      local moonrl = require "moonrl"
      local cases = {
        { method = "pbt" },
        { method = "pbt", population = 3, pbt = { explore = { ["env.grid_size"] = "perturb" } } },
        { method = "pbt", population = 3, pbt = { explore = { ["ppo.lr"] = "resample" } } },
        { method = "pbt", population = 3, pbt = { explore = { ["ppo.lr"] = "double" } } },
        { method = "pbt", population = 3, parallel = 2, pbt = { explore = { ["ppo.lr"] = "perturb" } } },
        { method = "pbt", population = 3, pbt = { interval = 0, explore = { ["ppo.lr"] = "perturb" } } },
        { method = "random", trials = 2, pbt = { explore = { ["ppo.lr"] = "perturb" } } },
        { method = "pbt", population = 3, pbt = { restarts = -1, explore = { ["ppo.lr"] = "perturb" } } },
        { method = "pbt", population = 3, pbt = { test = "t", explore = { ["ppo.lr"] = "perturb" } } },
        { method = "pbt", population = 3, pbt = { sync = "yes", explore = { ["ppo.lr"] = "perturb" } } },
        { method = "pbt", population = 3, space = { ["ppo.epochs"] = moonrl.randint(1, 4) }, pbt = { explore = "pb2" } },
        { method = "pbt", population = 3, space = { ["ppo.lr"] = moonrl.choice{ 1e-4, 1e-3 } },
          pbt = { explore = { ["ppo.lr"] = "pb2" } } },
      }
      for _, c in ipairs(cases) do
        c.base, c.dir = "exp.lua", "never"
        local ok, e = pcall(moonrl.sweep, c)
        print("refused " .. tostring(not ok) .. ": " .. tostring(e))
      end
    ]])
    local rc, out, err = support.moonrl("run bad.lua", dir)
    assert.equal(0, rc, out .. err)
    for _, want in ipairs({
      'method = "pbt" needs population = N',
      "pbt.explore: env.grid_size is not a key a running member can change",
      'pbt.explore["ppo.lr"] = "resample" draws from the space, which has no ppo.lr',
      'accepted "perturb", "resample", "pb2" or a function(value, rng), got "double"',
      "trains all 3 members at once; parallel cannot be 2",
      "pbt.interval must be a whole number of updates >= 1, got 0",
      'pbt and population are options of method = "pbt"',
      "pbt.restarts must be a whole number >= 0 (how often a member that died is resumed), got -1",
      'pbt.test must be "welch" (copy only on a measured difference) or "none", got "t"',
      'pbt.sync must be true (the members pause at the same agent-steps and are ranked together) or false, got "yes"',
      'pbt.explore = "pb2" explores the space\'s hot keys with a numeric range (uniform, loguniform, randint), and the space has none',
      'pbt.explore["ppo.lr"] = "pb2": ppo.lr has no numeric range in the space',
    }) do
      assert.truthy(out:find(want, 1, true), want .. "\n" .. out .. err)
    end
    assert.is_nil(out:find("refused false", 1, true), out)
    assert.is_nil(support.uv.fs_stat(dir .. "/never"))
    support.rm_rf(dir)
  end)
end)

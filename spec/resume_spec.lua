-- Resuming a run (moonrl.resume, moonrl.run.trim_metrics, the trainer thread's
-- load): `moonrl train --resume RUN_DIR` and moonrl.train{resume = ...} on
-- the built binary (build/moonrl, or $MOONRL_BIN) with a network small
-- enough that an update takes milliseconds, against an uninterrupted run of
-- the same config; and the metrics files' trimming on its own.
--
-- An interruption is made by copying the finished run's directory and
-- deleting (or damaging) its newest checkpoints: its metrics files then hold
-- rows after the checkpoint it resumes from, as after a crash.

local support = require("support")
local trim = require("moonrl.run.trim_metrics")
local tb = require("moonrl.formats.tensorboard")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

local function moonrl(args, dir)
  local out, err, rc = dir .. "/stdout", dir .. "/stderr", dir .. "/rc"
  os.execute(string.format("cd %q && timeout 120 %q %s >%q 2>%q; echo $? >%q", dir, BIN, args, out, err, rc))
  if (os.getenv("MOONRL_SPEC_SHOW") or "") ~= "" then
    io.stderr:write("\n$ moonrl ", args, "\n", support.read_file(out) or "", support.read_file(err) or "")
  end
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

local UPDATES, BATCH = 8, 64    -- 8 envs x 8 steps

-- Linear schedules, a warm-up update that is restored (as the levels do),
-- every update checkpointed and all of them kept; short episodes on a
-- crowded grid, so that every update has returns, food and poison.
local EXPERIMENT = [[
return {
  name = "resume", device = "cpu", threads = 1, seed = 11, hardware = "ci", level = "basic",
  total_steps = ]] .. UPDATES * BATCH .. [[,
  warmup = { updates = 1, restore = true },
  env = { num_envs = 8, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8, epochs = 2 },
  log = { console = false, csv = true, tensorboard = true, checkpoint_interval = 1, checkpoint_keep = 0 },
  eval = { num_envs = 8, steps = 24 },
}
]]

local function ckpt(dir, n) return string.format("%s/checkpoints/update_%07d.mrck", dir, n) end

local function updates_of_jsonl(text)   -- metric rows only: event lines ("event": "change", ...) are skipped
  local out = {}
  for line in text:gmatch("[^\n]+") do
    local u = not line:find('"event":', 1, true) and line:match('"update":(%d+)')
    if u then out[#out + 1] = tonumber(u) end
  end
  return out
end

local function updates_of_csv(text)
  local out = {}
  for i, line in ipairs(support.lines(text)) do
    if i > 1 then out[#out + 1] = tonumber(line:match("^([^,]*)")) end
  end
  return out
end

local function seq(a, b)
  local t = {}
  for i = a, b do t[#t + 1] = i end
  return t
end

-- Every record of an event file as {step=, start=} (start: a SessionLog
-- START), but the config's text and the hyperparameters (counted in
-- out.plugins: each file of a run starts with them).
local function records(path)
  local s = assert(support.read_file(path))
  local out, pos = { plugins = 0 }, 1
  while pos <= #s do
    local len = 0
    for k = 7, 0, -1 do len = len * 256 + s:byte(pos + k) end
    local data = s:sub(pos + 12, pos + 12 + len - 1)
    assert(#data == len, path .. ": a torn record")
    if data:find("run/config", 1, true) or data:find("_hparams_/", 1, true) then
      out.plugins = out.plugins + 1
    else
      out[#out + 1] = { step = trim.event_step(data), start = data:find("\58\2\8\1", 1, true) ~= nil }
    end
    pos = pos + 12 + len + 4
  end
  return out
end

local function event_files(dir)
  local out = {}
  for _, name in ipairs(support.files(dir)) do
    if name:find("tfevents", 1, true) then out[#out + 1] = dir .. "/" .. name end
  end
  return out
end

-- The copy of a finished run interrupted after update k: later checkpoints gone.
local function interrupted(from, to, k)
  os.execute(string.format("rm -rf %q && cp -r %q %q", to, from, to))
  for n = k + 1, UPDATES do os.remove(ckpt(to, n)) end
end

describe("moonrl train --resume", function()
  local dir, full
  setup(function()
    if not have_bin then return end
    dir = support.tmpdir()
    support.write_file(dir .. "/exp.lua", EXPERIMENT)
    local rc, _, err = moonrl("train exp.lua --dir full --no-eval", dir)
    assert(rc == 0, err)
    full = dir .. "/full"
  end)
  teardown(function()
    if dir then support.rm_rf(dir) end
  end)

  local function need_bin()
    if not have_bin then pending("no binary at " .. BIN .. " (build it: make build)") return false end
    return true
  end

  it("continues bit for bit, with every update once in metrics.jsonl, metrics.csv and TensorBoard", function()
    if not need_bin() then return end
    interrupted(full, dir .. "/a", 3)
    local log_before = support.read_file(dir .. "/a/train.log")
    local rc, out, err = moonrl("train --resume a --no-eval", dir)
    assert.equal(0, rc, err)
    assert.truthy(out:find("run directory: a", 1, true), out)
    assert.truthy(out:find("since resuming from update 3", 1, true), out)
    -- the same bytes as the run that was never interrupted
    assert.equal(support.read_file(ckpt(full, UPDATES)), support.read_file(ckpt(dir .. "/a", UPDATES)))
    -- the rows written after update 3 were dropped, and the run went on from 4
    assert.truthy(err:find("dropped the metrics written after update 3: 5 row(s) of metrics.jsonl, 5 of metrics.csv", 1,
      true), err)
    assert.same(seq(1, UPDATES), updates_of_jsonl(support.read_file(dir .. "/a/metrics.jsonl")))
    assert.same(seq(1, UPDATES), updates_of_csv(support.read_file(dir .. "/a/metrics.csv")))
    local want, got = support.read_file(full .. "/metrics.jsonl"), support.read_file(dir .. "/a/metrics.jsonl")
    for _, key in ipairs({ "value_loss", "entropy", "lr", "episode_return_mean", "agent_steps" }) do
      local pat = '"' .. key .. '":([^,}]*)'
      local a, b = {}, {}
      for v in want:gmatch(pat) do a[#a + 1] = v end
      for v in got:gmatch(pat) do b[#b + 1] = v end
      assert.same(a, b, key)
    end
    -- train.log goes on after the first run's lines
    local log = support.read_file(dir .. "/a/train.log")
    assert.equal(log_before, log:sub(1, #log_before))
    assert.truthy(log:find("resumed from update 3 (checkpoint a/checkpoints/update_0000003.mrck)", 1, true), log)
    assert.truthy(log:find("update 4 steps 256", 1, true), log)
    assert.falsy(log:find("warm-up update", #log_before, true), "no warm-up on resume")
    -- TensorBoard: the old file cut at update 3's step, the new one opening
    -- with a SessionLog START just past it; every step once, rising
    local files = event_files(dir .. "/a")
    assert.equal(2, #files)
    local steps, starts = {}, {}
    for i, f in ipairs(files) do
      -- the config's text and the hyperparameters' experiment and session start; the session's end (at
      -- its last step) only in the file that ended: the first one's was cut with the updates after 3
      assert.equal(i == #files and 4 or 3, records(f).plugins, f .. ": the config's text and the hyperparameters")
      for _, r in ipairs(records(f)) do
        if r.start then starts[#starts + 1] = r.step
        elseif r.step and steps[#steps] ~= r.step then steps[#steps + 1] = r.step end
      end
    end
    local want_steps = {}
    for u = 1, UPDATES do want_steps[u] = u * BATCH end
    assert.same(want_steps, steps)
    assert.same({ 3 * BATCH + 1 }, starts)
  end)

  it("reports a damaged newest checkpoint by name and message and resumes from the next older one", function()
    if not need_bin() then return end
    local b = dir .. "/b"
    interrupted(full, b, 6)
    -- update 6 truncated, update 5 with one byte flipped in the middle
    local six = support.read_file(ckpt(b, 6))
    support.write_file(ckpt(b, 6), six:sub(1, math.floor(#six / 2)))
    local five = support.read_file(ckpt(b, 5))
    local mid = math.floor(#five / 2)
    support.write_file(ckpt(b, 5), five:sub(1, mid - 1) .. string.char((five:byte(mid) + 1) % 256) .. five:sub(mid + 1))
    local rc, _, err = moonrl("train --resume b --no-eval", dir)
    assert.equal(0, rc, err)
    assert.truthy(err:find("skipped damaged checkpoint b/checkpoints/update_0000006.mrck: " ..
      "'b/checkpoints/update_0000006.mrck' is damaged: its header says", 1, true), err)
    assert.truthy(err:find("skipped damaged checkpoint b/checkpoints/update_0000005.mrck: " ..
      "'b/checkpoints/update_0000005.mrck' is damaged: its checksum does not match", 1, true), err)
    assert.truthy(err:find("resumed from update 4", 1, true) or
      support.read_file(b .. "/train.log"):find("resumed from update 4 (checkpoint b/checkpoints/update_0000004.mrck)", 1,
        true))
    assert.equal(support.read_file(ckpt(full, UPDATES)), support.read_file(ckpt(b, UPDATES)))
    assert.same(seq(1, UPDATES), updates_of_jsonl(support.read_file(b .. "/metrics.jsonl")))
  end)

  it("says which directory holds no valid checkpoint, and when there is none at all", function()
    if not need_bin() then return end
    local c = dir .. "/c"
    interrupted(full, c, 2)
    support.write_file(ckpt(c, 2), "not a checkpoint at all, just text that is long enough")
    support.write_file(ckpt(c, 1), "")
    local rc, _, err = moonrl("train --resume c", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("no valid checkpoint in c/checkpoints:", 1, true), err)
    assert.truthy(err:find("update_0000002.mrck' is not a moonrl checkpoint (bad magic bytes)", 1, true), err)
    assert.truthy(err:find("update_0000001.mrck' is not a moonrl checkpoint: only 0 bytes", 1, true), err)
    os.remove(ckpt(c, 1))
    os.remove(ckpt(c, 2))
    rc, _, err = moonrl("train --resume c", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("no checkpoint in c/checkpoints", 1, true), err)
    rc, _, err = moonrl("train --resume nowhere", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("run directory 'nowhere' not found", 1, true), err)
  end)

  it("skips a FIFO, a directory and a huge sparse file named as checkpoints, without waiting or reading them", function()
    if not need_bin() then return end
    local g = dir .. "/g"
    interrupted(full, g, 7)
    -- update 9 a directory, 7 a FIFO nobody writes to, 6 a 20 GB sparse file
    -- (zeros), 5 a real header with a 20 GB sparse tail
    assert(os.execute(string.format("mkdir %q", ckpt(g, 9))))
    os.remove(ckpt(g, 7))
    assert(os.execute(string.format("mkfifo %q", ckpt(g, 7))))
    os.remove(ckpt(g, 6))
    assert(os.execute(string.format("truncate -s 20G %q", ckpt(g, 6))))
    local five = support.read_file(ckpt(g, 5))
    support.write_file(ckpt(g, 5), five:sub(1, 24))
    assert(os.execute(string.format("truncate -s 20G %q", ckpt(g, 5))))
    local function skipped(err)
      assert.truthy(err:find("skipped damaged checkpoint g/checkpoints/update_0000009.mrck: checkpoint " ..
        "'g/checkpoints/update_0000009.mrck' is a directory", 1, true), err)
      assert.truthy(err:find("skipped damaged checkpoint g/checkpoints/update_0000007.mrck: checkpoint " ..
        "'g/checkpoints/update_0000007.mrck' is a FIFO (named pipe), not a regular file", 1, true), err)
      assert.truthy(err:find("skipped damaged checkpoint g/checkpoints/update_0000006.mrck: " ..
        "'g/checkpoints/update_0000006.mrck' is not a moonrl checkpoint (bad magic bytes)", 1, true), err)
      assert.truthy(err:find("skipped damaged checkpoint g/checkpoints/update_0000005.mrck: " ..
        "'g/checkpoints/update_0000005.mrck' is damaged: its header says " .. #five .. " bytes but the file is " ..
        "21474836480 bytes (oversized", 1, true), err)
    end
    -- eval of the run directory: the newest readable one, update 4
    local rc, _, err = moonrl("eval g --out none", dir)
    assert.equal(0, rc, err)
    skipped(err)
    assert.truthy(err:find("g: checkpoint g/checkpoints/update_0000004.mrck (update 4)", 1, true), err)
    -- eval of each by name: refused with the reason, exit 1
    local want = {
      [9] = "is a directory", [7] = "is a FIFO (named pipe), not a regular file",
      [6] = "bad magic bytes", [5] = "(oversized",
    }
    for n, words in pairs(want) do
      rc, _, err = moonrl("eval g/checkpoints/update_000000" .. n .. ".mrck --out none", dir)
      assert.equal(1, rc, err)
      assert.truthy(err:find("g/checkpoints/update_000000" .. n .. ".mrck", 1, true), err)
      assert.truthy(err:find(words, 1, true), err)
      assert.falsy(err:find("out of memory", 1, true), err)
    end
    -- resume: from update 4, the skipped ones named; it writes 5 to 8 over them
    rc, _, err = moonrl("train --resume g --no-eval", dir)
    assert.equal(0, rc, err)
    skipped(err)
    assert.truthy(err:find("resumed from update 4", 1, true) or
      support.read_file(g .. "/train.log"):find("resumed from update 4 (checkpoint g/checkpoints/update_0000004.mrck)", 1,
        true))
    assert.equal(support.read_file(ckpt(full, UPDATES)), support.read_file(ckpt(g, UPDATES)))
  end)

  it("refuses a change of a cold key, naming it, and changes nothing", function()
    if not need_bin() then return end
    local log = support.read_file(full .. "/train.log")
    local rc, _, err = moonrl("train --resume full --set env.num_envs=16 --set policy.hidden=32 --set ppo.lr=1e-4", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("env.num_envs = 16: the run has 8 and env.num_envs is not hot: changing it needs a new run", 1,
      true), err)
    assert.truthy(err:find("policy.hidden = 32: the run has 16", 1, true), err)
    assert.falsy(err:find("ppo.lr", 1, true), err)
    assert.equal(log, support.read_file(full .. "/train.log"))
    rc, _, err = moonrl("train --resume full --dir elsewhere", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("--resume continues in the run's own directory", 1, true), err)
    -- a cold key changed behind moonrl's back: config.lua against the checkpoint's own config
    local g = dir .. "/g"
    interrupted(full, g, 4)
    local text = support.read_file(g .. "/config.lua")
    support.write_file(g .. "/config.lua", (text:gsub("gamma = 0.99,", "gamma = 0.9,")))
    rc, _, err = moonrl("train --resume g", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("g/config.lua: ppo.gamma = 0.9, the run has 0.99: ppo.gamma is not hot", 1, true), err)
    -- without moonrl's copy of what it wrote to tell the edit from: the engine's one check of
    -- the config against the checkpoint's (mr_checkpoint_config_conflicts) names it, both values
    assert.truthy(os.remove(g .. "/.config.as-written.lua"))
    rc, _, err = moonrl("train --resume g", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("config.lua and g/checkpoints/update_0000004.mrck disagree on ppo.gamma: 0.9 vs 0.99 " ..
      "(config.lua vs the checkpoint)", 1, true), err)
  end)

  it("refuses a directory another moonrl process is running in, and changes nothing there", function()
    if not need_bin() then return end
    local l = dir .. "/l"
    interrupted(full, l, 4)
    -- the first process: resumed with a budget that keeps it busy, checkpointing every update
    os.execute(string.format("cd %q && (%q train --resume l --set total_steps=%d >l.out 2>l.err & echo $! >l.pid)",
      dir, BIN, 100000 * BATCH))
    local pid = assert(tonumber(support.read_file(dir .. "/l.pid")))
    finally(function() os.execute("kill -9 " .. pid .. " 2>/dev/null") end)
    local t0 = os.time()
    -- running: holding the lock, and past its checkpoint (update 4) and the rows it trimmed
    while not (support.read_file(l .. "/metrics.jsonl") or ""):find('"update":12,', 1, true) and os.time() - t0 < 60 do
      os.execute("sleep 0.1")
    end
    assert.truthy((support.read_file(l .. "/.lock") or ""):find("^" .. pid .. "\n"))
    local jsonl = support.read_file(l .. "/metrics.jsonl")
    local rc, _, err = moonrl("train --resume l", dir)
    assert.equal(1, rc, err)
    assert.truthy(err:find("run directory l is in use by another moonrl process (pid ", 1, true), err)
    assert.truthy(err:find("stop it first (moonrl ctl l stop) or wait for it to end; nothing here was changed", 1, true),
      err)
    -- a new run given the same directory is refused the same way
    rc, _, err = moonrl("train exp.lua --dir l --no-eval", dir)
    assert.equal(1, rc, err)
    assert.truthy(err:find("run directory l is in use by another moonrl process", 1, true), err)
    -- the first one's rows go on from where they were, none dropped by the refused ones
    local now = support.read_file(l .. "/metrics.jsonl")
    assert.equal(jsonl, now:sub(1, #jsonl))
    os.execute("kill -INT " .. pid)
    t0 = os.time()
    while os.execute("kill -0 " .. pid .. " 2>/dev/null") == 0 and os.time() - t0 < 60 do os.execute("sleep 0.1") end
    -- the kernel dropped its lock with it: the directory resumes again
    support.write_file(l .. "/checkpoints/update_0000099.mrck.tmp", "half a checkpoint")
    local newest = 0   -- one update more than it has (a finished run is only said to be, not started)
    for _, name in ipairs(support.files(l .. "/checkpoints")) do
      newest = math.max(newest, tonumber(name:match("^update_(%d+)%.mrck$")) or 0)
    end
    rc, _, err = moonrl("train --resume l --set total_steps=" .. (newest + 1) * BATCH .. " --no-eval", dir)
    assert.equal(0, rc, err)
    assert.truthy(err:find("removed update_0000099.mrck.tmp from l/checkpoints: a checkpoint an earlier process " ..
      "did not finish writing", 1, true), err)
    assert.falsy(io.open(l .. "/checkpoints/update_0000099.mrck.tmp"))
  end)

  it("applies hot changes: a finished run trains on to a larger total_steps", function()
    if not need_bin() then return end
    local d = dir .. "/d"
    interrupted(full, d, UPDATES)
    support.write_file(dir .. "/more.lua", "return { ppo = { vf_coef = 0.25 }, eval = { steps = 16 } }")
    local rc, out, err = moonrl("train --resume d more.lua --set total_steps=" .. (UPDATES + 2) * BATCH, dir)
    assert.equal(0, rc, err)
    assert.truthy(err:find("changed on resume: ppo.vf_coef = 0.25 (was 0.5), eval.steps = 16 (was 24), " ..
      "total_steps = 640 (was 512)", 1, true), err)
    assert.truthy(out:find("done after 10 updates", 1, true), out)
    assert.truthy(err:find("moonrl eval: 100% of 16 steps", 1, true), err)   -- the new eval.steps, with progress
    assert.same(seq(1, UPDATES + 2), updates_of_jsonl(support.read_file(d .. "/metrics.jsonl")))
    -- config.now.lua: the config in force now; config.lua stays the one it started with
    local cfg = support.read_file(d .. "/config.now.lua")
    assert.truthy(cfg:find("total_steps = 640,", 1, true), cfg)
    assert.truthy(cfg:find("vf_coef = 0.25,", 1, true), cfg)
    assert.truthy(cfg:find("after its last change (", 1, true), cfg)
    assert.equal(support.read_file(full .. "/config.lua"), support.read_file(d .. "/config.lua"))
  end)

  it("resumes from a script with moonrl.train{resume = ...}, a Lua schedule given again", function()
    if not need_bin() then return end
    support.write_file(dir .. "/fn.lua", [[
      local moonrl = require "moonrl"
      -- made by load(): config.lua cannot save its source (moonrl.config.funcsource), so a
      -- resume must be given it again
      local lr = load("return function(p) return 1e-3 * (1 - p) end")()
      local cfg = dofile("exp.lua")
      cfg.dir, cfg.ppo.lr, cfg.total_steps = "e", lr, 6 * 64
      cfg.hooks = { on_update = function(m, run)
        if m.update == 1 then assert(run:set("ppo.vf_coef", 0.375)) end   -- kept in config.lua
        if m.update == 2 then run:stop() end
      end }
      local first = moonrl.train(cfg):wait()
      local ok, err = pcall(moonrl.train, { resume = "e" })
      print("refused=" .. tostring(not ok) .. " " .. tostring(err):gsub("\n", " | "))
      local seen = {}
      local run = moonrl.train({ resume = "e", ppo = { lr = lr } },
        { hooks = { on_update = function(m) seen[#seen + 1] = m.update end } })
      local s = run:wait()
      print("first=" .. first.updates .. " resumed=" .. s.resumed_from .. " updates=" .. s.updates ..
        " seen=" .. table.concat(seen, ","))
      print("lr5=" .. run:metrics().lr .. " vf=" .. run:get("ppo.vf_coef"))
      local r = assert(moonrl.evaluate("e"))
      print("evaluated=" .. r.checkpoint)
    ]])
    local rc, out, err = moonrl("run fn.lua", dir)
    assert.equal(0, rc, err)
    assert.truthy(out:find("refused=true", 1, true), out)
    assert.truthy(out:find("ppo.lr was a Lua function in this run and config.lua could not keep it", 1, true), out)
    local first, resumed, seen = out:match("first=(%d+) resumed=(%d+) updates=6 seen=([%d,]+)")
    assert.truthy(first, out)
    assert.equal(first, resumed)
    local want = {}
    for u = tonumber(first) + 1, 6 do want[#want + 1] = tostring(u) end
    assert.equal(table.concat(want, ","), seen)
    assert.truthy(out:find("lr5=" .. tostring(1e-3 * (1 - 5 / 6)) .. " vf=0.375", 1, true), out)   -- update 6 at p = 5/6
    assert.truthy(out:find("evaluated=e/checkpoints/update_0000006.mrck", 1, true), out)
    assert.same(seq(1, 6), updates_of_jsonl(support.read_file(dir .. "/e/metrics.jsonl")))
  end)

  it("tells that a checkpoint given to moonrl train is one, and how to resume or evaluate it", function()
    if not need_bin() then return end
    local rc, _, err = moonrl("train full/checkpoints/update_0000003.mrck", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("'full/checkpoints/update_0000003.mrck' is a checkpoint, not a config file: " ..
      "to continue its run, moonrl train --resume full; to evaluate it, moonrl eval full/checkpoints/update_0000003.mrck",
      1, true), err)
    rc, _, err = moonrl("train full", dir)
    assert.equal(2, rc)
    assert.truthy(err:find("moonrl train --resume full", 1, true), err)
  end)

  it("moonrl eval takes a run directory: its newest valid checkpoint, its eval settings, progress on stderr", function()
    if not need_bin() then return end
    local f = dir .. "/f"
    interrupted(full, f, 5)
    support.write_file(ckpt(f, 5), "damaged")
    local rc, out, err = moonrl("eval f", dir)
    assert.equal(0, rc, err)
    assert.truthy(err:find("skipped damaged checkpoint f/checkpoints/update_0000005.mrck", 1, true), err)
    assert.truthy(err:find("f: checkpoint f/checkpoints/update_0000004.mrck (update 4)", 1, true), err)
    assert.truthy(err:find("moonrl eval: 100% of 24 steps", 1, true), err)   -- eval.steps of its config.lua
    assert.truthy(out:find(" ground_truth |", 1, true), out)   -- the mode's column
    -- the same numbers as that checkpoint evaluated by name, with the run's settings
    local rc2, out2 = moonrl("eval f/checkpoints/update_0000004.mrck", dir)
    assert.equal(0, rc2)
    assert.equal(out, out2)
    local rc3, _, err3 = moonrl("eval f/checkpoints/update_0000004.mrck --steps 12", dir)
    assert.equal(0, rc3)
    assert.truthy(err3:find("100% of 12 steps", 1, true), err3)
  end)
end)

describe("moonrl.run.trim_metrics", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  it("keeps the jsonl rows up to the update and drops a torn last line", function()
    local p = support.write_file(dir .. "/m.jsonl",
      '{"a":1,"update":1}\n{"update":2,"x":[1]}\n{"b":2,"update":3}\n{"update":4}\n{"upda')
    local n, torn = trim.jsonl(p, 2)
    assert.equal(2, n)
    assert.is_true(torn)
    assert.equal('{"a":1,"update":1}\n{"update":2,"x":[1]}\n', support.read_file(p))
    assert.same({ 0, false }, { trim.jsonl(p, 2) })
    assert.same({ 0, false }, { trim.jsonl(dir .. "/none.jsonl", 2) })
  end)

  it("names the updates up to the checkpoint whose metrics rows are missing (event lines not counted)", function()
    local p = support.write_file(dir .. "/m.jsonl", '{"update":1}\n{"event":"change","update":2}\n' ..
      '{"update":3}\n{"update":6}\n{"update":9}\n')
    local n, torn, missing = trim.jsonl(p, 7)
    assert.equal(1, n)
    assert.is_false(torn)
    assert.same({ ranges = { "2", "4-5", "7" }, count = 4 }, missing)
    assert.same({ ranges = { "2" }, count = 1 }, select(3, trim.jsonl(p, 3)))
    support.write_file(dir .. "/metrics.jsonl", '{"update":1}\n{"update":2}\n{"update":5}\n')
    local report = assert(trim.run_dir(dir, 5, 5 * 64))
    assert.equal("metrics.jsonl lacks the rows of 2 of the 5 updates up to the checkpoint: updates 3-4 (they " ..
      "were not written before the run stopped; they cannot be recovered, the resumed run appends after them)",
      report.missing_line)
    support.write_file(dir .. "/metrics.jsonl", '{"update":1}\n{"update":2}\n')
    assert.is_nil(assert(trim.run_dir(dir, 2, 2 * 64)).missing_line)
  end)

  it("keeps the csv header and rows up to the update, and returns the columns", function()
    local p = support.write_file(dir .. "/m.csv", 'update,"a,b",c\n1,"x,""y""",2\n2,3,4\n3,5,6\n')
    local n, torn, cols = trim.csv(p, 1)
    assert.equal(2, n)
    assert.is_false(torn)
    assert.same({ "update", "a,b", "c" }, cols)
    assert.equal('update,"a,b",c\n1,"x,""y""",2\n', support.read_file(p))
  end)

  it("cuts an event file at the first step past the checkpoint's, and a torn record", function()
    local p = dir .. "/events.out.tfevents.1.host"
    local parts = { tb.record(tb.file_version_event(1)) }
    for step = 64, 320, 64 do
      parts[#parts + 1] = tb.record(tb.scalar_event(2, step, "a", step))
      parts[#parts + 1] = tb.record(tb.scalar_event(2, step, "b", -step))
    end
    local keep = table.concat(parts, "", 1, 1 + 2 * 3)
    support.write_file(p, table.concat(parts) .. tb.record(tb.scalar_event(3, 384, "a", 1)):sub(1, 20))
    local n, torn = trim.tensorboard(p, 192)
    assert.equal(4, n)
    assert.is_true(torn)
    assert.equal(keep, support.read_file(p))
    assert.equal(192, trim.event_step(tb.scalar_event(2, 192, "a", 1)))
    assert.is_nil(trim.event_step(tb.file_version_event(1)))
    assert.equal(193, trim.event_step(tb.session_start_event(5, 193)))
  end)

  it("lets the sinks append after what is there: no second csv header, a new TensorBoard file", function()
    local uv = support.uv
    support.write_file(dir .. "/metrics.csv", "update,agent_steps,wall_time\n1,64,5\n")
    support.write_file(dir .. "/metrics.jsonl", '{"update":1}\n')
    local name = tb.filename(100, "host")
    support.write_file(dir .. "/" .. name, "old")
    local opts = { uv = uv, clock = function() return 100 end, hostname = "host", append = true,
                   columns = { "update", "agent_steps", "wall_time" }, resume_step = 64 }
    local sinks = {}
    for _, mod in ipairs({ "csv", "jsonl", "tensorboard" }) do
      sinks[#sinks + 1] = require("moonrl.run.sinks." .. mod).new(dir, {}, opts)
    end
    local open = #sinks
    for _, k in ipairs(sinks) do
      k:update({ update = 2, agent_steps = 128, entropy = 2 })
      k:close(function() open = open - 1 end)
    end
    support.run_until(function() return open == 0 end, 5000)
    assert.equal("update,agent_steps,wall_time\n1,64,5\n2,128,100\n", support.read_file(dir .. "/metrics.csv"))   -- entropy: no column
    assert.truthy(support.read_file(dir .. "/metrics.jsonl"):match('^{"update":1}\n{.*"update":2[,}]'))
    assert.equal("old", support.read_file(dir .. "/" .. name))
    local recs = records(dir .. "/" .. name .. ".2")
    assert.same({ false, true, false }, { recs[1].start, recs[2].start, recs[3].start })
    assert.same({ 65, 128 }, { recs[2].step, recs[3].step })
  end)
end)

-- A run directory is never silently reused, and what a resume makes of the
-- run's files (config.lua, config.now.lua, the checkpoint's own update), on
-- the built binary (build/moonrl, or $MOONRL_BIN) with a network small
-- enough that an update takes milliseconds.

local support = require("support")

local BIN, have_bin = support.BIN, support.have_bin

local function moonrl(args, dir) return support.moonrl(args, dir) end

local UPDATES, BATCH = 8, 64    -- 8 envs x 8 steps

local EXPERIMENT = [[
return {
  name = "rundir", device = "cpu", threads = 1, seed = 11, hardware = "ci", level = "basic",
  total_steps = ]] .. UPDATES * BATCH .. [[,
  env = { num_envs = 8, grid_size = 16, density_min = 24, density_max = 40, max_episode_steps = 12 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 8, epochs = 1, lr = 3e-4 },
  log = { console = false, checkpoint_interval = 1, checkpoint_keep = 0 },
  eval = { num_envs = 8, steps = 24 },
}
]]

local function ckpt(dir, n) return string.format("%s/checkpoints/update_%07d.mrck", dir, n) end

-- The copy of a finished run interrupted after update k: later checkpoints gone.
local function interrupted(from, to, k)
  os.execute(string.format("rm -rf %q && cp -r %q %q", to, from, to))
  for n = k + 1, UPDATES do os.remove(ckpt(to, n)) end
end

-- Every file under dir with its contents (what "left as it is" compares).
local function snapshot(dir)
  local p = io.popen(string.format("cd %q && find . -type f ! -name .lock | sort | xargs md5sum", dir))
  local out = {}
  for sum, name in p:read("*a"):gmatch("(%x+)%s+([^\n]+)") do out[name] = sum end
  p:close()
  return out
end

describe("run directories", function()
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
    if not have_bin then pending("no binary at " .. BIN .. " (build it: make build)") end
    return have_bin
  end

  it("refuses a --dir that holds a run, naming --resume, another --dir and --force; --force moves it aside", function()
    if not need_bin() then return end
    local a = dir .. "/a"
    interrupted(full, a, UPDATES)
    local before = snapshot(a)
    local rc, out, err = moonrl("train exp.lua --dir a --no-eval", dir)
    assert.equal(2, rc, out .. err)
    assert.truthy(err:find("a already holds a run (config.lua, train.log, ", 1, true), err)
    assert.truthy(err:find("moonrl train --resume a", 1, true), err)
    assert.truthy(err:find("another --dir", 1, true), err)
    assert.truthy(err:find("--force to move the old run aside to a.old-<time>", 1, true), err)
    assert.same(before, snapshot(a))
    -- an empty existing directory is fine
    os.execute(string.format("mkdir -p %q/empty", dir))
    rc, out, err = moonrl("train exp.lua --dir empty --no-eval", dir)
    assert.equal(0, rc, out .. err)
    -- --force: the old run moved aside whole, and said where
    rc, out, err = moonrl("train exp.lua --dir a --force --no-eval", dir)
    assert.equal(0, rc, out .. err)
    local moved = err:match("the run that was in a moved to (a%.old%-[%d-]+) %(nothing deleted%)")
    assert.truthy(moved, err)
    assert.same(before, snapshot(dir .. "/" .. moved))
    assert.truthy(support.read_file(a .. "/train.log"):find(" run a\n", 1, true))
    assert.falsy(support.read_file(a .. "/train.log"):find("resum", 1, true))
  end)

  it("a run's own config.lua names no dir: started as a config it is a new run in a new directory", function()
    if not need_bin() then return end
    local text = support.read_file(full .. "/config.lua")
    assert.falsy(text:find("\n  dir = ", 1, true), text)
    local before = snapshot(full)
    local rc, out, err = moonrl("train full/config.lua --no-eval", dir)
    assert.equal(0, rc, out .. err)
    local new = out:match("run directory: (%S+)\n")
    assert.truthy(new and new:match("^runs/rundir%-"), out)
    assert.same(before, snapshot(full))
  end)

  it("moonrl.train{dir = ...} in a script refuses a run's directory; force = true moves it aside", function()
    if not need_bin() then return end
    local s = dir .. "/s"
    interrupted(full, s, UPDATES)
    local before = snapshot(s)
    support.write_file(dir .. "/script.lua", [[
      local moonrl = require("moonrl")
      local cfg = dofile("exp.lua")
      cfg.dir = "s"
      local ok, err = pcall(moonrl.train, cfg)
      print("refused: " .. tostring(not ok) .. " " .. tostring(err))
      local run = moonrl.train(cfg, { force = true, quiet = true })
      print("status: " .. run:wait().status)
    ]])
    -- uncaught, the refusal is its message at the script's line: no stack traceback (that is for bugs)
    support.write_file(dir .. "/uncaught.lua", [[
      local moonrl = require("moonrl")
      local cfg = dofile("exp.lua")
      cfg.dir = "s"
      moonrl.train(cfg)
    ]])
    local rc0, out0, err0 = moonrl("run uncaught.lua", dir)
    assert.equal(1, rc0, out0 .. err0)
    assert.truthy(err0:find("moonrl: error in the main script: uncaught.lua:4: s already holds a run", 1, true), err0)
    assert.falsy(err0:find("stack traceback", 1, true), err0)
    assert.same(before, snapshot(s))
    local rc, out, err = moonrl("run script.lua", dir)
    assert.equal(0, rc, out .. err)
    assert.truthy(out:find("refused: true ", 1, true), out)
    assert.truthy(out:find("s already holds a run", 1, true), out)
    assert.truthy(out:find('moonrl.train{resume = "s"}', 1, true), out)
    assert.truthy(out:find("force = true", 1, true), out)
    assert.truthy(out:find("status: done", 1, true), out)
    local p = io.popen(string.format("cd %q && ls -d s.old-*", dir))
    local moved = p:read("*l")
    p:close()
    assert.truthy(moved, "no s.old-* directory")
    assert.same(before, snapshot(dir .. "/" .. moved))
  end)

  it("run:set writes config.now.lua; config.lua stays as at start; a resume goes on from config.now.lua", function()
    if not need_bin() then return end
    support.write_file(dir .. "/setter.lua", [[
      local moonrl = require("moonrl")
      local cfg = dofile("exp.lua")
      cfg.dir = "n"
      local run = moonrl.train(cfg, { quiet = true })
      assert(run:set("ppo.vf_coef", 0.25))
      run:stop()
      print("status: " .. run:wait().status)
    ]])
    local rc, out, err = moonrl("run setter.lua", dir)
    assert.equal(0, rc, out .. err)
    local start, now = support.read_file(dir .. "/n/config.lua"), support.read_file(dir .. "/n/config.now.lua")
    assert.truthy(start:find("vf_coef = 0.5,", 1, true), start)
    assert.truthy(now, "no config.now.lua")
    assert.truthy(now:find("vf_coef = 0.25,", 1, true), now)
    assert.truthy(now:find("It reproduces the run from the state of that change on, not from its start", 1, true), now)
    rc, out, err = moonrl("train --resume n --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.falsy(err:find("vf_coef", 1, true), err)   -- not an edit: the run's own value
    assert.truthy(support.read_file(dir .. "/n/config.lua"):find("vf_coef = 0.5,", 1, true))
    -- config.lua edited after config.now.lua: said, not passed over
    interrupted(dir .. "/n", dir .. "/n2", 2)
    os.execute("sleep 1")
    local text = support.read_file(dir .. "/n2/config.lua")
    support.write_file(dir .. "/n2/config.lua", (text:gsub("vf_coef = 0.5,", "vf_coef = 0.75,")))
    rc, out, err = moonrl("train --resume n2 --no-eval", dir)
    assert.equal(2, rc, out .. err)
    assert.truthy(err:find("config.lua was edited after config.now.lua was written", 1, true), err)
    assert.truthy(err:find("make the edit in n2/config.now.lua", 1, true), err)
  end)

  it("a hot key edited in config.lua between stop and resume is applied with a note; a cold one is refused", function()
    if not need_bin() then return end
    local h = dir .. "/h"
    interrupted(full, h, 4)
    local text = support.read_file(h .. "/config.lua")
    support.write_file(h .. "/config.lua", (text:gsub("vf_coef = 0.5,", "vf_coef = 0.25,")))
    local rc, out, err = moonrl("train --resume h --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.truthy(err:find("edited in h/config.lua since the run stopped: ppo.vf_coef = 0.25 (the run had 0.5); " ..
      "in force from update 5", 1, true), err)
    assert.truthy(support.read_file(h .. "/train.log"):find("ppo.vf_coef = 0.25 (the run had 0.5)", 1, true))
    local c = dir .. "/c"
    interrupted(full, c, 4)
    local before
    text = support.read_file(c .. "/config.lua")
    support.write_file(c .. "/config.lua", (text:gsub("max_episode_steps = 12,", "max_episode_steps = 30,")))
    before = snapshot(c)
    rc, out, err = moonrl("train --resume c --no-eval", dir)
    assert.equal(2, rc, out .. err)
    assert.truthy(err:find("c/config.lua: env.max_episode_steps = 30, the run has 12: env.max_episode_steps is not hot",
      1, true), err)
    assert.same(before, snapshot(c))
  end)

  it("resumes from the update a checkpoint holds, not the one its file name says", function()
    if not need_bin() then return end
    local r = dir .. "/r"
    interrupted(full, r, 4)
    os.rename(ckpt(r, 4), ckpt(r, 99))
    local rc, out, err = moonrl("train --resume r --no-eval", dir)
    assert.equal(0, rc, out .. err)
    assert.truthy(err:find("r/checkpoints/update_0000099.mrck is named update 99 but holds update 4 (256 agent-steps): " ..
      "resuming from update 4", 1, true), err)
    assert.truthy(out:find("after " .. UPDATES .. " updates, " .. UPDATES * BATCH .. " agent-steps", 1, true), out)
    assert.truthy(out:find("since resuming from update 4", 1, true), out)
    assert.equal(support.read_file(ckpt(full, UPDATES)), support.read_file(ckpt(r, UPDATES)))
  end)

  it("resuming a finished run says so and how to extend it, exits 0 and leaves the run as it is", function()
    if not need_bin() then return end
    local f = dir .. "/f"
    interrupted(full, f, UPDATES)
    local before = snapshot(f)
    local rc, out, err = moonrl("train --resume f", dir)
    assert.equal(0, rc, out .. err)
    assert.truthy(out:find("run f is finished: its checkpoint f/checkpoints/update_0000008.mrck is at update 8 " ..
      "(512 agent-steps), total_steps = 512", 1, true), out)
    assert.truthy(out:find("moonrl train --resume f --set total_steps=N with N larger than 512", 1, true), out)
    assert.same(before, snapshot(f))
  end)
end)

describe("moonrl.run.dir's readers (walk, tail)", function()
  it("walks roots to a depth, a sweep's trials, not dot folders, links only when asked; tails a growing file", function()
    if not have_bin then pending("no binary at " .. BIN .. " (build it: make build)") return end
    local dir = support.tmpdir()
    local function run_at(d, how)
      os.execute(string.format("mkdir -p %q", dir .. "/" .. d))
      support.write_file(dir .. "/" .. d .. "/config.lua", "return {}\n")
      if how == "control" then os.execute(string.format("mkdir -p %q", dir .. "/" .. d .. "/control"))
      else support.write_file(dir .. "/" .. d .. "/metrics.jsonl", "") end
    end
    run_at("top/a")
    run_at("top/b/c", "control")
    run_at("top/b/c/d/e")              -- 4 levels down
    run_at("top/.hidden")
    run_at("top/sw/trial-001")
    run_at("top/sw/trial-002", "control")
    run_at("top/sw/sub/deep")          -- a sweep's other folders are not walked into
    support.write_file(dir .. "/top/sw/sweep.json", "{}\n")
    os.execute(string.format("mkdir -p %q && touch %q", dir .. "/top/nofiles", dir .. "/top/nofiles/config.lua"))
    os.execute(string.format("ln -s a %q", dir .. "/top/linked"))
    support.write_file(dir .. "/script.lua", [[
      local rundir = require("moonrl.run.dir")
      local function show(found, sweeps)
        local parts = {}
        for _, f in ipairs(found) do parts[#parts + 1] = f.dir .. (f.sweep and ("<" .. f.sweep) or "") end
        for _, s in ipairs(sweeps) do parts[#parts + 1] = "sweep " .. s.dir .. ":" .. table.concat(s.trials, ",") end
        print(table.concat(parts, " "))
      end
      show(rundir.walk({ "top" }))
      show(rundir.walk({ "top" }, { depth = 3 }))
      show(rundir.walk({ "top" }, { links = true }))
      show(rundir.walk({ "top/sw" }, { depth = 0, is_run = function(d) return d:find("002") ~= nil end }))
      local t = rundir.tail("grow.jsonl")
      print(#t:read())
      local f = io.open("grow.jsonl", "w") f:write('{"update": 1}\n{"upd') f:close()
      local r = t:read()
      print(#r, r[1].update, t.reset)
      f = io.open("grow.jsonl", "a") f:write('ate": 2}\n') f:close()
      r = t:read()
      print(#r, r[1].update, t.reset)
      f = io.open("grow.jsonl", "w") f:write('{"update": 9}\n') f:close()
      r = t:read()
      print(#r, r[1].update, t.reset)
    ]])
    local rc, out, err = support.moonrl("run script.lua", dir)
    support.rm_rf(dir)
    assert.equal(0, rc, out .. err)
    local lines = {}
    for l in out:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.same({
      "top/a top/sw/trial-001<top/sw top/sw/trial-002<top/sw sweep top/sw:top/sw/trial-001,top/sw/trial-002",
      "top/a top/b/c top/sw/trial-001<top/sw top/sw/trial-002<top/sw sweep top/sw:top/sw/trial-001,top/sw/trial-002",
      "top/a top/linked top/sw/trial-001<top/sw top/sw/trial-002<top/sw sweep top/sw:top/sw/trial-001,top/sw/trial-002",
      "top/sw/trial-002<top/sw sweep top/sw:top/sw/trial-002",
      "0", "1\t1\tfalse", "1\t2\tfalse", "1\t9\ttrue",
    }, lines)
  end)
end)

-- Live tweaks (moonrl.live), the record of changes (moonrl.run.changes) and a
-- running job changed through a tweak file: first the modules alone on a
-- real luv loop with a stand-in run, then the built binary (build/moonrl, or
-- $MOONRL_BIN) training a network small enough that an update takes
-- milliseconds while a script edits the file under it.

local support = require("support")
local json = require("moonrl.formats.json")
local config = require("moonrl.config")
local live = require("moonrl.run.live")
local Changes = require("moonrl.run.changes")
local uv = support.uv

local BIN, have_bin = support.BIN, support.have_bin

local function moonrl(args, dir) return support.moonrl(args, dir) end

-- What an editor does on save: a new file renamed over the old one.
local function save(path, text)
  support.write_file(path .. ".swp", text)
  assert(os.rename(path .. ".swp", path))
end

local function defaults()
  return assert(config.resolve { hardware = "cpu", detect = function() return { gpus = 0, cores = 2 } end })
end

-- A stand-in for moonrl.run: the config in force, run:set through
-- config.set, the log as a list of lines and the change record.
local function fake_run(dir)
  local r = { dir = dir, cfg = defaults(), lines = {}, said = {}, sets = {}, updates = 0, console = true }
  r.log = { line = function(_, s) r.lines[#r.lines + 1] = s end }
  function r:_say(s) self.said[#self.said + 1] = s end
  function r:alive() return true end
  function r:set(key, value, source)
    local old = config.get(self.cfg, key)
    local ok, err = config.set(self.cfg, key, value, { running = true })
    if not ok then return nil, err end
    self.sets[#self.sets + 1] = { key = key, value = value, source = source }
    if self.changes then self.changes:set(key, old, config.get(self.cfg, key), source, nil) end
    return true
  end
  return r
end

describe("moonrl.run.live", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  describe("reading a tweak file", function()
    it("takes nested and dotted keys, schedules and functions", function()
      local t = assert(live.read([[
        return { ppo = { lr = 1e-4, clip = linear(0.2, 0.1) }, ["ppo.ent_coef"] = function(p) return 0.01 * (1 - p) end,
                 log = { interval = 5 }, ["alerts.sps_min"] = 10 }]], "t.lua"))
      assert.equal(1e-4, t["ppo.lr"])
      assert.same({ kind = "linear", from = 0.2, to = 0.1 }, t["ppo.clip"])
      assert.equal(0.005, t["ppo.ent_coef"](0.5))
      assert.equal(5, t["log.interval"])
      assert.equal(10, t["alerts.sps_min"])
      assert.same({}, assert(live.read("-- nothing yet\n", "t.lua")))
      -- the example is a valid tweak file
      local text = assert(support.read_file("examples/tweaks.lua"))
      assert.is_table(live.check(defaults(), assert(live.read(text, "examples/tweaks.lua")), text, "examples/tweaks.lua"))
    end)

    it("names the line of a syntax error and the key of an unknown one", function()
      local _, err = live.read("return {\n  ppo = { lr = 1e-4,\n  log = 1\n", "t.lua")
      assert.matches("^t.lua:4: syntax error: '}' expected", err)
      _, err = live.read("return {\n  ppo = {\n    lrr = 1e-4 } }\n", "t.lua")
      assert.equal("t.lua:3: unknown key 'ppo.lrr' - did you mean 'ppo.lr'?", err)
      _, err = live.read("return 1e-4", "t.lua")
      assert.matches("^t.lua: returned number 0.0001, expected a table of config keys", err)
      _, err = live.read("return { ppo = { lr = 1 }, ['ppo.lr'] = 2 }", "t.lua")
      assert.matches("ppo.lr is given twice", err)
    end)

    it("runs without os, io, require, load or debug, bounded in time and memory", function()
      for _, name in ipairs({ "os", "io", "require", "load", "loadstring", "dofile", "debug", "print", "pcall",
        "setfenv", "getfenv", "collectgarbage" }) do
        local _, err = live.read("return { x = " .. name .. ".x() }", "t.lua")
        assert.matches("^t.lua:1: attempt to index global '" .. name .. "' %(a nil value%)", err, name)
      end
      local saved = live.LIMITS.instructions
      live.LIMITS.instructions = 1e6
      local t0 = os.clock()
      local _, err = live.read("local n = 0\nwhile true do n = n + 1 end", "t.lua")
      assert.equal("t.lua:2: took too long: more than 1000000 instructions", err)
      _, err = live.read("local t = {}\nfor i = 1, 1e12 do t[i] = {i} end", "t.lua")
      live.LIMITS.instructions = saved
      assert.matches("^t.lua:2: .*", err)
      -- a schedule function that loops is stopped while it is checked
      local t = assert(live.read("return { ppo = { lr = function(p) while true do end end } }", "t.lua"))
      live.LIMITS.instructions = 1e6
      local todo
      todo, err = live.check(defaults(), t, "", "t.lua")
      live.LIMITS.instructions = saved
      assert.is_nil(todo)
      assert.matches("took too long", err)
      assert.truthy(os.clock() - t0 < 5, "the bounds took " .. (os.clock() - t0) .. " s")
      -- memory, with a generous instruction budget
      local kib = live.LIMITS.memory_kib
      live.LIMITS.memory_kib = 4096
      _, err = live.read("local t = {}\nfor i = 1, 1e9 do t[i] = {i, i, i} end", "t.lua")
      local _, err2 = live.read("return { name = string.rep('x', 1e9) }", "t.lua")
      live.LIMITS.memory_kib = kib
      assert.equal("t.lua:2: uses too much memory: more than 4096 KiB", err)
      assert.matches("^t.lua:1: string.rep: 1000000000 bytes is over", err2)
      -- the sandbox's string table is a copy: the file cannot change moonrl's
      live.read("string.format = nil; return {}", "t.lua")
      assert.is_function(string.format)
    end)
  end)

  describe("checking against the values in force", function()
    it("keeps only what differs, refuses a changed cold key and a bad value, naming the line", function()
      local cfg = defaults()
      local text = "return {\n  ppo = {\n    lr = 1e-4,\n    epochs = " .. cfg.ppo.epochs .. ",\n  },\n  log = { interval = 1 },\n}\n"
      local todo = assert(live.check(cfg, assert(live.read(text, "t.lua")), text, "t.lua"))
      assert.same({ { key = "ppo.lr", value = 1e-4 } }, todo)   -- epochs and interval are in force already

      text = "return {\n  ppo = {\n    lr = 1e-4,\n    epochs = 9,\n  },\n}\n"
      local _, err = live.check(cfg, assert(live.read(text, "t.lua")), text, "t.lua")
      assert.equal("t.lua:4: ppo.epochs = 9 needs a restart: it is not hot (it cannot change while the run is going)", err)

      text = "return {\n  ppo = { lr = 1e-4 },\n  ['ppo.clip'] = -1,\n}\n"
      _, err = live.check(cfg, assert(live.read(text, "t.lua")), text, "t.lua")
      assert.equal("t.lua:3: ppo.clip = -1 is out of range: accepted 0 .. 10", err)

      -- two keys fine alone, wrong together with what is in force
      text = "return { alerts = { memory_warning = 0.99 } }"
      _, err = live.check(cfg, assert(live.read(text, "t.lua")), text, "t.lua")
      assert.matches("memory_warning = 0.99 is above alerts.memory_critical = 0.95", err)

      -- the same function source is not a change; another one is
      cfg.ppo.lr = assert(live.read("return { ppo = { lr = function(p) return 1e-3 * (1 - p) end } }", "t.lua"))["ppo.lr"]
      assert.same({}, live.check(cfg, assert(live.read("return { ppo = { lr = function(p) return 1e-3 * (1 - p) end } }", "t.lua")), "", "t.lua"))
      assert.equal(1, #live.check(cfg, assert(live.read("return { ppo = { lr = function(p) return 2e-3 * (1 - p) end } }", "t.lua")), "", "t.lua"))
    end)
  end)

  describe("watching", function()
    local function wait_reads(w, n)
      support.run_until(function() return w.reads >= n end, 5000)
    end

    for _, poll in ipairs({ false, true }) do
      it("applies each save, all or nothing" .. (poll and " (polling)" or " (fs_event on the directory)"), function()
        local run = fake_run(dir)
        local path = dir .. "/tweaks.lua"
        save(path, "return { ppo = { lr = 1e-4 } }\n")
        local saved_poll = live.POLL_MS
        live.POLL_MS = 20
        local w = live.watch(run, path, { poll = poll })
        assert.equal(poll, w.fs_poll ~= nil)
        assert.equal(1, w.reads)                                   -- read once at start
        assert.same({ { key = "ppo.lr", value = 1e-4, source = "live " .. path } }, run.sets)

        -- a save that sets a good key and a cold one: nothing changes
        support.write_file(path, "return {\n  ppo = { lr = 5e-5 },\n  env = { grid_size = 9 },\n}\n")  -- in place
        wait_reads(w, 2)
        assert.equal(1, #run.sets)
        assert.equal(1e-4, run.cfg.ppo.lr.from)
        assert.matches("tweaks.lua:3: env.grid_size = 9 needs a restart", w.last_error)
        assert.matches("^moonrl: live .*not applied, the values in force stay:\n  .*tweaks.lua:3: env.grid_size", run.said[#run.said])

        save(path, "return {\n  ppo = { lr = 5e-5 },\n  log = { interval = 3 },\n}\n")
        wait_reads(w, 3)
        assert.is_nil(w.last_error)
        assert.same({ "ppo.lr", "log.interval" }, { run.sets[2].key, run.sets[3].key })
        assert.equal(5e-5, run.cfg.ppo.lr.from)

        -- the same text saved again is not read again; reread (SIGHUP) reads it
        save(path, "return {\n  ppo = { lr = 5e-5 },\n  log = { interval = 3 },\n}\n")
        local t = uv.new_timer(); local fired = false
        t:start(150, 0, function() fired = true end)
        support.run_until(function() return fired end)
        t:close()
        assert.equal(3, w.reads)
        assert.equal(1, live.reread())
        assert.equal(4, w.reads)
        assert.equal(3, #run.sets)                                 -- nothing differs
        assert.matches("nothing differs", run.lines[#run.lines])
        w:close()
        live.POLL_MS = saved_poll
        save(path, "return { ppo = { lr = 1e-5 } }\n")
        uv.run("nowait")
        assert.equal(4, w.reads)
        assert.equal(0, live.reread())                             -- closed: nothing watched
      end)
    end

    it("re-reads on live.reread(), what moonrl.runtime.signals' SIGHUP handler calls, while a file is watched", function()
      -- (a real SIGHUP to a run is in the end-to-end case below, in the binary)
      local run = fake_run(dir)
      local path = dir .. "/tweaks.lua"
      support.write_file(path, "return {}\n")
      local w = live.watch(run, path)
      assert.equal(1, w.reads)
      assert.equal(1, live.reread())
      assert.equal(2, w.reads)
      w:close()
      uv.run("nowait")   -- the handles' close callbacks
    end)
  end)
end)

describe("moonrl.run.changes", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  it("records a change once the trainer names its update, in train.log, the sinks and changes.lua", function()
    local events = {}
    local run = fake_run(dir)
    run.sinks = { { name = "jsonl", sink = { event = function(_, e) events[#events + 1] = e end } } }
    local rec = Changes.new(run)
    assert.same({}, assert(Changes.load(dir .. "/changes.lua")))
    local lin = { kind = "linear", from = 3e-4, to = 1e-4 }
    local const = { kind = "constant", from = 1e-4, to = 1e-4 }
    rec:set("ppo.lr", lin, const, "live tweaks.lua", 1)
    rec:set("ppo.clip", { kind = "constant", from = 0.2, to = 0.2 }, { kind = "constant", from = 0.1, to = 0.1 }, nil, 2)
    assert.same({}, rec.list)                                     -- not in force yet
    rec:hot(11, nil, 1)                                           -- the thread took set 1 after update 11
    run.updates = 14
    rec:set("log.interval", 1, 10, "ctl", nil)                    -- a Lua key: from the next update the loop sees
    rec:hot(15, "hot parameters refused: test", 2)
    rec:set("ppo.vf_coef", 0.5, 0.25, "run:set", 3)
    rec:finish()                                                  -- ended before set 3 reached an update
    assert.same({
      "update 12: ppo.lr linear(0.0003, 0.0001) -> 0.0001 (live tweaks.lua)",
      "update 15: log.interval 1 -> 10 (ctl)",
      "not applied: ppo.clip -> 0.1 (run:set): the engine refused it: hot parameters refused: test",
      "not applied: ppo.vf_coef -> 0.25 (run:set): the run ended before another update",
    }, run.lines)
    assert.same({ event = "change", update = 12, key = "ppo.lr", old = lin, new = 1e-4, source = "live tweaks.lua" },
      events[1])
    assert.equal(2, #events)
    local back = assert(Changes.load(dir .. "/changes.lua"))
    assert.same({
      { update = 12, key = "ppo.lr", value = 1e-4, old = lin, source = "live tweaks.lua" },
      { update = 15, key = "log.interval", value = 10, old = 1, source = "ctl" },
    }, back)
    assert.truthy(json.encode(events[2]))
  end)

  it("keeps, on a resume from update k, the changes in force by k as written and drops the later ones", function()
    local run = fake_run(dir)
    local rec = Changes.new(run)
    local path = support.write_file(dir .. "/t.lua", "return {\n  f = function(p) return 1e-3 * (1 - p) end,\n}\n")
    local f = assert(config.load_file(path)).f
    rec:set("ppo.lr", { kind = "constant", from = 1e-4, to = 1e-4 }, f, "live t.lua", nil)   -- update 1
    run.updates = 6
    rec:set("log.interval", 1, 10, "ctl", nil)                                                -- update 7
    run.updates = 9
    rec:set("hooks.on_update", nil, function() return run end, "run:set", nil)                -- update 10, a note
    assert.equal(3, #assert(Changes.load(dir .. "/changes.lua")))
    os.remove(path)                                            -- the source is in changes.lua, not needed again
    Changes.new(fake_run(dir), 20)                             -- all kept, the note's entry (two lines) whole
    local all = assert(Changes.load(dir .. "/changes.lua"))
    assert.equal(3, #all)
    assert.matches("^the function at .* is not saved", all[3].note)
    local run2 = fake_run(dir)
    run2.updates = 9
    local rec2 = Changes.new(run2, 9)                          -- resumed from update 9's checkpoint
    local back = assert(Changes.load(dir .. "/changes.lua"))
    assert.equal(2, #back)
    assert.equal(f(0.5), back[1].value(0.5))
    assert.equal(10, back[2].value)
    rec2:set("ppo.clip", 0.2, 0.1, "ctl", nil)                 -- update 10 of the resumed run
    back = assert(Changes.load(dir .. "/changes.lua"))
    assert.same({ 1, 7, 10 }, { back[1].update, back[2].update, back[3].update })
    assert.equal("ppo.clip", back[3].key)
    support.write_file(dir .. "/changes.lua", "return { broken")
    local run4 = fake_run(dir)
    Changes.new(run4, 20)                                      -- not as moonrl writes it: kept aside, a new one
    assert.same({}, assert(Changes.load(dir .. "/changes.lua")))
    assert.matches("^changes.lua was not as moonrl writes it: kept as .*changes.lua.old%-", run4.lines[1])
  end)

  it("writes a function by its source, or a note that it is not saved", function()
    local run = fake_run(dir)
    local rec = Changes.new(run)
    local path = support.write_file(dir .. "/t.lua", "return {\n  f = function(p) return 1e-3 * (1 - p) end,\n}\n")
    local f = assert(config.load_file(path)).f
    rec:remember(path, support.read_file(path))
    support.write_file(path, "-- edited since\n")                 -- the remembered text is what counts
    local calls = {}
    rec:set("ppo.lr", { kind = "constant", from = 1e-4, to = 1e-4 }, f, "live t.lua", nil)
    rec:set("hooks.on_update", nil, function(m) calls[#calls + 1] = m end, "run:set", nil)
    local back = assert(Changes.load(dir .. "/changes.lua"))
    assert.equal(2, #back)
    assert.equal(f(0.25), back[1].value(0.25))
    assert.is_nil(back[2].value)
    assert.matches("^the function at .*live_spec.lua:%d+ is not saved %(it uses the upvalue 'calls'", back[2].note)
  end)
end)

describe("a running job with a live tweak file", function()
  local dir
  before_each(function() dir = have_bin and support.tmpdir() or nil end)
  after_each(function() if dir then support.rm_rf(dir) end end)

  local function tiny(d, updates, more)
    return string.format([[{
      name = "tiny", dir = %q, device = "cpu", threads = 1, seed = 7,
      total_steps = 64 * %d, warmup = { updates = 0 },
      env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 },
      policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
      ppo = { rollout_steps = 8 },
      log = { console = false, checkpoint_interval = 0, checkpoint_keep = 2 },
      eval = { num_envs = 8, steps = 32 },
      %s
    }]], d, updates, more or "")
  end

  it("changes ppo.lr at the next update on a save, refuses broken saves, and records every change", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local tw = dir .. "/tweaks.lua"
    support.write_file(dir .. "/s.lua", [[
      local moonrl = require "moonrl"
      local uv = require "luv"
      local function save(text)
        local f = assert(io.open("]] .. tw .. [[.swp", "w")); f:write(text); f:close()
        assert(os.rename("]] .. tw .. [[.swp", "]] .. tw .. [["))
      end
      local seen = 0
      local run = moonrl.train(]] .. tiny(dir .. "/r", 100000, [[
        live = "]] .. tw .. [[", hooks = { on_update = function() seen = seen + 1 end },]]) .. [[,
        { hardware = "ci", level = "basic" })
      local w = run.live
      local function wait_read(n) while w.reads < n do moonrl.wait(0.002) end end
      local function wait_changes(n) while #run.changes.list < n do moonrl.wait(0.002) end end
      while seen < 3 do moonrl.wait(0.002) end
      print("no_file_yet=" .. w.reads)
      save("return {\n  ppo = { lr = 1e-4 },\n}\n")
      wait_changes(1)
      save("return {\n  ppo = { lr = 2e-4,\n}\n")                           -- syntax error
      wait_read(2)
      print("syntax=" .. w.last_error)
      save("return {\n  ppo = {\n    lr = 2e-4,\n    max_grad_norm = -1,\n  },\n}\n")  -- a bad value
      wait_read(3)
      print("bad=" .. w.last_error)
      save("return {\n  ppo = { lr = 2e-4 },\n  env = { grid_size = 32 },\n}\n")  -- a cold key
      wait_read(4)
      print("cold=" .. w.last_error)
      print("lr_in_force=" .. run:get("ppo.lr").from)
      -- SIGHUP re-reads the unchanged file: refused again
      uv.kill(uv.os_getpid(), "sighup")
      wait_read(5)
      -- a script's own change, with and without a label
      assert(run:set("ppo.ent_coef", 0.02, "my script"))
      assert(run:set("alerts.sps_min", 1))
      wait_changes(3)
      local at = seen
      while seen < at + 3 do moonrl.wait(0.002) end
      run:stop({ checkpoint = false })
      run:wait()
      for i, c in ipairs(run.changes.list) do print("change_" .. c.key:gsub("%.", "_") .. "=" .. c.update .. " " .. c.source) end
      print("sorted=" .. tostring(run.changes.list[2].update <= run.changes.list[3].update))
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = {}
    for k, v in out:gmatch("([%w_]+)=([^\n]*)") do f[k] = v end
    assert.equal("0", f.no_file_yet)
    assert.equal(tw .. ":4: syntax error: '}' expected (to close '{' at line 1) near '<eof>'", f.syntax)
    assert.equal(tw .. ":4: ppo.max_grad_norm = -1 is out of range: accepted 1e-08 .. 1000000", f.bad)
    assert.equal(tw .. ":3: env.grid_size = 32 needs a restart: it is not hot (it cannot change while the run is going)",
      f.cold)
    assert.equal("0.0001", f.lr_in_force)
    assert.truthy(err:find("not applied, the values in force stay", 1, true), err)

    -- metrics.jsonl: lr changes exactly at the update the change names
    local lrs, events = {}, {}
    for _, line in ipairs(support.lines(support.read_file(dir .. "/r/metrics.jsonl"))) do
      local m = assert(json.decode(line))
      if m.event then events[#events + 1] = m else lrs[m.update] = m.lr end
    end
    local from = tonumber(f.change_ppo_lr:match("^(%d+) live "))
    assert.truthy(from and from > 3, f.change_ppo_lr)
    assert.is_true(math.abs(lrs[from - 1] - 1e-4) > 1e-6, "lr before the change: " .. lrs[from - 1])
    for u = from, #lrs do assert.is_true(math.abs(lrs[u] - 1e-4) < 1e-9, "update " .. u .. ": lr " .. lrs[u]) end
    assert.equal("my script", f.change_ppo_ent_coef:match("^%d+ (.*)$"))
    assert.equal("run:set", f.change_alerts_sps_min:match("^%d+ (.*)$"))
    assert.equal("true", f.sorted)

    assert.equal(3, #events)
    assert.same({ "change", from, "ppo.lr", 1e-4, "live " .. tw },
      { events[1].event, events[1].update, events[1].key, events[1].new, events[1].source })
    assert.same({ kind = "linear", from = 3e-4, to = 1e-4 }, events[1].old)

    local log = support.read_file(dir .. "/r/train.log")
    assert.truthy(log:find("update " .. from .. ": ppo.lr linear(0.0003, 0.0001) -> 0.0001 (live " .. tw .. ")", 1, true), log)
    assert.truthy(log:find(": ppo.ent_coef linear(0.1, 0.001) -> 0.02 (my script)", 1, true), log)
    assert.truthy(log:find(": alerts.sps_min 0 -> 1 (run:set)", 1, true), log)
    local _, refusals = log:gsub("tweaks.lua:3: env.grid_size = 32 needs a restart", "")
    assert.equal(2, refusals, log)                                -- on the save, and on SIGHUP

    local changes = assert(Changes.load(dir .. "/r/changes.lua"))
    assert.equal(3, #changes)
    assert.same({ update = from, key = "ppo.lr", value = 1e-4, old = { kind = "linear", from = 3e-4, to = 1e-4 },
      source = "live " .. tw }, changes[1])
    local ent = changes[2].key == "ppo.ent_coef" and changes[2] or changes[3]
    assert.same({ "ppo.ent_coef", 0.02, "my script" }, { ent.key, ent.value, ent.source })
  end)

  it("moonrl train --live reads the file at start, and config.lua keeps a function schedule by its source", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    support.write_file(dir .. "/exp.lua", "return " .. tiny("r", 12, [[
      ppo = { rollout_steps = 8, clip = function(p) return 0.2 - 0.1 * p end },]]):gsub("ppo = { rollout_steps = 8 },", ""))
    support.write_file(dir .. "/t.lua", "return { ['ppo.vf_coef'] = 0.25 }\n")
    local rc, out, err = moonrl("train exp.lua --hardware ci --level basic --live t.lua --no-eval", dir)
    assert.are.equal(0, rc, out .. err)
    local changes = assert(Changes.load(dir .. "/r/changes.lua"))
    assert.equal(1, #changes)
    assert.same({ "ppo.vf_coef", 0.25, 0.5, "live t.lua" },
      { changes[1].key, changes[1].value, changes[1].old, changes[1].source })
    local saved = support.read_file(dir .. "/r/config.lua")
    assert.truthy(saved:find("clip = function(p) return 0.2 - 0.1 * p end,", 1, true), saved)
    assert.truthy(saved:find('live = "t.lua",', 1, true), saved)
    assert.equal(0.2 - 0.1 * 0.5, assert(config.load_file(dir .. "/r/config.lua")).ppo.clip(0.5))
  end)
end)

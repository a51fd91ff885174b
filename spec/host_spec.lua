-- The moonrl executable as a user meets it: the shared event loop, error
-- reporting, the command line, and runs driven from scripts (hooks, two runs
-- at once, pause/resume/stop, live changes). Each case runs the built binary
-- (build/moonrl, or $MOONRL_BIN) on a script written to a temporary folder,
-- with a network small enough that an update takes milliseconds.

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil

-- Runs the binary; returns exit code, stdout, stderr.
local function moonrl(args, dir, env)   -- env: "NAME=value ..." for the process, or nil
  local out, err, rc = dir .. "/stdout", dir .. "/stderr", dir .. "/rc"
  local cmd = string.format("cd %q && %s timeout 120 %q %s >%q 2>%q; echo $? >%q",
    dir, env and ("env " .. env) or "", BIN, args, out, err, rc)
  os.execute(cmd)
  if (os.getenv("MOONRL_SPEC_SHOW") or "") ~= "" then   -- debugging a case: see what the script printed
    io.stderr:write("\n$ moonrl ", args, "\n", support.read_file(out) or "", support.read_file(err) or "")
  end
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

local function abs(path)
  if path:sub(1, 1) == "/" then return path end
  return (os.getenv("PWD") or ".") .. "/" .. path
end
BIN = abs(BIN)

-- A config table (as Lua source) whose updates take milliseconds on one core.
local function tiny(dir, extra)
  return string.format([[{
    name = "tiny", dir = %q, device = "cpu", threads = 1, seed = 7,
    total_steps = 64 * %d, warmup = { updates = 0 },
    env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 },
    policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
    ppo = { rollout_steps = 8 },
    log = { console = false, checkpoint_interval = 0, checkpoint_keep = 2 },
    eval = { num_envs = 8, steps = 32 },
    %s
  }]], dir, extra and extra.updates or 20, extra and extra.more or "")
end

local function script(dir, name, text)
  return support.write_file(dir .. "/" .. name, "local moonrl = require 'moonrl'\n" ..
    "local OPTS = { hardware = 'ci', level = 'basic' }\n" .. text)
end

-- "key=value" lines the scripts print, as a table of strings.
local function facts(stdout)
  local t = {}
  for k, v in stdout:gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
  return t
end

describe("moonrl host", function()
  local dir
  before_each(function()
    dir = have_bin and support.tmpdir() or nil
  end)
  after_each(function()
    if dir then support.rm_rf(dir) end
  end)

  it("prints its version", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out = moonrl("version", dir)
    assert.are.equal(0, rc)
    assert.truthy(out:match("^moonrl %d+%.%d+%.%d+\n"), out)
    assert.truthy(out:find("LuaJIT", 1, true))
    assert.truthy(out:find("libuv", 1, true))
  end)

  it("has --help for the program and each command, with bench, ctl and ps", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out = moonrl("--help", dir)
    assert.are.equal(0, rc)
    for _, c in ipairs({ "train", "run", "eval", "doctor", "version" }) do
      assert.truthy(out:find("\n  " .. c, 1, true), c .. " missing from:\n" .. out)
    end
    assert.truthy(out:find("\n  bench", 1, true))
    assert.truthy(out:find("\n  ctl RUN_DIR <command> [args]", 1, true))
    assert.truthy(out:find("\n  ps [DIR]", 1, true))
    for _, c in ipairs({ "train", "eval", "doctor", "run", "version", "ctl", "ps" }) do
      local crc, cout = moonrl(c .. " --help", dir)
      assert.are.equal(0, crc, c)
      assert.truthy(cout:find("usage: moonrl " .. c, 1, true), cout)
    end
  end)

  it("bench measures the environment and training and reports JSON rows", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out = moonrl("bench env --envs 256 --reps 2 --json --device cpu", dir)
    assert.are.equal(0, rc, out)
    local row = require("moonrl.formats.json").decode(out:match("{.-}\n"))
    assert.are.equal("env", row.row)
    assert.is_true(row.rate.median > 0 and row.rate.min <= row.rate.median and row.rate.median <= row.rate.max)
    rc, out = moonrl("bench train --net small --envs 16 --rollout 16 --reps 1 --json --device cpu", dir)
    assert.are.equal(0, rc, out)
    assert.truthy(out:find('"time_update"', 1, true), out)
    row = require("moonrl.formats.json").decode(out:match("{.-}\n") or out)
    -- the small net's multiply-adds per sample, by hand from its layers:
    -- convs 121*9*2*16 + 121*9*16*32, fc 3872*128, actor 128*8, critic (128+2+242)*128 + 128
    assert.are.equal(34848 + 557568 + 495616 + 1024 + 47616 + 128, row.forward_macs)
    assert.are.equal("fp32", row.precision)
    assert.is_true(row.update_tflops > 0 and row.time_idle >= 0, out)
    -- the rollout's split: both parts measured, together within the rollout
    assert.is_true(row.time_env > 0 and row.time_inference > 0, out)
    assert.is_true(row.time_env + row.time_inference <= row.time_rollout * 1.0001, out)
    -- the update's split: each part measured, together within the update
    local upd = 0
    for _, k in ipairs({ "time_gather", "time_forward", "time_loss", "time_backward", "time_optimizer" }) do
      assert.is_true(row[k] > 0, k .. ": " .. out)
      upd = upd + row[k]
    end
    assert.is_true(upd <= row.time_update * 1.0001, out)
    local errout
    rc, out, errout = moonrl("bench train --precision fp64", dir)
    assert.are.equal(2, rc)
    assert.truthy(errout:find("--precision = fp64: accepted fp32, bf16, fp16", 1, true), errout)
    -- bf16 on the cpu: runs where oneDNN has bf16 kernels for this CPU; with
    -- its ISA capped below AVX512-BF16 (oneDNN's own switch) it is refused,
    -- saying what it needs
    local bf16_args = "bench train --device cpu --precision bf16 --net small --envs 16 --rollout 16 --reps 1 --json"
    rc, out, errout = moonrl(bf16_args, dir)
    if rc == 0 then
      row = require("moonrl.formats.json").decode(out:match("{.-}\n") or out)
      assert.are.equal("bf16", row.precision)
    else
      assert.truthy(errout:find("bf16 needs a CPU with AVX512-BF16 or AMX", 1, true), errout)
    end
    rc, out, errout = moonrl(bf16_args, dir, "ONEDNN_MAX_CPU_ISA=AVX512_CORE")
    assert.are.equal(1, rc, out .. errout)
    assert.truthy(errout:find("precision = bf16 needs the cuda backend; the cpu backend accepts fp32 only " ..
      "(bf16 needs a CPU with AVX512-BF16 or AMX)", 1, true), errout)
    assert.falsy(errout:find("traceback", 1, true), errout)
    rc, out, errout = moonrl("bench --net huge", dir)
    assert.are.equal(2, rc)
    assert.truthy(errout:find("--net = huge: accepted ref, small", 1, true), errout)
    rc, out, errout = moonrl("bench --compare --rows env,gpu", dir)
    assert.are.equal(2, rc)
    assert.truthy(errout:find("--rows: 'gpu': accepted env, small, ref", 1, true), errout)
  end)

  it("bench --compare runs moonrl and the PyTorch reference side by side", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local py, why = support.bench_python()
    if not py then return pending(why) end
    local rc, out = moonrl("bench --compare --rows env --envs 256 --reps 1 --json --device cpu", dir)
    assert.are.equal(0, rc, out)
    local row = require("moonrl.formats.json").decode(out:match("{.-}\n") or out)
    assert.are.equal("env", row.row)
    assert.is_true(row.moonrl.median > 0 and row.reference.median > 0, out)
    assert.is_true(math.abs(row.ratio - row.moonrl.median / row.reference.median) < 1e-9 * row.ratio, out)
  end)

  it("rejects bad arguments with exit code 2 and a message naming them", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local cases = {
      { "train --bogus", "'--bogus'", "--set" },
      { "train --dir", "--dir needs a value", "directory" },
      { "eval", "missing the checkpoint", "moonrl eval" },
      { "eval nowhere.mrck", "'nowhere.mrck' not found", "" },
      { "frobnicate", "unknown command 'frobnicate'", "train" },
      { "version extra", "unexpected argument 'extra'", "" },
      { "doctor --output x.txt", "x.txt", ".lua" },
      { "", "usage: moonrl", "" },
    }
    support.write_file(dir .. "/c.mrck", "not a checkpoint")
    table.insert(cases, { "eval c.mrck --envs many", "--envs many", "integer" })
    table.insert(cases, { "eval c.mrck --mode proxi", "--mode proxi", "did you mean proxy" })
    for _, c in ipairs(cases) do
      local rc, _, err = moonrl(c[1], dir)
      assert.are.equal(2, rc, c[1] .. ": " .. err)
      assert.truthy(err:find(c[2], 1, true), c[1] .. ": " .. err)
      assert.truthy(err:find(c[3], 1, true), c[1] .. ": " .. err)
    end
  end)

  it("gives scripts the host's loop: a luv timer fires while a run trains", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "s.lua", [[
      local uv = require "luv"
      local seq = {}
      local t = uv.new_timer()
      t:start(1, 1, function() seq[#seq + 1] = "t" end)
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 60, more = [[
        hooks = { on_update = function() seq[#seq + 1] = "u" end },]] }) .. [[, OPTS)
      local s = run:wait()
      t:close()
      local text = table.concat(seq)
      print("status=" .. s.status)
      print("updates=" .. #text:gsub("[^u]", ""))
      print("between=" .. tostring(text:find("u[^u]*t[^u]*u") ~= nil))
      print("same_loop=" .. tostring(require("luv") == package.loaded.luv))
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("done", f.status)
    assert.are.equal("60", f.updates)
    assert.are.equal("true", f.between, "no timer tick between two updates")
    assert.are.equal("true", f.same_loop)
  end)

  it("keeps serving timers while hooks run slower than the updates arrive", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    -- on_episode_stats takes 8 ms, an update about 1 ms: the events pile up, and
    -- the loop must still turn between them (before, a 50 ms timer was silent
    -- for the whole run: the loop drained the events as fast as they came)
    script(dir, "s.lua", [[
      local uv = require "luv"
      local function busy(ms) local t = uv.hrtime() while (uv.hrtime() - t) < ms * 1e6 do end end
      local last, worst, ticks, hooks = nil, 0, 0, 0
      local t = uv.new_timer()
      t:start(50, 50, function()
        local now = uv.hrtime()
        if last then worst = math.max(worst, (now - last) / 1e6) end
        last, ticks = now, ticks + 1
      end)
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 400, more = [[
        hooks = { on_episode_stats = function() hooks = hooks + 1; busy(8) end },]] }) .. [[, OPTS)
      local s = run:wait()
      t:close()
      print("status=" .. s.status)
      print("hooks=" .. hooks)
      print("ticks=" .. ticks)
      print("worst_ms=" .. math.floor(worst))
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("done", f.status)
    assert.truthy(tonumber(f.hooks) >= 200, out)   -- the hooks' work: 1.6 s at least
    assert.truthy(tonumber(f.ticks) >= 10, "the timer hardly fired: " .. out)
    assert.truthy(tonumber(f.worst_ms) < 1500, "the loop was held: " .. out)
  end)

  it("resolves num_envs = auto with the engine's own memory plan", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "s.lua", [[
      local engine = require "moonrl.engine"
      local config = require "moonrl.config"
      local function gpu(total) return function()
        return { gpus = 1, gpu_memory = total, gpu_memory_free = total, fit_num_envs = engine.fit_num_envs } end end
      local r, notes = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" }, detect = gpu(8 * 2 ^ 30) }
      print("n16=" .. r.env.num_envs)
      print("note=" .. notes[1])
      r = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto", "precision=fp32" }, detect = gpu(8 * 2 ^ 30) }
      print("n16fp32=" .. r.env.num_envs)
      r = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" }, detect = gpu(400 * 2 ^ 30) }
      print("n400=" .. r.env.num_envs)
      local _, err = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" }, detect = gpu(2 ^ 28) }
      print("err=" .. tostring(err))
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    local n, n32, n400 = tonumber(f.n16), tonumber(f.n16fp32), tonumber(f.n400)
    -- bf16 (the default level) halves the activations: more fit than in fp32; both multiples of 64
    assert.is_true(n % 64 == 0 and n32 % 64 == 0 and n > n32 and n32 >= 192, out)
    -- a huge card: bounded by the kernels' 32-bit buffer indexing, not by memory
    assert.is_true(n400 > n and n400 % 64 == 0, out)
    assert.truthy(f.note:find("engine's plan", 1, true), out)
    assert.truthy(f.err:find("not even 64 environments fit", 1, true), out)
  end)

  it("reports an error in a callback with a traceback and carries on", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "s.lua", [[
      local uv = require "luv"
      local function broken() local x = nil; return x.field end
      local t = uv.new_timer()
      t:start(5, 0, function() t:close(); broken() end)
      moonrl.wait(0.05)
      print("alive=yes")
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    assert.are.equal("yes", facts(out).alive)
    assert.truthy(err:find("error in a callback", 1, true), err)
    assert.truthy(err:find("attempt to index local 'x'", 1, true), err)
    assert.truthy(err:find("stack traceback:", 1, true), err)
    assert.truthy(err:find("in function 'broken'", 1, true), err)
  end)

  it("exits non-zero with the traceback when the main script fails, also after yielding", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "a.lua", "local function explode() error('main boom') end\nexplode()\n")
    local rc, _, err = moonrl("run a.lua", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("main boom", 1, true), err)
    assert.truthy(err:find("stack traceback:", 1, true), err)
    assert.truthy(err:find("in function 'explode'", 1, true), err)

    -- A run is going when the script fails: it is stopped with a final
    -- checkpoint and the process still exits 1, promptly.
    script(dir, "b.lua", "local run = moonrl.train(" .. tiny(dir .. "/r", { updates = 100000 }) ..
      ", OPTS)\nmoonrl.wait(0.1)\nerror('late boom')\n")
    local t0 = os.time()
    rc, _, err = moonrl("run b.lua", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("late boom", 1, true), err)
    assert.truthy(os.time() - t0 < 30)
    assert.truthy(#support.files(dir .. "/r/checkpoints") >= 1)
  end)

  it("keeps training when an on_update hook fails, and reports the failure once", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    -- faults.max_hook_failures = 0: never disabled (faults_spec has the limit)
    script(dir, "s.lua", [[
      local calls = 0
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 12, more = [[
        faults = { max_hook_failures = 0 },
        hooks = { on_update = function(m) calls = calls + 1; error("hook boom " .. m.update) end },]] }) .. [[, OPTS)
      local s = run:wait()
      print("status=" .. s.status)
      print("updates=" .. s.updates)
      print("calls=" .. calls)
      print("failures=" .. s.hook_errors.on_update)
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("done", f.status)
    assert.are.equal("12", f.updates)
    assert.are.equal("12", f.calls)
    assert.are.equal("12", f.failures)
    local _, n = err:gsub("hooks.on_update failed", "")
    assert.are.equal(1, n, err)
    assert.truthy(err:find("hook boom 1", 1, true), err)
    assert.truthy(err:find("stack traceback:", 1, true), err)
  end)

  it("trains two runs at once, each on its own thread", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "s.lua", [[
      local seq = {}
      local a, b, a_paused, b_trained
      -- a waits (paused) after its first update until b has trained one, so
      -- the two overlap however fast an update is; a pause does not stop b
      local function cfg(name)
        local c = ]] .. tiny(dir .. "/NAME", { updates = 40 }) .. [[
        c.dir = c.dir:gsub("NAME", name)
        c.hooks = { on_update = function(m)
          seq[#seq + 1] = name
          -- (hooks run one at a time on the loop: the flags need no lock)
          if name == "a" and m.update == 1 and not b_trained then a_paused = true; a:pause() end
          if name == "b" and m.update == 1 then
            b_trained = true
            if a_paused then a:resume() end
          end
        end }
        return c
      end
      a = moonrl.train(cfg("a"), OPTS)
      b = moonrl.train(cfg("b"), OPTS)
      print("running=" .. #moonrl.runs())
      local sa, sb = a:wait(), b:wait()
      local text = table.concat(seq, " ")
      print("a=" .. sa.status .. " " .. sa.updates)
      print("b=" .. sb.status .. " " .. sb.updates)
      -- Interleaved: a's first update comes before b's last and the reverse.
      local function first(n) return (text:find(n)) end
      local function last(n) return #text - (text:reverse():find(n)) + 1 end
      print("overlap=" .. tostring(first("a") < last("b") and first("b") < last("a")))
      print("dirs=" .. a.dir .. " " .. b.dir)
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("2", f.running)
    assert.are.equal("done 40", f.a)
    assert.are.equal("done 40", f.b)
    assert.are.equal("true", f.overlap)
    for _, r in ipairs({ "a", "b" }) do
      local lines = support.lines(support.read_file(dir .. "/" .. r .. "/metrics.jsonl"))
      assert.are.equal(40, #lines)
    end
  end)

  it("pauses, resumes and stops a run at update boundaries", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "s.lua", [[
      local uv = require "luv"
      local seen = 0
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 100000, more = [[
        hooks = { on_update = function() seen = seen + 1 end },]] }) .. [[, OPTS)
      while seen < 3 do moonrl.wait(0.005) end
      run:pause()
      -- "paused" comes after the metrics of the last update before the pause.
      while run.status ~= "paused" do moonrl.wait(0.002) end
      local at_pause = seen
      print("status_paused=" .. run.status)
      moonrl.wait(0.3)
      print("moved_while_paused=" .. (seen - at_pause))
      run:resume()
      moonrl.wait(0.1)
      print("status_resumed=" .. run.status)
      print("moved_after_resume=" .. tostring(seen > at_pause))
      local path = run:checkpoint("]] .. dir .. [[/asked.mrck")
      print("asked=" .. tostring(path))
      run:stop()
      local s = run:wait()
      print("status=" .. s.status)
      print("stopped_early=" .. tostring(s.updates < 100000))
      print("final=" .. tostring(s.checkpoint))
      print("alive=" .. tostring(run:alive()))
      print("set_after=" .. tostring(select(2, run:set("ppo.lr", 0.001))))
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("paused", f.status_paused)
    assert.are.equal("0", f.moved_while_paused)
    assert.are.equal("running", f.status_resumed)
    assert.are.equal("true", f.moved_after_resume)
    assert.are.equal(dir .. "/asked.mrck", f.asked)
    assert.truthy(support.read_file(dir .. "/asked.mrck"))
    assert.are.equal("stopped", f.status)
    assert.are.equal("true", f.stopped_early)
    assert.truthy(f.final:match("/r/checkpoints/update_%d+%.mrck$"), f.final)
    assert.truthy(support.read_file(f.final))
    assert.are.equal("false", f.alive)
    assert.truthy(f.set_after:find("finished", 1, true))
  end)

  it("pauses exactly where its agent-steps reach a mark (pause_at_steps, run:pause{at_steps =}), not at its end", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    -- no on_update hook: the trainer runs ahead of the loop, so only the thread's own mark
    -- can stop it at the update that reaches the count (64 agent-steps an update here)
    script(dir, "s.lua", [[
      local function paused(run)
        while run.status ~= "paused" and run:alive() do moonrl.wait(0.002) end
        return run.status == "paused" and run:metrics().agent_steps or run.status
      end
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 40 }) .. [[,
        { hardware = "ci", level = "basic", pause_at_steps = { 64 * 30, 64 * 3 + 1 } })
      print("first=" .. tostring(paused(run)))
      moonrl.wait(0.2)
      print("held=" .. tostring(run:metrics().agent_steps) .. "," .. run.status)
      run:resume()
      moonrl.wait(0.05)
      print("second=" .. tostring(paused(run)))
      print("bad=" .. select(2, pcall(run.pause, run, { at_steps = 0 })))
      print("bad_list=" .. select(2, pcall(run.pause, run, { at_steps = { 100, 1.5 } })))
      -- a mark at the run's end: it ends rather than pause
      assert(run:pause({ at_steps = 64 * 40 }))
      run:resume()
      local s = run:wait()
      print("status=" .. s.status .. "," .. s.agent_steps)
      print("refused=" .. select(2, pcall(moonrl.train, ]] .. tiny(dir .. "/r2") .. [[, { pause_at_steps = "soon" })))
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal(tostring(64 * 4), f.first, out)   -- the first update that reaches 193
    assert.are.equal(64 * 4 .. ",paused", f.held, out)
    assert.are.equal(tostring(64 * 30), f.second, out)
    assert.truthy(f.bad:find("run:pause: at_steps: 0 is not a whole number of agent-steps > 0", 1, true), f.bad)
    assert.truthy(f.bad_list:find("1.5 is not a whole number", 1, true), f.bad_list)
    assert.are.equal("done," .. 64 * 40, f.status, out)
    assert.truthy(f.refused:find("pause_at_steps: expected agent-steps, got string", 1, true), f.refused)
    local log = support.read_file(dir .. "/r/train.log")
    assert.truthy(log:find("paused after update 4 (256 agent-steps: the mark at 193)", 1, true), log)
    assert.truthy(log:find("paused after update 30 (1920 agent-steps: the mark at 1920)", 1, true), log)
  end)

  it("ends 'done' when total_steps is reached in the same round a stop arrives", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    -- paused, the run holds at a boundary; lowering total_steps to the steps
    -- done and stopping land in the same round: nothing is left to cut short
    script(dir, "s.lua", [[
      local steps, seen = 0, 0
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 100000, more = [[
        hooks = { on_update = function(m) seen = seen + 1 steps = m.agent_steps end },]] }) .. [[, OPTS)
      while seen < 2 do moonrl.wait(0.005) end
      run:pause()
      while run.status ~= "paused" do moonrl.wait(0.002) end
      print("set=" .. tostring(run:set("total_steps", steps)))
      run:stop()
      local s = run:wait()
      print("status=" .. s.status)
      print("steps=" .. tostring(s.agent_steps == steps))
      print("final=" .. tostring(s.checkpoint))
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("true", f.set, out)
    assert.are.equal("done", f.status, out)
    assert.are.equal("true", f.steps, out)
    assert.truthy(f.final:match("/r/checkpoints/update_%d+%.mrck$"), f.final)
  end)

  it("applies run:set of a hot key from the next update and refuses a cold one", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "s.lua", [[
      local lrs = {}
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 100000, more = [[
        hooks = { on_update = function(m) lrs[#lrs + 1] = m.lr end },]] }) .. [[, OPTS)
      while #lrs < 3 do moonrl.wait(0.002) end
      local at_set = #lrs
      print("set=" .. tostring(run:set("ppo.lr", 0.0123)))
      local ok, err = run:set("ppo.epochs", 2)
      print("cold=" .. tostring(ok) .. " " .. tostring(err))
      ok, err = run:set("ppo.lrr", 1)
      print("typo=" .. tostring(ok) .. " " .. tostring(err))
      ok, err = run:set("ppo.lr", 5)
      print("range=" .. tostring(ok) .. " " .. tostring(err))
      while not run.hot_from or #lrs < run.hot_from + 2 do moonrl.wait(0.002) end
      run:stop({ checkpoint = false })
      local s = run:wait()
      local from = run.hot_from
      local before = true
      for i = 1, from - 1 do before = before and lrs[i] ~= 0.0123 end
      local after = true
      for i = from, #lrs do after = after and lrs[i] == 0.0123 end
      print("before_differs=" .. tostring(before))
      print("after_all_new=" .. tostring(after))
      -- Exactly from hot_from on (above). How far that is from what this
      -- script had seen depends on how far the thread was ahead: at most the
      -- updates queued for the loop (core.queue_capacity) plus the one running.
      print("applied_within=" .. tostring(from > at_set and from <= at_set + require("moonrl.core").queue_capacity + 2))
      print("config=" .. tostring(run:get("ppo.lr").from))
      print("no_final=" .. tostring(s.checkpoint))
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("true", f.set)
    assert.truthy(f.cold:match("^nil .*not hot"), f.cold)
    assert.truthy(f.typo:find("did you mean 'ppo.lr'", 1, true), f.typo)
    assert.truthy(f.range:match("^nil .*out of range"), f.range)
    assert.are.equal("true", f.before_differs)
    assert.are.equal("true", f.after_all_new)
    assert.are.equal("true", f.applied_within)
    assert.are.equal("0.0123", f.config)
    assert.are.equal("nil", f.no_final)
  end)

  it("ends a run cleanly on an engine error and keeps the process going", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "s.lua", [[
      local uv = require "luv"
      local seen = 0
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 100000, more = [[
        hooks = { on_update = function() seen = seen + 1 end },]] }) .. [[, OPTS)
      while seen < 2 do moonrl.wait(0.002) end
      -- A requested checkpoint to a path that cannot be written: reported,
      -- training goes on.
      local path, err = run:checkpoint("]] .. dir .. [[/no/such/dir/x.mrck")
      print("asked=" .. tostring(path))
      print("asked_err=" .. tostring(err))
      local at = seen
      while seen < at + 2 do moonrl.wait(0.002) end
      print("alive_after_bad_path=" .. tostring(run:alive()))
      -- The run's own checkpoint folder replaced by a file: the engine
      -- cannot save the final checkpoint, which ends the run with its message.
      assert(uv.fs_rmdir("]] .. dir .. [[/r/checkpoints"))
      io.open("]] .. dir .. [[/r/checkpoints", "w"):close()
      run:stop()
      local s = run:wait()
      print("status=" .. s.status)
      print("error=" .. tostring(s.error))
      print("alive=" .. tostring(run:alive()))
      moonrl.wait(0.02)
      print("after=fine")
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("nil", f.asked)
    assert.truthy(f.asked_err:find("no/such/dir/x.mrck", 1, true), f.asked_err)
    assert.are.equal("true", f.alive_after_bad_path)
    assert.are.equal("error", f.status)
    assert.truthy(f.error:find("checkpoint", 1, true), f.error)
    assert.are.equal("false", f.alive)
    assert.are.equal("fine", f.after)
    assert.truthy(err:find("failed", 1, true), err)
    assert.truthy(support.read_file(dir .. "/r/train.log"):find("finished: error", 1, true))
  end)

  it("applies a Lua function schedule exactly at every update", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    script(dir, "s.lua", [[
      local lrs, prog = {}, {}
      local f = function(p) return 1e-3 * (1 - p) ^ 2 + 1e-5 end
      local run = moonrl.train(]] .. tiny(dir .. "/r", { updates = 25, more = [[
        hooks = { on_update = function(m) lrs[m.update] = m.lr end },]] }) .. [[, OPTS)
      run:set("ppo.lr", f)
      local s = run:wait()
      -- Update k (1-based) runs at progress (k - 1) / total_updates, from
      -- the first update that saw the set on.
      local worst = 0
      print("from=" .. tostring(run.hot_from))
      for k = run.hot_from, s.updates do
        worst = math.max(worst, math.abs(lrs[k] - f((k - 1) / s.updates)) / f((k - 1) / s.updates))
      end
      print("updates=" .. s.updates)
      print("worst=" .. worst)
    ]])
    local rc, out, err = moonrl("run s.lua", dir)
    assert.are.equal(0, rc, err)
    local f = facts(out)
    assert.are.equal("25", f.updates)
    assert.truthy(tonumber(f.from) <= 3, f.from)
    -- The engine may keep the rate in single precision.
    assert.truthy(tonumber(f.worst) < 1e-6, f.worst)
  end)
end)

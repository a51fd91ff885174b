local Console = require("moonrl.run.sinks.console")

local cfg = { total_steps = 40960, env = { num_envs = 64 }, ppo = { rollout_steps = 64 }, log = { interval = 1 } }

-- Stands in for engine.total_updates (the runner passes the engine's count;
-- no engine here): ceil(total_steps / samples per update), an error for a
-- config the engine would refuse.
local function count(c)
  assert(type(c.env.num_envs) == "number", "num_envs not resolved")
  return math.ceil(c.total_steps / (c.env.num_envs * c.ppo.rollout_steps))
end

local function capture()
  local out = {}
  return out, function(s) out[#out + 1] = s end
end

local function metrics(u, extra)
  local m = { update = u, agent_steps = u * 4096, sps = 4096, episodes = 10,
    episode_return_mean = 1.5 + u, efficiency = 0.8 }
  for k, v in pairs(extra or {}) do m[k] = v end
  return m
end

describe("console sink", function()
  it("formats progress, percent, ETA, sps, return and efficiency", function()
    local line = Console.format(metrics(4), cfg, { width = 10, total_updates = count })
    assert.equal("[####------]   40.0%  update 4/10  16,384 steps  ETA 6s  sps 4,096  return 5.50  eff 80.0%", line)
    -- without a count of updates (no engine to ask), just the update
    line = Console.format(metrics(4), cfg, { width = 10 })
    assert.equal("[####------]   40.0%  update 4  16,384 steps  ETA 6s  sps 4,096  return 5.50  eff 80.0%", line)
  end)

  it("shows - when no episode ended and uses cfg live", function()
    local c = { total_steps = 1e9, env = { num_envs = "auto" }, ppo = { rollout_steps = 64 } }
    local line = Console.format(metrics(1, { episodes = 0, sps = 123456.7 }), c, { width = 4, total_updates = count })
    assert.equal("[----]    0.0%  update 1  4,096 steps  ETA 2h15m  sps 123,457  return -  eff -", line)
  end)

  it("eta and thousands helpers", function()
    assert.equal("59s", Console.eta_text(59.4))
    assert.equal("1m05s", Console.eta_text(65))
    assert.equal("2h03m", Console.eta_text(2 * 3600 + 3 * 60 + 10))
    assert.equal("-", Console.eta_text(0 / 0))
    assert.equal("1,234,567", Console.thousands(1234567))
    assert.equal("-1,000", Console.thousands(-1000))
    assert.equal("999", Console.thousands(999))
  end)

  it("redraws one line with \\r on a terminal", function()
    local out, write = capture()
    local c = Console.new("run", cfg, { is_tty = true, write = write, total_updates = count })
    c:update(metrics(1))
    c:update(metrics(2))
    assert.equal(2, #out)
    for _, s in ipairs(out) do
      assert.equal("\r", s:sub(1, 1))
      assert.equal("\27[K", s:sub(-3))
      assert.is_nil(s:find("\n"))
    end
    assert.matches("update 2/10", out[2])
    c:message("warning: hot")
    assert.equal("\r\27[Kwarning: hot\n" .. out[2]:sub(2), out[3])
    local closed = false
    c:close(function() closed = true end)
    assert.is_true(closed)
    assert.equal("\n", out[4])
  end)

  it("prints plain lines every log.interval updates otherwise, and the last one", function()
    local out, write = capture()
    local c2 = { total_steps = 40960, env = { num_envs = 64 }, ppo = { rollout_steps = 64 }, log = { interval = 3 } }
    local c = Console.new("run", c2, { is_tty = false, write = write, total_updates = count })
    for u = 1, 10 do c:update(metrics(u)) end
    assert.equal(4, #out) -- updates 3, 6, 9 and the last (10)
    for _, s in ipairs(out) do
      assert.equal("\n", s:sub(-1))
      assert.is_nil(s:find("\r", 1, true))
      assert.is_nil(s:find("\27", 1, true))
    end
    assert.matches("update 3/10", out[1])
    assert.matches("update 10/10", out[4])
    assert.matches("100.0%%", out[4])
    c2.log.interval = 1                       -- a live change applies at once
    c:update(metrics(11))
    assert.equal(5, #out)
    c:message("note")
    assert.equal("note\n", out[6])
    c:close()
    assert.equal(6, #out)
  end)

  it("counts the updates again when total_steps changes while running", function()
    local asked = 0
    local c2 = { total_steps = 40960, env = { num_envs = 64 }, ppo = { rollout_steps = 64 }, log = { interval = 1 } }
    local state = { total_updates = function(c) asked = asked + 1; return count(c) end }
    assert.matches("update 2/10 ", Console.format(metrics(2), c2, state))
    assert.matches("update 3/10 ", Console.format(metrics(3), c2, state))
    assert.equal(1, asked)
    c2.total_steps = 81920
    assert.matches("update 4/20 ", Console.format(metrics(4), c2, state))
    assert.equal(2, asked)
  end)

  it("never raises into the caller", function()
    local errs = {}
    local c = Console.new("run", cfg, { is_tty = false, write = function() error("stdout closed") end,
      on_error = function(m) errs[#errs + 1] = m end })
    assert.has_no.errors(function() c:update(metrics(1)) end)
    assert.matches("stdout closed", errs[1])
  end)
end)

describe("moonrl train --help", function()
  local support = require("spec.support")
  it("says what SIGHUP does, as signals.lua and docs/faults.md do: re-reads the live tweak files", function()
    local dir = support.tmpdir()
    local bin = os.getenv("MOONRL_BIN") or (os.getenv("PWD") .. "/build/moonrl")
    local p = support.spawn(bin, dir, "train --help", { env = os.getenv("MOONRL_LUA_PATH")
      and ("MOONRL_LUA_PATH=" .. os.getenv("MOONRL_LUA_PATH")) or nil })
    p.wait()
    local text = p.out() .. p.err()
    local line = text:match("\n  SIGHUP[^\n]*\n[^\n]*")
    assert.is_truthy(line, text)
    assert.is_truthy(line:find("re%-reads the %-%-live tweak files"), line)
    local doc = support.read_file("docs/faults.md")
    assert.is_truthy(doc:find("| SIGHUP | re-reads the live tweak files", 1, true))
    support.rm_rf(dir)
  end)
end)

describe("moonrl train's console", function()
  local support = require("spec.support")
  it("says 1 update and 1 run, not 1 updates / 1 runs", function()
    local dir = support.tmpdir()
    local bin = os.getenv("MOONRL_BIN") or (os.getenv("PWD") .. "/build/moonrl")
    local p = support.spawn(bin, dir, "train --hardware ci --dir run --set total_steps=1024 --set eval.runs=1 " ..
      "--set eval.num_envs=4 --set eval.steps=16", { env = os.getenv("MOONRL_LUA_PATH")
      and ("MOONRL_LUA_PATH=" .. os.getenv("MOONRL_LUA_PATH")) or nil, wait = 300000 })
    assert.equal(0, p.wait(), p.out() .. p.err())
    local text = p.out() .. p.err()
    assert.is_truthy(text:find("after 1 update,", 1, true), text)
    assert.is_truthy(text:find("x 1 run)", 1, true), text)
    assert.is_falsy(text:find("1 runs", 1, true), text)
    assert.is_falsy(text:find("1 updates", 1, true), text)
    support.rm_rf(dir)
  end)
end)

describe("SIGUSR1 on a terminal", function()
  local support = require("spec.support")
  it("prints its note on a line of its own and redraws the progress bar after it", function()
    if not support.uv.fs_stat("/usr/bin/script") then return pending("no /usr/bin/script (util-linux) for a terminal") end
    local dir = support.tmpdir()
    local bin = os.getenv("MOONRL_BIN") or (os.getenv("PWD") .. "/build/moonrl")
    local env = os.getenv("MOONRL_LUA_PATH") and ("MOONRL_LUA_PATH=" .. os.getenv("MOONRL_LUA_PATH") .. " ") or ""
    -- script(1) gives moonrl a pseudo-terminal: the progress bar is redrawn in place
    local inner = string.format("echo $$ > pid; exec env %s%q train --hardware ci --dir run --no-eval " ..
      "--set total_steps=100000000 2>&1", env, bin)
    support.write_file(dir .. "/inner.sh", inner .. "\n")
    local p = support.spawn("/usr/bin/script", dir, "-qfec 'sh inner.sh' /dev/null", { wait = 120000 })
    local function out() return p.out() end
    assert.is_true(support.wait_for(function() return out():find("update 2", 1, true) ~= nil end, 120000), out())
    local pid = tonumber(support.read_file(dir .. "/pid"))
    support.uv.kill(pid, "sigusr1")
    assert.is_true(support.wait_for(function()
      local o = out(); local i = o:find("moonrl: SIGUSR1", 1, true)
      return i and o:find("\n", i, true) and o:find("[", o:find("\n", i, true), true)
    end, 120000), out())
    support.uv.kill(pid, "sigint")
    p.wait()
    local o = out()
    local i = o:find("moonrl: SIGUSR1", 1, true)
    local before = o:sub(math.max(1, i - 4), i - 1)  -- (the terminal writes \n as \r\n)
    assert.is_true(before:sub(-1) == "\n" or before == "\r\27[K",
      "the note is glued to the bar: " .. string.format("%q", o:sub(math.max(1, i - 120), i + 60)))
    local nl = o:find("\n", i, true)
    local after = o:sub(nl + 1, nl + 1)
    assert.is_truthy(after == "[",
      "no bar redrawn after the note: " .. string.format("%q", o:sub(i, nl + 80)))
    support.rm_rf(dir)
  end)
end)

describe("notes on the terminal (issue 22)", function()
  local support = require("spec.support")
  local bin = os.getenv("MOONRL_BIN") or (os.getenv("PWD") .. "/build/moonrl")
  local env = os.getenv("MOONRL_LUA_PATH") and ("MOONRL_LUA_PATH=" .. os.getenv("MOONRL_LUA_PATH")) or nil

  it("prints the notes about defaults only with --verbose, the user's always, train.log all", function()
    local dir = support.tmpdir()
    -- cuda.graphs from --set: the user's; the budget and the level's cpu-inert keys: defaults
    local p = support.spawn(bin, dir, "train --hardware ci --dir run --no-eval --set total_steps=1024 " ..
      "--set cuda.graphs=true", { env = env, wait = 300000 })
    assert.equal(0, p.wait(), p.out() .. p.err())
    local err = p.err()
    assert.is_truthy(err:find("moonrl: note: cuda.graphs = true (from --set) does not apply on cpu", 1, true), err)
    assert.is_falsy(err:find("budget:", 1, true), err)
    assert.is_falsy(err:find("(from level", 1, true), err)
    local log = support.read_file(dir .. "/run/train.log")
    assert.is_truthy(log:find("note: budget: total_steps = 1024", 1, true), log)
    assert.is_truthy(log:find("note: cuda.graphs = true (from --set)", 1, true), log)
    -- (the level's one cpu-inert key, cuda.graphs, is the --set's here; its
    -- warmup.prepare = {"graphs"} is no longer CUDA-only: "algorithms" runs on
    -- the cpu.) cpu.conv = auto's per-layer choice: train.log only
    assert.is_truthy(log:find("conv algorithms (cpu.conv = auto): layer 1 16->32", 1, true), log)
    assert.is_falsy(err:find("conv algorithms", 1, true), err)

    -- the engine line: a block, every line under 100 columns, every fact kept;
    -- train.log keeps it on one line
    local out = p.out()
    for line in (out .. err):gmatch("[^\n]+") do
      assert.is_true(#line < 100, "a line of " .. #line .. " columns: " .. line)
    end
    assert.is_truthy(out:find("\nmoonrl: engine: cpu backend, 2 threads, ", 1, true), out)
    assert.is_truthy(out:find("\n  BLAS: OpenBLAS (OpenMP, ", 1, true), out)
    assert.is_truthy(out:find("\n  cuda.* settings do not apply on the cpu\n", 1, true), out)
    assert.is_truthy(out:find("\n  convolutions (cpu.conv): ", 1, true), out)
    assert.is_truthy(out:find("\n  conv activations (cpu.activations): ", 1, true), out)
    assert.is_truthy(out:find("\n  engine: cpu backend, ", 1, true), out)   -- the summary's
    assert.is_truthy(out:find("\n    BLAS: OpenBLAS (OpenMP, ", 1, true), out)
    local eline = log:match("engine: cpu backend[^\n]*")
    assert.is_truthy(eline and eline:find("OpenBLAS", 1, true) and eline:find("conv activations", 1, true), log)

    p = support.spawn(bin, dir, "train --hardware ci --dir run2 --no-eval --set total_steps=1024 --verbose",
      { env = env, wait = 300000 })
    assert.equal(0, p.wait(), p.out() .. p.err())
    err = p.err()
    assert.is_truthy(err:find("moonrl: note: budget: total_steps = 1024", 1, true), err)
    assert.is_truthy(err:find("(from level advanced) do", 1, true), err)
    support.rm_rf(dir)
  end)

  it("documents --verbose in train's and run's --help", function()
    local dir = support.tmpdir()
    for _, cmd in ipairs({ "train --help", "run --help" }) do
      local p = support.spawn(bin, dir, cmd, { env = env })
      p.wait()
      assert.is_truthy(p.out():find("--verbose", 1, true), cmd .. ": " .. p.out())
    end
    support.rm_rf(dir)
  end)
end)

describe("a paused run (issue 22)", function()
  local support = require("spec.support")
  local bin = os.getenv("MOONRL_BIN") or (os.getenv("PWD") .. "/build/moonrl")
  local env = os.getenv("MOONRL_LUA_PATH") and ("MOONRL_LUA_PATH=" .. os.getenv("MOONRL_LUA_PATH")) or nil

  it("redraws the bar with 'paused' instead of an ETA, at once", function()
    local out, write = capture()
    local c = Console.new("run", cfg, { is_tty = true, write = write, total_updates = count })
    c:update(metrics(1))
    c:paused(true)
    assert.equal(2, #out)
    assert.is_truthy(out[2]:find("update 1/10  4,096 steps  paused  sps 4,096", 1, true), out[2])
    assert.is_falsy(out[2]:find("ETA", 1, true), out[2])
    c:paused(false)
    assert.is_truthy(out[3]:find("ETA ", 1, true), out[3])
    c:paused(true)
    c:update(metrics(2))   -- an update: the run trains again
    assert.is_truthy(out[5]:find("ETA ", 1, true), out[5])
  end)

  it("ctl status, ps and the progress line say paused, no ETA", function()
    local dir = support.tmpdir()
    support.uv.fs_mkdir(dir .. "/c", 493)
    local p = support.spawn(bin, dir, "train --hardware ci --dir run --no-eval --set total_steps=100000000",
      { env = env, wait = 300000 })
    assert.is_true(support.wait_for(function() return p.out():find("update 2/", 1, true) ~= nil end, 300000),
      p.out() .. p.err())
    local function ctl(args)
      local q = support.spawn(bin, dir .. "/c", args, { env = env, wait = 300000 })
      local rc = q.wait()
      return rc, q.out() .. q.err()
    end
    local rc, text = ctl("ctl ../run pause")
    assert.equal(0, rc, text)
    assert.is_true(support.wait_for(function() return p.out():find("steps  paused  sps", 1, true) ~= nil end,
      60000), p.out())
    rc, text = ctl("ctl ../run status")
    assert.equal(0, rc, text)
    local first = text:match("^[^\n]*")
    assert.is_truthy(first:find(": paused, update ", 1, true), text)
    assert.is_truthy(first:find("ETA paused$"), text)
    rc, text = ctl("ps ..")
    assert.equal(0, rc, text)
    local row = text:match("\n[^\n]*run[^\n]*")
    assert.is_truthy(row and row:find("paused%s*$"), text)
    rc, text = ctl("ctl ../run stop")
    p.wait()
    support.rm_rf(dir)
  end)
end)

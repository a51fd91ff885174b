-- Where a new user starts: every example and the built-in experiments work
-- from any directory. The binary (build/moonrl or $MOONRL_BIN) runs with a
-- fresh temporary directory as its working directory, far from the source
-- tree: `moonrl train NAME` finds the embedded configs/experiments/NAME.lua,
-- an unknown name lists the built-in ones, each example runs (with a small
-- step budget where it takes one) or, for the sweeps, parses and resolves the
-- files it names; `make install PREFIX=...` installs a binary that runs.
-- MOONRL_LUA_PATH, when set (an absolute path), passes through: the binary
-- then loads that tree's Lua and configs.

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
local ROOT = os.getenv("PWD") or "."          -- busted runs from the repository root
if BIN:sub(1, 1) ~= "/" then BIN = ROOT .. "/" .. BIN end
local EXAMPLES = ROOT .. "/examples"

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == 0 or ok == true
end

-- Runs moonrl in dir; returns exit code, stdout, stderr.
local function moonrl(dir, args)
  local out, err, rc = dir .. "/.stdout", dir .. "/.stderr", dir .. "/.rc"
  sh(string.format("cd %q && OMP_NUM_THREADS=2 timeout 600 %q %s >%q 2>%q; echo $? >%q",
    dir, BIN, args, out, err, rc))
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

local function skip()
  return pending("no binary at " .. BIN .. " (build it: make build)")
end

local QUICK = "--set hardware=ci --set total_steps=1 --no-eval"

describe("from any directory", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function()
    if dir then support.rm_rf(dir) end
    dir = nil
  end)

  it("moonrl train NAME trains the built-in experiment configs/experiments/NAME.lua", function()
    if not have_bin then return skip() end
    for _, name in ipairs({ "foraging", "foraging.lua", "configs/experiments/foraging.lua", "default" }) do
      local rc, out, err = moonrl(dir, "train " .. name .. " " .. QUICK .. " --dir run")
      assert.are.equal(0, rc, name .. ": " .. out .. err)
      local cfg = assert(support.read_file(dir .. "/run/config.lua"), name .. ": no run/config.lua")
      assert.truthy(cfg:find("name = \"" .. (name == "default" and "default" or "foraging") .. "\"", 1, true),
        name .. ": " .. cfg:sub(1, 300))
      support.rm_rf(dir .. "/run")
    end
  end)

  it("an unknown name lists the built-in experiments; a file of that name comes first", function()
    if not have_bin then return skip() end
    local rc, out, err = moonrl(dir, "train foragin " .. QUICK)
    assert.are.equal(2, rc, out .. err)
    assert.truthy(err:find("config file 'foragin' not found", 1, true), err)
    assert.truthy(err:find("built-in default, cartpole, cartpole_lua, catch, dials, foraging, pendulum, reach, snake", 1, true), err)
    assert.truthy(err:find("did you mean 'foraging'", 1, true), err)
    -- with --resume the run keeps its own config: the experiment's name again is the first mistake, named
    rc, out, err = moonrl(dir, "train cartpole --resume runs/x")
    assert.are.equal(2, rc, out .. err)
    assert.truthy(err:find("'cartpole' is a built-in experiment, but a resumed run keeps its own config: drop " ..
      "'cartpole'", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
    support.write_file(dir .. "/foraging", 'return { name = "mine" }\n')
    rc, out, err = moonrl(dir, "train foraging " .. QUICK .. " --dir run")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(support.read_file(dir .. "/run/config.lua"):find('name = "mine"', 1, true))
  end)

  it("examples/quickstart.lua runs", function()
    if not have_bin then return skip() end
    local rc, out, err = moonrl(dir, string.format("run %q 4096", EXAMPLES .. "/quickstart.lua"))
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("| metric", 1, true), out)
    assert.truthy(out:find("run directory: runs/quickstart-", 1, true), out)
  end)

  it("examples/custom_hooks.lua runs", function()
    if not have_bin then return skip() end
    local rc, out, err = moonrl(dir, string.format("run %q 8192", EXAMPLES .. "/custom_hooks.lua"))
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("finished: done", 1, true), out)
    assert.truthy(out:find("| metric", 1, true), out)
  end)

  it("examples/proxy_vs_truth.lua runs", function()
    if not have_bin then return skip() end
    local rc, out, err = moonrl(dir, string.format("run %q 4096", EXAMPLES .. "/proxy_vs_truth.lua"))
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("|%s+ground_truth |") and out:find("|%s+proxy |"), out)
  end)

  it("examples/tweaks.lua is a live file moonrl train reads", function()
    if not have_bin then return skip() end
    local rc, out, err = moonrl(dir, string.format("train --live %q --set hardware=ci --set total_steps=1 --no-eval --dir run",
      EXAMPLES .. "/tweaks.lua"))
    assert.are.equal(0, rc, out .. err)
    local log = assert(support.read_file(dir .. "/run/train.log"))
    assert.truthy(log:find("tweaks.lua: read", 1, true), log)
    assert.falsy((out .. err .. log):lower():find("error", 1, true), out .. err .. log)
  end)

  -- The sweeps train for minutes (or need Slurm): moonrl.sweep is replaced by
  -- one that resolves the base and sets the example gives, as the real one
  -- does first, so what is checked is that the example parses and the files
  -- it names are found from here.
  for _, ex in ipairs({ "sweep.lua", "sweep_slurm.lua" }) do
    for _, mode in ipairs({ "", "ci" }) do
      it("examples/" .. ex .. " " .. mode .. " parses and resolves its base config", function()
        if not have_bin then return skip() end
        support.write_file(dir .. "/check.lua", string.format([[
local moonrl = require "moonrl"
moonrl.sweep = function(spec)
  local cfg = assert(moonrl.resolve(spec.base, { sets = spec.sets, hardware = spec.hardware, level = spec.level }))
  assert(type(spec.space) == "table" and spec.executor ~= nil)
  -- one update's value is noise: the example picks its winner on a mean of several
  assert((spec.smooth or 1) >= 3, "smooth = " .. tostring(spec.smooth or 1) .. ": the winner is one update's value")
  return { wait = function() end, table = function() return "resolved " .. tostring(spec.base) .. ": " .. cfg.name end }
end
arg = { [0] = %q, %q }
dofile(%q)
]], EXAMPLES .. "/" .. ex, mode, EXAMPLES .. "/" .. ex))
        local rc, out, err = moonrl(dir, "run check.lua")
        assert.are.equal(0, rc, out .. err)
        assert.truthy(out:find("resolved .-: foraging"), out .. err)
      end)
    end
  end
end)

describe("make install", function()
  it("installs a binary that runs from anywhere, with the examples and docs beside it", function()
    local make_ok = sh("command -v make >/dev/null 2>&1")
    local built = io.open(ROOT .. "/build/moonrl", "rb")
    if not (make_ok and built) then return pending("needs make and build/moonrl") end
    built:close()
    local dir = support.tmpdir()
    finally(function() support.rm_rf(dir) end)
    assert.is_true(sh(string.format("make -s -C %q install PREFIX=/usr/x DESTDIR=%q >%q/.log 2>&1", ROOT, dir, dir)),
      support.read_file(dir .. "/.log"))
    local prefix = dir .. "/usr/x"
    for _, f in ipairs({ "bin/moonrl", "share/moonrl/README.md", "share/moonrl/docs/lua-api.md",
      "share/moonrl/examples/quickstart.lua" }) do
      assert.truthy(support.uv.fs_stat(prefix .. "/" .. f), "not installed: " .. f)
    end
    assert.is_true(sh(string.format("cd / && %q/bin/moonrl version >%q/.v 2>&1", prefix, dir)), support.read_file(dir .. "/.v"))
    assert.truthy(support.read_file(dir .. "/.v"):find("^moonrl "))
  end)
end)

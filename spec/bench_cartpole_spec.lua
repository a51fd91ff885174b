-- The cartpole benchmarks' command lines, as a user runs them: the
-- environment-alone row of any registered environment (bench/env_alone.lua)
-- and its refusals, the cartpole row of `moonrl bench --compare` (against
-- Gymnasium's CartPoleVectorEnv and SyncVectorEnv) and the end-to-end
-- comparison (bench/cartpole_train.lua), with the message each gives where
-- its peer's packages are missing. No timing assertions: the speeds are
-- BENCHMARKS.md's. The cases that run Gymnasium are pending without it.

local support = require("support")
local json = require("moonrl.formats.json")

local ROOT = os.getenv("PWD") or "."

local function rows(out)
  local t = {}
  for line in out:gmatch("[^\n]+") do
    if line:match("^{") then t[#t + 1] = json.decode(line) end
  end
  return t
end

-- the cartpole row's peer, as moonrl bench --compare looks for it: an interpreter that imports
-- Gymnasium and NumPy (build/venv-bench's, make bench's; else build/venv's, make test's)
local function gym_python()
  for _, p in ipairs({ ROOT .. "/build/venv-bench/bin/python", ROOT .. "/build/venv/bin/python" }) do
    -- build/venv's packages are make test's (run without PYTHONPATH, as compare.lua runs it)
    local env = p:find("/venv/bin/", 1, true) and "env -u PYTHONPATH " or ""
    local ok = io.open(p, "rb") and os.execute(string.format("%s%q -c 'import gymnasium, numpy' >/dev/null 2>&1", env, p))
    if ok == 0 or ok == true then return p end
  end
  return nil, "no Gymnasium: neither build/venv-bench nor build/venv imports it (make bench installs it)"
end

describe("the cartpole benchmarks", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() if dir then support.rm_rf(dir) end end)

  local ENV_ALONE = ROOT .. "/bench/env_alone.lua"

  it("bench/env_alone.lua refuses a bad command line with a message naming what is accepted", function()
    if not support.have_bin then return pending("no binary at " .. support.BIN .. " (build it: make build)") end
    local cases = {
      { "--env nope", "--env = nope: accepted foraging, reach, cartpole, pendulum" },
      { "--env", "option --env needs a value (NAME)" },
      { "--envs 0", "--envs = 0: accepted an integer >= 1" },
      { "--reps x", "--reps = x: accepted an integer >= 1" },
      { "--device tpu", "--device = tpu: accepted cpu, cuda, auto" },
      { "--environment cartpole", "unknown option '--environment': accepted --device, --env, --envs" },
      { "cartpole", "unexpected argument 'cartpole'" },
    }
    for _, c in ipairs(cases) do
      local rc, out, err = support.moonrl("run " .. ENV_ALONE .. " " .. c[1], dir)
      assert.are.equal(2, rc, c[1] .. ": " .. out .. err)
      assert.truthy(err:find(c[2], 1, true), c[1] .. ": " .. err)
      assert.truthy(err:find("^moonrl run bench/env_alone.lua: "), err)
      assert.falsy(err:find("traceback", 1, true), err)
    end
  end)

  it("bench/env_alone.lua measures each registered environment alone", function()
    if not support.have_bin then return pending("no binary at " .. support.BIN .. " (build it: make build)") end
    for _, env in ipairs({ "cartpole", "foraging", "reach", "pendulum" }) do
      local rc, out, err = support.moonrl("run " .. ENV_ALONE .. " --env " .. env ..
        " --envs 64 --reps 2 --steps 10 --threads 1 --device cpu --json", dir)
      assert.are.equal(0, rc, out .. err)
      local r = rows(out)
      assert.are.equal(1, #r, out)
      r = r[1]
      assert.are.same({ "env", env, 64, 10, 2, "agent-steps/s", "cpu" },
        { r.row, r.env, r.num_envs, r.steps_per_rep, r.rate.n, r.unit, r.device })
      assert.is_true(r.rate.min > 0 and r.rate.min <= r.rate.median and r.rate.median <= r.rate.max, out)
    end
    -- the default is foraging, as `moonrl bench env`'s row
    local rc, out, err = support.moonrl("run " .. ENV_ALONE .. " --envs 16 --reps 1 --steps 5 --device cpu", dir)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("^env foraging, 16 envs, cpu: "), out)
  end)

  it("moonrl bench env --env NAME measures any registered environment and refuses what it does not know", function()
    if not support.have_bin then return pending("no binary at " .. support.BIN .. " (build it: make build)") end
    local cases = {
      { "env --env nope", "moonrl bench: --env = nope: accepted foraging, reach, cartpole, pendulum" },
      { "env --env", "option --env needs a value (NAME)" },
      { "train --env cartpole", "--env cartpole: only the env row measures other environments" },
      { "--compare --env cartpole", "--compare has --rows cartpole" },
      { "--compare --rows cartpol", "--rows: 'cartpol': accepted env, small, ref, cartpole" },
    }
    for _, c in ipairs(cases) do
      local rc, out, err = support.moonrl("bench " .. c[1], dir)
      assert.are.equal(2, rc, c[1] .. ": " .. out .. err)
      assert.truthy(err:find(c[2], 1, true), c[1] .. ": " .. err)
      assert.falsy(err:find("traceback", 1, true), err)
    end
    local rc, out, err = support.moonrl("bench env --env cartpole --envs 64 --reps 2 --device cpu --json", dir)
    assert.are.equal(0, rc, out .. err)
    local r = rows(out)
    assert.are.equal(1, #r, out)
    assert.are.same({ "env", "cartpole", 64, 2 }, { r[1].row, r[1].env, r[1].num_envs, r[1].rate.n })
    rc, out, err = support.moonrl("bench env --env cartpole --envs 64 --reps 1 --device cpu", dir)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("^env cartpole, 64 envs "), out)
    -- catch's board (4 .. 32) is not the default grid_size (128): measured at its experiment's, 8
    rc, out, err = support.moonrl("bench env --env catch --envs 64 --reps 1 --device cpu", dir)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("^env catch, 64 envs "), out)
    -- without --env, the row is foraging's, as before
    rc, out, err = support.moonrl("bench env --envs 64 --reps 1 --device cpu", dir)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("^env, 64 envs "), out)
  end)

  it("bench --compare --rows cartpole says it needs Gymnasium, and how to install it, where it cannot be imported",
    function()
    if not support.have_bin then return pending("no binary at " .. support.BIN .. " (build it: make build)") end
    -- a machine without either venv: the binary alone in a folder, a home without build/, and the
    -- system's python without NumPy (build/venv's packages are make test's, found whatever PYTHONPATH says)
    local bare = support.tmpdir()
    os.execute(string.format("cp %q %q/moonrl", support.BIN, bare))
    os.execute(string.format("cd %q && env MOONRL_HOME=%q %s %q/moonrl bench --compare --rows cartpole " ..
      ">stdout 2>stderr; echo $? >rc", dir, bare, support.without_optional_env(), bare))
    local rc, out, err = tonumber((support.read_file(dir .. "/rc"):gsub("%s", ""))), support.read_file(dir .. "/stdout"),
      support.read_file(dir .. "/stderr")
    assert.are.equal(1, rc, out .. err)
    assert.truthy(err:find("--compare --rows cartpole needs Gymnasium (and NumPy) for its peer, CartPoleVectorEnv: " ..
      "`make bench` installs them (build/venv-bench, requirements-bench.txt)", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
    -- the reference scripts say the same when run by hand
    for _, script in ipairs({ "cartpole_env.py", "cartpole_sb3.py", "cartpole_cleanrl.py" }) do
      os.execute(string.format("cd %q && env %s python3 %q/bench/reference/%s >stdout 2>stderr; echo $? >rc", dir,
        support.without_optional_env(), ROOT, script))
      assert.are.equal("2", (support.read_file(dir .. "/rc"):gsub("%s", "")), script)
      local e = support.read_file(dir .. "/stderr")
      assert.truthy(e:find("bench/reference/" .. script .. " needs ", 1, true), e)
      assert.truthy(e:find("`make bench` installs them into build/venv-bench (requirements-bench.txt)", 1, true), e)
    end
    -- and the end-to-end comparison, before it runs anything
    rc, out, err = support.moonrl("run " .. ROOT .. "/bench/cartpole_train.lua 1 256 moonrl,sb3", dir,
      { env = support.without_optional_env() })
    assert.are.equal(1, rc, out .. err)
    assert.truthy(err:find("the peers need Stable-Baselines3, PyTorch and Gymnasium: `make bench` installs them", 1,
      true), err)
  end)

  it("bench --compare --rows cartpole measures moonrl against CartPoleVectorEnv and SyncVectorEnv", function()
    if not support.have_bin then return pending("no binary at " .. support.BIN) end
    local py, why = gym_python()
    if not py then return pending(why) end
    local rc, out, err = support.moonrl("bench --compare --rows cartpole --envs 64 --reps 1 --json", dir,
      { timeout = 300 })
    assert.are.equal(0, rc, out .. err)
    local r = rows(out)
    assert.are.equal(1, #r, out)
    r = r[1]
    assert.are.same({ "cartpole", 64, 100, 20, 1, 1, 1 }, { r.row, r.num_envs, r.steps_per_rep, r.sync_steps_per_rep,
      r.moonrl.n, r.reference.n, r.reference_sync.n })
    assert.is_true(r.ratio > 0 and r.ratio_sync > 0, out)
    assert.truthy(r.versions.gymnasium, out)
    assert.truthy(r.commands.reference:find("cartpole_env.py --impl vector --num-envs 64", 1, true), out)
    assert.truthy(r.commands.reference_sync:find("cartpole_env.py --impl sync --num-envs 64", 1, true), out)
    assert.truthy(err:find("cartpole rep 1/1: moonrl", 1, true), err)
    -- the text table ends with the row for BENCHMARKS.md
    rc, out, err = support.moonrl("bench --compare --rows cartpole --envs 64 --reps 1 --threads 1", dir,
      { timeout = 300 })
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("| where | envs | moonrl | Gymnasium CartPoleVectorEnv | ratio |", 1, true), out)
    assert.truthy(out:find("| CPU, moonrl 1 thread, Gymnasium 1 | 64 |", 1, true), out)
    assert.truthy(out:find("`moonrl bench --compare --rows cartpole --envs 64 --reps 1 --threads 1` |", 1, true), out)
  end)

  it("bench/cartpole_train.lua prints moonrl's side alone (PEERS=moonrl) and refuses an unknown peer", function()
    if not support.have_bin then return pending("no binary at " .. support.BIN) end
    local rc, out, err = support.moonrl("run " .. ROOT .. "/bench/cartpole_train.lua 1 512 moonrl", dir)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("cartpole end to end: moonrl train cartpole alone, 1 seed, 512 agent-steps each",
      1, true), out)
    assert.truthy(out:find("\nmoonrl +1 +not reached"), out)
    rc, out, err = support.moonrl("run " .. ROOT .. "/bench/cartpole_train.lua 1 512 moonrl,rllib", dir)
    assert.are.equal(2, rc, out .. err)
    assert.truthy(err:find("bench/cartpole_train.lua: PEERS: 'rllib': accepted moonrl, sb3, cleanrl", 1, true), err)
    assert.falsy(err:find("traceback", 1, true), err)
  end)
end)

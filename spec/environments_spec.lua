-- Environments by name (env.name): `moonrl envs` lists them; the second
-- environment, reach (envs/reach.h: 4 actions, a goal and pits), trains
-- through the same trainer, learns far past what a random policy gets,
-- evaluates, exports with 4 logits, and its mistakes are refused by name.
-- Its rules are checked step by step in spec/c/test_env_reach.c.

local support = require("support")
local json = require("moonrl.formats.json")

local have_bin = support.have_bin

-- moonrl ARGS in dir: exit code, stdout and stderr together
local function run(dir, args)
  local rc, out, err = support.moonrl(args, dir)
  return rc, out .. err
end

-- A small reach run: 8x8 torus, 5x5 view, 2-4 pits, 64-step episodes.
local function reach_config(over)
  return "return { name = 'reach', threads = 2, seed = 1, total_steps = " .. (over.total_steps or 64 * 32 * 100) ..
    ", warmup = { updates = 0 }, env = { name = 'reach', num_envs = 64, grid_size = 8, view_range = 2, " ..
    "density_min = 2, density_max = 4, max_episode_steps = 64" .. (over.env or "") .. " }, " ..
    "policy = { conv_channels = { 16, 16 }, hidden = 64, critic_hidden = 64 }, " ..
    "ppo = { rollout_steps = 32, lr = " .. (over.lr or "1e-3") .. " }, " ..
    "log = { console = false, tensorboard = false, csv = false, checkpoint_interval = 50 } }\n"
end

-- The mean of episode_return_mean over the last k updates of a run.
local function last_returns(path, k)
  local rows = {}
  for line in (support.read_file(path) or ""):gmatch("[^\n]+") do
    local m = json.decode(line)
    if m.event == nil and m.episodes and m.episodes > 0 then rows[#rows + 1] = m.episode_return_mean end
  end
  local s, n = 0, 0
  for i = math.max(1, #rows - k + 1), #rows do s, n = s + rows[i], n + 1 end
  return n > 0 and s / n or nil, #rows
end

describe("environments (env.name)", function()
  it("moonrl envs lists each with the spaces it declares", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    local rc, out = run(d, "envs --json")
    assert.equal(0, rc, out)
    local by = {}
    for line in out:gmatch("{[^\n]+") do
      local e = json.decode(line)
      by[e.name] = e
    end
    assert.equal(8, by.foraging.actions)
    assert.same({ "empty", "goal", "pit" }, by.reach.codes)
    assert.same({ 11, 11, 2 }, by.reach.observation)
    -- the spaces each declares (mr_env_spaces_of): observation, action, critic, counters
    assert.same({ observation = { kind = "codes", shape = { 2, 11, 11 }, codes = 3 },
                  action = { kind = "discrete", n = 8 }, critic = { extra = 2, ground_truth_view = true },
                  counters = { "food", "poison" } }, by.foraging.spaces)
    assert.same({ kind = "discrete", n = 4 }, by.reach.spaces.action)
    assert.same({ "goal", "pit" }, by.reach.spaces.counters)
    assert.same({ kind = "vector", shape = { 4 } }, by.cartpole.spaces.observation)
    assert.same({ kind = "discrete", n = 2 }, by.cartpole.spaces.action)
    assert.same({}, by.cartpole.spaces.counters)
    assert.same({ observation = { kind = "codes", shape = { 4, 11, 11 }, codes = 5 },
                  action = { kind = "discrete", n = 4 }, critic = { extra = 2, ground_truth_view = true },
                  counters = { "food", "crash" } }, by.snake.spaces)
    assert.same({ "empty", "food", "body", "tail", "wall" }, by.snake.codes)
    assert.same({ observation = { kind = "vector", shape = { 4 } }, action = { kind = "multi_discrete", nvec = { 3, 3 } },
                  critic = { extra = 0, ground_truth_view = false }, counters = { "matched" } }, by.dials.spaces)
    -- catch: a float image whose side is env.grid_size; its built-in experiment's is 8
    assert.same({ kind = "discrete", n = 3 }, by.catch.spaces.action)
    assert.equal("image", by.catch.spaces.observation.kind)
    assert.same({ "caught" }, by.catch.spaces.counters)
    assert.same({ kind = "image", shape = { 2, 8, 8 } }, by.catch.experiments[1].observation)
    rc, out = run(d, "envs")
    assert.matches("catch%s+2 x N x N floats, N = env.grid_size%s+discrete%(3%)%s+caught%s+catch: 2 x 8 x 8", out)
    assert.matches("foraging%s+2 x 11 x 11 codes%s+discrete%(8%)%s+food, poison", out)
    assert.matches("reach%s+2 x 11 x 11 codes%s+discrete%(4%)%s+goal, pit", out)
    assert.matches("snake%s+4 x 11 x 11 codes%s+discrete%(4%)%s+food, crash%s+snake: 4 x 7 x 7", out)
    assert.matches("dials%s+4 floats%s+multi_discrete%(3, 3%)%s+matched%s+dials: 4 floats", out)
    rc, out = run(d, "envs --bogus")
    assert.equal(2, rc, out)
    assert.matches("unknown option '%-%-bogus'", out)
  end)

  it("reach learns: the trained return is far above a random policy's, measured in the same test", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    -- the random policy: the initial network (nearly uniform over 4 actions), never updated
    support.write_file(d .. "/random.lua", reach_config({ lr = "0", total_steps = 64 * 32 * 30 }))
    local rc, out = run(d, "train random.lua --dir random --no-eval")
    assert.equal(0, rc, out)
    local random_return = last_returns(d .. "/random/metrics.jsonl", 30)
    support.write_file(d .. "/reach.lua", reach_config({}))
    rc, out = run(d, "train reach.lua --dir trained --no-eval")
    assert.equal(0, rc, out)
    local trained, n = last_returns(d .. "/trained/metrics.jsonl", 10)
    assert.equal(100, n)
    -- a random walk on this grid finds the goal about once an episode and falls into a pit first:
    -- measured -0.9 (seed 1); the trained policy collects 4 to 9 goals an episode
    assert.is_true(random_return < 0.5, "random policy's return " .. tostring(random_return))
    assert.is_true(trained > 3.0, string.format("trained return %.3f (random %.3f)", trained, random_return))

    -- evaluated by moonrl eval, exported with 4 logits
    rc, out = run(d, "eval trained --envs 32 --steps 256")
    assert.equal(0, rc, out)
    assert.matches("ground_truth", out)
    assert.matches("environment: reach; the episodic protocol", out, 1, true)
    assert.matches("| goal per episode", out, 1, true)
    local ej = json.decode(support.read_file(d .. "/trained/eval/update_0000100/eval.json"))
    assert.equal("reach", ej.sources[1].environment)
    assert.equal("episodic", ej.protocol)
    -- success: a goal reached in the episode; the trained policy collects several an episode
    assert.is_true(ej.results[1].point.success_rate > 0.5, tostring(ej.results[1].point.success_rate))
    -- foraging's survival protocol on request, reading goals as food and pits as poison
    rc, out = run(d, "eval trained --envs 8 --steps 64 --protocol survival --out none")
    assert.equal(0, rc, out)
    assert.matches("environment: reach; the protocol is foraging's: food below is the goal, poison the pit", out, 1,
      true)
    rc, out = run(d, "export trained --out policy.safetensors")
    assert.equal(0, rc, out)
    local bytes = support.read_file(d .. "/policy.safetensors")
    local hlen = bytes:byte(1) + bytes:byte(2) * 256 + bytes:byte(3) * 65536
    local header = json.decode(bytes:sub(9, 8 + hlen))
    assert.same({ 4, 64 }, header["actor.w"].shape)
    assert.same({ 4 }, header["actor.b"].shape)
    local net = json.decode(header.__metadata__["moonrl.network"])
    assert.equal("reach", net.environment)
    assert.equal(4, net.actions)
    assert.matches("1 goal, 2 pit", header.__metadata__["moonrl.observation"])

    -- and the ONNX model runs in onnxruntime with 4 logits out (where requirements.txt is installed)
    rc, out = run(d, "export trained --format onnx --out policy.onnx")
    assert.equal(0, rc, out)
    if not support.venv_lacks("onnxruntime, numpy") then
      support.write_file(d .. "/ort.py", [[
import numpy as np, onnxruntime as ort
s = ort.InferenceSession("policy.onnx")
lg, v = s.run(None, {"observation": np.zeros((3, 5, 5, 2), np.float32), "extra": np.zeros((3, 2), np.float32),
                     "truth": np.zeros((3, 50), np.float32)})
print("shapes", lg.shape, v.shape)
]])
      local p = io.popen(string.format("cd %q && env -u PYTHONPATH %q ort.py 2>&1", d, support.VENV_PY))
      local got = p:read("*a")
      p:close()
      assert.matches("shapes (3, 4) (3, 1)", got, 1, true)
    end

    -- a checkpoint of reach does not resume as foraging
    rc, out = run(d, "train reach.lua --dir trained --resume trained --set env.name=foraging")
    assert.is_true(rc ~= 0, out)
  end)

  it("refuses what reach does not have, and an unknown name, saying what is accepted", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    support.write_file(d .. "/proxy.lua", reach_config({ env = ", mode = 'proxy'" }))
    local rc, out = run(d, "train proxy.lua --dir p")
    assert.is_true(rc ~= 0, out)
    assert.matches("env.mode = proxy: env.name = reach has only ground_truth", out, 1, true)
    assert.is_nil(io.open(d .. "/p/metrics.jsonl"))
    support.write_file(d .. "/nope.lua", reach_config({}):gsub("name = 'reach', num_envs", "name = 'pong', num_envs"))
    rc, out = run(d, "train nope.lua --dir n")
    assert.is_true(rc ~= 0, out)
    assert.matches("env.name", out, 1, true)
    assert.matches("foraging", out, 1, true)
    assert.matches("reach", out, 1, true)
  end)

  -- cartpole (envs/cartpole.h): a vector observation through the MLP trunk. Its dynamics are checked
  -- against Gymnasium's own CartPole-v1 (spec/gym_reference.py, ctest test_env_gymnasium) and its wiring
  -- in the engine by spec/c/test_env_cartpole.c; here the built-in experiment learns it.
  it("moonrl train cartpole reaches return 500 within 100,000 agent-steps (median of 3 seeds)", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    local reached = {}
    for seed = 1, 3 do
      local rc, out = run(d, "train cartpole --dir s" .. seed .. " --set seed=" .. seed ..
        " --set threads=2 --set log.console=false --set log.tensorboard=false" .. (seed > 1 and " --no-eval" or ""))
      assert.equal(0, rc, out)
      if seed == 1 then   -- its evaluation at the end: the episodic protocol (docs/evaluation.md)
        assert.matches("environment: cartpole; the episodic protocol", out, 1, true)
        assert.matches("| success ", out, 1, true)
      end
      -- the first update by which the last 8 ended episodes (as many as environments; the updates that
      -- ended them, oldest dropped while 8 remain) average 495 or more
      local at, win = math.huge, {}
      for line in support.read_file(d .. "/s" .. seed .. "/metrics.jsonl"):gmatch("[^\n]+") do
        local m = json.decode(line)
        if m.event == nil and (m.episodes or 0) > 0 then
          win[#win + 1] = m
          local n, sum = 0, 0
          for _, w in ipairs(win) do n, sum = n + w.episodes, sum + w.episodes * w.episode_return_mean end
          while #win > 1 and n - win[1].episodes >= 8 do
            n, sum = n - win[1].episodes, sum - win[1].episodes * win[1].episode_return_mean
            table.remove(win, 1)
          end
          if n >= 8 and sum / n >= 495 and at == math.huge then at = m.agent_steps end
        end
      end
      reached[#reached + 1] = at
    end
    table.sort(reached)
    assert.is_true(reached[2] <= 100000, "agent-steps to return 500 by seed (sorted): " ..
      table.concat(reached, ", "))

    -- exported as safetensors (the MLP's tensors and a description)
    local rc, out = run(d, "export s1 --out policy.safetensors")
    assert.equal(0, rc, out)
    local bytes = support.read_file(d .. "/policy.safetensors")
    local hlen = bytes:byte(1) + bytes:byte(2) * 256 + bytes:byte(3) * 65536
    local header = json.decode(bytes:sub(9, 8 + hlen))
    assert.same({ 64, 4 }, header["mlp0.w"].shape)
    assert.same({ 2, 64 }, header["actor.w"].shape)
    local net = json.decode(header.__metadata__["moonrl.network"])
    assert.equal("mlp", net.trunk)
    assert.equal("cartpole", net.environment)
    -- and as ONNX (act_spec checks its outputs against moonrl act)
    rc, out = run(d, "export s1 --format onnx --out policy.onnx")
    assert.equal(0, rc, out)
    assert.truthy(io.open(d .. "/policy.onnx"), out)

    -- resumes as itself, not as another environment
    rc, out = run(d, "train --resume s1 --set total_steps=110000 --no-eval --set log.console=false")
    assert.equal(0, rc, out)
    rc, out = run(d, "train --resume s1 --set env.name=foraging --no-eval")
    assert.is_true(rc ~= 0, out)
    assert.matches('the run has "cartpole"', out, 1, true)
  end)

  -- pendulum (envs/pendulum.h): a box action through the Gaussian head. Its dynamics are checked against
  -- Gymnasium's Pendulum-v1 (spec/gym_reference.py) and its wiring by spec/c/test_env_pendulum.c.
  it("moonrl train pendulum passes a mean return of -250 (median of 3 seeds, 300,000 agent-steps)", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    local last = {}
    for seed = 1, 3 do
      local rc, out = run(d, "train pendulum --dir p" .. seed .. " --set seed=" .. seed .. " --set threads=2 " ..
        "--set total_steps=300000 --set log.console=false --set log.tensorboard=false --no-eval")
      assert.equal(0, rc, out)
      -- the episode-weighted mean return of the last fifth of the run (a random policy's is about -1200)
      local rows = {}
      for line in support.read_file(d .. "/p" .. seed .. "/metrics.jsonl"):gmatch("[^\n]+") do
        local m = json.decode(line)
        if m.event == nil and (m.episodes or 0) > 0 then rows[#rows + 1] = m end
      end
      local total, n, sum = rows[#rows].agent_steps, 0, 0
      for _, m in ipairs(rows) do
        if m.agent_steps > 0.8 * total then n, sum = n + m.episodes, sum + m.episodes * m.episode_return_mean end
      end
      last[#last + 1] = sum / n
    end
    table.sort(last)
    assert.is_true(last[2] > -250, "mean return of the last fifth by seed (sorted): " ..
      table.concat(last, ", "))
    -- evaluated episodically: a return, no success row (pendulum declares none), 200-step episodes
    local rc, out = run(d, "eval p1 --envs 16 --steps 400 --out none")
    assert.equal(0, rc, out)
    assert.matches("environment: pendulum; the episodic protocol", out, 1, true)
    assert.matches("| episode length%s+|%s+200.0 %[200.0, 200.0%] |", out)
    assert.is_nil(out:find("| success", 1, true))
  end)

  -- policy.box_squash = "tanh": the action is low + (high - low) (tanh(x) + 1) / 2, its log-probability
  -- with the change of variables (gauss_math.h; spec/c/test_ppo_box.c checks it against float64)
  it("moonrl train pendulum with policy.box_squash = tanh learns, and its export says so", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    local rc, out = run(d, "train pendulum --dir t1 --set seed=1 --set threads=1 --set policy.box_squash=tanh " ..
      "--set total_steps=200000 --set log.console=false --set log.tensorboard=false --no-eval")
    assert.equal(0, rc, out)
    local rows = {}
    for line in support.read_file(d .. "/t1/metrics.jsonl"):gmatch("[^\n]+") do
      local m = json.decode(line)
      if m.event == nil and (m.episodes or 0) > 0 then rows[#rows + 1] = m end
    end
    local total, n, sum = rows[#rows].agent_steps, 0, 0
    for _, m in ipairs(rows) do
      if m.agent_steps > 0.8 * total then n, sum = n + m.episodes, sum + m.episodes * m.episode_return_mean end
    end
    assert.is_true(sum / n > -300, "mean return of the last fifth: " .. sum / n)
    rc, out = run(d, "export t1 --out t1.safetensors")
    assert.equal(0, rc, out)
    local bytes = support.read_file(d .. "/t1.safetensors")
    local hlen = bytes:byte(1) + bytes:byte(2) * 256 + bytes:byte(3) * 65536
    local meta = json.decode(bytes:sub(9, 8 + hlen)).__metadata__
    local head = json.decode(meta["moonrl.head"])
    assert.equal("gaussian", head.kind)
    assert.equal("tanh", head.squash)
    assert.same({ -2 }, head.low)
    assert.equal("tanh", json.decode(meta["moonrl.network"]).head.squash)
    assert.matches("tanh(x)", json.decode(meta["moonrl.network"]).layout.actor, 1, true)
  end)

  -- snake (envs/snake.h): four one-hot observation channels through the CNN (its rules are checked step
  -- by step in spec/c/test_env_snake.c, the C-channel network in test_policy.c and test_conv_dnnl.c).
  it("moonrl train snake learns: food per episode far above a random policy's, measured in the same test", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    -- the food per episode of the last k updates, episode-weighted
    local function food(dir, k)
      local rows = {}
      for line in (support.read_file(d .. "/" .. dir .. "/metrics.jsonl") or ""):gmatch("[^\n]+") do
        local m = json.decode(line)
        if m.event == nil and (m.episodes or 0) > 0 then rows[#rows + 1] = m end
      end
      local n, sum = 0, 0
      for i = math.max(1, #rows - k + 1), #rows do n, sum = n + rows[i].episodes, sum + rows[i].episodes *
        rows[i].food_per_episode end
      return n > 0 and sum / n or 0, #rows
    end
    local common = " --set threads=2 --set seed=1 --set log.console=false --set log.tensorboard=false " ..
      "--set log.csv=false --no-eval"
    -- the random policy: the built-in experiment's initial network (nearly uniform over 4 moves), never updated
    local rc, out = run(d, "train snake --dir random --set ppo.lr=0 --set total_steps=" .. 64 * 32 * 15 .. common)
    assert.equal(0, rc, out)
    local random = food("random", 15)
    -- the built-in experiment, cut to 70 updates (it runs 196: about 20 food an episode at the end, measured)
    rc, out = run(d, "train snake --dir trained --set total_steps=" .. 64 * 32 * 70 .. common)
    assert.equal(0, rc, out)
    local trained, n = food("trained", 10)
    assert.equal(70, n)
    -- measured (seed 1): a random policy eats 0.15 an episode (it hits a wall within about 9 steps); the
    -- trained one 3 to 5 by update 70
    assert.is_true(random < 0.4, "random policy's food per episode " .. random)
    assert.is_true(trained > 1.5 and trained > 5 * random,
      string.format("trained food per episode %.3f (random %.3f)", trained, random))

    -- moonrl eval runs foraging's protocol on it, naming the environment; the ONNX export is spec/export_spec's
    rc, out = run(d, "eval trained --envs 16 --steps 64")
    assert.equal(0, rc, out)
    assert.matches("environment: snake", out, 1, true)
    -- a run of snake does not resume as reach (whose network reads 2 channels), naming both
    rc, out = run(d, "train --resume trained --set env.name=reach")
    assert.is_true(rc ~= 0, out)
    assert.matches('env.name = "reach": the run has "snake"', out, 1, true)
  end)

  -- catch (envs/catch.h): a float image (2 x N x N, grey levels) through the CNN as it is (its rules are
  -- checked step by step, pixel by pixel, in spec/c/test_env_catch.c; the float-image network against float64
  -- and central differences in test_policy.c; its ONNX export and numpy forward in act_spec).
  it("moonrl train catch learns from a float image: the return far above a random policy's, measured in the " ..
    "same test", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    -- the mean return and caught per episode of the last k updates, episode-weighted
    local function score(dir, k)
      local rows = {}
      for line in (support.read_file(d .. "/" .. dir .. "/metrics.jsonl") or ""):gmatch("[^\n]+") do
        local m = json.decode(line)
        if m.event == nil and (m.episodes or 0) > 0 then rows[#rows + 1] = m end
      end
      local n, ret, caught = 0, 0, 0
      for i = math.max(1, #rows - k + 1), #rows do
        n = n + rows[i].episodes
        ret = ret + rows[i].episodes * rows[i].episode_return_mean
        caught = caught + rows[i].episodes * rows[i].caught_per_episode   -- the counter by its declared name
      end
      return n > 0 and ret / n or -1, n > 0 and caught / n or 0, #rows
    end
    -- a 5 x 5 board: 4 steps an episode, a random policy catches about 1 ball in 5 (return -0.6)
    local common = " --set env.grid_size=5 --set ppo.lr=2e-3 --set ppo.ent_coef=0.01 --set threads=2 " ..
      "--set seed=1 --set log.console=false --set log.tensorboard=false --set log.csv=false --no-eval"
    local rc, out = run(d, "train catch --dir random --set ppo.lr=0 --set total_steps=" .. 64 * 32 * 10 .. common)
    assert.equal(0, rc, out)
    local random, random_caught = score("random", 10)
    rc, out = run(d, "train catch --dir trained --set total_steps=" .. 64 * 32 * 30 .. common)
    assert.equal(0, rc, out)
    local trained, caught, n = score("trained", 3)
    assert.equal(30, n)
    -- measured (seed 1): random -0.6 (0.2 caught); trained 0.2 to 0.6 by update 30 (0.6 to 0.8 caught)
    assert.is_true(random < -0.4 and random_caught < 0.3,
      string.format("random policy's return %.3f, caught %.3f", random, random_caught))
    assert.is_true(trained > 0.0 and caught > 2 * random_caught,
      string.format("trained return %.3f, caught %.3f (random %.3f, %.3f)", trained, caught, random, random_caught))
    -- the episodic evaluation: success is a catch
    rc, out = run(d, "eval trained --episodes 256 --envs 16")
    assert.equal(0, rc, out)
    assert.matches("environment: catch", out, 1, true)
    assert.matches("the episode counted caught at least once", out, 1, true)
    -- a run of catch does not resume as snake (cell codes, another network), naming both
    rc, out = run(d, "train --resume trained --set env.name=snake")
    assert.is_true(rc ~= 0, out)
    assert.matches('env.name = "snake": the run has "catch"', out, 1, true)
  end)

  -- dials (envs/dials.h): the multi-discrete head (a categorical per dial, side by side; its math is
  -- checked against float64 by spec/c/test_ppo_md.c, its rules step by step by spec/c/test_env_dials.c).
  it("moonrl train dials learns: the return far above a random policy's, measured in the same test", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    local common = " --set threads=2 --set seed=1 --set log.console=false --set log.tensorboard=false " ..
      "--set log.csv=false"
    -- the random policy: the built-in experiment's initial network (nearly uniform over each dial's 3 moves)
    local rc, out = run(d, "train dials --dir random --set ppo.lr=0 --set total_steps=" .. 16 * 64 * 10 ..
      common .. " --no-eval")
    assert.equal(0, rc, out)
    local random = last_returns(d .. "/random/metrics.jsonl", 10)
    -- the built-in experiment, whole (98 updates of 16 x 64 steps, about 10 s on two cores)
    rc, out = run(d, "train dials --dir trained" .. common)
    assert.equal(0, rc, out)
    local trained, n = last_returns(d .. "/trained/metrics.jsonl", 10)
    assert.equal(98, n)
    -- measured (seed 1): a random policy earns about 3.6 an episode; the trained one about 37 of the
    -- best possible 37.3 (each dial turned straight to its target, then held)
    assert.is_true(random < 6, "random policy's return " .. random)
    assert.is_true(trained > 30 and trained > 5 * random,
      string.format("trained return %.3f (random %.3f)", trained, random))
    -- the evaluation at its end: the episodic protocol, success = matched at least once
    assert.matches("environment: dials; the episodic protocol", out, 1, true)
    assert.matches("| matched per episode ", out, 1, true)
    assert.matches("| success ", out, 1, true)
    -- exported as safetensors: the actor's 6 outputs are the two dials' groups of 3
    rc, out = run(d, "export trained --out policy.safetensors")
    assert.equal(0, rc, out)
    local bytes = support.read_file(d .. "/policy.safetensors")
    local hlen = bytes:byte(1) + bytes:byte(2) * 256 + bytes:byte(3) * 65536
    local header = json.decode(bytes:sub(9, 8 + hlen))
    assert.same({ 6, 64 }, header["actor.w"].shape)
    local head = json.decode(header.__metadata__["moonrl.head"])
    assert.equal("multi_discrete", head.kind)
    assert.same({ 3, 3 }, head.nvec)
    assert.same({ { first = 0, count = 3 }, { first = 3, count = 3 } }, head.groups)
    -- a run of dials does not resume as cartpole (another action space), naming both
    rc, out = run(d, "train --resume trained --set env.name=cartpole --no-eval")
    assert.is_true(rc ~= 0, out)
    assert.matches('the run has "dials"', out, 1, true)
  end)
end)

-- moonrl.sweep.tpe, the Tree-structured Parzen Estimator behind
-- moonrl.sweep{ method = "tpe" }: against random search on cheap synthetic
-- objectives (Lua functions of the point, no training), its points inside the
-- space, its determinism, the option errors, and one real sweep with the
-- binary (a few trials of a tiny network) whose sweep.json records the method
-- and whose re-run with another definition is refused.

local space = require("moonrl.sweep.space")
local tpe = require("moonrl.sweep.tpe")
local definition = require("moonrl.sweep.definition")
local json = require("moonrl.formats.json")
local util = require("moonrl.util")
local support = require("support")

local function log10(x) return math.log(x) / math.log(10) end

-- A shifted quadratic, one term per kind of dimension, its minimum 0 at
-- x = 1.7, y = 7.3, lr = 10^-3.3, n = 37, opt = "c". The sweep maximises
-- its negative (mode "max"), so both modes are exercised.
local QUAD = {
  space = { x = space.uniform(-5, 5), y = space.uniform(0, 10), lr = space.loguniform(1e-5, 1e-1),
    n = space.randint(1, 64), opt = space.choice{ "a", "b", "c", "d" } },
  f = function(p)
    return ((p.x - 1.7) / 2) ^ 2 + ((p.y - 7.3) / 2) ^ 2 + (log10(p.lr) + 3.3) ^ 2 + ((p.n - 37) / 12) ^ 2 +
      (p.opt == "c" and 0 or 2)
  end,
}

-- Branin, less its minimum (0.397887, at three points): the regret, 0 at best.
local BRANIN = {
  space = { x1 = space.uniform(-5, 10), x2 = space.uniform(0, 15) },
  f = function(p)
    local b, c, t = 5.1 / (4 * math.pi ^ 2), 5 / math.pi, 1 / (8 * math.pi)
    return (p.x2 - b * p.x1 ^ 2 + c * p.x1 - 6) ^ 2 + 10 * (1 - t) * math.cos(p.x1) + 10 - 0.397887
  end,
}

-- The best value of n trials of TPE (seeded as a sweep seeds it) and the
-- sequence of its points; `sign` -1: the sweep maximises -f.
local function run_tpe(problem, seed, n, mode, opts)
  local history, best, points = {}, math.huge, {}
  local sign = mode == "max" and -1 or 1
  for i = 1, n do
    local o = util.deepcopy(opts or {})
    o.sample = function() return space.point(problem.space, "random", seed, i) end
    local p = tpe.suggest(problem.space, history, mode, space.rng(seed, i, "tpe"), o)
    local v = problem.f(p)
    history[#history + 1] = { params = p, value = sign * v, status = "done", trial = i }
    points[i] = p
    best = math.min(best, v)
  end
  return best, points
end

local function run_random(problem, seed, n)
  local best = math.huge
  for i = 1, n do best = math.min(best, problem.f(space.point(problem.space, "random", seed, i))) end
  return best
end

-- mean best of TPE and of random search over seeds 1 .. 20
local function compare(problem, n, mode)
  local st, sr = 0, 0
  for seed = 1, 20 do
    st = st + run_tpe(problem, seed, n, mode)
    sr = sr + run_random(problem, seed, n)
  end
  return st / 20, sr / 20
end

describe("moonrl.sweep.tpe against random search", function()
  -- Both margins were chosen from 15 blocks of 20 seeds each (seeds 1 .. 300):
  -- on the quadratic at 40 trials, TPE's mean best was 0.33 to 0.57 of random
  -- search's, and random search (another stream) against itself 0.85 to 1.15;
  -- on Branin at 60 trials, 0.14 to 0.38, and random against itself 0.47 to
  -- 1.93. (Branin at 40 trials overlaps: random search's best of 40 is heavy
  -- tailed and TPE has 30 model-based trials to pull away.) So a TPE that
  -- were no better than random fails these, and a correct one passes with room.
  it("finds a better shifted quadratic (uniform, loguniform, randint, choice) in 40 trials, 20 seeds", function()
    local t, r = compare(QUAD, 40, "max")
    print(string.format("\n  quadratic, 40 trials, mean best over 20 seeds: TPE %.4f, random %.4f (ratio %.2f)", t, r, t / r))
    assert.is_true(t < 0.7 * r, string.format("TPE %.4f, random %.4f", t, r))
  end)

  it("finds a lower Branin regret in 60 trials, 20 seeds", function()
    local t, r = compare(BRANIN, 60, "min")
    print(string.format("\n  Branin regret, 60 trials, mean best over 20 seeds: TPE %.4f, random %.4f (ratio %.2f)", t, r, t / r))
    assert.is_true(t < 0.45 * r, string.format("TPE %.4f, random %.4f", t, r))
  end)

end)

describe("moonrl.sweep.tpe's proposals", function()
  it("are deterministic for a seed, differ between seeds, and mode max of -f is mode min of f", function()
    local _, a = run_tpe(QUAD, 3, 25, "max")
    local _, b = run_tpe(QUAD, 3, 25, "max")
    assert.same(a, b)
    local _, c = run_tpe(QUAD, 4, 25, "max")
    assert.are_not.same(a[25], c[25])
    -- minimising f ranks as maximising -f did: the very same points
    local _, d = run_tpe(QUAD, 3, 25, "min")
    assert.same(a, d)
    -- the startup trials are the sweep's random points
    for i = 1, 10 do assert.same(space.point(QUAD.space, "random", 3, i), a[i]) end
    assert.are_not.same(space.point(QUAD.space, "random", 3, 11), a[11])
  end)

  it("count the points of unfinished trials as bad (a constant liar), so parallel proposals spread", function()
    -- the best two of 12 are x = 0.375 and 0.458: alone, TPE proposes around 0.4; with six trials
    -- running there, elsewhere
    local sp = { x = space.uniform(0, 1) }
    local history = {}
    for i = 1, 12 do
      local x = (i - 0.5) / 12
      history[i] = { params = { x = x }, value = -(x - 0.45) ^ 2, status = "done", trial = i }
    end
    local running = {}
    for i = 1, 6 do running[i] = { x = 0.4 + i / 600 } end
    local near, near_liar = 0, 0
    for i = 1, 50 do
      if math.abs(tpe.suggest(sp, history, "max", space.rng(1, i, "tpe")).x - 0.4) < 0.06 then near = near + 1 end
      local p = tpe.suggest(sp, history, "max", space.rng(1, i, "tpe"), { running = running })
      if math.abs(p.x - 0.4) < 0.06 then near_liar = near_liar + 1 end
    end
    assert.is_true(near >= 40 and near_liar <= 5, near_liar .. " of 50 near 0.4 with the running points, " ..
      near .. " without")
  end)

  it("steer away from the region where trials failed", function()
    -- x < 0: failed (a crash, no value); x >= 0: done, the value flat
    local sp = { x = space.uniform(-1, 1) }
    local history = {}
    for i = 1, 20 do
      local x = -1 + (i - 0.5) / 10
      history[i] = x < 0 and { params = { x = x }, status = "failed", trial = i }
        or { params = { x = x }, value = 1, status = "done", trial = i }
    end
    local neg = 0
    for i = 1, 50 do
      if tpe.suggest(sp, history, "max", space.rng(1, i, "tpe")).x < 0 then neg = neg + 1 end
    end
    assert.is_true(neg <= 10, neg .. " of 50 proposals in the failed half")
  end)
end)

describe("moonrl.sweep.tpe's points", function()
  local SPACE = {
    u = space.uniform(-2, 3), lg = space.loguniform(1e-6, 1e-2), n = space.randint(-3, 4), one = space.randint(5, 5),
    two = space.randint(0, 1), ch = space.choice{ "relu", "tanh", true, 7, { 32, 32 } }, gr = space.grid{ 64, 128, 256 },
    const = 0.5,
  }
  local function member(values, v)
    for _, w in ipairs(values) do if util.deep_equal(w, v) then return true end end
    return false
  end
  local function check(p, where)
    assert.is_true(p.u >= -2 and p.u < 3, where .. ": u = " .. tostring(p.u))
    assert.is_true(p.lg >= 1e-6 and p.lg <= 1e-2, where .. ": lg = " .. tostring(p.lg))
    for _, k in ipairs({ "n", "one", "two" }) do
      assert.equal(math.floor(p[k]), p[k], where .. ": " .. k .. " = " .. tostring(p[k]))
    end
    assert.is_true(p.n >= -3 and p.n <= 4, where .. ": n = " .. p.n)
    assert.equal(5, p.one)
    assert.is_true(p.two == 0 or p.two == 1, where)
    assert.is_true(member(SPACE.ch.values, p.ch), where .. ": ch = " .. util.fmt_value(p.ch))
    assert.is_true(member(SPACE.gr.values, p.gr), where .. ": gr = " .. tostring(p.gr))
    assert.equal(0.5, p.const)
    local n = 0
    for _ in pairs(p) do n = n + 1 end
    assert.equal(8, n, where)
  end

  it("stay inside the space: bounds, integers, members of choice and grid, constants", function()
    for seed = 1, 4 do
      local history, running = {}, {}
      -- values that would push the model to the edges: the best are at the bounds
      local function f(p)
        return math.abs(p.u - 3) + math.abs(log10(p.lg) + 6) + math.abs(p.n - 4) + (p.ch == true and 0 or 1)
      end
      for i = 1, 60 do
        local p = tpe.suggest(SPACE, history, "min", space.rng(seed, i, "tpe"),
          { startup = 5, candidates = 16, running = running })
        check(p, "seed " .. seed .. ", trial " .. i)
        -- every kind of history entry: done, stopped, failed, done without a value, and in flight
        local r = { params = p, trial = i, status = "done", value = f(p) }
        if i % 7 == 0 then r.status, r.value = "failed", nil
        elseif i % 5 == 0 then r.status = "stopped"
        elseif i % 11 == 0 then r.value = nil end
        if i % 9 == 0 then running[#running + 1] = p else history[#history + 1] = r end
      end
      -- values the space no longer has (edited with extend = true): left out, no error
      history[#history + 1] = { params = { u = 99, lg = -1, n = 2.5, ch = "gone", gr = 512, extra = 1 }, value = -1,
        status = "done", trial = 61 }
      history[#history + 1] = { params = { u = "text" }, value = 0 / 0, status = "done", trial = 62 }
      check(tpe.suggest(SPACE, history, "min", space.rng(seed, 63, "tpe")), "seed " .. seed .. " after edits")
    end
  end)

  it("match choice values that went through JSON (results.jsonl) back to the space's", function()
    local sp = { lr = space.choice{ 1 / 3, 2 / 3, 0.1 } }
    local history = {}
    for i = 1, 30 do
      local v = sp.lr.values[(i % 3) + 1]
      history[i] = { params = json.decode(json.encode({ lr = v })), value = v == 0.1 and 1 or 0, status = "done", trial = i }
    end
    local n01 = 0
    for i = 1, 40 do
      local p = tpe.suggest(sp, history, "max", space.rng(2, i, "tpe"))
      assert.is_true(member(sp.lr.values, p.lr))
      if p.lr == 0.1 then n01 = n01 + 1 end
    end
    assert.is_true(n01 >= 30, n01 .. " of 40 at the best value")
  end)
end)

describe("moonrl.sweep.tpe's multivariate form (tpe.multivariate = true)", function()
  it("is a density: it integrates to 1 over a space of every kind of key (a quadrature as reference)", function()
    local sp = { x = space.uniform(0, 1), lr = space.loguniform(1e-3, 1e-1), n = space.randint(1, 4),
      c = space.choice{ "a", "b", "c" } }
    local list = { { x = 0.1, lr = 2e-3, n = 1, c = "a" }, { x = 0.7, lr = 5e-2, n = 3, c = "c" },
      { x = 0.95, lr = 1e-2, n = 4, c = "a" } }
    -- the midpoint rule over x and log(lr) (loguniform is modelled in log space), sums over n and c
    local N, total = 100, 0
    local ulo, uhi = math.log(1e-3), math.log(1e-1)
    local cell = (1 / N) * ((uhi - ulo) / N)
    for _, c in ipairs({ "a", "b", "c" }) do
      for n = 1, 4 do
        for i = 1, N do
          for j = 1, N do
            local point = { x = (i - 0.5) / N, lr = math.exp(ulo + (j - 0.5) / N * (uhi - ulo)), n = n, c = c }
            total = total + math.exp(tpe.joint_log_density(sp, list, point)) * cell
          end
        end
      end
    end
    assert.is_true(math.abs(total - 1) < 1e-3, "integral " .. total)
  end)

  it("counts a bad trial against a candidate only where it is close in every key", function()
    -- the good trial at (0.2, 0.2), bad ones at the other corners and the centre: each of the good
    -- trial's values is also a bad trial's, so the independent form is pushed away from both, while
    -- the joint one sees no bad trial near (0.2, 0.2)
    local sp = { x = space.uniform(0, 1), y = space.uniform(0, 1) }
    local history = {}
    for i, p in ipairs({ { 0.2, 0.2, 1 }, { 0.2, 0.8, 0 }, { 0.8, 0.2, 0 }, { 0.8, 0.8, 0 }, { 0.5, 0.5, 0 } }) do
      history[i] = { params = { x = p[1], y = p[2] }, value = p[3], status = "done", trial = i }
    end
    local near = { [false] = 0, [true] = 0 }
    for _, mv in ipairs({ false, true }) do
      for i = 1, 50 do
        local p = tpe.suggest(sp, history, "max", space.rng(1, i, "tpe"), { startup = 0, multivariate = mv })
        if math.abs(p.x - 0.2) < 0.15 and math.abs(p.y - 0.2) < 0.15 then near[mv] = near[mv] + 1 end
      end
    end
    assert.is_true(near[true] >= 25 and near[false] <= 5, string.format("near (0.2, 0.2): %d of 50 joint, %d independent",
      near[true], near[false]))
  end)

  -- Over 10 blocks of 20 seeds (seeds 1 .. 200), the multivariate form's mean best on the
  -- quadratic at 40 trials was 0.32 to 0.63 of the independent form's (on Branin 0.36 to 1.05, so
  -- not asserted); the same form against itself is 1.
  it("finds a better shifted quadratic than the independent form in 40 trials, 20 seeds", function()
    local m, i = 0, 0
    for seed = 1, 20 do
      m = m + run_tpe(QUAD, seed, 40, "max", { multivariate = true })
      i = i + run_tpe(QUAD, seed, 40, "max")
    end
    print(string.format("\n  quadratic, 40 trials, mean best over 20 seeds: multivariate %.4f, independent %.4f", m / 20, i / 20))
    assert.is_true(m < 0.8 * i, string.format("multivariate %.4f, independent %.4f", m / 20, i / 20))
  end)

  it("stays inside the space and is deterministic for a seed", function()
    local a, pa = run_tpe(QUAD, 5, 20, "max", { multivariate = true })
    local b, pb = run_tpe(QUAD, 5, 20, "max", { multivariate = true })
    assert.equal(a, b)
    assert.same(pa, pb)
    for _, p in ipairs(pa) do
      assert.is_true(p.x >= -5 and p.x <= 5 and p.y >= 0 and p.y <= 10 and p.lr >= 1e-5 and p.lr <= 1e-1)
      assert.is_true(p.n >= 1 and p.n <= 64 and p.n == math.floor(p.n))
      assert.is_true(p.opt == "a" or p.opt == "b" or p.opt == "c" or p.opt == "d")
    end
  end)

  it("is an option: true or false, in the definition only when true", function()
    local o = definition.check({ method = "tpe", trials = 8, tpe = { multivariate = true } })
    assert.equal("startup=10 gamma=0.1 candidates=24 multivariate", tpe.describe(o.tpe))
    o = definition.check({ method = "tpe", trials = 8, tpe = { multivariate = false } })
    assert.equal("startup=10 gamma=0.1 candidates=24", tpe.describe(o.tpe))
    local ok, err = pcall(definition.check, { method = "tpe", trials = 8, tpe = { multivariate = "yes" } })
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("tpe.multivariate must be true (one density over all keys) or false", 1, true))
  end)
end)

describe("moonrl.sweep{ method = \"tpe\" } options", function()
  local function err_of(spec)
    local ok, err = pcall(definition.check, spec)
    assert.is_false(ok, "accepted: " .. util.fmt_value(spec))
    return tostring(err)
  end
  local function has(text, s) return text:find(s, 1, true) ~= nil end

  it("takes tpe = {startup, gamma, candidates}, defaults filled", function()
    local o = definition.check({ method = "tpe", trials = 8 })
    assert.equal("tpe", o.method)
    assert.same({ startup = 10, gamma = 0.1, candidates = 24 }, o.tpe)
    o = definition.check({ method = "tpe", trials = 8, tpe = { startup = 0, gamma = 0.25, candidates = 1 } })
    assert.same({ startup = 0, gamma = 0.25, candidates = 1 }, o.tpe)
    assert.equal("startup=0 gamma=0.25 candidates=1", tpe.describe(o.tpe))
  end)

  it("refuses bad options, naming what is accepted", function()
    assert.is_true(has(err_of({ method = "tpe" }), "method = \"tpe\" needs trials = N"))
    assert.is_true(has(err_of({ method = "tpz", trials = 2 }), "method must be \"grid\", \"random\", \"pbt\", \"tpe\" or a function"))
    assert.is_true(has(err_of({ method = "tpe", trials = 2, tpe = { n_startup = 3 } }),
      "tpe.n_startup: accepted startup, gamma, candidates"))
    assert.is_true(has(err_of({ method = "tpe", trials = 2, tpe = 5 }), "tpe must be a table {startup =, gamma =, candidates =}"))
    for _, bad in ipairs({ -1, 2.5, "10", math.huge }) do
      assert.is_true(has(err_of({ method = "tpe", trials = 2, tpe = { startup = bad } }),
        "tpe.startup must be a whole number of random trials >= 0"))
    end
    for _, bad in ipairs({ 0, 1, -0.1, 0 / 0, "0.2" }) do
      assert.is_true(has(err_of({ method = "tpe", trials = 2, tpe = { gamma = bad } }), "tpe.gamma must be a number in (0, 1)"))
    end
    for _, bad in ipairs({ 0, 1.5, "24" }) do
      assert.is_true(has(err_of({ method = "tpe", trials = 2, tpe = { candidates = bad } }),
        "tpe.candidates must be a whole number >= 1"))
    end
    assert.is_true(has(err_of({ method = "random", trials = 2, tpe = { startup = 2 } }),
      "tpe is an option of method = \"tpe\""))
    assert.is_true(has(err_of({ trials = 2, tpe = {} }), "tpe is an option of method = \"tpe\""))
    assert.is_true(has(err_of({ method = "tpe", trials = 2, repeats = 2 }),
      "repeats with a method function, TPE, ASHA or a budget is not built"))
    -- a budget: random, tpe or a method function (one trial at a time); not with repeats
    assert.is_true(has(err_of({ method = "grid", budget = 1000 }),
      "budget (agent-steps in all) works with method = \"random\", \"tpe\" or a method function"))
    assert.is_true(has(err_of({ method = "random", trials = 4, budget = 1000, repeats = 2 }),
      "repeats with a method function, TPE, ASHA or a budget is not built"))
    assert.is_true(pcall(definition.check, { method = "random", trials = 4, budget = 1000 }))
    -- the finish's schedules: "constant" (the default) or "base", and only with a finish
    assert.equal("constant", definition.check({ method = "random", trials = 4, finish = 100 }).finish_schedules)
    assert.equal("base", definition.check({ method = "random", trials = 4, finish = 100, finish_schedules = "base" }).finish_schedules)
    local okf, errf = pcall(definition.check, { method = "random", trials = 4, finish = 100, finish_schedules = "linear" })
    assert.is_false(okf)
    assert.matches('finish_schedules must be "constant" .* or "base" .*, got "linear"', errf)
    okf, errf = pcall(definition.check, { method = "random", trials = 4, finish_schedules = "constant" })
    assert.is_false(okf)
    assert.matches("finish_schedules is an option of finish", errf, 1, true)
    assert.is_true(has(err_of({ method = "tpe", trials = 2, tpee = {} }), "unknown option \"tpee\" - did you mean tpe?"))
  end)

  it("tries tpe.points first, in order (keys left out: the trial's random value), counting them as startup", function()
    local sp = { ["ppo.lr"] = space.loguniform(1e-4, 1e-2), ["ppo.clip"] = space.uniform(0.1, 0.3),
      ["ppo.epochs"] = space.randint(1, 8) }
    local o = definition.check({ method = "tpe", trials = 8,
      tpe = { startup = 2, points = { { ["ppo.lr"] = 1e-3, ["ppo.clip"] = 0.2, ["ppo.epochs"] = 4 }, { ["ppo.lr"] = 5e-3 } } } })
    assert.equal("startup=2 gamma=0.1 candidates=24 points={ppo.clip=0.2,ppo.epochs=4,ppo.lr=0.001};{ppo.lr=0.005}",
      tpe.describe(o.tpe))
    local method = tpe.method(o.tpe)
    local function ctx(i) return { index = i, seed = 3, space = sp, mode = "max",
      sample = function() return space.point(sp, "random", 3, i) end } end
    assert.same({ ["ppo.lr"] = 1e-3, ["ppo.clip"] = 0.2, ["ppo.epochs"] = 4 }, method({}, ctx(1)))
    local second, random2 = method({}, ctx(2)), space.point(sp, "random", 3, 2)
    assert.equal(5e-3, second["ppo.lr"])
    assert.equal(random2["ppo.clip"], second["ppo.clip"])
    assert.equal(random2["ppo.epochs"], second["ppo.epochs"])
    -- after the two points (startup 2) the model proposes: not trial 3's random point
    local history = { { trial = 1, status = "done", value = 1, params = method({}, ctx(1)) },
      { trial = 2, status = "done", value = 0, params = second } }
    local third = method(history, ctx(3))
    assert.are_not.same(space.point(sp, "random", 3, 3), third)
    assert.same(tpe.suggest(sp, history, "max", space.rng(3, 3, "tpe"), { startup = 2 }), third)
    -- bad points are refused, naming the form
    for _, bad in ipairs({ 5, { 1e-3 }, { { [1] = 2 } }, { a = {} } }) do
      local ok, err = pcall(definition.check, { method = "tpe", trials = 2, tpe = { points = bad } })
      assert.is_false(ok)
      assert.is_true(tostring(err):find("tpe.points must be a list of points", 1, true) ~= nil, tostring(err))
    end
  end)

  it("is part of the definition: another method or other options are changes", function()
    local function def(method, o)
      return definition.of({ keys = {}, space = {}, method = method == "tpe" and function() end or method,
        method_name = method == "tpe" and "tpe" or nil, tpe = o, seed = 1, trials = 4, base_cfg = {}, repeats = 1 })
    end
    local a = def("tpe", { startup = 10, gamma = 0.1, candidates = 24 })
    assert.equal("tpe", a.method)
    assert.equal("startup=10 gamma=0.1 candidates=24", a.tpe)
    assert.same({}, definition.changes(a, def("tpe", { startup = 10, gamma = 0.1, candidates = 24 })))
    assert.same({ "tpe: startup=10 gamma=0.1 candidates=24 before, startup=5 gamma=0.1 candidates=24 now" },
      definition.changes(a, def("tpe", { startup = 5, gamma = 0.1, candidates = 24 })))
    assert.same({ "method: tpe before, random now" }, definition.changes(a, def("random")))
    assert.same({ "method: random before, tpe now" }, definition.changes(def("random"), a))
  end)
end)

-- A real sweep (build/moonrl): 5 trials of a tiny network, one at a time.
-- The metric is the learning rate itself (a constant schedule), so the
-- values are known without depending on how training goes.
local BIN = support.BIN
local SCRIPT = [==[
local moonrl = require "moonrl"
local dir, case = arg[1], arg[2]
local spec = {
  base = {
    name = "tpe", hardware = "ci", threads = 1, total_steps = 64 * 4, warmup = { updates = 0 },
    env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8, max_episode_steps = 16 },
    policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
    ppo = { rollout_steps = 8 },
    log = { console = false, tensorboard = false, csv = false, checkpoint_interval = 5 },
  },
  dir = dir, seed = 7, metric = "lr", mode = "max", smooth = 1, poll_ms = 50, console = false,
  space = { ["ppo.lr"] = moonrl.loguniform(1e-4, 1e-3), ["ppo.gamma"] = moonrl.uniform(0.9, 0.999),
    ["ppo.epochs"] = moonrl.randint(1, 3), ["ppo.ent_coef"] = moonrl.choice{ 0.01, 0.05 } },
  method = "tpe", trials = 5, parallel = 1, tpe = { startup = 2, candidates = 8 },
}
if case == "candidates" then spec.tpe.candidates = 9 end
if case == "parallel" then spec.trials, spec.parallel = 8, 3 end
if case == "random" then spec.method, spec.tpe = "random", nil end
local s = moonrl.sweep(spec):wait()
print("summary " .. s.status .. " " .. #s.results)
]==]

describe("moonrl.sweep{ method = \"tpe\" } (the binary)", function()
  local dir
  before_each(function()
    dir = support.tmpdir()
    support.write_file(dir .. "/sweep.lua", SCRIPT)
  end)
  after_each(function() support.rm_rf(dir) end)

  it("runs the trials TPE proposes from the results, records method tpe, and refuses a changed re-run", function()
    if not support.have_bin then pending("no binary at " .. BIN .. " (build it: make build)") return end
    local code, out, err = support.moonrl("run sweep.lua sw", dir)
    assert.equal(0, code, err .. out)
    assert.is_true(out:find("summary done 5", 1, true) ~= nil, out)
    local info = json.decode(support.read_file(dir .. "/sw/sweep.json"))
    assert.equal("tpe", info.method)
    assert.equal("tpe", info.definition.method)
    assert.equal("startup=2 gamma=0.1 candidates=8", info.definition.tpe)
    local sp = { ["ppo.lr"] = space.loguniform(1e-4, 1e-3), ["ppo.gamma"] = space.uniform(0.9, 0.999),
      ["ppo.epochs"] = space.randint(1, 3), ["ppo.ent_coef"] = space.choice{ 0.01, 0.05 } }
    local history = {}
    for line in support.read_file(dir .. "/sw/results.jsonl"):gmatch("[^\n]+") do
      local r = json.decode(line)
      if r.event == nil then history[#history + 1] = r end
    end
    table.sort(history, function(a, b) return a.trial < b.trial end)
    assert.equal(5, #history)
    for i, r in ipairs(history) do
      assert.equal("done", r.status)
      local p = r.params
      assert.is_true(p["ppo.lr"] >= 1e-4 and p["ppo.lr"] <= 1e-3)
      assert.is_true(p["ppo.gamma"] >= 0.9 and p["ppo.gamma"] < 0.999)
      assert.is_true(p["ppo.epochs"] == 1 or p["ppo.epochs"] == 2 or p["ppo.epochs"] == 3)
      assert.is_true(p["ppo.ent_coef"] == 0.01 or p["ppo.ent_coef"] == 0.05)
      assert.is_true(math.abs(r.value - p["ppo.lr"]) <= 1e-9 * p["ppo.lr"], "the metric is the lr")
      -- what the sweep ran is what tpe.suggest proposes from the results before it, seeded by the sweep seed
      local before = {}
      for j = 1, i - 1 do before[j] = history[j] end
      local want = tpe.suggest(sp, before, "max", space.rng(7, i, "tpe"), { startup = 2, candidates = 8,
        sample = function() return space.point(sp, "random", 7, i) end })
      assert.same(want, p)
    end
    -- the same definition again: nothing to do; another tpe option or method: refused, nothing started
    code, out, err = support.moonrl("run sweep.lua sw", dir)
    assert.equal(0, code, err .. out)
    local before = support.read_file(dir .. "/sw/results.jsonl")
    code, out, err = support.moonrl("run sweep.lua sw candidates", dir)
    assert.equal(1, code, err .. out)
    assert.is_true(err:find("tpe: startup=2 gamma=0.1 candidates=8 before, startup=2 gamma=0.1 candidates=9 now", 1, true) ~= nil, err)
    code, out, err = support.moonrl("run sweep.lua sw random", dir)
    assert.equal(1, code, err .. out)
    assert.is_true(err:find("method: tpe before, random now", 1, true) ~= nil, err)
    assert.equal(before, support.read_file(dir .. "/sw/results.jsonl"))
  end)

  it("proposes as places free up with parallel > 1, the unfinished trials in its model", function()
    if not support.have_bin then pending("no binary at " .. BIN .. " (build it: make build)") return end
    local code, out, err = support.moonrl("run sweep.lua sw parallel", dir)
    assert.equal(0, code, err .. out)
    assert.is_true(out:find("summary done 8", 1, true) ~= nil, out)
    -- replayed from results.jsonl: when trial i started, the results before its start line were the
    -- history, and the trials started before it without a result were running; TPE proposed from those
    local sp = { ["ppo.lr"] = space.loguniform(1e-4, 1e-3), ["ppo.gamma"] = space.uniform(0.9, 0.999),
      ["ppo.epochs"] = space.randint(1, 3), ["ppo.ent_coef"] = space.choice{ 0.01, 0.05 } }
    local history, started, finished, n, with_running = {}, {}, {}, 0, 0
    for line in support.read_file(dir .. "/sw/results.jsonl"):gmatch("[^\n]+") do
      local r = json.decode(line)
      if r.event == "start" then
        local i = r.trial
        local sorted = {}
        for _, h in ipairs(history) do sorted[#sorted + 1] = h end
        table.sort(sorted, function(a, b) return a.trial < b.trial end)
        local running = {}
        for j = 1, i - 1 do
          if started[j] and not finished[j] then running[#running + 1] = started[j] end
        end
        if #sorted >= 2 and #running > 0 then with_running = with_running + 1 end
        local want = tpe.suggest(sp, sorted, "max", space.rng(7, i, "tpe"), { startup = 2, candidates = 8,
          running = running, sample = function() return space.point(sp, "random", 7, i) end })
        assert.same(want, r.params, "trial " .. i)
        started[i] = r.params
      elseif r.event == nil then
        n = n + 1
        assert.equal("done", r.status)
        finished[r.trial] = true
        history[#history + 1] = r
      end
    end
    assert.equal(8, n)
    assert.is_true(with_running > 0, "no proposal was made while others ran")
  end)
end)

-- TPE inside ASHA's rungs (tpe.level_history, BOHB-style): a sequential sweep
-- simulated without training. A trial's value at budget b (in rung units 1,
-- 3, 9, full 27) is the quadratic's -f plus noise that shrinks with b; ASHA
-- (reduction 3) stops trials at the rungs; the model is fitted on the largest
-- budget holding enough values.
local asha = require("moonrl.sweep.asha")

local function run_asha(problem, seed, n, use_tpe)
  local s = asha.new({ grace_steps = 1, reduction = 3, mode = "max" })
  local history, finals, params, best = {}, {}, {}, math.huge
  local noise = space.rng(seed, 0, "asha noise")
  local function levels()
    local out = { {} }
    for _, r in ipairs(finals) do out[1][#out[1] + 1] = r end
    for k = 3, 1, -1 do
      local level = {}
      for id, v in pairs(s.recorded[k] or {}) do level[#level + 1] = { params = params[id], value = v, status = "done", trial = id } end
      table.sort(level, function(a, b) return a.trial < b.trial end)
      out[#out + 1] = level
    end
    return out
  end
  local method = tpe.method(tpe.DEFAULTS, nil, levels)
  for i = 1, n do
    local p
    if use_tpe then
      p = method(history, { space = problem.space, mode = "max", seed = seed, index = i,
        sample = function() return space.point(problem.space, "random", seed, i) end })
    else
      p = space.point(problem.space, "random", seed, i)
    end
    params[i] = p
    local f = problem.f(p)
    local status, value = "done", nil
    for k = 1, 4 do
      local b = 3 ^ (k - 1)
      value = -f + (noise() - 0.5) * 4 / math.sqrt(b)
      if k == 4 then break end
      if s:decide(i, k, value) == "stop" then status = "stopped" break end
    end
    if status == "done" then
      finals[#finals + 1] = { params = p, value = value, status = "done", trial = i }
      best = math.min(best, f)
    end
    history[#history + 1] = { params = p, value = value, status = status, trial = i }
  end
  return best
end

describe("moonrl.sweep.tpe inside ASHA (BOHB-style)", function()
  it("ranks each trial at the largest budget it reached, then by its value there; failed trials are bad", function()
    local hist = { { params = { x = 1 }, value = 0.1, status = "stopped", trial = 1 },
      { params = { x = 2 }, status = "failed", trial = 2 }, { params = { x = 3 }, value = 1, status = "done", trial = 3 },
      { params = { x = 4 }, value = 0.9, status = "stopped", trial = 4 } }
    local levels = { { { params = { x = 3 }, value = 1, trial = 3 } },
      { { params = { x = 1 }, value = 0.5, trial = 1 }, { params = { x = 3 }, value = 0.7, trial = 3 } },
      { { params = { x = 1 }, value = 0.2, trial = 1 }, { params = { x = 4 }, value = 0.9, trial = 4 }, { params = { x = 3 }, value = 0.1, trial = 3 } } }
    local got, used = tpe.level_history(hist, levels)
    assert.is_true(used)
    assert.equal(4, #got)
    assert.same({ 3, 1, 4, 2 }, { got[1].trial, got[2].trial, got[3].trial, got[4].trial })
    assert.same({ 1, 2, 3 }, { got[1].level, got[2].level, got[3].level })
    assert.equal(0.5, got[2].value)   -- trial 1 at the largest rung it reached
    assert.equal("failed", got[4].status)
    local same, used2 = tpe.level_history(hist, {})
    assert.is_false(used2)
    assert.equal(hist, same)
  end)

  it("finds a better shifted quadratic than random search under the same ASHA, 60 trials, 20 seeds", function()
    -- the mean over 20 seeds of the best f among the trials that ran their full budget
    -- (measured when written: ASHA + TPE 0.588, ASHA + random 2.175)
    local st, sr = 0, 0
    for seed = 1, 20 do
      st = st + run_asha(QUAD, seed, 60, true)
      sr = sr + run_asha(QUAD, seed, 60, false)
    end
    assert.is_true(st < 0.8 * sr, string.format("ASHA + TPE %.3f, ASHA + random %.3f", st / 20, sr / 20))
  end)
end)

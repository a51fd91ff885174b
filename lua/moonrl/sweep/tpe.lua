-- moonrl.sweep.tpe - a model-based sweep sampler: the Tree-structured Parzen
-- Estimator (Bergstra et al. 2011, "Algorithms for hyper-parameter
-- optimization"), the independent form that hyperopt and Optuna's
-- TPESampler use by default: moonrl.sweep{ method = "tpe", trials = N,
-- tpe = { startup =, gamma =, candidates =, multivariate = } }.
--
-- After `startup` random trials, each new point is proposed from the results
-- so far. They are ranked by the metric and split into the good ones (the
-- best `gamma` share) and the rest; for each key of the space, one density
-- l(x) is fitted to the good trials' values and one, g(x), to the others';
-- `candidates` values are drawn from l and the one with the largest
-- l(x) / g(x) is the key's next value (the expected improvement of the
-- paper's derivation grows with that ratio). The keys are modelled
-- independently of each other:
--   uniform      a mixture of Gaussians truncated to [lo, hi]: one per
--                observed value (its width the larger gap to its sorted
--                neighbours, clipped to between (hi - lo) / min(100, n + 2)
--                and hi - lo) and a prior one (mean (lo + hi) / 2, width
--                hi - lo, weight 1) that keeps a sparse model from collapsing
--   loguniform   the same in log space
--   randint      the same over [lo - 0.5, hi + 0.5], a draw rounded to the
--                nearest integer; l and g are then the mass of its unit bin
--   choice, grid categorical: a kernel per observed value (that value
--                1 + s, every value s = 1 / (n + 1), normalised) and a
--                uniform prior kernel of weight 1. Optuna's smoothing: with
--                plain counts, l(x) at a value no good trial had is so small
--                that the sampler keeps to the value of its first good
--                trials (on a shifted quadratic with a four-valued choice
--                key, worse than random search at 80 trials)
--   a constant   itself
-- Which trials count, and where:
--   - done trials with a number as value: ranked by it (mode "max": largest
--     first); trials the scheduler (ASHA) stopped rank after every done
--     one, by their value at the stop. Of these, the first
--     min(ceil(gamma * n), 25) are the good group, the others bad.
--   - failed trials, and trials without a value, count as bad (in g only):
--     a point that crashed, diverged or ran out of time is evidence against
--     its region (a failure the point did not cause, a lost node, costs a
--     little exploration there; ignoring failures instead would let TPE
--     propose the crashing region again and again).
--   - trials proposed but not finished yet (with parallel > 1) count as
--     bad too (Optuna's "constant liar"), so that proposals made while
--     others run spread out instead of piling onto the same spot.
--   - a value outside the key's current range, or not among its values (a
--     space edited with extend = true), is left out of that key's model.
-- The model is used once `startup` trials have finished (any status); until
-- then each proposal is the sweep's random point (space.point(.., "random",
-- seed, i), the very point method = "random" would try for trial i). With
-- parallel > 1 more than `startup` trials may start that way.
--
-- Options (tpe = {...}, each optional):
--   startup     random trials before the model is used (default 10)
--   gamma       the share of ranked trials in the good group: the best
--               min(ceil(gamma * n), 25) of n (default 0.1, Optuna's
--               default). Measured over 300 seeds on spec/tpe_spec.lua's
--               functions: 0.1 did best on the quadratics (at 25 to 80
--               trials), 0.15 on Branin, 0.25 no better than either
--               anywhere; a large good group blurs l(x) with middling trials
--   candidates  values drawn from l(x) per key, of which the best ratio
--               wins (default 24, as Optuna and hyperopt)
--   multivariate  true: one density over all keys at once instead of one per
--               key (below, "The multivariate form"; default false)
--   points      a list of points ({ [key] = value }) the first trials try,
--               in order, before any other (Optuna's enqueue_trial, Ray
--               Tune's points_to_evaluate): typically the experiment's own
--               settings, so that the sweep measures the default at the
--               trials' budget and the model starts from it. A key a point
--               leaves out takes the trial's random value. They count among
--               the `startup` trials (default: none)
--
-- Reproducibility: trial i's proposal draws from space.rng(seed, i, "tpe")
-- and depends only on the results in the history, so with parallel = 1 a
-- sweep proposes the same points each time (and a re-run that resumes it
-- proposes the points the first run would have). With parallel > 1, the
-- history at each proposal depends on which trials finished first, which
-- varies from run to run.
--
-- Why here, in Lua: the estimator is small (a few hundred lines, no linear
-- algebra) and needs nothing installed; Optuna would need Python and its
-- packages at runtime on every machine that drives a sweep.
--
--   tpe.suggest(space_table, history, mode, rng, opts) -> point
--       history: results ({params =, value =, status =, trial =}); mode "max" |
--       "min"; rng() -> uniform [0, 1); opts: startup, gamma, candidates,
--       multivariate (as above, defaults filled), sample (function() -> a random point, used
--       for the startup trials; default each key drawn from rng), running
--       (the points of trials not finished yet). Pure: the same arguments and
--       the same rng sequence give the same point.
--   tpe.check(opts) -> options | raises (at moonrl.sweep's caller)
--   tpe.describe(options) -> "startup=10 gamma=0.1 candidates=24" (sweep.json's definition;
--       " points={ppo.lr=0.001,...}" added when there are points)
--   tpe.method(options, in_flight, levels) -> function(history, ctx) -> point: what
--       moonrl.sweep runs for method = "tpe" (in_flight(index) -> the points
--       proposed before trial `index` without a result yet; levels() -> the
--       scheduler's budgets as histories, see "Inside ASHA" below)
--   tpe.level_history(history, levels) -> the history the model is fitted on
--
-- Inside ASHA (multi-fidelity, after BOHB, Falkner et al. 2018): with a
-- scheduler, trials are compared at equal budgets. levels() lists, largest
-- budget first, the finished trials at the full budget and then each rung's
-- recorded values ({params, value, trial}). Each trial is ranked at the
-- largest budget it reached: every trial of a larger budget first, then by
-- its value there (the order ASHA's promotions imply); failed trials are
-- bad points. BOHB instead fits on the largest budget holding d + 1 values;
-- in spec/tpe_spec.lua's simulated ASHA sweep of the shifted quadratic that
-- rule did no better than random search (mean best 2.05 against 2.15 over
-- 40 seeds at 60 trials: a model of the few trials at the full budget),
-- while this ranking, which keeps every trial, reached 0.61 - as did TPE on
-- the plain history (done trials first, then stopped ones by their value at
-- the stop: 0.61); at 30 trials 1.82 against plain 1.80. So on that
-- simulation the rungs add nothing measurable over what TPE did already;
-- what they change is that two trials stopped at different rungs are never
-- compared on values at different budgets.

local util = require("moonrl.util")
local space = require("moonrl.sweep.space")

local tpe = {}

tpe.DEFAULTS = { startup = 10, gamma = 0.1, candidates = 24 }
local PRIOR_WEIGHT = 1.0
local MAX_GOOD = 25
local SQRT2 = math.sqrt(2)
local LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
local TINY = 1e-300

-- ------------------------------------------------------------- options

function tpe.check(o)
  if o == nil then o = {} end
  if type(o) ~= "table" then
    error("moonrl.sweep: tpe must be a table {startup =, gamma =, candidates =}, got " .. util.fmt_value(o), 4)
  end
  for k in pairs(o) do
    if k ~= "startup" and k ~= "gamma" and k ~= "candidates" and k ~= "points" and k ~= "multivariate" then
      error("moonrl.sweep: tpe." .. tostring(k) .. ": accepted startup, gamma, candidates, points, multivariate", 4)
    end
  end
  local out = { startup = o.startup, gamma = o.gamma, candidates = o.candidates, points = o.points,
    multivariate = o.multivariate }
  if out.multivariate ~= nil and type(out.multivariate) ~= "boolean" then
    error("moonrl.sweep: tpe.multivariate must be true (one density over all keys) or false (one per key), got " ..
      util.fmt_value(o.multivariate), 4)
  end
  if out.multivariate == false then out.multivariate = nil end
  if out.points ~= nil then
    local ok = type(out.points) == "table" and next(out.points) == nil or (type(out.points) == "table" and #out.points > 0)
    for k, p in pairs(type(out.points) == "table" and out.points or {}) do
      if type(k) ~= "number" or type(p) ~= "table" then ok = false break end
      for key in pairs(p) do if type(key) ~= "string" then ok = false end end
    end
    if not ok then
      error("moonrl.sweep: tpe.points must be a list of points { [\"ppo.lr\"] = 1e-3, ... } (the first trials' " ..
        "settings, in order), got " .. util.fmt_value(o.points), 4)
    end
  end
  for k, v in pairs(tpe.DEFAULTS) do if out[k] == nil then out[k] = v end end
  local s = out.startup
  if type(s) ~= "number" or s ~= math.floor(s) or s < 0 or s == math.huge then
    error("moonrl.sweep: tpe.startup must be a whole number of random trials >= 0, got " .. util.fmt_value(o.startup), 4)
  end
  if type(out.gamma) ~= "number" or not (out.gamma > 0 and out.gamma < 1) then
    error("moonrl.sweep: tpe.gamma must be a number in (0, 1) (the share of trials in the good group), got " ..
      util.fmt_value(o.gamma), 4)
  end
  local c = out.candidates
  if type(c) ~= "number" or c ~= math.floor(c) or c < 1 or c == math.huge then
    error("moonrl.sweep: tpe.candidates must be a whole number >= 1, got " .. util.fmt_value(o.candidates), 4)
  end
  return out
end

function tpe.describe(o)
  local s = string.format("startup=%s gamma=%s candidates=%s", util.fmt_number(o.startup), util.fmt_number(o.gamma),
    util.fmt_number(o.candidates))
  if o.multivariate then s = s .. " multivariate" end
  if o.points and #o.points > 0 then
    local parts = {}
    for _, p in ipairs(o.points) do
      local kv = {}
      for _, k in ipairs(util.sorted_keys(p)) do kv[#kv + 1] = k .. "=" .. util.fmt_value(p[k]) end
      parts[#parts + 1] = "{" .. table.concat(kv, ",") .. "}"
    end
    s = s .. " points=" .. table.concat(parts, ";")
  end
  return s
end

-- ------------------------------------------------------------- numbers

-- erfc, fractional error below 1.2e-7 everywhere (Numerical Recipes' Chebyshev fit),
-- so that the small tails keep their precision
local function erfc(x)
  local z = math.abs(x)
  local t = 1 / (1 + 0.5 * z)
  local r = t * math.exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
    t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 +
    t * 0.17087277)))))))))
  if x >= 0 then return r end
  return 2 - r
end

-- P(a <= Z < b) for a standard normal Z, a <= b, from the tail that keeps precision
local function normal_mass(a, b)
  if a >= 0 then return 0.5 * (erfc(a / SQRT2) - erfc(b / SQRT2)) end
  if b <= 0 then return 0.5 * (erfc(-b / SQRT2) - erfc(-a / SQRT2)) end
  return 1 - 0.5 * erfc(b / SQRT2) - 0.5 * erfc(-a / SQRT2)
end

local function log_sum_exp(xs)
  local m = -math.huge
  for i = 1, #xs do if xs[i] > m then m = xs[i] end end
  if m == -math.huge then return m end
  local s = 0
  for i = 1, #xs do s = s + math.exp(xs[i] - m) end
  return m + math.log(s)
end

local function gaussian(rng)
  local u1, u2 = 1 - rng(), rng()   -- u1 in (0, 1]
  return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
end

-- the index of a draw from the weights w(1) .. w(n), which sum to 1 (n when rounding leaves
-- the draw past them)
local function draw_index(n, w, rng)
  local u, acc = rng(), 0
  for i = 1, n do
    acc = acc + w(i)
    if u < acc then return i end
  end
  return n
end

-- a draw from N(mu, sigma) truncated to [lo, hi): rejection (at least about a third of the
-- draws land inside), else mu clamped
local function truncated_draw(mu, sigma, lo, hi, rng)
  for _ = 1, 200 do
    local x = mu + sigma * gaussian(rng)
    if x >= lo and x < hi then return x end
  end
  return math.min(math.max(mu, lo), hi)
end

-- ------------------------------------------------- numeric Parzen estimator

-- A truncated Gaussian mixture over [lo, hi] from observed positions xs.
local function parzen(xs, lo, hi)
  local n = #xs
  local width = hi - lo
  local prior_mu = 0.5 * (lo + hi)
  local mus = {}
  for i = 1, n do mus[i] = xs[i] end
  mus[n + 1] = prior_mu
  local order = {}
  for i = 1, n + 1 do order[i] = i end
  table.sort(order, function(a, b)
    if mus[a] ~= mus[b] then return mus[a] < mus[b] end
    return a < b
  end)
  -- the sorted positions with the bounds at both ends
  local pos = { lo }
  for j = 1, n + 1 do pos[j + 1] = mus[order[j]] end
  pos[n + 3] = hi
  local sigma = {}
  for j = 1, n + 1 do
    local s = math.max(pos[j + 1] - pos[j], pos[j + 2] - pos[j + 1])
    -- the outermost components: the gap to their inner neighbour, not to the bound
    if n + 1 >= 2 and j == 1 then s = pos[3] - pos[2] end
    if n + 1 >= 2 and j == n + 1 then s = pos[n + 2] - pos[n + 1] end
    sigma[order[j]] = s
  end
  local min_sigma = width / math.min(100, n + 2)
  local comps = {}
  local total = n + PRIOR_WEIGHT
  for i = 1, n + 1 do
    local s = math.min(math.max(sigma[i], min_sigma), width)
    local w = 1
    if i == n + 1 then s, w = width, PRIOR_WEIGHT end
    local mu = mus[i]
    comps[i] = { mu = mu, sigma = s, logw = math.log(w / total), w = w / total,
      logz = math.log(math.max(normal_mass((lo - mu) / s, (hi - mu) / s), TINY)) }
  end
  return { comps = comps, lo = lo, hi = hi }
end

-- log density at x (continuous), or log mass of [x - 0.5, x + 0.5) (bins)
local function parzen_log(pe, x, bins)
  if bins then
    local m = 0
    for _, c in ipairs(pe.comps) do
      local a = math.max(x - 0.5, pe.lo)
      local b = math.min(x + 0.5, pe.hi)
      m = m + c.w * normal_mass((a - c.mu) / c.sigma, (b - c.mu) / c.sigma) / math.exp(c.logz)
    end
    return math.log(math.max(m, TINY))
  end
  local terms = {}
  for i, c in ipairs(pe.comps) do
    local z = (x - c.mu) / c.sigma
    terms[i] = c.logw - math.log(c.sigma) - LOG_SQRT_2PI - 0.5 * z * z - c.logz
  end
  return log_sum_exp(terms)
end

local function parzen_draw(pe, rng)
  local c = pe.comps[draw_index(#pe.comps, function(i) return pe.comps[i].w end, rng)]
  return truncated_draw(c.mu, c.sigma, pe.lo, pe.hi, rng)
end

-- The internal coordinates of a numeric distribution: the interval modelled,
-- the way there and back.
local function numeric_domain(d)
  if d.kind == "loguniform" then
    return { lo = math.log(d.lo), hi = math.log(d.hi),
      into = function(v) return math.log(v) end,
      back = function(x) return math.min(math.max(math.exp(x), d.lo), d.hi) end }
  elseif d.kind == "randint" then
    return { lo = d.lo - 0.5, hi = d.hi + 0.5, bins = true,
      into = function(v) return v end,
      back = function(x) return math.min(math.max(math.floor(x + 0.5), d.lo), d.hi) end }
  end
  return { lo = d.lo, hi = d.hi, into = function(v) return v end, back = function(x) return x end }
end

local function in_range(d, v)
  return type(v) == "number" and v == v and v >= d.lo and v <= d.hi
end

local function suggest_numeric(d, good, bad, rng, n_cand)
  if d.kind == "randint" and d.lo == d.hi then return d.lo end
  local dom = numeric_domain(d)
  local function positions(list)
    local xs = {}
    for _, v in ipairs(list) do if in_range(d, v) then xs[#xs + 1] = dom.into(v) end end
    return xs
  end
  local l = parzen(positions(good), dom.lo, dom.hi)
  local g = parzen(positions(bad), dom.lo, dom.hi)
  local best, best_score
  for _ = 1, n_cand do
    local x = parzen_draw(l, rng)
    if dom.bins then x = dom.back(x) end   -- an integer: scored by its bin
    local score = parzen_log(l, x, dom.bins) - parzen_log(g, x, dom.bins)
    if not best_score or score > best_score then best, best_score = x, score end
  end
  return dom.back(best)
end

-- ---------------------------------------------------------- categorical

-- a value's identity: numbers, strings, booleans, and tables by content
local function value_key(v)
  local t = type(v)
  if t == "number" then return "n" .. string.format("%.17g", v) end
  if t == "string" then return "s" .. v end
  if t == "table" then
    local parts = {}
    for _, k in ipairs(util.sorted_keys(v)) do parts[#parts + 1] = value_key(k) .. "=" .. value_key(v[k]) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return t .. ":" .. tostring(v)
end

-- the index of v among values, or nil (numbers that went through JSON match to 1e-12)
local function value_index(values, keys, v)
  local k = value_key(v)
  for i = 1, #values do if keys[i] == k then return i end end
  if type(v) == "number" then
    for i, w in ipairs(values) do
      if type(w) == "number" and math.abs(w - v) <= 1e-12 * math.max(math.abs(w), math.abs(v)) then return i end
    end
  end
  return nil
end

-- The kernel of one observation at index `at` among k values, in a group of n: that value
-- 1 + s, every value s = PRIOR_WEIGHT / (n + 1), normalised; at = nil: the prior, uniform.
-- Optuna's smoothing: with plain counts a value no good trial had gets l(x) so small that
-- the sampler keeps to its first good trials' values (tpe.lua's header)
local function categorical_kernel(k, n, at)
  local s = PRIOR_WEIGHT / (n + 1)
  local p = {}
  for i = 1, k do p[i] = at and s / (1 + k * s) or 1 / k end
  if at then p[at] = (1 + s) / (1 + k * s) end
  return p
end

local function suggest_categorical(values, good, bad, rng, n_cand)
  local keys = {}
  for i, v in ipairs(values) do keys[i] = value_key(v) end
  local k = #values
  local function probs(list)
    local idx = {}
    for _, v in ipairs(list) do
      local i = value_index(values, keys, v)
      if i then idx[#idx + 1] = i end
    end
    local n = #idx
    -- the mixture of each observation's kernel (categorical_kernel) and the prior kernel
    -- (uniform) of weight PRIOR_WEIGHT, summed from the counts: values of equal counts get
    -- equal numbers, whatever the order of the trials, so ties between them stay ties
    local s = PRIOR_WEIGHT / (n + 1)
    local norm = 1 + k * s
    local p = {}
    for i = 1, k do p[i] = (n * s / norm + PRIOR_WEIGHT / k) end
    for _, i in ipairs(idx) do p[i] = p[i] + 1 / norm end
    for i = 1, k do p[i] = p[i] / (n + PRIOR_WEIGHT) end
    return p
  end
  local l, g = probs(good), probs(bad)
  local best, best_score
  for _ = 1, n_cand do
    local i = draw_index(k, function(j) return l[j] end, rng)
    local score = math.log(l[i]) - math.log(g[i])
    if not best_score or score > best_score then best, best_score = i, score end
  end
  return best
end

-- ------------------------------------------------------- multivariate

-- The multivariate form (tpe.multivariate = true; Optuna's multivariate
-- TPESampler, after Falkner et al. 2018's BOHB, whose density is one kernel
-- per trial over all keys at once): l and g are each a mixture with one
-- component per trial of its group, the product of a kernel per key centred
-- on that trial's value, and a prior component (every key's prior kernel).
-- A candidate draws a component, then each key from that component's
-- kernel, and is scored by log l - log g over the whole point. So a bad
-- trial counts against a candidate only where it is close in every key,
-- not key by key: the independent form pushes each key away from the
-- values bad trials had, even where those trials differed in the others.
-- Kernels: numeric keys a Gaussian truncated to the key's interval (in log
-- space for loguniform; a unit bin's mass for randint) of width
-- 0.2 (hi - lo) n^(-1 / (d + 4)) for n trials in the group and d keys
-- (Optuna's rule), at least (hi - lo) / min(100, n + 2); the prior one
-- centred, of width hi - lo. Choice and grid keys the univariate form's
-- smoothed kernel per trial. A trial's key out of range, or missing, takes
-- that key's prior kernel in its component.
local SIGMA0 = 0.2

-- the dimensions modelled: every distribution key, with how to read, model and write it
local function joint_dims(sp, keys)
  local dims = {}
  for _, k in ipairs(keys) do
    local d = sp[k]
    if space.is_dist(d) and not (d.kind == "randint" and d.lo == d.hi) then
      local dim = { key = k, dist = d }
      if d.values then
        dim.values, dim.vkeys = d.values, {}
        for i, v in ipairs(d.values) do dim.vkeys[i] = value_key(v) end
      else
        dim.dom = numeric_domain(d)
      end
      dims[#dims + 1] = dim
    end
  end
  return dims
end

local function joint_mixture(dims, list)
  local n, D = #list, #dims
  local comps = {}
  local total = n + PRIOR_WEIGHT
  for i = 1, n + 1 do
    local p = list[i]   -- nil: the prior component
    local c = { w = (i <= n and 1 or PRIOR_WEIGHT) / total, kern = {} }
    c.logw = math.log(c.w)
    for j, dim in ipairs(dims) do
      local v = p and p[dim.key]
      if dim.values then
        local at = v ~= nil and value_index(dim.values, dim.vkeys, v) or nil
        c.kern[j] = { probs = categorical_kernel(#dim.values, n, at) }
      else
        local dom = dim.dom
        local width = dom.hi - dom.lo
        local mu, sigma = 0.5 * (dom.lo + dom.hi), width
        if v ~= nil and in_range(dim.dist, v) then
          mu = dom.into(v)
          sigma = math.min(math.max(SIGMA0 * width * n ^ (-1 / (D + 4)), width / math.min(100, n + 2)), width)
        end
        c.kern[j] = { mu = mu, sigma = sigma,
          logz = math.log(math.max(normal_mass((dom.lo - mu) / sigma, (dom.hi - mu) / sigma), TINY)) }
      end
    end
    comps[i] = c
  end
  return comps
end

-- log of one kernel at x: a density (continuous), a bin's mass (randint) or a probability
local function kernel_log(dim, k, x)
  if dim.values then return math.log(math.max(k.probs[x], TINY)) end
  local dom = dim.dom
  if dom.bins then
    local a, b = math.max(x - 0.5, dom.lo), math.min(x + 0.5, dom.hi)
    return math.log(math.max(normal_mass((a - k.mu) / k.sigma, (b - k.mu) / k.sigma), TINY)) - k.logz
  end
  local z = (x - k.mu) / k.sigma
  return -math.log(k.sigma) - LOG_SQRT_2PI - 0.5 * z * z - k.logz
end

local function joint_log(dims, comps, xs)
  local terms = {}
  for i, c in ipairs(comps) do
    local t = c.logw
    for j, dim in ipairs(dims) do t = t + kernel_log(dim, c.kern[j], xs[j]) end
    terms[i] = t
  end
  return log_sum_exp(terms)
end

local function joint_draw(dims, comps, rng)
  local c = comps[draw_index(#comps, function(i) return comps[i].w end, rng)]
  local xs = {}
  for j, dim in ipairs(dims) do
    local k = c.kern[j]
    if dim.values then
      xs[j] = draw_index(#dim.values, function(i) return k.probs[i] end, rng)
    else
      local x = truncated_draw(k.mu, k.sigma, dim.dom.lo, dim.dom.hi, rng)
      xs[j] = dim.dom.bins and dim.dom.back(x) or x   -- an integer: scored by its bin
    end
  end
  return xs
end

-- the joint proposal: the dims' values of the candidate with the best log l - log g
local function suggest_joint(dims, good, bad, rng, n_cand)
  local l, g = joint_mixture(dims, good), joint_mixture(dims, bad)
  local best, best_score
  for _ = 1, n_cand do
    local xs = joint_draw(dims, l, rng)
    local score = joint_log(dims, l, xs) - joint_log(dims, g, xs)
    if not best_score or score > best_score then best, best_score = xs, score end
  end
  local out = {}
  for j, dim in ipairs(dims) do
    out[dim.key] = dim.values and util.deepcopy(dim.values[best[j]]) or dim.dom.back(best[j])
  end
  return out
end

-- For tests: the joint log density of a group's mixture at a point (in the space's own values)
function tpe.joint_log_density(sp, list, point)
  local dims = joint_dims(sp, util.sorted_keys(sp))
  local xs = {}
  for j, dim in ipairs(dims) do
    local v = point[dim.key]
    xs[j] = dim.values and value_index(dim.values, dim.vkeys, v) or dim.dom.into(v)
  end
  return joint_log(dims, joint_mixture(dims, list), xs)
end

-- ------------------------------------------------------------- suggest

-- The good and the bad group, as lists of params tables.
local function split(history, mode, gamma, running)
  local ranked, bad = {}, {}
  for _, r in ipairs(history) do
    if type(r) == "table" and type(r.params) == "table" then
      local v = r.value
      if type(v) == "number" and v == v and (r.status == "done" or r.status == "stopped") then
        ranked[#ranked + 1] = r
      else
        bad[#bad + 1] = r.params
      end
    end
  end
  table.sort(ranked, function(a, b)
    local da, db = a.status == "done", b.status == "done"
    if da ~= db then return da end   -- a trial the scheduler stopped ranks after the finished ones
    if a.level and b.level and a.level ~= b.level then return a.level < b.level end   -- a larger budget first
    if a.value ~= b.value then
      if mode == "min" then return a.value < b.value end
      return a.value > b.value
    end
    return (tonumber(a.trial) or 0) < (tonumber(b.trial) or 0)
  end)
  local n_good = math.min(math.ceil(gamma * #ranked), MAX_GOOD)
  local good = {}
  for i, r in ipairs(ranked) do
    if i <= n_good then good[#good + 1] = r.params else bad[#bad + 1] = r.params end
  end
  for _, p in ipairs(running or {}) do
    if type(p) == "table" then bad[#bad + 1] = p end
  end
  return good, bad
end

local function column(list, key)
  local out = {}
  for _, p in ipairs(list) do
    if p[key] ~= nil then out[#out + 1] = p[key] end
  end
  return out
end

function tpe.suggest(sp, history, mode, rng, opts)
  opts = opts or {}
  local startup = opts.startup or tpe.DEFAULTS.startup
  local gamma = opts.gamma or tpe.DEFAULTS.gamma
  local n_cand = opts.candidates or tpe.DEFAULTS.candidates
  history = history or {}
  local keys = util.sorted_keys(sp)
  if #history < startup then
    if opts.sample then return opts.sample() end
    local point = {}
    for _, k in ipairs(keys) do
      local d = sp[k]
      point[k] = space.is_dist(d) and space.draw(d, rng()) or util.deepcopy(d)
    end
    return point
  end
  local good, bad = split(history, mode, gamma, opts.running)
  local point = {}
  if opts.multivariate then
    local joint = suggest_joint(joint_dims(sp, keys), good, bad, rng, n_cand)
    for _, k in ipairs(keys) do
      local d = sp[k]
      if joint[k] ~= nil then point[k] = joint[k]
      elseif space.is_dist(d) then point[k] = d.lo   -- randint(a, a)
      else point[k] = util.deepcopy(d) end
    end
    return point
  end
  for _, k in ipairs(keys) do
    local d = sp[k]
    if not space.is_dist(d) then
      point[k] = util.deepcopy(d)
    elseif d.values then   -- choice, grid
      point[k] = util.deepcopy(d.values[suggest_categorical(d.values, column(good, k), column(bad, k), rng, n_cand)])
    else
      point[k] = suggest_numeric(d, column(good, k), column(bad, k), rng, n_cand)
    end
  end
  return point
end

function tpe.level_history(history, levels)
  local out, seen = {}, {}
  for li, level in ipairs(levels or {}) do
    for _, r in ipairs(level) do
      if not seen[r.trial] and type(r.value) == "number" and r.value == r.value then
        seen[r.trial] = true
        out[#out + 1] = { params = r.params, value = r.value, status = "done", trial = r.trial, level = li }
      end
    end
  end
  if #out == 0 then return history, false end
  for _, r in ipairs(history) do
    if not seen[r.trial] then out[#out + 1] = r end   -- failed, or no value at any budget: bad points
  end
  return out, true
end

function tpe.method(o, in_flight, levels)
  o = o or tpe.DEFAULTS
  return function(history, ctx)
    local enqueued = o.points and o.points[ctx.index]
    if enqueued then
      -- an enqueued point: its keys as given, the others the trial's random values
      local point = ctx.sample and ctx.sample() or {}
      for k, v in pairs(enqueued) do point[k] = util.deepcopy(v) end
      return point
    end
    if levels and #history >= o.startup then history = tpe.level_history(history, levels()) end
    return tpe.suggest(ctx.space, history, ctx.mode, space.rng(ctx.seed, ctx.index, "tpe"), {
      startup = o.startup, gamma = o.gamma, candidates = o.candidates, multivariate = o.multivariate, sample = ctx.sample,
      running = in_flight and in_flight(ctx.index) or nil,
    })
  end
end

return tpe

-- moonrl.sweep.pb2 - PB2's explore (Parker-Holder et al. 2020, "Provably
-- efficient online hyperparameter optimization with population-based
-- bandits"): where a PBT member that copied a donor goes next, chosen by a
-- GP-UCB bandit over the explored keys instead of a random perturbation.
--
-- The data: at each of its decisions, a member adds a point (t, x) -> y,
-- where t is the decision's index (updates / interval), x the member's
-- explored keys during the interval that just ended (each scaled to [0, 1]
-- over its range in the space, log-scaled for loguniform) and y the change
-- of its metric over that interval (sign-flipped for mode "min"). The model:
-- a GP (moonrl.sweep.gp) with the time-varying kernel on standardised y, its
-- lengthscale, epsilon and noise those of a small grid with the largest
-- marginal likelihood. The choice: of `candidates` uniform points of [0, 1]^d
-- (and the data's own points), the one with the largest
--   mean(t_now, x) + sqrt(beta) * sd(t_now, x),  beta = 0.2 + max(0, log(0.4 N))
-- (N points; the c1, c2 of Ray Tune's PB2); the sd is that of the model with
-- the other members' current points added at t_now (their outcome unknown:
-- GP-BUCB, Desautels et al. 2014), so that members exploring at once
-- spread out.
--
--   pb2.dims(space_table, keys) -> dims | nil, err   the keys PB2 can model (numeric ranges)
--   pb2.to_unit(dim, value) -> [0, 1];  pb2.from_unit(dim, u) -> value
--   pb2.select(data, pending, t_now, ndims, rng, opts) -> unit point (list), ucb
--       data: { {t =, x = {..}, y =}, ... }; pending: { {x...}, ... }; opts.candidates (default 256),
--       opts.max_points (the newest kept, default 100)

local gp = require("moonrl.sweep.gp")
local space = require("moonrl.sweep.space")

local pb2 = {}

pb2.GRID = {}
for _, ls in ipairs({ 0.05, 0.1, 0.2, 0.5, 1, 2 }) do
  for _, eps in ipairs({ 0.01, 0.1, 0.3 }) do
    for _, noise in ipairs({ 0.05, 0.3, 1 }) do
      pb2.GRID[#pb2.GRID + 1] = { variance = 1, lengthscale = ls, epsilon = eps, noise = noise }
    end
  end
end

function pb2.dims(sp, keys)
  local dims = {}
  for _, k in ipairs(keys) do
    local d = sp[k]
    if not (space.is_dist(d) and (d.kind == "uniform" or d.kind == "loguniform" or d.kind == "randint")) or d.lo == d.hi then
      return nil, k .. " has no numeric range in the space (PB2 models uniform, loguniform and randint keys)"
    end
    dims[#dims + 1] = { key = k, kind = d.kind, lo = d.lo, hi = d.hi }
  end
  return dims
end

function pb2.to_unit(dim, v)
  if type(v) == "table" then v = v.from end   -- a schedule: where it starts
  if type(v) ~= "number" then return 0.5 end
  local u
  if dim.kind == "loguniform" then
    u = (math.log(math.max(v, 1e-300)) - math.log(dim.lo)) / (math.log(dim.hi) - math.log(dim.lo))
  else
    u = (v - dim.lo) / (dim.hi - dim.lo)
  end
  return math.min(1, math.max(0, u))
end

function pb2.from_unit(dim, u)
  u = math.min(1, math.max(0, u))
  if dim.kind == "loguniform" then return math.exp(math.log(dim.lo) + u * (math.log(dim.hi) - math.log(dim.lo))) end
  if dim.kind == "randint" then return math.min(dim.hi, math.max(dim.lo, math.floor(dim.lo + u * (dim.hi - dim.lo) + 0.5))) end
  return dim.lo + u * (dim.hi - dim.lo)
end

local function point(t, x)
  local p = { t }
  for i = 1, #x do p[i + 1] = x[i] end
  return p
end

function pb2.select(data, pending, t_now, ndims, rng, opts)
  opts = opts or {}
  local n_cand = opts.candidates or 256
  local cands = {}
  for c = 1, n_cand do
    local x = {}
    for i = 1, ndims do x[i] = rng() end
    cands[c] = x
  end
  local keep = opts.max_points or 100
  local first = math.max(1, #data - keep + 1)
  if #data - first + 1 < 2 then return cands[1], nil end   -- no model yet: a uniform point
  local X, y = {}, {}
  for i = first, #data do
    X[#X + 1] = point(data[i].t, data[i].x)
    y[#y + 1] = data[i].y
    cands[#cands + 1] = data[i].x
  end
  -- standardised y
  local m, s = 0, 0
  for _, v in ipairs(y) do m = m + v end
  m = m / #y
  for _, v in ipairs(y) do s = s + (v - m) ^ 2 end
  s = math.sqrt(s / #y)
  if s < 1e-12 then s = 1 end
  local ys = {}
  for i, v in ipairs(y) do ys[i] = (v - m) / s end
  local model = gp.fit_best(X, ys, opts.grid or pb2.GRID)
  if not model then return cands[1], nil end
  -- the variance model: the pending points added (their y does not enter the variance)
  local var_model = model
  if pending and #pending > 0 then
    local X1, y1 = {}, {}
    for i = 1, #X do X1[i], y1[i] = X[i], ys[i] end
    for _, x in ipairs(pending) do X1[#X1 + 1], y1[#y1 + 1] = point(t_now, x), 0 end
    var_model = gp.fit(X1, y1, model.theta) or model
  end
  local beta = 0.2 + math.max(0, math.log(0.4 * #X))
  local kappa = math.sqrt(beta)
  local best, best_ucb
  for _, x in ipairs(cands) do
    local p = point(t_now, x)
    local mean = model:predict(p)
    local _, var = var_model:predict(p)
    local ucb = mean + kappa * math.sqrt(var)
    if not best_ucb or ucb > best_ucb then best, best_ucb = x, ucb end
  end
  return best, best_ucb, model
end

return pb2

-- moonrl.sweep.importance - how much each swept key matters to the sweep's
-- metric: fANOVA (Hutter, Hoos and Leyton-Brown 2014, "An efficient approach
-- for assessing hyperparameter importance") over a random forest fitted to
-- the trials, as Optuna's default importance evaluator does
-- (optuna.importance.FanovaImportanceEvaluator: 64 trees of depth <= 64).
--
-- The forest: `trees` regression trees (CART: each split the one of least
-- squared error over every key, its threshold midway between two values
-- seen), each grown on a bootstrap resample of the trials, to `max_depth`,
-- leaves of at least `min_leaf` trials. Seeded (moonrl.eval.stats.rng):
-- the same trials and seed give the same importances.
--
-- fANOVA: a tree is a piecewise-constant function on the unit box (every key
-- scaled to [0, 1]: the space's range, log10 for a loguniform key; a choice or
-- grid key's k-th of n values is the cell [(k - 1) / n, k / n)), so its mean,
-- its variance V and each key's main effect - the function averaged over all
-- the other keys, uniform on their ranges - are sums over its leaves, exact.
-- A key's importance is the variance of its main effect over V, averaged
-- over the trees (trees that predict a constant left out); `sd` is its spread
-- over the trees. What the main effects leave of 1 is the interactions'.
-- `share` is the importances normalized to sum to 1 (what Optuna reports).
--
--   importance.forest(X, y, opts) -> forest   X[i] = { x_1 .. x_d } in [0, 1], y[i] a number;
--                                  opts: trees (64), max_depth (64), min_leaf (1), seed (1)
--   importance.predict(forest, x) -> the mean of the trees' predictions
--   importance.tree_leaves(tree, d) -> { { lo = {..}, hi = {..}, value }, ... }  the tree's boxes
--   importance.fanova(forest, d) -> per_tree, mean, sd   per_tree[t][j]: key j's main-effect
--                                  variance over tree t's variance
--   importance.scale(sp, values) -> scale   how a key maps to [0, 1] (below): kind ("linear", "log",
--                                  "categorical"), lo, hi (categorical: categories, n, index(v) -> 1 .. n),
--                                  map(v) -> [0, 1]; sp: sweep.json's entry of the key, values: those seen
--   importance.encode(list, info) -> X, y, keys, rows   the finished trials of a sweep, scaled
--   importance.of_sweep(list, info, opts) -> { keys = { {key, importance, sd, share, scale} ... }
--                                  best first, n (trials), trees, method } | nil, why

local stats = require("moonrl.eval.stats")

local importance = {}

-- ----------------------------------------------------------------- forest

local function grow(X, y, idx, depth, o, rng)
  local n = #idx
  local sum = 0
  for _, i in ipairs(idx) do sum = sum + y[i] end
  local mean = sum / n
  if n < 2 * o.min_leaf or depth >= o.max_depth then return { value = mean } end
  local d = #X[idx[1]]
  local best_gain, best_j, best_t = 1e-12 * (1 + math.abs(mean)) ^ 2, nil, nil
  local total_sse = 0
  for _, i in ipairs(idx) do total_sse = total_sse + (y[i] - mean) ^ 2 end
  if total_sse <= 0 then return { value = mean } end
  -- the keys in a random order, so that ties between keys fall to no key in particular
  local order = {}
  for j = 1, d do order[j] = j end
  for j = d, 2, -1 do
    local k = rng:below(j)
    order[j], order[k] = order[k], order[j]
  end
  local sorted = {}
  for _, j in ipairs(order) do
    for k = 1, n do sorted[k] = idx[k] end
    table.sort(sorted, function(a, b)
      if X[a][j] ~= X[b][j] then return X[a][j] < X[b][j] end
      return a < b
    end)
    local ls, lq = 0, 0
    local tq = 0
    for k = 1, n do tq = tq + y[sorted[k]] ^ 2 end
    for k = 1, n - 1 do
      local yi = y[sorted[k]]
      ls, lq = ls + yi, lq + yi * yi
      local xa, xb = X[sorted[k]][j], X[sorted[k + 1]][j]
      if xa < xb and k >= o.min_leaf and n - k >= o.min_leaf then
        local rs, rq = sum - ls, tq - lq
        local sse = (lq - ls * ls / k) + (rq - rs * rs / (n - k))
        local gain = total_sse - sse
        if gain > best_gain then best_gain, best_j, best_t = gain, j, (xa + xb) / 2 end
      end
    end
  end
  if not best_j then return { value = mean } end
  local left, right = {}, {}
  for _, i in ipairs(idx) do
    if X[i][best_j] <= best_t then left[#left + 1] = i else right[#right + 1] = i end
  end
  return { feature = best_j, threshold = best_t,
    left = grow(X, y, left, depth + 1, o, rng), right = grow(X, y, right, depth + 1, o, rng) }
end

function importance.forest(X, y, opts)
  opts = opts or {}
  local o = { trees = opts.trees or 64, max_depth = opts.max_depth or 64, min_leaf = opts.min_leaf or 1 }
  local rng = stats.rng(opts.seed or 1)
  local n = #X
  assert(n >= 1 and #y == n, "importance.forest: expected as many rows X as values y, at least 1")
  local f = { trees = {}, d = #X[1] }
  for t = 1, o.trees do
    local idx = {}
    for k = 1, n do idx[k] = rng:below(n) end   -- a bootstrap resample
    f.trees[t] = grow(X, y, idx, 0, o, rng)
  end
  return f
end

local function tree_predict(node, x)
  while not node.value do
    if x[node.feature] <= node.threshold then node = node.left else node = node.right end
  end
  return node.value
end

function importance.predict(f, x)
  local s = 0
  for _, t in ipairs(f.trees) do s = s + tree_predict(t, x) end
  return s / #f.trees
end

-- ----------------------------------------------------------------- fANOVA

function importance.tree_leaves(tree, d)
  local leaves = {}
  local function walk(node, lo, hi)
    if node.value then
      leaves[#leaves + 1] = { lo = { unpack(lo) }, hi = { unpack(hi) }, value = node.value }
      return
    end
    local j, t = node.feature, node.threshold
    local keep = hi[j]
    hi[j] = math.min(keep, t)
    walk(node.left, lo, hi)
    hi[j] = keep
    keep = lo[j]
    lo[j] = math.max(keep, t)
    walk(node.right, lo, hi)
    lo[j] = keep
  end
  local lo, hi = {}, {}
  for j = 1, d do lo[j], hi[j] = 0, 1 end
  walk(tree, lo, hi)
  return leaves
end

-- One tree: { V_j / V } for j = 1 .. d, or nil when it is constant.
local function tree_fractions(tree, d)
  local leaves = importance.tree_leaves(tree, d)
  local mean, vol = 0, {}
  for k, l in ipairs(leaves) do
    local v = 1
    for j = 1, d do v = v * math.max(0, l.hi[j] - l.lo[j]) end
    vol[k] = v
    mean = mean + v * l.value
  end
  local var = 0
  for k, l in ipairs(leaves) do var = var + vol[k] * (l.value - mean) ^ 2 end
  if not (var > 1e-300 * (1 + mean * mean)) then return nil end
  local out = {}
  for j = 1, d do
    -- the cuts of key j: between two of them the main effect is constant
    local cuts, seen = { 0, 1 }, { [0] = true, [1] = true }
    for _, l in ipairs(leaves) do
      for _, c in ipairs({ l.lo[j], l.hi[j] }) do
        if not seen[c] then seen[c] = true cuts[#cuts + 1] = c end
      end
    end
    table.sort(cuts)
    local vj = 0
    for c = 1, #cuts - 1 do
      local a, b = cuts[c], cuts[c + 1]
      local m = 0   -- the mean over the other keys at x_j in (a, b)
      for k, l in ipairs(leaves) do
        if l.lo[j] <= a and l.hi[j] >= b and vol[k] > 0 then m = m + vol[k] / (l.hi[j] - l.lo[j]) * l.value end
      end
      vj = vj + (b - a) * (m - mean) ^ 2
    end
    out[j] = vj / var
  end
  return out
end

function importance.fanova(f, d)
  d = d or f.d
  local per_tree, mean, sd = {}, {}, {}
  for _, t in ipairs(f.trees) do
    local fr = tree_fractions(t, d)
    if fr then per_tree[#per_tree + 1] = fr end
  end
  for j = 1, d do
    local col = {}
    for t, fr in ipairs(per_tree) do col[t] = fr[j] end
    mean[j] = #col > 0 and stats.mean(col) or 0
    sd[j] = #col > 1 and stats.sd(col) or 0
  end
  return per_tree, mean, sd
end

-- ----------------------------------------------------------------- sweeps

local log10 = math.log10

local function fmt(v)
  if type(v) == "number" then return string.format("%.6g", v) end
  return require("moonrl.formats.json").encode(v)
end

-- A key's scale: how its values map to [0, 1]. `sp` is sweep.json's entry
-- (kind, lo, hi, values, log; older sweeps have only text and log: the range
-- is then the values seen).
function importance.scale(sp, values)
  sp = sp or {}
  local numeric = true
  for _, v in ipairs(values) do if type(v) ~= "number" then numeric = false end end
  local kind = sp.kind
  if kind == nil then
    local t = type(sp.text) == "string" and sp.text or ""
    kind = t:match("^(%a+)[({]") or (numeric and (sp.log and "loguniform" or "uniform") or "choice")
    if kind ~= "uniform" and kind ~= "loguniform" and kind ~= "randint" and kind ~= "choice" and kind ~= "grid" then
      kind = numeric and "uniform" or "choice"
    end
  end
  if (kind == "choice" or kind == "grid") or not numeric then
    local cats, index = {}, {}
    for _, v in ipairs(type(sp.values) == "table" and sp.values or {}) do
      local k = fmt(v)
      if not index[k] then cats[#cats + 1] = k index[k] = #cats end
    end
    for _, v in ipairs(values) do
      local k = fmt(v)
      if not index[k] then cats[#cats + 1] = k index[k] = #cats end
    end
    local n = #cats
    return { kind = "categorical", categories = cats, n = n,
      map = function(v) return (index[fmt(v)] - 0.5) / n end, index = function(v) return index[fmt(v)] end }
  end
  local lo, hi = tonumber(sp.lo), tonumber(sp.hi)
  local vmin, vmax = math.huge, -math.huge
  for _, v in ipairs(values) do vmin, vmax = math.min(vmin, v), math.max(vmax, v) end
  lo, hi = math.min(lo or vmin, vmin), math.max(hi or vmax, vmax)
  local log = kind == "loguniform" and lo > 0
  if kind == "randint" then lo, hi = lo - 0.5, hi + 0.5 end   -- each integer its own cell
  local a, b = log and log10(lo) or lo, log and log10(hi) or hi
  return { kind = log and "log" or "linear", lo = lo, hi = hi,
    map = function(v)
      local x = log and log10(v) or v
      if b > a then return (x - a) / (b - a) end
      return 0.5
    end }
end

-- The trials that count: those done with a value (a trial ASHA stopped has
-- its value at a smaller budget: not comparable), their keys scaled.
function importance.encode(list, info)
  info = info or {}
  local rows = {}
  for _, r in ipairs(list) do
    if r.status == "done" and type(r.value) == "number" and r.value == r.value and math.abs(r.value) < math.huge then
      rows[#rows + 1] = r
    end
  end
  local keys = {}
  local space = info.space or {}
  local names = {}
  for k in pairs(space) do names[#names + 1] = k end
  if #names == 0 then
    local seen = {}
    for _, r in ipairs(rows) do
      for k in pairs(r.params or {}) do if not seen[k] then seen[k] = true names[#names + 1] = k end end
    end
  end
  table.sort(names)
  for _, k in ipairs(names) do
    local values, distinct, all = {}, {}, true
    for _, r in ipairs(rows) do
      local v = (r.params or {})[k]
      if v == nil then all = false break end
      values[#values + 1] = v
      distinct[fmt(v)] = true
    end
    local count = 0
    for _ in pairs(distinct) do count = count + 1 end
    if all and count >= 2 then   -- a key the trials did not vary tells nothing
      local sc = importance.scale(space[k], values)
      keys[#keys + 1] = { key = k, scale = sc }
    end
  end
  local X, y = {}, {}
  for i, r in ipairs(rows) do
    local x = {}
    for j, k in ipairs(keys) do x[j] = k.scale.map(r.params[k.key]) end
    X[i], y[i] = x, r.value
  end
  return X, y, keys, rows
end

importance.MIN_TRIALS = 4

function importance.of_sweep(list, info, opts)
  opts = opts or {}
  info = info or {}
  if info.method == "pbt" then
    return nil, "population-based training changes its members' keys while they train: a member's value belongs " ..
      "to no one point, so there is no importance to fit (moonrl sweep lineage DIR shows the winner's history)"
  end
  local X, y, keys, rows = importance.encode(list, info)
  if #rows < importance.MIN_TRIALS then
    return nil, string.format("%d finished trial(s) with a value (status done; trials stopped early are left out): " ..
      "at least %d are needed to fit a model", #rows, importance.MIN_TRIALS)
  end
  if #keys == 0 then return nil, "no key of the space took two values among the finished trials" end
  local trees = opts.trees or 64
  local f = importance.forest(X, y, { trees = trees, max_depth = opts.max_depth, min_leaf = opts.min_leaf,
    seed = opts.seed or 1 })
  local per_tree, mean, sd = importance.fanova(f, #keys)
  local total = 0
  for j = 1, #keys do total = total + mean[j] end
  local out = {}
  for j, k in ipairs(keys) do
    out[j] = { key = k.key, importance = mean[j], sd = sd[j], share = total > 0 and mean[j] / total or 0,
      scale = k.scale.kind, lo = k.scale.lo, hi = k.scale.hi, categories = k.scale.categories }
  end
  table.sort(out, function(a, b)
    if a.importance ~= b.importance then return a.importance > b.importance end
    return a.key < b.key
  end)
  return { keys = out, n = #rows, trees = trees, fitted_trees = #per_tree, interactions = math.max(0, 1 - total),
    metric = info.metric, mode = info.mode,
    method = "fANOVA (Hutter et al. 2014) over a random forest of " .. trees .. " trees (Optuna's default evaluator)" }
end

return importance

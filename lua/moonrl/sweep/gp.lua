-- moonrl.sweep.gp - a small Gaussian process in float64 Lua for PB2
-- (moonrl.sweep.pb2): the time-varying squared-exponential kernel of
-- Parker-Holder et al. 2020 ("Provably efficient online hyperparameter
-- optimization with population-based bandits"), a Cholesky factorisation,
-- the posterior mean and variance, and the log marginal likelihood that
-- picks the kernel's parameters from a grid.
--
-- A point is { t, x1, ..., xd }: its time (in decisions) and its
-- coordinates (each in [0, 1]). The kernel
--   k(p, q) = variance * exp(-|x_p - x_q|^2 / lengthscale) * (1 - epsilon)^(|t_p - t_q| / 2)
-- (the form of Ray Tune's PB2 and the paper's TV_SquaredExp: lengthscale
-- divides the squared distance; epsilon in [0, 1) forgets old data), plus
-- noise on the diagonal of the training points.
--
--   gp.kernel(p, q, theta) -> number          theta = { variance =, lengthscale =, epsilon =, noise = }
--   gp.cholesky(A, n) -> L | nil, err         A: a 1-based list of rows (n x n, symmetric positive definite)
--   gp.fit(X, y, theta) -> model | nil, err   X: points, y: numbers (use standardised y)
--   model:predict(p) -> mean, variance        the latent function's (no noise)
--   model.log_ml                              log p(y | X, theta)
--   gp.fit_best(X, y, grid) -> model          the theta of grid (a list) with the largest log_ml

local gp = {}

local LOG_2PI = math.log(2 * math.pi)

function gp.kernel(p, q, th)
  local d2 = 0
  for i = 2, #p do
    local d = p[i] - q[i]
    d2 = d2 + d * d
  end
  local dt = math.abs(p[1] - q[1])
  return th.variance * math.exp(-d2 / th.lengthscale) * (1 - th.epsilon) ^ (dt / 2)
end

-- A = L L^T, L lower triangular (rows of plain Lua numbers: float64)
function gp.cholesky(A, n)
  local L = {}
  for i = 1, n do L[i] = {} for j = 1, n do L[i][j] = 0 end end
  for j = 1, n do
    local s = A[j][j]
    local Lj = L[j]
    for k = 1, j - 1 do s = s - Lj[k] * Lj[k] end
    if not (s > 0) then return nil, "the matrix is not positive definite (pivot " .. j .. ": " .. tostring(s) .. ")" end
    local d = math.sqrt(s)
    Lj[j] = d
    for i = j + 1, n do
      local Li = L[i]
      local t = A[i][j]
      for k = 1, j - 1 do t = t - Li[k] * Lj[k] end
      Li[j] = t / d
    end
  end
  return L
end

-- L z = b (forward), L^T z = b (backward)
local function forward(L, b, n)
  local z = {}
  for i = 1, n do
    local s = b[i]
    local Li = L[i]
    for k = 1, i - 1 do s = s - Li[k] * z[k] end
    z[i] = s / Li[i]
  end
  return z
end

local function backward(L, b, n)
  local z = {}
  for i = n, 1, -1 do
    local s = b[i]
    for k = i + 1, n do s = s - L[k][i] * z[k] end
    z[i] = s / L[i][i]
  end
  return z
end
gp.forward, gp.backward = forward, backward

local Model = {}
Model.__index = Model

function gp.fit(X, y, th)
  local n = #X
  local K = {}
  for i = 1, n do
    K[i] = {}
    for j = 1, n do K[i][j] = gp.kernel(X[i], X[j], th) end
    K[i][i] = K[i][i] + th.noise
  end
  local L, err = gp.cholesky(K, n)
  if not L then return nil, err end
  local alpha = backward(L, forward(L, y, n), n)
  local quad, logdet = 0, 0
  for i = 1, n do
    quad = quad + y[i] * alpha[i]
    logdet = logdet + math.log(L[i][i])
  end
  return setmetatable({ X = X, y = y, theta = th, L = L, alpha = alpha, n = n,
    log_ml = -0.5 * quad - logdet - 0.5 * n * LOG_2PI }, Model)
end

function Model:predict(p)
  local n, th = self.n, self.theta
  local k = {}
  local mean = 0
  for i = 1, n do
    k[i] = gp.kernel(p, self.X[i], th)
    mean = mean + k[i] * self.alpha[i]
  end
  local v = forward(self.L, k, n)
  local var = gp.kernel(p, p, th)
  for i = 1, n do var = var - v[i] * v[i] end
  return mean, math.max(var, 0)
end

function gp.fit_best(X, y, grid)
  local best
  for _, th in ipairs(grid) do
    local m = gp.fit(X, y, th)
    if m and (not best or m.log_ml > best.log_ml) then best = m end
  end
  return best
end

return gp

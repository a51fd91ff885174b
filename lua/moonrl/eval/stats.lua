-- moonrl.eval.stats - the statistics of the evaluation table (docs/evaluation.md):
-- a seeded random stream, means and variances, Cohen's d, percentile
-- bootstrap intervals, and the Kaplan-Meier survival estimate with its
-- log-log Greenwood band and the Brookmeyer-Crowley interval of the median.
--
-- Plain Lua over arrays of numbers (1-based), nothing of moonrl's own: the
-- spec checks every function against hand-computed values.
--
-- What it is not: a general statistics library. Only what the table needs,
-- written to be read.
--
-- Public functions
--   stats.Z95                                   the 0.975 normal quantile
--   stats.rng(seed) -> r ; r:uniform() in (0, 1) ; r:below(n) in 1 .. n
--   stats.mean(x), stats.var(x) (n - 1), stats.sd(x)        NaN when undefined
--   stats.cohen_d(a, b) -> (mean b - mean a) / pooled sd | NaN
--   stats.quantile(sorted, p) -> number          linear interpolation (type 7)
--   stats.interval(values [, level]) -> lo, hi   percentile interval, NaNs dropped
--   stats.bootstrap(n, B, seed, fn) -> reps      reps[k][b] = fn(idx)[k] for B
--                                                resamples idx of 1 .. n
--   stats.km(times, died) -> km                  Kaplan-Meier (see below)
--   stats.km_at(km, t) -> S(t)
--   stats.km_median(km) -> median, lo, hi        nil where not reached
--   stats.t_cdf(t, df), stats.t_quantile(p, df)  Student's t
--   stats.mean_interval(x [, level]) -> mean, lo, hi   Student-t interval of a mean
--   stats.welch_greater(a, b) -> t, df, p        one-sided Welch test of mean b > mean a
--   stats.welch(a, b [, level]) -> diff, lo, hi, df, p   mean b - mean a, its Welch
--                                                interval and the two-sided p

local stats = {}

local floor, sqrt, log, exp, huge = math.floor, math.sqrt, math.log, math.exp, math.huge
local NAN = 0 / 0

stats.Z95 = 1.959963984540054

-- --------------------------------------------------------------- random

-- MRG32k3a (L'Ecuyer 1999): six state words, double arithmetic only, so it
-- is exact and the same on every platform, with no global state (math.random
-- belongs to user scripts). seed: an integer >= 0.
local M1, M2 = 4294967087, 4294944443
local RNG = {}
RNG.__index = RNG

function stats.rng(seed)
  seed = floor(tonumber(seed) or 0) % 4294944000
  local s = { seed + 12345, seed + 12345, seed + 12345, seed + 54321, seed + 54321, seed + 54321 }
  local r = setmetatable({ s = s }, RNG)
  for _ = 1, 10 do r:uniform() end   -- leave the nearby seeds' shared start behind
  return r
end

function RNG:uniform()
  local s = self.s
  local p1 = (1403580 * s[2] - 810728 * s[1]) % M1
  s[1], s[2], s[3] = s[2], s[3], p1
  local p2 = (527612 * s[6] - 1370589 * s[4]) % M2
  s[4], s[5], s[6] = s[5], s[6], p2
  local d = p1 - p2
  if d <= 0 then d = d + M1 end
  return d / (M1 + 1)
end

function RNG:below(n) return floor(self:uniform() * n) + 1 end

-- --------------------------------------------------------------- moments

function stats.mean(x)
  local n = #x
  if n == 0 then return NAN end
  local s = 0
  for i = 1, n do s = s + x[i] end
  return s / n
end

function stats.var(x)
  local n = #x
  if n < 2 then return NAN end
  local m = stats.mean(x)
  local s = 0
  for i = 1, n do
    local d = x[i] - m
    s = s + d * d
  end
  return s / (n - 1)
end

function stats.sd(x) return sqrt(stats.var(x)) end

-- ln Gamma(x), x > 0 (Lanczos, g = 7, 9 terms: about 15 significant digits).
local LANCZOS = { 0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
  -176.61503916999185, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7 }
local function lgamma(x)
  if x < 0.5 then return math.log(math.pi / math.abs(math.sin(math.pi * x))) - lgamma(1 - x) end
  x = x - 1
  local a, t = LANCZOS[1], x + 7.5
  for i = 2, 9 do a = a + LANCZOS[i] / (x + i - 1) end
  return 0.5 * math.log(2 * math.pi) + (x + 0.5) * math.log(t) - t + math.log(a)
end

-- The regularized incomplete beta I_x(a, b) (Lentz's continued fraction).
local function betainc(x, a, b)
  if x <= 0 then return 0 end
  if x >= 1 then return 1 end
  if x > (a + 1) / (a + b + 2) then return 1 - betainc(1 - x, b, a) end
  local front = math.exp(a * math.log(x) + b * math.log(1 - x) - (lgamma(a) + lgamma(b) - lgamma(a + b))) / a
  local tiny, c, d = 1e-300, 1, 0
  local f = nil
  for i = 0, 300 do
    local m = math.floor(i / 2)
    local num
    if i == 0 then num = 1
    elseif i % 2 == 0 then num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
    else num = -((a + m) * (a + b + m) * x) / ((a + 2 * m) * (a + 2 * m + 1)) end
    d = 1 + num * d
    if math.abs(d) < tiny then d = tiny end
    d = 1 / d
    c = 1 + num / c
    if math.abs(c) < tiny then c = tiny end
    local cd = c * d
    f = (f or 1) * cd
    if math.abs(1 - cd) < 1e-15 then break end
  end
  return front * (f - 1)
end

-- Student's t distribution with df degrees of freedom: P(T <= t).
function stats.t_cdf(t, df)
  local tail = 0.5 * betainc(df / (df + t * t), df / 2, 0.5)
  return t >= 0 and 1 - tail or tail
end

-- The p-quantile of Student's t with df degrees of freedom (bisection on
-- t_cdf to 1e-12), e.g. t_quantile(0.975, 4) = 2.776.
function stats.t_quantile(p, df)
  if p == 0.5 then return 0 end
  if p < 0.5 then return -stats.t_quantile(1 - p, df) end
  local lo, hi = 0, 1
  while stats.t_cdf(hi, df) < p do hi = hi * 2 end
  for _ = 1, 200 do
    local mid = 0.5 * (lo + hi)
    if stats.t_cdf(mid, df) < p then lo = mid else hi = mid end
    if hi - lo < 1e-12 then break end
  end
  return 0.5 * (lo + hi)
end

-- The mean of x and its `level` (default 0.95) Student-t interval, mean +-
-- t(df = n - 1) sd / sqrt(n); the interval is NaN with fewer than 2 values.
function stats.mean_interval(x, level)
  level = level or 0.95
  local n, m = #x, stats.mean(x)
  if n < 2 then return m, NAN, NAN end
  local h = stats.t_quantile(1 - (1 - level) / 2, n - 1) * stats.sd(x) / sqrt(n)
  return m, m - h, m + h
end

-- Welch's test of mean(b) > mean(a), one-sided: -> t, df, p (the
-- probability of a t at least this large if the means were equal). nil with
-- fewer than 2 values on either side. Both constant: p = 0 if b's mean is
-- larger, else 1.
function stats.welch_greater(a, b)
  local na, nb = #a, #b
  if na < 2 or nb < 2 then return nil end
  local diff = stats.mean(b) - stats.mean(a)
  local sa, sb = stats.var(a) / na, stats.var(b) / nb
  local se2 = sa + sb
  if se2 <= 0 then return diff > 0 and math.huge or -math.huge, NAN, diff > 0 and 0 or 1 end
  local t = diff / sqrt(se2)
  local df = se2 * se2 / (sa * sa / (na - 1) + sb * sb / (nb - 1))
  return t, df, 1 - stats.t_cdf(t, df)
end

-- Welch's two-sample comparison of b with a (unequal variances): the
-- difference of the means d = mean b - mean a, its `level` (0.95) interval
-- d +- t(level, df) se with se^2 = va / na + vb / nb and the
-- Welch-Satterthwaite df = se^4 / ((va / na)^2 / (na - 1) + (vb / nb)^2 / (nb - 1)),
-- and the two-sided p = 2 P(T_df >= |d| / se). nil with fewer than 2 values
-- on either side. Both constant: the interval is d itself, p = 0 (d ~= 0) or 1.
function stats.welch(a, b, level)
  level = level or 0.95
  local na, nb = #a, #b
  if na < 2 or nb < 2 then return nil end
  local diff = stats.mean(b) - stats.mean(a)
  local sa, sb = stats.var(a) / na, stats.var(b) / nb
  local se2 = sa + sb
  if se2 <= 0 then return diff, diff, diff, NAN, diff ~= 0 and 0 or 1 end
  local se = sqrt(se2)
  local df = se2 * se2 / (sa * sa / (na - 1) + sb * sb / (nb - 1))
  local h = stats.t_quantile(1 - (1 - level) / 2, df) * se
  local p = 2 * (1 - stats.t_cdf(math.abs(diff) / se, df))
  return diff, diff - h, diff + h, df, math.min(1, p)
end

-- Cohen's d of b against a: the difference of the means over the pooled
-- standard deviation sqrt(((na - 1) va + (nb - 1) vb) / (na + nb - 2)).
-- NaN when either sample has fewer than 2 values or both are constant.
function stats.cohen_d(a, b)
  local na, nb = #a, #b
  if na < 2 or nb < 2 then return NAN end
  local pooled = sqrt(((na - 1) * stats.var(a) + (nb - 1) * stats.var(b)) / (na + nb - 2))
  if pooled == 0 then return NAN end
  return (stats.mean(b) - stats.mean(a)) / pooled
end

-- ------------------------------------------------------------- intervals

-- The p-quantile of an ascending array: R's type 7, x[h] + frac (x[h+1] - x[h])
-- with h = 1 + (n - 1) p.
function stats.quantile(sorted, p)
  local n = #sorted
  if n == 0 then return NAN end
  local h = 1 + (n - 1) * p
  local lo = floor(h)
  if lo >= n then return sorted[n] end
  return sorted[lo] + (h - lo) * (sorted[lo + 1] - sorted[lo])
end

-- The central `level` (default 0.95) percentile interval of values, NaNs
-- (undefined replicates) left out.
function stats.interval(values, level)
  level = level or 0.95
  local v = {}
  for i = 1, #values do
    local x = values[i]
    if x == x then v[#v + 1] = x end
  end
  if #v == 0 then return NAN, NAN end
  table.sort(v)
  return stats.quantile(v, (1 - level) / 2), stats.quantile(v, 1 - (1 - level) / 2)
end

-- B bootstrap resamples of n units: each draws n indices of 1 .. n with
-- replacement from stats.rng(seed) and calls fn(idx, n), which returns a
-- number or an array of numbers (the statistics of that resample). Returns
-- reps with reps[k][b] the k-th statistic of resample b (k = 1 for a number).
function stats.bootstrap(n, B, seed, fn)
  local r = stats.rng(seed)
  local idx, reps = {}, {}
  for b = 1, B do
    for i = 1, n do idx[i] = r:below(n) end
    local v = fn(idx, n)
    if type(v) == "number" then v = { v } end
    for k = 1, #v do
      reps[k] = reps[k] or {}
      reps[k][b] = v[k]
    end
  end
  return reps
end

-- ----------------------------------------------------------- Kaplan-Meier

-- Kaplan-Meier of survival times times[i] with died[i] (1 or true: a death at
-- times[i]; 0 or false: alive then, right-censored). A censored time equal to
-- a death time counts as at risk at that death. Returns km with, per
-- distinct death time k (ascending): km.time[k], km.n_risk[k], km.n_event[k],
-- km.surv[k] = S(t) = prod (1 - d / n), km.lower[k] / km.upper[k] its 95%
-- log-log band: S ^ exp(+-z sqrt(v) / log S) with Greenwood's
-- v = sum d / (n (n - d)); and km.n, km.deaths, km.max_time.
function stats.km(times, died)
  local d_at, c_at, ts = {}, {}, {}
  local n, deaths, max_time = #times, 0, 0
  for i = 1, n do
    local t = times[i]
    if t > max_time then max_time = t end
    if not d_at[t] and not c_at[t] then ts[#ts + 1] = t end
    if died[i] == true or died[i] == 1 then
      d_at[t] = (d_at[t] or 0) + 1
      deaths = deaths + 1
    else
      c_at[t] = (c_at[t] or 0) + 1
    end
  end
  table.sort(ts)
  local km = { time = {}, n_risk = {}, n_event = {}, surv = {}, lower = {}, upper = {},
               n = n, deaths = deaths, max_time = max_time }
  local at_risk, s, v = n, 1, 0
  for _, t in ipairs(ts) do
    local d = d_at[t] or 0
    if d > 0 then
      s = s * (1 - d / at_risk)
      v = at_risk > d and v + d / (at_risk * (at_risk - d)) or huge
      local lo, hi
      if s <= 0 or v == huge then
        lo, hi = 0, 0
      else
        local se = sqrt(v) / math.abs(log(s))
        lo, hi = s ^ exp(stats.Z95 * se), s ^ exp(-stats.Z95 * se)
      end
      local k = #km.time + 1
      km.time[k], km.n_risk[k], km.n_event[k], km.surv[k], km.lower[k], km.upper[k] = t, at_risk, d, s, lo, hi
    end
    at_risk = at_risk - d - (c_at[t] or 0)
  end
  return km
end

-- S(t): the estimate just after time t (1 before the first death).
function stats.km_at(km, t)
  local s = 1
  for k = 1, #km.time do
    if km.time[k] > t then break end
    s = km.surv[k]
  end
  return s
end

-- The first time a curve reaches 0.5 or below; where it equals 0.5 exactly
-- over an interval, the middle of that interval (as R's survfit). nil when
-- the curve never reaches 0.5 (not reached within the evaluation).
local function crossing(km, curve)
  local eps = 1e-12
  for k = 1, #km.time do
    local c = curve[k]
    if c <= 0.5 + eps then
      if math.abs(c - 0.5) <= eps then
        local nxt = km.time[k + 1]
        return nxt and (km.time[k] + nxt) / 2 or km.time[k]
      end
      return km.time[k]
    end
  end
  return nil
end

-- The median survival and its 95% interval (Brookmeyer-Crowley: the times
-- whose log-log band contains 0.5: from where the lower band reaches 0.5 to
-- where the upper one does). nil for what is not reached.
function stats.km_median(km)
  return crossing(km, km.surv), crossing(km, km.lower), crossing(km, km.upper)
end

stats.NAN = NAN

return stats

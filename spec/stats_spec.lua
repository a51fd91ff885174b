-- moonrl.eval.stats against hand-computed values and independent implementations
-- written here: Kaplan-Meier on a small censored sample, its log-log band and
-- the Brookmeyer-Crowley median interval, Cohen's d on a known case, the
-- percentile bootstrap's coverage in a simulation, and the random stream.
local stats = require("moonrl.eval.stats")

local function near(a, b, tol, what)
  assert.is_true(math.abs(a - b) <= (tol or 1e-12), (what or "") .. ": " .. tostring(a) .. " vs " .. tostring(b))
end

describe("moonrl.eval.stats", function()
  it("means, variances and Cohen's d on a known case", function()
    near(stats.mean({ 1, 2, 3, 4 }), 2.5)
    near(stats.var({ 1, 2, 3, 4 }), 5 / 3)
    assert.is_true(stats.var({ 1 }) ~= stats.var({ 1 }))   -- NaN: undefined
    -- a = {1,2,3}, b = {4,5,6}: means 2 and 5, both variances 1, pooled sd 1: d = 3
    near(stats.cohen_d({ 1, 2, 3 }, { 4, 5, 6 }), 3)
    near(stats.cohen_d({ 4, 5, 6 }, { 1, 2, 3 }), -3)
    -- unequal sizes: a = {0, 2} (var 2), b = {1, 3, 5, 7} (var 20/3, mean 4):
    -- pooled = sqrt((1*2 + 3*20/3) / 4) = sqrt(5.5); d = 3 / sqrt(5.5)
    near(stats.cohen_d({ 0, 2 }, { 1, 3, 5, 7 }), 3 / math.sqrt(5.5))
    assert.is_true(stats.cohen_d({ 1, 1 }, { 1, 1 }) ~= stats.cohen_d({ 1, 1 }, { 1, 1 }))
  end)

  it("Student's t: quantiles as the published tables give them, the CDF by numerical integration", function()
    -- two-sided 95% critical values (any statistics table: 12.706, 4.303, 2.776, 2.228, 2.042, 1.960 at df infinite)
    for _, c in ipairs({ { 1, 12.706205 }, { 2, 4.302653 }, { 4, 2.776445 }, { 10, 2.228139 }, { 30, 2.042272 } }) do
      assert.is_true(math.abs(stats.t_quantile(0.975, c[1]) - c[2]) < 1e-5, c[1] .. ": " .. stats.t_quantile(0.975, c[1]))
    end
    assert.is_true(math.abs(stats.t_quantile(0.975, 1e6) - 1.959966) < 1e-4)
    assert.is_true(math.abs(stats.t_quantile(0.025, 4) + 2.776445) < 1e-5)
    -- the CDF against Simpson's rule on the density, computed here from its formula (df = 3: 2 / (pi sqrt 3) (1 + t^2/3)^-2)
    local function f(t) return 2 / (math.pi * math.sqrt(3)) * (1 + t * t / 3) ^ -2 end
    local T, n = 1.7, 2000
    local h, acc = T / n, f(0) + f(T)
    for i = 1, n - 1 do acc = acc + (i % 2 == 1 and 4 or 2) * f(i * h) end
    assert.is_true(math.abs(stats.t_cdf(T, 3) - (0.5 + acc * h / 3)) < 1e-9)
    -- the mean's interval: mean +- t sd / sqrt(n); fewer than 2 values give no interval
    local m, lo, hi = stats.mean_interval({ 1, 2, 3, 4 })
    local half = 3.182446 * math.sqrt(5 / 3) / 2
    assert.is_true(m == 2.5 and math.abs(lo - (2.5 - half)) < 1e-5 and math.abs(hi - (2.5 + half)) < 1e-5)
    local _, l1 = stats.mean_interval({ 3 })
    assert.is_true(l1 ~= l1)
  end)

  it("quantiles (type 7) and percentile intervals leave NaNs out", function()
    near(stats.quantile({ 1, 2, 3, 4, 5 }, 0.5), 3)
    near(stats.quantile({ 1, 2, 3, 4 }, 0.5), 2.5)
    near(stats.quantile({ 10, 20 }, 0.25), 12.5)
    local vals = { 0 / 0 }
    for i = 1, 101 do vals[#vals + 1] = i - 1 end
    local lo, hi = stats.interval(vals)
    near(lo, 2.5)
    near(hi, 97.5)
  end)

  it("draws the same uniform stream for a seed, different for another, in (0, 1)", function()
    local a, b, c = stats.rng(7), stats.rng(7), stats.rng(8)
    local same, diff, sum = true, false, 0
    for _ = 1, 10000 do
      local x, y, z = a:uniform(), b:uniform(), c:uniform()
      same = same and x == y
      diff = diff or x ~= z
      assert.is_true(x > 0 and x < 1)
      sum = sum + x
    end
    assert.is_true(same and diff)
    near(sum / 10000, 0.5, 0.01, "mean of 10,000 uniforms")
    local r, seen = stats.rng(3), {}
    for _ = 1, 2000 do
      local k = r:below(6)
      assert.is_true(k >= 1 and k <= 6 and k == math.floor(k))
      seen[k] = (seen[k] or 0) + 1
    end
    for k = 1, 6 do assert.is_true(seen[k] > 250 and seen[k] < 420, "face " .. k .. ": " .. seen[k]) end
  end)

  describe("Kaplan-Meier", function()
    -- 3, 5+, 6, 6, 8+, 10, 12+, 15 (+ = alive at the end: censored)
    local times = { 3, 5, 6, 6, 8, 10, 12, 15 }
    local died = { 1, 0, 1, 1, 0, 1, 0, 1 }

    it("matches the estimate worked out by hand", function()
      local km = stats.km(times, died)
      assert.same({ 3, 6, 10, 15 }, km.time)
      assert.same({ 8, 6, 3, 1 }, km.n_risk)
      assert.same({ 1, 2, 1, 1 }, km.n_event)
      -- S(3) = 7/8; S(6) = 7/8 * 4/6; S(10) = * 2/3; S(15) = 0
      near(km.surv[1], 7 / 8)
      near(km.surv[2], 7 / 12)
      near(km.surv[3], 7 / 18)
      near(km.surv[4], 0)
      near(stats.km_at(km, 2), 1)
      near(stats.km_at(km, 7), 7 / 12)
      assert.equal(5, km.deaths)
      assert.equal(15, km.max_time)
      -- median: the first time S <= 0.5
      local m = stats.km_median(km)
      assert.equal(10, m)
    end)

    it("has Greenwood's log-log band, computed independently", function()
      local km = stats.km(times, died)
      local z = 1.959963984540054
      -- Greenwood sums by hand: 1/(8*7); + 2/(6*4); + 1/(3*2)
      local v = { 1 / 56, 1 / 56 + 1 / 12, 1 / 56 + 1 / 12 + 1 / 6 }
      local s = { 7 / 8, 7 / 12, 7 / 18 }
      for k = 1, 3 do
        local se = math.sqrt(v[k]) / math.abs(math.log(s[k]))
        -- the interval of log(-log S), transformed back
        local lo = math.exp(-math.exp(math.log(-math.log(s[k])) + z * se))
        local hi = math.exp(-math.exp(math.log(-math.log(s[k])) - z * se))
        near(km.lower[k], lo, 1e-12, "lower " .. k)
        near(km.upper[k], hi, 1e-12, "upper " .. k)
        assert.is_true(km.lower[k] < km.surv[k] and km.surv[k] < km.upper[k])
      end
      -- S = 0 at the last death: a band of [0, 0]
      assert.equal(0, km.lower[4])
      assert.equal(0, km.upper[4])
    end)

    it("gives the Brookmeyer-Crowley interval of the median from the band", function()
      local km = stats.km(times, died)
      local m, lo, hi = stats.km_median(km)
      -- lower limit: the first time the lower band is <= 0.5; upper: the upper band
      local function first(curve)
        for k = 1, #km.time do if curve[k] <= 0.5 then return km.time[k] end end
      end
      assert.equal(10, m)
      assert.equal(first(km.lower), lo)
      assert.equal(first(km.upper), hi)
      assert.is_true(lo <= m and m <= hi)
      -- by hand: the lower band at 3 is (7/8) ^ exp(z sqrt(1/56) / |log 7/8|) = 0.875 ^ 7.11 = 0.387
      -- (<= 0.5: lo = 3); the upper band at 10 is (7/18) ^ exp(-z sqrt(0.2679) / |log 7/18|) = 0.768,
      -- at 15 it is 0: hi = 15
      near(km.lower[1], 0.875 ^ math.exp(1.959963984540054 * math.sqrt(1 / 56) / math.abs(math.log(0.875))))
      assert.equal(3, lo)
      assert.equal(15, hi)
    end)

    it("takes the middle of an interval where S is exactly 0.5, and nil when never reached", function()
      -- 1, 2, 3+, 4: S(1) = 3/4, S(2) = 1/2 until 4
      local km = stats.km({ 1, 2, 3, 4 }, { 1, 1, 0, 1 })
      near(km.surv[2], 0.5)
      assert.equal(3, (stats.km_median(km)))
      -- everyone alive: no deaths, no median
      local none = stats.km({ 5, 5, 5 }, { 0, 0, 0 })
      assert.equal(0, #none.time)
      assert.is_nil((stats.km_median(none)))
    end)

    it("equals a naive product-limit over the sorted individuals", function()
      -- an independent implementation: sort the individuals (deaths before
      -- censorings at the same time), step through them one by one
      local r = stats.rng(11)
      local T, D = {}, {}
      for i = 1, 300 do
        T[i] = r:below(40)
        D[i] = r:uniform() < 0.7 and 1 or 0
      end
      local km = stats.km(T, D)
      local order = {}
      for i = 1, #T do order[i] = i end
      table.sort(order, function(a, b)
        if T[a] ~= T[b] then return T[a] < T[b] end
        return D[a] > D[b]
      end)
      local s, n, expect = 1, #T, {}
      local i = 1
      while i <= #order do
        local t, d, c = T[order[i]], 0, 0
        while i <= #order and T[order[i]] == t do
          if D[order[i]] == 1 then d = d + 1 else c = c + 1 end
          i = i + 1
        end
        if d > 0 then
          s = s * (n - d) / n
          expect[#expect + 1] = { t, s }
        end
        n = n - d - c
      end
      assert.equal(#expect, #km.time)
      for k, e in ipairs(expect) do
        assert.equal(e[1], km.time[k])
        near(km.surv[k], e[2], 1e-12)
      end
    end)
  end)

  it("bootstrap intervals cover the true value at about the nominal rate", function()
    -- 200 samples of 80 exponentials with mean 2 (seeded); a 95% percentile
    -- interval of the mean from 300 resamples each
    local r = stats.rng(2024)
    local reps_n, covered = 200, 0
    for rep = 1, reps_n do
      local x = {}
      for i = 1, 80 do x[i] = -2 * math.log(r:uniform()) end
      local reps = stats.bootstrap(#x, 300, rep, function(idx, n)
        local s = 0
        for j = 1, n do s = s + x[idx[j]] end
        return s / n
      end)
      local lo, hi = stats.interval(reps[1])
      if lo <= 2 and 2 <= hi then covered = covered + 1 end
    end
    local rate = covered / reps_n
    -- nominal 0.95; the percentile interval of a skewed mean runs a little
    -- short at n = 80; binomial sd of the rate ~0.015
    assert.is_true(rate >= 0.89 and rate <= 0.99, "coverage " .. rate)
  end)

  it("bootstraps several statistics at once, reproducibly for a seed", function()
    local x = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }
    local function fn(idx, n)
      local s, m = 0, -math.huge
      for j = 1, n do s = s + x[idx[j]]; m = math.max(m, x[idx[j]]) end
      return { s / n, m }
    end
    local a, b = stats.bootstrap(#x, 50, 9, fn), stats.bootstrap(#x, 50, 9, fn)
    assert.equal(2, #a)
    assert.equal(50, #a[1])
    assert.same(a, b)
    for i = 1, 50 do assert.is_true(a[2][i] >= a[1][i]) end
  end)
end)

-- moonrl.sweep.importance (fANOVA over a random forest): on a synthetic
-- objective whose importances are known, and against a brute-force
-- reference: the forest's main effects and variance evaluated on a fine grid
-- of the unit cube through importance.predict (a check independent of the
-- leaf-box sums fanova uses).

package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local importance = require("moonrl.sweep.importance")
local stats = require("moonrl.eval.stats")

-- f = 10 x1 + 0.1 x2 + noise; x3 does not enter f
local function synthetic(n, seed)
  local r = stats.rng(seed)
  local X, y = {}, {}
  for i = 1, n do
    local x = { r:uniform(), r:uniform(), r:uniform() }
    local z = math.sqrt(-2 * math.log(1 - r:uniform())) * math.cos(2 * math.pi * r:uniform())
    X[i], y[i] = x, 10 * x[1] + 0.1 * x[2] + 0.5 * z
  end
  return X, y
end

describe("moonrl.sweep.importance", function()
  it("finds the key that matters, and near 0 for a key f does not read; the same seed, the same result", function()
    local X, y = synthetic(80, 7)
    local f = importance.forest(X, y, { seed = 3, trees = 32 })
    local _, m = importance.fanova(f, 3)
    assert.is_true(m[1] > 0.9, "x1 " .. m[1])
    assert.is_true(m[2] < 0.05 and m[3] < 0.05, "x2 " .. m[2] .. ", x3 " .. m[3])
    local _, m2 = importance.fanova(importance.forest(X, y, { seed = 3, trees = 32 }), 3)
    assert.are.same(m, m2)
  end)

  it("its main effects equal those of the forest evaluated on a fine grid (brute force)", function()
    -- an objective with an interaction, so that main effects do not sum to 1
    local r = stats.rng(11)
    local X, y = {}, {}
    for i = 1, 60 do
      local x = { r:uniform(), r:uniform() }
      X[i], y[i] = x, 3 * x[1] + 2 * x[2] + 4 * (x[1] - 0.5) * (x[2] - 0.5) * 4
    end
    local f = importance.forest(X, y, { seed = 5, trees = 4 })
    local per_tree = importance.fanova(f, 2)
    local G = 400   -- cell midpoints: a piecewise-constant tree is exact up to the cells its splits cut
    for t, tree in ipairs(f.trees) do
      local one = { trees = { tree } }
      local grid, mean = {}, 0
      for a = 1, G do
        grid[a] = {}
        for b = 1, G do
          local v = importance.predict(one, { (a - 0.5) / G, (b - 0.5) / G })
          grid[a][b] = v
          mean = mean + v
        end
      end
      mean = mean / (G * G)
      local var = 0
      for a = 1, G do for b = 1, G do var = var + (grid[a][b] - mean) ^ 2 end end
      var = var / (G * G)
      for j = 1, 2 do
        local ve = 0
        for k = 1, G do
          local s = 0
          for l = 1, G do s = s + (j == 1 and grid[k][l] or grid[l][k]) end
          ve = ve + (s / G - mean) ^ 2
        end
        ve = ve / G
        local want = var > 0 and ve / var or 0
        assert.is_true(math.abs(per_tree[t][j] - want) < 0.01,
          string.format("tree %d key %d: fanova %.4f, grid %.4f", t, j, per_tree[t][j], want))
      end
    end
  end)
end)

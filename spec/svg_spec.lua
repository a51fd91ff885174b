-- moonrl.formats.svg.chart's geometry, read back from the SVG text: every data point
-- inside the frame, at least 3 labelled ticks on a log axis spanning less
-- than a decade, the legend clear of every curve and point, and a faint
-- series with labels beside its points.
local svg = require("moonrl.formats.svg")

local function frame(text)
  local x, y, w, h = text:match('<rect x="([%d.%-]+)" y="([%d.%-]+)" width="([%d.%-]+)" height="([%d.%-]+)" fill="none"')
  return tonumber(x), tonumber(y), tonumber(w), tonumber(h)
end

local function marks(text)
  local pts = {}
  for cx, cy in text:gmatch('<circle cx="([%d.%-]+)" cy="([%d.%-]+)" r="4"') do
    pts[#pts + 1] = { tonumber(cx), tonumber(cy), r = 4 }
  end
  for list in text:gmatch('<polyline points="([^"]+)"') do
    for px, py in list:gmatch("([%d.%-]+),([%d.%-]+)") do pts[#pts + 1] = { tonumber(px), tonumber(py), r = 0 } end
  end
  return pts
end

local function chart(xlog)
  local series = {}
  for k = 1, 3 do
    local pts = {}
    for i = 0, 10 do pts[#pts + 1] = { 200 + 40 * i, k * 0.1 + i * 0.05 } end
    series[k] = { name = "trial-00" .. k .. " with a long name", points = pts, kind = k == 3 and "points" or "line" }
  end
  return svg.chart { title = "t", xlabel = "x", ylabel = "y", xlog = xlog, series = series }
end

describe("svg.chart", function()
  for _, xlog in ipairs({ false, true }) do
    it("keeps every point, marker radius included, inside the frame (xlog=" .. tostring(xlog) .. ")", function()
      local text = chart(xlog)
      local x, y, w, h = frame(text)
      local pts = marks(text)
      assert.is_true(#pts > 20)
      for _, p in ipairs(pts) do
        assert.is_true(p[1] - p.r >= x and p[1] + p.r <= x + w and p[2] - p.r >= y and p[2] + p.r <= y + h,
          string.format("point %.2f,%.2f r=%d outside the frame %s %s %s %s", p[1], p[2], p.r, x, y, w, h))
      end
    end)

    it("draws the legend clear of every curve and point (xlog=" .. tostring(xlog) .. ")", function()
      local text = chart(xlog)
      local x, y, w, h = frame(text)
      -- the legend's text starts 28 px right of its swatch; its box spans the swatches and labels
      local lx0, ly0, lx1, ly1 = math.huge, math.huge, -math.huge, -math.huge
      for tx, ty, label in text:gmatch('<text x="([%d.%-]+)" y="([%d.%-]+)">(trial[^<]*)</text>') do
        tx, ty = tonumber(tx), tonumber(ty)
        lx0, lx1 = math.min(lx0, tx - 28), math.max(lx1, tx + 6 * #label)
        ly0, ly1 = math.min(ly0, ty - 11), math.max(ly1, ty + 3)
      end
      assert.is_true(lx1 > lx0, "no legend found")
      for _, p in ipairs(marks(text)) do
        local inside = p[1] + p.r >= lx0 and p[1] - p.r <= lx1 and p[2] + p.r >= ly0 and p[2] - p.r <= ly1
        assert.is_false(inside, string.format("point %.2f,%.2f under the legend box %.0f,%.0f-%.0f,%.0f",
          p[1], p[2], lx0, ly0, lx1, ly1))
      end
    end)
  end

  it("draws a series faint (opacity, width) and writes its labels beside their points, inside the frame", function()
    local text = svg.chart { title = "t", xlabel = "x", ylabel = "y", series = {
      { points = { { 1, 1 }, { 2, 2 }, { 3, 1.5 } }, opacity = 0.3, width = 1, color = "#123456" },
      { kind = "points", points = { { 1, 1 }, { 0 / 0, 5 }, { 2, 2 }, { 3, 3 } }, labels = { "first", "nan", nil, "last" },
        opacity = 0.5, color = "#654321" },
    } }
    assert.truthy(text:find('<polyline points="[^"]+" fill="none" stroke="#123456" stroke%-opacity="0.3" stroke%-width="1"/>'))
    assert.equal(3, select(2, text:gsub('<circle [^>]*fill="#654321" fill%-opacity="0.5"', "")))
    local x, y, w, h = frame(text)
    local circles = {}
    for cx, cy in text:gmatch('<circle cx="([%d.%-]+)" cy="([%d.%-]+)" r="4"') do circles[#circles + 1] = { tonumber(cx), tonumber(cy) } end
    local labels = {}
    for tx, ty, anchor, s in text:gmatch('<text x="([%d.%-]+)" y="([%d.%-]+)" fill="#654321" font%-size="10" text%-anchor="(%a+)">([^<]*)</text>') do
      labels[#labels + 1] = { x = tonumber(tx), y = tonumber(ty), anchor = anchor, s = s }
    end
    -- the NaN point has no label; "first" beside point 1 (its text going right), "last" beside
    -- point 4 at the frame's right edge (its text going left, and below it: the point is at the top)
    assert.same({ "first", "last" }, { labels[1] and labels[1].s, labels[2] and labels[2].s })
    assert.equal("start", labels[1].anchor)
    assert.equal("end", labels[2].anchor)
    assert.is_true(math.abs(labels[1].x - (circles[1][1] + 6)) < 0.01 and math.abs(labels[1].y - (circles[1][2] - 7)) < 0.01)
    assert.is_true(math.abs(labels[2].x - (circles[3][1] - 6)) < 0.01 and math.abs(labels[2].y - (circles[3][2] + 15)) < 0.01)
    for _, l in ipairs(labels) do
      assert.is_true(l.x >= x and l.x <= x + w and l.y >= y and l.y <= y + h, l.s .. " outside the frame")
    end
  end)

  it("labels at least 3 ticks on a log axis spanning less than a decade", function()
    local text = chart(true)
    local x, y, w, h = frame(text)
    local n = 0
    for ty in text:gmatch('<text x="[%d.%-]+" y="([%d.%-]+)" text%-anchor="middle">[%d.,]+</text>') do
      if math.abs(tonumber(ty) - (y + h + 16)) < 0.01 then n = n + 1 end
    end
    assert.is_true(n >= 3, "x ticks labelled: " .. n)
  end)
end)

-- moonrl.sweep.svg - a small SVG chart writer: lines and points on linear or
-- log10 axes, with ticks, labels and a legend. Enough for a sweep's plots;
-- not a plotting library (no gnuplot or browser needed to make them).
--
--   svg.chart{ title =, xlabel =, ylabel =, xlog = false, width = 720, height = 420,
--              xcategories = { "a", "b" } (x values are then 1 .. n, shown by name),
--              series = { { name =, points = { {x, y}, ... }, kind = "line" | "points",
--                           color = "#rrggbb" (default: the palette) }, ... } } -> text
--   svg.escape(s) -> s with & < > " escaped

local util = require("moonrl.util")

local svg = {}

svg.PALETTE = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf" }

function svg.escape(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local function finite(x) return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge end

-- "nice" ticks between lo and hi (about n of them)
local function ticks(lo, hi, n)
  if hi <= lo then hi = lo + 1 end
  local raw = (hi - lo) / (n or 5)
  local mag = 10 ^ math.floor(math.log10(raw))
  local step = mag
  for _, m in ipairs({ 1, 2, 5, 10 }) do
    if raw <= m * mag then step = m * mag break end
  end
  local out = {}
  local t = math.ceil(lo / step) * step
  while t <= hi + step * 1e-9 do
    out[#out + 1] = math.abs(t) < step * 1e-9 and 0 or t
    t = t + step
  end
  return out
end

local function label(x)
  return util.fmt_number(tonumber(string.format("%.3g", x)))
end

function svg.chart(c)
  local W, H = c.width or 720, c.height or 420
  local L, R, T, B = 70, 170, 36, 50   -- margins; the legend sits on the right
  local pw, ph = W - L - R, H - T - B
  local tx = c.xlog and function(x) return math.log10(x) end or function(x) return x end
  local xmin, xmax, ymin, ymax = math.huge, -math.huge, math.huge, -math.huge
  for _, s in ipairs(c.series) do
    for _, p in ipairs(s.points) do
      local x, y = p[1], p[2]
      if finite(x) and finite(y) and (not c.xlog or x > 0) then
        xmin, xmax = math.min(xmin, tx(x)), math.max(xmax, tx(x))
        ymin, ymax = math.min(ymin, y), math.max(ymax, y)
      end
    end
  end
  if c.xcategories then xmin, xmax = 0.5, #c.xcategories + 0.5 end
  if xmin > xmax then xmin, xmax = 0, 1 end
  if ymin > ymax then ymin, ymax = 0, 1 end
  if xmax == xmin then xmin, xmax = xmin - 0.5, xmax + 0.5 end
  if ymax == ymin then ymin, ymax = ymin - 0.5, ymax + 0.5 end
  local pad = (ymax - ymin) * 0.05
  ymin, ymax = ymin - pad, ymax + pad
  local function X(x) return L + (tx(x) - xmin) / (xmax - xmin) * pw end
  local function Y(y) return T + ph - (y - ymin) / (ymax - ymin) * ph end
  local out = {}
  local function add(...) out[#out + 1] = string.format(...) end
  add('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">', W, H, W, H)
  add('<rect width="%d" height="%d" fill="white"/>', W, H)
  if c.title then add('<text x="%d" y="22" text-anchor="middle" font-size="15">%s</text>', L + pw / 2, svg.escape(c.title)) end
  add('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>', L, T, pw, ph)
  -- y ticks
  for _, y in ipairs(ticks(ymin, ymax, 6)) do
    add('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>', L, Y(y), L + pw, Y(y))
    add('<text x="%d" y="%.1f" text-anchor="end">%s</text>', L - 6, Y(y) + 4, label(y))
  end
  -- x ticks
  if c.xcategories then
    for i, name in ipairs(c.xcategories) do
      add('<text x="%.1f" y="%d" text-anchor="middle">%s</text>', L + (i - xmin) / (xmax - xmin) * pw, T + ph + 16,
        svg.escape(name))
    end
  elseif c.xlog then
    for e = math.floor(xmin), math.ceil(xmax) do
      for _, m in ipairs({ 1, 2, 5 }) do
        local v = m * 10 ^ e
        local lv = math.log10(v)
        if lv >= xmin - 1e-9 and lv <= xmax + 1e-9 then
          local px = L + (lv - xmin) / (xmax - xmin) * pw
          add('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>', px, T, px, T + ph)
          add('<text x="%.1f" y="%d" text-anchor="middle">%s</text>', px, T + ph + 16, label(v))
        end
      end
    end
  else
    for _, x in ipairs(ticks(xmin, xmax, 6)) do
      local px = L + (x - xmin) / (xmax - xmin) * pw
      add('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>', px, T, px, T + ph)
      add('<text x="%.1f" y="%d" text-anchor="middle">%s</text>', px, T + ph + 16, label(x))
    end
  end
  if c.xlabel then add('<text x="%d" y="%d" text-anchor="middle">%s</text>', L + pw / 2, H - 12, svg.escape(c.xlabel)) end
  if c.ylabel then
    add('<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)">%s</text>', T + ph / 2, T + ph / 2,
      svg.escape(c.ylabel))
  end
  -- series
  for i, s in ipairs(c.series) do
    local color = s.color or svg.PALETTE[(i - 1) % #svg.PALETTE + 1]
    local pts = {}
    for _, p in ipairs(s.points) do
      if finite(p[1]) and finite(p[2]) and (not c.xlog or p[1] > 0) then pts[#pts + 1] = { X(p[1]), Y(p[2]) } end
    end
    if s.kind == "points" then
      for _, p in ipairs(pts) do
        add('<circle cx="%.1f" cy="%.1f" r="4" fill="%s" fill-opacity="0.8"><title>%s</title></circle>', p[1], p[2],
          color, svg.escape(s.name or ""))
      end
    elseif #pts > 0 then
      local d = {}
      for j, p in ipairs(pts) do d[j] = string.format("%.1f,%.1f", p[1], p[2]) end
      add('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5"><title>%s</title></polyline>',
        table.concat(d, " "), color, svg.escape(s.name or ""))
    end
    if s.name and i <= 24 then
      local ly = T + 8 + (i - 1) * 16
      add('<rect x="%d" y="%d" width="12" height="10" fill="%s"/>', L + pw + 12, ly - 9, color)
      add('<text x="%d" y="%d">%s</text>', L + pw + 30, ly, svg.escape(s.name))
    end
  end
  add("</svg>")
  return table.concat(out, "\n") .. "\n"
end

return svg

-- moonrl.formats.svg - a few plots written as SVG text, for the evaluation's figures
-- (Kaplan-Meier curves, distributions) with no plotting dependency.
--
-- A document is a list of elements rendered in order; a panel maps data
-- coordinates (linear or log10 x) into a rectangle of it and draws its
-- frame, ticks and labels. Lines are polylines; a step curve is a polyline
-- with the vertical risers in it.
--
-- What it is not: a charting library. Axes, lines, step curves, points, a
-- legend and text: what the evaluation's figures and the sweeps' plots draw.
--
-- Public functions
--   svg.new(width, height) -> doc
--   doc:add(raw_element_string) ; doc:text(x, y, s, attrs) ; doc:line(x1, y1, x2, y2, attrs)
--   doc:polyline(points, attrs)   points = {{x, y}, ...} in pixels
--   doc:panel{x=, y=, w=, h=, xmin=, xmax=, ymin=, ymax=, xlog=, title=, xlabel=, ylabel=,
--             yfmt=, xfmt=} -> panel
--   panel:px(x), panel:py(y) -> pixels ; panel:curve(points, attrs) (data coordinates, clipped)
--   panel:legend(entries [, outside])  entries = {{label=, color=, dash=, marker=}, ...}: marker, a
--                               point instead of a line; outside, right of the frame
--   doc:render() -> string      the whole SVG document
--   svg.escape(s) ; svg.ticks(lo, hi [, n]) -> {values} ; svg.colors
--   svg.chart{ title =, xlabel =, ylabel =, xlog = false, width = 720, height = 420,
--              xcategories = { "a", "b" } (x values are then 1 .. n, shown by name),
--              series = { { name =, points = { {x, y}, ... }, kind = "line" | "points",
--                           color =, opacity = (0..1: a faint series; default 1 for a
--                           line, 0.8 for points), width = (a line's, default 1.5),
--                           labels = { [i] = text } (written beside points[i]) } ... } }
--              -> text: one panel fitted to the data (non-finite points, and
--              x <= 0 on a log axis, left out), a legend of the named series
--   svg.ramp(t) -> "#rrggbb"   a colour for t in [0, 1] (viridis, from dark blue to yellow)
--   svg.parallel{ title =, width = 840, height = 420, note = (a line under the axes),
--                 axes = { { name =, lo =, hi =, log = false, categories = { "a", "b" } (values
--                           are then 1 .. n), reverse = false (hi at the bottom) } ... },
--                 lines = { { values = { v_1 .. v_axes } (nil: no value on that axis: the line
--                           stops there), color =, opacity = 0.8, width = 1.5, dash =, title =
--                           (the tooltip) } ... } }
--              -> text: parallel coordinates, one vertical axis per entry of axes, each
--              line a polyline across them (values outside an axis's range clamped to it)
--   svg.bars{ title =, xlabel =, width = 720, xmin = 0, xmax = (default the largest bar end),
--             bars = { { label =, value =, err = (a whisker of +-err), color = } ... } }
--              -> text: horizontal bars, top to bottom in the order given

local number = require("moonrl.number")

local svg = {}

svg.colors = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf" }

function svg.escape(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local function num(x) return string.format("%.2f", x) end

local function attrs_of(a)
  local keys, out = {}, {}
  for k in pairs(a or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = string.format(' %s="%s"', k:gsub("_", "-"), svg.escape(a[k])) end
  return table.concat(out)
end

-- "Nice" tick values covering [lo, hi]: steps of 1, 2 or 5 x 10^k, about n.
function svg.ticks(lo, hi, n)
  n = n or 5
  if not (hi > lo) then return { lo } end
  local raw = (hi - lo) / n
  local p = 10 ^ math.floor(math.log10(raw))
  local step = p
  for _, m in ipairs({ 1, 2, 5, 10 }) do
    if raw <= m * p then step = m * p; break end
  end
  local out = {}
  local v = math.ceil(lo / step - 1e-9) * step
  while v <= hi + step * 1e-9 do
    out[#out + 1] = math.abs(v) < step * 1e-9 and 0 or v
    v = v + step
  end
  return out
end

local Doc = {}
Doc.__index = Doc

function svg.new(width, height)
  return setmetatable({ width = width, height = height, items = {} }, Doc)
end

function Doc:add(s) self.items[#self.items + 1] = s end

function Doc:text(x, y, s, a)
  self:add(string.format('<text x="%s" y="%s"%s>%s</text>', num(x), num(y), attrs_of(a), svg.escape(s)))
end

function Doc:line(x1, y1, x2, y2, a)
  self:add(string.format('<line x1="%s" y1="%s" x2="%s" y2="%s"%s/>', num(x1), num(y1), num(x2), num(y2),
    attrs_of(a)))
end

function Doc:polyline(points, a)
  if #points < 2 then return end
  local p = {}
  for i, pt in ipairs(points) do p[i] = num(pt[1]) .. "," .. num(pt[2]) end
  local at = { fill = "none" }
  for k, v in pairs(a or {}) do at[k] = v end
  self:add(string.format('<polyline points="%s"%s/>', table.concat(p, " "), attrs_of(at)))
end

function Doc:render()
  return table.concat({
    string.format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
      'font-family="sans-serif" font-size="11">', self.width, self.height, self.width, self.height),
    string.format('<rect width="%d" height="%d" fill="white"/>', self.width, self.height),
    table.concat(self.items, "\n"),
    "</svg>", "" }, "\n")
end

-- ------------------------------------------------------------------ panels

local Panel = {}
Panel.__index = Panel

local function fmt_tick(v)
  if math.abs(v) >= 1000 then
    return number.thousands(v)
  end
  return (string.format("%.6g", v))
end

function Doc:panel(o)
  local p = setmetatable({ doc = self }, Panel)
  for k, v in pairs(o) do p[k] = v end
  if p.xlog then
    p.lx0, p.lx1 = math.log10(math.max(p.xmin, 1e-12)), math.log10(math.max(p.xmax, p.xmin * 10))
  end
  local grey = { stroke = "#999", stroke_width = 1 }
  self:add(string.format('<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#333"/>',
    num(p.x), num(p.y), num(p.w), num(p.h)))
  local xt = {}
  if p.xlog then
    -- decades; under 3 of them in range, the 2s and 5s too, then every digit
    for _, ms in ipairs({ { 1 }, { 1, 2, 5 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9 } }) do
      xt = {}
      for e = math.floor(p.lx0) - 1, math.ceil(p.lx1) do
        for _, m in ipairs(ms) do
          local l = e + math.log10(m)
          if l >= p.lx0 - 1e-9 and l <= p.lx1 + 1e-9 then xt[#xt + 1] = m * 10 ^ e end
        end
      end
      if #xt >= 3 then break end
    end
  else
    xt = svg.ticks(p.xmin, p.xmax)
  end
  for _, v in ipairs(xt) do
    local X = p:px(v)
    self:line(X, p.y + p.h, X, p.y + p.h + 4, grey)
    self:text(X, p.y + p.h + 16, (p.xfmt or fmt_tick)(v), { text_anchor = "middle" })
  end
  for _, v in ipairs(svg.ticks(p.ymin, p.ymax)) do
    local Y = p:py(v)
    self:line(p.x - 4, Y, p.x, Y, grey)
    self:line(p.x, Y, p.x + p.w, Y, { stroke = "#eee", stroke_width = 1 })
    self:text(p.x - 6, Y + 4, (p.yfmt or fmt_tick)(v), { text_anchor = "end" })
  end
  if p.title then self:text(p.x + p.w / 2, p.y - 10, p.title, { text_anchor = "middle", font_size = 13 }) end
  if p.xlabel then self:text(p.x + p.w / 2, p.y + p.h + 32, p.xlabel, { text_anchor = "middle" }) end
  if p.ylabel then
    self:add(string.format('<text x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>',
      num(p.x - 40), num(p.y + p.h / 2), num(p.x - 40), num(p.y + p.h / 2), svg.escape(p.ylabel)))
  end
  return p
end

function Panel:px(x)
  if self.xlog then
    local l = math.log10(math.max(x, 1e-12))
    return self.x + (l - self.lx0) / (self.lx1 - self.lx0) * self.w
  end
  return self.x + (x - self.xmin) / (self.xmax - self.xmin) * self.w
end

function Panel:py(y) return self.y + self.h - (y - self.ymin) / (self.ymax - self.ymin) * self.h end

-- A polyline through data points, clamped into the panel.
function Panel:curve(points, a)
  local px = {}
  for i, pt in ipairs(points) do
    local X = math.min(math.max(self:px(pt[1]), self.x), self.x + self.w)
    local Y = math.min(math.max(self:py(pt[2]), self.y), self.y + self.h)
    px[i] = { X, Y }
  end
  self.doc:polyline(px, a)
end

function Panel:legend(entries, outside)
  local x, y = self.x + self.w - 170, self.y + 14
  if outside then x = self.x + self.w + 12 end
  for i, e in ipairs(entries) do
    local Y = y + (i - 1) * 15
    if e.marker then   -- a series drawn as points shows a point, not a line
      self.doc:add(string.format('<circle cx="%s" cy="%s" r="3.5" fill="%s" fill-opacity="0.8"/>',
        num(x + 11), num(Y - 4), svg.escape(e.color)))
    else
      self.doc:line(x, Y - 4, x + 22, Y - 4, { stroke = e.color, stroke_width = 2, stroke_dasharray = e.dash })
    end
    self.doc:text(x + 28, Y, e.label)
  end
end

-- ------------------------------------------------------------------ charts

local finite = number.finite

function svg.chart(c)
  local W, H = c.width or 720, c.height or 420
  local function usable(p) return finite(p[1]) and finite(p[2]) and (not c.xlog or p[1] > 0) end
  local xmin, xmax, ymin, ymax = math.huge, -math.huge, math.huge, -math.huge
  for _, s in ipairs(c.series) do
    for _, p in ipairs(s.points) do
      if usable(p) then
        xmin, xmax = math.min(xmin, p[1]), math.max(xmax, p[1])
        ymin, ymax = math.min(ymin, p[2]), math.max(ymax, p[2])
      end
    end
  end
  if c.xcategories then xmin, xmax = 0.5, #c.xcategories + 0.5 end
  if xmin > xmax then xmin, xmax = c.xlog and 1 or 0, c.xlog and 10 or 1 end
  if ymin > ymax then ymin, ymax = 0, 1 end
  if xmax == xmin then xmin, xmax = c.xlog and xmin / 2 or xmin - 0.5, c.xlog and xmax * 2 or xmax + 0.5 end
  if ymax == ymin then ymin, ymax = ymin - 0.5, ymax + 0.5 end
  -- margins so that markers at the extremes of the data sit inside the frame
  local pad = (ymax - ymin) * 0.05
  if not c.xcategories then
    if c.xlog then
      local f = 10 ^ ((math.log10(xmax) - math.log10(xmin)) * 0.04)
      xmin, xmax = xmin / f, xmax * f
    else
      local xpad = (xmax - xmin) * 0.04
      xmin, xmax = xmin - xpad, xmax + xpad
    end
  end
  local named = 0
  for _, s in ipairs(c.series) do if s.name then named = named + 1 end end
  local right = named > 0 and 190 or 30 -- the legend goes right of the frame, never over the data
  local doc = svg.new(W, H)
  local xfmt
  if c.xcategories then
    xfmt = function(v) return (v == math.floor(v) and c.xcategories[v]) or "" end
  end
  local panel = doc:panel { x = 70, y = 36, w = W - 70 - right, h = H - 36 - 50, xmin = xmin, xmax = xmax,
    ymin = ymin - pad, ymax = ymax + pad, xlog = c.xlog, title = c.title, xlabel = c.xlabel, ylabel = c.ylabel,
    xfmt = xfmt }
  local legend = {}
  for i, s in ipairs(c.series) do
    local color = s.color or svg.colors[(i - 1) % #svg.colors + 1]
    local pts = {}
    for _, p in ipairs(s.points) do if usable(p) then pts[#pts + 1] = p end end
    if s.kind == "points" then
      for _, p in ipairs(pts) do
        doc:add(string.format('<circle cx="%s" cy="%s" r="4" fill="%s" fill-opacity="%s"><title>%s</title></circle>',
          num(panel:px(p[1])), num(panel:py(p[2])), svg.escape(color), svg.escape(s.opacity or 0.8), svg.escape(s.name or "")))
      end
    else
      panel:curve(pts, { stroke = color, stroke_width = s.width or 1.5, stroke_opacity = s.opacity })
    end
    for i, p in ipairs(s.labels and s.points or {}) do
      if s.labels[i] and usable(p) then
        -- beside the point, above it (below it at the frame's top), towards the frame's middle
        local X, Y = panel:px(p[1]), panel:py(p[2])
        local left = X > panel.x + panel.w * 0.75
        doc:text(left and X - 6 or X + 6, Y - 7 < panel.y + 10 and Y + 15 or Y - 7, s.labels[i],
          { text_anchor = left and "end" or "start", font_size = 10, fill = color })
      end
    end
    if s.name and #legend < 24 then legend[#legend + 1] = { label = s.name, color = color, marker = s.kind == "points" } end
  end
  panel:legend(legend, true)
  return doc:render()
end

-- viridis at 5 stops, interpolated linearly: dark for low values, yellow for high
local RAMP = { { 0x44, 0x01, 0x54 }, { 0x3b, 0x52, 0x8b }, { 0x21, 0x91, 0x8c }, { 0x5e, 0xc9, 0x62 }, { 0xfd, 0xe7, 0x25 } }

function svg.ramp(t)
  if not finite(t) then t = 0 end
  t = math.min(1, math.max(0, t)) * (#RAMP - 1)
  local i = math.min(#RAMP - 2, math.floor(t))
  local f, a, b = t - i, RAMP[i + 1], RAMP[i + 2]
  local c = {}
  for k = 1, 3 do c[k] = math.floor(a[k] + (b[k] - a[k]) * f + 0.5) end
  return string.format("#%02x%02x%02x", c[1], c[2], c[3])
end

-- an axis's position of v in [0, 1] (0 at the bottom), or nil
local function axis_pos(a, v)
  if type(v) ~= "number" or not finite(v) then return nil end
  local lo, hi = a.lo, a.hi
  if a.categories then lo, hi = 0.5, #a.categories + 0.5 end
  local t
  if a.log then
    if v <= 0 or lo <= 0 then return nil end
    t = (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
  else
    t = (v - lo) / (hi - lo)
  end
  if not finite(t) then t = 0.5 end
  t = math.min(1, math.max(0, t))
  return a.reverse and 1 - t or t
end

local function axis_ticks(a)
  if a.categories then
    local out = {}
    for i, c in ipairs(a.categories) do out[i] = { i, c } end
    return out
  end
  local out = {}
  if a.log and a.lo > 0 then
    local l0, l1 = math.log10(a.lo), math.log10(a.hi)
    for _, ms in ipairs({ { 1 }, { 1, 2, 5 }, { 1, 2, 3, 4, 5, 6, 7, 8, 9 } }) do
      out = {}
      for e = math.floor(l0) - 1, math.ceil(l1) do
        for _, m in ipairs(ms) do
          local l = e + math.log10(m)
          if l >= l0 - 1e-9 and l <= l1 + 1e-9 then out[#out + 1] = { m * 10 ^ e, fmt_tick(m * 10 ^ e) } end
        end
      end
      if #out >= 3 then break end
    end
    if #out == 0 then out = { { a.lo, fmt_tick(a.lo) }, { a.hi, fmt_tick(a.hi) } } end
    return out
  end
  for _, v in ipairs(svg.ticks(a.lo, a.hi, 5)) do out[#out + 1] = { v, fmt_tick(v) } end
  return out
end

function svg.parallel(c)
  local W, H = c.width or 840, c.height or 420
  local axes = c.axes
  local doc = svg.new(W, H)
  local left, right, top, bottom = 70, 70, 48, 64
  local n = #axes
  local function ax(i) return n > 1 and left + (i - 1) * (W - left - right) / (n - 1) or W / 2 end
  local function ay(t) return top + (1 - t) * (H - top - bottom) end
  if c.title then doc:text(W / 2, 20, c.title, { text_anchor = "middle", font_size = 13 }) end
  -- the lines first, the axes over them
  for _, l in ipairs(c.lines) do
    local pts, runs = {}, {}
    for i, a in ipairs(axes) do
      local t = axis_pos(a, l.values[i])
      if t then pts[#pts + 1] = num(ax(i)) .. "," .. num(ay(t))
      else
        if #pts > 0 then runs[#runs + 1] = pts end
        pts = {}
      end
    end
    if #pts > 0 then runs[#runs + 1] = pts end
    for _, r in ipairs(runs) do
      local at = { fill = "none", stroke = l.color or "#1f77b4", stroke_width = l.width or 1.5,
        stroke_opacity = l.opacity or 0.8, stroke_dasharray = l.dash }
      if #r == 1 then   -- a lone value: a dot
        local x, y = r[1]:match("([^,]+),(.+)")
        doc:add(string.format('<circle cx="%s" cy="%s" r="2.5" fill="%s"><title>%s</title></circle>', x, y,
          svg.escape(at.stroke), svg.escape(l.title or "")))
      else
        doc:add(string.format('<polyline points="%s"%s><title>%s</title></polyline>', table.concat(r, " "),
          attrs_of(at), svg.escape(l.title or "")))
      end
    end
  end
  for i, a in ipairs(axes) do
    local X = ax(i)
    doc:line(X, ay(0), X, ay(1), { stroke = "#333", stroke_width = 1 })
    for _, tk in ipairs(axis_ticks(a)) do
      local t = axis_pos(a, tk[1])
      if t then
        local Y = ay(t)
        doc:line(X - 4, Y, X, Y, { stroke = "#333", stroke_width = 1 })
        doc:text(X - 6, Y + 4, tk[2], { text_anchor = "end", font_size = 10 })
      end
    end
    doc:text(X, ay(0) + 18, a.name, { text_anchor = "middle" })
    if a.log then doc:text(X, ay(0) + 31, "(log scale)", { text_anchor = "middle", font_size = 10, fill = "#666" }) end
  end
  if c.note then doc:text(W / 2, H - 8, c.note, { text_anchor = "middle", font_size = 10, fill = "#666" }) end
  return doc:render()
end

function svg.bars(c)
  local W = c.width or 720
  local bars = c.bars
  local rowh = 26
  local H = 84 + rowh * math.max(1, #bars)
  local doc = svg.new(W, H)
  local xmax = c.xmax
  if not xmax then
    xmax = 0
    for _, b in ipairs(bars) do
      if finite(b.value) then xmax = math.max(xmax, b.value + (finite(b.err) and b.err or 0)) end
    end
    if xmax <= 0 then xmax = 1 end
  end
  local xmin = c.xmin or 0
  local label_w = 8
  for _, b in ipairs(bars) do label_w = math.max(label_w, #tostring(b.label)) end
  local x0 = math.min(W / 2, 16 + 6.5 * label_w)
  local p = doc:panel { x = x0, y = 36, w = W - x0 - 30, h = rowh * math.max(1, #bars), xmin = xmin, xmax = xmax,
    ymin = 0, ymax = 1, title = c.title, xlabel = c.xlabel, yfmt = function() return "" end }
  for i, b in ipairs(bars) do
    local Y = p.y + (i - 1) * rowh
    doc:text(p.x - 6, Y + rowh / 2 + 4, b.label, { text_anchor = "end" })
    if finite(b.value) then
      local X0, X1 = p:px(math.max(xmin, 0)), p:px(math.min(math.max(b.value, xmin), xmax))
      doc:add(string.format('<rect x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>',
        num(math.min(X0, X1)), num(Y + 5), num(math.abs(X1 - X0)), num(rowh - 10), svg.escape(b.color or svg.colors[1]),
        svg.escape(b.label .. ": " .. string.format("%.3g", b.value) .. (finite(b.err) and string.format(" +- %.2g", b.err) or ""))))
      if finite(b.err) and b.err > 0 then
        local lo, hi = p:px(math.max(xmin, b.value - b.err)), p:px(math.min(xmax, b.value + b.err))
        local ym = Y + rowh / 2
        doc:line(lo, ym, hi, ym, { stroke = "#333", stroke_width = 1 })
        doc:line(lo, ym - 4, lo, ym + 4, { stroke = "#333", stroke_width = 1 })
        doc:line(hi, ym - 4, hi, ym + 4, { stroke = "#333", stroke_width = 1 })
      end
    end
  end
  return doc:render()
end

return svg

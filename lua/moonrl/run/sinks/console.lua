-- moonrl.run.sinks.console - the progress line.
--
--   [########------------]  40.0%  update 103/256  421,888 steps  ETA 1m32s  sps 4,711  return 2.31  eff 81.2%
--
-- On a terminal the line is redrawn in place (\r, clear to end of line) after
-- every update and finished with a newline on close. Elsewhere (a pipe, a log
-- file, CI) a plain line is printed every log.interval updates, and for the
-- last update. log.interval and total_steps are read from `cfg` at each
-- update, so a live change takes effect at once. ETA = steps left / a moving
-- average of sps ("paused" instead while the run is paused). return and eff show "-" for an update in which no episode
-- ended. Output goes through opts.write (default io.stdout:write + flush):
-- a console line is small and must appear in order with other output.
--
-- Public
--   Console.new(run_dir, cfg, opts) -> sink  opts: is_tty (default: luv says stdout is a
--                                            tty), write(s), width (bar, default 20), uv,
--                                            total_updates(cfg) -> n (for "update k/n";
--                                            without it the line says "update k")
--   sink:update(metrics)
--   sink:message(text)     a line of its own (an alert, a note) without breaking the bar (addition)
--   sink:aside(fn)         fn() writes to the terminal another way (stderr): the bar is
--                          cleared before and redrawn after (addition)
--   sink:paused(on)        the run paused (true) / resumed (false): "paused" instead of the
--                          ETA until the next update, redrawn at once (addition)
--   sink:close([cb])       cb() is called at once
--   Console.format(metrics, cfg, state) -> line   (addition: the line without \r or \n;
--                                                 state.total_updates as opts' above)


local Console = {}
Console.__index = Console

local function default_write(s)
  io.stdout:write(s)
  io.stdout:flush()
end

function Console.new(run_dir, cfg, opts)
  opts = opts or {}
  local is_tty = opts.is_tty
  if is_tty == nil then
    is_tty = false
    local ok, uv = pcall(function() return opts.uv or require("luv") end)
    if ok and uv and uv.guess_handle then is_tty = uv.guess_handle(1) == "tty" end
  end
  return setmetatable({
    run_dir = run_dir, cfg = cfg or {}, is_tty = is_tty, write = opts.write or default_write,
    on_error = opts.on_error or function() end,
    state = { width = opts.width or 20, total_updates = opts.total_updates }, drawn = false, last = nil, count = 0,
  }, Console)
end

local thousands = require("moonrl.number").thousands

local function eta_text(seconds)
  if seconds ~= seconds or seconds == math.huge or seconds < 0 then return "-" end
  seconds = math.floor(seconds + 0.5)
  if seconds < 60 then return seconds .. "s" end
  if seconds < 3600 then return string.format("%dm%02ds", math.floor(seconds / 60), seconds % 60) end
  return string.format("%dh%02dm", math.floor(seconds / 3600), math.floor(seconds / 60) % 60)
end

local function num(v)
  if type(v) == "cdata" then return tonumber(v) end
  if type(v) == "number" then return v end
  return nil
end

-- The updates the run makes, from state.total_updates(cfg) (the runner passes
-- engine.total_updates: the engine counts them, not this file), or nil.
-- Asked again only when total_steps changes (it is hot).
local function total_updates(cfg, state)
  local f = state.total_updates
  if not f then return nil end
  if state.of_steps ~= cfg.total_steps then
    local ok, n = pcall(f, cfg)
    state.of_steps, state.of = cfg.total_steps, ok and num(n) or nil
  end
  return state.of
end

-- The line for metrics m; state keeps the sps average between calls.
function Console.format(m, cfg, state)
  cfg = cfg or {}
  local total = num(cfg.total_steps)
  local steps = num(m.agent_steps) or 0
  local progress = num(m.progress)
  if not progress and total and total > 0 then progress = steps / total end
  progress = math.max(0, math.min(1, progress or 0))
  local width = state.width or 20
  local filled = math.floor(progress * width + 1e-9)
  local parts = {
    "[" .. string.rep("#", filled) .. string.rep("-", width - filled) .. "]",
    string.format("%5.1f%%", progress * 100),
  }
  local upd = num(m.update)
  if upd then
    local of = total and total_updates(cfg, state)
    parts[#parts + 1] = "update " .. thousands(upd) .. (of and ("/" .. thousands(of)) or "")
  end
  parts[#parts + 1] = thousands(steps) .. " steps"
  local sps = num(m.sps)
  if sps and sps == sps and sps > 0 and sps < math.huge and not state.redraw then
    state.sps_avg = state.sps_avg and (0.7 * state.sps_avg + 0.3 * sps) or sps
  end
  if state.paused then
    parts[#parts + 1] = "paused"   -- no ETA while nothing trains
  elseif total and state.sps_avg then
    parts[#parts + 1] = "ETA " .. eta_text(math.max(0, total - steps) / state.sps_avg)
  end
  parts[#parts + 1] = "sps " .. (sps and sps == sps and thousands(sps) or "-")
  local ended = num(m.episodes)
  local have_episodes = ended == nil or ended > 0
  local ret, eff = num(m.episode_return_mean), num(m.efficiency)
  parts[#parts + 1] = "return " .. ((have_episodes and ret) and string.format("%.2f", ret) or "-")
  -- efficiency is the first two counters' (food / (food + poison)): only where the environment counts two
  if state.counters == nil then   -- without the engine (a sink alone), as foraging
    local name = cfg.env and cfg.env.name or "foraging"
    local ok, sp = pcall(function() return require("moonrl.engine").env_spaces(name) end)
    state.counters = ok and sp and #sp.counters or 2
  end
  if state.counters >= 2 then
    parts[#parts + 1] = "eff " .. ((have_episodes and eff) and string.format("%.1f%%", eff * 100) or "-")
  end
  return table.concat(parts, "  ")
end

function Console:update(m)
  local ok, err = pcall(function()
    self.count = self.count + 1
    self.state.paused = nil   -- an update: the run trains
    local line = Console.format(m, self.cfg, self.state)
    self.last, self.last_m = line, m
    if self.is_tty then
      self.write("\r" .. line .. "\27[K")
      self.drawn = true
      return
    end
    local interval = (self.cfg.log and tonumber(self.cfg.log.interval)) or 1
    if interval < 1 then interval = 1 end
    local n = num(m.update) or self.count
    local total = num(self.cfg.total_steps)
    local last = (num(m.progress) or 0) >= 1 or (total and (num(m.agent_steps) or 0) >= total)
    if n % interval == 0 or last then self.write(line .. "\n") end
  end)
  if not ok then pcall(self.on_error, "console: " .. tostring(err)) end
end

function Console:message(text)
  if self.is_tty and self.drawn then
    self.write("\r\27[K" .. text .. "\n" .. (self.last and (self.last .. "\27[K") or ""))
  else
    self.write(text .. "\n")
  end
end

-- fn() writes elsewhere (stderr, the same terminal): on a terminal the bar is
-- cleared first, so fn's lines start on a line of their own, and redrawn after.
function Console:aside(fn)
  if self.is_tty and self.drawn then
    self.write("\r\27[K")
    fn()
    if self.last then self.write(self.last .. "\27[K") end
  else
    fn()
  end
end

-- The run paused (true) or resumed (false): the line says "paused" instead of
-- an ETA until the next update; redrawn at once (elsewhere than a terminal:
-- the line printed once at the pause).
function Console:paused(on)
  local ok, err = pcall(function()
    self.state.paused = on and true or nil
    if not self.last_m then return end
    self.state.redraw = true
    local line = Console.format(self.last_m, self.cfg, self.state)
    self.state.redraw = nil
    self.last = line
    if self.is_tty then
      self.write("\r" .. line .. "\27[K")
      self.drawn = true
    elseif on then
      self.write(line .. "\n")
    end
  end)
  if not ok then pcall(self.on_error, "console: " .. tostring(err)) end
end

function Console:close(cb)
  if self.is_tty and self.drawn then
    self.write("\n")
    self.drawn = false
  end
  if cb then cb() end
end

Console.thousands = thousands
Console.eta_text = eta_text

return Console

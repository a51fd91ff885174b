-- moonrl.run.sinks - opens the sinks a config asks for, as one (addition).
--
--   local sinks = require("moonrl.run.sinks")
--   local out = sinks.open(run_dir, cfg, { uv = uv, on_error = report, is_tty = nil })
--   out:update(metrics)       -- every update, on the loop thread
--   out:message("...")        -- a line for the console (alerts, notes)
--   out:close(function(err) ... end)   -- after every file is flushed and closed
--
-- cfg.log.console / jsonl / csv / tensorboard choose the sinks (read once, at
-- open). run_dir must exist. Each sink is also usable alone:
-- require("moonrl.run.sinks.<name>").new(run_dir, cfg, opts).
--
-- Public
--   sinks.open(run_dir, cfg, opts) -> group   group.sinks = {name = sink}
--   sinks.NAMES = {"console", "jsonl", "csv", "tensorboard"}
--   sinks.each(list, method, on_error, ...)   a run's sinks ({name =, sink =} entries):
--       sink:method(...) for each one that has the method, over a copy of
--       the list (on_error(name, err), called when one raises, may drop it)

local sinks = {}

sinks.NAMES = { "console", "jsonl", "csv", "tensorboard" }

function sinks.each(list, method, on_error, ...)
  for _, s in ipairs({ unpack(list or {}) }) do
    local f = s.sink[method]
    if f then
      local ok, err = pcall(f, s.sink, ...)
      if not ok and on_error then on_error(s.name, err) end
    end
  end
end

local Group = {}
Group.__index = Group

function sinks.open(run_dir, cfg, opts)
  local log = (cfg and cfg.log) or {}
  local g = setmetatable({ sinks = {}, order = {} }, Group)
  for _, name in ipairs(sinks.NAMES) do
    if log[name] then
      g.sinks[name] = require("moonrl.run.sinks." .. name).new(run_dir, cfg, opts)
      g.order[#g.order + 1] = name
    end
  end
  return g
end

function Group:update(m)
  for _, name in ipairs(self.order) do self.sinks[name]:update(m) end
end

function Group:message(text)
  local c = self.sinks.console
  if c then c:message(text) end
end

function Group:close(cb)
  local pending, first_err = #self.order + 1, nil
  local function done(err)
    first_err = first_err or err
    pending = pending - 1
    if pending == 0 and cb then cb(first_err) end
  end
  for _, name in ipairs(self.order) do self.sinks[name]:close(done) end
  done(nil)
end

return sinks

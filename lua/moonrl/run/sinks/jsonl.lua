-- moonrl.run.sinks.jsonl - metrics.jsonl: one JSON object per update.
--
-- Each line holds every scalar of the metrics table (keys are mr_metrics field
-- names, sorted), `wall_time` (seconds since the epoch) and, always, the
-- fields of sinks.base.FIELDS (null when the engine did not report them).
-- NaN and infinities are written as null. Writes are asynchronous (luv fs).
--
-- Events (a change made while training: moonrl.run.changes) are lines of their
-- own with an "event" field naming the kind, which no metrics line has: a
-- reader of metrics skips lines that have it.
--
-- Public
--   Jsonl.new(run_dir, cfg, opts) -> sink     opts: uv, on_error(msg), clock() -> seconds,
--                                             file (name inside run_dir, default "metrics.jsonl"),
--                                             append (a resumed run: write after the rows there)
--   sink:update(metrics)
--   sink:event(e)                             e.event: the kind ("change"); written as given
--                                             plus wall_time
--   sink:close([cb])                          cb(err) once the file is flushed and closed
--   sink.path

local asyncfile = require("moonrl.runtime.asyncfile")
local base = require("moonrl.run.sinks.base")
local json = require("moonrl.formats.json")

local Jsonl = {}
Jsonl.__index = Jsonl

function Jsonl.new(run_dir, cfg, opts)
  opts = base.options(opts)
  local self = setmetatable({ cfg = cfg, on_error = opts.on_error, clock = opts.clock }, Jsonl)
  self.path = run_dir .. "/" .. (opts.file or "metrics.jsonl")
  self.file = asyncfile.open(opts.uv, self.path, { on_error = opts.on_error, append = opts.append })
  return self
end

function Jsonl:update(m)
  base.guard(self, "metrics.jsonl", function()
    local rec = base.scalars(m)
    for _, k in ipairs(base.FIELDS) do
      if rec[k] == nil then rec[k] = json.null end
    end
    if rec.wall_time == nil then rec.wall_time = self.clock() end
    self.file:write(json.encode(rec) .. "\n")
  end)
end

function Jsonl:event(e)
  base.guard(self, "metrics.jsonl", function()
    assert(type(e) == "table" and type(e.event) == "string", "an event needs an event field (its kind)")
    local rec = {}
    for k, v in pairs(e) do rec[k] = v end
    if rec.wall_time == nil then rec.wall_time = self.clock() end
    self.file:write(json.encode(rec) .. "\n")
  end)
end

function Jsonl:close(cb)
  self.file:close(cb)
end

return Jsonl

-- moonrl.run.sinks.csv - metrics.csv: a header and one row per update.
--
-- Columns are fixed by the first update: the fields of sinks.base.FIELDS in
-- their order, then every other scalar of that first metrics table (sorted),
-- then wall_time. A later metric without a column is not written; a missing
-- value is an empty cell. Numbers are written in their shortest round-trip
-- form (nan, inf, -inf as such), booleans as 1/0, strings quoted when needed.
-- Writes are asynchronous (luv fs).
--
-- Public
--   Csv.new(run_dir, cfg, opts) -> sink      opts: uv, on_error(msg), clock() -> seconds,
--                                            file (default "metrics.csv"), append (a resumed
--                                            run: write after the rows there, in the columns of
--                                            opts.columns, the header already there)
--   sink:update(metrics)
--   sink:close([cb])
--   sink.path, sink.columns (after the first update)

local asyncfile = require("moonrl.runtime.asyncfile")
local base = require("moonrl.run.sinks.base")
local util = require("moonrl.util")

local Csv = {}
Csv.__index = Csv

function Csv.new(run_dir, cfg, opts)
  opts = base.options(opts)
  local self = setmetatable({ cfg = cfg, on_error = opts.on_error, clock = opts.clock }, Csv)
  self.path = run_dir .. "/" .. (opts.file or "metrics.csv")
  local append = opts.append and opts.columns ~= nil
  if append then self.columns = opts.columns end
  self.file = asyncfile.open(opts.uv, self.path, { on_error = opts.on_error, append = append })
  return self
end

local function cell(v)
  local tv = type(v)
  if v == nil then return "" end
  if tv == "number" then return util.fmt_number(v) end
  if tv == "boolean" then return v and "1" or "0" end
  v = tostring(v)
  if v:find('[,"\r\n]') then v = '"' .. v:gsub('"', '""') .. '"' end
  return v
end

function Csv:update(m)
  base.guard(self, "metrics.csv", function()
    local rec = base.scalars(m)
    if rec.wall_time == nil then rec.wall_time = self.clock() end
    if not self.columns then
      local cols, have = {}, {}
      for _, k in ipairs(base.FIELDS) do cols[#cols + 1] = k; have[k] = true end
      have.wall_time = true
      for _, k in ipairs(util.sorted_keys(rec)) do
        if not have[k] then cols[#cols + 1] = k end
      end
      cols[#cols + 1] = "wall_time"
      self.columns = cols
      local head = {}
      for i, c in ipairs(cols) do head[i] = cell(c) end
      self.file:write(table.concat(head, ",") .. "\n")
    end
    local row = {}
    for i, c in ipairs(self.columns) do row[i] = cell(rec[c]) end
    self.file:write(table.concat(row, ",") .. "\n")
  end)
end

function Csv:close(cb)
  self.file:close(cb)
end

return Csv

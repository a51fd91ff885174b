-- moonrl.run.trim_metrics - cuts a run directory's metrics files back to a
-- checkpoint's update, so that a resumed run appends to them with no update
-- missing and none twice.
--
-- A run that stopped without a clean end (killed, a crash, the machine gone)
-- may have written metrics for updates after its newest checkpoint; resuming
-- from it repeats those updates. Here every file keeps its valid prefix:
--   metrics.jsonl   lines whose "update" is <= k
--   metrics.csv     the header and rows whose update column is <= k
--   events.out.tfevents.*   records up to the first Event whose step is past
--                   the checkpoint's step (steps are agent-steps, rising in a
--                   file); the file_version record stays
-- and a torn last line or record (a write cut short) goes too. A file that
-- changes is rewritten through a temporary file and a rename. The resumed
-- run's TensorBoard sink starts a new event file that opens with a
-- SessionLog START at the first new step, which also makes a TensorBoard
-- that already read the dropped steps purge them (its restart handling).
--
-- Synchronous: it runs once, before the resumed run starts.
--
-- Public functions
--   trim.run_dir(dir, update, step) -> report | nil, err
--       report: { jsonl = dropped, csv = dropped, tensorboard = dropped events,
--                 torn = {files}, dropped = any of these, csv_columns = {names} | nil,
--                 lines = {text}, missing = {ranges = {"4-5", ...}, count =} | nil,
--                 missing_line = text | nil (metrics.jsonl lacks rows of updates <= update) }
--   trim.jsonl(path, update) -> dropped, torn, missing | nil, err
--   trim.csv(path, update) -> dropped, torn, columns | nil, err
--   trim.tensorboard(path, step) -> dropped, torn | nil, err
--   trim.event_step(data) -> the step of an Event's bytes (nil when it has none)

local util = require("moonrl.util")

local trim = {}

local replace = util.write_file_atomic   -- the file whole, old or new, never half of one

-- Keeps the complete lines `keep(line)` accepts; a last line without its
-- newline is torn. Returns dropped, torn, kept lines, or nil when no file.
local function filter_lines(path, keep)
  local text = util.read_file(path)
  if not text then return nil end
  local out, dropped, pos = {}, 0, 1
  while true do
    local nl = text:find("\n", pos, true)
    if not nl then break end
    local line = text:sub(pos, nl - 1)
    if keep(line, #out) then out[#out + 1] = line else dropped = dropped + 1 end
    pos = nl + 1
  end
  local torn = pos <= #text
  if dropped > 0 or torn then
    local body = #out > 0 and (table.concat(out, "\n") .. "\n") or ""
    local ok, err = replace(path, body)
    if not ok then return nil, err end
  end
  return dropped, torn, out
end

-- The metrics rows (not the event lines) of updates 1..update that `seen`
-- lacks, as ranges "a-b" / "a": what a run killed while its event loop
-- lagged could lose before this release (the trainer now waits for them).
local function missing_ranges(seen, update)
  local out, n, a = {}, 0, nil
  for u = 1, update + 1 do
    if u <= update and not seen[u] then
      a = a or u
      n = n + 1
    elseif a then
      out[#out + 1] = a == u - 1 and tostring(a) or (a .. "-" .. (u - 1))
      a = nil
    end
  end
  return out, n
end

function trim.jsonl(path, update)
  local seen = {}
  local dropped, torn = filter_lines(path, function(line)
    local u = line:match('[{,]"update":(%d+)[,}]')
    local keep = u ~= nil and tonumber(u) <= update
    if keep and not line:find('[{,]"event":') then seen[tonumber(u)] = true end
    return keep
  end)
  if dropped == nil then return 0, false end
  local ranges, n = missing_ranges(seen, update)
  return dropped, torn, n > 0 and { ranges = ranges, count = n } or nil
end

-- CSV cells of one line (quotes as the csv sink writes them).
local function cells(line)
  local out, pos = {}, 1
  while pos <= #line + 1 do
    if line:sub(pos, pos) == '"' then
      local buf, i = {}, pos + 1
      while i <= #line do
        local c = line:sub(i, i)
        if c == '"' then
          if line:sub(i + 1, i + 1) == '"' then buf[#buf + 1] = '"'; i = i + 2 else i = i + 1 break end
        else
          buf[#buf + 1] = c
          i = i + 1
        end
      end
      out[#out + 1] = table.concat(buf)
      pos = i + 1
    else
      local comma = line:find(",", pos, true) or (#line + 1)
      out[#out + 1] = line:sub(pos, comma - 1)
      pos = comma + 1
    end
  end
  return out
end

function trim.csv(path, update)
  local col
  local header
  local dropped, torn, kept = filter_lines(path, function(line, n)
    if n == 0 then
      header = cells(line)
      for i, name in ipairs(header) do if name == "update" then col = i end end
      return col ~= nil
    end
    local u = tonumber(cells(line)[col])
    return u ~= nil and u <= update
  end)
  if dropped == nil then return 0, false, nil end
  if not col then dropped = dropped - (header and 1 or 0) end   -- no header: an empty file from now on
  return dropped, torn, (kept and #kept > 0) and header or nil
end

-- ---------------------------------------------------------------- tensorboard

local u64le = require("moonrl.formats.protobuf").read_u64le

local function varint(s, i)
  local v, mul = 0, 1
  while true do
    local b = s:byte(i)
    if not b then return nil end
    v = v + (b % 128) * mul
    i = i + 1
    if b < 128 then return v, i end
    mul = mul * 128
  end
end

-- Event { double wall_time = 1; int64 step = 2; ... }: the step, reading
-- fields in order until field 2 (absent in the file_version record).
function trim.event_step(data)
  local i = 1
  while i <= #data do
    local key, j = varint(data, i)
    if not key then return nil end
    local field, wire = math.floor(key / 8), key % 8
    if field == 2 and wire == 0 then return (varint(data, j)) end
    if wire == 0 then
      local _, k = varint(data, j)
      if not k then return nil end
      i = k
    elseif wire == 1 then
      i = j + 8
    elseif wire == 5 then
      i = j + 4
    elseif wire == 2 then
      local n, k = varint(data, j)
      if not n then return nil end
      i = k + n
    else
      return nil
    end
  end
  return nil
end

function trim.tensorboard(path, step)
  local s = util.read_file(path)
  if not s then return 0, false end
  local pos, cut, kept, events = 1, nil, 0, 0
  while pos <= #s do
    if pos + 12 - 1 > #s then cut = pos; break end
    local len = u64le(s, pos)
    local stop = pos + 12 + len + 4
    if stop - 1 > #s then cut = pos; break end
    local st = trim.event_step(s:sub(pos + 12, pos + 12 + len - 1))
    if st and st > step then cut = pos; break end
    kept = kept + 1
    pos = stop
  end
  if not cut then return 0, false end
  -- The rest: whole records past the step, then perhaps a torn one.
  local dropped, torn, p = 0, false, cut
  while p <= #s do
    if p + 11 > #s then torn = true break end
    local stop = p + 12 + u64le(s, p) + 4
    if stop - 1 > #s then torn = true break end
    dropped = dropped + 1
    p = stop
  end
  local ok, err = replace(path, s:sub(1, cut - 1))
  if not ok then return nil, err end
  return dropped, torn
end

-- ------------------------------------------------------------------ a run

function trim.run_dir(dir, update, step)
  local report = { jsonl = 0, csv = 0, tensorboard = 0, torn = {}, lines = {} }
  local n, torn, missing = trim.jsonl(dir .. "/metrics.jsonl", update)
  if not n then return nil, torn end
  report.jsonl, report.missing = n, missing
  if torn then report.torn[#report.torn + 1] = "metrics.jsonl" end
  local cn, ctorn, cols = trim.csv(dir .. "/metrics.csv", update)
  if not cn then return nil, ctorn end
  report.csv, report.csv_columns = cn, cols
  if ctorn then report.torn[#report.torn + 1] = "metrics.csv" end
  for _, path in ipairs(require("moonrl.run.dir").event_files(dir)) do
    local tn, ttorn = trim.tensorboard(path, step)
    if not tn then return nil, ttorn end
    report.tensorboard = report.tensorboard + tn
    if ttorn then report.torn[#report.torn + 1] = path:match("[^/]+$") end
  end
  report.dropped = report.jsonl + report.csv + report.tensorboard > 0 or #report.torn > 0
  report.lines[#report.lines + 1] = string.format(
    "dropped the metrics written after update %d: %d row(s) of metrics.jsonl, %d of metrics.csv, " ..
    "%d TensorBoard event(s)%s", update, report.jsonl, report.csv, report.tensorboard,
    #report.torn > 0 and (" (and a torn last write in " .. table.concat(report.torn, ", ") .. ")") or "")
  if missing then
    local shown = #missing.ranges > 8 and table.concat(missing.ranges, ", ", 1, 8) .. ", ..." or
      table.concat(missing.ranges, ", ")
    report.missing_line = string.format("metrics.jsonl lacks the rows of %d of the %d updates up to the " ..
      "checkpoint: update%s %s (they were not written before the run stopped; they cannot be recovered, the " ..
      "resumed run appends after them)", missing.count, update, missing.count > 1 and "s" or "", shown)
  end
  return report
end

return trim

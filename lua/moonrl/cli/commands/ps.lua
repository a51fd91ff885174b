-- `moonrl ps [DIR]`: the jobs running under DIR (default runs/), found by
-- their control sockets (moonrl.control.client) and asked for their status.

local cmdline = require("moonrl.cli.cmdline")

local ps = {
  name = "ps",
  order = 65,
  usage = "ps [DIR]",
  summary = "list the jobs running under DIR (default runs/)",
  help = [[
usage: moonrl ps [DIR] [options]

Lists the run directories under DIR (default runs/; DIR may be a run
directory itself) that have a control socket, and the trials of the sweeps
there (a sweep directory's trial-NNN run directories, listed under a line
naming the sweep; DIR may be a sweep directory; folders whose names start
with "." are passed over), asks each for its status and
prints one line per run: directory, name, status, update, progress,
agent-steps/s and ETA. A socket that does not answer was left by a job that
no longer runs (killed): it is shown as "not running (stale socket)", and a
new run in that directory replaces it.

options:
  --json        one JSON line per run: {"dir":..., "running":..., "status": <the status reply>}
                (a sweep's trial also has "sweep": the sweep directory)
  --timeout S   seconds to wait for each job's reply (default 5)
  --help        this text
]],
}

local out, usage_error = cmdline.out, cmdline.usage_error

-- Run directories under dir (and dir itself) with a control socket, and the
-- trials' run directories of a sweep directory (one with a sweep.json: dir,
-- or one under it); sweeps[d] = the sweep directory of trial directory d.
local function candidates(dir)
  local uv, control = require("luv"), require("moonrl.control.client")
  local walked = require("moonrl.run.dir").walk({ dir }, { depth = 1, links = true,
    is_run = function(d) return uv.fs_lstat(control.socket_path(d)) ~= nil end })
  local found, sweeps = {}, {}
  for _, f in ipairs(walked) do found[#found + 1] = f.dir sweeps[f.dir] = f.sweep end
  -- sorted by directory: a sweep's trials together, after the sweep's name
  table.sort(found)
  return found, sweeps
end

local thousands = require("moonrl.number").thousands

function ps.run(argv)
  local uv = require("luv")
  local control, json = require("moonrl.control.client"), require("moonrl.formats.json")
  local o, e = cmdline.parse("ps", argv, { json = { "flag" }, timeout = { "value", "seconds" } }, 1)
  if not o then return usage_error(e) end
  if o.help then return out(ps.help) end
  local timeout = tonumber(o.timeout or 5)
  if not timeout or timeout <= 0 then return usage_error("moonrl ps: --timeout " .. tostring(o.timeout) .. ": expected seconds > 0") end
  local dir = (o.positional[1] or "runs"):gsub("(.)/+$", "%1")
  local st = uv.fs_stat(dir)
  if not st or st.type ~= "directory" then
    if o.positional[1] then return usage_error("moonrl ps: " .. dir .. " is not a directory") end
    out("no jobs: there is no runs/ folder here\n")
    return 0
  end

  -- Ask them all at once; each answers or times out on its own.
  local dirs, sweeps = candidates(dir)
  local replies = require("moonrl.runtime.tasks").await("moonrl ps", function(wake)
    control.request_all(dirs, { cmd = "status" }, { timeout_ms = timeout * 1000 }, wake)
  end)

  if o.json then
    for i, d in ipairs(dirs) do
      local r = replies[i]
      local running = r.reply ~= nil and r.reply.ok == true
      out(json.encode({ dir = d, sweep = sweeps[d], running = running, status = r.reply or json.null,
        error = (not running) and control.explain(control.socket_path(d), r.err or (r.reply and r.reply.error)) or nil }), "\n")
    end
    return 0
  end
  if #dirs == 0 then
    out("no jobs running under ", dir, "\n")
    return 0
  end
  local rows = { { "DIR", "NAME", "STATUS", "UPDATE", "PROGRESS", "SPS", "ETA" } }
  local eta = require("moonrl.run.sinks.console").eta_text
  local shown_sweep = {}
  for i, d in ipairs(dirs) do
    local r = replies[i].reply
    local sw = sweeps[d]
    if sw and not shown_sweep[sw] then   -- a sweep's line, its trials indented under it
      shown_sweep[sw] = true
      local n = 0
      for _, x in ipairs(dirs) do if sweeps[x] == sw then n = n + 1 end end
      rows[#rows + 1] = { sw, "(sweep)", n .. " trial(s) here", "", "", "", "" }
    end
    if sw then d = "  " .. d end
    if r and r.ok then
      rows[#rows + 1] = { d, tostring(r.name), tostring(r.status),
        thousands(r.update) .. (r.total_updates and ("/" .. thousands(r.total_updates)) or ""),
        string.format("%.1f%%", 100 * (tonumber(r.progress) or 0)), thousands(r.sps),
        r.status == "paused" and "paused" or type(r.eta_seconds) == "number" and eta(r.eta_seconds) or "-" }
    else
      local why = tostring(replies[i].err or (r and r.error) or "")
      local what = why:find("^refusing the control ") and ("untrusted: " .. why)
        or why:find("ECONNREFUSED", 1, true) and "not running (stale socket)"
        or why:find("ENOENT", 1, true) and "not running (ended)"
        or ("not answering (" .. why .. ")")
      rows[#rows + 1] = { d, "-", what, "-", "-", "-", "-" }
    end
  end
  local width = {}
  for _, row in ipairs(rows) do
    for c, cell in ipairs(row) do width[c] = math.max(width[c] or 0, #cell) end
  end
  for _, row in ipairs(rows) do
    local cells = {}
    for c, cell in ipairs(row) do
      local pad = string.rep(" ", width[c] - #cell)
      cells[c] = (c >= 4 and c <= 6) and (pad .. cell) or (cell .. pad)   -- numbers to the right
    end
    out((table.concat(cells, "  "):gsub("%s+$", "")), "\n")
  end
  return 0
end

return ps

-- `moonrl dashboard [DIR ...]`: the live dashboard (moonrl.dashboard) until
-- a stop signal.

local cmdline = require("moonrl.cli.cmdline")

local cmd = {
  name = "dashboard",
  order = 67,
  usage = "dashboard [DIR ...]",
  summary = "a live dashboard in the browser of the runs and sweeps under DIR (default .)",
  help = [[
usage: moonrl dashboard [DIR ...] [options]

Serves a web page, from this process's own loop, of every run and sweep under
the directories given (default: the current directory; walked as moonrl ps
walks, 3 levels down and into sweeps): each run's curves growing as it
trains, with its live changes as markers; its config, change log, alerts and
evaluation tables; a sweep's trials, ASHA rungs, PBT lineage and its best
result within each budget; and the controls (pause, resume,
checkpoint, stop, set a hot key), sent through the run's control socket as
moonrl ctl sends them (source "dashboard"). It only reads the files the runs
write: training never waits on it.

Private by default: it listens on 127.0.0.1 only, and every request needs
the token in the URL it prints (also written, mode 0600, to the token file).
From another machine: ssh -L 8080:127.0.0.1:PORT HOST, then open
http://localhost:8080/?token=... there (docs/dashboard.md).

options:
  --port N          the port (default 0: any free one; the URL says which)
  --host ADDR       listen on ADDR instead of 127.0.0.1 (a warning says why not to)
  --token-file F    where the token is written: a new file, created mode 0600 and removed
                    at exit (default DIR/.dashboard-token, first DIR; where a running
                    dashboard holds that one, DIR/.dashboard-token.PID)
  --help            this text

Ctrl-C (or SIGTERM) stops it; the runs go on. A run or a sweep can serve its
own while it goes: dashboard = true (moonrl train --set dashboard=true).
]],
}

local out, usage_error = cmdline.out, cmdline.usage_error

function cmd.run(argv)
  local o, e = cmdline.parse("dashboard", argv, {
    port = { "value", "N" }, host = { "value", "ADDR" }, ["token-file"] = { "value", "F" },
  }, math.huge)
  if not o then return usage_error(e) end
  if o.help then return out(cmd.help) end
  local port = 0
  if o.port then
    port = tonumber(o.port)
    if not port or port ~= math.floor(port) or port < 0 or port > 65535 then
      return usage_error("moonrl dashboard: --port " .. tostring(o.port) .. ": expected a port number from 0 to 65535")
    end
  end
  local dirs = {}
  for _, d in ipairs(o.positional) do dirs[#dirs + 1] = d end
  local uv = require("luv")
  for _, d in ipairs(dirs) do
    local st = uv.fs_stat(d)
    if not st or st.type ~= "directory" then
      return usage_error("moonrl dashboard: " .. d .. " is not a directory (give directories that hold runs)")
    end
  end
  local dash, err, kind = require("moonrl.dashboard").serve({
    dirs = dirs, port = port, host = o.host, token_file = o["token-file"],
  })
  if kind == "exists" then
    return usage_error("moonrl dashboard: --token-file " .. o["token-file"] .. ": " .. err)
  end
  if not dash then
    cmdline.err("moonrl dashboard: ", err, "\n")
    return 1
  end
  -- tracked before the URL is printed: a stop signal from whoever read the URL
  -- closes the dashboard (and removes its token file), never exits around it
  local shutdown = require("moonrl.runtime.shutdown")
  dash.stop_note = "closing the dashboard (the runs it shows go on)"   -- what a stop signal says (runtime.signals)
  shutdown.track(dash, { note = function() end })
  out("moonrl dashboard: serving ", table.concat(#dirs > 0 and dirs or { "." }, ", "), "\n")
  out("  open ", dash.url, "\n")
  out("  (the token is also in ", dash.token_file, ", readable by you only; Ctrl-C stops the dashboard)\n")
  io.stdout:flush()
  require("moonrl.runtime.tasks").await("moonrl dashboard", function(wake) dash:on_close(wake) end)
  shutdown.untrack(dash)
  return 0
end

return cmd

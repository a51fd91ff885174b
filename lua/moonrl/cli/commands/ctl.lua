-- `moonrl ctl RUN_DIR ...`: talk to a running job through its control socket
-- (moonrl.control.client; the protocol is docs/control.md).

local cmdline = require("moonrl.cli.cmdline")

local ctl = {
  name = "ctl",
  order = 60,
  usage = "ctl RUN_DIR <command> [args]",
  summary = "status, get, set, pause, resume, checkpoint, adopt, stop a running job",
  help = [[
usage: moonrl ctl RUN_DIR <command> [args] [options]

Talks to the job training in RUN_DIR through its control socket
(RUN_DIR/control/control.sock, reachable by its owner only).

commands:
  status                      progress, agent-steps/s, ETA, the latest metrics, every hot value
  get KEY                     a config value in force, e.g. get ppo.lr
  set KEY=VALUE [KEY=VALUE...]  change hot keys (all or none, from the same update);
                              values as --set reads them: 1e-4, true, "text", linear(1e-3, 1e-4)
  pause | resume              at the end of the update in progress; waits until then
  pause --at-steps N[,N...]   at the end of the first update that reaches each of those
                              agent-step counts (replacing marks set before); returns at once
  checkpoint                  write a checkpoint now; prints its path once written
  adopt CHECKPOINT            take that checkpoint's weights, Adam moments and PopArt (a run of
                              the same network) from the next update; the job keeps its own
                              environments, progress and hot keys (population-based training)
  stop                        stop with a final checkpoint; waits until the job has ended

options:
  --json              print the reply as the JSON line the job sent
  --no-checkpoint     stop: without the final checkpoint
  --no-wait           stop: return once the job has been told
  --timeout S         seconds to wait for a reply (default 30; pause, resume, checkpoint
                      and stop wait for the job without a limit unless given one)
  --help              this text

Exit status: 0 done, 1 the job refused or cannot be reached, 2 a bad command line.
]],
}

local out, err = cmdline.out, cmdline.err

-- What the command line or the job sent is echoed with bytes that are not
-- UTF-8, and control characters, as \xNN.
local function printable(s) return require("moonrl.util").escape_bytes(s, true) end
local function usage_error(msg) return cmdline.usage_error(printable(msg)) end

local COMMANDS = { status = 0, get = 1, set = math.huge, pause = 0, resume = 0, checkpoint = 0, adopt = 1, stop = 0 }
local NAMES = { "status", "get", "set", "pause", "resume", "checkpoint", "adopt", "stop" }

local function request(path, req, timeout_ms)
  local control = require("moonrl.control.client")
  return require("moonrl.runtime.tasks").await("moonrl ctl", function(wake)
    control.request(path, req, { timeout_ms = timeout_ms }, wake)
  end)
end

local function fmt_num(x, digits)
  if type(x) ~= "number" then return "-" end
  return require("moonrl.util").fmt_number(tonumber(string.format("%." .. (digits or 4) .. "g", x)))
end

local thousands = require("moonrl.number").thousands

local function value_text(v)
  local json = require("moonrl.formats.json")
  if type(v) == "table" and v ~= json.null then
    local s = require("moonrl.schedule").to_lua(v)
    if s then return s end
    return json.encode(v)
  end
  if v == json.null then return "nil" end
  return require("moonrl.util").fmt_value(v, 200)
end

local function print_status(r)
  local eta = require("moonrl.run.sinks.console").eta_text
  out(string.format("%s (%s): %s, update %s%s, %s%% done, %s agent-steps, %s agent-steps/s, ETA %s\n",
    tostring(r.dir), tostring(r.name), tostring(r.status), thousands(r.update),
    r.total_updates and ("/" .. thousands(r.total_updates)) or "",
    string.format("%.1f", 100 * (tonumber(r.progress) or 0)), thousands(r.agent_steps), thousands(r.sps),
    r.status == "paused" and "paused" or type(r.eta_seconds) == "number" and eta(r.eta_seconds) or "-"))
  if r.describe then
    out(table.concat(require("moonrl.util").engine_lines(tostring(r.describe), "  engine: ", "    "), "\n"), "\n")
  end
  if r.last_checkpoint then out("  last checkpoint: ", tostring(r.last_checkpoint), "\n") end
  local m = r.metrics
  if type(m) == "table" and m.update then
    out(string.format("  last update: return %s, efficiency %s%%, entropy %s, policy loss %s, value loss %s, lr %s\n",
      fmt_num(m.episode_return_mean), fmt_num(100 * (tonumber(m.efficiency) or 0)), fmt_num(m.entropy),
      fmt_num(m.policy_loss), fmt_num(m.value_loss), fmt_num(m.lr)))
  end
  local keys = {}
  for k in pairs(r.hot or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  out("  hot values:\n")
  for _, k in ipairs(keys) do out("    ", k, " = ", value_text(r.hot[k]), "\n") end
end

function ctl.run(argv)
  local o, e = cmdline.parse("ctl", argv, {
    json = { "flag" }, ["no-checkpoint"] = { "flag" }, ["no-wait"] = { "flag" },
    timeout = { "value", "seconds" }, ["at-steps"] = { "value", "agent-step counts, N[,N...]" },
  }, math.huge)
  if not o then return usage_error(e) end
  if o.help then return out(ctl.help) end
  local dir, cmd = o.positional[1], o.positional[2]
  if not dir then return usage_error("moonrl ctl: missing RUN_DIR: moonrl ctl RUN_DIR <command> (moonrl ctl --help)") end
  if not cmd then
    return usage_error("moonrl ctl: missing the command after " .. dir .. ": accepted " .. table.concat(NAMES, ", "))
  end
  local nargs = COMMANDS[cmd]
  if not nargs then
    local near = require("moonrl.util").closest(cmd, NAMES)
    return usage_error("moonrl ctl: unknown command '" .. cmd .. "': accepted " .. table.concat(NAMES, ", ") ..
      (near and (" - did you mean '" .. near .. "'?") or ""))
  end
  local args = {}
  for i = 3, #o.positional do args[#args + 1] = o.positional[i] end
  if #args > nargs then
    return usage_error("moonrl ctl " .. cmd .. ": unexpected argument '" .. args[nargs + 1] .. "'")
  end
  if o["at-steps"] and cmd ~= "pause" then
    return usage_error("moonrl ctl " .. cmd .. ": --at-steps is an option of pause (moonrl ctl " .. dir .. " pause --at-steps N)")
  end
  local waits = { pause = not o["at-steps"], resume = true, checkpoint = true, adopt = true, stop = not o["no-wait"] }
  local timeout = waits[cmd] and 0 or 30
  if o.timeout then
    local t = tonumber(o.timeout)
    if not t or t < 0 then return usage_error("moonrl ctl: --timeout " .. o.timeout .. ": expected seconds >= 0") end
    timeout = t
  end

  local req = { cmd = cmd }
  if cmd == "get" then
    if not args[1] then return usage_error("moonrl ctl get: missing the key, e.g. moonrl ctl " .. dir .. " get ppo.lr") end
    req.key = args[1]
  elseif cmd == "set" then
    if #args == 0 then
      return usage_error("moonrl ctl set: missing KEY=VALUE, e.g. moonrl ctl " .. dir .. " set ppo.lr=1e-4")
    end
    local config = require("moonrl.config")
    req.values = {}
    for _, a in ipairs(args) do
      local k, v = config.parse_set(a)
      if not k then return usage_error("moonrl ctl set: " .. tostring(v):gsub("^%-%-set ", "")) end
      if type(v) == "function" then
        return usage_error("moonrl ctl set: " .. k .. ": a Lua function cannot travel over the socket (set it from the script)")
      end
      req.values[k] = v
    end
  elseif cmd == "adopt" then
    if not args[1] then return usage_error("moonrl ctl adopt: missing the checkpoint, e.g. moonrl ctl " .. dir ..
      " adopt runs/other/checkpoints/update_0000100.mrck") end
    local uv = require("luv")
    local st = uv.fs_stat(args[1])
    if not st then return usage_error("moonrl ctl adopt: " .. args[1] .. ": no such checkpoint file") end
    if st.type ~= "file" then   -- what it is: a directory, a FIFO, a device
      return usage_error("moonrl ctl adopt: " .. args[1] .. " " ..
        require("moonrl.util").file_kind(st, "a checkpoint file") ..
        "; accepted: a checkpoint file (RUN/checkpoints/update_NNNNNNN.mrck)")
    end
    req.path = args[1]:sub(1, 1) == "/" and args[1] or (uv.cwd() .. "/" .. args[1])   -- the job's working directory may differ
  elseif cmd == "pause" and o["at-steps"] then
    local marks, merr = require("moonrl.run.options").pause_marks_text(o["at-steps"], "--at-steps")
    if not marks then return usage_error("moonrl ctl pause: " .. merr .. ", e.g. --at-steps 50000") end
    req.at_steps = marks
  elseif cmd == "stop" then
    if o["no-checkpoint"] then req.checkpoint = false end
    req.wait = not o["no-wait"]
  end

  local control = require("moonrl.control.client")
  local uv = require("luv")
  local path = dir
  local st = uv.fs_stat(dir)
  if not st then
    err("moonrl ctl: ", dir, ": no such run directory\n")
    return 1
  end
  if st.type == "directory" then path = control.socket_path(dir) end   -- else: the socket itself
  local reply, rerr = request(path, req, math.floor(timeout * 1000))
  if not reply then
    err("moonrl ctl: ", printable(control.explain(path, rerr)), "\n")
    return 1
  end
  if o.json then
    out(require("moonrl.formats.json").encode(reply), "\n")
    return reply.ok and 0 or 1
  end
  if not reply.ok then
    err("moonrl ctl: ", printable(tostring(reply.error)), "\n")
    return 1
  end
  if cmd == "status" then
    print_status(reply)
  elseif cmd == "get" then
    out(reply.key, " = ", reply.text or value_text(reply.value), "\n")
  elseif cmd == "set" then
    local keys = {}
    for k in pairs(reply.values or {}) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do out("set ", k, " = ", value_text(reply.values[k]), "\n") end
  elseif cmd == "pause" and req.at_steps then
    local marks = {}
    for i, n in ipairs(reply.at_steps or {}) do marks[i] = string.format("%.0f", n) end
    out(#marks > 0 and ("pauses at " .. table.concat(marks, ", ") .. " agent-steps (now " ..
      string.format("%.0f", reply.agent_steps or 0) .. ", update " .. tostring(reply.update) .. ")")
      or "no mark ahead: every one given is passed", "\n")
  elseif cmd == "pause" or cmd == "resume" then
    out(cmd == "pause" and "paused" or "running", " after update ", tostring(reply.update), "\n")
  elseif cmd == "checkpoint" then
    out("checkpoint ", tostring(reply.path), "\n")
  elseif cmd == "adopt" then
    out("adopted ", req.path, ": in force from update ", tostring(reply.update), "\n")
  elseif cmd == "stop" then
    if reply.status then
      out(string.format("stopped: %s after %s updates%s\n", tostring(reply.status), tostring(reply.updates),
        reply.checkpoint and (", checkpoint " .. tostring(reply.checkpoint)) or ""))
    else
      out("stopping\n")
    end
  end
  return 0
end

return ctl

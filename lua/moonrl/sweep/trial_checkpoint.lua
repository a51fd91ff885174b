-- moonrl.sweep.trial_checkpoint - a running trial's weights, taken without
-- stopping it: copied (PBT's exploit) or evaluated (PBT's decisions and
-- ASHA's rungs when the metric is "eval.<key>"). Through the trial's control
-- socket, as `moonrl ctl checkpoint` would; from a coroutine
-- (moonrl.runtime.tasks), since both wait on the trial and on a child process.
--
--   trial_checkpoint.copy(t, dest) -> copy's path, checkpoint's path | nil, err
--       t writes a checkpoint, copied to dest(its path): the trial's own
--       checkpoints rotate (log.checkpoint_keep) while the copy is used
--   trial_checkpoint.evaluate(t, key, out_of) -> value, checkpoint's path | nil, err
--       t writes a checkpoint, copied to out_of(its path) .. "/checkpoint.mrck";
--       `moonrl eval` evaluates the copy in a child process (t's eval.*
--       settings: num_envs, steps, runs, seed; no bootstrap; its files in that
--       folder) and the value is eval.json's point[key]; the copy is removed
--       (the figures stay: eval.json names the checkpoint by its path in t's run)

local uv = require("luv")
local util = require("moonrl.util")
local tasks = require("moonrl.runtime.tasks")

local trial_checkpoint = {}

function trial_checkpoint.copy(t, dest)
  local got, err = require("moonrl.control.client").ask(t.dir, { cmd = "checkpoint" })
  if not got then return nil, err end
  local to = dest(tostring(got.path))
  util.mkdir_p(to:match("^(.*)/[^/]+$"))
  local ok, cerr = uv.fs_copyfile(got.path, to)
  if not ok then return nil, "cannot copy " .. tostring(got.path) .. ": " .. tostring(cerr) end
  return to, got.path
end

function trial_checkpoint.evaluate(t, key, out_of)
  local out
  local copy, checkpoint = trial_checkpoint.copy(t, function(path)
    out = out_of(path)
    return out .. "/checkpoint.mrck"
  end)
  if not copy then return nil, checkpoint end
  local e = t.cfg.eval
  local argv = { "eval", copy, "--out", out, "--boot", "0", "--threads", tostring(t.cfg.threads or 1),
    "--envs", tostring(e.num_envs), "--steps", tostring(e.steps), "--runs", tostring(e.runs), "--seed", tostring(e.seed) }
  local exit = tasks.await("checkpoint eval", function(wake)
    local job, jerr = require("moonrl.sweep.local_executor").new():start({ argv = argv, output = out .. "/output.log",
      on_exit = wake })
    if not job then wake({ code = -1, signal = 0, error = jerr }) end
  end)
  uv.fs_unlink(copy)
  local value, err
  if exit.code == 0 and exit.signal == 0 then value, err = require("moonrl.eval.files").point(out, key) end
  if value == nil then
    return nil, "moonrl eval exited " .. tostring(exit.code) .. " (" .. (exit.error or (out .. "/output.log")) .. ")" ..
      (err and (": " .. tostring(err)) or "")
  end
  return value, checkpoint
end

return trial_checkpoint

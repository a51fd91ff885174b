-- moonrl.run.dir - whether a directory holds a run, and what a new run does
-- about it: a directory that holds one is never reused silently (refused, or
-- with --force / {force = true} moved aside, never deleted).
--
--   rundir.occupied(dir) -> {names}          the run files found in dir ({} when none)
--   rundir.occupied_message(dir, found, cli) -> string   the refusal, naming --resume,
--                                            another directory and --force (cli) or their
--                                            moonrl.train forms
--   rundir.move_aside(dir) -> to | nil, err  dir moved to dir.old-<YYYYmmdd-HHMMSS>[-N]
--   rundir.event_files(dir) -> {paths}      its TensorBoard event files, sorted
--   rundir.new(cfg, force, notes) -> dir | nil, err   the directory of a new run of cfg

local uv = require("luv")

local rundir = {}

-- What in a directory says that a run lives there.
local RUN_FILES = { "config.lua", "config.now.lua", "train.log", "metrics.jsonl", "metrics.csv", "changes.lua" }

-- The run files in dir ({} when none: no directory, an empty one, or other files).
function rundir.occupied(dir)
  local found = {}
  if not uv.fs_stat(dir) then return found end
  for _, name in ipairs(RUN_FILES) do
    if uv.fs_stat(dir .. "/" .. name) then found[#found + 1] = name end
  end
  local req = uv.fs_scandir(dir .. "/checkpoints")
  if req and uv.fs_scandir_next(req) then found[#found + 1] = "checkpoints/" end
  local events = rundir.event_files(dir)
  if events[1] then found[#found + 1] = events[1]:match("[^/]+$") end
  return found
end

-- The TensorBoard event files in dir, sorted paths ("dir/events.out.tfevents.*";
-- not a write's *.tmp).
function rundir.event_files(dir)
  local out = {}
  local req = uv.fs_scandir(dir)
  while req do
    local name = uv.fs_scandir_next(req)
    if not name then break end
    if name:match("^events%.out%.tfevents%.") and not name:match("%.tmp$") then out[#out + 1] = dir .. "/" .. name end
  end
  table.sort(out)
  return out
end

-- The refusal to start a new run in a directory that holds one.
function rundir.occupied_message(dir, found, cli)
  return dir .. " already holds a run (" .. table.concat(found, ", ") .. "); a new run does not reuse it. " ..
    (cli and ("To continue that run: moonrl train --resume " .. dir .. "; to start a new one: another --dir " ..
      "(or none: runs/<name>-<time>), or --force to move the old run aside to " .. dir .. ".old-<time> (nothing " ..
      "is deleted) and start anew in " .. dir)
     or ("To continue that run: moonrl.train{resume = \"" .. dir .. "\"}; to start a new one: another dir, " ..
      "or moonrl.train(cfg, {force = true}) to move the old run aside to " .. dir .. ".old-<time> (nothing is " ..
      "deleted) and start anew in " .. dir))
end

-- Moves the run in dir aside to dir.old-<YYYYmmdd-HHMMSS>[-N]; returns where.
function rundir.move_aside(dir)
  local base = dir:gsub("/+$", "") .. ".old-" .. os.date("%Y%m%d-%H%M%S")
  local to, n = base, 1
  while uv.fs_stat(to) do
    n = n + 1
    to = base .. "-" .. n
  end
  local lock, lerr = require("moonrl.run.dirlock").take(dir)   -- not from under a process running there
  if not lock then return nil, lerr end
  local ok, err = uv.fs_rename(dir, to)
  lock:release()
  if not ok then return nil, "cannot move the old run " .. dir .. " aside to " .. to .. ": " .. tostring(err) end
  return to
end

-- runs/<name>-<time>, or with -2, -3... when two runs start in the same second.
-- A given dir that holds a run is refused, or with force moved aside (the
-- note saying where is added to notes).
function rundir.new(cfg, force, notes)
  local base = require("moonrl.config").run_dir(cfg)
  if cfg.dir then
    local found = rundir.occupied(base)
    if #found > 0 then
      if not force then return nil, rundir.occupied_message(base, found, false) end
      local to, err = rundir.move_aside(base)
      if not to then return nil, err end
      notes[#notes + 1] = "--force: the run that was in " .. base .. " moved to " .. to .. " (nothing deleted)"
    end
    return base
  end
  local dir, n = base, 1
  while uv.fs_stat(dir) do
    n = n + 1
    dir = base .. "-" .. n
  end
  return dir
end

return rundir

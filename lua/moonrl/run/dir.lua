-- moonrl.run.dir - whether a directory holds a run, and what a new run does
-- about it: a directory that holds one is never reused silently (refused, or
-- with --force / {force = true} moved aside, never deleted). And the readers
-- of run directories that run, sweep, dashboard and `moonrl ps` share:
-- finding them under a folder, following a file a run appends to.
--
--   rundir.occupied(dir) -> {names}          the run files found in dir ({} when none)
--   rundir.occupied_message(dir, found, cli) -> string   the refusal, naming --resume,
--                                            another directory and --force (cli) or their
--                                            moonrl.train forms
--   rundir.move_aside(dir) -> to | nil, err  dir moved to dir.old-<YYYYmmdd-HHMMSS>[-N]
--   rundir.event_files(dir) -> {paths}      its TensorBoard event files, sorted
--   rundir.new(cfg, force, notes) -> dir | nil, err   the directory of a new run of cfg
--   rundir.is_run(dir) -> boolean           a config.lua and a metrics.jsonl or a control/
--                                            folder (regular files and folder, not links)
--   rundir.walk(roots, opts) -> found, sweeps   the run directories under roots: each
--                                            root, its subdirectories down to opts.depth
--                                            levels (default 1), and every sweep directory's
--                                            (one with a sweep.json) trial directories (its
--                                            other folders are not walked into). Names
--                                            starting with "." are passed over; links to
--                                            folders are walked into only with opts.links.
--                                            opts.is_run(dir): whether dir is one (default
--                                            rundir.is_run). found[i] = {dir =, sweep = the
--                                            sweep directory of a trial | nil}, each dir once,
--                                            in walk order (subdirectories sorted);
--                                            sweeps[i] = {dir =, trials = {dirs}}
--   rundir.subdirs(d[, links]) -> {paths}  d's folders (and links, with links), sorted,
--                                            without those whose names start with "."
--   rundir.tail(path) -> reader              reader:read() -> the complete JSON lines appended
--                                            to the file since the last read (decoded);
--                                            reader.reset = true when the file was cut or
--                                            replaced since (a resumed run trims its own)

local uv = require("luv")
local json = require("moonrl.formats.json")

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

-- ------------------------------------------------------------ reading

local function lstat_type(p) local st = uv.fs_lstat(p) return st and st.type end

function rundir.is_run(dir)
  return lstat_type(dir .. "/config.lua") == "file" and
    (lstat_type(dir .. "/metrics.jsonl") == "file" or lstat_type(dir .. "/control") == "directory")
end

function rundir.subdirs(d, links)
  local out = {}
  local req = uv.fs_scandir(d)
  while req do
    local name, kind = uv.fs_scandir_next(req)
    if not name then break end
    if (kind == "directory" or (links and kind == "link")) and name:sub(1, 1) ~= "." then
      out[#out + 1] = (d == "." and "" or (d .. "/")) .. name
    end
  end
  table.sort(out)
  return out
end

function rundir.walk(roots, opts)
  opts = opts or {}
  local depth_max, links, is_run = opts.depth or 1, opts.links, opts.is_run or rundir.is_run
  local found, sweeps, seen = {}, {}, {}
  local function add(dir, sweep)
    if seen[dir] then return end
    seen[dir] = true
    found[#found + 1] = { dir = dir, sweep = sweep }
  end
  local function is_sweep(dir)
    local st = (links and uv.fs_stat or uv.fs_lstat)(dir .. "/sweep.json")
    return st and st.type == "file"
  end
  local function visit(dir, depth)
    if is_run(dir) then add(dir) end
    if is_sweep(dir) then
      local sw = { dir = dir, trials = {} }
      sweeps[#sweeps + 1] = sw
      for _, t in ipairs(rundir.subdirs(dir, links)) do
        if is_run(t) then add(t, dir) sw.trials[#sw.trials + 1] = t end
      end
    elseif depth < depth_max then
      for _, sub in ipairs(rundir.subdirs(dir, links)) do visit(sub, depth + 1) end
    end
  end
  for _, r in ipairs(roots) do visit(r, 0) end
  return found, sweeps
end

local Tail = {}
Tail.__index = Tail

function rundir.tail(path)
  return setmetatable({ path = path, offset = 0, partial = "" }, Tail)
end

function Tail:read()
  local out = {}
  self.reset = false
  local st = uv.fs_stat(self.path)
  if not st then return out end
  if (self.ino and st.ino ~= self.ino) or st.size < self.offset then
    self.offset, self.partial, self.reset = 0, "", true
  end
  self.ino = st.ino
  if st.size == self.offset then return out end
  local f = io.open(self.path, "rb")
  if not f then return out end
  f:seek("set", self.offset)
  local data = f:read(st.size - self.offset) or ""
  f:close()
  self.offset = self.offset + #data
  data = self.partial .. data
  local last = 1
  for line, pos in data:gmatch("([^\n]*)\n()") do
    last = pos
    local o = json.decode(line)
    if type(o) == "table" then out[#out + 1] = o end
  end
  self.partial = data:sub(last)
  return out
end

return rundir

-- moonrl.run.resume - continuing a run in its own directory from its newest
-- valid checkpoint (`moonrl train --resume RUN_DIR`, moonrl.train{resume =
-- RUN_DIR}), and finding a run's checkpoint for `moonrl eval RUN_DIR`.
--
-- What a resumed run is made of:
--   the update      the one the checkpoint holds (engine.checkpoint_info),
--                   not its file name's; a finished run (total_steps reached) is
--                   plan.finished, a message: the CLI says it and trains nothing
--   the checkpoint  RUN_DIR/checkpoints/update_NNNNNNN.mrck with the highest
--                   N that the engine reads back whole (engine.checkpoint_info,
--                   one read of the file, checks its length and every checksum,
--                   and gives its config, progress and ranks); a damaged newer
--                   one is reported with the engine's message and skipped. The
--                   trainer thread's load is the file's only other read.
--   the config      RUN_DIR/config.now.lua (the config in force after changes,
--                   written by run:set) or else RUN_DIR/config.lua (the config
--                   it started with); keys edited in it since moonrl wrote it
--                   (against .config.as-written.lua) are applied with a note
--                   when hot, refused by name otherwise; checked against the
--                   checkpoint's own mr_config by the engine's one check
--                   (engine.config_conflicts); changes asked for on top of it (a config file
--                   or table, --set, hooks) apply when the key is hot or only
--                   concerns output (log.*, eval.*, alerts.*); any other
--                   change is refused with the key: it needs a new run.
--   the files       metrics rows after the checkpoint's update are dropped
--                   (moonrl.run.trim_metrics) and the sinks append; train.log goes on.
-- The trainer thread loads the checkpoint before its first update and runs
-- no warm-up (src/host/warmup.c): on the cpu the resumed run is bit
-- for bit the uninterrupted one.
--
-- What it is not: a way to change a run's shapes or algorithm (that is a new
-- run, `moonrl train`), or to continue from a checkpoint outside a run
-- directory (evaluate it: `moonrl eval FILE`).
--
-- Public functions
--   resume.is_checkpoint(path) -> true when the file starts as a moonrl checkpoint (engine.is_checkpoint)
--   resume.run_dir_of(checkpoint_path) -> the run directory holding it, or nil
--   resume.checkpoints(run_dir) -> {{path=, update=}, ...} newest first
--   resume.newest(run_dir) -> {path=, update=, config=, damaged={{path=, error=}}, older={paths},
--                               ranks= (that wrote it), steps= (the run's agent-steps at it)}
--                             | nil, err
--   resume.prepare(run_dir, changes) -> plan | nil, err
--       changes: file = path | table (config keys to change), sets = {"k=v"},
--                hardware =, level =, hooks = {name = fn}
--       plan: dir, cfg (the config to run), notes (one line per applied change
--             and skipped checkpoint), checkpoint, update, damaged, kept, batch
--             (agent-steps per update, every rank's), steps (the checkpoint's
--             agent-steps), steps_base (steps - update x batch: not 0 after
--             a change of the count of ranks)
--   resume.hint(path) -> a line saying how to resume or evaluate a checkpoint or run

local uv = require("luv")
local config = require("moonrl.config")
local schema = require("moonrl.config.schema")
local util = require("moonrl.util")

local resume = {}

-- The run's config in force after its last change (written next to config.lua).
resume.NOW_FILE = "config.now.lua"
-- The copy of the config file as moonrl last wrote it: what an edit is told from.
resume.WRITTEN_FILE = ".config.as-written.lua"

-- Cold keys that only concern what is written or checked, not the training:
-- they may change on resume.
local OUTPUT_SECTIONS = { log = true, eval = true, alerts = true, hooks = true }

-- The engine's hot schedules (ppo.lr, ppo.clip, ppo.ent_coef): stretched when
-- total_steps changes.
local HOT_SCHEDULES = {}
for _, key in ipairs(schema.hot_keys("engine")) do
  if schema.by_key[key].type == "schedule" then HOT_SCHEDULES[#HOT_SCHEDULES + 1] = key end
end

local function join(dir, name)
  if dir:sub(-1) == "/" then return dir .. name end
  return dir .. "/" .. name
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

function resume.is_checkpoint(path)
  return require("moonrl.engine").is_checkpoint(path)
end

-- RUN/checkpoints/x.mrck -> RUN, when RUN/config.lua is there.
function resume.run_dir_of(path)
  local ckdir = dirname(path)
  if ckdir:match("[^/]+$") ~= "checkpoints" then return nil end
  local run = dirname(ckdir)
  if uv.fs_stat(join(run, "config.lua")) then return run end
  return nil
end

function resume.checkpoints(run_dir)
  local dir = join(run_dir, "checkpoints")
  local out = {}
  local req = uv.fs_scandir(dir)
  while req do
    local name = uv.fs_scandir_next(req)
    if not name then break end
    local n = name:match("^update_(%d+)%.mrck$")
    if n then out[#out + 1] = { path = join(dir, name), update = tonumber(n) } end
  end
  table.sort(out, function(a, b) return a.update > b.update end)
  return out
end

function resume.newest(run_dir)
  local st = uv.fs_stat(run_dir)
  if not st then return nil, "run directory '" .. run_dir .. "' not found" end
  if st.type ~= "directory" then
    if resume.is_checkpoint(run_dir) then
      local run = resume.run_dir_of(run_dir)
      return nil, "'" .. run_dir .. "' is a checkpoint file; resume takes its run directory" ..
        (run and (" (" .. run .. ")") or "")
    end
    return nil, "'" .. run_dir .. "' is not a directory: resume takes a run directory (runs/<name>-<time>)"
  end
  local list = resume.checkpoints(run_dir)
  if #list == 0 and uv.fs_stat(join(run_dir, "sweep.json")) then
    -- a sweep's directory: the sweep resumes by running its script again
    local okj, info = pcall(require("moonrl.formats.json").decode, util.read_file(join(run_dir, "sweep.json")) or "")
    local command = okj and type(info) == "table" and type(info.command) == "string" and info.command or nil
    return nil, "'" .. run_dir .. "' is a sweep's directory (it holds sweep.json), not a run's: run the sweep " ..
      "again to resume it" .. (command and (" (" .. command .. ")") or
      " (moonrl run SCRIPT.lua, or moonrl sweep EXPERIMENT with its options)") ..
      "; finished trials are read back and interrupted ones resume from their checkpoints. One trial alone: " ..
      "moonrl train --resume " .. run_dir:gsub("/+$", "") .. "/trial-NNN"
  end
  if #list == 0 then
    return nil, "no checkpoint in " .. join(run_dir, "checkpoints") ..
      " (update_NNNNNNN.mrck): nothing to resume; start the run again with moonrl train"
  end
  local damaged = {}
  local engine = require("moonrl.engine")
  for i, ck in ipairs(list) do
    local info, err = engine.checkpoint_info(ck.path)   -- the one read of the file here
    if info then
      local c = info.config
      local older = {}
      for j = #list, i, -1 do older[#older + 1] = list[j].path end   -- oldest first, this one last
      -- the run's agent-steps: what the file says (ranks, or a resume on
      -- another count of them), else updates x every rank's batch
      local steps = info.run_steps or
        info.updates * tonumber(c.env.num_envs) * tonumber(c.ppo.rollout_steps) * info.ranks
      return { path = ck.path, update = info.updates, named = ck.update, agent_steps = info.agent_steps,
               hot = info.hot, config = c, damaged = damaged, older = older, ranks = info.ranks, steps = steps }
    end
    damaged[#damaged + 1] = { path = ck.path, error = err }
  end
  local lines = { "no valid checkpoint in " .. join(run_dir, "checkpoints") .. ":" }
  for _, d in ipairs(damaged) do lines[#lines + 1] = "  " .. d.error end
  return nil, table.concat(lines, "\n")
end

-- ---------------------------------------------------------------- config

-- Every schema key a (partial) config table sets, as {key, value} in schema order.
local function leaves(t)
  local out = {}
  for _, e in ipairs(schema.keys) do
    local holder = e.section and t[e.section] or (not e.section and t) or nil
    if type(holder) == "table" and holder[e.name] ~= nil then out[#out + 1] = { e.key, holder[e.name] } end
  end
  if type(t.warmup) == "function" then out[#out + 1] = { "warmup", t.warmup } end
  return out
end

local function same(e, a, b)
  if e and e.type == "schedule" then
    if type(a) == "function" or type(b) == "function" then return a == b end
    local na, nb = require("moonrl.schedule").normalize(a), require("moonrl.schedule").normalize(b)
    return util.deep_equal(na, nb)
  end
  return util.deep_equal(a, b)
end

local function changeable(key)
  local e = schema.by_key[key]
  if e and e.hot then return true end
  return OUTPUT_SECTIONS[key:match("^([^.]+)%.") or ""] == true
end

-- The saved config with the asked-for changes; nil, err naming every refused key.
local function apply_changes(cfg, changes, notes, saved_missing)
  local errs, layer = {}, {}
  local file = changes.file
  if type(file) == "string" then
    local t, err = config.load_file(file)
    if not t then return nil, err end
    file = t
  end
  if file ~= nil then
    if type(file) ~= "table" then return nil, "expected a config table or file of changes, got " .. util.describe(file) end
    local ok, err = config.validate(file, { partial = true })
    if not ok then return nil, err end
    for _, kv in ipairs(leaves(file)) do layer[#layer + 1] = kv end
  end
  for _, name in ipairs({ "hardware", "level" }) do
    if changes[name] ~= nil then layer[#layer + 1] = { name, changes[name] } end
  end
  for _, s in ipairs(changes.sets or {}) do
    local k, v = config.parse_set(s)
    if not k then return nil, v end
    if not schema.by_key[k] then return nil, require("moonrl.config.validate").unknown_key(k) end
    layer[#layer + 1] = { k, v }
  end
  for name, fn in pairs(changes.hooks or {}) do layer[#layer + 1] = { "hooks." .. tostring(name), fn } end

  local changed = {}
  for _, kv in ipairs(layer) do
    local key, v = kv[1], kv[2]
    local e = schema.by_key[key]
    if key == "warmup" then
      cfg.warmup = v                                   -- a warm-up function config.lua could not keep
    elseif saved_missing[key] then
      local ok, err = config.set(cfg, key, v)        -- given back: a function config.lua could not keep
      if not ok then errs[#errs + 1] = err end
      saved_missing[key] = nil
    elseif not same(e, config.get(cfg, key), v) then
      if changeable(key) then
        local old = config.get(cfg, key)
        local ok, err = config.set(cfg, key, v)
        if ok then
          if not key:match("^hooks%.") then   -- hooks are given again, not changed
            changed[#changed + 1] = key .. " = " .. util.fmt_value(v) .. " (was " .. util.fmt_value(old) .. ")"
          end
        else
          errs[#errs + 1] = err
        end
      else
        errs[#errs + 1] = key .. " = " .. util.fmt_value(v) .. ": the run has " .. util.fmt_value(config.get(cfg, key)) ..
          " and " .. key .. " is not hot: changing it needs a new run (moonrl train)"
      end
    end
  end
  for key in pairs(saved_missing) do
    errs[#errs + 1] = key .. " was a Lua function in this run and config.lua could not keep it: " ..
      "give it again (moonrl.train{resume = dir, ...} or a config file setting it)"
  end
  if #errs > 0 then
    table.sort(errs)
    return nil, table.concat(errs, "\n")
  end
  if #changed > 0 then notes[#notes + 1] = "changed on resume: " .. table.concat(changed, ", ") end
  return cfg
end

-- Keys edited in the run's config file since moonrl wrote it (against the
-- copy it keeps, resume.WRITTEN_FILE): hot ones as "key = new (the run had
-- old)", the others as refusals naming the key.
local function edits(cfg, ref, name)
  local hot, cold = {}, {}
  for _, e in ipairs(schema.keys) do
    if e.key ~= "dir" then
      local a, b = config.get(cfg, e.key), config.get(ref, e.key)
      local differ
      if type(a) == "function" and type(b) == "function" then   -- loaded twice: the same by their source
        local ser = require("moonrl.config.serialize").value
        differ = ser(a) ~= ser(b)
      else
        differ = not same(e, a, b)
      end
      if differ then
        local shown = require("moonrl.run.changes").display
        if changeable(e.key) then
          hot[#hot + 1] = e.key .. " = " .. shown(a) .. " (the run had " .. shown(b) .. ")"
        else
          cold[#cold + 1] = name .. ": " .. e.key .. " = " .. shown(a) .. ", the run has " .. shown(b) ..
            ": " .. e.key .. " is not hot (it shapes the network, the environments or the algorithm), " ..
            "a resume does not change it: put it back, or start a new run with it (moonrl train CONFIG --dir NEW_DIR)"
        end
      end
    end
  end
  return hot, cold
end

-- Schedules stretched on a change of total_steps (the default: no jump).
-- A schedule's progress is updates done / total updates, so a new total
-- would move every schedule to another value at the resume point. Instead,
-- each schedule the resume does not itself change is re-anchored: at the
-- last update trained (a) it keeps the value v0 it had there, and from
-- there it runs to its own end value at the new total. linear, cosine and
-- step get a new `from` (their `to`, gamma and every stay; config.lua keeps
-- the result); a Lua function schedule is evaluated at the old run's
-- progress, mapped linearly from [a, new total] onto [a, old total].
local function stretch_schedules(cfg, before, old_total, a, batch, notes)
  local schedule = require("moonrl.schedule")
  local engine = require("moonrl.engine")
  local function updates(total) return math.max(1, math.ceil(total / batch)) end
  local u_old, u_new = updates(old_total), updates(cfg.total_steps)
  if u_new == u_old or a >= u_new then return true end
  local p_old, q = math.min(a / u_old, 1), a / u_new
  local said = {}
  for _, key in ipairs(HOT_SCHEDULES) do
    local v, was = config.get(cfg, key), before[key]
    local kept = (was == nil and type(v) == "function") or (was ~= nil and same(schema.by_key[key], was, v))
    local fok, fv0 = true, nil
    if kept and type(v) == "function" then fok, fv0 = pcall(v, p_old) end
    if kept and type(v) == "function" and fok and type(fv0) == "number" then
      local f, v0 = v, fv0
      local stretched = function(p)
        return f(p_old + (p - q) * (1 - p_old) / (1 - q))
      end
      config.set(cfg, key, stretched)
      said[#said + 1] = string.format("%s: %.6g at update %d -> its value at progress 1 at total_steps = %s (a Lua function)",
        key, v0, a + 1, util.fmt_number(cfg.total_steps))
    elseif kept and type(v) == "table" and v.kind ~= "constant" then
      local n = schedule.normalize(v)
      local v0 = engine.schedule_value(n, p_old)
      local from = schedule.from_through(n.kind, v0, q, n.to, n.gamma, n.every)
      local e = schema.by_key[key]
      if from and ((e.min and from < e.min) or (e.max and from > e.max) or from ~= from) then
        said[#said + 1] = string.format("%s: %.6g at update %d, not stretched (its from would be %.6g, outside " ..
          "%s .. %s): it follows %s over the new total, so it jumps", key, v0, a + 1, from,
          util.fmt_number(e.min or -math.huge), util.fmt_number(e.max or math.huge), schedule.to_lua(v) or n.kind)
        from = nil
      end
      if from then
        local t = { kind = n.kind, from = from, to = n.to, gamma = v.gamma, every = v.every }
        if n.kind ~= "step" then t.gamma, t.every = nil, nil end
        if n.kind == "step" and v.to == nil then t.to = nil end
        config.set(cfg, key, t)
        said[#said + 1] = string.format("%s: %.6g at update %d -> %.6g at total_steps = %s (now %s(%.6g, %.6g%s))", key,
          v0, a + 1, n.to, util.fmt_number(cfg.total_steps), t.kind, t.from,
          t.kind == "step" and n.gamma or t.to,
          t.kind == "step" and string.format(", %.6g%s", n.every, t.to and string.format(", %.6g", t.to) or "") or "")
      end
    end
  end
  if #said > 0 then
    notes[#notes + 1] = "total_steps changed: each schedule goes on from its value at the last update trained " ..
      "to its end value at the new total (no jump): " .. table.concat(said, ", ")
  end
  return true
end

function resume.prepare(run_dir, changes)
  changes = changes or {}
  if type(run_dir) ~= "string" or run_dir == "" then
    return nil, "resume: expected a run directory, got " .. util.describe(run_dir)
  end
  run_dir = run_dir:gsub("(.)/+$", "%1")
  local ck, cerr = resume.newest(run_dir)
  if not ck then return nil, cerr end
  local cfg_path = join(run_dir, "config.lua")
  local start_st = uv.fs_stat(cfg_path)
  if not start_st then
    return nil, run_dir .. " has no config.lua: not a moonrl run directory (moonrl train writes one)"
  end
  -- After changes while it trained (run:set, ctl set, live tweaks, --set on
  -- a resume) the run's config in force is config.now.lua; config.lua is the
  -- config it started with. An edit of config.lua made after config.now.lua
  -- was written would be passed over: said, not guessed at.
  local now_path = join(run_dir, resume.NOW_FILE)
  local now_st = uv.fs_stat(now_path)
  if now_st then
    local function later(a, b) return a.sec > b.sec or (a.sec == b.sec and a.nsec > b.nsec) end
    if later(start_st.mtime, now_st.mtime) then
      return nil, "cannot resume " .. run_dir .. ": config.lua was edited after " .. resume.NOW_FILE ..
        " was written, and the run goes on from " .. resume.NOW_FILE .. " (the config in force after its " ..
        "last change; config.lua is the config it started with): make the edit in " .. now_path ..
        " (or give it with --set key=value) and put config.lua back"
    end
    cfg_path = now_path
  end
  local cfg, lerr = config.load_file(cfg_path)
  if not cfg then return nil, lerr end
  -- What config.lua could not write: Lua functions (schedules, hooks, a
  -- warm-up function). A schedule must be given again; hooks may be.
  local fh = assert(io.open(cfg_path, "rb"))
  local text = fh:read("*a")
  fh:close()
  local missing, lost_hooks = {}, {}
  local unsaved = {}   -- serialize's comment for a function it could not save (and an older moonrl's)
  for path in text:gmatch("%-%- ([%w_.]+): the function at [^\n]- is not saved") do unsaved[#unsaved + 1] = path end
  for path in text:gmatch("%-%- ([%w_.]+): a function %(not serialisable%)") do unsaved[#unsaved + 1] = path end
  for _, path in ipairs(unsaved) do
    local e = schema.by_key[path]
    if e and e.type == "schedule" then missing[path] = true end
    if path:match("^hooks%.") and not (changes.hooks and changes.hooks[path:sub(7)]) then
      lost_hooks[#lost_hooks + 1] = path
    end
  end
  local notes = {}
  if ck.named ~= ck.update then
    notes[#notes + 1] = ck.path .. " is named update " .. ck.named .. " but holds update " .. ck.update ..
      " (" .. util.fmt_number(ck.agent_steps) .. " agent-steps): resuming from update " .. ck.update ..
      ", what it holds"
  end
  for _, d in ipairs(ck.damaged) do
    notes[#notes + 1] = "skipped damaged checkpoint " .. d.path .. ": " .. d.error
  end
  if #lost_hooks > 0 then
    notes[#notes + 1] = table.concat(lost_hooks, ", ") .. " of the first run (Lua functions) are not in " ..
      "config.lua: not called unless given again"
  end
  -- Keys config.lua lacks (the functions above, a file of an older moonrl)
  -- take their defaults, or what runs did before the key existed (`before`:
  -- ppo.truncation); a missing schedule must come from the changes.
  local function absent(e) if e.before ~= nil then return e.before end return e.default end
  for _, e in ipairs(schema.keys) do
    if e.section and type(cfg[e.section]) ~= "table" then cfg[e.section] = {} end
    local holder = e.section and cfg[e.section] or cfg
    if holder[e.name] == nil and absent(e) ~= nil and not missing[e.key] then
      holder[e.name] = util.deepcopy(absent(e))
    end
  end
  -- keys edited in the file between stop and resume: hot ones applied and
  -- said, others refused
  local edited = {}
  local wt = util.read_file(join(run_dir, resume.WRITTEN_FILE))
  if wt and wt ~= text then
    local ref = config.load_file(join(run_dir, resume.WRITTEN_FILE))
    if ref then
      for _, e in ipairs(schema.keys) do   -- the same defaults as cfg below
        if e.section and type(ref[e.section]) ~= "table" then ref[e.section] = {} end
        local holder = e.section and ref[e.section] or ref
        if holder[e.name] == nil and absent(e) ~= nil then holder[e.name] = util.deepcopy(absent(e)) end
      end
      local cold
      edited, cold = edits(cfg, ref, cfg_path)
      if #cold > 0 then return nil, "cannot resume " .. run_dir .. ":\n" .. table.concat(cold, "\n") end
      if #edited > 0 then
        notes[#notes + 1] = "edited in " .. cfg_path .. " since the run stopped: " .. table.concat(edited, ", ") ..
          "; in force from update " .. (ck.update + 1)
      end
    end
  end
  local n_notes = #notes
  local before, old_total = {}, cfg.total_steps
  for _, key in ipairs(HOT_SCHEDULES) do before[key] = util.deepcopy(config.get(cfg, key)) end
  local ok, err = apply_changes(cfg, changes, notes, missing)
  if not ok then return nil, "cannot resume " .. run_dir .. ":\n" .. err end
  -- Ranks (docs/data-parallel.md): the checkpoint's and this process's. An
  -- update is every rank's agent-steps; a file that does not say its steps
  -- (one rank, never resumed on another count) holds updates x batch.
  local engine = require("moonrl.engine")
  local per_rank = tonumber(ck.config.env.num_envs) * tonumber(ck.config.ppo.rollout_steps)
  local ranks = engine.ranks()
  local batch = per_rank * ranks
  local steps = ck.steps
  local steps_base = steps - ck.update * batch
  if ck.ranks ~= ranks then
    notes[#notes + 1] = ck.path .. " was written by " .. ck.ranks .. " rank" .. (ck.ranks == 1 and "" or "s") ..
      " of " .. tonumber(ck.config.env.num_envs) .. " environments, this run has " .. ranks .. ": the weights, " ..
      "optimizer and statistics continue, the environments start afresh from the seed (their state is carried " ..
      "only to as many ranks), and an update is now " .. util.fmt_number(batch) .. " agent-steps (was " ..
      util.fmt_number(per_rank * ck.ranks) .. ")"
  end
  stretch_schedules(cfg, before, old_total, math.max(ck.update - 1, 0), batch, notes)
  ok, err = config.validate(cfg)
  if not ok then return nil, cfg_path .. ": " .. err end

  local c, eerr = engine.config(cfg)
  if not c then return nil, cfg_path .. ": " .. eerr end
  local diff, ndiff = engine.config_conflicts(c, ck.config)   -- the engine's one check
  if ndiff > 0 then
    local name = cfg_path:match("[^/]*$")
    return nil, "cannot resume " .. run_dir .. ": " .. name .. " and " .. ck.path .. " disagree on " ..
      diff .. " (" .. name .. " vs the checkpoint): " .. name .. " was edited? These keys " ..
      "are not hot (they shape the network, the environments or the algorithm): a resume refuses to change " ..
      "them; put them back, or start a new run with them (moonrl train CONFIG --dir NEW_DIR)"
  end
  local finished
  if steps >= cfg.total_steps then
    finished = "run " .. run_dir .. " is finished: its checkpoint " .. ck.path .. " is at update " .. ck.update ..
      " (" .. util.fmt_number(steps) .. " agent-steps), total_steps = " .. util.fmt_number(cfg.total_steps) ..
      ": nothing left to train. To train it further: moonrl train --resume " .. run_dir ..
      " --set total_steps=N with N larger than " .. util.fmt_number(steps)
  end
  return {
    dir = run_dir, cfg = cfg, notes = notes, checkpoint = ck.path, update = ck.update,
    damaged = ck.damaged, kept = ck.older, batch = batch, steps = steps, steps_base = steps_base,
    finished = finished,
    changed = #notes > n_notes or #edited > 0 or now_st ~= nil,
  }
end

function resume.hint(path)
  local run = resume.run_dir_of(path)
  if resume.is_checkpoint(path) then
    return "'" .. path .. "' is a checkpoint, not a config file: to continue its run, moonrl train --resume " ..
      (run or "RUN_DIR") .. (run and "" or " (the run directory holding checkpoints/)") ..
      "; to evaluate it, moonrl eval " .. path
  end
  if not (uv.fs_stat(join(path, "checkpoints")) or uv.fs_stat(join(path, "config.lua"))) then
    return "'" .. path .. "' is a directory, not a config file (a Lua file returning a table)"
  end
  return "'" .. path .. "' is a run directory: to continue it, moonrl train --resume " .. path ..
    "; to evaluate it, moonrl eval " .. path
end

return resume

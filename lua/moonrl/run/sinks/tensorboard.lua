-- moonrl.run.sinks.tensorboard - a TensorBoard event file in the run directory.
--
-- File: <run_dir>/events.out.tfevents.<unix time>.<host>. The first record is
-- the file_version event; each update then adds one scalar Event per metric
-- below, at step = agent_steps (falling back to update), so curves of runs
-- with different batch sizes line up. Other numeric metrics are written under
-- "metrics/<name>". Non-finite values are written as they are (TensorBoard
-- shows them). Encoding and CRCs: moonrl.formats.tensorboard. Writes are asynchronous
-- (luv fs).
--
-- A resumed run (opts.resume_step) writes a new file whose second record is
-- a SessionLog START at resume_step + 1, after moonrl.run.trim_metrics cut the older
-- files back to resume_step; a name already taken gets a ".2", ".3"... suffix.
--
-- Public
--   Tb.new(run_dir, cfg, opts) -> sink   opts: uv, on_error(msg), clock() -> seconds,
--                                        hostname (default uv.os_gethostname()),
--                                        resume_step (a resumed run's last step)
--   sink:update(metrics)
--   sink:event(e)                        a live change: a line of the text run/changes
--   sink:checkpoint(path, update)        log.histograms: the weights' histograms
--   sink:ended(reason)                   the run's end ("done", "error", "stopped"):
--                                        the hparams plugin's session end status
--   sink:close([cb])
--   Tb.hparams(cfg, device) -> {key = value}  the hyperparameters written for the HParams view
-- Beside the scalars: the config as text ("run/config", markdown) and the
-- hparams plugin's experiment (each hyperparameter's type, the metric
-- columns: Tb.HPARAMS_METRICS) and session start (every config key with one
-- value, in force on opts.device), at the first step.
--   sink.path
--   Tb.TAGS                              {metric name, tag} in write order

local asyncfile = require("moonrl.runtime.asyncfile")
local base = require("moonrl.run.sinks.base")
local tb = require("moonrl.formats.tensorboard")
local util = require("moonrl.util")
local json = require("moonrl.formats.json")
local ffi = require("ffi")   -- float32 bytes read as floats: a buffer type, not the engine's

local Tb = {}
Tb.__index = Tb

Tb.TAGS = {
  { "episode_return_mean", "episode/return_mean" },
  { "episode_return_min", "episode/return_min" },
  { "episode_return_max", "episode/return_max" },
  { "episode_length_mean", "episode/length_mean" },
  { "efficiency", "episode/efficiency" },
  { "food_per_episode", "episode/food" },
  { "poison_per_episode", "episode/poison" },
  { "episodes", "episode/count" },
  { "deaths", "episode/deaths" },
  { "policy_loss", "loss/policy" },
  { "value_loss", "loss/value" },
  { "entropy", "loss/entropy" },
  { "approx_kl", "train/approx_kl" },
  { "clip_fraction", "train/clip_fraction" },
  { "explained_variance", "train/explained_variance" },
  { "grad_norm", "train/grad_norm" },
  { "grad_norm_policy", "train/grad_norm_policy" },
  { "grad_norm_value", "train/grad_norm_value" },
  { "lr", "schedule/lr" },
  { "clip", "schedule/clip" },
  { "ent_coef", "schedule/ent_coef" },
  { "popart_mean", "popart/mean" },
  { "popart_std", "popart/std" },
  { "loss_scale", "precision/loss_scale" },
  { "skipped_steps", "precision/skipped_steps" },
  { "sps", "perf/sps" },
  { "time_rollout", "perf/time_rollout" },
  { "time_env", "perf/time_env" },
  { "time_inference", "perf/time_inference" },
  { "time_gae", "perf/time_gae" },
  { "time_update", "perf/time_update" },
  { "time_gather", "perf/time_gather" },
  { "time_forward", "perf/time_forward" },
  { "time_loss", "perf/time_loss" },
  { "time_backward", "perf/time_backward" },
  { "time_optimizer", "perf/time_optimizer" },
  { "time_total", "perf/time_total" },
  { "memory_peak_bytes", "memory/peak_bytes" },
  { "memory_planned_bytes", "memory/planned_bytes" },
}

local KNOWN = { update = true, agent_steps = true, progress = true, wall_time = true }
for _, p in ipairs(Tb.TAGS) do KNOWN[p[1]] = true end

function Tb.new(run_dir, cfg, opts)
  opts = base.options(opts)
  local self = setmetatable({ cfg = cfg, on_error = opts.on_error, clock = opts.clock }, Tb)
  local host = opts.hostname
  if not host and opts.uv.os_gethostname then host = opts.uv.os_gethostname() end
  local now = self.clock()
  local first = run_dir .. "/" .. tb.filename(now, host or "localhost")
  self.path = first
  for n = 2, 1000 do
    if not (opts.uv.fs_stat and opts.uv.fs_stat(self.path)) then break end
    self.path = first .. "." .. n
  end
  self.file = asyncfile.open(opts.uv, self.path, { on_error = opts.on_error })
  self.file:write(tb.record(tb.file_version_event(now)))
  if opts.resume_step then self.file:write(tb.record(tb.session_start_event(now, opts.resume_step + 1))) end
  base.guard(self, "tensorboard", function()
    local text = "```lua\n" .. require("moonrl.config.serialize").serialize(cfg) .. "\n```"
    local step = opts.resume_step and opts.resume_step + 1 or 0
    self.last_step = step
    local hp = Tb.hparams(cfg, opts.device)
    self.file:write(tb.record(tb.text_event(now, step, "run/config", text)) ..
      tb.record(tb.hparams_experiment_event(now, hp, Tb.HPARAMS_METRICS)) .. tb.record(tb.hparams_event(now, hp)))
  end)
  return self
end

-- The run's hyperparameters for TensorBoard's HParams view: every key of the
-- schema with one value, by its dotted name, as the run has them in force:
-- numbers as numbers (a numeric axis there), booleans, strings and enums as
-- they are; a schedule as its start value, with its text beside it under
-- "<key>.schedule" (a function schedule: that text alone); a list as its
-- text. Not where the run is written or read live from, and not the other
-- device's settings (the GPU-only keys on a CPU run, cpu.* on a GPU run).
-- device: "cpu" or "cuda", the device the run is on (default: cfg.device
-- where it names one).
local NOT_HPARAMS = { dir = true, live = true }
function Tb.hparams(cfg, device)
  local schema = require("moonrl.config.schema")
  local display = require("moonrl.run.changes").display
  device = device or cfg.device
  local out = {}
  for _, e in ipairs(schema.keys) do
    local other_device = (device == "cpu" and e.gpu_only and e.key ~= "precision") or
      (device == "cuda" and e.key:match("^cpu%."))
    local v = not NOT_HPARAMS[e.key] and not other_device and cfg or nil
    for part in e.key:gmatch("[^.]+") do v = type(v) == "table" and v[part] or nil end
    local t = type(v)
    if t == "number" or t == "boolean" or t == "string" then
      out[e.key] = v
    elseif e.type == "schedule" and (t == "table" or t == "function") then
      if t == "table" and type(v.from) == "number" then out[e.key] = v.from end
      if not (t == "table" and v.kind == "constant") then out[e.key .. ".schedule"] = display(v) end
    elseif t == "table" and e.type == "list" then
      local items = {}
      for i, x in ipairs(v) do items[i] = tostring(x) end
      out[e.key] = table.concat(items, ",")
    end
  end
  if device == "cpu" or device == "cuda" then out.device = device end   -- "auto" as it resolved
  return out
end

-- The metrics the HParams view shows as columns, by tag (Tb.TAGS).
Tb.HPARAMS_METRICS = {
  { tag = "episode/return_mean", name = "return" },
  { tag = "episode/length_mean", name = "episode length" },
  { tag = "episode/efficiency", name = "efficiency" },
  { tag = "episode/deaths", name = "deaths" },
  { tag = "loss/entropy", name = "entropy" },
  { tag = "train/approx_kl", name = "approx KL" },
  { tag = "train/explained_variance", name = "explained variance" },
  { tag = "perf/sps", name = "agent-steps/s" },
}

-- The run's end in the HParams view: a run that finished is a success, one
-- that failed a failure; one stopped (resumable) is "unknown" there.
local END_STATUS = { done = "success", error = "failure" }
function Tb:ended(reason)
  base.guard(self, "tensorboard", function()
    self.file:write(tb.record(tb.hparams_end_event(self.clock(), END_STATUS[reason] or "unknown", self.last_step)))
  end)
end

-- The step of update k (its agent-steps), where the scalars put it.
function Tb:_step(k)
  return k * (self.cfg.env and tonumber(self.cfg.env.num_envs) or 1) *
    (self.cfg.ppo and tonumber(self.cfg.ppo.rollout_steps) or 1)
end

-- A checkpoint: with log.histograms, a histogram of every parameter tensor
-- and of its gradient (the checkpoint's last optimizer step) at its step,
-- read from the checkpoint (on the loop: the trainer goes on).
function Tb:checkpoint(path, update)
  if not (self.cfg.log and self.cfg.log.histograms) then return end
  base.guard(self, "tensorboard", function()
    local engine = require("moonrl.engine")
    local net, err = engine.checkpoint_network(path)
    if not net then error("histograms of " .. path .. ": " .. err, 0) end
    local out, now = {}, self.clock()
    -- none in a checkpoint saved before this process ran an update (a resume stopped at once)
    local grads = engine.checkpoint_gradients(path, net)
    for _, t in ipairs(net.tensors) do
      local p = ffi.cast("const float *", t.data)
      out[#out + 1] = tb.record(tb.histogram_event(now, self:_step(update), "weights/" .. t.name, p, #t.data / 4))
      if grads then
        local g = ffi.cast("const float *", grads[t.name])
        out[#out + 1] = tb.record(tb.histogram_event(now, self:_step(update), "gradients/" .. t.name, g,
          #t.data / 4))
      end
    end
    self.file:write(table.concat(out))
  end)
end

-- A live change (moonrl.run.changes): a line of the text "run/changes" at its
-- update's step, so it shows beside the curves.
function Tb:event(e)
  if e.event ~= "change" then return end
  base.guard(self, "tensorboard", function()
    local text = string.format("update %d: `%s` %s -> %s (%s)", e.update, e.key, json.encode(e.old),
      json.encode(e.new), tostring(e.source))
    self.file:write(tb.record(tb.text_event(self.clock(), self:_step(e.update), "run/changes", text)))
  end)
end

function Tb:update(m)
  base.guard(self, "tensorboard", function()
    local rec = base.scalars(m)
    local step = rec.agent_steps or rec.update or 0
    self.last_step = step
    local wall = self.clock()
    local out = {}
    for _, p in ipairs(Tb.TAGS) do
      local v = rec[p[1]]
      if type(v) == "number" then out[#out + 1] = tb.record(tb.scalar_event(wall, step, p[2], v)) end
    end
    for _, k in ipairs(util.sorted_keys(rec)) do
      if not KNOWN[k] and type(rec[k]) == "number" then
        out[#out + 1] = tb.record(tb.scalar_event(wall, step, "metrics/" .. k, rec[k]))
      end
    end
    self.file:write(table.concat(out))
  end)
end

function Tb:close(cb)
  self.file:close(cb)
end

return Tb

-- moonrl.run.conv_algorithms - cpu.conv = "auto": which implementation each
-- conv layer of the trunk runs (the engine's mr_cpu_config.conv_layers), and
-- the cache that keeps the choice per machine.
--
-- The fastest implementation of a 3x3 convolution depends on the layer's
-- shape and on the machine (Winograd beat oneDNN on 32->64 and 64->64 at
-- 11 x 11 on one machine and lost on 16->32), so it is measured, not guessed:
-- warm-up's "algorithms" step (warmup.prepare) times every candidate for
-- each layer 1.. (the first is computed from the codes whatever the choice)
-- with mr_cpu_conv_time - REPS rounds of forward + backward of a chunk per
-- thread, the candidates interleaved, the median - and keeps the fastest.
-- The search runs on the loop before the trainer starts (the trainer's
-- memory plan depends on the choice), so it lives here beside prepare, not in
-- the engine, which only measures.
--
-- The cache: one JSON file, conv_algorithms.json, in $MOONRL_CACHE_DIR, else
-- $XDG_CACHE_HOME/moonrl, else ~/.cache/moonrl:
--   {"format": "moonrl conv algorithms 1",
--    "entries": {KEY: {"choice": "winograd", "ms": {"onednn": 0.61, "winograd": 0.48},
--                      "when": "2026-12-01 10:00:00"}, ...}}
-- KEY names everything a timing depends on: the CPU's model name, OpenBLAS's
-- kernels and the bf16 instructions (which kernels run), the layer C->OC,
-- the map H x W, the chunk, the precision, the threads, moonrl's version and
-- KERNELS (raise it when conv_dnnl.c or conv_winograd.c change speed).
-- A layer found there is not searched again; a search adds its layers and
-- rewrites the file atomically (a temporary file and a rename). A file that
-- is not such JSON is named in a note and replaced by the next search.
--
-- Without the "algorithms" step, "auto" takes the cached choice where there
-- is one, else onednn (the measured-faster whole-network choice).
--
-- The run's own record: a run keeps the choice it started with in
-- RUN_DIR/conv_algorithms.json ({"format": RUN_FORMAT, "layers": {"1":
-- "winograd", ...}}), and a resume takes it from there, never from the cache
-- or a new search: the implementations differ in the last bits, so a resumed
-- run continues bit for bit only with the same ones (on another machine, or
-- after the cache was deleted or a search timed otherwise, too).
--
-- The CUDA backend's counterpart (cuda.conv = "auto"): resolve_cuda times
-- im2col + cuBLAS against cuDNN (mr_cuda_conv_time: cuDNN's own search,
-- cudnnFind*AlgorithmEx, picks its fastest deterministic algorithms, then the
-- two paths alternate REPS rounds of a chunk's forward + backward) for each
-- layer 1.., and keeps the faster with cuDNN's algorithms. Its cache is a
-- file of its own beside the CPU's, cuda_conv_algorithms.json:
--   {"format": "moonrl cuda conv algorithms 1",
--    "entries": {KEY: {"choice": "cudnn", "algo": [1, 1, 1], "ms": {"im2col": 1.9, "cudnn": 1.2},
--                      "when": "..."}, ...}}
-- KEY: the GPU model, its compute capability and the cuDNN version (what
-- mr_cuda_conv_time's machine says), the layer C->OC, the map, the chunk,
-- the precision, moonrl's version and CUDA_KERNELS. The same rules as the
-- CPU's file: found = no search; a search rewrites it atomically; a damaged
-- file is named in a note and replaced by the next search. cuda.conv =
-- "cudnn" takes the cached algorithms where the cache has the layer (else
-- cuDNN's heuristics at creation) and never searches. No run record: a GPU
-- run is not resumed bit for bit anyway (docs/cuda.md).
--
-- Public functions
--   conv_algorithms.cache_path() -> path
--   conv_algorithms.cuda_cache_path() -> path
--   conv_algorithms.resolve_cuda(cfg, c, search, opts) -> notes
--                                   fills c.cuda.conv_layers; opts (tests): {time = f(l, H, W, C, OC, chunk,
--                                   precision, reps) -> {ms_im2col=, ms_cudnn=, algo={3}, note=} | nil, err,
--                                   machine = "..."}
--   conv_algorithms.resolve(cfg, c, search, recorded) -> notes, layers, from_record
--                                   fills c.cpu.conv_layers (cfg: the resolved config
--                                   table; c: its mr_config; search: warmup.prepare has
--                                   "algorithms"; recorded: a run's record, read_record's);
--                                   notes: lines for train.log; layers: {[l] = name}, or
--                                   nil where cpu.conv is not auto (nothing to record);
--                                   from_record: true where the layers are `recorded`'s
--   conv_algorithms.read_record(run_dir) -> layers | nil, note   (nil, nil: no record)
--   conv_algorithms.write_record(run_dir, layers) -> true | nil, err
--   conv_algorithms.FORMAT, .RUN_FORMAT, .RUN_FILE, .KERNELS, .REPS, .CANDIDATES

local engine = require("moonrl.engine")
local json = require("moonrl.formats.json")
local util = require("moonrl.util")
local uv = require("luv")

local M = {}

M.FORMAT = "moonrl conv algorithms 1"
M.RUN_FORMAT = "moonrl run conv algorithms 1"
M.RUN_FILE = "conv_algorithms.json"
M.KERNELS = 5   -- 2: conv_winograd.c's AVX-512 kernels and transforms; 3: its planes apart, shared-term transforms;
                -- 4: F(6x6) where it takes fewer products (mr_wino_tile_for: 11 x 11 maps);
                -- 5: blocks of 32 tiles, not 128 (MR_WINO_TILE_BLOCK)
M.REPS = 5
M.CANDIDATES = { "onednn", "winograd" }
local FILE = "conv_algorithms.json"
local KNOWN = { onednn = true, winograd = true }   -- a cache entry's choices (cpu.conv names)

local function cache_dir()
  local dir = os.getenv("MOONRL_CACHE_DIR")
  if not dir or dir == "" then
    local xdg = os.getenv("XDG_CACHE_HOME")
    if xdg and xdg ~= "" then dir = xdg .. "/moonrl" else dir = (os.getenv("HOME") or ".") .. "/.cache/moonrl" end
  end
  return dir
end

function M.cache_path() return cache_dir() .. "/" .. FILE end

M.CUDA_FORMAT = "moonrl cuda conv algorithms 1"
M.CUDA_FILE = "cuda_conv_algorithms.json"
M.CUDA_KERNELS = 1   -- raise when policy.cu's im2col path or conv_cudnn.cu change speed
M.CUDA_CANDIDATES = { "im2col", "cudnn" }
local CUDA_KNOWN = { im2col = true, cudnn = true }   -- (cuda.conv names)

function M.cuda_cache_path() return cache_dir() .. "/" .. M.CUDA_FILE end

-- The machine's part of every key: CPU model, OpenBLAS kernels, bf16 instructions.
local function machine()
  local cpus = uv.cpu_info() or {}
  local model = cpus[1] and cpus[1].model or "unknown cpu"
  return string.format("%s|blas %s|bf16 %s", (model:gsub("%s+", " ")), engine.blas_kernels(),
    engine.cpu_bf16() or "none")
end

-- An entry of the CPU's cache: a known choice.
local function cpu_entry_ok(e) return type(e) == "table" and KNOWN[e.choice] ~= nil end

-- An entry of the CUDA cache: a known choice, and cuDNN's three algorithms
-- (non-negative integers) where the choice is cudnn.
local function cuda_entry_ok(e)
  if type(e) ~= "table" or not CUDA_KNOWN[e.choice] then return false end
  if e.choice ~= "cudnn" then return true end
  if type(e.algo) ~= "table" then return false end
  for k = 1, 3 do
    local a = e.algo[k]
    if type(a) ~= "number" or a < 0 or a ~= math.floor(a) or a > 127 then return false end
  end
  return true
end

-- The cache's entries, or {} and a note on what was wrong with the file.
local function read_cache(path, format, entry_ok, what)
  format, entry_ok, what = format or M.FORMAT, entry_ok or cpu_entry_ok, what or "conv algorithm cache"
  local text = util.read_file(path)
  if not text then return {} end
  local ok, t = pcall(json.decode, text)
  local why
  if not ok or type(t) ~= "table" then
    why = "not JSON"
  elseif t.format ~= format then
    why = "format " .. util.fmt_value(t.format) .. ", expected " .. util.fmt_value(format)
  elseif type(t.entries) ~= "table" then
    why = "no entries"
  else
    local good = {}
    for k, e in pairs(t.entries) do
      if not entry_ok(e) then
        why = "entry " .. util.fmt_value(k) .. " holds no known choice"
        break
      end
      good[k] = e
    end
    if not why then return good end
  end
  return {}, "the " .. what .. " " .. path .. " is damaged (" .. why .. ")"
end

local function fmt_ms(ms) return ms < 0 and "refused" or string.format("%.3g ms", ms) end

-- A run's record of its choice: {[l] = name}, or nil and a note (nil, nil: none).
function M.read_record(run_dir)
  local path = run_dir .. "/" .. M.RUN_FILE
  local text = util.read_file(path)
  if not text then return nil end
  local ok, t = pcall(json.decode, text)
  if not ok or type(t) ~= "table" or t.format ~= M.RUN_FORMAT or type(t.layers) ~= "table" then
    return nil, path .. " is damaged (expected {\"format\": \"" .. M.RUN_FORMAT .. "\", \"layers\": {...}})"
  end
  local layers = {}
  for k, v in pairs(t.layers) do
    local l = tonumber(k)
    if not l or not KNOWN[v] then
      return nil, path .. ": layer " .. util.fmt_value(k) .. " = " .. util.fmt_value(v) .. " (accepted: " ..
        table.concat(M.CANDIDATES, ", ") .. ")"
    end
    layers[l] = v
  end
  return layers
end

function M.write_record(run_dir, layers)
  local t = {}
  for l, v in pairs(layers) do t[tostring(l)] = v end
  return util.write_file_atomic(run_dir .. "/" .. M.RUN_FILE, json.encode({ format = M.RUN_FORMAT, layers = t }) .. "\n")
end

function M.resolve(cfg, c, search, recorded)
  local notes = {}
  if (cfg.cpu and cfg.cpu.conv or "auto") ~= "auto" then return notes end
  local L = tonumber(c.policy.num_conv)
  if L < 2 then return notes, {} end
  if recorded then   -- a resume: the run's own choice, whatever the cache says now
    local layers = {}
    for l = 1, L - 1 do layers[l] = recorded[l] end
    if #layers == L - 1 then
      for l = 1, L - 1 do
        c.cpu.conv_layers[l] = engine.enum("cpu.conv", layers[l])
        notes[#notes + 1] = string.format("layer %d: %s (the run's choice at its start, %s)", l, layers[l], M.RUN_FILE)
      end
      return notes, layers, true
    end
    notes[#notes + 1] = M.RUN_FILE .. " names " .. #layers .. " of the " .. (L - 1) ..
      " layers: chosen again (the results may differ from the uninterrupted run's in the last bits)"
  end
  local chosen = {}
  local V = 2 * tonumber(c.env.view_range) + 1
  local chunk = engine.cpu_conv_chunk()
  local threads = tonumber(c.threads)
  if threads < 1 then threads = require("moonrl.runtime.hardware").detect().cores end
  local bf16 = tonumber(c.precision) == engine.enum("precision", "bf16")
  local base = string.format("%s|%dx%d|chunk %d|%s|%d threads|moonrl %s|kernels %d", machine(), V, V, chunk,
    bf16 and "bf16" or "fp32", threads, engine.version(), M.KERNELS)
  local path = M.cache_path()
  local entries, damaged = read_cache(path)
  if damaged then
    notes[#notes + 1] = damaged .. (search and ": searching again and rewriting it" or
      ": ignored (no \"algorithms\" in warmup.prepare to search again); onednn where it has no answer")
  end
  local searched, now = false, {}   -- now[key]: the layer that searched it in this call
  for l = 1, L - 1 do
    local cin, cout = tonumber(c.policy.conv_channels[l - 1]), tonumber(c.policy.conv_channels[l])
    local shape = string.format("%d->%d", cin, cout)
    local key = shape .. "|" .. base
    local e, how = entries[key], "from the cache " .. path .. ", no search"
    if now[key] then how = "as layer " .. now[key] end
    if search and not e then
      local secs, err = engine.cpu_conv_time(M.CANDIDATES, V, V, cin, cout, chunk, threads, bf16, M.REPS)
      if not secs then
        notes[#notes + 1] = "layer " .. l .. " " .. shape .. ": the search failed (" .. err .. "); onednn"
      else
        e = { ms = {}, when = os.date("%Y-%m-%d %H:%M:%S") }
        local best
        for i, name in ipairs(M.CANDIDATES) do
          local s = secs[i]
          e.ms[name] = s < 0 and -1 or tonumber(string.format("%.4g", s * 1e3))
          if s >= 0 and (not best or s < best) then e.choice, best = name, s end
        end
        e.choice = e.choice or "onednn"
        entries[key], now[key], searched = e, l, true
        how = "searched: the median of " .. M.REPS .. " rounds"
      end
    elseif not e then
      how = "no cached choice and no \"algorithms\" in warmup.prepare: the default"
    end
    local choice = e and e.choice or "onednn"
    c.cpu.conv_layers[l] = engine.enum("cpu.conv", choice)
    chosen[l] = choice
    local times = {}
    for _, name in ipairs(M.CANDIDATES) do
      local ms = e and e.ms and tonumber(e.ms[name])
      if ms then times[#times + 1] = name .. " " .. fmt_ms(ms) end
    end
    notes[#notes + 1] = string.format("layer %d %s on %dx%d (chunk %d, %d threads, %s): %s%s (%s)", l, shape, V, V,
      chunk, threads, bf16 and "bf16" or "fp32", choice, #times > 0 and " [" .. table.concat(times, ", ") .. "]" or "",
      how)
  end
  if searched then
    local dir = path:match("^(.*)/[^/]*$")
    local ok, err = util.mkdir_p(dir)
    if ok then
      local text = json.encode({ format = M.FORMAT, entries = entries }) .. "\n"
      ok, err = util.write_file_atomic(path, text)
    end
    notes[#notes + 1] = ok and ("wrote the choice to " .. path) or ("could not write the cache: " .. tostring(err))
  end
  return notes, chosen
end

-- The CUDA network's samples per conv chunk (policy_layers.h's MR_PC_CHUNK,
-- capped at the largest batch the network runs: max(minibatch, num_envs)).
local CUDA_CHUNK = 2048
local function cuda_chunk(c)
  local N = tonumber(c.env.num_envs)
  local mb = math.floor(N * tonumber(c.ppo.rollout_steps) / math.max(1, tonumber(c.ppo.minibatches)))
  return math.min(CUDA_CHUNK, math.max(N, mb))
end

local PRECISION = { [0] = "fp32", "bf16", "fp16" }

-- The engine's timing of one layer: {ms_im2col, ms_cudnn, algo, note, machine} | nil, err
local engine_time = engine.cuda_conv_time

function M.resolve_cuda(cfg, c, search, opts)
  opts = opts or {}
  local notes = {}
  local mode = cfg.cuda and cfg.cuda.conv or "im2col"
  if mode ~= "auto" and mode ~= "cudnn" then return notes end
  local L = tonumber(c.policy.num_conv)
  if L < 2 then return notes end
  search = search and mode == "auto"
  local V = 2 * tonumber(c.env.view_range) + 1
  local chunk = cuda_chunk(c)
  local precision = tonumber(c.precision)
  local pname = PRECISION[precision] or tostring(precision)
  local device = tonumber(c.cuda.device_index)
  local timer = opts.time or function(_, ...) return engine_time(device, ...) end
  local machine = opts.machine
  if not machine then
    local m, merr = engine_time(device, V, V, 1, 1, 1, precision, 0)
    if not m then
      notes[#notes + 1] = "cannot ask the GPU for the cache's key (" .. merr .. "): every layer im2col"
      return notes
    end
    machine = m.machine
  end
  local base = string.format("%s|%dx%d|chunk %d|%s|moonrl %s|kernels %d", machine, V, V, chunk, pname,
    engine.version(), M.CUDA_KERNELS)
  local path = opts.path or M.cuda_cache_path()
  local entries, damaged = read_cache(path, M.CUDA_FORMAT, cuda_entry_ok, "CUDA conv algorithm cache")
  if damaged then
    notes[#notes + 1] = damaged .. (search and ": searching again and rewriting it" or
      ": ignored; " .. (mode == "auto" and "im2col" or "cuDNN's heuristics") .. " where it has no answer")
  end
  local searched, now = false, {}
  for l = 1, L - 1 do
    local cin, cout = tonumber(c.policy.conv_channels[l - 1]), tonumber(c.policy.conv_channels[l])
    local shape = string.format("%d->%d", cin, cout)
    local key = shape .. "|" .. base
    local e, how = entries[key], "from the cache " .. path .. ", no search"
    if now[key] then how = "as layer " .. now[key] end
    if search and not e then
      local r, terr = timer(l, V, V, cin, cout, chunk, precision, M.REPS)
      if not r then
        notes[#notes + 1] = "layer " .. l .. " " .. shape .. ": the search failed (" .. tostring(terr) .. "); im2col"
      else
        e = { ms = { im2col = r.ms_im2col >= 0 and tonumber(string.format("%.4g", r.ms_im2col)) or -1,
                     cudnn = r.ms_cudnn >= 0 and tonumber(string.format("%.4g", r.ms_cudnn)) or -1 },
              when = os.date("%Y-%m-%d %H:%M:%S") }
        if r.ms_cudnn >= 0 and r.ms_im2col >= 0 and r.ms_cudnn < r.ms_im2col then
          e.choice, e.algo = "cudnn", { r.algo[1], r.algo[2], r.algo[3] }
        else
          e.choice = "im2col"
        end
        if r.note and r.note ~= "" then e.note = r.note end
        entries[key], now[key], searched = e, l, true
        how = "searched: the median of " .. M.REPS .. " rounds" .. (e.note and " (cuDNN: " .. e.note .. ")" or "")
      end
    elseif not e then
      how = mode == "auto" and "no cached choice and no \"algorithms\" in warmup.prepare: im2col"
        or "not in the cache: cuDNN's heuristics"
    end
    local layer = c.cuda.conv_layers[l]
    local choice
    if mode == "cudnn" then
      choice = "cudnn"
      layer.impl = engine.enum("cuda.conv", "cudnn")
      local algo = e and e.choice == "cudnn" and e.algo
      for k = 1, 3 do layer.algo[k - 1] = algo and algo[k] or -1 end
      if e and not algo then how = "the cached choice is im2col: cuDNN's heuristics" end
    else
      choice = e and e.choice or "im2col"
      layer.impl = engine.enum("cuda.conv", choice)
      for k = 1, 3 do layer.algo[k - 1] = choice == "cudnn" and e.algo[k] or -1 end
    end
    local times = {}
    for _, name in ipairs(M.CUDA_CANDIDATES) do
      local ms = e and e.ms and tonumber(e.ms[name])
      if ms then times[#times + 1] = name .. " " .. fmt_ms(ms) end
    end
    notes[#notes + 1] = string.format("layer %d %s on %dx%d (chunk %d, %s): %s%s%s (%s)", l, shape, V, V, chunk,
      pname, choice, choice == "cudnn" and layer.algo[0] >= 0 and string.format(" algorithms %d/%d/%d",
      layer.algo[0], layer.algo[1], layer.algo[2]) or "", #times > 0 and " [" .. table.concat(times, ", ") .. "]" or "",
      how)
  end
  if searched then
    local dir = path:match("^(.*)/[^/]*$")
    local ok, err = util.mkdir_p(dir)
    if ok then
      ok, err = util.write_file_atomic(path, json.encode({ format = M.CUDA_FORMAT, entries = entries }) .. "\n")
    end
    notes[#notes + 1] = ok and ("wrote the choice to " .. path) or ("could not write the cache: " .. tostring(err))
  end
  return notes
end

return M

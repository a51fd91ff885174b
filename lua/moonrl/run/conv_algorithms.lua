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
-- Public functions
--   conv_algorithms.cache_path() -> path
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
local ENUM = { onednn = "MR_CPU_CONV_ONEDNN", winograd = "MR_CPU_CONV_WINOGRAD" }

function M.cache_path()
  local dir = os.getenv("MOONRL_CACHE_DIR")
  if not dir or dir == "" then
    local xdg = os.getenv("XDG_CACHE_HOME")
    if xdg and xdg ~= "" then dir = xdg .. "/moonrl" else dir = (os.getenv("HOME") or ".") .. "/.cache/moonrl" end
  end
  return dir .. "/" .. FILE
end

-- The machine's part of every key: CPU model, OpenBLAS kernels, bf16 instructions.
local function machine()
  local cpus = uv.cpu_info() or {}
  local model = cpus[1] and cpus[1].model or "unknown cpu"
  return string.format("%s|blas %s|bf16 %s", (model:gsub("%s+", " ")), engine.ffi.string(engine.C.mr_blas_kernels()),
    engine.cpu_bf16() or "none")
end

-- The cache's entries, or {} and a note on what was wrong with the file.
local function read_cache(path)
  local text = util.read_file(path)
  if not text then return {} end
  local ok, t = pcall(json.decode, text)
  local why
  if not ok or type(t) ~= "table" then
    why = "not JSON"
  elseif t.format ~= M.FORMAT then
    why = "format " .. util.fmt_value(t.format) .. ", expected " .. util.fmt_value(M.FORMAT)
  elseif type(t.entries) ~= "table" then
    why = "no entries"
  else
    local good = {}
    for k, e in pairs(t.entries) do
      if type(e) ~= "table" or not ENUM[e.choice] then
        why = "entry " .. util.fmt_value(k) .. " holds no known choice"
        break
      end
      good[k] = e
    end
    if not why then return good end
  end
  return {}, "the conv algorithm cache " .. path .. " is damaged (" .. why .. ")"
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
    if not l or not ENUM[v] then
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
  local C = engine.C
  local notes = {}
  if (cfg.cpu and cfg.cpu.conv or "auto") ~= "auto" then return notes end
  local L = tonumber(c.policy.num_conv)
  if L < 2 then return notes, {} end
  if recorded then   -- a resume: the run's own choice, whatever the cache says now
    local layers = {}
    for l = 1, L - 1 do layers[l] = recorded[l] end
    if #layers == L - 1 then
      for l = 1, L - 1 do
        c.cpu.conv_layers[l] = C[ENUM[layers[l]]]
        notes[#notes + 1] = string.format("layer %d: %s (the run's choice at its start, %s)", l, layers[l], M.RUN_FILE)
      end
      return notes, layers, true
    end
    notes[#notes + 1] = M.RUN_FILE .. " names " .. #layers .. " of the " .. (L - 1) ..
      " layers: chosen again (the results may differ from the uninterrupted run's in the last bits)"
  end
  local chosen = {}
  local V = 2 * tonumber(c.env.view_range) + 1
  local chunk = tonumber(C.mr_cpu_conv_chunk())
  local threads = tonumber(c.threads)
  if threads < 1 then threads = require("moonrl.runtime.hardware").detect().cores end
  local bf16 = tonumber(c.precision) == tonumber(C.MR_BF16)
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
      local convs = engine.ffi.new("int[?]", #M.CANDIDATES)
      for i, name in ipairs(M.CANDIDATES) do convs[i - 1] = C[ENUM[name]] end
      local secs = engine.ffi.new("double[?]", #M.CANDIDATES)
      local err = engine.ffi.new("mr_error")
      if C.mr_cpu_conv_time(convs, #M.CANDIDATES, V, V, cin, cout, chunk, threads, bf16 and 1 or 0, M.REPS, secs,
          err) ~= 0 then
        notes[#notes + 1] = "layer " .. l .. " " .. shape .. ": the search failed (" .. engine.ffi.string(err.msg) ..
          "); onednn"
      else
        e = { ms = {}, when = os.date("%Y-%m-%d %H:%M:%S") }
        local best
        for i, name in ipairs(M.CANDIDATES) do
          local s = tonumber(secs[i - 1])
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
    c.cpu.conv_layers[l] = C[ENUM[choice]]
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

return M

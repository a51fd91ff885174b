-- cpu.conv = "auto" with warm-up's "algorithms" step (lua/moonrl/run/
-- conv_algorithms.lua): the built binary searches each conv layer's
-- implementation, writes the cache, a second run reads it without a search,
-- a damaged cache is reported and replaced, the cached choice reaches the
-- engine (its description line) also without the step, and no cache means
-- onednn. A 3-layer trunk (layers 1 and 2 chosen) on the ci profile, one
-- update each; the cache lives in a temporary MOONRL_CACHE_DIR.

local support = require("support")
local json = require("moonrl.formats.json")

local ARGS = "train --hardware ci --set total_steps=1024 --set 'policy.conv_channels={8,16,16}' " ..
  "--set eval.num_envs=16 --set eval.steps=64"
local SEARCH = " --set 'warmup.prepare={\"algorithms\"}'"
local NO_STEP = " --set 'warmup.prepare={}'"   -- (the advanced level, the default, has the step)

describe("cpu.conv = auto and warm-up's algorithm search", function()
  if not support.have_bin then
    it("needs the binary", function() pending("no binary at " .. support.BIN .. " (build it: make build)") end)
    return
  end
  local dir, cache, n = nil, nil, 0
  setup(function()
    dir = support.tmpdir()
    cache = dir .. "/cache/conv_algorithms.json"
  end)
  teardown(function() if dir then support.rm_rf(dir) end end)

  -- one run in a fresh run directory: its train.log and stderr
  local function train(extra)
    n = n + 1
    local run = "run" .. n
    local rc, out, err = support.moonrl(ARGS .. " --dir " .. run .. (extra or ""), dir,
      { env = string.format("MOONRL_CACHE_DIR=%q", dir .. "/cache"), timeout = 240 })
    assert.are.equal(0, rc, out .. err)
    return assert(support.read_file(dir .. "/" .. run .. "/train.log")), err
  end

  -- the engine line's per-layer choices: { [1] = "onednn", [2] = "winograd" }
  local function described(log)
    local line = assert(log:match("engine: [^\n]*"), log)
    local got = {}
    for l, what in line:gmatch("layer (%d) (%a+)") do got[tonumber(l)] = what end
    return got, line
  end

  local function read_cache()
    local t = assert(json.decode(assert(support.read_file(cache), "no cache at " .. cache)))
    assert.are.equal("moonrl conv algorithms 1", t.format)
    local by_shape = {}
    for key, e in pairs(t.entries) do by_shape[key:match("^[^|]+")] = e end
    return t, by_shape
  end

  local first
  it("searches, writes the cache and runs each layer as chosen", function()
    local log = train(SEARCH)
    local _, by = read_cache()
    assert.truthy(by["8->16"] and by["16->16"], json.encode(by))
    for _, shape in ipairs({ "8->16", "16->16" }) do
      assert.truthy(by[shape].ms.onednn > 0 and by[shape].ms.winograd > 0, json.encode(by[shape]))
      local faster = by[shape].ms.winograd < by[shape].ms.onednn and "winograd" or "onednn"
      assert.are.equal(faster, by[shape].choice)
    end
    assert.truthy(log:find("layer 1 8->16 on 11x11", 1, true), log)
    assert.truthy(log:find("searched: the median of", 1, true), log)
    assert.falsy(log:find("no search", 1, true), log)
    assert.truthy(log:find("wrote the choice to " .. cache, 1, true), log)
    local got, line = described(log)
    if by["8->16"].choice ~= by["16->16"].choice then
      assert.same({ by["8->16"].choice, by["16->16"].choice }, got, line)
    else   -- one choice for both: the whole-network wording
      assert.truthy(line:find(by["8->16"].choice == "winograd" and "the others Winograd" or "the others oneDNN",
        1, true), line)
    end
    first = assert(support.read_file(cache))
  end)

  it("reads the cache on a second run: no search, the file untouched", function()
    assert.truthy(first, "needs the first run")
    local log = train(SEARCH)
    assert.truthy(log:find("layer 1 8->16 on 11x11 (chunk 32, 2 threads, ", 1, true), log)
    assert.truthy(select(2, log:gsub("from the cache " .. cache:gsub("%p", "%%%0") .. ", no search", "")) == 2, log)
    assert.falsy(log:find("searched", 1, true), log)
    assert.falsy(log:find("wrote the choice", 1, true), log)
    assert.are.equal(first, support.read_file(cache))
  end)

  it("takes the cached choice without the step, and it reaches the engine", function()
    assert.truthy(first, "needs the first run")
    -- the cached choices swapped around, so the engine's line must change with the file
    local t, by = read_cache()
    for _, e in pairs(t.entries) do e.choice = "winograd" end
    by["8->16"].choice = "onednn"
    support.write_file(cache, json.encode(t))
    local log = train(NO_STEP)
    assert.falsy(log:find("searched", 1, true), log)
    assert.truthy(log:find("from the cache", 1, true), log)
    local got, line = described(log)
    assert.same({ "onednn", "winograd" }, got, line)
  end)

  it("reports a damaged cache, searches again and replaces it", function()
    support.write_file(cache, "{\"format\": \"moonrl conv algorithms 1\", \"entries\": {")
    local log, err = train(SEARCH)
    local what = "the conv algorithm cache " .. cache .. " is damaged (not JSON): searching again and rewriting it"
    assert.truthy(log:find(what, 1, true), log)
    assert.truthy(err:find(what, 1, true), err)
    assert.truthy(log:find("searched: the median of", 1, true), log)
    local _, by = read_cache()
    assert.truthy(by["8->16"] and by["16->16"])
    -- an odd but valid JSON file: named too
    support.write_file(cache, json.encode({ format = "moonrl conv algorithms 1", entries = { k = { choice = "fast" } } }))
    log = train(SEARCH)
    assert.truthy(log:find('is damaged (entry "k" holds no known choice)', 1, true), log)
    _, by = read_cache()
    assert.truthy(by["8->16"] and by["16->16"])
  end)

  it("a run records its choice, and its resume runs the same one whatever the cache says now", function()
    os.remove(cache)
    local log = train(SEARCH)
    local run = dir .. "/run" .. n
    local rec = assert(json.decode(assert(support.read_file(run .. "/conv_algorithms.json"), "no record")))
    assert.are.equal("moonrl run conv algorithms 1", rec.format)
    local _, by = read_cache()
    assert.same({ ["1"] = by["8->16"].choice, ["2"] = by["16->16"].choice }, rec.layers)
    -- the cache now says the opposite of what the run chose, and a search could time otherwise:
    -- the resume takes the run's record, searches nothing, writes nothing
    local t = read_cache()
    for _, e in pairs(t.entries) do e.choice = e.choice == "winograd" and "onednn" or "winograd" end
    support.write_file(cache, json.encode(t))
    local flipped = support.read_file(cache)
    local rc, out, err = support.moonrl("train --resume " .. run .. " --set total_steps=2048" .. SEARCH .. " --no-eval",
      dir, { env = string.format("MOONRL_CACHE_DIR=%q", dir .. "/cache"), timeout = 240 })
    assert.are.equal(0, rc, out .. err)
    log = assert(support.read_file(run .. "/train.log"))
    local resumed = log:sub((select(2, log:find("resuming run", 1, true))))
    assert.truthy(resumed:find("layer 1: " .. rec.layers["1"] .. " (the run's choice at its start", 1, true), resumed)
    assert.truthy(resumed:find("layer 2: " .. rec.layers["2"] .. " (the run's choice at its start", 1, true), resumed)
    assert.falsy(resumed:find("searched", 1, true), resumed)
    assert.are.equal(flipped, support.read_file(cache))
    local got, line = described(resumed)
    if rec.layers["1"] ~= rec.layers["2"] then assert.same({ rec.layers["1"], rec.layers["2"] }, got, line) end
    -- a damaged record is named and the choice made again
    support.write_file(run .. "/conv_algorithms.json", "{\"layers\": ")
    rc, out, err = support.moonrl("train --resume " .. run .. " --set total_steps=3072 --no-eval", dir,
      { env = string.format("MOONRL_CACHE_DIR=%q", dir .. "/cache"), timeout = 240 })
    assert.are.equal(0, rc, out .. err)
    log = assert(support.read_file(run .. "/train.log"))
    assert.truthy(log:find(run .. "/conv_algorithms.json is damaged", 1, true), log)
    -- and replaced by the choice the resumed run made, which its next resume takes
    rec = assert(json.decode(assert(support.read_file(run .. "/conv_algorithms.json"))))
    assert.are.equal("moonrl run conv algorithms 1", rec.format)
    assert.truthy(rec.layers["1"] and rec.layers["2"], json.encode(rec))
  end)

  it("the default level searches", function()
    os.remove(cache)
    local log = train()
    assert.truthy(log:find("layer 1 8->16 on 11x11", 1, true) and log:find("searched: the median of", 1, true), log)
    assert.truthy(read_cache())
  end)

  it("without a cache or the step: onednn, and nothing written", function()
    os.remove(cache)
    local log = train(NO_STEP)
    assert.truthy(log:find("no cached choice and no \"algorithms\" in warmup.prepare: the default", 1, true), log)
    local _, line = described(log)
    assert.truthy(line:find("the first from the codes, the others oneDNN", 1, true), line)
    assert.is_nil(support.read_file(cache))
  end)
end)

-- Updates in which no episode ended: their per-episode figures are absent in
-- every sink (null in metrics.jsonl, an empty cell in metrics.csv), not 0.
-- Mode proxy with truncation off never ends an episode.

local support = require("spec.support")
local json = require("moonrl.formats.json")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
local function abs(p) return p:sub(1, 1) == "/" and p or (os.getenv("PWD") .. "/" .. p) end

describe("metrics of an update without a finished episode", function()
  it("are null in metrics.jsonl and empty in metrics.csv", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    local cmd = string.format("cd %s && %s train --no-eval --dir run --set hardware=ci --set env.mode=proxy " ..
      "--set env.max_episode_steps=0 --set total_steps=2048 --set log.csv=true --set log.console=false 2>&1",
      dir, abs(BIN))
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    local rows = 0
    for line in io.lines(dir .. "/run/metrics.jsonl") do
      local r = json.decode(line)
      if r.update then
        rows = rows + 1
        assert.equal(0, r.episodes, line)
        assert.equal(json.null, r.episode_return_mean, line)
        assert.equal(json.null, r.efficiency, line)
        assert.equal(json.null, r.food_per_episode, line)
        assert.is_number(r.entropy, line)
      end
    end
    assert.is_true(rows >= 1, out)
    local lines = support.lines(support.read_file(dir .. "/run/metrics.csv"))
    local head, col = {}, {}
    for c in (lines[1] .. ","):gmatch("([^,]*),") do head[#head + 1] = c; col[c] = #head end
    for i = 2, #lines do
      if lines[i] ~= "" then
        local cells = {}
        for c in (lines[i] .. ","):gmatch("([^,]*),") do cells[#cells + 1] = c end
        assert.equal("", cells[col.efficiency], lines[i])
        assert.equal("", cells[col.episode_return_mean], lines[i])
        assert.truthy(tonumber(cells[col.entropy]), lines[i])
      end
    end
    assert.truthy(support.read_file(dir .. "/run/train.log"):find("return %- efficiency %-"))
    support.rm_rf(dir)
  end)
end)

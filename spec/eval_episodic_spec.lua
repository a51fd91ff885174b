-- The episodic evaluation protocol end to end (docs/evaluation.md): a
-- briefly trained cartpole run ends with it (moonrl train no longer skips an
-- environment without two counters), `moonrl eval` prints its table (return,
-- episode length, success, episodes ended / running, each mean with its
-- interval) and writes its files, whose records re-add to the table's
-- numbers recomputed here from the CSV alone; --greedy, --episodes,
-- --compare, --from and moonrl.eval_table give what they say; bad options
-- are refused by name. The engine's records are checked against the
-- environments stepped directly in spec/c/test_eval_episodes.c.

local support = require("support")
local json = require("moonrl.formats.json")

local BIN, have_bin = support.BIN, support.have_bin

local function moonrl(args, dir) return support.moonrl(args, dir, { timeout = 120 }) end

local FILES = { "eval.json", "eval.md", "eval.svg", "records.csv" }

-- The records file as rows of named cells.
local function csv_rows(text)
  local rows, cols = {}, nil
  for line in text:gmatch("[^\n]+") do
    local cells = {}
    for c in (line .. ","):gmatch("([^,]*),") do cells[#cells + 1] = c end
    if not cols then
      cols = cells
    else
      local r = {}
      for i, name in ipairs(cols) do r[name] = cells[i] end
      rows[#rows + 1] = r
    end
  end
  return rows, cols
end

-- The table's cell of a row (first column `label`), column k (1 = the first result).
local function cell(md, label, k)
  for line in md:gmatch("[^\n]+") do
    local cells = {}
    for c in line:gmatch("|([^|]*)") do cells[#cells + 1] = c:match("^%s*(.-)%s*$") end
    if cells[1] == label then return cells[1 + (k or 1)] end
  end
end

describe("the episodic evaluation (every environment)", function()
  local dir, trained
  setup(function()
    if have_bin then dir = support.tmpdir() end
  end)
  teardown(function()
    if dir then support.rm_rf(dir) end
  end)

  -- 12 updates of cartpole's 8 envs x 32 steps, checkpoints at 6 and 12, its evaluation kept small
  local function need_run()
    if not have_bin then return false end
    if not trained then
      local rc, out, err = moonrl("train cartpole --dir cp --set total_steps=3072 --set threads=2 " ..
        "--set log.console=false --set log.tensorboard=false --set log.checkpoint_interval=6 --set log.checkpoint_keep=0 " ..
        "--set eval.num_envs=16 --set eval.steps=400", dir)
      assert.are.equal(0, rc, out .. err)
      trained = { out = out, err = err }
    end
    return true
  end

  it("ends moonrl train for cartpole, and moonrl eval prints and files the same table", function()
    if not need_run() then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local edir = dir .. "/cp/eval/update_0000012"
    assert.are.same(FILES, support.files(edir))
    local md = support.read_file(edir .. "/eval.md")
    assert.truthy(trained.out:find(md, 1, true), trained.out .. "\n---\n" .. md)
    assert.truthy(md:find("^evaluated: cp/checkpoints/update_0000012%.mrck %(update 12%); 16 envs x 400 steps " ..
      "x 1 run, eval seed 12345\nenvironment: cartpole; the episodic protocol"), md)
    -- the rows, each mean with its 95% interval
    for _, row in ipairs({ "return", "episode length", "success" }) do
      assert.truthy(cell(md, row), row .. " missing:\n" .. md)
      assert.truthy(cell(md, row):match("^[%-%d%.]+%%? %[[%-%d%.]+, [%-%d%.]+%]$"), row .. ": " .. cell(md, row))
    end
    assert.truthy(md:find("the episode ran to its step limit (truncated, not terminated)", 1, true), md)
    assert.truthy(md:find("percentile bootstrap over agents (1000 resamples, seed 1)", 1, true), md)
    assert.is_nil(md:find("efficiency", 1, true))

    -- moonrl eval of the run: the same table and files
    local rc, out, err = moonrl("eval cp --envs 16 --steps 400 --out again", dir)
    assert.are.equal(0, rc, err)
    assert.are.equal(md, out)
    assert.are.equal(support.read_file(edir .. "/records.csv"), support.read_file(dir .. "/again/records.csv"))

    -- the records re-add to the table: every instance's 400 steps tiled, cartpole's return its length,
    -- success exactly a truncation, the means recomputed from the CSV
    local rows, cols = csv_rows(support.read_file(dir .. "/again/records.csv"))
    assert.are.same({ "source", "mode", "run", "env", "start", "length", "ended", "success", "return" }, cols)
    local next_start, ended, running, sum_ret, sum_len, succ = {}, 0, 0, 0, 0, 0
    for _, r in ipairs(rows) do
      local env, start, len = tonumber(r.env), tonumber(r.start), tonumber(r.length)
      assert.are.equal(next_start[env] or 0, start)
      next_start[env] = start + len
      assert.are.equal(len, tonumber(r["return"]))
      if r.ended == "running" then
        running = running + 1
        assert.are.equal("", r.success)
      else
        ended = ended + 1
        sum_ret, sum_len = sum_ret + tonumber(r["return"]), sum_len + len
        assert.are.equal(r.ended == "truncated" and "1" or "0", r.success)
        succ = succ + tonumber(r.success)
      end
    end
    for e = 0, 15 do assert.are.equal(400, next_start[e]) end
    assert.are.equal(string.format("%d / %d", ended, running), cell(md, "episodes ended / running"))
    local meta = json.decode(support.read_file(dir .. "/again/eval.json"))
    assert.are.equal("episodic", meta.protocol)
    assert.are.equal("cartpole", meta.sources[1].environment)
    local p = meta.results[1].point
    assert.are.near(sum_ret / ended, p.return_mean, 1e-9)
    assert.are.near(sum_len / ended, p.length_mean, 1e-9)
    assert.are.near(succ / ended, p.success_rate, 1e-12)
    local ci = meta.results[1].ci.return_mean
    assert.is_true(ci[1] <= p.return_mean and p.return_mean <= ci[2])
    assert.are.equal(string.format("%.2f", p.return_mean), cell(md, "return"):match("^(%S+)"))

    -- --from: the same table from the files alone
    rc, out, err = moonrl("eval --from again", dir)
    assert.are.equal(0, rc, err)
    assert.are.equal(md, out)
  end)

  it("--greedy and --episodes, --compare, and moonrl.eval_table", function()
    if not need_run() then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out, err = moonrl("eval cp --greedy --episodes 20 --envs 8 --steps 2000 --out none", dir)
    assert.are.equal(0, rc, err)
    assert.are.equal("20 / 0", cell(out, "episodes ended / running"))
    assert.truthy(out:find("(or 20 episodes a run), eval seed 12345, greedy actions", 1, true), out)
    assert.truthy(out:find("actions greedy (the most likely)", 1, true), out)

    rc, out, err = moonrl("eval --compare cp/checkpoints/update_0000006.mrck cp --envs 8 --steps 300", dir)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("comparison: cp (ground_truth) #2 against cp (ground_truth)", 1, true), out)
    local cmp = out:match("\ncomparison: .*$")
    assert.truthy(cmp and cell(cmp, "return", 3), out)
    assert.truthy(cell(cmp, "return", 3):match("^[%+%-][%d%.]+ %[[%+%-][%d%.]+, [%+%-][%d%.]+%]$"), cmp)
    assert.truthy(out:find("measurably", 1, true) or out:find("no measurable difference", 1, true), out)
    assert.are.same(FILES, support.files(dir .. "/cp/eval-compare"))

    support.write_file(dir .. "/table.lua", [[
local moonrl = require "moonrl"
local r = assert(moonrl.evaluate("cp", { num_envs = 8, steps = 300, greedy = true }))
print(r.protocol, r.environment, r.records.n > 0, r.success ~= nil, #r.counters)
io.write(moonrl.eval_table({ r }), "\n")
print(select(2, moonrl.evaluate("cp", { episodes = 0 })))
]])
    local md
    rc, md, err = moonrl("eval cp --envs 8 --steps 300 --greedy --out none", dir)
    assert.are.equal(0, rc, err)
    rc, out, err = moonrl("run table.lua", dir)
    assert.are.equal(0, rc, err)
    local first, rest = out:match("^([^\n]*)\n(.*)$")
    assert.are.equal("episodic\tcartpole\ttrue\ttrue\t0", first)
    assert.are.equal(md, rest:sub(1, #md))
    assert.truthy(rest:find("moonrl.evaluate: episodes must be an integer >= 1, got 0", 1, true), rest)
  end)

  it("refuses a bad option by name, saying what is accepted", function()
    if not need_run() then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out, err = moonrl("eval cp --protocol bogus", dir)
    assert.are.equal(2, rc, out)
    assert.truthy(err:find("--protocol bogus: accepted episodic", 1, true), err)
    rc, out, err = moonrl("eval cp --episodes 0", dir)
    assert.are.equal(2, rc, out)
    assert.truthy(err:find("--episodes", 1, true), err)
    rc, out, err = moonrl("eval cp --protocol survival --episodes 5", dir)
    assert.are.equal(2, rc, out)
    assert.truthy(err:find("--episodes is the episodic protocol's", 1, true), err)
    rc, out, err = moonrl("eval cp --protocol survival --envs 4 --steps 10 --out none", dir)
    assert.are.equal(1, rc, out)
    assert.truthy(err:find("env.name = cartpole: the survival protocol (efficiency, deaths, survival) needs a grid " ..
      "world", 1, true), err)
    rc, out, err = moonrl("eval cp --mode proxy --envs 4 --steps 10 --out none", dir)
    assert.are.equal(1, rc, out)
    assert.truthy(err:find("env.name = cartpole has only ground_truth", 1, true), err)
  end)
end)

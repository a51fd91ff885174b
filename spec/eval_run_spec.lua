-- The evaluation at the end of `moonrl train` is `moonrl eval`'s: the same
-- records, numbers, intervals and files, saved in the run directory; one
-- result folder per checkpoint (RUN_DIR/eval/update_NNNNNNN), so evaluating an
-- older checkpoint leaves the newest's alone, and readers (--from) find the
-- newest's; moonrl.eval_table prints the same table. Runs the built binary
-- (build/moonrl, or $MOONRL_BIN) and the real engine on the ci profile.

local support = require("support")
local json = require("moonrl.formats.json")

local BIN, have_bin = support.BIN, support.have_bin

local function moonrl(args, dir) return support.moonrl(args, dir, { timeout = 300 }) end

local FILES = { "eval.json", "eval.md", "eval.svg", "records.csv" }

local function read_all(d)
  local t = {}
  for _, f in ipairs(FILES) do t[f] = support.read_file(d .. "/" .. f) end
  return t
end

-- eval.json without the command line that made it
local function meta_of(text)
  local m = assert(json.decode(text))
  m.command = nil
  return m
end

describe("the evaluation at the end of training", function()
  local dir
  setup(function()
    if have_bin then dir = support.tmpdir() end
  end)
  teardown(function()
    if dir then support.rm_rf(dir) end
  end)

  local trained = false
  local function need_run()
    if not have_bin then return false end
    if not trained then
      -- 3 updates of 32 envs x 32 steps, checkpoints at updates 2 and 3
      local rc, out, err = moonrl("train --hardware ci --dir run --set total_steps=3072 --set log.console=false " ..
        "--set log.checkpoint_interval=2 --set log.checkpoint_keep=0 --set eval.num_envs=16 --set eval.steps=64", dir)
      assert.are.equal(0, rc, err)
      trained = { out = out, err = err }
    end
    return true
  end

  it("is saved in the run and equals moonrl eval of the same checkpoint and seed", function()
    if not need_run() then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local edir = dir .. "/run/eval/update_0000003"
    assert.are.same(FILES, support.files(edir))
    local saved = read_all(edir)
    -- the table printed at the end of training is the one saved
    assert.truthy(trained.out:find(saved["eval.md"], 1, true), trained.out .. "\n---\n" .. saved["eval.md"])
    assert.truthy(saved["eval.md"]:find("^evaluated: run/checkpoints/update_0000003%.mrck %(update 3%); " ..
      "16 envs x 64 steps x 1 run, eval seed 12345\n"), saved["eval.md"])
    for _, want in ipairs({ "efficiency, overall", "survival, KM median", "deaths / survivors (censored)",
      "percentile bootstrap over agents (1000 resamples, seed 1)" }) do
      assert.truthy(saved["eval.md"]:find(want, 1, true), want .. " missing:\n" .. saved["eval.md"])
    end
    assert.truthy(saved["eval.md"]:match("\n| energy/1k +| +[%+%-][%d%.]+ %[[%-%d%.]+, [%-%d%.]+%] |"), saved["eval.md"])

    local rc, out, err = moonrl("eval run --out again", dir)
    assert.are.equal(0, rc, err)
    local again = read_all(dir .. "/again")
    assert.are.equal(saved["eval.md"], again["eval.md"])
    assert.are.equal(saved["eval.md"], out)
    assert.are.equal(saved["records.csv"], again["records.csv"])
    assert.are.equal(saved["eval.svg"], again["eval.svg"])
    assert.are.same(meta_of(again["eval.json"]), meta_of(saved["eval.json"]))
    local meta = meta_of(saved["eval.json"])
    assert.are.equal("run/checkpoints/update_0000003.mrck", meta.sources[1].checkpoint)
    assert.are.equal(3, meta.sources[1].update)
    assert.are.equal(1000, meta.bootstrap.resamples)
    assert.is_table(meta.results[1].ci.eff_overall)
    assert.is_table(meta.results[1].km_median)
  end)

  it("keeps one result per checkpoint: an older one's beside the newest's, which stays as it was", function()
    if not need_run() then return pending("no binary at " .. BIN .. " (build it: make build)") end
    -- the newest first (the run directory: its newest checkpoint), then an older one
    local rc, out, err = moonrl("eval run --boot 200", dir)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("^evaluated: run/checkpoints/update_0000003%.mrck %(update 3%)"), out)
    local newest = dir .. "/run/eval/update_0000003"
    assert.are.same(FILES, support.files(newest))
    local before = read_all(newest)
    assert.are.equal(out, before["eval.md"])
    local mtime = support.uv.fs_stat(newest .. "/eval.json").mtime
    rc, out, err = moonrl("eval run/checkpoints/update_0000002.mrck --boot 100", dir)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("^evaluated: run/checkpoints/update_0000002%.mrck %(update 2%)"), out)
    assert.truthy(err:find("wrote run/eval/update_0000002/{records.csv, eval.json, eval.md, eval.svg}", 1, true), err)
    assert.are.same({ "update_0000002", "update_0000003" }, support.files(dir .. "/run/eval"))
    assert.are.same(FILES, support.files(dir .. "/run/eval/update_0000002"))
    assert.are.equal(out, support.read_file(dir .. "/run/eval/update_0000002/eval.md"))
    assert.are.same(before, read_all(newest))
    assert.are.same(mtime, support.uv.fs_stat(newest .. "/eval.json").mtime)

    -- readers of RUN_DIR/eval find the newest checkpoint's result
    for _, from in ipairs({ "run/eval", "run", "run/eval/" }) do
      rc, out, err = moonrl("eval --from " .. from, dir)
      assert.are.equal(0, rc, err)
      assert.are.equal(before["eval.md"], out)
      assert.truthy(err:find("the newest checkpoint's evaluation, run/eval/update_0000003", 1, true), err)
    end
    rc, out = moonrl("eval --from run/eval/update_0000002", dir)
    assert.are.equal(0, rc)
    assert.are.equal(support.read_file(dir .. "/run/eval/update_0000002/eval.md"), out)
    rc, _, err = moonrl("eval --from run/checkpoints", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("no eval.json in run/checkpoints", 1, true), err)
  end)

  it("moonrl.eval_table prints moonrl eval's table, intervals included", function()
    if not need_run() then return pending("no binary at " .. BIN .. " (build it: make build)") end
    support.write_file(dir .. "/table.lua", [[
local moonrl = require "moonrl"
local r = assert(moonrl.evaluate("run"))
io.write(moonrl.eval_table({ r }), "\n")
local ok, e = pcall(moonrl.eval_table, { { mode = "proxy", energy_per_1k = 1 } })
print(e)
]])
    local rc, md, err = moonrl("eval run --out none", dir)
    assert.are.equal(0, rc, err)
    local out
    rc, out, err = moonrl("run table.lua", dir)
    assert.are.equal(0, rc, err)
    assert.are.equal(md, out:sub(1, #md))
    assert.truthy(out:find("moonrl.eval_table: result 1 has no records", 1, true), out)
  end)

  it("finds the newest checkpoint's results under a run, its eval/ or a folder written before", function()
    local evalfiles = require("moonrl.eval.files")
    local util = require("moonrl.util")
    local root = support.tmpdir()
    local run = root .. "/run"
    for _, u in ipairs({ "update_0000002", "update_0000010", "update_0000009" }) do
      assert(util.mkdir_p(run .. "/eval/" .. u))
      support.write_file(run .. "/eval/" .. u .. "/eval.json", "{}")
    end
    assert(util.mkdir_p(run .. "/eval/notes"))   -- no eval.json: not a result
    assert.are.equal(run .. "/eval/update_0000010", evalfiles.newest(run))
    assert.are.equal(run .. "/eval/update_0000010", evalfiles.newest(run .. "/eval/"))
    assert.are.equal(run .. "/eval/update_0000002", evalfiles.newest(run .. "/eval/update_0000002"))
    -- a run evaluated before results were kept per checkpoint: RUN_DIR/eval itself
    local old = root .. "/old"
    assert(util.mkdir_p(old .. "/eval"))
    support.write_file(old .. "/eval/eval.json", "{}")
    assert.are.equal(old .. "/eval", evalfiles.newest(old))
    local none, e = evalfiles.newest(root .. "/nothing")
    assert.is_nil(none)
    assert.truthy(e:find("no eval.json in " .. root .. "/nothing", 1, true), e)
    assert.are.equal(run .. "/eval/update_0000007", evalfiles.dir_for(run .. "/checkpoints/update_0000007.mrck", run))
    assert.are.equal(root .. "/eval/final", evalfiles.dir_for(root .. "/final.mrck", nil))
    support.rm_rf(root)
  end)
end)

describe("moonrl.eval.progress", function()
  it("writes a line per tenth and the end; with `after`, a short evaluation writes nothing", function()
    local progress = require("moonrl.eval.progress")
    local lines = {}
    local p = progress.printer({ prefix = "moonrl eval: ", label = "x", write = function(s) lines[#lines + 1] = s end })
    for done = 0, 100 do p(done, 100) end
    assert.truthy(#lines >= 2, table.concat(lines))
    assert.truthy(lines[1]:find("^moonrl eval: x: 0%% of 100 steps, "), lines[1])
    assert.truthy(lines[#lines]:find("^moonrl eval: x: 100%% of 100 steps, "), lines[#lines])
    local quiet = {}
    p = progress.printer({ prefix = "moonrl.evaluate: ", after = 600, write = function(s) quiet[#quiet + 1] = s end })
    for done = 0, 100 do p(done, 100) end
    assert.are.same({}, quiet)
  end)
end)

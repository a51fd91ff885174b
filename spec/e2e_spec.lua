-- End to end: `moonrl train` on the ci hardware profile for a few updates,
-- then what it left in the run directory, then `moonrl eval` on its
-- checkpoint. Runs the built binary (build/moonrl, or $MOONRL_BIN) and the
-- real engine; sized to finish well under a minute on 2 cores.

local support = require("support")
local config = require("moonrl.config")
local json = require("moonrl.formats.json")
local util = require("moonrl.util")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

local function moonrl(args, dir)
  local out, err, rc = dir .. "/stdout", dir .. "/stderr", dir .. "/rc"
  os.execute(string.format("cd %q && timeout 300 %q %s >%q 2>%q; echo $? >%q", dir, BIN, args, out, err, rc))
  if (os.getenv("MOONRL_SPEC_SHOW") or "") ~= "" then
    io.stderr:write("\n$ moonrl ", args, "\n", support.read_file(out) or "", support.read_file(err) or "")
  end
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

-- The members of mr_metrics, read from the engine's header: every one must
-- reach metrics.jsonl.
local function metric_fields()
  local h = assert(support.read_file("src/engine/moonrl.h"))
  local body = assert(h:match("typedef struct mr_metrics%s*(%b{})"))
  body = body:gsub("/%*.-%*/", "")
  local names = {}
  for decl in body:sub(2, -2):gmatch("([^;]+);") do
    for name in decl:gsub("^%s*[%w_]+%s+", ""):gmatch("[%a_][%w_]*") do names[#names + 1] = name end
  end
  return names
end

local UPDATES = 3
local SETS = {
  "total_steps=" .. (UPDATES * 1024),          -- ci: 32 envs x 32 steps per update
  "log.checkpoint_interval=2", "log.checkpoint_keep=0",
  "eval.num_envs=16", "eval.steps=64",
}

describe("moonrl end to end", function()
  local dir
  setup(function()
    if have_bin then dir = support.tmpdir() end
  end)
  teardown(function()
    if dir then support.rm_rf(dir) end
  end)

  local run_dir = nil

  it("trains with --hardware ci and fills the run directory", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local args = { "train", "--hardware ci", "--dir run" }
    for _, s in ipairs(SETS) do args[#args + 1] = "--set " .. s end
    local t0 = os.time()
    local rc, out, err = moonrl(table.concat(args, " "), dir)
    assert.are.equal(0, rc, err)
    assert.truthy(os.time() - t0 < 120, "took " .. (os.time() - t0) .. " s")
    assert.truthy(out:find("run directory: run\n", 1, true), out)
    run_dir = dir .. "/run"

    -- config.lua reads back as the config that was resolved
    local loaded = assert(config.load_file(run_dir .. "/config.lua"))
    -- the level (advanced) asks for bf16: it runs where the CPU has AMX
    -- (the engine line says so), else fp32 with a note
    local bf16 = loaded.precision == "bf16"
    if bf16 then
      assert.truthy(out:find("engine: cpu backend, 2 threads, bf16 (oneDNN avx512_core", 1, true), out)
    else
      -- (a level's default: the note goes to train.log; the terminal gets it with --verbose)
      local log = support.read_file(run_dir .. "/train.log")
      assert.truthy(log:find("precision = bf16 (from level advanced) does not apply on cpu", 1, true), log)
    end
    local expect = assert(config.resolve { sets = SETS, hardware = "ci",
      detect = function() return { gpus = 0, cpu_bf16 = bf16 and "avx512_core_amx" or nil } end,
      file = config.default_file() })
    -- (without dir: the file copied to start a new run gets a new directory)
    assert.truthy(util.deep_equal(loaded, expect),
      "config.lua differs from the resolved config:\n" .. config.serialize(loaded) .. "\nvs\n" .. config.serialize(expect))

    -- metrics.jsonl: one object per (non-warm-up) update with every mr_metrics field
    local lines = support.lines(assert(support.read_file(run_dir .. "/metrics.jsonl")))
    assert.are.equal(UPDATES, #lines)
    local fields = metric_fields()
    assert.truthy(#fields >= 30, "read " .. #fields .. " fields from moonrl.h")
    for i, line in ipairs(lines) do
      local m = assert(json.decode(line))
      for _, f in ipairs(fields) do
        assert.truthy(m[f] ~= nil, "metrics.jsonl line " .. i .. " lacks " .. f)
      end
      assert.are.equal(i, m.update)
      assert.are.equal(i * 1024, m.agent_steps)
      assert.truthy(math.abs(m.progress - i / UPDATES) < 1e-12)
      assert.truthy(m.sps > 0)
    end

    -- TensorBoard, checkpoints, the plain log
    local files = support.files(run_dir)
    local tb
    for _, f in ipairs(files) do if f:match("^events%.out%.tfevents%.") then tb = f end end
    assert.truthy(tb, "no events.out.tfevents.* in " .. table.concat(files, " "))
    assert.truthy(#support.read_file(run_dir .. "/" .. tb) > 0)
    assert.are.same({ "update_0000002.mrck", "update_0000003.mrck" }, support.files(run_dir .. "/checkpoints"))
    local log = assert(support.read_file(run_dir .. "/train.log"))
    assert.truthy(log:find("engine: ", 1, true), log)
    assert.truthy(log:find("finished: done after " .. UPDATES .. " updates", 1, true), log)

    -- the summary ends with the evaluation of the trained mode (eval_run_spec.lua: as moonrl eval's)
    assert.truthy(out:find("done after " .. UPDATES .. " updates", 1, true), out)
    assert.truthy(out:find("\nevaluated: run/checkpoints/update_0000003.mrck (update 3); 16 envs x 64 steps", 1, true), out)
    assert.truthy(out:match("\n| metric +| +ground_truth |"), out)
    assert.truthy(out:match("\n| efficiency, overall +| +[%d%.]+%% %[[%d%.]+, [%d%.]+%] |"), out)
  end)

  it("evaluates the checkpoint with moonrl eval", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    assert.truthy(run_dir, "the training case must run first")
    local ckpt = run_dir .. "/checkpoints/update_0000003.mrck"
    local rc, out, err = moonrl("eval " .. ckpt .. " --envs 16 --steps 64 --mode all --boot 200", dir)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("^evaluated: " .. ckpt:gsub("%p", "%%%0") .. " %(update 3%); 16 envs x 64 steps x 1 run, eval seed 12345\n"), out)
    local header = out:match("^[^\n]+\n\n([^\n]+)\n")
    local modes = { "ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy" }
    assert.truthy(header:find("| metric", 1, true), header)
    for _, mode in ipairs(modes) do assert.truthy(header:find(" " .. mode .. " |", 1, true), header) end
    for _, metric in ipairs({ "energy/1k", "efficiency, overall", "efficiency, per-death mean",
      "efficiency, per-env mean", "survival, mean over deaths", "survival, KM median", "deaths/1k", "food/1k",
      "poison/1k" }) do
      local row = out:match("\n| (" .. metric:gsub("[%-/]", "%%%0") .. " +|[^\n]+)")
      assert.truthy(row, metric .. " missing:\n" .. out)
      local cells = {}
      for c in row:gmatch("([^|]+)|") do cells[#cells + 1] = c:match("^%s*(.-)%s*$") end
      assert.are.equal(5, #cells, row)
      if metric == "efficiency, overall" then
        for i = 2, 5 do
          local eff = tonumber(cells[i]:match("^([%d%.]+)%%"))
          assert.truthy(eff and eff >= 0 and eff <= 100, row)
        end
      end
    end
    assert.truthy(out:find("definitions (docs/evaluation.md):", 1, true), out)

    -- beside the table: the records re-add to the engine's own totals exactly
    local edir = run_dir .. "/eval/update_0000003"   -- one folder per checkpoint
    assert.are.same({ "eval.json", "eval.md", "eval.svg", "records.csv" }, support.files(edir))
    local meta = assert(json.decode(support.read_file(edir .. "/eval.json")))
    assert.are.equal(4, #meta.sources)
    local sums = {}
    for k = 1, 4 do sums[k] = { food = 0, poison = 0, steps = 0, deaths = 0, n = 0 } end
    local lines = support.lines(support.read_file(edir .. "/records.csv"))
    assert.are.equal("source,mode,run,env,died,steps,start,food,poison,reward,energy_gained,final_energy", lines[1])
    for i = 2, #lines do
      local v = {}
      for c in (lines[i] .. ","):gmatch("([^,]*),") do v[#v + 1] = c end
      local t = sums[tonumber(v[1])]
      t.died = nil
      t.deaths = t.deaths + tonumber(v[5])
      t.steps, t.food, t.poison, t.n = t.steps + tonumber(v[6]), t.food + tonumber(v[8]), t.poison + tonumber(v[9]), t.n + 1
    end
    for k, src in ipairs(meta.sources) do
      assert.are.equal(modes[k], src.mode)
      assert.are.same({ 12345 }, src.eval.run_seeds)
      local e, t = src.engine_table, sums[k]
      assert.are.equal(16 * 64, t.steps)
      assert.are.equal(t.n - 16, t.deaths)
      local kk = 1000 / t.steps
      assert.are.equal(e.food_per_1k, t.food * kk)
      assert.are.equal(e.poison_per_1k, t.poison * kk)
      assert.are.equal(e.deaths_per_1k, t.deaths * kk)
      assert.are.equal(e.survival, t.steps / t.n)
      assert.are.equal(meta.results[k].deaths, t.deaths)
    end
    assert.truthy(support.read_file(edir .. "/eval.svg"):find("^<svg"))

    -- the table again from the files alone
    local rc2, out2 = moonrl("eval --from " .. edir, dir)
    assert.are.equal(0, rc2)
    assert.are.equal(out, out2)

    rc, _, err = moonrl("eval " .. run_dir .. "/config.lua", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("config.lua", 1, true), err)
  end)

  it("compares two checkpoints with moonrl eval --compare", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    assert.truthy(run_dir, "the training case must run first")
    local a, b = run_dir .. "/checkpoints/update_0000002.mrck", run_dir .. "/checkpoints/update_0000003.mrck"
    local rc, out, err = moonrl("eval --compare " .. a .. " " .. b .. " --envs 16 --steps 64 --boot 100 --out cmp", dir)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("comparison: ", 1, true), out)
    assert.truthy(out:find("difference [95% CI]", 1, true), out)
    assert.truthy(out:find("measurably worse") or out:find("measurably better") or
      out:find("no measurable difference"), out)
    assert.are.same({ "eval.json", "eval.md", "eval.svg", "records.csv" }, support.files(dir .. "/cmp"))
  end)

  it("refuses a typo'd key with a did-you-mean and a non-zero exit", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out, err = moonrl("train --hardware ci --set ppo.lrr=1e-4", dir)
    assert.are_not.equal(0, rc)
    assert.truthy(err:find("unknown key 'ppo.lrr' - did you mean 'ppo.lr'?", 1, true), err)
    assert.falsy(out:find("run directory", 1, true))
  end)
end)

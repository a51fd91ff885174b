local config = require("moonrl.config")
local schedule = require("moonrl.schedule")
local util = require("moonrl.util")
local support = require("support")

local function no_gpu() return { gpus = 0, cores = 2, memory = 8e9 } end
local function one_gpu() return { gpus = 1, cores = 16, memory = 128e9 } end

local function contains(list, s)
  for _, x in ipairs(list) do if x == s then return true end end
  return false
end

describe("moonrl.config", function()
  local tmp
  before_each(function() tmp = support.tmpdir() end)
  after_each(function() support.rm_rf(tmp) end)

  describe("defaults", function()
    it("are complete, valid and fresh on every call", function()
      local a, b = config.defaults(), config.defaults()
      assert.is_true(config.validate(a))
      assert.equal(192, a.env.num_envs)
      assert.same({ 32, 64, 64 }, a.policy.conv_channels)
      assert.same(schedule.linear(3e-4, 1e-4), a.ppo.lr)
      a.policy.conv_channels[1] = 1
      a.env.num_envs = 7
      assert.same({ 32, 64, 64 }, b.policy.conv_channels)
      assert.same({ 32, 64, 64 }, config.defaults().policy.conv_channels)
      assert.equal(192, config.defaults().env.num_envs)
    end)
  end)

  describe("merge", function()
    it("merges sections deeply and replaces lists and schedules", function()
      local base = config.defaults()
      local m = config.merge(base, {
        env = { num_envs = 8 },
        policy = { conv_channels = { 4 } },
        ppo = { lr = { kind = "step", from = 1e-3, gamma = 0.5, every = 0.5 } },
        extra = { a = { b = 1 } },
      })
      assert.equal(8, m.env.num_envs)
      assert.equal(128, m.env.grid_size)                      -- kept from base
      assert.same({ 4 }, m.policy.conv_channels)              -- replaced, not {4, 64, 64}
      assert.is_nil(m.ppo.lr.to)                              -- base's linear `to` not mixed in
      assert.equal("step", m.ppo.lr.kind)
      assert.same({ a = { b = 1 } }, m.extra)
      -- inputs untouched
      assert.equal(192, base.env.num_envs)
      assert.same({ 32, 64, 64 }, base.policy.conv_channels)
    end)

    it("lets a later table replace a warmup function and vice versa", function()
      local f = function() return {} end
      local m = config.merge({ warmup = { updates = 1 } }, { warmup = f })
      assert.equal(f, m.warmup)
      m = config.merge(m, { warmup = { updates = 3 } })
      assert.same({ updates = 3 }, m.warmup)
    end)
  end)

  describe("load_file", function()
    it("runs a config file with the schedule constructors and no globals leaking", function()
      local path = support.write_file(tmp .. "/exp.lua", [[
leaked_global = 1
local steps = 2 ^ 20
return {
  total_steps = steps,
  ppo = { lr = linear(1e-3, 1e-4), clip = cosine(0.2, 0.1), ent_coef = step(0.1, 0.5, 0.25, 0.01),
          vf_coef = moonrl.schedule.constant(0.5).from },
  has_execute = os.execute ~= nil,
  has_io = io ~= nil,
}
]])
      local t, err = config.load_file(path)
      assert.is_nil(err)
      assert.equal(1048576, t.total_steps)
      assert.same({ kind = "linear", from = 1e-3, to = 1e-4 }, t.ppo.lr)
      assert.same({ kind = "cosine", from = 0.2, to = 0.1 }, t.ppo.clip)
      assert.same({ kind = "step", from = 0.1, gamma = 0.5, every = 0.25, to = 0.01 }, t.ppo.ent_coef)
      assert.equal(0.5, t.ppo.vf_coef)
      assert.is_false(t.has_execute)
      assert.is_false(t.has_io)
      assert.is_nil(rawget(_G, "leaked_global"))
    end)

    it("reports a syntax error with file:line", function()
      local path = support.write_file(tmp .. "/syntax.lua", "return {\n  ppo = {\n    lr = 1e-4\n    epochs = 4,\n  },\n}\n")
      local t, err = config.load_file(path)
      assert.is_nil(t)
      assert.matches("^" .. path:gsub("%p", "%%%0") .. ":4: syntax error: ", err)
    end)

    it("reports a runtime error with file:line", function()
      local path = support.write_file(tmp .. "/runtime.lua", "local x = 1\nlocal y = x.field.other\nreturn {}\n")
      local t, err = config.load_file(path)
      assert.is_nil(t)
      assert.matches("^" .. path:gsub("%p", "%%%0") .. ":2: attempt to index", err)
    end)

    it("points at the file's line when a constructor rejects its arguments", function()
      local path = support.write_file(tmp .. "/ctor.lua", "return {\n  ppo = {\n    lr = linear('fast', 1e-4),\n  },\n}\n")
      local _, err = config.load_file(path)
      assert.matches(path:gsub("%p", "%%%0") .. ":3: linear%(from, to%): from must be a finite number, got string \"fast\"", err)
    end)

    it("suggests a constructor for a misspelt call", function()
      local path = support.write_file(tmp .. "/typo.lua", "return { ppo = { lr = linaer(1, 0) } }\n")
      local _, err = config.load_file(path)
      assert.matches(":1: attempt to call global 'linaer' %(a nil value%) %- did you mean 'linear'%?$", err)
    end)

    it("requires a returned table and an existing file", function()
      local path = support.write_file(tmp .. "/noreturn.lua", "x = 1\n")
      local _, err = config.load_file(path)
      assert.matches("returned nil, expected a table: end the file with `return { ... }`", err)
      _, err = config.load_file(tmp .. "/missing.lua")
      assert.matches("^cannot open config file .*missing.lua", err)
    end)
  end)

  describe("parse_set", function()
    it("reads numbers, booleans, strings, lists and schedules", function()
      assert.same({ "ppo.lr", 1e-4 }, { config.parse_set("ppo.lr=1e-4") })
      assert.same({ "env.num_envs", 64 }, { config.parse_set(" env.num_envs = 64 ") })
      assert.same({ "policy.popart", false }, { config.parse_set("policy.popart=false") })
      assert.same({ "env.mode", "proxy" }, { config.parse_set("env.mode=proxy") })
      assert.same({ "env.mode", "proxy" }, { config.parse_set('env.mode="proxy"') })
      assert.same({ "env.num_envs", "auto" }, { config.parse_set("env.num_envs=auto") })
      assert.same({ "policy.conv_channels", { 32, 64 } }, { config.parse_set("policy.conv_channels={32,64}") })
      assert.same({ "ppo.lr", { kind = "linear", from = 1e-3, to = 1e-4 } }, { config.parse_set("ppo.lr=linear(1e-3,1e-4)") })
      assert.same({ "dir", "" }, { config.parse_set("dir=") })
      assert.same({ "name", "a=b" }, { config.parse_set("name=a=b") })
    end)

    it("takes a value for a string key as text, whatever it looks like", function()
      assert.same({ "name", "2024" }, { config.parse_set("name=2024") })
      assert.same({ "name", "nan" }, { config.parse_set("name=nan") })
      assert.same({ "name", "true" }, { config.parse_set("name=true") })
      assert.same({ "name", "1e3" }, { config.parse_set('name="1e3"') })
      assert.same({ "dir", "runs/2024" }, { config.parse_set("dir=runs/2024") })
      -- and the whole config accepts it
      local cfg = assert(config.resolve({ sets = { "name=2024", "hardware=ci" } }))
      assert.equal("2024", cfg.name)
    end)

    it("reads a value as data: no Lua in it runs (issue 43)", function()
      -- each of these ran as Lua before: a function, a string method, math, an operator
      for _, v in ipairs({ 'linear(#("x"):rep(10), 1)', "{(function() return 1 end)()}", "linear(math.pi, 1)",
        "constant(1e-3 * 2)", "function(p) return p end", "linear(1, 2) or 3" }) do
        local k, err = config.parse_set("ppo.lr=" .. v)
        assert.is_nil(k, v)
        assert.matches("^%-%-set ppo.lr: cannot read the value .*; a value is a number, true, false, a quoted string", err)
      end
      -- the grammar: numbers, strings with escapes, booleans, tables, the schedule constructors
      assert.same({ "ppo.lr", { kind = "step", from = 1, gamma = 0.5, every = 0.25 } },
        { config.parse_set("ppo.lr=step(1, 0.5, 0.25)") })
      assert.same({ "x.y", { -1, 0x10, true, "a\n\"b'", { c = { d = false } }, ["e f"] = 0.5, [3.5] = ".5" } },
        { config.parse_set([[x.y={-1; 0x10, true, "a\n\"b'", {c = {d = false}}, ["e f"] = .5, [3.5] = '.5',}]]) })
      local _, err = config.parse_set("ppo.lr=linaer(1, 2)")
      assert.matches("unknown function 'linaer' %- did you mean 'linear'%?", err)
      _, err = config.parse_set("ppo.lr=" .. string.rep("{", 100) .. string.rep("}", 100))
      assert.matches("values nested more than 16 deep", err)
    end)

    it("names the bad text", function()
      assert.same({ nil, '--set "ppo.lr": expected key=value, e.g. ppo.lr=1e-4' }, { config.parse_set("ppo.lr") })
      assert.same({ nil, '--set "ppo..lr=1": bad key "ppo..lr": keys are dotted names such as ppo.lr' },
        { config.parse_set("ppo..lr=1") })
      local _, err = config.parse_set("ppo.lr=linear(1e-3,")
      assert.matches('^%-%-set ppo.lr: cannot read the value "linear%(1e%-3,": ', err)
      _, err = config.parse_set("policy.conv_channels={32,,64}")
      assert.matches('cannot read the value "{32,,64}"', err)
    end)
  end)

  describe("validate", function()
    local function errors_of(over)
      local ok, err = config.validate(config.merge(config.defaults(), over))
      assert.is_nil(ok)
      return support.lines(err .. "\n")
    end

    it("accepts the defaults and names a missing key", function()
      assert.is_true(config.validate(config.defaults()))
      local t = config.defaults()
      t.ppo.epochs = nil
      t.eval = nil
      local _, err = config.validate(t)
      assert.matches("ppo.epochs is missing %(default 4%)", err)
      assert.matches("eval is missing", err)
    end)

    it("unknown key with a did-you-mean", function()
      assert.same({ "unknown key 'ppo.lerning_rate' - did you mean 'ppo.lr'?" }, errors_of { ppo = { lerning_rate = 1e-4 } })
      assert.same({ "unknown key 'ppo.gama' - did you mean 'ppo.gamma'?" }, errors_of { ppo = { gama = 0.9 } })
      assert.same({ "unknown key 'lr' - did you mean 'ppo.lr'?" }, errors_of { lr = 1e-4 })
      assert.same({ "unknown key 'env.epochs' - did you mean 'ppo.epochs'?" }, errors_of { env = { epochs = 2 } })
      -- nothing near: what is accepted there
      local e = errors_of { ppo = { zzzzzz = 1 } }
      assert.equal(1, #e)
      assert.matches("^unknown key 'ppo.zzzzzz'; ppo accepts rollout_steps, epochs, .*, lr, clip, ", e[1])
      e = errors_of { zzzzzz = 1 }
      assert.matches("^unknown key 'zzzzzz'; accepted at the top: name, .*total_steps.* and the sections env, policy, ppo, ", e[1])
      assert.matches("docs/config.md lists every key", e[1], 1, true)
    end)

    it("near-misses in section names", function()
      assert.same({ "unknown key 'ppoo' - did you mean 'ppo'?" }, errors_of { ppoo = { lr = 1 } })
      assert.same({ "unknown key 'pop' - did you mean 'ppo'?" }, errors_of { pop = { lr = 1 } })
      assert.same({ "unknown key 'cdua.graphs' - did you mean 'cuda.graphs'?" }, errors_of { ["cdua.graphs"] = false })
      assert.same({ "unknown key 'training.lr' - did you mean 'ppo.lr'?" }, errors_of { training = { lr = 1 } })
    end)

    it("wrong type", function()
      assert.same({ 'ppo.lr: expected a number or schedule, got string "fast"' }, errors_of { ppo = { lr = "fast" } })
      assert.same({ 'env.grid_size: expected an integer, got string "big"' }, errors_of { env = { grid_size = "big" } })
      assert.same({ 'env: expected a table (the env section), got number 5' }, errors_of { env = 5 })
    end)

    it("out of range", function()
      assert.same({ 'env.num_envs = 0 is out of range: accepted 1 .. 1048576 or "auto"' }, errors_of { env = { num_envs = 0 } })
      assert.same({ "ppo.gamma = 1.01 is out of range: accepted 0 .. 1" }, errors_of { ppo = { gamma = 1.01 } })
    end)

    it("bad enum", function()
      assert.same({ 'env.mode = "proxyy": accepted "ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy" - did you mean "proxy"?' },
        errors_of { env = { mode = "proxyy" } })
      assert.same({ 'precision = "fp8": accepted "fp32", "bf16", "fp16"' }, errors_of { precision = "fp8" })
    end)

    it("bad list element", function()
      assert.same({ "policy.conv_channels[2] = -1 is out of range: accepted 1 .. 1024" },
        errors_of { policy = { conv_channels = { 16, -1 } } })
      assert.same({ "policy.conv_channels[1]: expected an integer, got number 2.5" },
        errors_of { policy = { conv_channels = { 2.5 } } })
    end)

    it("bad schedule", function()
      assert.same({ 'ppo.clip.kind = "linar": accepted "constant", "linear", "cosine", "step" - did you mean "linear"?' },
        errors_of { ppo = { clip = { kind = "linar", from = 0.2, to = 0.1 } } })
      assert.same({ "ppo.lr.to = 2 is out of range: accepted 0 .. 1" }, errors_of { ppo = { lr = schedule.linear(1e-3, 2) } })
      assert.same({ "ppo.lr: a linear schedule needs from, to; to is missing" }, errors_of { ppo = { lr = { kind = "linear", from = 1 } } })
    end)

    it("keys that disagree with each other", function()
      assert.same({ "env.density_min = 300 is greater than env.density_max = 256: accepted density_min <= density_max" },
        errors_of { env = { density_min = 300 } })
      assert.same({ "env.density_max = 100 does not fit a 8 x 8 grid: food + poison + the agent need 2 * density_max + 1 <= grid_size^2 cells" },
        errors_of { env = { grid_size = 8, density_min = 1, density_max = 100, view_range = 3 } })
      assert.same({ "alerts.memory_warning = 0.99 is above alerts.memory_critical = 0.95: accepted memory_warning <= memory_critical" },
        errors_of { alerts = { memory_warning = 0.99 } })
      assert.same({ "ppo.minibatches = 5 does not divide the batch of 24576 samples (env.num_envs 192 x ppo.rollout_steps 128): accepted a divisor of 24576" },
        errors_of { ppo = { minibatches = 5 } })
      assert.is_true(config.validate(config.merge(config.defaults(), { ppo = { minibatches = 4 } })))
      assert.same({ "env.num_envs x ppo.rollout_steps = 68719476736 samples is too large: accepted up to 2^31 = 2147483648" },
        errors_of { env = { num_envs = 1048576 }, ppo = { rollout_steps = 65536 } })
    end)

    it("collects every error, one a line", function()
      local errs = errors_of {
        ppo = { lerning_rate = 1, lr = "fast", gamma = 2 },
        env = { mode = "proxyy", num_envs = 0 },
        policy = { conv_channels = { 1, 0 } },
        bogus = true,
      }
      assert.equal(7, #errs)
      for _, key in ipairs({ "ppo.lerning_rate", "ppo.lr", "ppo.gamma", "env.mode", "env.num_envs", "policy.conv_channels", "bogus" }) do
        local found = false
        for _, e in ipairs(errs) do if e:find(key, 1, true) then found = true end end
        assert.is_true(found, key .. " not reported")
      end
    end)
  end)

  describe("get and set", function()
    it("get reads a dotted key and names an unknown one", function()
      local t = config.defaults()
      assert.equal(0.99, config.get(t, "ppo.gamma"))
      assert.same({ 32, 64, 64 }, config.get(t, "policy.conv_channels"))
      assert.is_nil(config.get(t, "dir"))
      assert.same({ nil, "unknown key 'ppo.gama' - did you mean 'ppo.gamma'?" }, { config.get(t, "ppo.gama") })
    end)

    it("set validates the one key and normalises schedules", function()
      local t = config.defaults()
      assert.is_true(config.set(t, "ppo.lr", 1e-4))
      assert.same({ kind = "constant", from = 1e-4, to = 1e-4 }, t.ppo.lr)
      assert.is_true(config.set(t, "env.num_envs", "auto"))
      assert.equal("auto", t.env.num_envs)
      assert.same({ nil, "ppo.gamma = 2 is out of range: accepted 0 .. 1" }, { config.set(t, "ppo.gamma", 2) })
      assert.equal(0.99, t.ppo.gamma)
      assert.same({ nil, "unknown key 'ppo.lerning_rate' - did you mean 'ppo.lr'?" }, { config.set(t, "ppo.lerning_rate", 1) })
    end)

    it("refuses a non-hot key while running, allows a hot one", function()
      local t = config.defaults()
      local ok, err = config.set(t, "ppo.epochs", 8, { running = true })
      assert.is_nil(ok)
      assert.matches("^ppo.epochs is not hot: it cannot change while the run is going %(hot keys: .*ppo.lr", err)
      assert.equal(4, t.ppo.epochs)
      assert.is_true(config.set(t, "ppo.lr", schedule.cosine(1e-3, 0), { running = true }))
      assert.equal("cosine", t.ppo.lr.kind)
      assert.is_true(config.set(t, "total_steps", 1000, { running = true }))
      assert.is_true(config.set(t, "alerts.sps_min", 5000, { running = true }))
      assert.is_true(config.set(t, "ppo.epochs", 8))
      assert.equal(8, t.ppo.epochs)
    end)
  end)

  describe("resolve", function()
    -- A config directory of our own, so every layer is visible.
    local function layered_dir()
      local dir = tmp .. "/configs"
      assert(support.uv.fs_mkdir(dir, 493))
      assert(support.uv.fs_mkdir(dir .. "/hardware", 493))
      assert(support.uv.fs_mkdir(dir .. "/levels", 493))
      -- (named like the shipped files: the names are an enum)
      support.write_file(dir .. "/hardware/cpu.lua",
        "return { device = 'cpu', seed = 10, threads = 10, total_steps = 10, ppo = { epochs = 10 } }")
      support.write_file(dir .. "/hardware/ci.lua", "return { device = 'cpu', seed = 77 }")
      support.write_file(dir .. "/levels/basic.lua", "return { threads = 20, total_steps = 20, ppo = { epochs = 20 } }")
      support.write_file(dir .. "/levels/ultra.lua", "return { threads = 22 }")
      support.write_file(dir .. "/exp.lua", "return { hardware = 'cpu', level = 'basic', total_steps = 30, ppo = { epochs = 30 } }")
      return dir
    end

    it("merges defaults < profile < level < file < sets", function()
      local dir = layered_dir()
      local r, notes = config.resolve { config_dir = dir, file = dir .. "/exp.lua", sets = { "ppo.epochs=40" }, detect = no_gpu }
      assert.is_table(r, notes)
      assert.equal(0.99, r.ppo.gamma)  -- defaults
      assert.equal(10, r.seed)         -- profile
      assert.equal(20, r.threads)      -- level over profile
      assert.equal(30, r.total_steps)  -- file over level
      assert.equal(40, r.ppo.epochs)   -- sets over file
      assert.equal("cpu", r.hardware)
      assert.equal("basic", r.level)
      -- without the sets, the file wins; without the file, the level
      r = config.resolve { config_dir = dir, file = dir .. "/exp.lua", detect = no_gpu }
      assert.equal(30, r.ppo.epochs)
      r = config.resolve { config_dir = dir, hardware = "cpu", level = "basic", detect = no_gpu }
      assert.equal(20, r.ppo.epochs)
      assert.equal(20, r.total_steps)
      assert.equal(10, r.seed)
      -- and the profile over the defaults
      r = config.resolve { config_dir = dir, hardware = "cpu", level = "ultra", detect = no_gpu }
      assert.equal(10, r.ppo.epochs)
      assert.equal(4, config.defaults().ppo.epochs)
    end)

    it("takes profile and level names from sets over the file, and from opts over both", function()
      local dir = layered_dir()
      local r = config.resolve { config_dir = dir, file = dir .. "/exp.lua", sets = { "hardware=ci", "level=ultra" } }
      assert.equal("ci", r.hardware)
      assert.equal(77, r.seed)
      assert.equal(22, r.threads)
      r = config.resolve { config_dir = dir, file = dir .. "/exp.lua", sets = { "hardware=ci" }, hardware = "cpu", level = "ultra" }
      assert.equal("cpu", r.hardware)
      assert.equal(10, r.seed)
      assert.equal(22, r.threads)
    end)

    it("accepts a table as the experiment and does not change it", function()
      local exp = { hardware = "cpu", ppo = { epochs = 2 } }
      local r = config.resolve { file = exp, detect = no_gpu }
      assert.equal(2, r.ppo.epochs)
      assert.same({ hardware = "cpu", ppo = { epochs = 2 } }, exp)
    end)

    it("picks the hardware profile from the detected GPUs when hardware = auto", function()
      local r, notes = config.resolve { detect = no_gpu }
      assert.equal("cpu", r.hardware)
      assert.equal("cpu", r.device)
      assert.same({ 16, 32 }, r.policy.conv_channels)
      assert.is_true(contains(notes, "hardware = auto: 0 GPUs detected, using profile cpu"))
      r, notes = config.resolve { detect = one_gpu }
      assert.equal("cuda", r.hardware)
      assert.equal("cuda", r.device)
      assert.equal("bf16", r.precision)
      assert.same({ 32, 64, 64 }, r.policy.conv_channels)
      assert.is_true(contains(notes, "hardware = auto: 1 GPU detected, using profile cuda"))
      -- a detector that fails means no GPU, said once
      r, notes = config.resolve { detect = function() error("no driver") end }
      assert.equal("cpu", r.hardware)
      assert.matches("hardware detection failed %(.*no driver%): assuming no GPU", notes[1])
    end)

    it("says nothing of gpu_only settings a file sets to what the level gives (a run's config.lua run again)", function()
      local r = config.resolve { hardware = "cpu", detect = no_gpu }
      local path = support.write_file(tmp .. "/again.lua", config.serialize(r))
      local _, notes = config.resolve { file = path, hardware = "cpu", detect = no_gpu }
      for _, n in ipairs(notes) do assert.is_nil(n:find("(from file", 1, true), n) end
      -- a file that sets one to another value is told
      support.write_file(path, "return { cuda = { device_index = 1 } }")
      _, notes = config.resolve { file = path, hardware = "cpu", detect = no_gpu }
      local told = false
      for _, n in ipairs(notes) do told = told or (n:find("cuda.device_index = 1 (from", 1, true) ~= nil) end
      assert.is_true(told, table.concat(notes, "\n"))
    end)

    it("reports gpu_only settings from a level as not applying on cpu", function()
      local r, notes = config.resolve { hardware = "cpu", detect = no_gpu }
      assert.equal("fp32", r.precision)
      assert.is_true(contains(notes, "precision = bf16 (from level advanced) does not apply on cpu (no AVX512-BF16 or AMX on this CPU): using fp32"), table.concat(notes, "\n"))
      assert.is_true(contains(notes,
        'cuda.graphs = true (from level advanced) does not apply on cpu'),
        table.concat(notes, "\n"))
      r, notes = config.resolve { hardware = "cpu", level = "ultra", detect = no_gpu }
      assert.equal("fp32", r.precision)
      assert.is_true(contains(notes, "precision = fp16 (from level ultra) does not apply on cpu: using fp32"))
      -- a CPU with AMX (detect().cpu_bf16, from oneDNN): advanced runs bf16
      -- silently (the trainer's description says it), ultra's fp16 becomes
      -- bf16 with one note, basic stays fp32
      local amx_cpu = function() return { gpus = 0, cpu_bf16 = "avx512_core_amx" } end
      r, notes = config.resolve { hardware = "cpu", detect = amx_cpu }
      assert.equal("bf16", r.precision)
      for _, n in ipairs(notes) do assert.falsy(n:find("precision", 1, true), n) end
      r, notes = config.resolve { hardware = "cpu", level = "ultra", detect = amx_cpu }
      assert.equal("bf16", r.precision)
      assert.is_true(contains(notes, "precision = fp16 (from level ultra) does not apply on cpu: using bf16 (oneDNN avx512_core_amx)"), table.concat(notes, "\n"))
      assert.equal("fp32", config.resolve { hardware = "cpu", level = "basic", detect = amx_cpu }.precision)
      -- AVX512-BF16 without AMX: bf16 trains no faster than fp32 there, so
      -- the levels run fp32 with one note; the experiment's bf16 still runs
      local bf16_cpu = function() return { gpus = 0, cpu_bf16 = "avx512_core_bf16" } end
      for _, level in ipairs { "advanced", "ultra" } do
        r, notes = config.resolve { hardware = "cpu", level = level, detect = bf16_cpu }
        assert.equal("fp32", r.precision)
        assert.is_true(contains(notes, "precision = " .. (level == "ultra" and "fp16" or "bf16") .. " (from level " ..
          level .. ") does not apply on cpu (AVX512-BF16 without AMX on this CPU: bf16 trains no faster than fp32; " ..
          'precision = "bf16" in the experiment runs it): using fp32'), table.concat(notes, "\n"))
      end
      assert.equal("bf16", config.resolve { hardware = "cpu", sets = { "precision=bf16" }, detect = bf16_cpu }.precision)
      local path = support.write_file(tmp .. "/bf16.lua", "return { precision = 'bf16' }")
      assert.equal("bf16", config.resolve { file = path, hardware = "cpu", detect = bf16_cpu }.precision)
      -- basic asks for nothing GPU-only: nothing to report
      r, notes = config.resolve { hardware = "cpu", level = "basic", detect = no_gpu }
      assert.same({ "budget: total_steps = 524288 (128 updates of 64 envs x 64 steps) from profile cpu" }, notes)
      -- on a GPU the same settings apply silently
      r, notes = config.resolve { hardware = "cuda", detect = one_gpu }
      assert.equal("bf16", r.precision)
      assert.same({ "budget: total_steps = 50331648 (2048 updates of 192 envs x 128 steps) from defaults" }, notes)
    end)

    it("refuses fp16 the user set on cpu; bf16 the user set falls back to fp32 with a note where the CPU lacks it", function()
      local r, notes = config.resolve { hardware = "cpu", sets = { "precision=bf16" }, detect = no_gpu }
      assert.equal("fp32", r.precision)
      assert.truthy(table.concat(notes, "\n"):find("precision = bf16 (from --set) does not apply on cpu (no AVX512-BF16 " ..
        "or AMX on this CPU): using fp32", 1, true), table.concat(notes, "\n"))
      r = config.resolve { hardware = "cpu", sets = { "precision=bf16" },
        detect = function() return { gpus = 0, cpu_bf16 = "avx512_core_bf16" } end }
      assert.equal("bf16", r.precision)
      local err
      -- fp16 never runs on a cpu, bf16 instructions or not
      r, err = config.resolve { hardware = "cpu", sets = { "precision=fp16" },
        detect = function() return { gpus = 0, cpu_bf16 = "avx512_core_bf16" } end }
      assert.is_nil(r)
      assert.equal('precision = "fp16" (from --set) needs CUDA, but this run is on cpu (device = "cpu"): the CPU backend runs fp32 and bf16; set precision = "fp32" or "bf16", or device = "cuda" on a GPU machine', err)
      local path = support.write_file(tmp .. "/half.lua", "return { precision = 'fp16', device = 'cpu' }")
      r, err = config.resolve { file = path, detect = one_gpu }
      assert.is_nil(r)
      assert.matches('precision = "fp16" %(from file .*half.lua%) needs CUDA', err)
      -- fp32 set by the user is fine anywhere
      assert.is_table((config.resolve { hardware = "cpu", sets = { "precision=fp32" }, detect = no_gpu }))
    end)

    it("turns num_envs = auto into a number: 192 on cpu, from the GPU's memory on cuda", function()
      local r, notes = config.resolve { hardware = "cpu", sets = { "env.num_envs=auto" }, detect = no_gpu }
      assert.equal(192, r.env.num_envs)
      assert.is_true(contains(notes, "env.num_envs = auto is chosen by the GPU; on cpu using 192"))
      -- on a GPU: from its memory when detect() knows it, else the reference 192
      r, notes = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" }, detect = one_gpu }
      assert.equal(192, r.env.num_envs)
      assert.matches("^env.num_envs = auto: 192 %(GPU memory unknown", notes[1])
      local function gpu(bytes) return function() return { gpus = 1, gpu_memory = bytes } end end
      -- reference network: 12 * (160 * 121 + 512 + 512 + 4 * 121) = 250,416 bytes a sample;
      -- 80 GiB: 0.5 * 80 GiB * 0.9 / (250,416 * 128) = 1,205.6 -> 1,152 (a multiple of 64)
      r, notes = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" }, detect = gpu(80 * 2 ^ 30) }
      assert.equal(1152, r.env.num_envs)
      assert.matches("^env.num_envs = auto: 1152 %(training activations of 1152 x 128 samples in half of 80.0 GiB", notes[1])
      r = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" }, detect = gpu(2 ^ 30) }
      assert.equal(64, r.env.num_envs)
      r = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto", "ppo.minibatches=3" }, detect = gpu(80 * 2 ^ 30) }
      -- a third of the batch at a time: 3 * 1,205.6 -> 3,584, down to 3,456, whose batch 3 divides
      assert.equal(3456, r.env.num_envs)
      r = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto", "ppo.minibatches=7", "ppo.rollout_steps=100" }, detect = gpu(80 * 2 ^ 30) }
      assert.equal(0, (r.env.num_envs * 100) % 7)
    end)

    it("asks the engine's plan for num_envs = auto when detect() offers it", function()
      local seen
      local function engine_gpu(total, free, answer)
        return function()
          return { gpus = 1, gpu_memory = total, gpu_memory_free = free,
                   fit_num_envs = function(acc, budget) seen = { acc = acc, budget = budget } return answer() end }
        end
      end
      local r, notes = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" },
        detect = engine_gpu(80 * 2 ^ 30, 79 * 2 ^ 30, function() return 4480 end) }
      assert.equal(4480, r.env.num_envs)
      -- 90% of min(80 GiB x 0.9, 79 GiB free)
      assert.near(0.9 * 72 * 2 ^ 30, seen.budget, 1)
      assert.equal(512, seen.acc.policy.hidden)
      assert.matches("^env.num_envs = auto: 4480 %(the most whose buffers %(the engine's plan for these shapes%) fit in 64.8 GiB, 90%% of 80.0 GiB", notes[1])
      -- less free than the limit: the free memory bounds it, and the note says so
      r, notes = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" },
        detect = engine_gpu(80 * 2 ^ 30, 10 * 2 ^ 30, function() return 640 end) }
      assert.near(9 * 2 ^ 30, seen.budget, 1)
      assert.matches("capped by the 10.0 GiB free now", notes[1])
      -- nothing fits: the engine's message, no config
      local err
      r, err = config.resolve { hardware = "cuda", sets = { "env.num_envs=auto" },
        detect = engine_gpu(2 ^ 30, 2 ^ 30, function() return nil, "not even 64 environments fit" end) }
      assert.is_nil(r)
      assert.matches("env.num_envs = auto: not even 64 environments fit", err)
    end)

    it("normalises schedules", function()
      local r = config.resolve { hardware = "cpu", level = "basic", sets = { "ppo.lr=0.001", "ppo.clip=step(0.2,0.5,0.5)" }, detect = no_gpu }
      assert.same({ kind = "constant", from = 0.001, to = 0.001 }, r.ppo.lr)
      assert.same({ kind = "step", from = 0.2, gamma = 0.5, every = 0.5, to = 0.05 }, r.ppo.clip)
      assert.same(schedule.linear(0.1, 0.001), r.ppo.ent_coef)
    end)

    it("refuses the removed settings cuda.cudnn_benchmark and cuda.algo_cache as unknown", function()
      -- They did nothing (no cuDNN convolutions yet); an old config that still
      -- sets them is refused and told why, not silenced. warmup.prepare's
      -- "algorithms" is back: it searches the CPU's convolutions.
      local exp = { cuda = { cudnn_benchmark = true, algo_cache = "algos.bin" }, warmup = { prepare = { "algorithms", "graphs" } } }
      local r, err = config.resolve { file = exp, hardware = "cuda", detect = one_gpu }
      assert.is_nil(r)
      local why = "removed, it had no effect (the convolutions do not use cuDNN yet); it comes back with cuDNN; delete it from the config"
      assert.same({ "unknown key 'cuda.algo_cache': " .. why, "unknown key 'cuda.cudnn_benchmark': " .. why },
        support.lines(err .. "\n"))
      _, err = config.resolve { sets = { "cuda.cudnn_benchmark=false" }, detect = no_gpu }
      assert.equal("unknown key 'cuda.cudnn_benchmark': " .. why, err)
      assert.same({ nil, "unknown key 'cuda.algo_cache': " .. why }, { config.set(config.defaults(), "cuda.algo_cache", "") })
      assert.is_nil(config.defaults().cuda.cudnn_benchmark)
      assert.same({ "graphs" }, config.defaults().warmup.prepare)
    end)

    it("reports every bad --set and validation error together", function()
      local r, err = config.resolve { hardware = "cpu", sets = { "ppo.lr", "ppo.gama=0.9", "env.num_envs=0" }, detect = no_gpu }
      assert.is_nil(r)
      local lines = support.lines(err .. "\n")
      assert.equal(3, #lines)
      assert.matches("expected key=value", lines[1])
      assert.is_true(contains(lines, "unknown key 'ppo.gama' - did you mean 'ppo.gamma'?"))
      assert.is_true(contains(lines, 'env.num_envs = 0 is out of range: accepted 1 .. 1048576 or "auto"'))
    end)

    it("names an unknown profile or level", function()
      local _, err = config.resolve { hardware = "cpuu", detect = no_gpu }
      assert.matches('^hardware = "cpuu": accepted .* %- did you mean "cpu"%?$', err)
      _, err = config.resolve { level = "fast", detect = no_gpu }
      assert.matches('^level = "fast": accepted "basic", "advanced", "ultra"', err)
      _, err = config.resolve { hardware = tmp .. "/nope.lua", detect = no_gpu }
      assert.matches("hardware profile .* not found: no file .*nope.lua", err)
    end)

    it("checks a warmup function against the run it will see", function()
      local seen
      local exp = { warmup = function(info) seen = info; return { updates = info.device == "cpu" and 0 or 2 } end }
      local r, notes = config.resolve { file = exp, hardware = "cpu", detect = no_gpu }
      assert.is_table(r, notes)
      assert.equal("function", type(r.warmup))
      assert.same({ device = "cpu", level = "advanced", num_envs = 64 }, seen)
      local _, err = config.resolve { file = { warmup = function() return { updates = -1 } end }, hardware = "cpu", detect = no_gpu }
      assert.matches("warmup.updates = %-1 is out of range", err)
    end)
  end)

  describe("the shipped configs", function()
    local function lua_files(dir)
      local out = {}
      for _, name in ipairs(support.files(dir)) do
        if name:match("%.lua$") then out[#out + 1] = name:gsub("%.lua$", "") end
      end
      return out
    end

    it("has every profile and level the schema names", function()
      assert.same({ "ci", "cpu", "cuda", "debug", "production" }, lua_files("configs/hardware"))
      assert.same({ "advanced", "basic", "ultra" }, lua_files("configs/levels"))
    end)

    it("all load and validate as layers", function()
      for _, kind in ipairs({ "hardware", "levels" }) do
        for _, name in ipairs(lua_files("configs/" .. kind)) do
          local t, err = config.load_file("configs/" .. kind .. "/" .. name .. ".lua")
          assert.is_table(t, err)
          assert.is_true(config.validate(t, { partial = true }))
        end
      end
    end)

    it("resolve for every profile x level, with and without a GPU", function()
      for _, hw in ipairs({ "cpu", "cuda", "debug", "ci", "production" }) do
        for _, lvl in ipairs({ "basic", "advanced", "ultra" }) do
          for _, detect in ipairs({ no_gpu, one_gpu }) do
            local r, notes = config.resolve { hardware = hw, level = lvl, detect = detect }
            assert.is_table(r, hw .. "/" .. lvl .. ": " .. tostring(notes))
            assert.is_true(config.validate(r))
            if r.device == "cpu" then assert.equal("fp32", r.precision) end
          end
        end
      end
    end)

    it("levels set engine settings only and precision lives in them", function()
      for _, lvl in ipairs({ "basic", "advanced", "ultra" }) do
        local t = config.load_file("configs/levels/" .. lvl .. ".lua")
        for k in pairs(t) do
          assert.is_true(k == "precision" or k == "cuda" or k == "warmup", lvl .. " sets " .. k)
        end
      end
      local want = { basic = "fp32", advanced = "bf16", ultra = "fp16" }
      for lvl, p in pairs(want) do
        local r = config.resolve { hardware = "cuda", level = lvl, detect = one_gpu }
        assert.equal(p, r.precision)
        assert.equal(lvl ~= "basic", r.cuda.graphs)
      end
      -- and the user overrides it
      assert.equal("fp16", config.resolve { hardware = "cuda", sets = { "precision=fp16" }, detect = one_gpu }.precision)
    end)

    it("profiles keep the environment of ENV_SPEC.md and size the work to the machine", function()
      for _, hw in ipairs({ "cpu", "cuda", "debug", "ci", "production" }) do
        local t = config.load_file("configs/hardware/" .. hw .. ".lua")
        for k in pairs(t.env or {}) do assert.equal("num_envs", k, hw .. " changes env." .. k) end
      end
      local ci = config.resolve { hardware = "ci", detect = no_gpu }
      assert.equal(32, ci.env.num_envs)
      assert.equal(32, ci.ppo.rollout_steps)
      assert.equal(32768, ci.total_steps)
      assert.equal("cpu", ci.device)
      local cpu = config.resolve { hardware = "cpu", detect = no_gpu }
      assert.equal(524288, cpu.total_steps)   -- 128 updates: make run's two minutes on 2 cores
      assert.same({ 16, 32 }, cpu.policy.conv_channels)
      local cuda = config.resolve { hardware = "cuda", detect = one_gpu }
      assert.equal(192, cuda.env.num_envs)
      local prod = config.resolve { hardware = "production", detect = one_gpu }
      assert.is_true(prod.env.num_envs > 192)
      -- a profile's budget is what the default experiment gets with it (it sets none of its own)
      for hw, want in pairs({ ci = 32768, debug = 4096, cpu = 524288 }) do
        local d, notes = config.resolve { hardware = hw, default_experiment = true, detect = no_gpu }
        assert.equal(want, d.total_steps, hw)
        local said = false
        for _, n in ipairs(notes) do said = said or (n:find("^budget: .* from profile " .. hw .. "$") ~= nil) end
        assert.is_true(said, table.concat(notes, "\n"))
      end
      local dbg = config.resolve { hardware = "debug", detect = no_gpu }
      assert.equal(1, dbg.log.interval)
      assert.is_true(dbg.alerts.nonfinite)
    end)

    it("the default experiment resolves to a short cpu run", function()
      local r, notes = config.resolve { file = config.default_file(), detect = no_gpu }
      assert.is_table(r, notes)
      assert.equal("default", r.name)
      assert.equal("cpu", r.hardware)
      assert.equal("ground_truth", r.env.mode)
      local per_update = r.env.num_envs * r.ppo.rollout_steps
      assert.equal(0, r.total_steps % per_update)
      local updates = r.total_steps / per_update
      assert.is_true(updates >= 32 and updates <= 128, updates .. " updates")
    end)
  end)

  describe("serialize", function()
    it("writes Lua that loads back to an equal table", function()
      local r = config.resolve { hardware = "cpu", detect = no_gpu, sets = {
        "ppo.clip=step(0.2,0.5,0.25,0.05)", "ppo.lr=cosine(1e-3,0)", "name=it's \"quoted\"\n", "dir=/tmp/x y" } }
      local seen = {}
      r.hooks.on_update = function(m) seen[#seen + 1] = m end   -- a table upvalue: not saved
      r.ppo.vf_coef = 1 / 3
      local src = config.serialize(r, { header = "resolved config\nsecond line" })
      assert.matches("^%-%- resolved config\n%-%- second line\nreturn {\n", src)
      assert.matches("\n    %-%- hooks.on_update: the function at spec/config_spec.lua:%d+ is not saved %(it uses " ..
        "the upvalue 'seen' %(table {}%), which cannot be saved%): this config does not reproduce it\n", src)
      assert.matches("lr = cosine%(0.001, 0%),", src)
      assert.matches("clip = step%(0.2, 0.5, 0.25, 0.05%),", src)
      local path = support.write_file(tmp .. "/resolved.lua", src)
      local back, err = config.load_file(path)
      assert.is_table(back, err)
      r.hooks.on_update = nil
      assert.is_true(util.deep_equal(r, back), src)
      assert.is_true(config.validate(back))
      assert.equal(1 / 3, back.ppo.vf_coef)
    end)

    it("keeps unknown keys, odd numbers and a warmup function that has no file as a comment", function()
      local t = { custom = { ["odd key"] = { 1, 2 }, big = math.huge, small = -math.huge },
        warmup = loadstring("return function() end")() }
      local src = config.serialize(t)
      assert.matches("%-%- warmup: the function at %[string \"return function%(%) end\"%]:1 is not saved %(it was " ..
        "defined in %[string .-%], not in a file%): this config does not reproduce it", src)
      local back = assert(loadstring(src))()
      assert.same({ custom = { ["odd key"] = { 1, 2 }, big = math.huge, small = -math.huge } }, back)
    end)

    it("writes function schedules, a warmup function and hooks by their source", function()
      -- A config file as a user writes it, loaded the way moonrl loads it.
      local path = support.write_file(tmp .. "/exp.lua", [[
local floor = 1e-5
local shape = "quadratic"
return {
  ppo = {
    lr = function(p) return 1e-3 * (1 - p) ^ 2 + floor end,   -- one line, an upvalue
    ent_coef = function(p)
      -- "end" in a comment, and a string: "function"
      if p < 0.5 then return 0.01 end
      return 0.001
    end,
  },
  warmup = function(info) return { updates = info.device == "cuda" and 2 or 0 } end,
  hooks = { on_update = function(m) if m.update % 10 == 0 then print(shape, m.lr) end end,
            on_finish = function(s) print(s.status) end },
}
]])
      local t = assert(config.load_file(path))
      local src = config.serialize(t)
      assert.is_nil(src:find("not saved", 1, true), src)
      assert.truthy(src:find('lr = (function() local floor = 1e-05; return function(p) return 1e-3 * (1 - p) ^ 2 + floor end end)(),', 1, true), src)
      assert.truthy(src:find('warmup = function(info) return { updates = info.device == "cuda" and 2 or 0 } end,', 1, true), src)
      assert.truthy(src:find('on_finish = function(s) print(s.status) end,', 1, true), src)
      local back = assert(config.load_file(support.write_file(tmp .. "/saved.lua", src)))
      for _, p in ipairs({ 0, 0.3, 0.7, 1 }) do
        assert.equal(t.ppo.lr(p), back.ppo.lr(p))
        assert.equal(t.ppo.ent_coef(p), back.ppo.ent_coef(p))
      end
      assert.same({ updates = 2 }, back.warmup({ device = "cuda" }))
      assert.equal(string.dump(t.hooks.on_finish, true), string.dump(back.hooks.on_finish, true))
      assert.equal("function", type(back.hooks.on_update))

      -- The file edited after loading: the text on those lines is no longer
      -- the function that runs, and is not passed off as it.
      support.write_file(path, (support.read_file(path):gsub("return 0.001", "return 0.002")))
      src = config.serialize(t)
      assert.matches("%-%- ppo.ent_coef: the function at .-exp.lua:6%-10 is not saved %(.*file changed since%)", src)
      assert.truthy(src:find("on_finish = function(s) print(s.status) end,", 1, true), src)
    end)
  end)

  it("reference_markdown has a row for every key", function()
    local md = config.reference_markdown()
    for _, e in ipairs(require("moonrl.config.schema").keys) do
      assert.is_truthy(md:find("\n| `" .. e.key .. "` | ", 1, true), e.key)
    end
    assert.is_truthy(md:find('| `ppo.lr` | `linear(0.0003, 0.0001)` | number or schedule', 1, true))
    assert.is_truthy(md:find("| `total_steps` | `50331648` | integer 1 .. 9007199254740991 | yes |", 1, true))
  end)
end)

-- Environments written in Lua (env.lua; docs/environments.md, "An environment
-- in Lua"): the built-in cartpole in Lua (configs/envs/cartpole.lua) steps
-- the same bytes as the C cartpole for the same actions, on 1 and 2
-- threads, and trains to the same metrics; a Lua error in step stops the
-- run with the file's traceback, the last checkpoint kept, and --resume
-- after the fix goes on; a runaway step stops with the file and line; bad
-- files are refused with the file, the line and what is expected. The
-- engine's side (layout, slices, refusals) is spec/c/test_env_program.c.

local support = require("support")
local json = require("moonrl.formats.json")

local have_bin = support.have_bin

local function run(dir, args, opts)
  local rc, out, err = support.moonrl(args, dir, opts)
  return rc, out .. err
end

local CARTPOLE = support.read_file("configs/envs/cartpole.lua")
-- the same file with its step only (no step_slice): the per-instance form
local PER_INSTANCE, cut = CARTPOLE:gsub("\n  step_slice = function.-\n  end,\n", "\n")
assert(cut == 1, "configs/envs/cartpole.lua: no step_slice to cut")

-- the per-instance cartpole with `line` put first in its step
local function cartpole_with(line)
  local text = PER_INSTANCE:gsub("(  step = function%(s, i, action%)\n)", "%1    " .. line:gsub("%%", "%%%%") .. "\n")
  return text
end

-- the built-in cartpole (its step_slice) with `line` put first in its step_slice's loop
local function slice_with(line)
  local text, k = CARTPOLE:gsub("(    for i = i0, i1 %- 1 do\n)", "%1      " .. line:gsub("%%", "%%%%") .. "\n")
  assert(k == 1)
  return text
end

-- the line of a file's text where `pattern` is first found
local function line_of(text, pattern)
  local at = assert(text:find(pattern))
  return select(2, text:sub(1, at):gsub("\n", "")) + 1
end

-- A small run of a Lua environment file: 8 envs x 32 steps, checkpoints every update.
-- over.lua_expr: env.lua as written (a table's name) instead of the path `lua`.
local function experiment(lua, over)
  return "return { name = 'luaenv', threads = 1, seed = 1, total_steps = " .. ((over and over.total_steps) or 8 * 32 * 8) ..
    ", warmup = { updates = 0 }, env = { lua = " .. ((over and over.lua_expr) or string.format("%q", lua)) ..
    ", num_envs = 8 }, " ..
    "policy = { mlp_widths = { 16, 16 }, critic_hidden = 16, popart = false }, " ..
    "ppo = { rollout_steps = 32, epochs = 1, minibatches = 1 }, " ..
    "log = { console = false, tensorboard = false, csv = false, checkpoint_interval = 1 }, " ..
    "eval = { num_envs = 8, steps = 64 } }\n"
end

-- The script stepping the C and the Lua cartpole side by side (moonrl run): prints
-- "same N" or the first difference, and a checksum of the Lua one's observations.
local SIDE_BY_SIDE = [[
local engine = require("moonrl.engine")
local ffi, C = engine.ffi, engine.C
local n, threads, steps, lua = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]), arg[4] or "cartpole"
local function make(is_lua)
  local lua = is_lua and lua
  local c = ffi.new("mr_env_config")
  c.num_envs, c.grid_size, c.view_range, c.max_episode_steps = n, 11, 1, 500
  c.name = lua and C.MR_ENV_LUA or C.MR_ENV_CARTPOLE
  if lua then c.program = assert(engine.env_program(lua)) end
  local e, err = ffi.new("mr_env *[1]"), ffi.new("mr_error")
  if C.mr_env_create(c, 7, C.MR_DEVICE_CPU, threads, e, err) ~= 0 then error(ffi.string(err.msg)) end
  return e[0]
end
local a, b = make(false), make(true)
local acts = ffi.new("uint8_t[?]", n)
local bufs, views = {}, {}
for k = 1, 2 do
  bufs[k] = { ffi.new("float[?]", n * 4), ffi.new("float[?]", n), ffi.new("uint8_t[?]", n), ffi.new("uint8_t[?]", n) }
  views[k] = ffi.new("mr_env_view")
  views[k].obs, views[k].reward = ffi.cast("uint8_t *", bufs[k][1]), bufs[k][2]
  views[k].terminated, views[k].truncated = bufs[k][3], bufs[k][4]
end
local err = ffi.new("mr_error")
local x, sum, ends = 12345, 0, 0
for t = 1, steps do
  for i = 0, n - 1 do   -- mostly balancing pushes, so episodes run long and also truncate
    x = (x * 1103515245 + 12345) % 2147483648
    local o = bufs[1][1]
    acts[i] = (x % 8 == 0) and math.floor(x / 65536) % 2 or ((o[4 * i + 2] + 0.5 * o[4 * i + 3] > 0) and 1 or 0)
  end
  assert(C.mr_env_step(a, acts, err) == 0, ffi.string(err.msg))
  assert(C.mr_env_step(b, acts, err) == 0, ffi.string(err.msg))
  assert(C.mr_env_read(a, views[1], err) == 0 and C.mr_env_read(b, views[2], err) == 0)
  for k = 1, 4 do
    local len = k == 1 and n * 4 or n
    for i = 0, len - 1 do
      if bufs[1][k][i] ~= bufs[2][k][i] then
        print(string.format("differ at step %d, buffer %d, index %d: %s vs %s", t, k, i, tostring(bufs[1][k][i]),
          tostring(bufs[2][k][i])))
        os.exit(0)
      end
      if k == 1 then sum = (sum * 31 + bufs[2][1][i] * 1e6) % 4294967296 end
      if k == 3 or k == 4 then ends = ends + bufs[2][k][i] end
    end
  end
end
print(string.format("same %d steps, %d ends, checksum %.0f", steps, ends, sum))
]]

describe("Lua environments (env.lua)", function()
  it("cartpole in Lua (step_slice, and step alone) steps the C cartpole's bytes for the same actions, on 1 and 2 threads",
    function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    support.write_file(d .. "/side.lua", SIDE_BY_SIDE)
    support.write_file(d .. "/per_instance.lua", PER_INSTANCE)
    local sums = {}
    for _, form in ipairs({ "cartpole", "per_instance.lua" }) do
      for _, threads in ipairs({ 1, 2 }) do
        -- 1024 instances: 2 threads step 512 each, one call of the file's loop per slice
        local rc, out = run(d, "run side.lua 1024 " .. threads .. " 700 " .. form)
        assert.equal(0, rc, out)
        local ends, sum = out:match("same 700 steps, (%d+) ends, checksum (%d+)")
        assert.is_truthy(sum, form .. ": " .. out)
        assert.is_true(tonumber(ends) > 1024, out)   -- episodes ended (terminated and truncated at 500)
        sums[#sums + 1] = sum
      end
    end
    for k = 2, #sums do assert.equal(sums[1], sums[k]) end   -- thread-count and form independent
  end)

  it("moonrl train cartpole_lua learns exactly as cartpole (the same metrics) and reaches 500", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    -- one thread: the spec's time does not hang on a busy machine's second core
    local flags = " --set threads=1 --set log.console=false --set log.tensorboard=false"
    local rc, out = run(d, "train cartpole_lua --dir lua --no-eval" .. flags)
    assert.equal(0, rc, out)
    -- the same 100 updates, the C cartpole and the Lua one
    rc, out = run(d, "train cartpole_lua --dir lua100 --set total_steps=25600 --no-eval" .. flags)
    assert.equal(0, rc, out)
    rc, out = run(d, "train cartpole --dir c --set total_steps=25600 --no-eval" .. flags)
    assert.equal(0, rc, out)
    local function rows(path)
      local t = {}
      for line in support.read_file(path):gmatch("[^\n]+") do
        local m = json.decode(line)
        if m.event == nil then
          m.wall_time = nil
          t[#t + 1] = m
        end
      end
      return t
    end
    local lua, lua100, c = rows(d .. "/lua/metrics.jsonl"), rows(d .. "/lua100/metrics.jsonl"), rows(d .. "/c/metrics.jsonl")
    assert.equal(100, #c)
    assert.equal(100, #lua100)
    for k = 1, #c do
      for key, v in pairs(c[k]) do
        if not key:match("^time") and not key:match("per_s") and key ~= "sps" then
          assert.are.same(v, lua100[k][key], "update " .. k .. ": " .. key)
        end
      end
    end
    -- mean return 500 within its 100,000 agent-steps: the last 8 ended episodes average 495 or more
    local reached
    for _, m in ipairs(lua) do
      if not reached and (m.episodes or 0) > 0 and m.episode_return_mean >= 495 and m.agent_steps <= 100000 then
        reached = m.agent_steps
      end
    end
    assert.is_truthy(reached, "the Lua cartpole never reached 495")
  end)

  -- a float image from Lua: configs/envs/catch.lua is the C catch (envs/catch.h) written again, the
  -- same draws, so the CNN sees the same images and the runs are one
  it("catch in Lua (a float image) trains exactly as the C catch: the same metrics, and it resumes", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    local flags = " --set total_steps=" .. 64 * 32 * 8 .. " --set threads=1 --set log.console=false " ..
      "--set log.tensorboard=false --no-eval"
    local rc, out = run(d, "train catch --dir c" .. flags)
    assert.equal(0, rc, out)
    rc, out = run(d, "train catch --dir lua --set env.name=lua --set env.lua=catch" .. flags)
    assert.equal(0, rc, out)
    local function rows(path)
      local t = {}
      for line in support.read_file(path):gmatch("[^\n]+") do
        local m = json.decode(line)
        if m.event == nil then t[#t + 1] = m end
      end
      return t
    end
    local c, lua = rows(d .. "/c/metrics.jsonl"), rows(d .. "/lua/metrics.jsonl")
    assert.equal(8, #c)
    assert.equal(8, #lua)
    for k = 1, #c do
      for key, v in pairs(c[k]) do
        if not key:match("^time") and not key:match("per_s") and key ~= "sps" and key ~= "wall_time" and
          not key:match("^memory") then
          assert.are.same(v, lua[k][key], "update " .. k .. ": " .. key)
        end
      end
    end
    assert.is_true(c[8].episodes > 0 and c[8].caught_per_episode ~= nil)
    -- the checkpoint records the image (lua.obs = image 2 8 8): it resumes, and evaluates
    rc, out = run(d, "train --resume lua --set total_steps=" .. 64 * 32 * 9 .. " --no-eval")
    assert.equal(0, rc, out)
    rc, out = run(d, "eval lua --episodes 64 --envs 16")
    assert.equal(0, rc, out)
    assert.matches("the episode counted caught at least once", out, 1, true)
  end)

  it("a Lua error in step at update k stops the run with the file's traceback; --resume after the fix goes on",
    function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    -- tick 130 is the 130th step of an instance: update 5 of 32 steps each
    support.write_file(d .. "/env.lua", cartpole_with("if s.tick[i] == 130 then local t = nil; t.boom = 1 end"))
    support.write_file(d .. "/exp.lua", experiment(d .. "/env.lua"))
    local rc, out = run(d, "train exp.lua --dir r --no-eval")
    assert.is_not.equal(0, rc)
    assert.matches("update 5 failed", out, 1, true)
    assert.matches("env.lua:%d+: attempt to index local 't'", out)
    assert.matches("stack traceback (" , out, 1, true)
    assert.is_nil(out:find("moonrl/env/thread.lua", 1, true), out)   -- the user's file, not the host's
    assert.is_truthy(support.read_file(d .. "/r/checkpoints/update_0000004.mrck"))
    assert.is_nil(support.read_file(d .. "/r/checkpoints/update_0000005.mrck"))
    -- the file fixed: the run goes on from update 4 to its end
    support.write_file(d .. "/env.lua", CARTPOLE)
    rc, out = run(d, "train --resume r --no-eval")
    assert.equal(0, rc, out)
    assert.is_truthy(support.read_file(d .. "/r/checkpoints/update_0000008.mrck"), out)
  end)

  it("a runaway step is stopped with the file and line; the checkpoint is kept", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    support.write_file(d .. "/env.lua", cartpole_with("if s.tick[i] == 40 then while true do end end"))
    support.write_file(d .. "/exp.lua", experiment(d .. "/env.lua"))
    local rc, out = run(d, "train exp.lua --dir r --no-eval", { timeout = 60 })
    assert.is_not.equal(0, rc)
    assert.is_not.equal(124, rc)   -- stopped by the limit, not by the timeout
    local line = select(2, cartpole_with("X"):sub(1, (cartpole_with("X"):find("\n    X"))):gsub("\n", "")) + 1
    assert.matches("env.lua:" .. line .. ": step took too long", out, 1, true)
    assert.is_truthy(support.read_file(d .. "/r/checkpoints/update_0000001.mrck"))
    -- and memory: a step that keeps allocating
    support.write_file(d .. "/env.lua", cartpole_with("if s.tick[i] == 40 then local t = {} for k = 1, 1e9 do t[k] = k end end"))
    rc, out = run(d, "train exp.lua --dir r2 --no-eval", { timeout = 60 })
    assert.is_not.equal(0, rc)
    assert.matches("env.lua: a step of instances .- memory limit of 65536 KiB", out)
  end)

  it("refuses bad files with the file, the line and what is expected", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    local k = 0
    local function refused(text, want, set)
      support.write_file(d .. "/bad.lua", text)
      support.write_file(d .. "/exp.lua", experiment(d .. "/bad.lua"))
      k = k + 1
      local rc, out = run(d, "train exp.lua --dir r" .. k .. " --no-eval" .. (set or ""))
      assert.is_not.equal(0, rc)
      assert.matches(want, out, 1, true)
      assert.is_nil(out:find("Segmentation", 1, true))
      return out
    end
    refused((CARTPOLE:gsub("  observation = { floats = 4 },[^\n]*\n", "")), "bad.lua: declares no observation: expected " ..
      "observation = { floats = N }")
    -- an image that is not square (the CNN's input is C x V x V)
    refused((CARTPOLE:gsub("observation = { floats = 4 }", "observation = { image = { 2, 4, 5 } }")),
      "bad.lua:" .. line_of(CARTPOLE, "  observation = ") .. ": observation = {image = {2, 4, 5}}: expected " ..
      "{ floats = N } (a vector, N in 1 .. 65536) or { image = { C, V, V } }")
    refused((CARTPOLE:gsub('theta_dot = "double" }', 'theta_dot = "double", grid = "uint8[1e12]" }')),
      'bad.lua:' .. line_of(CARTPOLE, "  fields = ") .. ': field grid = "uint8[1e12]": 1000000000000 values per ' ..
      'instance: accepted 1 .. 16777216')
    refused((CARTPOLE:gsub('x = "double",', 'x = "complex",')), 'field x = "complex": expected "double", "float"')
    refused(cartpole_with('if s.tick[i] == 3 then return "x" end'), 'step returned string "x", nil for instance')
    refused((CARTPOLE:gsub("  reset = function", "  reset = 1, nothing = function")),
      "declares no reset function: expected reset = function(s, i), got number 1")
    refused("return { observation = { floats = 4 }, action = { discrete = 2 }, step = function() end, " ..
      "reset = function() end, fields = { x = 'double' } } x = ", "bad.lua:1: syntax error")
    -- a write out of its array, found with env.lua_checks
    local first = line_of(PER_INSTANCE, "  step = function") + 1   -- where cartpole_with puts its line
    refused(cartpole_with("s.x[i + 100000] = 1"), "bad.lua:" .. first .. ": x[100" , " --set env.lua_checks=true")
    -- the same in step_slice, and a reward it leaves NaN
    local in_loop = line_of(CARTPOLE, "    for i = i0, i1 %- 1 do\n") + 1
    refused(slice_with("X[i + 100000] = 1"), "bad.lua:" .. in_loop .. ": x[100", " --set env.lua_checks=true")
    refused((CARTPOLE:gsub("reward%[i%] = 1", "reward[i] = 1 / 0")), "step_slice left reward[0] = inf",
      " --set env.lua_checks=true")
    -- a global written in step
    refused(cartpole_with("counter = 1"), "bad.lua:" .. first .. ": assignment to the global counter")
    -- bytecode
    local f = io.popen("luajit -b configs/envs/cartpole.lua " .. d .. "/bc.lua 2>&1")
    f:read("*a")
    f:close()
    refused(support.read_file(d .. "/bc.lua"), "precompiled Lua bytecode is not accepted")
    -- a GPU
    support.write_file(d .. "/bad.lua", CARTPOLE)
    local rc, out = run(d, "train exp.lua --dir r --no-eval --set device=cuda")
    assert.is_not.equal(0, rc)
    assert.matches("is a Lua environment, which runs on the cpu only", out, 1, true)
  end)

  it("an environment written as a table in the experiment script trains as its file does", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    -- configs/envs/cartpole.lua's text in the script: its locals, then the table (env = { lua = cartpole })
    local function script_of(env_text)
      local body, k = env_text:gsub("\nreturn {\n", "\nlocal cartpole = {\n", 1)
      assert(k == 1)
      return body .. "\n" .. experiment(nil, { lua_expr = "cartpole" })
    end
    support.write_file(d .. "/env.lua", CARTPOLE)
    support.write_file(d .. "/file.lua", experiment(d .. "/env.lua"))
    support.write_file(d .. "/table.lua", script_of(CARTPOLE))
    local rc, out = run(d, "train file.lua --dir f --no-eval")
    assert.equal(0, rc, out)
    rc, out = run(d, "train table.lua --dir t")
    assert.equal(0, rc, out)
    local function rows(path)
      local t = {}
      for line in support.read_file(path):gmatch("[^\n]+") do
        local m = json.decode(line)
        if m.event == nil then
          for key in pairs(m) do if key:match("^time") or key:match("per_s") or key == "sps" or key == "wall_time" then m[key] = nil end end
          t[#t + 1] = m
        end
      end
      return t
    end
    local f, t = rows(d .. "/f/metrics.jsonl"), rows(d .. "/t/metrics.jsonl")
    assert.equal(8, #f)
    assert.are.same(f, t)
    -- the run's config.lua holds the text: evaluation needs no script
    rc, out = run(d, "eval t")
    assert.equal(0, rc, out)
    -- an error in the table's step names the script's own line
    local bad = script_of(cartpole_with("if s.tick[i] == 70 then local t = nil; t.boom = 1 end"))
    support.write_file(d .. "/bad.lua", bad)
    rc, out = run(d, "train bad.lua --dir b --no-eval")
    assert.is_not.equal(0, rc)
    assert.matches("bad.lua:" .. line_of(bad, "t.boom = 1") .. ": attempt to index local 't'", out, 1, true)
    -- what cannot be taken to the threads is refused, naming it
    support.write_file(d .. "/bad2.lua", script_of((PER_INSTANCE:gsub("local sin, cos", "local fmt = string.format\nlocal sin, cos")
      :gsub("(  step = function%(s, i, action%)\n)", "%1    local _ = fmt\n"))))
    rc, out = run(d, "train bad2.lua --dir b2 --no-eval")
    assert.is_not.equal(0, rc)
    assert.matches("step uses fmt, a library function a Lua environment does not have", out, 1, true)
  end)

  it("moonrl envs lists the built-in Lua cartpole; evaluation and export find the run's env.lua", function()
    if not have_bin then return pending("build/moonrl is not built") end
    local d = support.tmpdir()
    local rc, out = run(d, "envs")
    assert.equal(0, rc, out)
    assert.matches('lua%s+4 floats%s+discrete%(2%)%s+cartpole_lua: 4 floats%s+env.lua = "cartpole"', out)
    support.write_file(d .. "/exp.lua", experiment("cartpole"))
    rc, out = run(d, "train exp.lua --dir r")
    assert.equal(0, rc, out)
    assert.matches("environment: lua; the episodic protocol", out, 1, true)
    rc, out = run(d, "eval r")
    assert.equal(0, rc, out)
    rc, out = run(d, "export r --out p.safetensors")
    assert.equal(0, rc, out)
  end)
end)

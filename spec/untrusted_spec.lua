-- What files and values from outside can do to moonrl (issue 22): precompiled
-- Lua bytecode is refused wherever a user's chunk is loaded (LuaJIT does not
-- verify bytecode: a crafted chunk crashes the process); the live tweak
-- sandbox bounds the C functions a count hook cannot see (string.rep,
-- backtracking patterns, ...); an overlong config key is refused at once
-- instead of feeding the did-you-mean search. Through the built binary
-- (build/moonrl, or $MOONRL_BIN) where it matters, a run training under it.

local support = require("support")
local json = require("moonrl.formats.json")
local control = require("moonrl.control.client")
local live = require("moonrl.run.live")
local config = require("moonrl.config")
local uv = support.uv

local sigpipe = uv.new_signal()
sigpipe:start("sigpipe", function() end)
sigpipe:unref()

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

local REFUSED = "precompiled Lua bytecode is not accepted; give the source text"

-- Runs the binary in the foreground; exit code, stdout, stderr, seconds taken.
local function moonrl(args, dir)
  local out, err, rc = dir .. "/c.out", dir .. "/c.err", dir .. "/c.rc"
  local t0 = uv.hrtime()
  os.execute(string.format("cd %q && timeout 120 %q %s >%q 2>%q; echo $? >%q", dir, BIN, args, out, err, rc))
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or "",
    (uv.hrtime() - t0) / 1e9
end

-- Bytecode files: a real dump, a truncated one, random bytes after the
-- header, and a dump behind a "#!" line.
local function bytecode_files(dir)
  local dump = string.dump(function() return { name = "from-bytecode" } end)
  math.randomseed(22)
  local junk = { "\27LJ\2\0" }
  for i = 2, 400 do junk[i] = string.char(math.random(0, 255)) end
  local files = {
    bc = dump,
    truncated = dump:sub(1, math.floor(#dump / 2)),
    junk = table.concat(junk),
    shebang = "#!/usr/bin/env moonrl\n" .. dump,
  }
  local names = {}
  for name, bytes in pairs(files) do
    support.write_file(dir .. "/" .. name .. ".lua", bytes)
    names[#names + 1] = name
  end
  table.sort(names)
  return names
end

local function vm_kib(pid, field)
  local text = support.read_file("/proc/" .. pid .. "/status") or ""
  return tonumber(text:match(field .. ":%s*(%d+)"))
end

local function wait_for(what, pred, limit_ms) return support.wait_until(what, pred, limit_ms or 60000) end
local function request(sock, req, timeout_ms) return support.control_request(sock, req, timeout_ms, 90000) end

local function save(path, text)
  support.write_file(path .. ".swp", text)
  assert(os.rename(path .. ".swp", path))
end

describe("precompiled Lua bytecode", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  it("is refused by the config loader and the live tweak reader, with the file named", function()
    for _, name in ipairs(bytecode_files(dir)) do
      local path = dir .. "/" .. name .. ".lua"
      local t, err = config.load_file(path)
      assert.is_nil(t)
      assert.equal(path .. ": " .. REFUSED, err)
      local text = support.read_file(path)
      t, err = live.read(text, "tweak.lua")
      assert.is_nil(t)
      assert.equal("tweak.lua: " .. REFUSED, err)
    end
    -- source text still loads, with or without a "#!" line
    support.write_file(dir .. "/ok.lua", "#!/usr/bin/env moonrl\nreturn { name = 'text' }\n")
    assert.equal("text", assert(config.load_file(dir .. "/ok.lua")).name)
  end)

  it("is refused as a config, a profile, a level, a resume change file and a script by the binary", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local names = bytecode_files(dir)
    -- a run to resume
    support.write_file(dir .. "/exp.lua", [[return {
      name = "tiny", dir = "r", device = "cpu", threads = 1, seed = 7, total_steps = 64 * 2, warmup = { updates = 0 },
      env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 },
      policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 }, ppo = { rollout_steps = 8 },
      log = { console = false, checkpoint_interval = 0 }, eval = { num_envs = 8, steps = 32 } }]])
    local rc, out, err = moonrl("train exp.lua --hardware ci --level basic --no-eval", dir)
    assert.equal(0, rc, out .. err)
    for _, name in ipairs(names) do
      local file = name .. ".lua"
      for _, c in ipairs({
        { "train " .. file, 2 },
        { "train exp.lua --hardware " .. file, 2 },
        { "train exp.lua --hardware ci --level " .. file, 2 },
        { "train --resume r " .. file, 2 },
        { "run " .. file, 1 },
      }) do
        rc, out, err = moonrl(c[1], dir)
        assert.equal(c[2], rc, c[1] .. ": " .. out .. err)
        assert.truthy(err:find(file .. ": " .. REFUSED, 1, true), c[1] .. ": " .. err)
      end
    end
    -- a sweep script whose base is bytecode
    support.write_file(dir .. "/sweep.lua", [[
      require("moonrl").sweep { base = "bc.lua", space = { ["ppo.lr"] = { 1e-4, 2e-4 } }, dir = "sw" }]])
    rc, out, err = moonrl("run sweep.lua", dir)
    assert.equal(1, rc, out .. err)
    assert.truthy(err:find("bc.lua: " .. REFUSED, 1, true), err)
    assert.is_nil(uv.fs_stat(dir .. "/sw/trial-001"))
  end)

  it("is refused as a module that a config or script requires; a source module still loads", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local names = bytecode_files(dir)
    support.write_file(dir .. "/helper.lua", "return { x = 42 }\n")
    local lines = { 'print("source", require("helper").x)' }
    for _, name in ipairs(names) do
      lines[#lines + 1] = string.format('print(%q, select(2, pcall(require, %q)))', name, name)
    end
    support.write_file(dir .. "/req.lua", table.concat(lines, "\n") .. "\n")
    local rc, out, err = moonrl("run req.lua", dir)
    assert.equal(0, rc, out .. err)
    assert.truthy(out:find("source\t42\n", 1, true), out)
    for _, name in ipairs(names) do
      assert.truthy(out:find(name .. "\terror loading module '" .. name .. "' from file './" .. name .. ".lua':\n\t./" ..
        name .. ".lua: " .. REFUSED, 1, true), out)
    end
  end)
end)

describe("the live tweak sandbox's limits", function()
  local function read(src)
    local t0 = os.clock()
    local t, err = live.read(src, "t.lua")
    return t, err, os.clock() - t0
  end

  it("refuses a string.rep, format, concat or gsub over the memory limit before it allocates", function()
    local hwm0 = vm_kib("self", "VmHWM")
    for _, src in ipairs({
      "return { name = string.rep('x', 1.5 * 2^30) }",
      "return { name = ('x'):rep(1.5 * 2^30) }",
      "return { name = (''):rep(2^29, 'abc') }",
      "local s = ('x'):rep(2^20); return { name = s:rep(1536) }",
    }) do
      local t, err = read(src)
      assert.is_nil(t, src)
      assert.matches("^t.lua:1: string.rep: %d+ bytes is over the live file's memory limit of 65536 KiB$", err, src)
    end
    local s = "local s = ('x'):rep(1e7)\nlocal t = {}\nfor i = 1, 200 do t[i] = s end\n"
    local _, err = read(s .. "return { name = table.concat(t) }")
    assert.matches("^t.lua:4: table.concat: 2000000000 bytes is over the live file's memory limit of 65536 KiB$", err)
    _, err = read(s .. "return { name = string.format(('%s'):rep(200), unpack(t)) }")
    assert.matches("^t.lua:4: string.format: %d+ bytes is over the live file's memory limit", err)
    _, err = read("return { name = ('x'):rep(1e6):gsub('', ('y'):rep(1000)) }")
    assert.matches("^t.lua:1: string.gsub: %d+ bytes is over the live file's memory limit", err)
    _, err = read("local b = ('y'):rep(1e5)\nreturn { name = ('x'):rep(1e6):gsub('', function() return b end) }")
    assert.matches("string.gsub: %d+ bytes is over the live file's memory limit", err)
    -- doubling a string with .. is seen by the hook
    _, err = read("local s = ('x'):rep(2^20)\nfor i = 1, 20 do s = s .. s end\nreturn {}")
    assert.matches("^t.lua:2: uses too much memory: more than 65536 KiB", err)
    collectgarbage()
    local grew = vm_kib("self", "VmHWM") - hwm0
    assert.truthy(grew < 1024 * 1024, "the process grew by " .. grew .. " KiB")
    -- the real string table is behind ("").rep again, and untouched
    assert.equal(string, getmetatable("").__index)
    assert.equal(3 * 2^20, #("x"):rep(3 * 2^20))
  end)

  it("stops a backtracking pattern before it runs, in well under its time", function()
    local pat = "local s = ('a'):rep(30)\nlocal p = ('a?'):rep(30) .. ('a'):rep(30)\n"
    for _, call in ipairs({ "s:match(p)", "string.find(s, p)", "s:gsub(p, '')", "s:gmatch(p)()" }) do
      local t, err, secs = read(pat .. "return { name = " .. call .. " }")
      assert.is_nil(t, call)
      assert.matches("^t.lua:3: string%.%a+: the pattern \"a%?a%?.* on 30 bytes could take %d+ steps, over what is left " ..
        "of the live file's limit of 50000000 instructions", err, call)
      assert.truthy(secs < 10, call .. " took " .. secs .. " s")
    end
    -- many calls that are cheap one by one add up to the same budget
    local t, err, secs = read("local s = ('a'):rep(300)\nfor i = 1, 1e7 do s:find('a-a-b') end\nreturn {}")
    assert.is_nil(t)
    assert.matches("^t.lua:2: string.find: ", err)
    assert.truthy(secs < 10, "took " .. secs .. " s")
    t, err, secs = read("local t = {}\nfor i = 1, 1e6 do t[i] = i end\nfor i = 1, 1e6 do table.insert(t, 1, i) end\nreturn {}")
    assert.is_nil(t)
    assert.matches("^t.lua:3: table.insert: took too long: more than 50000000 instructions", err)
    assert.truthy(secs < 10, "took " .. secs .. " s")
    assert.equal(string, getmetatable("").__index)
  end)

  it("bounds the file's functions after it was read: schedules sampled per update, hooks", function()
    local cfg = assert(config.resolve { hardware = "cpu", detect = function() return { gpus = 0, cores = 2 } end })
    local text = "return {\n  ppo = { ent_coef = function(p) if p > 0 and p < 0.25 then while true do end end return 0.01 end },\n" ..
      "  hooks = { on_update = function(m)\n    while true do end\n  end },\n}\n"
    local todo = assert(live.check(cfg, assert(live.read(text, "t.lua")), text, "t.lua"))
    local f = {}
    for _, c in ipairs(todo) do f[c.key] = c.value end
    assert.is_true(live.from_file(f["ppo.ent_coef"]))
    assert.is_true(live.from_file(f["hooks.on_update"]))
    assert.is_false(live.from_file(function() end))
    local t0 = os.clock()
    local t, err = live.sample(f["ppo.ent_coef"], 1000)
    assert.is_nil(t)
    assert.equal("the schedule function failed at progress 0.001 (sampled for 1000 updates): t.lua:2: took too long: " ..
      "more than 50000000 instructions", err)
    local ok
    ok, err = live.call(f["hooks.on_update"], {}, {})
    assert.is_false(ok)
    assert.equal("t.lua:4: took too long: more than 50000000 instructions", err)
    assert.truthy(os.clock() - t0 < 20, "took " .. (os.clock() - t0) .. " s")
    -- a well-behaved one samples as the engine would
    text = "return { ppo = { ent_coef = function(p) return 0.01 * (1 - p) end } }"
    todo = assert(live.check(cfg, assert(live.read(text, "t.lua")), text, "t.lua"))
    t = assert(live.sample(todo[1].value, 4))
    assert.same({ 0.01, 0.01 * 0.75, 0.01 * 0.5, 0.01 * 0.25 }, t)
    assert.equal(string, getmetatable("").__index)
    assert.is_nil(debug.gethook())
  end)

  it("still runs ordinary string and table code in a tweak", function()
    local t = assert(live.read([[
      local text = "lr=2e-4 clip=0.15"
      local lr = tonumber(text:match("lr=([%d.e-]+)"))
      local parts = {}
      for k, v in text:gmatch("(%w+)=(%S+)") do parts[#parts + 1] = k:upper() .. "=" .. v end
      table.sort(parts)
      return { ppo = { lr = lr, clip = tonumber((text:gsub("^.*clip=", ""))) },
               name = ("%s-%d"):format(table.concat(parts, ","), #("ab"):rep(3, "-")) }]], "t.lua"))
    assert.equal(2e-4, t["ppo.lr"])
    assert.equal(0.15, t["ppo.clip"])
    assert.equal("CLIP=0.15,LR=2e-4-8", t["name"])
  end)
end)

describe("an overlong config key", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  local KEY = ("k"):rep(65536)

  it("is refused at once by --set, config.set and validation, without a search for a near key", function()
    local t0 = os.clock()
    local k, err = config.parse_set(KEY .. "=1")
    assert.is_nil(k)
    assert.matches("^%-%-set \"kkkk.*%.%.%.: the key is 65536 bytes long: keys are at most 128 bytes", err)
    local cfg = {}
    local ok, serr = config.set(cfg, "ppo." .. KEY, 1)
    assert.is_nil(ok)
    assert.matches("^unknown key \"ppo.kkk.*%.%.%. %(65540 bytes%): keys are at most 128 bytes", serr)
    local _, verr = config.validate({ [KEY] = 1, ppo = { [KEY] = 2 } }, { partial = true })
    assert.matches("65536 bytes%): keys are at most 128 bytes", verr)
    assert.matches("65540 bytes%): keys are at most 128 bytes", verr)
    assert.truthy(os.clock() - t0 < 5, "took " .. (os.clock() - t0) .. " s")
    assert.truthy(#serr < 200, serr)
    -- ordinary typos still get their suggestion
    _, serr = config.set(cfg, "ppo.lrr", 1)
    assert.equal("unknown key 'ppo.lrr' - did you mean 'ppo.lr'?", serr)
    _, serr = config.set(cfg, "ppo.learning_rat", 1)
    assert.equal("unknown key 'ppo.learning_rat' - did you mean 'ppo.lr'?", serr)
  end)

  it("through moonrl train --set answers at once with exit code 2", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rc, out, err, secs = moonrl("train --set " .. KEY .. "=1", dir)
    assert.equal(2, rc, out .. err:sub(1, 300))
    assert.truthy(err:find("keys are at most 128 bytes", 1, true), err:sub(1, 300))
    assert.truthy(secs < 20, "took " .. secs .. " s")
  end)
end)

describe("a run under hostile input", function()
  local dir, pid
  before_each(function() dir = have_bin and support.tmpdir() or nil end)
  after_each(function()
    if pid and dir and not support.read_file(dir .. "/job.rc") then uv.kill(pid, "sigkill") end
    pid = nil
    if dir then support.rm_rf(dir) end
  end)

  it("keeps training and answering through bytecode and hostile tweaks and a 64 KiB key", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rd, tw = dir .. "/r", dir .. "/tweaks.lua"
    support.write_file(dir .. "/job.lua", string.format([[
      local moonrl = require "moonrl"
      local run = moonrl.train({
        name = "job", dir = %q, device = "cpu", threads = 1, seed = 7, live = %q,
        total_steps = 64 * 200000, warmup = { updates = 0 },
        env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 },
        policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
        ppo = { rollout_steps = 8, lr = 3e-4 },
        log = { console = false, tensorboard = false, checkpoint_interval = 0, checkpoint_keep = 2 },
      }, { hardware = "ci", level = "basic" })
      print("finished=" .. run:wait().status)
    ]], rd, tw))
    os.execute(string.format("cd %q && (timeout -s KILL 300 %q run job.lua >job.out 2>job.err; echo $? >job.rc) >/dev/null 2>&1 &",
      dir, BIN))
    local sock = control.socket_path(rd)
    wait_for("the job's control socket", function()
      local r = uv.fs_lstat(sock) and request(sock, { cmd = "status" }, 1000)
      pid = r and r.ok and r.pid
      return pid
    end)
    local function status()
      local r, e = request(sock, { cmd = "status" })
      assert(r and r.ok, "status: " .. tostring(e or (r and r.error)))
      return r
    end
    local function log() return support.read_file(rd .. "/train.log") or "" end
    local function saved_and_refused(text, says)
      local n0 = select(2, log():gsub("not applied, the values in force stay", ""))
      local t0 = uv.hrtime()
      save(tw, text)
      local ok, werr = pcall(wait_for, "the refusal in train.log", function()
        return select(2, log():gsub("not applied, the values in force stay", "")) > n0
      end, 60000)
      if not ok then
        local lines = {}
        for line in log():gmatch("[^\n]+") do if not line:find(" update %d+ steps ") then lines[#lines + 1] = line end end
        error(tostring(werr) .. "\n" .. table.concat(lines, "\n"):sub(-3000))
      end
      local secs = (uv.hrtime() - t0) / 1e9
      assert.truthy(log():find(says, 1, true), says .. "\n" .. log())
      return secs
    end
    local function trains()
      local u0 = status().update
      wait_for("an update after the refusal", function() return status().update > u0 end)
    end

    bytecode_files(dir)
    saved_and_refused(support.read_file(dir .. "/bc.lua"), tw .. ": " .. REFUSED)
    trains()
    saved_and_refused(support.read_file(dir .. "/junk.lua"), tw .. ": " .. REFUSED)
    trains()

    saved_and_refused("return { name = ('x'):rep(1.5 * 2^30) }\n",
      "string.rep: 1610612736 bytes is over the live file's memory limit of 65536 KiB")
    assert.truthy(vm_kib(pid, "VmHWM") < 1024 * 1024, "the job's peak: " .. vm_kib(pid, "VmHWM") .. " KiB")
    trains()

    local secs = saved_and_refused("local s = ('a'):rep(30)\nreturn { name = s:match(('a?'):rep(30) .. ('a'):rep(30)) }\n",
      "string.match: the pattern")
    assert.truthy(secs < 30, "the backtracking tweak was refused after " .. secs .. " s")
    trains()

    -- a 60 KiB key over the socket (its lines are at most 64 KiB), 64 KiB through moonrl ctl
    local KEY = ("k"):rep(60000)
    local t0 = uv.hrtime()
    local r = request(sock, { cmd = "set", values = { [KEY] = 1 } })
    assert.is_false(r.ok)
    assert.truthy(r.error:find("keys are at most 128 bytes", 1, true), r.error:sub(1, 300))
    r = request(sock, { cmd = "get", key = "ppo." .. KEY })
    assert.is_false(r.ok)
    assert.truthy(r.error:find("keys are at most 128 bytes", 1, true), r.error:sub(1, 300))
    assert.truthy((uv.hrtime() - t0) / 1e9 < 10, "the job took " .. (uv.hrtime() - t0) / 1e9 .. " s to answer")
    local rc, out, err, took = moonrl("ctl r set " .. ("k"):rep(65536) .. "=1", dir)
    assert.equal(2, rc, out .. err:sub(1, 300))
    assert.matches("^moonrl ctl set: \"kkk.*%.%.%.: the key is 65536 bytes long: keys are at most 128 bytes", err)
    assert.truthy(took < 20, "took " .. took .. " s")
    trains()

    -- functions from the file stay bounded after it was read: a schedule
    -- sampled for every update (one that loops only between the points the
    -- check samples)
    local function applied(text, says)
      local t0 = uv.hrtime()
      save(tw, text)
      local ok, werr = pcall(wait_for, "the change in train.log", function() return log():find(says, 1, true) end)
      if not ok then
        local lines = {}
        for line in log():gmatch("[^\n]+") do if not line:find(" update %d+ steps ") then lines[#lines + 1] = line end end
        error(tostring(werr) .. ": " .. says .. "\n" .. table.concat(lines, "\n"):sub(-2000))
      end
      return (uv.hrtime() - t0) / 1e9
    end
    applied("return { ppo = { ent_coef = function(p) return 0.01 * (1 - p) end } }\n", "(live " .. tw .. ")")
    trains()
    secs = applied("return { ppo = { ent_coef = function(p)\n  if p > 0 and p < 0.25 then while true do end end\n" ..
      "  return 0.02\nend } }\n", "ppo.ent_coef not applied: ppo.ent_coef: the schedule function failed at progress")
    assert.truthy(log():find("(sampled for 200000 updates): " .. tw .. ":2: took too long: more than 50000000 instructions",
      1, true), log())
    assert.truthy(secs < 30, "the looping schedule was refused after " .. secs .. " s")
    trains()

    -- the values in force did not change; the job stops as asked
    assert.same({ kind = "constant", from = 3e-4, to = 3e-4 }, status().hot["ppo.lr"])
    r = request(sock, { cmd = "stop", checkpoint = false, wait = true })
    assert.is_true(r.ok)
    wait_for("the job's end", function() return support.read_file(dir .. "/job.rc") ~= nil end)
    assert.equal("0", (support.read_file(dir .. "/job.rc"):gsub("%s", "")))
    assert.truthy((support.read_file(dir .. "/job.out") or ""):find("finished=stopped", 1, true))
  end)
end)

-- What a new user meets in the first hour (issue 46, "Small wrong things"):
-- each message points at something that exists and says what to do. The
-- built binary (build/moonrl or $MOONRL_BIN; MOONRL_LUA_PATH passes through)
-- runs in a fresh temporary directory.

local support = require("support")
local json = require("moonrl.formats.json")

local have_bin = support.have_bin

local function skip() return pending("no binary at " .. support.BIN .. " (build it: make build)") end

describe("the first hour", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  it("changes.lua's header names a module that loads it", function()
    local Changes = require("moonrl.run.changes")
    Changes.new({ dir = dir, log = { line = function() end } })
    local text = assert(support.read_file(dir .. "/changes.lua"))
    local name = text:match('require%("([^"]+)"%)%.load')
    assert.is_string(name, text)
    local ok, mod = pcall(require, name)
    assert.is_true(ok, "the header says require(\"" .. name .. "\"): " .. tostring(mod))
    assert.is_function(mod.load)
    assert.same({}, assert(mod.load(dir .. "/changes.lua")))
  end)

  it("train --resume on a sweep's directory says to run the sweep's script again", function()
    if not have_bin then return skip() end
    assert(os.execute("mkdir -p " .. dir .. "/sw/trial-000"))
    support.write_file(dir .. "/sw/sweep.json", json.encode({ metric = "efficiency", mode = "max",
      command = "moonrl run examples/sweep.lua ci" }))
    local rc, out, err = support.moonrl("train --resume sw", dir)
    assert.equal(2, rc, out .. err)
    assert.falsy(err:find("start the run again with moonrl train", 1, true), err)
    assert.truthy(err:find("sweep", 1, true), err)
    assert.truthy(err:find("moonrl run examples/sweep.lua ci", 1, true), err)
    assert.truthy(err:find("moonrl train --resume sw/trial-NNN", 1, true), err)
  end)

  it("--set KEY VALUE (a space, not =) suggests --set KEY=VALUE", function()
    if not have_bin then return skip() end
    local rc, out, err = support.moonrl("train --set ppo.lr 1e-4 --dir run", dir)
    assert.equal(2, rc, out .. err)
    assert.falsy(err:find("not found", 1, true), err)
    assert.truthy(err:find("--set ppo.lr=1e-4", 1, true), err)
    assert.is_nil(io.open(dir .. "/run/config.lua"))
  end)

  it("an unknown key in a config file is reported with the file and its line", function()
    if not have_bin then return skip() end
    support.write_file(dir .. "/bad.lua",
      "return {\n  name = \"x\",\n  env = { lr = 1 },\n  ppo = {\n    lr = 1e-3,\n    learnig_rate = 2,\n  },\n" ..
      "  totl_steps = 5,\n}\n")
    local rc, out, err = support.moonrl("train bad.lua --dir run", dir)
    assert.equal(2, rc, out .. err)
    assert.truthy(err:find("bad.lua:6: unknown key 'ppo.learnig_rate' - did you mean 'ppo.lr'?", 1, true), err)
    assert.truthy(err:find("bad.lua:8: unknown key 'totl_steps' - did you mean 'total_steps'?", 1, true), err)
    assert.truthy(err:find("bad.lua:3: unknown key 'env.lr'", 1, true), err)
    -- a --set is not in the file
    rc, out, err = support.moonrl("train --set ppo.lrr=1 --dir run", dir)
    assert.equal(2, rc, out .. err)
    assert.truthy(err:find("moonrl train: unknown key 'ppo.lrr'", 1, true), err)
  end)

  it("a script's moonrl.train refusing its config exits 2, as the command line does", function()
    if not have_bin then return skip() end
    support.write_file(dir .. "/lr.lua",
      "local moonrl = require 'moonrl'\nmoonrl.train({ name = 'x', ppo = { lr = 'x' } })\n")
    local rc, out, err = support.moonrl("run lr.lua", dir)
    assert.equal(2, rc, out .. err)
    assert.truthy(err:find("ppo.lr: expected a number or schedule", 1, true), err)
    support.write_file(dir .. "/cuda.lua",
      "local moonrl = require 'moonrl'\nmoonrl.train({ name = 'x', device = 'cuda', total_steps = 1024 })\n")
    rc, out, err = support.moonrl("run cuda.lua", dir)
    if rc == 0 then return pending("this machine has a usable GPU") end
    assert.equal(2, rc, out .. err)
    assert.truthy(err:find("no usable GPU was found", 1, true), err)
    -- an error of the script's own is still 1
    support.write_file(dir .. "/oops.lua", "error('oops')\n")
    rc, out, err = support.moonrl("run oops.lua", dir)
    assert.equal(1, rc, out .. err)
  end)

  it("moonrl envs gives the shape each built-in experiment trains with", function()
    if not have_bin then return skip() end
    local rc, out, err = support.moonrl("envs", dir)
    assert.equal(0, rc, out .. err)
    assert.matches("reach%s+2 x 11 x 11 codes%s+discrete%(4%)%s+goal, pit%s+reach: 2 x 5 x 5%s", out)
    assert.matches("foraging%s+2 x 11 x 11 codes%s+discrete%(8%)%s+food, poison%s+default, foraging: 2 x 11 x 11%s",
      out)
    rc, out, err = support.moonrl("envs --json", dir)
    assert.equal(0, rc, out .. err)
    local by = {}
    for line in out:gmatch("{[^\n]+") do
      local e = json.decode(line)
      by[e.name] = e
    end
    assert.same({ { name = "reach", view_range = 2, observation = { kind = "codes", shape = { 2, 5, 5 }, codes = 3 } } },
      by.reach.experiments)
    assert.equal(2, #by.foraging.experiments)
    assert.same({ 2, 11, 11 }, by.foraging.experiments[2].observation.shape)
  end)
end)

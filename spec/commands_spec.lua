-- The command line's parts that need no loop or engine: the command modules
-- describe themselves and the dispatcher's texts are made from them.
local cmdline = require("moonrl.cli.cmdline")
local support = require("support")

local function command_files()
  local out = {}
  for _, name in ipairs(support.files("lua/moonrl/cli/commands")) do
    local n = name:match("^([%w_]+)%.lua$")
    if n then out[#out + 1] = n end
  end
  return out
end

describe("moonrl commands", function()
  it("finds one command per file in lua/moonrl/cli/commands", function()
    local files = command_files()
    assert.same(files, cmdline.command_names())
    for _, want in ipairs({ "bench", "ctl", "doctor", "eval", "ps", "run", "train", "version" }) do
      assert.truthy(cmdline.load(want), want)
    end
  end)

  it("every command names itself after its file and describes itself", function()
    for _, name in ipairs(command_files()) do
      local c, err = cmdline.load(name)
      assert.is_table(c, err)
      assert.equal(name, c.name)
      assert.is_function(c.run)
      assert.is_string(c.usage)
      assert.equal(name, c.usage:match("^(%S+)"), name .. ": the usage line starts with the command")
      assert.is_string(c.summary)
      assert.truthy(type(c.help) == "string" or type(c.help) == "function", name)
      if type(c.help) == "string" then
        assert.equal("usage: moonrl " .. name, c.help:sub(1, #("usage: moonrl " .. name)))
      end
    end
  end)

  it("the usage text lists every command in order, aligned", function()
    local text = cmdline.main_usage()
    local lines = support.lines(text)
    assert.equal("usage: moonrl <command> [arguments]", lines[1])
    assert.equal("commands:", lines[3])
    local listed = {}
    for i = 4, #lines do
      local n = lines[i]:match("^  (%S+)")
      if n then listed[#listed + 1] = n end
    end
    assert.same({ "train", "run", "sweep", "eval", "export", "act", "envs", "doctor", "bench", "ctl", "ps", "dashboard", "version" }, listed)
    assert.truthy(text:find("\n  train [config.lua] [--set k=v ...]   train; no file = the built-in default", 1, true), text)
    assert.truthy(text:find("\n  version                              versions of moonrl", 1, true), text)
    assert.truthy(text:find("`moonrl <command> --help` tells more.", 1, true), text)
    assert.truthy(text:find("--lua-path DIR", 1, true), text)
  end)

  it("a new module is a new command, listed without touching the dispatcher", function()
    package.preload["moonrl.cli.commands.zz_probe"] = function()
      return { name = "zz_probe", usage = "zz_probe [--x]", summary = "a probe", help = "usage: moonrl zz_probe\n",
               run = function() return 0 end }
    end
    local ok, err = pcall(function()
      assert.truthy(cmdline.main_usage():find("\n  zz_probe [--x]", 1, true))
      assert.equal("usage: moonrl zz_probe\n", cmdline.help("zz_probe"))
    end)
    package.preload["moonrl.cli.commands.zz_probe"] = nil
    package.loaded["moonrl.cli.commands.zz_probe"] = nil
    assert(ok, err)
  end)

  it("tells a missing command from a broken one", function()
    assert.same({}, { cmdline.load("no_such_command") })
    assert.same({}, { cmdline.load("../etc") })
    package.preload["moonrl.cli.commands.zz_broken"] = function() error("boom") end
    local c, err = cmdline.load("zz_broken")
    package.preload["moonrl.cli.commands.zz_broken"] = nil
    assert.is_nil(c)
    assert.matches("boom", err)
  end)

  it("parses options and names what is wrong", function()
    local spec = { set = { "list", "key=value" }, dir = { "value", "a directory" }, quick = { "flag" } }
    local o = assert(cmdline.parse("x", { "a.lua", "--set", "k=1", "--set=j=2", "--dir", "d", "--quick" }, spec, 1))
    assert.same({ "a.lua" }, o.positional)
    assert.same({ "k=1", "j=2" }, o.set)
    assert.equal("d", o.dir)
    assert.is_true(o.quick)
    local _, err = cmdline.parse("x", { "--dri", "d" }, spec, 1)
    assert.equal("moonrl x: unknown option '--dri': accepted --dir, --quick, --set, --help - did you mean '--dir'?", err)
    _, err = cmdline.parse("x", { "--dir" }, spec, 1)
    assert.equal("moonrl x: option --dir needs a value (a directory)", err)
    _, err = cmdline.parse("x", { "--quick=1" }, spec, 1)
    assert.equal("moonrl x: option --quick takes no value", err)
    _, err = cmdline.parse("x", { "a", "b" }, spec, 1)
    assert.equal("moonrl x: unexpected argument 'b': accepted at most 1 (see moonrl x --help)", err)
    o = { envs = "12" }
    assert.is_true(cmdline.int_option("x", o, "envs", 1))
    assert.equal(12, o.envs)
    o = { envs = "1.5" }
    assert.same({ nil, "moonrl x: --envs 1.5: expected an integer >= 1" }, { cmdline.int_option("x", o, "envs", 1) })
  end)
end)

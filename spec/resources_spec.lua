-- moonrl.resources: the shipped config files from the binary's embedded copy
-- (a fake "moonrl.embedded" here, as the host preloads it) or from the source
-- tree, and config loading through it.
local resources = require("moonrl.resources")
local config = require("moonrl.config")
local support = require("support")

local function no_gpu() return { gpus = 0, cores = 2, memory = 8e9 } end

-- Installs a fake embedded table for the duration of fn.
local function with_embedded(files, source_dir, fn)
  local listed = {}
  for rel in pairs(files) do listed[#listed + 1] = rel end
  table.sort(listed)
  package.preload["moonrl.embedded"] = function()
    return {
      get = function(rel) return files[rel] end,
      list = function(prefix)
        local out = {}
        for _, rel in ipairs(listed) do
          if rel:sub(1, #prefix) == prefix then out[#out + 1] = rel end
        end
        return out
      end,
      source_dir = source_dir,
    }
  end
  package.loaded["moonrl.embedded"] = nil
  local ok, err = pcall(fn)
  package.preload["moonrl.embedded"] = nil
  package.loaded["moonrl.embedded"] = nil
  assert(ok, err)
end

describe("moonrl.resources", function()
  it("reads the source tree when nothing is embedded", function()
    assert.is_nil(resources.embedded())
    local text, origin = resources.read("configs/hardware/ci.lua")
    assert.equal(support.read_file("configs/hardware/ci.lua"), text)
    assert.matches("configs/hardware/ci%.lua$", origin)
    assert.is_true(resources.exists("configs/default.lua"))
    assert.is_false(resources.exists("configs/hardware/nope.lua"))
    local none, err = resources.read("configs/hardware/nope.lua")
    assert.is_nil(none)
    assert.matches("^no file .*configs/hardware/nope%.lua$", err)
    assert.same({ "configs/levels/advanced.lua", "configs/levels/basic.lua", "configs/levels/ultra.lua" },
      resources.list("configs/levels/"))
    assert.equal(resources.root() .. "configs", config.config_dir())
  end)

  it("refuses paths outside the tree", function()
    assert.has_error(function() resources.read("/etc/passwd") end)
    assert.has_error(function() resources.read("configs/../../x") end)
    assert.has_error(function() resources.exists(nil) end)
  end)

  it("uses the embedded copy, named by its relative path", function()
    with_embedded({
      ["configs/hardware/ci.lua"] = "return { device = 'cpu', seed = 4242, threads = 1 }",
      ["configs/levels/basic.lua"] = "return { precision = 'fp32' }",
      ["configs/levels/advanced.lua"] = "return {\n  precision = 'fp32',\n  cuda = { graphz = true },\n}",
      ["configs/default.lua"] = "return { name = 'embedded', total_steps = 999 }",
    }, nil, function()
      assert.is_table(resources.embedded())
      assert.same({ "return { precision = 'fp32' }", "configs/levels/basic.lua" },
        { resources.read("configs/levels/basic.lua") })
      assert.is_true(resources.exists("configs/default.lua"))
      assert.is_false(resources.exists("configs/hardware/cpu.lua"))
      assert.same({ "configs/levels/advanced.lua", "configs/levels/basic.lua" }, resources.list("configs/levels/"))
      -- profile, level and default experiment all come from the binary
      local r, notes = config.resolve { hardware = "ci", level = "basic", default_experiment = true, detect = no_gpu }
      assert.is_table(r, notes)
      assert.equal(4242, r.seed)
      assert.equal("embedded", r.name)
      assert.equal(999, r.total_steps)
      -- a file the binary lacks is named as such
      local _, err = config.resolve { hardware = "cpu", level = "basic", detect = no_gpu }
      assert.equal('hardware profile "cpu" not found: no file configs/hardware/cpu.lua in this moonrl binary', err)
      -- messages name the embedded file and its line
      _, err = config.resolve { hardware = "ci", level = "advanced", detect = no_gpu }
      assert.equal("configs/levels/advanced.lua:\nunknown key 'cuda.graphz' - did you mean 'cuda.graphs'?", err)
      local t, lerr = config.load_resource("configs/levels/basic.lua")
      assert.same({ precision = "fp32" }, t, lerr)
    end)
  end)

  it("reports a failing embedded file with its chunk name", function()
    with_embedded({ ["configs/hardware/ci.lua"] = "local x = 1\nreturn { seed = linaer(1, 2) }" }, nil, function()
      local _, err = config.resolve { hardware = "ci", level = "basic", detect = no_gpu }
      assert.matches("^configs/hardware/ci%.lua:2: .*linaer.* %- did you mean 'linear'%?$", err)
    end)
  end)

  it("reads a source tree on disk when the host says so (source_dir)", function()
    local dir = support.tmpdir()
    assert(support.uv.fs_mkdir(dir .. "/configs", 493))
    assert(support.uv.fs_mkdir(dir .. "/configs/hardware", 493))
    support.write_file(dir .. "/configs/hardware/ci.lua", "return { device = 'cpu', seed = 31 }")
    local ok, err = pcall(with_embedded, { ["configs/hardware/ci.lua"] = "return { seed = 1 }" }, dir, function()
      assert.is_nil(resources.embedded())
      assert.equal(dir .. "/", resources.root())
      local text, origin = resources.read("configs/hardware/ci.lua")
      assert.equal("return { device = 'cpu', seed = 31 }", text)
      assert.equal(dir .. "/configs/hardware/ci.lua", origin)
      assert.same({ "configs/hardware/ci.lua" }, resources.list("configs/hardware/"))
      assert.equal(31, config.load_resource("configs/hardware/ci.lua").seed)
    end)
    support.rm_rf(dir)
    assert(ok, err)
  end)

  it("a user's own files are read from disk even with an embedded copy", function()
    local dir = support.tmpdir()
    local path = support.write_file(dir .. "/mine.lua", "return { device = 'cpu', seed = 55 }")
    local exp = support.write_file(dir .. "/exp.lua", "return { total_steps = 777 }")
    local ok, err = pcall(with_embedded, { ["configs/levels/basic.lua"] = "return {}" }, nil, function()
      local r, notes = config.resolve { hardware = path, level = "basic", file = exp, detect = no_gpu }
      assert.is_table(r, notes)
      assert.equal(55, r.seed)
      assert.equal(777, r.total_steps)
    end)
    support.rm_rf(dir)
    assert(ok, err)
  end)

  it("finds a built-in experiment by name in the embedded copy, wherever the working directory is", function()
    with_embedded({
      ["configs/hardware/ci.lua"] = "return { seed = 4242 }",
      ["configs/levels/basic.lua"] = "return { precision = 'fp32' }",
      ["configs/default.lua"] = "return { name = 'embedded-default' }",
      ["configs/experiments/maze.lua"] = "return { name = 'maze', total_steps = 777 }",
    }, nil, function()
      local names = require("moonrl.config.load").experiments()
      assert.same({ "default", "maze" }, names)
      for _, name in ipairs({ "maze", "maze.lua", "experiments/maze", "configs/experiments/maze.lua" }) do
        local r, notes = config.resolve { file = name, hardware = "ci", level = "basic", detect = no_gpu }
        assert.is_table(r, notes)
        assert.equal("maze", r.name, name)
        assert.equal(777, r.total_steps, name)
      end
      local r = assert(config.resolve { file = "default", hardware = "ci", level = "basic", detect = no_gpu })
      assert.equal("embedded-default", r.name)
      local _, err = config.resolve { file = "maz", hardware = "ci", level = "basic", detect = no_gpu }
      assert.matches("config file 'maz' not found: no such file in .*, and not a built%-in experiment: " ..
        "built%-in default, maze %- did you mean 'maze'%?", err)
      -- a file of that name on disk comes first
      local dir = support.tmpdir()
      support.write_file(dir .. "/maze.lua", "return { name = 'mine' }")
      r = assert(config.resolve { file = dir .. "/maze.lua", hardware = "ci", level = "basic", detect = no_gpu })
      assert.equal("mine", r.name)
      support.rm_rf(dir)
    end)
  end)
end)

-- A moonrl binary on its own: build/moonrl (or $MOONRL_BIN) copied alone into
-- a fresh folder, with no lua/ or configs/ near it and an environment that
-- cannot point back at the source tree (env -i: no MOONRL_*, LUA_PATH or the
-- user's HOME), trains the ci profile, evaluates the checkpoint and runs a
-- script, all from its embedded Lua library and configs. Then the development
-- override: MOONRL_LUA_PATH=<tree> loads that tree's (modified) modules, and
-- the same tree lying in the working directory is ignored without it.

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
local ROOT = os.getenv("PWD") or "."          -- busted runs from the repository root
if BIN:sub(1, 1) ~= "/" then BIN = ROOT .. "/" .. BIN end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == 0 or ok == true
end

-- Runs ./moonrl in dir with only PATH and HOME=dir (plus `env`, "K=V ...").
-- Returns exit code, stdout, stderr.
local function moonrl(dir, args, env)
  local out, err, rc = dir .. "/.stdout", dir .. "/.stderr", dir .. "/.rc"
  sh(string.format("cd %q && env -i PATH=%q HOME=%q OMP_NUM_THREADS=2 %s timeout 120 ./moonrl %s >%q 2>%q; echo $? >%q",
    dir, os.getenv("PATH") or "/usr/bin:/bin", dir, env or "", args, out, err, rc))
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

-- A fresh folder holding a copy of the binary and nothing else.
local function lone_copy()
  local dir = support.tmpdir()
  assert(sh(string.format("cp %q %q/moonrl", BIN, dir)), "cannot copy " .. BIN)
  return dir
end

-- A copy of the source tree's lua/ and configs/ under dir, with moonrl.util
-- marking itself as this copy when loaded.
local function modified_tree(dir)
  assert(sh(string.format("mkdir -p %q && cp -R %q/lua %q/configs %q/", dir, ROOT, ROOT, dir, dir)))
  local util = dir .. "/lua/moonrl/util.lua"
  local text = assert(support.read_file(util), "no " .. util)
  support.write_file(util, 'package.loaded["moonrl.spec_marker"] = "tree copy"\n' .. text)
  return dir
end

local function skip()
  return pending("no binary at " .. BIN .. " (build it: make build)")
end

describe("a moonrl binary copied alone", function()
  local dir
  after_each(function()
    if dir then support.rm_rf(dir) end
    dir = nil
  end)

  it("trains the ci profile, evaluates its checkpoint and runs a script from its embedded library", function()
    if not have_bin then return skip() end
    dir = lone_copy()
    assert.are.same({ "moonrl" }, support.files(dir))

    local rc, out, err = moonrl(dir, "train --set hardware=ci --set total_steps=4096")
    assert.are.equal(0, rc, out .. err)
    local runs = support.files(dir .. "/runs")
    assert.are.equal(1, #runs, out .. err)
    local run = dir .. "/runs/" .. runs[1]
    local metrics = support.read_file(run .. "/metrics.jsonl") or ""
    local lines = support.lines(metrics)
    assert.are.equal(4, #lines, metrics)   -- 4096 steps of ci = 4 updates
    assert.are.equal(4096, require("moonrl.formats.json").decode(lines[4]).agent_steps)
    local ckpts = support.files(run .. "/checkpoints")
    assert.are.equal(1, #ckpts, out .. err)

    -- A small evaluation (the default is 1024 envs x 4096 steps).
    rc, out, err = moonrl(dir, "eval runs/" .. runs[1] .. "/checkpoints/" .. ckpts[1] .. " --envs 32 --steps 256")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find(" ground_truth |", 1, true), out .. err)

    support.write_file(dir .. "/script.lua", [[
      local moonrl = require("moonrl")
      local embedded = require("moonrl.embedded")
      local cfg = assert(moonrl.config.resolve({ hardware = "ci", level = "basic", sets = { "total_steps=2048" } }))
      print("version=" .. moonrl.version)
      print("source_dir=" .. tostring(embedded.source_dir))
      print("ci=" .. tostring(embedded.get("configs/hardware/ci.lua") ~= nil))
      print("levels=" .. table.concat(embedded.list("configs/levels/"), ","))
      print("num_envs=" .. cfg.env.num_envs .. " total_steps=" .. cfg.total_steps)
      print("traceback=" .. debug.getinfo(moonrl.train, "S").source)
      print("missing=" .. select(2, pcall(require, "moonrl.no_such_module")))
    ]])
    rc, out, err = moonrl(dir, "run script.lua")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("\nsource_dir=nil\n", 1, true), out)
    assert.truthy(out:find("\nci=true\n", 1, true), out)
    local levels = {}
    for _, f in ipairs(support.files(ROOT .. "/configs/levels")) do levels[#levels + 1] = "configs/levels/" .. f end
    assert.truthy(out:find("\nlevels=" .. table.concat(levels, ",") .. "\n", 1, true), out)
    assert.truthy(out:find(" total_steps=2048\n", 1, true), out)
    -- Bytecode keeps debug info: tracebacks name the file in the tree.
    assert.truthy(out:match("\ntraceback=@lua/moonrl/[%w_/]+%.lua\n"), out)
    assert.truthy(out:find("missing=module 'moonrl.no_such_module' not found", 1, true), out)

    rc, out, err = moonrl(dir, "version")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("\nlua library: embedded (", 1, true), out)
  end)

  it("loads the library from MOONRL_LUA_PATH, and from nowhere else unless asked", function()
    if not have_bin then return skip() end
    dir = lone_copy()
    local tree = modified_tree(dir .. "/tree")
    modified_tree(dir)                            -- the same, stray, in the working directory
    local real = assert(support.uv.fs_realpath(tree))
    support.write_file(dir .. "/script.lua", [[
      require("moonrl.util")
      print("marker=" .. tostring(package.loaded["moonrl.spec_marker"]))
      print("source_dir=" .. tostring(require("moonrl.embedded").source_dir))
    ]])

    local rc, out, err = moonrl(dir, "run script.lua", "MOONRL_LUA_PATH=tree")
    assert.are.equal(0, rc, out .. err)
    assert.are.equal("marker=tree copy\nsource_dir=" .. real .. "\n", out)

    rc, out, err = moonrl(dir, "--lua-path tree run script.lua")
    assert.are.equal(0, rc, out .. err)
    assert.are.equal("marker=tree copy\nsource_dir=" .. real .. "\n", out)

    rc, out, err = moonrl(dir, "version", "MOONRL_LUA_PATH=tree")
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("\nlua library: " .. real .. " (MOONRL_LUA_PATH)\n", 1, true), out)

    rc, out, err = moonrl(dir, "run script.lua")
    assert.are.equal(0, rc, out .. err)
    assert.are.equal("marker=nil\nsource_dir=nil\n", out)

    rc, out, err = moonrl(dir, "version", "MOONRL_LUA_PATH=" .. dir .. "/nowhere")
    assert.are.equal(2, rc, out .. err)
    assert.truthy(err:find("MOONRL_LUA_PATH " .. dir .. "/nowhere: ", 1, true), err)
  end)
end)

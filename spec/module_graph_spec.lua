-- The shape of the Lua library (lua/moonrl): every module loads; what
-- requires what has no cycle (a require inside a function counts: it only
-- hides the cycle; so does pcall(require, ...)), between modules or between
-- packages (a folder under lua/moonrl, or a file directly in it), and goes
-- down the package order docs/architecture.md states; every moonrl.* name
-- required is a module; no module reaches into package.loaded for a moonrl
-- module (a callback is injected instead); and no module reaches into
-- another's private (_-prefixed) helpers, so the facade (init.lua) is a
-- plain re-export of the runtime modules.

local support = require("support")

local LIB = "lua/moonrl"
local HOST_MODULES = { ["moonrl.core"] = true, ["moonrl.embedded"] = true }   -- the host's, in C

-- Every .lua file under dir, recursively, sorted: "lua/moonrl/run/init.lua", ...
local function lua_files(dir, out)
  out = out or {}
  for _, name in ipairs(support.files(dir)) do
    local path = dir .. "/" .. name
    local st = require("luv").fs_stat(path)
    if st and st.type == "directory" then
      lua_files(path, out)
    elseif name:match("%.lua$") and not name:match("^%.") then
      out[#out + 1] = path
    end
  end
  table.sort(out)
  return out
end

-- "lua/moonrl/run/init.lua" -> "moonrl.run" (as require and the embedded library name it)
local function module_name(path)
  return (path:match("^lua/(.+)%.lua$"):gsub("/init$", ""):gsub("/", "."))
end

-- The moonrl modules a text requires: name -> its first line. Every form
-- counts: require("m"), require "m", require 'm', require [[m]], spacing
-- aside, pcall(require, "m"), and a require inside a function (the text is
-- read whole). Comments do not (-- ... and --[[ ... ]]); nor does a partial
-- name ("moonrl.run.sinks." .. kind: a family, not one module), nor self.
local REQUIRE_FORMS = {
  "require%s*%(?%s*[\"'](moonrl[%w_%.]*)[\"']",           -- require("m"), require "m", require ( 'm' )
  "require%s*%(?%s*%[=*%[(moonrl[%w_%.]*)%]=*%]",          -- require [[m]]
  "require%s*,%s*[\"'](moonrl[%w_%.]*)[\"']",              -- pcall(require, "m")
}

-- The text without its comments; line numbers kept.
local function code_of(text)
  text = text:gsub("(%-%-%[(=*)%[.-%]%2%])", function(c) return (c:gsub("[^\n]", "")) end)
  local out = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = (line:gsub("%-%-.*$", "")) end
  return out
end

local function requires_in(text, self_name)
  local found = {}
  for n, code in ipairs(code_of(text)) do
    for _, form in ipairs(REQUIRE_FORMS) do
      for name in code:gmatch(form) do
        if not name:match("%.$") and name ~= self_name then found[name] = math.min(found[name] or n, n) end
      end
    end
  end
  return found
end

-- Lines of a text that reach into package.loaded for a moonrl module (read
-- or write): package.loaded["moonrl.x"], rawget(package.loaded, "moonrl.x"),
-- package.loaded.moonrl.
local LOADED_FORMS = {
  "package%.loaded%s*%[%s*[\"']moonrl",
  "package%.loaded%s*%[%s*%[=*%[moonrl",
  "package%.loaded%s*%.%s*moonrl%f[^%w_]",
  "rawget%s*%(%s*package%.loaded%s*,%s*[\"']moonrl",
}

local function loaded_reaches(text)
  local lines = {}
  for n, code in ipairs(code_of(text)) do
    for _, form in ipairs(LOADED_FORMS) do
      if code:find(form) then lines[#lines + 1] = n break end
    end
  end
  return lines
end

-- The library: module name -> { path =, text =, requires = {name -> line} }.
local function library()
  local mods = {}
  for _, path in ipairs(lua_files(LIB)) do
    local text = support.read_file(path)
    local self_name = module_name(path)
    mods[self_name] = { path = path, text = text, requires = requires_in(text, self_name) }
  end
  return mods
end

-- A module's package: the first folder under lua/moonrl, or a file directly
-- in it ("moonrl.engine" -> "engine"; the facade "moonrl" -> "moonrl").
local function package_of(name)
  return name:match("^moonrl%.([^.]+)") or name
end

-- The package graph of a library: package -> {package -> "path:line" of a require}.
local function packages(mods)
  local graph = {}
  for name, m in pairs(mods) do
    local from = package_of(name)
    graph[from] = graph[from] or {}
    for dep, line in pairs(m.requires) do
      local to = package_of(dep)
      if to ~= from and not HOST_MODULES[dep] then
        local where = m.path .. ":" .. line
        if not graph[from][to] or where < graph[from][to] then graph[from][to] = where end
      end
    end
  end
  return graph
end

-- The package order of docs/architecture.md's Lua section: its one line of
-- the form "a, b < c < d, e" (bottom to top; packages on one rank may not
-- require each other). -> {package -> rank}, {packages, bottom to top} | nil, why
local function read_order(text)
  local section = ("\n" .. text):match("\n# Architecture: the Lua library[^\n]*\n(.*)$")
  if not section then return nil, "no \"# Architecture: the Lua library\" section" end
  section = section:match("^(.-)\n# ") or section
  local found
  for line in section:gmatch("[^\n]+") do
    if line:match("^%s*[%w_]+[%w_, ]* < [%w_, <]+$") then
      if found then return nil, "two order lines: " .. found .. " and " .. line end
      found = line
    end
  end
  if not found then return nil, "no line \"a, b < c < ...\" (the package order)" end
  local rank, list = {}, {}
  local r = 0
  for group in (found .. "<"):gmatch("([^<]+)<") do
    r = r + 1
    for p in group:gmatch("[%w_]+") do
      if rank[p] then return nil, p .. " is in the order twice" end
      rank[p], list[#list + 1] = r, p
    end
  end
  return rank, list
end

-- Requires against an order: each one goes to a package of a lower rank.
-- graph as packages() makes it. -> list of messages, sorted
local function order_violations(graph, rank)
  local bad = {}
  for from, deps in pairs(graph) do
    if not rank[from] then
      bad[#bad + 1] = "package " .. from .. " is not in the order"
    else
      for to, where in pairs(deps) do
        if not rank[to] then
          bad[#bad + 1] = "package " .. to .. " (required at " .. where .. ") is not in the order"
        elseif rank[to] >= rank[from] then
          bad[#bad + 1] = where .. ": " .. from .. " requires " .. to .. ", which is " ..
            (rank[to] == rank[from] and "on the same rank" or "above it") .. " in the order"
        end
      end
    end
  end
  table.sort(bad)
  return bad
end

-- The cycles of a graph (name -> {dep -> anything}), each as "a -> b -> a".
local function cycles(graph)
  local state, stack, found = {}, {}, {}
  local function visit(m)
    state[m] = "open"
    stack[#stack + 1] = m
    local deps = {}
    for d in pairs(graph[m] or {}) do deps[#deps + 1] = d end
    table.sort(deps)
    for _, d in ipairs(deps) do
      if graph[d] then
        if state[d] == "open" then
          local c = { d }
          for i = #stack, 1, -1 do
            table.insert(c, 1, stack[i])
            if stack[i] == d then break end
          end
          found[#found + 1] = table.concat(c, " -> ")
        elseif not state[d] then
          visit(d)
        end
      end
    end
    stack[#stack] = nil
    state[m] = "done"
  end
  local names = {}
  for m in pairs(graph) do names[#names + 1] = m end
  table.sort(names)
  for _, m in ipairs(names) do if not state[m] then visit(m) end end
  return found
end

describe("the Lua library's modules", function()
  local mods = library()

  it("are found under lua/moonrl, in folders by concern", function()
    for _, name in ipairs({ "moonrl", "moonrl.runtime.tasks", "moonrl.runtime.shutdown", "moonrl.run",
      "moonrl.run.start", "moonrl.control.server", "moonrl.control.client", "moonrl.eval.evaluate",
      "moonrl.formats.json", "moonrl.cli", "moonrl.cli.cmdline", "moonrl.config", "moonrl.sweep", "moonrl.number" }) do
      assert.is_table(mods[name], name)
    end
  end)

  it("require only modules that exist", function()
    local missing = {}
    for name, m in pairs(mods) do
      for dep, line in pairs(m.requires) do
        if not mods[dep] and not HOST_MODULES[dep] then
          missing[#missing + 1] = m.path .. ":" .. line .. ": requires " .. dep .. ", which is no module"
        end
      end
    end
    table.sort(missing)
    assert.same({}, missing)
  end)

  it("finds a cycle where there is one (the check itself)", function()
    assert.same({ "a -> b -> c -> a" }, cycles({ a = { b = true }, b = { c = true }, c = { a = true }, d = { a = true } }))
    assert.same({}, cycles({ a = { b = true }, b = { c = true }, c = {} }))
  end)

  it("require each other without a cycle, counting requires inside functions", function()
    local graph = {}
    for name, m in pairs(mods) do graph[name] = m.requires end
    assert.same({}, cycles(graph))
  end)

  it("see every form of require (the pattern itself)", function()
    local text = table.concat({
      'local a = require("moonrl.a")',
      'local b = require "moonrl.b"',
      "local c = require 'moonrl.c'",
      'local ok, d = pcall(require, "moonrl.d")',
      'local function f() return require("moonrl.e").x end',
      '-- require("moonrl.comment") in a comment',
      '--[[ require("moonrl.block")',
      ']] local g = require ( "moonrl.g" )',
      'local fam = require("moonrl.family." .. kind)',
      'local h = require[[moonrl.h]]; local self = require("moonrl.self")',
      'local d2 = pcall(require,"moonrl.d")',
    }, "\n")
    assert.same({ ["moonrl.a"] = 1, ["moonrl.b"] = 2, ["moonrl.c"] = 3, ["moonrl.d"] = 4, ["moonrl.e"] = 5,
      ["moonrl.g"] = 8, ["moonrl.h"] = 10 }, requires_in(text, "moonrl.self"))
    assert.same({}, requires_in("local x = required('moonrl.no') -- require('moonrl.no')", "moonrl.x"))
  end)

  it("finds a package-level cycle and a require up the order where there is one (the checks themselves)", function()
    local planted = {
      ["moonrl"] = { path = "init.lua", requires = { ["moonrl.run"] = 1 } },
      ["moonrl.util"] = { path = "util.lua", requires = {} },
      ["moonrl.config.load"] = { path = "config/load.lua", requires = { ["moonrl.util"] = 3, ["moonrl.core"] = 4 } },
      ["moonrl.engine"] = { path = "engine.lua", requires = { ["moonrl.config.load"] = 5 } },
      ["moonrl.run"] = { path = "run/init.lua", requires = { ["moonrl.engine"] = 6, ["moonrl.run.x"] = 7 } },
      ["moonrl.run.x"] = { path = "run/x.lua", requires = {} },
    }
    local graph = packages(planted)
    assert.same({ moonrl = { run = "init.lua:1" }, util = {}, config = { util = "config/load.lua:3" },
      engine = { config = "engine.lua:5" }, run = { engine = "run/init.lua:6" } }, graph)
    assert.same({}, cycles(graph))
    local rank = assert(read_order("x\n# Architecture: the Lua library (lua/moonrl/)\n\n" ..
      "    util < config < engine < run < moonrl\n"))
    assert.same({}, order_violations(graph, rank))
    -- planted: config requires engine (up), which makes a cycle
    planted["moonrl.config.load"].requires["moonrl.engine"] = 9
    graph = packages(planted)
    assert.same({ "config -> engine -> config" }, cycles(graph))
    assert.same({ "config/load.lua:9: config requires engine, which is above it in the order" },
      order_violations(graph, rank))
    -- the same rank is no better; a package the order leaves out is named
    rank = assert(read_order("# Architecture: the Lua library\nutil < config, engine < run < moonrl\n# Next\n"))
    assert.same({ "config/load.lua:9: config requires engine, which is on the same rank in the order",
      "engine.lua:5: engine requires config, which is on the same rank in the order" }, order_violations(graph, rank))
    rank = assert(read_order("# Architecture: the Lua library\nutil < config < engine < moonrl\n"))
    assert.same({ "config/load.lua:9: config requires engine, which is above it in the order",
      "package run (required at init.lua:1) is not in the order", "package run is not in the order" },
      order_violations(graph, rank))
    assert.is_nil((read_order("# Architecture: the Lua library\nno order here\n")))
    assert.is_nil((read_order("# Architecture: the Lua library\na < b\nc < d\n")))
    assert.is_nil((read_order("# Architecture: the Lua library\na < b < a\n")))
  end)

  it("form packages without a cycle, each requiring only packages below it in docs/architecture.md's order", function()
    local rank, list = read_order(support.read_file("docs/architecture.md"))
    assert(rank, list)
    local graph = packages(mods)
    -- every package is in the order and requires only packages below it
    assert.same({}, order_violations(graph, rank))
    assert.same({}, cycles(graph))
  end)

  it("do not reach into package.loaded for a moonrl module (the check itself, then the library)", function()
    assert.same({ 1, 2, 3, 4 }, loaded_reaches(table.concat({
      'local live = package.loaded["moonrl.run.live"]',
      "if package.loaded['moonrl.core'] then end",
      "local m = rawget(package.loaded, 'moonrl.x')",
      "local f = package.loaded.moonrl",
      "-- package.loaded[\"moonrl.x\"] in a comment",
      'local luv = package.loaded["luv"]; local ok = pcall(require, "moonrl.core")',
    }, "\n")))
    local bad = {}
    for _, m in pairs(mods) do
      for _, n in ipairs(loaded_reaches(m.text)) do
        bad[#bad + 1] = m.path .. ":" .. n .. ": reaches into package.loaded (require it, or have a callback injected)"
      end
    end
    table.sort(bad)
    assert.same({}, bad)
  end)

  it("do not call another module's private (_-prefixed) helpers", function()
    local bad = {}
    for name, m in pairs(mods) do
      local n = 0
      for line in (m.text .. "\n"):gmatch("([^\n]*)\n") do
        n = n + 1
        local code = line:gsub("%-%-.*$", "")   -- comments may name them
        -- locals bound to another module: local x = require("moonrl.y")
        for var, dep in code:gmatch("local%s+([%w_]+)%s*=%s*require%s*%(?%s*[\"'](moonrl[%w_%.]*)[\"']") do
          if dep ~= name then m.aliases = m.aliases or {}; m.aliases[var] = dep end
        end
        local function flag(what) bad[#bad + 1] = m.path .. ":" .. n .. ": " .. what end
        for dep, field in code:gmatch("require%s*%(?%s*[\"'](moonrl[%w_%.]*)[\"']%)?%s*[.:](_[%w_]+)") do
          if dep ~= name then flag(dep .. "." .. field) end
        end
        for var, field in code:gmatch("([%w_]+)%(?%)?[.:](_[%w_]+)") do
          if m.aliases and m.aliases[var] then flag(m.aliases[var] .. "." .. field) end
        end
        if name ~= "moonrl" then
          for field in code:gmatch("moonrl%(?%)?[.:](_[%w_]+)") do flag("moonrl." .. field) end
        end
      end
    end
    table.sort(bad)
    assert.same({}, bad)
  end)

  it("each load in the binary (the CLI's entry and the docs generator, scripts, aside)", function()
    if not support.have_bin then return pending("no binary at " .. support.BIN) end
    local names = {}
    for name in pairs(mods) do
      if name ~= "moonrl.cli" and name ~= "moonrl.gen_docs" then names[#names + 1] = name end
    end
    table.sort(names)
    local dir = support.tmpdir()
    local lines = { "local failed = {}" }
    for _, name in ipairs(names) do
      lines[#lines + 1] = string.format("do local ok, e = pcall(require, %q) if not ok then failed[#failed + 1] = %q .. ': ' .. tostring(e) end end", name, name)
    end
    lines[#lines + 1] = "print(#failed == 0 and 'all loaded' or table.concat(failed, '\\n'))"
    support.write_file(dir .. "/load_all.lua", table.concat(lines, "\n") .. "\n")
    local rc, out, err = support.moonrl("run load_all.lua", dir)
    support.rm_rf(dir)
    assert.equal(0, rc, out .. err)
    assert.equal("all loaded\n", out)
  end)

  it("reach the engine only through moonrl.engine: no engine.C, engine.ffi, ffi.C or engine type elsewhere", function()
    -- What each module besides the engine may use of these, and why.
    local ALLOWED = {
      ["moonrl.engine"] = { why = "the engine's door: moonrl.h through LuaJIT's ffi",
                            ["engine.C"] = true, ["engine.ffi"] = true, ["ffi.C"] = true, ["C.mr_"] = true, type = true },
      ["moonrl.runtime.libc"] = { why = "the C library (flock, geteuid, strerror), not the engine", ["ffi.C"] = true },
      -- an environment thread's own Lua state (src/host/lua_env.c): the host
      -- hands it moonrl.h's declarations; moonrl.engine does not load there
      ["moonrl.env.thread"] = { why = "an environment thread's state", ["ffi.C"] = true, ["C.mr_"] = true, type = true },
      ["moonrl.env.program"] = { why = "an environment thread's state", ["ffi.C"] = true, ["C.mr_"] = true, type = true },
    }
    -- The ways past the door in a line of code (its comment removed):
    -- "engine.C", "engine.ffi" (after require("moonrl.engine"), a name ending
    -- in "engine" or one of `aliases`, the module's other locals bound to
    -- it), "ffi.C", "C.mr_" (an engine function or constant through any name
    -- for the C namespace: C.mr_*, C.MR_*), and "type" for a string that
    -- names one of the engine's C types ("mr_error", "mr_trainer*[1]",
    -- "const mr_eval_episode *").
    local function violations(code, aliases)
      local found = {}
      local forms = { { "engine.C", "engine[\"']?%)?%s*%.%s*C%f[^%w_]" },
                      { "engine.ffi", "engine[\"']?%)?%s*%.%s*ffi%f[^%w_]" },
                      { "ffi.C", "ffi[\"']?%)?%s*%.%s*C%f[^%w_]" },
                      { "C.mr_", "%f[%w_]C%s*%.%s*[mM][rR]_" } }
      for a in pairs(aliases or {}) do
        forms[#forms + 1] = { "engine.C", "%f[%w_]" .. a .. "%s*%.%s*C%f[^%w_]" }
        forms[#forms + 1] = { "engine.ffi", "%f[%w_]" .. a .. "%s*%.%s*ffi%f[^%w_]" }
      end
      local seen = {}
      for _, v in ipairs(forms) do
        if not seen[v[1]] and code:find(v[2]) then found[#found + 1], seen[v[1]] = v[1], true end
      end
      for _, str in code:gmatch("([\"'])(.-)%1") do
        if str:match("^%s*const%s+mr_[%w_]+[%s%*%[%]%d%?]*$") or str:match("^%s*mr_[%w_]+[%s%*%[%]%d%?]*$") then
          found[#found + 1] = "type"
          break
        end
      end
      return found
    end
    -- the check itself: each form planted in a line is found, and what is allowed is not
    assert.same({ "engine.C" }, violations("local C = engine.C"))
    assert.same({ "engine.C", "C.mr_" }, violations("require(\"moonrl.engine\").C.mr_trainer_free(t)"))
    assert.same({ "engine.ffi" }, violations("local s = engine.ffi.string(p)"))
    assert.same({ "ffi.C", "C.mr_" }, violations("local v = require('ffi').C.mr_version()"))
    assert.same({ "ffi.C" }, violations("local C = ffi.C"))
    assert.same({ "C.mr_" }, violations("local v = C.mr_version(); local w = K.MR_FP32"))
    assert.same({ "engine.C" }, violations("local C = e.C", { e = true }))
    assert.same({}, violations("local C = e.C"))
    assert.same({ "type" }, violations("local e = buf.new(\"mr_error\")"))
    assert.same({ "type" }, violations("local t = x.new('mr_trainer*[1]')"))
    assert.same({ "type" }, violations("local r = x.cast(\"const mr_eval_episode *\", b)"))
    assert.same({}, violations("local c = engine.config(cfg); local d = engine.Cfg; x.new(\"float[?]\", n)"))
    assert.same({}, violations("error(\"on cuda, mr_trainer_infer runs on a cpu copy\")"))

    local bad = {}
    for name, m in pairs(mods) do
      local allowed = ALLOWED[name] or {}
      local aliases = {}
      for a in m.text:gmatch("local%s+([%w_]+)%s*=%s*require%s*%(?%s*[\"']moonrl%.engine[\"']") do aliases[a] = true end
      local n = 0
      for line in (m.text .. "\n"):gmatch("([^\n]*)\n") do
        n = n + 1
        for _, what in ipairs(violations((line:gsub("%-%-.*$", "")), aliases)) do
          if not allowed[what] then
            bad[#bad + 1] = m.path .. ":" .. n .. ": " .. (what == "type" and "an engine type" or what) ..
              " outside moonrl.engine (use or add an engine.* function: lua/moonrl/engine.lua)"
          end
        end
      end
    end
    table.sort(bad)
    assert.same({}, bad)
  end)
end)

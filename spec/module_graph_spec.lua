-- The shape of the Lua library (lua/moonrl): every module loads; what
-- requires what has no cycle (a require inside a function counts: it only
-- hides the cycle); every moonrl.* name required is a module; and no module
-- reaches into another's private (_-prefixed) helpers, so the facade
-- (init.lua) is a plain re-export of the runtime modules.

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

-- The library: module name -> { path =, text =, requires = {name -> line} }.
local function library()
  local mods = {}
  for _, path in ipairs(lua_files(LIB)) do
    local text = support.read_file(path)
    local self_name = module_name(path)
    local m = { path = path, text = text, requires = {} }
    local n = 0
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      local code = line:gsub("%-%-.*$", "")   -- a comment's example is no require
      for name in code:gmatch("require%s*%(?%s*[\"'](moonrl[%w_%.]*)[\"']") do
        -- a partial name ("moonrl.run.sinks." .. kind) is a family, not one module
        if not name:match("%.$") and name ~= self_name then m.requires[name] = m.requires[name] or n end
      end
    end
    mods[self_name] = m
  end
  return mods
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

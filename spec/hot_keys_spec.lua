-- The hot keys are described once, in lua/moonrl/config/schema.lua (hot =
-- "engine" | "lua"; an engine key's hot_slot); everything else is derived:
-- src/engine/hot_keys.h (generated: mr_hot_params, the engine's range check,
-- the config <-> hot copies, the host's per-update schedule tables, the
-- checkpoint's hot record), resume's comparison and schedule lists, and what
-- `moonrl ctl set` (run:set_many -> config.set with running) accepts. This
-- spec fails when a hot key is added in one place only: it compares the
-- schema with the committed header, with what the engine built from it
-- declares and checks, and with what a running run accepts.

local support = require("support")
local schema = require("moonrl.config.schema")
local config = require("moonrl.config")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

local HEADER = "src/engine/hot_keys.h"

-- The rows of MR_HOT_KEYS in a header's text: {kind=, key=, member=, field=, min=, max=}.
local function header_rows(text)
  local body = assert(text:match("#define MR_HOT_KEYS%(SCHED, REAL, INT, U64%)(.-)\n\n"), "no MR_HOT_KEYS")
  local rows = {}
  for kind, key, member, field, lo, hi in
      body:gmatch('(%u+%d*)%("([^"]+)", ([%w_]+), ([%w_.]+), ([^,]+), ([^)]+)%)') do
    rows[#rows + 1] = { kind = kind, key = key, member = member, field = field,
      min = tonumber((lo:gsub("ull$", ""))), max = tonumber((hi:gsub("ull$", ""))) }
  end
  return rows
end

local KIND = { schedule = "SCHED", number = "REAL", boolean = "INT" }
local function kind_of(e)
  if e.type == "integer" then return e.max > 2147483647 and "U64" or "INT" end
  return KIND[e.type]
end

describe("hot keys", function()
  it("src/engine/hot_keys.h is what the schema generates (run the build, or gen_config_keys.lua, and commit it)",
    function()
      local dir = support.tmpdir()
      local rc = os.execute(string.format("luajit src/engine/core/gen_config_keys.lua . %q %q",
        dir .. "/config_keys.h", dir .. "/hot_keys.h"))
      local fresh = support.read_file(dir .. "/hot_keys.h")
      support.rm_rf(dir)
      assert.truthy(rc == 0 or rc == true, "gen_config_keys.lua failed")
      assert.are.equal(fresh, support.read_file(HEADER))
    end)

  it("the header's MR_HOT_KEYS are the schema's engine hot keys, in hot_slot order, with their ranges", function()
    local rows = header_rows(assert(support.read_file(HEADER)))
    local engine_hot = schema.hot_keys("engine")
    assert.is_true(#engine_hot >= 8, "engine hot keys: " .. #engine_hot)
    assert.are.equal(#engine_hot, #rows)
    for i, key in ipairs(engine_hot) do
      local e, r = schema.by_key[key], rows[i]
      assert.are.equal(i, e.hot_slot)
      assert.are.equal(key, r.key)
      assert.are.equal(key:match("([^.]+)$"), r.member)
      assert.are.equal(e.c, r.field)
      assert.are.equal(kind_of(e), r.kind, key)
      if e.type ~= "boolean" then
        assert.are.equal(e.min, r.min, key .. " min")
        assert.are.equal(e.max, r.max, key .. " max")
      end
    end
    -- every hot key is engine or lua; the others have no slot
    local all, lua_hot = {}, schema.hot_keys("lua")
    for _, k in ipairs(engine_hot) do all[#all + 1] = k end
    for _, k in ipairs(lua_hot) do all[#all + 1] = k end
    table.sort(all)
    local any = schema.hot_keys()
    table.sort(any)
    assert.same(any, all)
    for _, e in ipairs(schema.keys) do
      assert.is_true(e.hot == false or e.hot == "engine" or e.hot == "lua", e.key)
      if e.hot ~= "engine" then assert.is_nil(e.hot_slot, e.key) end
    end
  end)

  it("a running run accepts exactly the schema's hot keys (what moonrl ctl set and run:set_many check)", function()
    local cfg = assert(config.resolve { file = {}, hardware = "cpu", level = "basic" })
    local hot = {}
    for _, k in ipairs(schema.hot_keys()) do hot[k] = true end
    for _, e in ipairs(schema.keys) do
      local v = config.get(cfg, e.key)
      if v ~= nil and type(v) ~= "function" then
        local ok, err = config.set(cfg, e.key, v, { running = true })
        if hot[e.key] then
          assert.is_true(ok, e.key .. ": " .. tostring(err))
        else
          assert.is_nil(ok, e.key)
          assert.truthy(err:find(e.key .. " is not hot", 1, true), err)
          assert.truthy(err:find(table.concat(schema.hot_keys(), ", "), 1, true), err)
        end
      end
    end
  end)

  it("reach the engine's mr_hot_params, its range check and the host's schedule tables from the schema", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    support.write_file(dir .. "/s.lua", [[
      local moonrl = require("moonrl")
      local engine = require("moonrl.engine")
      local config = require("moonrl.config")
      local schema = require("moonrl.config.schema")
      local util = require("moonrl.util")
      local members = {}
      for _, f in ipairs(engine.fields("mr_hot_params")) do members[#members + 1] = f.name .. ":" .. f.type end
      print("members=" .. table.concat(members, ","))
      local base = assert(moonrl.resolve({}, { hardware = "cpu", level = "basic" }))
      for _, key in ipairs(schema.hot_keys("engine")) do
        local e = schema.by_key[key]
        local member = key:match("([^.]+)$")
        -- a value inside the range, not the default: set as ctl set does, read back from the engine
        local v = e.min + (math.min(e.max, 1e6) - e.min) * 0.375
        if e.type == "integer" then v = math.floor(v) end
        local cfg = util.deepcopy(base)
        assert(config.set(cfg, key, v, { running = true }))
        local h = engine.hot_params(cfg)
        local got = e.type == "schedule" and h[member].start or h[member]
        print("value " .. key .. "=" .. string.format("%.17g", v) .. " " .. string.format("%.17g", tonumber(got)))
        -- below its range, past the Lua check: the engine's own guard names it
        local raw = util.deepcopy(base)
        local section = raw[e.section] or raw
        section[e.section and e.name or key] = e.min - 1
        local c = assert(engine.config(raw))
        local ok, err = engine.validate(c)
        print("guard " .. key .. "=" .. tostring(ok) .. " " .. tostring(err))
        -- a function schedule: a per-update table for the host under the key
        if e.type == "schedule" then
          local f = util.deepcopy(base)
          f[e.section][e.name] = function(p) return e.min + p * 0 end
          local t = assert(engine.schedule_tables(f))
          print("table " .. key .. "=" .. tostring(t[key] and #t[key]))
        end
      end
    ]])
    os.execute(string.format("cd %q && timeout 60 %q run s.lua >out 2>err; echo $? >rc", dir, BIN))
    local rc, out, err = tonumber(support.read_file(dir .. "/rc")), support.read_file(dir .. "/out") or "",
      support.read_file(dir .. "/err") or ""
    support.rm_rf(dir)
    assert.are.equal(0, rc, err .. out)
    local want = {}
    local ctype = { schedule = "mr_schedule", number = "double", boolean = "int" }
    for _, key in ipairs(schema.hot_keys("engine")) do
      local e = schema.by_key[key]
      local t = ctype[e.type] or (e.max > 2147483647 and "uint64_t" or "int")
      want[#want + 1] = key:match("([^.]+)$") .. ":" .. t
    end
    assert.are.equal(table.concat(want, ","), out:match("members=([^\n]*)"))
    for _, key in ipairs(schema.hot_keys("engine")) do
      local e = schema.by_key[key]
      local set, got = out:match("value " .. key:gsub("%.", "%%.") .. "=(%S+) (%S+)")
      assert.truthy(set, key .. " not shown:\n" .. out)
      assert.are.equal(tonumber(set), tonumber(got), key .. " did not reach mr_hot_params")
      local guard = out:match("guard " .. key:gsub("%.", "%%.") .. "=([^\n]*)")
      assert.truthy(guard and guard:find("^nil " .. key:gsub("%.", "%%.") .. " = .* is out of range: accepted"),
        key .. ": the engine's guard said " .. tostring(guard))
      if e.type == "schedule" then
        local n = out:match("table " .. key:gsub("%.", "%%.") .. "=(%S+)")
        assert.truthy(tonumber(n) and tonumber(n) > 0, key .. ": no per-update table (" .. tostring(n) .. ")")
      end
    end
  end)
end)

local schema = require("moonrl.config.schema")
local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

-- In the binary: every engine key's default as mr_config_default sets it, and
-- what mr_config_validate says to each integer or number key just past its
-- maximum ("key<TAB>default<TAB>message" lines).
local ENGINE_PROBE = [[
local engine = require("moonrl.engine")
local schema = require("moonrl.config.schema")
local ffi, C = engine.ffi, engine.C
local function field(c, path)
  local v = c
  for part in path:gmatch("[^.]+") do v = v[part] end
  return v
end
local function set(c, path, value)
  local parent, last = c, nil
  for part in path:gmatch("[^.]+") do
    if last then parent = parent[last] end
    last = part
  end
  parent[last] = value
end
for _, e in ipairs(schema.keys) do
  if e.c then
    local c = ffi.new("mr_config")
    C.mr_config_default(c)
    local v, shown = field(c, e.c), nil
    if e.type == "schedule" then
      shown = string.format("%d %.17g %.17g", tonumber(v.kind), v.start, v["end"])
    elseif e.type == "list" then
      local t = {}
      for i = 0, tonumber(field(c, e.c_count)) - 1 do t[#t + 1] = tostring(tonumber(v[i])) end
      shown = table.concat(t, ",")
    else
      shown = string.format("%.17g", tonumber(v))
    end
    local msg = ""
    if (e.type == "integer" or e.type == "number") and not e.key:match("^env%.") and e.max < 2^53 then
      set(c, e.c, e.type == "integer" and e.max + 1 or e.max * 2 + 1)
      local err = ffi.new("mr_error")
      msg = C.mr_config_validate(c, err) ~= 0 and ffi.string(err.msg) or "accepted"
    end
    print(e.key .. "\t" .. shown .. "\t" .. msg)
  end
end
]]

local SCHED = { constant = 0, linear = 1, cosine = 2, step = 3 }

describe("moonrl.config.schema", function()
  it("describes every key with a type, a description and a default that passes its own check", function()
    local types = { number = true, integer = true, boolean = true, string = true, enum = true,
      list = true, schedule = true, ["function"] = true }
    assert.is_true(#schema.keys >= 60)
    local seen = {}
    for _, e in ipairs(schema.keys) do
      assert.is_nil(seen[e.key], "duplicate key " .. e.key)
      seen[e.key] = true
      assert.is_true(types[e.type], e.key .. " has type " .. tostring(e.type))
      assert.is_string(e.desc, e.key)
      assert.is_true(#e.desc > 5, e.key)
      assert.is_true(e.key:match("^[a-z][a-z0-9_.]*$") ~= nil, e.key .. " is not snake_case")
      if e.section then assert.is_table(schema.section_by_name[e.section], e.key) end
      local ok, err = schema.check(e, e.default)
      assert.is_true(ok, tostring(err))
      if e.default == nil then assert.is_true(e.optional, e.key .. " has no default") end
    end
  end)

  it("is what the engine's defaults and ranges are made from (mr_config_default, mr_config_validate)", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    support.write_file(dir .. "/probe.lua", ENGINE_PROBE)
    local p = io.popen(string.format("cd %q && %q run probe.lua 2>&1", dir, BIN))
    local out = p:read("*a")
    p:close()
    support.rm_rf(dir)
    local n = 0
    for key, shown, msg in out:gmatch("([%w_.]+)\t([^\t]*)\t([^\n]*)") do
      n = n + 1
      local e = assert(schema.by_key[key], key)
      local want
      if e.type == "schedule" then
        want = string.format("%d %.17g %.17g", SCHED[e.default.kind], e.default.from, e.default.to)
      elseif e.type == "list" then
        want = table.concat(e.default, ",")
      elseif e.type == "enum" then
        for i, c in ipairs(e.choices) do if c == e.default then want = string.format("%.17g", i - 1) end end
      elseif e.type == "boolean" then
        want = e.default and "1" or "0"
      elseif key == "policy.popart_beta_min" then   -- a float field
        want = string.format("%.17g", tonumber(string.format("%.9g", e.default)))
      else
        want = string.format("%.17g", e.default)
      end
      if key == "policy.popart_beta_min" then
        assert.is_true(math.abs(tonumber(shown) - e.default) < 1e-9, key .. ": engine default " .. shown)
      else
        assert.equal(want, shown, key .. ": the engine's default")
      end
      if msg ~= "" then
        assert.truthy(msg:find(key, 1, true) and msg:find("out of range", 1, true),
          key .. " just past its maximum: " .. msg)
      end
    end
    assert.is_true(n >= 40, "the probe printed " .. n .. " engine keys:\n" .. out)
  end)

  -- which keys are hot, and that mr_hot_params, the engine's checks and
  -- ctl set agree with the schema on them: spec/hot_keys_spec.lua

  it("marks the cuda section and non-fp32 precision as gpu_only", function()
    for _, e in ipairs(schema.keys) do
      if e.section == "cuda" then assert.is_true(e.gpu_only, e.key) end
    end
    assert.is_true(schema.by_key.precision.gpu_only)
    assert.is_false(schema.by_key["ppo.lr"].gpu_only)
  end)

  describe("check", function()
    local function check(key, v) return schema.check(schema.by_key[key], v) end

    it("integers, with and without \"auto\"", function()
      assert.is_true(check("env.num_envs", "auto"))
      assert.is_true(check("env.num_envs", 1))
      assert.same({ nil, 'env.num_envs = 0 is out of range: accepted 1 .. 1048576 or "auto"' },
        { check("env.num_envs", 0) })
      assert.same({ nil, 'env.num_envs: expected an integer or "auto", got number 1.5' },
        { check("env.num_envs", 1.5) })
      assert.same({ nil, 'env.grid_size: expected an integer, got string "auto"' },
        { check("env.grid_size", "auto") })
    end)

    it("numbers: bounds, open bounds, non-finite values", function()
      assert.is_true(check("ppo.gamma", 1))
      assert.same({ nil, "ppo.gamma = 1.5 is out of range: accepted 0 .. 1" }, { check("ppo.gamma", 1.5) })
      assert.same({ nil, "ppo.gamma = nan is out of range: accepted 0 .. 1" }, { check("ppo.gamma", 0 / 0) })
      assert.same({ nil, "ppo.adam_beta2 = 1 is out of range: accepted 0 .. 0.999999999" }, { check("ppo.adam_beta2", 1) })
      assert.same({ nil, "ppo.max_grad_norm = 0 is out of range: accepted 1e-08 .. 1000000" },
        { check("ppo.max_grad_norm", 0) })
      local open = { key = "x", type = "number", min = 0, max = 1, min_open = true }
      assert.same({ nil, "x = 0 is out of range: accepted > 0 and <= 1" }, { schema.check(open, 0) })
      assert.is_true(schema.check(open, 1))
      local half = { key = "y", type = "number", min = 0 }
      assert.same({ nil, "y = -1 is out of range: accepted >= 0" }, { schema.check(half, -1) })
    end)

    it("lists", function()
      assert.is_true(check("policy.conv_channels", { 8 }))
      assert.same({ nil, "policy.conv_channels[3] = 0 is out of range: accepted 1 .. 1024" },
        { check("policy.conv_channels", { 16, 32, 0 }) })
      assert.same({ nil, 'policy.conv_channels[1]: expected an integer, got string "16"' },
        { check("policy.conv_channels", { "16" }) })
      local err = select(2, check("policy.conv_channels", { 1, 2, 3, 4, 5, 6, 7, 8, 9 }))
      assert.matches("^policy.conv_channels: expected a list of 1 .. 8 integers, got 9 elements", err)
      err = select(2, check("policy.conv_channels", {}))
      assert.matches("got 0 elements", err)
      err = select(2, check("policy.conv_channels", { a = 1 }))
      assert.matches("expected a list", err)
      assert.same({ nil, 'warmup.prepare[1] = "graph": accepted "graphs", "algorithms" - did you mean "graphs"?' },
        { check("warmup.prepare", { "graph" }) })
      assert.same({ nil, 'warmup.prepare[2] = "graphs" is listed twice' },
        { check("warmup.prepare", { "graphs", "graphs" }) })
      assert.same({ nil, 'warmup.prepare: expected a list of 0 .. 2 of "graphs", "algorithms", got 3 elements ' ..
        '{"graphs", "algorithms", "graphs"}' }, { check("warmup.prepare", { "graphs", "algorithms", "graphs" }) })
    end)

    it("enums, with a did-you-mean and .lua paths where allowed", function()
      assert.same({ nil, 'env.mode = "proxyy": accepted "ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy" - did you mean "proxy"?' },
        { check("env.mode", "proxyy") })
      assert.is_true(check("hardware", "/home/me/myhost.lua"))
      assert.is_nil(check("device", "gpu.lua"))
    end)

    it("schedules: tables, numbers and sampled functions", function()
      assert.is_true(check("ppo.lr", 1e-4))
      assert.is_true(check("ppo.lr", { kind = "cosine", from = 1e-3, to = 0 }))
      assert.is_true(check("ppo.lr", function(p) return 1e-3 * (1 - p) end))
      assert.same({ nil, 'ppo.lr: expected a number or schedule, got string "fast"' }, { check("ppo.lr", "fast") })
      assert.same({ nil, "ppo.lr.from = -1 is out of range: accepted 0 .. 1" },
        { check("ppo.lr", { kind = "linear", from = -1, to = 0 }) })
      assert.equal("ppo.lr: the schedule function returned -1 at progress 1, out of range: accepted 0 .. 1",
        select(2, check("ppo.lr", function(p) return p < 1 and 1e-4 or -1 end)))
      assert.matches("failed at progress 0: .*boom", select(2, check("ppo.lr", function() error("boom") end)))
      assert.matches('returned string "x" at progress 0', select(2, check("ppo.lr", function() return "x" end)))
    end)

    it("strings, booleans, functions, optional keys", function()
      assert.is_true(check("dir", nil))
      assert.is_true(check("hooks.on_update", nil))
      assert.same({ nil, "hooks.on_update: expected a function or nil, got number 3" }, { check("hooks.on_update", 3) })
      assert.same({ nil, 'policy.popart: expected true or false, got string "yes"' }, { check("policy.popart", "yes") })
      assert.matches("without / \\ or control characters", select(2, check("name", "a/b")))
      assert.matches("ppo.epochs is missing", select(2, check("ppo.epochs", nil)))
    end)
  end)
end)

local schema = require("moonrl.config.schema")
local support = require("support")

-- Reads the defaults written in moonrl.h's comments ("default 192") per
-- struct, so a changed engine default cannot drift from the schema unseen.
local function header_defaults()
  local text = assert(support.read_file("src/engine/moonrl.h"), "run the specs from the repository root")
  local sections = {
    mr_env_config = "env", mr_policy_config = "policy", mr_ppo_config = "ppo",
    mr_cuda_config = "cuda", mr_config = "", mr_eval_config = "eval",
  }
  local out = {}
  for body, name in text:gmatch("typedef struct [%w_]+ {(.-)} ([%w_]+);") do
    local section = sections[name]
    if section then
      for line in body:gmatch("[^\n]+") do
        local field = line:match("^%s*[%w_ ]-%s([%w_]+)%s*[%[;]")
        local value = line:match("default%s+(.-)%s*%*/")
        if field and value then
          value = value:match("^(.-);") or value:match("^(.-):") or value:match("^(.-)%s+%(") or value
          out[#out + 1] = { key = (section == "" and "" or section .. ".") .. field, text = value }
        end
      end
    end
  end
  return out
end

local function parse_default(text)
  local a, b = text:match("^linear%s+(%S+)%s*%->%s*(%S+)$")
  if a then return { kind = "linear", from = tonumber(a), to = tonumber(b) } end
  if text:match("^{") then
    local list = {}
    for n in text:gmatch("%d+") do list[#list + 1] = tonumber(n) end
    return list
  end
  local n = tonumber((text:gsub(",", "")))
  if n then return n end
  return text
end

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

  it("has the defaults written in moonrl.h", function()
    local fields = header_defaults()
    assert.is_true(#fields >= 40, "parsed only " .. #fields .. " defaults from moonrl.h")
    for _, f in ipairs(fields) do
      local want = parse_default(f.text)
      if f.key == "policy.num_conv" then
        assert.equal(want, #schema.by_key["policy.conv_channels"].default)
      else
        local e = schema.by_key[f.key]
        assert.is_table(e, "moonrl.h has " .. f.key .. " but the schema does not")
        local have = e.default
        if e.type == "boolean" then want = (want == 1) end
        assert.same(want, have, f.key .. ": moonrl.h says " .. f.text)
      end
    end
  end)

  it("marks exactly the engine's hot parameters (mr_hot_params) as engine-hot", function()
    local engine_hot = {}
    for _, e in ipairs(schema.keys) do
      if e.hot == "engine" then engine_hot[#engine_hot + 1] = e.key end
    end
    table.sort(engine_hot)
    assert.same({ "ppo.clip", "ppo.ent_coef", "ppo.ent_floor", "ppo.ent_floor_coef", "ppo.lr",
      "ppo.max_grad_norm", "ppo.vf_coef", "total_steps" }, engine_hot)
    for _, e in ipairs(schema.keys) do
      assert.is_true(e.hot == false or e.hot == "engine" or e.hot == "lua", e.key)
    end
  end)

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
      assert.same({ nil, 'warmup.prepare[1] = "graph": accepted "graphs" - did you mean "graphs"?' },
        { check("warmup.prepare", { "graph" }) })
      assert.same({ nil, 'warmup.prepare: expected a list of 0 .. 1 of "graphs", got 2 elements {"graphs", "graphs"}' },
        { check("warmup.prepare", { "graphs", "graphs" }) })
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

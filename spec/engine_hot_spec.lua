-- engine.hot_params and engine.total_updates are the engine's own answers
-- (mr_config_hot_params, mr_config_total_updates), so they are checked in the
-- moonrl binary, against numbers worked out here from the config.

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

describe("engine hot parameters and update count", function()
  it("come from the engine for a resolved config", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    support.write_file(dir .. "/s.lua", [[
      local moonrl = require("moonrl")
      local engine = require("moonrl.engine")
      local S = moonrl.schedule
      local function show(k, v) print(k .. "=" .. string.format("%.17g", tonumber(v))) end
      local cfg = assert(moonrl.resolve({
        total_steps = 1000001, env = { num_envs = 48 },
        ppo = { rollout_steps = 32, lr = S.step(1e-3, 0.5, 0.25, 1e-4), clip = 0.15,
                ent_coef = S.cosine(0.05, 0.001), vf_coef = 0.75, max_grad_norm = 0.3,
                ent_floor = 0.25, ent_floor_coef = 0.02 },
      }, { hardware = "cpu", level = "basic" }))
      local h = engine.hot_params(cfg)
      show("lr_kind", h.lr.kind); show("lr_start", h.lr.start); show("lr_end", h.lr["end"])
      show("lr_gamma", h.lr.gamma); show("lr_every", h.lr.every)
      show("clip_kind", h.clip.kind); show("clip_start", h.clip.start)
      show("ent_kind", h.ent_coef.kind); show("ent_end", h.ent_coef["end"])
      show("vf_coef", h.vf_coef); show("max_grad_norm", h.max_grad_norm)
      show("ent_floor", h.ent_floor); show("ent_floor_coef", h.ent_floor_coef)
      show("total_steps", h.total_steps)
      show("updates", engine.total_updates(cfg))
      cfg.total_steps = 48 * 32 * 7
      show("updates_exact", engine.total_updates(cfg))
      cfg.total_steps = 1
      show("updates_one", engine.total_updates(cfg))
      print("kinds=" .. tonumber(engine.C.MR_SCHED_STEP) .. "," .. tonumber(engine.C.MR_SCHED_CONSTANT) ..
        "," .. tonumber(engine.C.MR_SCHED_COSINE))
    ]])
    os.execute(string.format("cd %q && timeout 60 %q run s.lua >out 2>err; echo $? >rc", dir, BIN))
    local rc, out, err = tonumber(support.read_file(dir .. "/rc")), support.read_file(dir .. "/out") or "",
      support.read_file(dir .. "/err") or ""
    support.rm_rf(dir)
    assert.are.equal(0, rc, err)
    local f = {}
    for k, v in out:gmatch("([%w_]+)=([^\n]+)") do f[k] = v end
    local step, constant, cosine = f.kinds:match("^(%d+),(%d+),(%d+)$")
    assert.are.equal(tonumber(step), tonumber(f.lr_kind))
    assert.are.equal(1e-3, tonumber(f.lr_start))
    assert.are.equal(1e-4, tonumber(f.lr_end))
    assert.are.equal(0.5, tonumber(f.lr_gamma))
    assert.are.equal(0.25, tonumber(f.lr_every))
    assert.are.equal(tonumber(constant), tonumber(f.clip_kind))
    assert.are.equal(0.15, tonumber(f.clip_start))
    assert.are.equal(tonumber(cosine), tonumber(f.ent_kind))
    assert.are.equal(0.001, tonumber(f.ent_end))
    assert.are.equal(0.75, tonumber(f.vf_coef))
    assert.are.equal(0.3, tonumber(f.max_grad_norm))
    assert.are.equal(0.25, tonumber(f.ent_floor))
    assert.are.equal(0.02, tonumber(f.ent_floor_coef))
    assert.are.equal(1000001, tonumber(f.total_steps))
    -- 48 x 32 = 1536 samples an update: 1000001 / 1536 = 651.04 -> 652
    assert.are.equal(652, tonumber(f.updates))
    assert.are.equal(7, tonumber(f.updates_exact))
    assert.are.equal(1, tonumber(f.updates_one))
  end)

  it("env.proxy_obs_storage reaches mr_policy_config (faithful by default, uint8 = MR_OBS_UINT8)", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    support.write_file(dir .. "/s.lua", [[
      local moonrl = require("moonrl")
      local engine = require("moonrl.engine")
      for _, v in ipairs({ "default", "faithful", "uint8" }) do
        local cfg = assert(moonrl.resolve({ env = { mode = "proxy",
          proxy_obs_storage = v ~= "default" and v or nil } }, { hardware = "cpu", level = "basic" }))
        local c = assert(engine.config(cfg))
        print(v .. "=" .. tonumber(c.policy.proxy_obs_storage))
      end
      print("uint8_enum=" .. tonumber(engine.C.MR_OBS_UINT8))
      print("bad=" .. tostring(select(2, moonrl.resolve({ env = { proxy_obs_storage = "u8" } }, { hardware = "cpu" }))))
    ]])
    os.execute(string.format("cd %q && timeout 60 %q run s.lua >out 2>err; echo $? >rc", dir, BIN))
    local rc, out, err = tonumber(support.read_file(dir .. "/rc")), support.read_file(dir .. "/out") or "",
      support.read_file(dir .. "/err") or ""
    support.rm_rf(dir)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("default=0\nfaithful=0\nuint8=1\nuint8_enum=1\n", 1, true), out)
    assert.truthy(out:find("bad=[^\n]*env.proxy_obs_storage[^\n]*faithful", 1), out)
  end)

  it("cpu.conv reaches mr_config (auto by default; onednn, im2col); other values are refused on both sides", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    support.write_file(dir .. "/s.lua", [[
      local moonrl = require("moonrl")
      local engine = require("moonrl.engine")
      for _, v in ipairs({ "default", "auto", "onednn", "im2col" }) do
        local cfg = assert(moonrl.resolve({ cpu = { conv = v ~= "default" and v or nil } },
          { hardware = "cpu", level = "basic" }))
        local c = assert(engine.config(cfg))
        print(v .. "=" .. tonumber(c.cpu.conv))
      end
      print("enums=" .. tonumber(engine.C.MR_CPU_CONV_AUTO) .. tonumber(engine.C.MR_CPU_CONV_ONEDNN)
        .. tonumber(engine.C.MR_CPU_CONV_IM2COL))
      print("bad=" .. tostring(select(2, moonrl.resolve({ cpu = { conv = "mkldnn" } }, { hardware = "cpu" }))))
      local c = assert(engine.config(assert(moonrl.resolve({ cpu = { conv = "im2col" } }, { hardware = "cpu" }))))
      c.cpu.conv = 7
      print("engine=" .. tostring(select(2, engine.validate(c))))
    ]])
    os.execute(string.format("cd %q && timeout 60 %q run s.lua >out 2>err; echo $? >rc", dir, BIN))
    local rc, out, err = tonumber(support.read_file(dir .. "/rc")), support.read_file(dir .. "/out") or "",
      support.read_file(dir .. "/err") or ""
    support.rm_rf(dir)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("default=0\nauto=0\nonednn=1\nim2col=2\nenums=012\n", 1, true), out)
    assert.truthy(out:find("bad=[^\n]*cpu.conv[^\n]*onednn", 1), out)
    assert.truthy(out:find("engine=[^\n]*cpu.conv = 7", 1), out)
  end)

  it("cpu.activations reaches mr_config beside cpu.conv (auto by default; store, recompute); others are refused", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local dir = support.tmpdir()
    support.write_file(dir .. "/s.lua", [[
      local moonrl = require("moonrl")
      local engine = require("moonrl.engine")
      for _, v in ipairs({ "default", "auto", "store", "recompute" }) do
        local cfg = assert(moonrl.resolve({ cpu = { conv = "im2col", activations = v ~= "default" and v or nil } },
          { hardware = "cpu", level = "basic" }))
        local c = assert(engine.config(cfg))
        print(v .. "=" .. tonumber(c.cpu.activations) .. "," .. tonumber(c.cpu.conv))
      end
      print("bad=" .. tostring(select(2, moonrl.resolve({ cpu = { activations = "keep" } }, { hardware = "cpu" }))))
      local c = assert(engine.config(assert(moonrl.resolve({}, { hardware = "cpu" }))))
      c.cpu.activations = 3
      print("engine=" .. tostring(select(2, engine.validate(c))))
    ]])
    os.execute(string.format("cd %q && timeout 60 %q run s.lua >out 2>err; echo $? >rc", dir, BIN))
    local rc, out, err = tonumber(support.read_file(dir .. "/rc")), support.read_file(dir .. "/out") or "",
      support.read_file(dir .. "/err") or ""
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("default=0,2\nauto=0,2\nstore=1,2\nrecompute=2,2\n", 1, true), out)
    assert.truthy(out:find("bad=[^\n]*cpu.activations[^\n]*recompute", 1), out)
    assert.truthy(out:find("engine=[^\n]*cpu.activations = 3", 1), out)
    -- a run says which it uses
    os.execute(string.format("cd %q && timeout 120 %q train --hardware ci --set total_steps=512 --set " ..
      "cpu.activations=recompute --no-eval --dir r >out 2>err; echo $? >rc", dir, BIN))
    rc, out, err = tonumber(support.read_file(dir .. "/rc")), support.read_file(dir .. "/out") or "",
      support.read_file(dir .. "/err") or ""
    support.rm_rf(dir)
    assert.are.equal(0, rc, err)
    assert.truthy((out .. err):find("conv activations (cpu.activations): recomputed in the backward", 1, true), out .. err)
  end)
end)

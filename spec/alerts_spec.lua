local alerts = require("moonrl.run.alerts")

local cfg = { sps_min = 1000, memory_warning = 0.9, memory_critical = 0.95, nonfinite = true }

local function kinds(list)
  local out = {}
  for i, a in ipairs(list) do out[i] = a.level .. ":" .. a.kind end
  return out
end

describe("moonrl.alerts.check", function()
  it("warns about low sps once per crossing, skipping the first update", function()
    local state = {}
    assert.same({}, alerts.check({ update = 1, sps = 10 }, cfg, state))        -- warm-up update
    local a = alerts.check({ update = 2, sps = 500 }, cfg, state)
    assert.same({ "warning:sps" }, kinds(a))
    assert.equal("throughput 500 agent-steps/s in update 2 is below alerts.sps_min = 1000", a[1].message)
    assert.equal(2, a[1].update)
    assert.same({}, alerts.check({ update = 3, sps = 400 }, cfg, state))       -- still low: quiet
    assert.same({}, alerts.check({ update = 4, sps = 2000 }, cfg, state))      -- recovered
    assert.same({ "warning:sps" }, kinds(alerts.check({ update = 5, sps = 900 }, cfg, state)))
  end)

  it("is off when sps_min is 0 and reads thresholds live", function()
    local state, c = {}, { sps_min = 0, nonfinite = true }
    alerts.check({ sps = 1 }, c, state)
    assert.same({}, alerts.check({ sps = 1 }, c, state))
    c.sps_min = 5
    assert.same({ "warning:sps" }, kinds(alerts.check({ sps = 1 }, c, state)))
  end)

  it("memory: warning, then critical, each once, again after falling back", function()
    local state = {}
    local limit = 8 * 2 ^ 30
    local function at(frac) return { memory_peak_bytes = frac * limit, memory_limit_bytes = limit, update = 7 } end
    assert.same({}, alerts.check(at(0.5), cfg, state))
    local a = alerts.check(at(0.91), cfg, state)
    assert.same({ "warning:memory" }, kinds(a))
    assert.equal("memory peak 7.3 GiB is 91% of the 8.0 GiB limit in update 7 (alerts.memory_warning = 0.9)", a[1].message)
    assert.same({}, alerts.check(at(0.92), cfg, state))
    assert.same({ "critical:memory" }, kinds(alerts.check(at(0.96), cfg, state)))
    assert.same({}, alerts.check(at(0.97), cfg, state))
    assert.same({}, alerts.check(at(0.93), cfg, state))                        -- down to warning: quiet
    assert.same({ "critical:memory" }, kinds(alerts.check(at(0.99), cfg, state)))
    assert.same({}, alerts.check(at(0.2), cfg, state))
    assert.same({ "warning:memory" }, kinds(alerts.check(at(0.9), cfg, state)))
  end)

  it("memory: nothing without a limit", function()
    assert.same({}, alerts.check({ memory_peak_bytes = 1e12 }, cfg, {}))
    assert.same({}, alerts.check({ memory_peak_bytes = 1e12, memory_limit_bytes = 0 }, cfg, {}))
  end)

  it("non-finite values: critical once per crossing, off when disabled", function()
    local state = {}
    local a = alerts.check({ update = 3, policy_loss = 0 / 0, value_loss = 1 }, cfg, state)
    assert.same({ "critical:nonfinite" }, kinds(a))
    assert.equal("non-finite loss or gradient in update 3: policy_loss = nan", a[1].message)
    assert.same({}, alerts.check({ policy_loss = 0 / 0 }, cfg, state))
    assert.same({}, alerts.check({ policy_loss = 1 }, cfg, state))
    assert.same({ "critical:nonfinite" }, kinds(alerts.check({ nonfinite = 1 }, cfg, state)))
    assert.same({}, alerts.check({ grad_norm = math.huge }, { nonfinite = false }, {}))
  end)

  it("skipped fp16 steps: a warning when skipping starts", function()
    local state = {}
    assert.same({}, alerts.check({ skipped_steps = 0 }, cfg, state))
    local a = alerts.check({ update = 4, skipped_steps = 2, loss_scale = 1024 }, cfg, state)
    assert.same({ "warning:skipped_steps" }, kinds(a))
    assert.equal("2 fp16 optimizer steps skipped for inf/nan in update 4 (loss scale now 1024)", a[1].message)
    assert.same({}, alerts.check({ skipped_steps = 3 }, cfg, state))
    assert.same({}, alerts.check({ skipped_steps = 3 }, cfg, state))
    assert.same({ "warning:skipped_steps" }, kinds(alerts.check({ skipped_steps = 4 }, cfg, state)))
  end)

  it("non-finite values in a run (bad_streak): critical at every such update", function()
    local state = {}
    for n = 1, 3 do
      local a = alerts.check({ update = 6 + n, nonfinite = 1, bad_streak = n }, cfg, state)
      assert.same({ "critical:nonfinite" }, kinds(a))
      assert.equal("non-finite loss or gradient in update " .. (6 + n) .. ": the engine reported a non-finite value",
        a[1].message)
    end
    assert.same({}, alerts.check({ update = 10, nonfinite = 0, bad_streak = 0 }, cfg, state))
  end)

  it("skipped steps of an update with a non-finite value: only the nonfinite alert", function()
    local state = {}
    assert.same({ "critical:nonfinite" }, kinds(alerts.check({ nonfinite = 1, skipped_steps = 4 }, cfg, state)))
    assert.same({}, alerts.check({ nonfinite = 0, skipped_steps = 4 }, cfg, state))
    assert.same({ "warning:skipped_steps" }, kinds(alerts.check({ nonfinite = 0, skipped_steps = 5 }, cfg, state)))
  end)

  it("reports several kinds at once", function()
    local a = alerts.check({ policy_loss = 0 / 0, memory_peak_bytes = 99, memory_limit_bytes = 100 }, cfg, {})
    assert.same({ "critical:memory", "critical:nonfinite" }, kinds(a))
  end)
end)

local Jsonl = require("moonrl.run.sinks.jsonl")
local json = require("moonrl.formats.json")
local support = require("support")
local uv = support.uv

describe("jsonl sink", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  it("writes one JSON object per update through a real luv loop", function()
    local errors = {}
    local sink = Jsonl.new(dir, {}, { uv = uv, clock = function() return 1700000000.5 end,
      on_error = function(m) errors[#errors + 1] = m end })
    assert.equal(dir .. "/metrics.jsonl", sink.path)
    for u = 1, 3 do
      sink:update({ update = u, agent_steps = u * 4096ULL, sps = 25000.5, episode_return_mean = u / 4,
        policy_loss = (u == 2) and 0 / 0 or -0.01, extra_table = { 1 }, name = "x" })
    end
    -- asynchronous: nothing is on disk before the loop runs
    local before = support.read_file(sink.path)
    assert.is_true(before == nil or before == "")
    local closed = false
    sink:close(function(err) assert.is_nil(err); closed = true end)
    support.run_until(function() return closed end)
    assert.same({}, errors)
    local lines = support.lines(support.read_file(sink.path))
    assert.equal(3, #lines)
    for u, line in ipairs(lines) do
      local rec = assert(json.decode(line))
      assert.equal(u, rec.update)
      assert.equal(u * 4096, rec.agent_steps)
      assert.equal(25000.5, rec.sps)
      assert.equal(u / 4, rec.episode_return_mean)
      assert.equal(1700000000.5, rec.wall_time)
      assert.equal("x", rec.name)
      assert.is_nil(rec.extra_table)
      for _, k in ipairs({ "update", "agent_steps", "sps", "episode_return_mean", "episode_length_mean", "efficiency",
        "food_per_episode", "poison_per_episode", "policy_loss", "value_loss", "entropy", "approx_kl",
        "clip_fraction", "explained_variance", "lr", "grad_norm", "memory_peak_bytes" }) do
        assert.is_not_nil(rec[k], k .. " missing from line " .. u)
      end
      assert.equal(json.null, rec.value_loss) -- not reported: null, but present
    end
    assert.equal(json.null, json.decode(lines[2]).policy_loss) -- NaN
    assert.equal(-0.01, json.decode(lines[3]).policy_loss)
    -- keys sorted: "agent_steps" first
    assert.equal('{"agent_steps":4096,', lines[1]:sub(1, 20))
  end)

  it("writes an event as a line of its own with an event field, in order with the metrics", function()
    local sink = Jsonl.new(dir, {}, { uv = uv, clock = function() return 5 end })
    sink:update({ update = 1, lr = 3e-4 })
    sink:event({ event = "change", update = 2, key = "ppo.lr", old = { kind = "linear", from = 3e-4, to = 1e-4 },
      new = 1e-4, source = "live tweaks.lua" })
    sink:update({ update = 2, lr = 1e-4 })
    local closed = false
    sink:close(function() closed = true end)
    support.run_until(function() return closed end)
    local lines = support.lines(support.read_file(sink.path))
    assert.equal(3, #lines)
    local metrics = {}
    for _, line in ipairs(lines) do
      local rec = json.decode(line)
      if rec.event == nil then metrics[#metrics + 1] = rec.update end
    end
    assert.same({ 1, 2 }, metrics)
    assert.same({ event = "change", update = 2, key = "ppo.lr", old = { kind = "linear", from = 3e-4, to = 1e-4 },
      new = 1e-4, source = "live tweaks.lua", wall_time = 5 }, json.decode(lines[2]))
    assert.is_nil(json.decode(lines[1]).event)   -- metrics never carry the field
  end)

  it("keeps the order of many quick writes", function()
    local sink = Jsonl.new(dir, {}, { uv = uv })
    for u = 1, 500 do sink:update({ update = u }) end
    local closed = false
    sink:close(function() closed = true end)
    support.run_until(function() return closed end)
    local lines = support.lines(support.read_file(sink.path))
    assert.equal(500, #lines)
    for u, line in ipairs(lines) do assert.equal(u, json.decode(line).update) end
  end)

  it("reports a write error through on_error, never raising", function()
    local errors = {}
    local sink = Jsonl.new(dir .. "/no/such/dir", {}, { uv = uv, on_error = function(m) errors[#errors + 1] = m end })
    assert.has_no.errors(function()
      sink:update({ update = 1 })
      sink:update({ update = 2 })
    end)
    local done, cb_err = false, nil
    sink:close(function(err) done = true; cb_err = err end)
    support.run_until(function() return done end)
    assert.equal(1, #errors) -- once, not per line
    assert.matches("^cannot open .*/no/such/dir/metrics.jsonl: ENOENT", errors[1])
    assert.equal(errors[1], cb_err)
  end)
end)

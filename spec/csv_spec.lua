local Csv = require("moonrl.run.sinks.csv")
local sinks = require("moonrl.run.sinks")
local support = require("support")
local uv = support.uv

describe("csv sink", function()
  local dir
  before_each(function() dir = support.tmpdir() end)
  after_each(function() support.rm_rf(dir) end)

  it("writes a header and one row per update through a real luv loop", function()
    local sink = Csv.new(dir, {}, { uv = uv, clock = function() return 12.5 end })
    sink:update({ update = 1, agent_steps = 4096, sps = 1000.25, zeta = 1, alpha = true, note = 'a,"b"' })
    sink:update({ update = 2, agent_steps = 8192, sps = 0 / 0, zeta = 2, late_metric = 5 })
    local closed = false
    sink:close(function() closed = true end)
    support.run_until(function() return closed end)
    local lines = support.lines(support.read_file(dir .. "/metrics.csv"))
    assert.equal(3, #lines)
    assert.equal("update,agent_steps,sps,episode_return_mean,episode_length_mean,efficiency,food_per_episode," ..
      "poison_per_episode,policy_loss,value_loss,entropy,approx_kl,clip_fraction,explained_variance,lr,grad_norm," ..
      "memory_peak_bytes,alpha,note,zeta,wall_time", lines[1])
    assert.equal('1,4096,1000.25,,,,,,,,,,,,,,,1,"a,""b""",1,12.5', lines[2])
    assert.equal("2,8192,nan,,,,,,,,,,,,,,,,,2,12.5", lines[3])
  end)

  it("sinks.open makes the sinks cfg.log asks for and closes them all", function()
    local out = {}
    local cfg = { total_steps = 100, log = { console = true, jsonl = true, csv = true, tensorboard = false, interval = 1 } }
    local group = sinks.open(dir, cfg, { uv = uv, is_tty = false, write = function(s) out[#out + 1] = s end })
    assert.same({ "console", "jsonl", "csv" }, group.order)
    group:update({ update = 1, agent_steps = 100, sps = 10 })
    group:message("hello")
    local closed = false
    group:close(function(err) assert.is_nil(err); closed = true end)
    support.run_until(function() return closed end)
    assert.same({ "metrics.csv", "metrics.jsonl" }, support.files(dir))
    assert.equal(2, #out)
    assert.equal("hello\n", out[2])
  end)
end)

-- custom_hooks.lua - the knobs a script has on a running job:
--   * hooks: on_update (a custom progress line), on_alert, on_checkpoint, on_finish
--   * a luv timer on the same loop as training (a heartbeat)
--   * a Lua function as a schedule (entropy coefficient), applied exactly at
--     every update: the host evaluates it for every update before training
--     starts and the trainer thread picks the value at each boundary
--   * run:set of a hot key while the run goes (a learning-rate drop at half
--     time), and a refused change of a key that is not hot
--
--   moonrl run examples/custom_hooks.lua [total_steps]

local moonrl = require("moonrl")
local uv = require("luv")

local steps = tonumber(arg[1]) or 65536

local run
local dropped = false

local cfg = {
  name = "custom-hooks",
  total_steps = steps,
  ppo = {
    -- a schedule is a number, a table such as moonrl.schedule.cosine(3e-4, 1e-4), or a function of progress
    lr = moonrl.schedule.cosine(3e-4, 1e-4),
    ent_coef = function(p) return p < 0.25 and 0.05 or 0.01 end,
  },
  log = { console = false, checkpoint_interval = 8 },
  alerts = { sps_min = 1e9 },  -- deliberately unreachable, to show on_alert firing
  eval = { num_envs = 64, steps = 512 },
  hooks = {
    on_update = function(m)
      print(string.format("update %3d  %5.1f%%  return %7.3f  entropy %.3f  lr %.2e  ent_coef %.3f",
        m.update, 100 * m.progress, m.episode_return_mean, m.entropy, m.lr, m.ent_coef))
      if m.progress >= 0.5 and not dropped then
        dropped = true
        assert(run:set("ppo.lr", 5e-5, "half time"))   -- applies from the next update; recorded
                                                        -- in train.log and changes.lua as "(half time)"
        local ok, err = run:set("ppo.epochs", 2)       -- not hot: refused, training goes on
        print("  lr dropped to 5e-5; epochs: " .. tostring(ok or err))
      end
    end,
    on_alert = function(a)
      print("  alert (" .. a.level .. ", " .. a.kind .. "): " .. a.message)
    end,
    on_checkpoint = function(path) print("  checkpoint " .. path) end,
    on_finish = function(s) print("  finished: " .. s.status) end,
  },
}

run = moonrl.train(cfg)
print("run directory: " .. run.dir)

local started = uv.now()
local heartbeat = uv.new_timer()
heartbeat:start(5000, 5000, function()
  print(string.format("  [heartbeat %.0f s, status %s]", (uv.now() - started) / 1000, run.status))
end)

local summary = run:wait()
heartbeat:close()
print(string.format("%s after %d updates; alerts: %d", summary.status, summary.updates, summary.alerts))
print(moonrl.eval_table({ assert(moonrl.evaluate(run)) }))

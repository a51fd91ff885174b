-- proxy_vs_truth.lua - Goodhart's law in one table: train the same agent on
-- the true reward and on the proxy reward, both at once, then evaluate both
-- with the same continuous-survival protocol (docs/environment.md,
-- "Evaluation").
--
--   moonrl run examples/proxy_vs_truth.lua [total_steps]
--
-- The two runs share the machine: each gets its own trainer thread (and half
-- of the cores); their metrics arrive interleaved on the one event loop. With
-- a longer budget (e.g. 1048576) the ground-truth agent should come out with
-- a far better efficiency and far fewer deaths than the proxy one.

local moonrl = require("moonrl")

local steps = tonumber(arg[1]) or 131072         -- 32 updates of the cpu profile each
local uv = require("luv")
local cores = uv.available_parallelism and uv.available_parallelism() or 2
local threads = math.max(1, math.floor(cores / 2))

local function start(mode)
  return moonrl.train({
    name = "goodhart-" .. mode,
    total_steps = steps,
    threads = threads,
    env = { mode = mode },
    log = { console = false },
    eval = { num_envs = 128, steps = 1024 },
  }, { hardware = "cpu" })
end

local runs = { start("ground_truth"), start("proxy") }
for _, r in ipairs(runs) do print("training " .. r.cfg.env.mode .. " in " .. r.dir) end

-- One line per update of either run shows that they train side by side.
local ticker = uv.new_timer()
ticker:start(2000, 2000, function()
  local parts = {}
  for _, r in ipairs(runs) do
    local p = r:progress()
    if p.phase == "warm-up" then
      parts[#parts + 1] = string.format("%s warming up (%d/%d)", r.cfg.env.mode, p.warmup_done, p.warmup_updates)
    else
      parts[#parts + 1] = string.format("%s %d/%d", r.cfg.env.mode, p.update,
        math.ceil(steps / (r.cfg.env.num_envs * r.cfg.ppo.rollout_steps)))
    end
  end
  print("  " .. table.concat(parts, "   "))
end)

local results = {}
for _, r in ipairs(runs) do
  local s = r:wait()
  if s.status ~= "done" then error(r.dir .. ": " .. s.status .. " " .. tostring(s.error)) end
end
ticker:close()

for i, r in ipairs(runs) do
  -- Each policy is evaluated in the mode it was trained in: energy is real
  -- in every mode, so the proxy agent now pays for the poison it liked.
  results[i] = assert(moonrl.evaluate(r))
end
print()
print(moonrl.eval_table(results))

-- examples/reference/make.lua - makes the reference pair of docs/export.md
-- ("Checking your own preprocessing"): a small foraging policy, trained for
-- a few updates, and what the engine computes for a few observations.
--
--   cd examples/reference && moonrl run make.lua
--
-- writes policy.mrck (the checkpoint), policy.safetensors (its export),
-- obs.npy (uint8 cell codes, (16, 11, 11)), logits.npy (16, 8) and value.npy
-- (16,) (the engine's float32 outputs: `moonrl act policy.mrck obs.npy`).
-- The files in the repository were made by it; spec/act_spec.lua checks
-- that the engine, the docs' numpy forward pass and onnxruntime still give
-- them.

local moonrl = require("moonrl")
local uv = require("luv")

local function sh(cmd)
  local ok = os.execute(cmd)
  assert(ok == true or ok == 0, "failed: " .. cmd)
end

local run = moonrl.train({
  name = "reference", device = "cpu", threads = 1, seed = 2026, total_steps = 8 * 16 * 6,
  warmup = { updates = 0 },
  env = { mode = "ground_truth", num_envs = 8, grid_size = 16, view_range = 5, density_min = 24, density_max = 40 },
  policy = { conv_channels = { 4, 8 }, hidden = 16, critic_hidden = 16 },
  ppo = { rollout_steps = 16, lr = 3e-3 },
  log = { console = false, tensorboard = false, jsonl = false, checkpoint_interval = 0 },
}, { dir = "reference-run", quiet = true })
local s = run:wait()
assert(s.status == "done", tostring(s.error))
sh("cp " .. s.checkpoint .. " policy.mrck && rm -rf reference-run")

-- 16 observations: a fixed pseudo-random grid each (codes 0 empty, 1 food, 2 poison), one cell of
-- food at a known place in the first four (dy, dx = -1, 0: up; 0, +1: right; +1, 0: down; 0, -1: left)
local V, n = 11, 16
local codes, x = {}, 20261128
for i = 1, n * V * V do
  x = (x * 1103515245 + 12345) % 2147483648
  codes[i] = (x % 7 == 0) and 1 or (x % 7 == 1) and 2 or 0
end
for k, d in ipairs({ { -1, 0 }, { 0, 1 }, { 1, 0 }, { 0, -1 } }) do
  local base = (k - 1) * V * V
  for j = 1, V * V do codes[base + j] = 0 end
  codes[base + (5 + d[1]) * V + (5 + d[2]) + 1] = 1   -- row 5 + dy, column 5 + dx
end
local npy = require("moonrl.formats.npy")
assert(npy.write("obs.npy", "u1", { n, V, V }, string.char(unpack(codes))))
local bin = uv.exepath()
sh(string.format("%q export policy.mrck --out policy.safetensors --force", bin))
sh(string.format("%q act policy.mrck obs.npy --out . --force", bin))
print("wrote policy.mrck, policy.safetensors, obs.npy, logits.npy, value.npy")

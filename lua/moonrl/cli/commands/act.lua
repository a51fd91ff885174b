-- `moonrl act`: a checkpoint's policy on observations from a .npy file, by
-- the engine's own inference (moonrl.policy): to check an export, or your own
-- preprocessing, against what the engine computes.

local cmdline = require("moonrl.cli.cmdline")

local act = {
  name = "act",
  order = 36,
  usage = "act checkpoint|run OBS.npy",
  summary = "the engine's policy on your observations (.npy): logits, probabilities, value",
  help = [[
usage: moonrl act CHECKPOINT|RUN_DIR OBS.npy [--json] [--out DIR] [--force]

Runs the policy of a checkpoint (a .mrck file, or a run directory: its newest
valid checkpoint) on the observations in OBS.npy (numpy.save's format), on
the cpu in fp32, exactly as the engine acts, and prints for each one the
greedy action, the action probabilities (softmax of the logits; a box: the
means, mapped to its bounds as policy.box_squash maps a sample) and the
value (PopArt's scale applied).
OBS.npy holds, as the checkpoint's environment declares (moonrl envs):
  a grid of cell codes   uint8, shape (n, view, view) or (view, view): row r
                         is dy = r - view_range, column c is dx = c -
                         view_range around the agent (docs/export.md)
  a vector               float32 (or float64), shape (n, size) or (size)
The critic's privileged inputs are taken as zeros (they change the value,
never the logits). docs/export.md has a reference pair to check against.

options:
  --json       one JSON object a line: {"logits": [...], "probs": [...],
               "action": a, "value": v}
  --out DIR    also write DIR/logits.npy (n, actions) and DIR/value.npy (n),
               float32, the engine's bits; DIR is made if missing, and its
               logits.npy or value.npy are kept unless --force
  --force      replace DIR's logits.npy and value.npy
]],
}

local function fmt(x) return string.format("%.6g", x) end

function act.run(argv)
  local o, e = cmdline.parse("act", argv, { json = { "flag" }, out = { "value", "a directory" }, force = { "flag" } }, 2)
  if not o then return cmdline.usage_error(e) end
  if o.help then return cmdline.out(act.help) end
  local path, obs_path = o.positional[1], o.positional[2]
  if not path or not obs_path then
    return cmdline.usage_error("moonrl act: which checkpoint and which observations? " ..
      "(moonrl act CHECKPOINT|RUN_DIR OBS.npy)")
  end
  local uv = require("luv")
  local st = uv.fs_stat(path)
  if st and st.type ~= "directory" and not require("moonrl.run.resume").is_checkpoint(path) then
    cmdline.err("moonrl act: '", path, "' is not a moonrl checkpoint (a .mrck file or a run directory)\n")
    return 2
  end
  local p, pe = require("moonrl.policy").load(path)
  if not p then
    cmdline.err("moonrl act: ", pe, "\n")
    return 2
  end
  local npy = require("moonrl.formats.npy")
  local obs, oe = npy.read(obs_path)
  if not obs then
    cmdline.err("moonrl act: ", oe, "\n")
    return 2
  end
  local r, re = p:act(obs)
  if not r then
    cmdline.err("moonrl act: ", re, "\n")
    return 2
  end
  if o.out then
    local util = require("moonrl.util")
    local dst = uv.fs_stat(o.out)
    if dst and dst.type ~= "directory" then
      cmdline.err("moonrl act: --out ", o.out, " is a ", dst.type, ", not a directory\n")
      return 2
    end
    if not dst then
      local ok, me = uv.fs_mkdir(o.out, 493)
      if not ok then
        cmdline.err("moonrl act: cannot make --out ", o.out, ": ", tostring(me), "\n")
        return 1
      end
    end
    local ffi = require("ffi")
    local files = {
      { "logits.npy", { r.n, p.actions }, ffi.string(r.raw_logits, 4 * r.n * p.actions) },
      { "value.npy", { r.n }, ffi.string(r.raw_value, 4 * r.n) },
    }
    for _, f in ipairs(files) do
      local target = { replace = o.force, other = "--out names another directory" }
      local can, ce = util.check_output(o.out .. "/" .. f[1], target)
      if not can then
        cmdline.err("moonrl act: ", ce, "\n")
        return 2
      end
    end
    for _, f in ipairs(files) do
      local ok, we = util.write_output(o.out .. "/" .. f[1], npy.encode("f4", f[2], f[3]), { replace = true })
      if not ok then
        cmdline.err("moonrl act: ", we, "\n")
        return 1
      end
    end
    cmdline.err("moonrl act: wrote ", o.out, "/{logits.npy, value.npy}\n")
  end
  local json = require("moonrl.formats.json")
  if o.json then
    for i = 1, r.n do
      cmdline.out(json.encode({ logits = r.logits[i], probs = r.probs and r.probs[i] or nil, action = r.action[i],
        value = r.value[i] }), "\n")
    end
    return 0
  end
  cmdline.out(string.format("%s (update %d, %s, %s): %d observation%s\n", p.path, p.update, p.env, p.mode, r.n,
    r.n == 1 and "" or "s"))
  local shown = math.min(r.n, 20)
  for i = 1, shown do
    local a = r.action[i]
    local what
    if p.box then
      local m = {}
      for k, x in ipairs(a) do m[k] = fmt(x) end
      what = "action (the means, " .. (p.squash == "tanh" and "squashed" or "clipped") .. ") [" ..
        table.concat(m, ", ") .. "]"
    else
      local ps = {}
      for k, x in ipairs(r.probs[i]) do ps[k] = string.format("%.3f", x) end
      what = string.format("action %d  probs [%s]", a, table.concat(ps, " "))
    end
    cmdline.out(string.format("  %4d  %s  value %s\n", i - 1, what, fmt(r.value[i])))
  end
  if shown < r.n then
    cmdline.out(string.format("  ... %d more (--json or --out DIR for all)\n", r.n - shown))
  end
  return 0
end

return act

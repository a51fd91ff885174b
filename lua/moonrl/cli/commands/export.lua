-- `moonrl export`: a checkpoint's policy as a file other programs read
-- (safetensors), with the network and the observation encoding described in
-- its metadata.

local cmdline = require("moonrl.cli.cmdline")

local export = {
  name = "export",
  order = 35,
  usage = "export checkpoint|run [--format F]",
  summary = "a checkpoint's network as safetensors or ONNX, described in its metadata",
  help = [[
usage: moonrl export CHECKPOINT|RUN_DIR [--format safetensors|onnx] [--out FILE] [--force]

Writes the network of a checkpoint (a .mrck file, or a run directory: its
newest valid checkpoint) as a safetensors file (the default), or as an ONNX
model of the forward pass: inputs observation (batch, view, view, C: the
expanded grid, channels last; C = 2 for foraging and reach, 4 for snake),
extra (batch, 2) and truth (batch, view x view x C: the critic's), outputs
logits (batch, actions: 8 for foraging, 4 for reach and snake) and value
(batch, 1), the value scaled back (PopArt); for a vector observation (the
MLP: cartpole, pendulum, dials) inputs observation (batch, size) and, where
declared, extra, outputs logits (a box: its means then its log-stds) and
value. The safetensors file has every parameter tensor by
its engine name (conv0.w, conv0.b, ..., fc.w, fc.b, actor.w, actor.b,
critic.w, critic.b, value.w, value.b), fp32, and in the metadata:
  moonrl.network      JSON: conv_channels, hidden, critic_hidden, view (the
                      observation's side), actions, extra critic inputs,
                      PopArt and the value's scale (value = mean + std x the
                      value head's output), the tensors' layouts
  moonrl.observation  how a (view x view) grid of cell codes (foraging: 0
                      empty, 1 food, 2 poison) becomes the network's C input
                      channels in the checkpoint's mode
  moonrl.spaces       JSON: the spaces the environment declares (observation,
                      action, critic, counters: as `moonrl envs --json`)
  moonrl.checkpoint   the checkpoint, its update and mode; moonrl.version
Shapes: a conv weight is (out, 3, 3, in), channels last, as the engine
computes; a linear weight (out, in); a bias (out). docs/export.md has the
forward pass written out.

options:
  --format F   safetensors (default) or onnx
  --out FILE   where to write (default: the checkpoint's path with
               .safetensors or .onnx for .mrck): a new path, or an existing
               regular file with --force; a directory, device or FIFO is
               refused, and so is the checkpoint itself (by any name)
  --force      replace an existing FILE
]],
}

local MODES_EXPAND = {
  ground_truth = "channel 0 = 1 where the cell holds food, channel 1 = 1 where it holds poison, else 0",
  ground_truth_blinded = "both channels = 1 for food, 0.5 for poison, 0 for empty (the proxy)",
  proxy_mortal = "both channels = 1 for food, 0.5 for poison, 0 for empty (the proxy)",
  proxy = "both channels = 1 for food, 0.5 for poison, 0 for empty (the proxy)",
}

-- C > 2 channels are one-hot (src/engine/shared/obs_codes.h)
local function onehot_text(codes)
  local parts = {}
  for k = 2, #codes do parts[#parts + 1] = "channel " .. (k - 2) .. " = 1 where the cell holds " .. codes[k] end
  return table.concat(parts, ", ") .. ", else 0"
end

-- The critic's privileged inputs, as each environment declares them (its header)
local EXTRA = {
  snake = function() return "the critic's length / (grid_size^2) and the episode's steps / max_episode_steps (0 " ..
    "without a limit)" end,
}

-- (out, 3, 3, in) channels last -> ONNX Conv's (out, in, 3, 3)
local function conv_weight_oihw(data, oc, ic)
  local ffi = require("ffi")
  local src, dst = ffi.cast("const float *", data), ffi.new("float[?]", oc * 9 * ic)
  for o = 0, oc - 1 do
    for k = 0, 8 do
      for i = 0, ic - 1 do dst[(o * ic + i) * 9 + k] = src[(o * 9 + k) * ic + i] end
    end
  end
  return ffi.string(dst, 4 * oc * 9 * ic)
end

-- "0 empty, 1 food, 2 poison": an environment's cell codes (engine.env_codes)
-- The actor's head as the action space gives it (shared/act_head.h), for the
-- description: its kind and parameters, and one line saying how an action
-- comes from the actor's outputs. squash: policy.box_squash (0 clip, 1 tanh).
local function action_head(action, squash)
  if action.kind == "box" then
    local tanh = squash == 1
    return { kind = "gaussian", dims = #action.low, squash = tanh and "tanh" or "clip", low = action.low,
             high = action.high, log_std_clamp = { -20, 2 } },
      "a box: means = actor(features), log-stds = actor.log_std (clamped to [-20, 2]); the action is a sample x " ..
      "of the diagonal Gaussian, " .. (tanh and "squashed into the box: low + (high - low) (tanh(x) + 1) / 2 " ..
      "(log-probability: the Gaussian's minus sum log((high - low) / 2 (1 - tanh^2 x)))" or
      "clipped to the box's bounds (log-probability: the Gaussian's of x)")
  elseif action.kind == "multi_discrete" then
    local groups, first = {}, 0
    for i, n in ipairs(action.nvec) do
      groups[i] = { first = first, count = n }
      first = first + n
    end
    return { kind = "multi_discrete", nvec = action.nvec, groups = groups },
      "logits = actor(features), split into groups of nvec[i] columns in order; component i of the action is " ..
      "a choice of group i's softmax (log-probability and entropy: the sums over the groups)"
  end
  return { kind = "categorical", n = action.n }, "logits = actor(features)"
end

-- A float image's description, in the export's observation metadata.
local function image_text(spaces, env_name)
  local s = spaces.observation.shape
  return string.format("a %d x %d x %d float image, channels first, as %s writes it (docs/environments.md)", s[1], s[2],
    s[3], env_name)
end

local function codes_text(codes)
  local parts = {}
  for i, w in ipairs(codes) do parts[i] = (i - 1) .. " " .. w end
  return table.concat(parts, ", ")
end

-- critic.w (CH, D) without the privileged-input columns [H + E, H + 2)
-- that a float image's environment does not declare (the engine reads them
-- as 0): (CH, D - (2 - E)) float32 bytes.
local function critic_columns(w, H, E)
  local ffi = require("ffi")
  local CH, D = w.shape[1], w.shape[2]
  local drop = 2 - E
  local src, dst = ffi.cast("const float *", w.data), ffi.new("float[?]", CH * (D - drop))
  for o = 0, CH - 1 do
    local k = 0
    for i = 0, D - 1 do
      if i < H + E or i >= H + 2 then dst[o * (D - drop) + k] = src[o * D + i]; k = k + 1 end
    end
  end
  return ffi.string(dst, 4 * CH * (D - drop)), { CH, D - drop }
end

-- The forward pass as an ONNX graph (docs/export.md, "The forward pass").
-- image: a float image environment's (E privileged inputs): the input is
-- the image, (batch, C, view, view) as the environment writes it, the
-- critic's ground truth the image itself; else cell codes expanded to
-- (batch, view, view, C) one-hot, with extra and truth given.
local function onnx_model(net, channels, view, C, metadata, image, E)
  local by = {}
  for _, t in ipairs(net.tensors) do by[t.name] = t end
  local inits, nodes = {}, {}
  local function init(name, dims, data) inits[#inits + 1] = { name = name, dims = dims, data = data } end
  local function op(kind, inputs, output, attrs)
    nodes[#nodes + 1] = { op = kind, inputs = inputs, outputs = { output }, attrs = attrs }
    return output
  end
  local x = image and "observation" or op("Transpose", { "observation" }, "x_nchw", { perm = { 0, 3, 1, 2 } })
  local ic = C
  for l, oc in ipairs(channels) do
    local w, b = by["conv" .. (l - 1) .. ".w"], by["conv" .. (l - 1) .. ".b"]
    init(w.name, { oc, ic, 3, 3 }, conv_weight_oihw(w.data, oc, ic))
    init(b.name, { oc }, b.data)
    x = op("Conv", { x, w.name, b.name }, "conv" .. (l - 1), { kernel_shape = { 3, 3 }, pads = { 1, 1, 1, 1 } })
    x = op("Relu", { x }, "conv" .. (l - 1) .. ".relu")
    ic = oc
  end
  x = op("Transpose", { x }, "trunk_nhwc", { perm = { 0, 2, 3, 1 } })
  x = op("Flatten", { x }, "trunk_flat", { axis = 1 })
  for _, name in ipairs({ "fc", "actor", "critic", "value" }) do
    local w, b = by[name .. ".w"], by[name .. ".b"]
    if image and name == "critic" then
      local data, dims = critic_columns(w, by["fc.b"].shape[1], E)
      init(w.name, dims, data)
    else
      init(w.name, w.shape, w.data)
    end
    init(b.name, b.shape, b.data)
  end
  local features = op("Relu", { op("Gemm", { x, "fc.w", "fc.b" }, "fc", { transB = 1 }) }, "features")
  op("Gemm", { features, "actor.w", "actor.b" }, "logits", { transB = 1 })
  local parts = { features, "extra", "truth" }
  if image then   -- the image's cells channels last, as the engine's critic reads them
    local truth = op("Flatten", { op("Transpose", { "observation" }, "image_nhwc", { perm = { 0, 2, 3, 1 } }) },
      "truth", { axis = 1 })
    parts = E > 0 and { features, "extra", truth } or { features, truth }
  end
  local cin = op("Concat", parts, "critic_input", { axis = 1 })
  local h = op("Relu", { op("Gemm", { cin, "critic.w", "critic.b" }, "critic", { transB = 1 }) }, "critic.relu")
  local v = op("Gemm", { h, "value.w", "value.b" }, "value_raw", { transB = 1 })
  init("value_std", { 1 }, require("moonrl.formats.protobuf").float_le(net.value_std))
  init("value_mean", { 1 }, require("moonrl.formats.protobuf").float_le(net.value_mean))
  op("Add", { op("Mul", { v, "value_std" }, "value_scaled"), "value_mean" }, "value")
  return require("moonrl.formats.onnx").model({
    name = "moonrl_policy", producer = "moonrl", version = metadata["moonrl.version"], metadata = metadata,
    inputs = image and { { name = "observation", dims = { "batch", C, view, view } },
                         E > 0 and { name = "extra", dims = { "batch", E } } or nil } or
             { { name = "observation", dims = { "batch", view, view, C } }, { name = "extra", dims = { "batch", 2 } },
               { name = "truth", dims = { "batch", C * view * view } } },
    outputs = { { name = "logits", dims = { "batch", by["actor.b"].shape[1] } }, { name = "value", dims = { "batch", 1 } } },
    initializers = inits, nodes = nodes,
  })
end

-- The MLP trunk's forward pass as an ONNX graph (docs/export.md, "A vector
-- observation"): tanh layers, the actor (a box: its means, beside the
-- state-independent log-stds, as a row of the engine's logits is [mean,
-- log_std]), the critic over the observation and its privileged inputs.
local function onnx_mlp_model(net, widths, D, E, box, metadata)
  local by = {}
  for _, t in ipairs(net.tensors) do by[t.name] = t end
  local inits, nodes = {}, {}
  local function init(name, dims, data) inits[#inits + 1] = { name = name, dims = dims, data = data } end
  local function op(kind, inputs, output, attrs)
    nodes[#nodes + 1] = { op = kind, inputs = inputs, outputs = { output }, attrs = attrs }
    return output
  end
  local function linear(name, x, out)
    local w, b = by[name .. ".w"], by[name .. ".b"]
    init(w.name, w.shape, w.data)
    init(b.name, b.shape, b.data)
    return op("Gemm", { x, w.name, b.name }, out or name, { transB = 1 })
  end
  local h = "observation"
  for l = 1, #widths do h = op("Tanh", { linear("mlp" .. (l - 1), h) }, "mlp" .. (l - 1) .. ".tanh") end
  local A = by["actor.b"].shape[1]
  if box then
    local mean = linear("actor", h, "mean")
    local ls = by["actor.log_std"]
    init(ls.name, ls.shape, ls.data)
    local rows = op("Expand", { ls.name, op("Shape", { mean }, "mean_shape") }, "log_std_rows")
    op("Concat", { mean, rows }, "logits", { axis = 1 })
  else
    linear("actor", h, "logits")
  end
  local cin = E > 0 and op("Concat", { "observation", "extra" }, "critic_input", { axis = 1 }) or "observation"
  local v = linear("value", op("Tanh", { linear("critic", cin) }, "critic.tanh"), "value_raw")
  init("value_std", { 1 }, require("moonrl.formats.protobuf").float_le(net.value_std))
  init("value_mean", { 1 }, require("moonrl.formats.protobuf").float_le(net.value_mean))
  op("Add", { op("Mul", { v, "value_std" }, "value_scaled"), "value_mean" }, "value")
  local inputs = { { name = "observation", dims = { "batch", D } } }
  if E > 0 then inputs[2] = { name = "extra", dims = { "batch", E } } end
  return require("moonrl.formats.onnx").model({
    name = "moonrl_policy", producer = "moonrl", version = metadata["moonrl.version"], metadata = metadata,
    inputs = inputs,
    outputs = { { name = "logits", dims = { "batch", box and 2 * A or A } }, { name = "value", dims = { "batch", 1 } } },
    initializers = inits, nodes = nodes,
  })
end

function export.run(argv)
  local o, e = cmdline.parse("export", argv, {
    format = { "value", "safetensors" }, out = { "value", "a file" }, force = { "flag" },
  }, 1)
  if not o then return cmdline.usage_error(e) end
  if o.help then return cmdline.out(export.help) end
  local path = o.positional[1]
  if not path then return cmdline.usage_error("moonrl export: which checkpoint? (moonrl export CHECKPOINT|RUN_DIR)") end
  local format = o.format or "safetensors"
  if format ~= "safetensors" and format ~= "onnx" then
    return cmdline.usage_error("moonrl export: --format " .. format .. ": accepted safetensors or onnx")
  end
  local uv, rs = require("luv"), require("moonrl.run.resume")
  local st = uv.fs_stat(path)
  if not st then
    cmdline.err("moonrl export: checkpoint or run directory '", path, "' not found\n")
    return 2
  end
  local ck = path
  if st.type == "directory" then
    local newest, ne = rs.newest(path)
    if not newest then
      cmdline.err("moonrl export: ", ne, "\n")
      return 2
    end
    for _, d in ipairs(newest.damaged) do
      cmdline.err("moonrl export: skipped damaged checkpoint ", d.path, ": ", d.error, "\n")
    end
    ck = newest.path
  elseif not rs.is_checkpoint(path) then
    cmdline.err("moonrl export: '", path, "' is not a moonrl checkpoint (a .mrck file or a run directory)\n")
    return 2
  end
  local out = o.out or (ck:gsub("%.mrck$", "") .. "." .. format)
  -- a new path or a regular file (replaced with --force), never a device, a
  -- FIFO, a directory or the checkpoint itself (by any name)
  local util = require("moonrl.util")
  local target = { replace = o.force, other = "--out names another file",
                   inputs = { { path = ck, what = "the checkpoint being exported" } } }
  local can, cerr = util.check_output(out, target)
  if not can then
    cmdline.err("moonrl export: ", cerr, "\n")
    return 2
  end

  local engine = require("moonrl.engine")
  local json = require("moonrl.formats.json")
  local net, ne = engine.checkpoint_network(ck)
  if not net then   -- a damaged, crafted or non-finite checkpoint: bad input
    cmdline.err("moonrl export: ", ne, "\n")
    return 2
  end
  local c = net.config
  local mode = engine.mode_name(tonumber(c.env.mode))
  local env_name = engine.env_name(tonumber(c.env.name))
  local codes = engine.env_codes(env_name)
  local channels = {}
  for i = 0, tonumber(c.policy.num_conv) - 1 do channels[#channels + 1] = tonumber(c.policy.conv_channels[i]) end
  -- what the environment declares (engine.env_spaces): the network's inputs and outputs follow it
  local spaces = assert(engine.env_spaces(env_name, engine.env_sizes(c.env),
    c.env.program ~= nil and c.env.program or nil))   -- a Lua environment: what its checkpoint recorded
  local image = spaces.observation.kind == "image"
  local view = spaces.observation.kind ~= "vector" and spaces.observation.shape[2] or nil
  local description, observation
  local head, actor = action_head(spaces.action, tonumber(c.policy.box_squash))
  if tonumber(c.policy.obs_vector) > 0 then   -- a vector observation: the MLP trunk (net_layout.h)
    local widths = {}
    for l = 0, tonumber(c.policy.num_mlp) - 1 do widths[#widths + 1] = tonumber(c.policy.mlp_widths[l]) end
    description = {
      trunk = "mlp", mlp_widths = widths, critic_hidden = tonumber(c.policy.critic_hidden),
      inputs = tonumber(c.policy.obs_vector), actions = tonumber(c.policy.num_actions), action = spaces.action,
      head = head,
      extra_critic_inputs = spaces.critic.extra, environment = env_name,
      popart = tonumber(c.policy.popart) == 1, value_mean = net.value_mean, value_std = net.value_std,
      layout = {
        linear = "weight (out, in); y = x W^T + b",
        trunk = "features = tanh(mlpL(... tanh(mlp0(observation))))",
        actor = actor,
        critic = "value = value(tanh(critic(observation ++ extra))), then mean + std x value",
      },
    }
    observation = { vector = tonumber(c.policy.obs_vector) .. " floats (" .. env_name .. "; docs/environments.md)" }

  else
    local C = spaces.observation.shape[1]
    description = {
      conv_channels = channels, hidden = tonumber(c.policy.hidden), critic_hidden = tonumber(c.policy.critic_hidden),
      view = view, input_channels = spaces.observation.shape[1], actions = tonumber(c.policy.num_actions),
      head = head,
      extra_critic_inputs = spaces.critic.extra,
      environment = env_name,
      popart = tonumber(c.policy.popart) == 1, value_mean = net.value_mean, value_std = net.value_std,
      layout = {
        conv = "weight (out, 3, 3, in), channels last; 3x3, stride 1, zero padding 1; bias; ReLU",
        linear = "weight (out, in); y = x W^T + b",
        trunk = "convs over the (view, view, " .. C .. ") input, flattened (view, view, channels) row by row -> fc -> " ..
          "ReLU = features",
        actor = actor,
        critic = "value = value(ReLU(critic(features ++ extra ++ ground truth))), then mean + std x value",
      },
    }
    if image then
      description.input = "float image"
      description.layout.trunk = "the (" .. C .. ", view, view) image read channels last as (view, view, " .. C ..
        "), then as for cell codes: " .. description.layout.trunk
      description.layout.critic = "value = value(ReLU(critic(features ++ extra (2 columns; those past the " ..
        spaces.critic.extra .. " declared read 0) ++ the image, channels last))), then mean + std x value"
    end
  end
  if image then
    observation = {
      image = image_text(spaces, env_name),
      extra = spaces.critic.extra > 0 and (EXTRA[env_name] and EXTRA[env_name]() or
        spaces.critic.extra .. " privileged critic inputs (docs/environments.md)") or "none",
      ground_truth = "the critic reads the image itself (channels last, view x view x C)",
    }
  elseif not observation then
    local C = spaces.observation.shape[1]
    observation = {
      codes = "a (view x view) grid around the agent of cell codes: " .. codes_text(codes),
      -- the expansion in the environment's words (foraging's items are food and poison)
      channels = C ~= 2 and onehot_text(codes) or
        (MODES_EXPAND[mode] or "see docs/environment.md"):gsub("food", codes[2]):gsub("poison", codes[3]),
      extra = EXTRA[env_name] and EXTRA[env_name]() or
        "the critic's (food count - mid) / half and (poison count - mid) / half, mid and half the centre " ..
        "and half-width of [density_min, density_max] = [" .. tonumber(c.env.density_min) .. ", " ..
        tonumber(c.env.density_max) .. "]",
      ground_truth = "the critic also reads the ground-truth " .. C .. " channels of every cell (view x view x " .. C ..
        ", channels last)",
      mode = mode,
    }
  end
  local metadata = {
    ["moonrl.version"] = engine.version(),
    ["moonrl.checkpoint"] = json.encode({ path = ck, update = net.updates, mode = mode, environment = env_name }),
    ["moonrl.network"] = json.encode(description),
    ["moonrl.observation"] = json.encode(observation),
    ["moonrl.spaces"] = json.encode(spaces),
    ["moonrl.head"] = json.encode(head),
  }
  local bytes
  if format == "onnx" and tonumber(c.policy.obs_vector) > 0 then
    local widths = {}
    for l = 0, tonumber(c.policy.num_mlp) - 1 do widths[#widths + 1] = tonumber(c.policy.mlp_widths[l]) end
    bytes = onnx_mlp_model(net, widths, tonumber(c.policy.obs_vector), spaces.critic.extra,
      tonumber(c.policy.act_box) > 0, metadata)
  elseif format == "onnx" then
    bytes = onnx_model(net, channels, view, spaces.observation.shape[1], metadata, image, spaces.critic.extra)
  else
    bytes = require("moonrl.formats.safetensors").encode(net.tensors, metadata)
  end
  local written, we = util.write_output(out, bytes, target)
  if not written then
    cmdline.err("moonrl export: ", we, "\n")
    return 1
  end
  local params = 0
  for _, t in ipairs(net.tensors) do params = params + #t.data / 4 end
  cmdline.out("moonrl export: ", out, " (", #net.tensors, " tensors, ", params, " parameters, update ",
    net.updates, ", ", mode, ")\n")
end

return export

-- moonrl.config.schema - the one description of every config key.
--
-- Everything that knows about config keys reads this file: defaults
-- (config.defaults), validation (config.validate, config.set), the docs
-- (config.reference_markdown -> docs/config.md), did-you-mean suggestions and
-- the hot / gpu_only flags. The C engine's mr_config mirrors the keys that
-- reach it; the defaults are those of moonrl.h. It is data plus the one
-- function that checks a single value against its entry; merging, layering and
-- cross-key checks live in moonrl.config. The ranges are those the engine's
-- own check accepts (mr_config_validate, src/engine/config.c) or narrower, so
-- a config this side accepts is never refused by the engine.
--
-- An entry (schema.keys[i], also schema.by_key[path]):
--   key        dotted path, e.g. "ppo.lr"
--   type       "number" | "integer" | "boolean" | "string" | "enum" | "list"
--              | "schedule" | "function"
--   default    the default (nil: absent unless set)
--   min, max   inclusive bounds; min_open / max_open make them exclusive
--              (for a schedule: bounds on its values; for a list: on elements)
--   choices    enum choices, or a list's element choices
--   auto       true: the string "auto" is accepted too (env.num_envs)
--   path_ok    true: a path ending in ".lua" is accepted too (hardware, level)
--   of         list element type: "integer" | "enum"
--   min_len, max_len   list length bounds (string: max_len only)
--   optional   true: nil is accepted (dir, hooks.*)
--   hot        false | "engine" (mr_trainer_set_hot) | "lua" (read live by
--              the Lua runner / sinks / alerts at every update)
--   hot_slot   an engine hot key's place in mr_hot_params, which the build
--              generates from these entries (src/engine/hot_keys.h), and so in
--              the checkpoint's hot record: never renumber one; a new engine
--              hot key takes the next number (docs/architecture.md)
--   gpu_only   true: only applies on CUDA (precision: only non-fp32 values)
--   desc       one line for the docs
--   aliases    other names people use for the key (did-you-mean only)
--   before     what a run from before this key existed behaved as: a resume
--              whose config file lacks the key takes it (not the default),
--              as the engine's checkpoint reader does (ppo.truncation)
--   c          the field in the engine's mr_config this key sets (set below for
--              the engine's sections, false for a key of those sections that stays
--              in Lua; the build generates the engine's defaults,
--              ranges and checkpoint records from these entries); c_count: the
--              field holding a list's length
-- A section (schema.sections[i], also schema.section_by_name[name]):
--   name, desc, func_ok (true: the whole section may be a function(info),
--   i.e. warmup)
--
-- Public functions
--   schema.check(entry, value) -> true | nil, err   one value, one key
--   schema.range_text(entry) -> "1 .. 1048576", ">= 0", ...
--   schema.accepted_text(entry) -> what the docs' "accepted" column says
--   schema.expected_text(entry) -> "a number or schedule", ...
--   schema.hot_keys([where]) -> list of dotted keys with hot ~= false (where:
--                        "engine" | "lua": those only; "engine": in hot_slot order)

local util = require("moonrl.util")
local schedule = require("moonrl.schedule")

local schema = {}

local MAX_SAFE = 9007199254740991 -- 2^53 - 1: the largest exact integer in a Lua number

schema.sections = {
  { name = "env", desc = "the foraging environment (docs/environment.md)" },
  { name = "policy", desc = "the CNN actor-critic" },
  { name = "ppo", desc = "PPO and the optimizer" },
  { name = "cuda", desc = "GPU-only engine settings (reported as not applying on cpu)" },
  { name = "cpu", desc = "CPU-only engine settings (the cuda backend ignores them)" },
  { name = "warmup", desc = "warm-up updates before the timed run", func_ok = true },
  { name = "log", desc = "what is written to the console and the run directory" },
  { name = "alerts", desc = "warnings raised while training" },
  { name = "hooks", desc = "Lua functions called on the loop thread" },
  { name = "faults", desc = "what a run does when its numbers or its hooks keep failing" },
  { name = "eval", desc = "evaluation (continuous survival protocol)" },
  { name = "debug", desc = "test aids: leave them at their defaults to train" },
}

local K = {}
local function key(e) K[#K + 1] = e end

-- top level -----------------------------------------------------------------
key { key = "name", type = "string", default = "default", max_len = 100, name_like = true,
  desc = "experiment name; the run directory defaults to `runs/<name>-<time>`" }
key { key = "hardware", type = "enum", default = "auto", path_ok = true,
  choices = { "auto", "cpu", "cuda", "debug", "ci", "production" },
  desc = "hardware profile `configs/hardware/<name>.lua` (or a path to a .lua profile); auto = cuda when a GPU is found, else cpu" }
key { key = "level", type = "enum", default = "advanced", path_ok = true,
  choices = { "basic", "advanced", "ultra" },
  desc = "optimisation level `configs/levels/<name>.lua` (or a path to a .lua file): engine settings only" }
key { key = "device", type = "enum", default = "auto", choices = { "auto", "cpu", "cuda" },
  desc = "backend; auto = cuda when this build has CUDA and a GPU is present" }
key { key = "precision", type = "enum", default = "fp32", choices = { "fp32", "bf16", "fp16" },
  gpu_only = true,
  desc = "arithmetic; bf16/fp16 keep fp32 master weights, fp16 adds dynamic loss scaling; on a cpu, bf16 runs " ..
    "the oneDNN convolutions (layers 1..) with bf16 operands and fp32 accumulation, the rest fp32, where the CPU " ..
    "has AVX512-BF16 or AMX (else fp32); bit-identical for any thread count, as fp32" }
key { key = "threads", type = "integer", default = 0, min = 0, max = 1024,
  desc = "CPU threads; 0 = all cores" }
key { key = "seed", type = "integer", default = 1, min = 0, max = MAX_SAFE,
  desc = "random seed (environment and initialisation)" }
key { key = "total_steps", type = "integer", default = 50331648, min = 1, max = MAX_SAFE, hot = "engine", hot_slot = 8,
  aliases = { "steps", "total_timesteps", "max_steps", "num_steps_total" },
  desc = "agent-steps to train" }
key { key = "dir", type = "string", optional = true, max_len = 4096,
  desc = "run directory; nil = `runs/<name>-<time>`" }
key { key = "live", type = "string", optional = true, max_len = 4096,
  aliases = { "tweaks", "live_file", "watch" },
  desc = "live tweak file, watched while training: on each save (and SIGHUP) its hot keys apply at the next update (docs/live-tweaks.md); nil = none" }
key { key = "dashboard", type = "boolean", default = false,
  desc = "serve the live dashboard of this run from its own process while it trains (docs/dashboard.md): the URL, " ..
    "with its token, is printed at start; 127.0.0.1 only (`moonrl dashboard` serves many runs, with --port and --host)" }

-- env -----------------------------------------------------------------------
key { key = "env.name", type = "enum", default = "foraging",
  choices = { "foraging", "reach", "cartpole", "pendulum", "snake", "lua", "dials", "catch" },
  aliases = { "environment", "env_name" },
  desc = "which environment: foraging (docs/environment.md, four modes), reach (goal and pits, 4 actions, " ..
    "ground_truth only), cartpole, pendulum, snake (4 channels), dials (multi-discrete), catch (a float " ..
    "image); `moonrl envs` lists them, docs/environments.md says how to add one; lua = the file " ..
    "env.lua names (set by env.lua itself)" }
key { key = "env.lua", type = "string", optional = true, max_len = 4194304, c = false,
  desc = "an environment written in Lua (docs/environments.md, \"An environment in Lua\"): a path to its .lua " ..
    "file (made absolute when the config resolves), a built-in's name (configs/envs/NAME.lua: cartpole), or a " ..
    "table in the experiment script (taken to the threads as its source text, which env.lua then holds); " ..
    "env.name becomes lua; cpu only; nil = env.name's C environment" }
key { key = "env.lua_checks", type = "boolean", default = false, c = false,
  desc = "a Lua environment's debug mode: every index into its state's arrays checked against the array, every " ..
    "value stored against its type, the reward against NaN and infinities; about 20 times slower" }
key { key = "env.mode", type = "enum", default = "ground_truth",
  choices = { "ground_truth", "ground_truth_blinded", "proxy_mortal", "proxy" },
  desc = "rewards and observations (docs/environment.md, modes table)" }
key { key = "env.num_envs", type = "integer", default = 192, min = 1, max = 1048576, auto = true,
  aliases = { "n_envs", "envs", "num_env", "num_environments" },
  desc = "environment instances stepped in lock-step; \"auto\" = chosen from the GPU's memory at resolve (192 on cpu or when unknown)" }
key { key = "env.grid_size", type = "integer", default = 128, min = 3, max = 4096,
  desc = "grid height = width (toroidal)" }
key { key = "env.view_range", type = "integer", default = 5, min = 1, max = 100,
  desc = "observation is (2r+1) x (2r+1) around the agent" }
key { key = "env.density_min", type = "integer", default = 64, min = 0, max = 8388608,
  desc = "food and poison counts are drawn from [density_min, density_max]" }
key { key = "env.density_max", type = "integer", default = 256, min = 0, max = 8388608,
  desc = "upper end of the food/poison count" }
key { key = "env.respawn_tries", type = "integer", default = 50, min = 0, max = 1048576,
  desc = "random cells tried when respawning an eaten item" }
key { key = "env.max_episode_steps", type = "integer", default = 512, min = 0, max = 2147483647,
  desc = "episode truncation; 0 = never" }
key { key = "env.proxy_obs_storage", type = "enum", default = "faithful", choices = { "faithful", "uint8" },
  c = "policy.proxy_obs_storage",
  desc = "what the update sees of proxy observations: faithful = the values the acting policy saw; " ..
    "uint8 = as the original stored them (values in a uint8 buffer), poison's 0.5 read as 0 by the update " ..
    "while the acting policy saw 0.5; ground_truth is unaffected (docs/evaluation.md)" }

-- policy --------------------------------------------------------------------
key { key = "policy.conv_channels", type = "list", of = "integer", default = { 32, 64, 64 },
  min_len = 1, max_len = 8, min = 1, max = 1024, aliases = { "channels", "conv", "convs" }, c_count = "policy.num_conv",
  desc = "output channels of each 3x3 conv layer of the trunk" }
key { key = "policy.hidden", type = "integer", default = 512, min = 1, max = 65536,
  aliases = { "hidden_size", "features" },
  desc = "trunk features (linear layer after the convs)" }
key { key = "policy.mlp_widths", type = "list", of = "integer", default = { 64, 64 },
  min_len = 1, max_len = 8, min = 1, max = 65536, c_count = "policy.num_mlp",
  desc = "widths of the MLP trunk's tanh layers: the trunk a vector observation gets (cartpole; the CNN's " ..
    "policy.conv_channels and policy.hidden are for cell-code views)" }
key { key = "policy.box_squash", type = "enum", default = "clip", choices = { "clip", "tanh" },
  aliases = { "squash", "squash_output", "action_squash" },
  desc = "how a box action's Gaussian sample x reaches the environment: clip = x, clipped to the box by the " ..
    "environment (the log-probability is the Gaussian's); tanh = low + (high - low) (tanh(x) + 1) / 2, always " ..
    "inside the box (the log-probability with the change of variables); unused by discrete actions" }
key { key = "policy.critic_hidden", type = "integer", default = 512, min = 1, max = 65536,
  desc = "hidden width of the privileged critic" }
key { key = "policy.popart", type = "boolean", default = true,
  desc = "PopArt-normalised value head" }
key { key = "policy.popart_beta_min", type = "number", default = 0.001, min = 0, max = 1,
  desc = "PopArt: floor of the statistics' step size beta = max(1/count, beta_min)" }
key { key = "policy.init", type = "string", optional = true, max_len = 4096, c = false,
  desc = "a new run starts from the weights of this safetensors file (what `moonrl export` writes) instead of a " ..
    "random initialisation; its tensors must have this network's names and shapes (docs/export.md)" }

-- ppo -----------------------------------------------------------------------
key { key = "ppo.rollout_steps", type = "integer", default = 128, min = 1, max = 65536,
  aliases = { "n_steps", "num_steps", "rollout", "horizon", "rollout_length" },
  desc = "steps per environment per update" }
key { key = "ppo.epochs", type = "integer", default = 4, min = 1, max = 1000,
  aliases = { "update_epochs", "n_epochs", "ppo_epochs" },
  desc = "passes over the batch per update" }
key { key = "ppo.minibatches", type = "integer", default = 1, min = 1, max = 65536,
  aliases = { "num_minibatches", "n_minibatches", "minibatch" },
  desc = "minibatches per epoch (1 = full batch); must divide num_envs * rollout_steps" }
key { key = "ppo.gamma", type = "number", default = 0.99, min = 0, max = 1,
  aliases = { "discount" }, desc = "discount factor" }
key { key = "ppo.gae_lambda", type = "number", default = 0.95, min = 0, max = 1,
  aliases = { "lambda", "lam", "gae" }, desc = "GAE lambda" }
key { key = "ppo.lr", type = "schedule", default = { kind = "linear", from = 3e-4, to = 1e-4 },
  min = 0, max = 1, hot = "engine", hot_slot = 1,
  aliases = { "learning_rate", "lr_schedule", "alpha", "step_size", "learningrate" },
  desc = "Adam learning rate" }
key { key = "ppo.clip", type = "schedule", default = { kind = "linear", from = 0.2, to = 0.1 },
  min = 0, max = 10, hot = "engine", hot_slot = 2,
  aliases = { "clip_range", "clip_coef", "clip_eps", "clip_epsilon", "clip_param" },
  desc = "PPO ratio clip (also the value clip)" }
key { key = "ppo.ent_coef", type = "schedule", default = { kind = "linear", from = 0.1, to = 0.001 },
  min = 0, max = 10, hot = "engine", hot_slot = 3,
  aliases = { "entropy_coef", "ent", "entropy", "entropy_coefficient", "ent_coeff" },
  desc = "entropy bonus coefficient" }
key { key = "ppo.vf_coef", type = "number", default = 0.5, min = 0, max = 1000, hot = "engine", hot_slot = 5,
  aliases = { "value_coef", "vf", "value_loss_coef", "vf_coeff" },
  desc = "value loss coefficient" }
key { key = "ppo.ent_floor", type = "number", default = 0.5, min = 0, max = 10, hot = "engine", hot_slot = 6,
  desc = "entropy floor: loss += ent_floor_coef * relu(ent_floor - H)" }
key { key = "ppo.ent_floor_coef", type = "number", default = 0.05, min = 0, max = 1000, hot = "engine", hot_slot = 7,
  desc = "weight of the entropy-floor penalty" }
key { key = "ppo.max_grad_norm", type = "number", default = 0.5, min = 1e-8, max = 1e6,
  hot = "engine", hot_slot = 4, aliases = { "grad_clip", "clip_grad_norm", "max_norm", "grad_norm" },
  desc = "global gradient-norm clip, per group (policy, value)" }
key { key = "ppo.adam_beta1", type = "number", default = 0.9, min = 0, max = 0.999999,
  aliases = { "beta1" }, desc = "Adam beta1" }
key { key = "ppo.adam_beta2", type = "number", default = 0.999, min = 0, max = 0.999999999,
  aliases = { "beta2" }, desc = "Adam beta2" }
key { key = "ppo.adam_eps", type = "number", default = 1e-8, min = 1e-12, max = 1,
  aliases = { "eps", "epsilon" }, desc = "Adam epsilon" }
key { key = "ppo.norm_adv", type = "boolean", default = true,
  aliases = { "normalize_advantages", "norm_advantages", "adv_norm", "normalize_advantage" },
  desc = "normalise advantages over the batch" }
key { key = "ppo.reward_clip", type = "number", default = 20, min = 1e-6, max = 1e6,
  desc = "rewards clamped to [-c, c]" }
key { key = "ppo.truncation", type = "enum", default = "auto", choices = { "auto", "bootstrap", "end" },
  before = "end", aliases = { "timeout", "time_limit", "handle_timeout_termination", "bootstrap" },
  desc = "a truncated episode's last step (env.max_episode_steps, an environment's own limit): bootstrap = its " ..
    "reward gets gamma V(final observation), the critic's value of the state reached before the reset, as SB3 " ..
    "does; end = it ends the value chain like a termination; auto = the environment's choice (bootstrap for " ..
    "cartpole, pendulum and dials, whose time limit the critic does not see; end for foraging, reach and snake). " ..
    "Runs and checkpoints from before this key read as end (docs/configuration.md)" }

-- cuda ----------------------------------------------------------------------
key { key = "cuda.device_index", type = "integer", default = 0, min = 0, max = 64, gpu_only = true,
  aliases = { "device", "gpu", "device_id" }, desc = "which GPU" }
key { key = "cuda.graphs", type = "boolean", default = true, gpu_only = true,
  aliases = { "cuda_graphs", "graph" },
  desc = "record each update as CUDA graphs after the first (eager) one and replay them; false queues every kernel" }
key { key = "cuda.memory_fraction", type = "number", default = 0.9, min = 0.01, max = 1,
  gpu_only = true, desc = "device memory limit as a fraction of the card" }
key { key = "cuda.release_threshold", type = "number", default = 0.8, min = 0, max = 1,
  gpu_only = true, desc = "fraction of the limit above which cached blocks are released" }
key { key = "cuda.conv", type = "enum", default = "im2col", choices = { "auto", "cudnn", "im2col" },
  gpu_only = true, aliases = { "cuda_conv" },
  desc = "how the CUDA backend computes the trunk's 3x3 convolutions: im2col = im2col + cuBLAS (the " ..
    "default, the path the GPU windows measured); cudnn = layers 1.. through cuDNN (loaded at run time; " ..
    "algorithms from the cache where it has them, else cuDNN's heuristics); auto = each layer 1.. its own of " ..
    "im2col and cudnn, the faster as timed by warm-up's \"algorithms\" step (warmup.prepare) or cached by an " ..
    "earlier search on this GPU model, else im2col. The first layer reads the codes and stays im2col; without " ..
    "cuDNN every layer is im2col (said in train.log). docs/cuda.md" }

key { key = "cuda.epilogue", type = "enum", default = "separate", choices = { "separate", "fused" },
  gpu_only = true, aliases = { "cuda_epilogue" },
  desc = "how the CUDA backend finishes its products: separate = each cuBLAS GEMM followed by its own " ..
    "element-wise kernels (bias + ReLU, the ReLU mask, the bias-gradient sums; the default, the path the GPU " ..
    "windows measured); fused = cuBLASLt epilogues (bias + ReLU keeping a bit mask, ReLU mask + bias gradient, " ..
    "an operand's bias gradient) in the same product, the separate kernels where cuBLASLt has no algorithm " ..
    "(counted; test_cuda_epilogue fails if any product of the reference network falls back). Off until a GPU " ..
    "window measures it faster. docs/cuda.md" }

-- cpu -----------------------------------------------------------------------
key { key = "cpu.conv", type = "enum", default = "auto", choices = { "auto", "onednn", "im2col", "winograd" },
  aliases = { "conv_impl", "convolution" },
  desc = "CPU backend only: how the trunk's 3x3 convolutions are computed; onednn = the first layer straight " ..
    "from the observation codes and the others through oneDNN; im2col = im2col + OpenBLAS sgemm for every " ..
    "layer (the engine before oneDNN, bit for bit); winograd = the first layer from the codes and the others " ..
    "by Winograd F(6x6,3x3) on 11 x 11 maps, F(4x4,3x3) where that takes fewer products (4.3x fewer " ..
    "multiply-adds at 11 x 11, fp32 only, up to ~100x direct summation's rounding error); auto = each layer 1.. its own of onednn and winograd, the faster as measured by warm-up's " ..
    "\"algorithms\" step (warmup.prepare) or cached by an earlier search on this machine, else onednn. " ..
    "They differ in the last bits; each is bit-identical for any thread count" }
key { key = "cpu.activations", type = "enum", default = "auto", choices = { "auto", "store", "recompute" },
  aliases = { "activation_memory", "recompute", "checkpointing" },
  desc = "CPU backend only: what the training forward keeps for the backward; store = every conv layer's " ..
    "output for the whole minibatch (fastest; 2.2 GiB for the reference network at 192 x 128, docs/environment.md); recompute = only " ..
    "the linear layers' (0.5 GiB there), the backward runs the conv trunk again 1,024 samples at a time (one " ..
    "more trunk forward per update step); auto = store while that takes at most 256 MiB more than recompute, else recompute but keep the " ..
    "activations of as many of a batch's first samples as 256 MiB holds (3,072 of 24,576 there; recompute's bits). " ..
    "The conv gradients are bit-identical either way; fc's weight gradient differs in the last bits" }

-- warmup --------------------------------------------------------------------
key { key = "warmup.updates", type = "integer", default = 1, min = 0, max = 1000,
  desc = "updates run before timing starts; 0 = none" }
key { key = "warmup.restore", type = "boolean", default = true,
  desc = "restore the weights and optimizer after warm-up (warm-up does not train)" }
-- "algorithms" searches the conv implementations per layer
-- (run/conv_algorithms.lua): the CPU's (cpu.conv = auto) and the GPU's
-- (cuda.conv = auto: im2col against cuDNN's fastest deterministic algorithms).
key { key = "warmup.prepare", type = "list", of = "enum", default = { "graphs" },
  choices = { "graphs", "algorithms" }, min_len = 0, max_len = 2, unique = true,
  desc = "what warm-up prepares: \"graphs\" = capture the CUDA graphs (with cuda.graphs; CUDA only); " ..
    "\"algorithms\" = with cpu.conv = auto on the cpu, time each conv layer's implementations (onednn, " ..
    "winograd) before the trainer starts and keep the fastest, cached per machine and layer shape in " ..
    "conv_algorithms.json under $MOONRL_CACHE_DIR, else $XDG_CACHE_HOME/moonrl, else ~/.cache/moonrl; " ..
    "with cuda.conv = auto on a GPU the same for im2col against cuDNN (cuda_conv_algorithms.json there, " ..
    "per GPU model, cuDNN version, layer shape, chunk and precision) " ..
    "(docs/engine.md); {} = nothing" }

-- log -----------------------------------------------------------------------
key { key = "log.console", type = "boolean", default = true, desc = "progress line on the console" }
key { key = "log.jsonl", type = "boolean", default = true, desc = "metrics.jsonl in the run directory" }
key { key = "log.csv", type = "boolean", default = false, desc = "metrics.csv in the run directory" }
key { key = "log.tensorboard", type = "boolean", default = true,
  desc = "TensorBoard event file in the run directory" }
key { key = "log.histograms", type = "boolean", default = false,
  desc = "TensorBoard: at every checkpoint, a histogram of each parameter tensor and of its gradient (the last " ..
    "optimizer step's, which checkpoints then also hold), read from the checkpoint on the loop, not the trainer" }
key { key = "log.interval", type = "integer", default = 1, min = 1, max = 1000000000, hot = "lua",
  desc = "updates between console lines (a terminal redraws every update)" }
key { key = "log.checkpoint_interval", type = "integer", default = 0, min = 0, max = 1000000000,
  desc = "updates between checkpoints; 0 = only at the end" }
key { key = "log.checkpoint_keep", type = "integer", default = 3, min = 0, max = 1000000,
  desc = "periodic checkpoints kept; 0 = keep all" }

-- alerts --------------------------------------------------------------------
key { key = "alerts.sps_min", type = "number", default = 0, min = 0, max = 1e12, hot = "lua",
  desc = "warn when agent-steps/s falls below this; 0 = off (the first update is not checked)" }
key { key = "alerts.memory_warning", type = "number", default = 0.90, min = 0, max = 1, min_open = true,
  hot = "lua", desc = "warn when peak memory reaches this fraction of the limit" }
key { key = "alerts.memory_critical", type = "number", default = 0.95, min = 0, max = 1, min_open = true,
  hot = "lua", desc = "critical alert at this fraction of the limit" }
key { key = "alerts.nonfinite", type = "boolean", default = true, hot = "lua",
  desc = "alert on a non-finite loss or gradient and on skipped fp16 steps" }

-- hooks ---------------------------------------------------------------------
key { key = "hooks.on_update", type = "function", optional = true, hot = "lua",
  desc = "called after every update with the metrics" }
key { key = "hooks.on_episode_stats", type = "function", optional = true, hot = "lua",
  desc = "called when episodes ended during an update, with their statistics" }
key { key = "hooks.on_checkpoint", type = "function", optional = true, hot = "lua",
  desc = "called after a checkpoint is written, with its path" }
key { key = "hooks.on_alert", type = "function", optional = true, hot = "lua",
  desc = "called with each alert {level, kind, message}" }
key { key = "hooks.on_finish", type = "function", optional = true, hot = "lua",
  desc = "called once when the run ends" }

-- faults --------------------------------------------------------------------
key { key = "faults.max_bad_updates", type = "integer", default = 3, min = 0, max = 1000000000,
  desc = "updates in a row with a non-finite loss or gradient (each skips its optimizer step and " ..
    "raises an alert) after which the run stops, its final checkpoint the last good state; " ..
    "0 = never stop (no last good state is kept; checkpoints are written whatever the state)" }
key { key = "faults.max_hook_failures", type = "integer", default = 10, min = 0, max = 1000000000, hot = "lua",
  desc = "failures after which a hook is disabled for the rest of the run (said once; setting " ..
    "the hook again enables it); 0 = never disable" }

-- eval ----------------------------------------------------------------------
-- `ce`: the field of the engine's mr_eval_config (generated like `c`, below)
key { key = "eval.num_envs", type = "integer", default = 1024, min = 1, max = 1048576, ce = "num_envs",
  desc = "environments per evaluation run" }
key { key = "eval.steps", type = "integer", default = 4096, min = 1, max = 268435456, ce = "steps",
  desc = "steps per evaluation run" }
key { key = "eval.runs", type = "integer", default = 1, min = 1, max = 1000, ce = "runs",
  desc = "evaluation runs (averaged)" }
key { key = "eval.seed", type = "integer", default = 12345, min = 0, max = MAX_SAFE, ce = "seed",
  desc = "evaluation seed (its own RNG stream)" }

-- debug ---------------------------------------------------------------------
key { key = "debug.inject_nan_at_update", type = "integer", default = 0, min = 0, max = 1000000000,
  desc = "test aid: one weight is set to NaN just before this update (mr_trainer_debug_poison), " ..
    "to see faults.max_bad_updates at work; 0 = off" }
key { key = "debug.crash_at_update", type = "integer", default = 0, min = 0, max = 1000000000,
  desc = "test aid: the process kills itself with SIGKILL (as the OOM killer would) once this update's " ..
    "metrics are in, without a final checkpoint, to see a crash handled (a sweep's failed trial); 0 = off" }

-- The keys that reach the engine (mr_config): `c` is the field's path there,
-- the key itself unless the entry names another. The build generates the
-- engine's defaults, range checks and checkpoint records from these entries
-- (src/engine/core/gen_config_keys.lua); enum values are their choice's index.
local ENGINE_SECTIONS = { env = true, policy = true, ppo = true, cuda = true, cpu = true }
local ENGINE_TOP = { device = true, precision = true, threads = true, seed = true, total_steps = true }
for _, e in ipairs(K) do
  local section = e.key:match("^([^.]+)%.")
  if e.c == nil and ((section and ENGINE_SECTIONS[section]) or ENGINE_TOP[e.key]) then e.c = e.key end
end

schema.keys = K
schema.by_key = {}
schema.section_by_name = {}
schema.MAX_SAFE_INTEGER = MAX_SAFE
for _, e in ipairs(K) do
  e.hot = e.hot or false
  e.gpu_only = e.gpu_only or false
  schema.by_key[e.key] = e
  e.section, e.name = e.key:match("^([^.]+)%.(.+)$")
  e.name = e.name or e.key
end
for _, s in ipairs(schema.sections) do schema.section_by_name[s.name] = s end

-- The engine's hot keys in slot order; a gap or a repeated slot is an error
-- here, before the build generates mr_hot_params from them.
local engine_hot = {}
for _, e in ipairs(K) do
  if e.hot == "engine" then
    local n = e.hot_slot
    assert(type(n) == "number" and not engine_hot[n], e.key .. ": an engine hot key needs a hot_slot of its own")
    engine_hot[n] = e.key
  else
    assert(e.hot_slot == nil, e.key .. ": hot_slot is for engine hot keys")
  end
end
for i = 1, table.maxn(engine_hot) do
  assert(engine_hot[i], "moonrl.config.schema: no engine hot key has hot_slot " .. i .. " (slots run 1 .. n)")
end

function schema.hot_keys(where)
  if where == "engine" then return { unpack(engine_hot) } end
  local out = {}
  for _, e in ipairs(K) do
    if e.hot and (where == nil or e.hot == where) then out[#out + 1] = e.key end
  end
  return out
end

-- text pieces -----------------------------------------------------------------

local fmtn = util.fmt_number

function schema.range_text(e)
  local lo, hi = e.min, e.max
  if lo ~= nil and hi ~= nil and not e.min_open and not e.max_open then
    return fmtn(lo) .. " .. " .. fmtn(hi)
  end
  local parts = {}
  if lo ~= nil then parts[#parts + 1] = (e.min_open and "> " or ">= ") .. fmtn(lo) end
  if hi ~= nil then parts[#parts + 1] = (e.max_open and "< " or "<= ") .. fmtn(hi) end
  return table.concat(parts, " and ")
end

-- What a wrong-type message says is expected.
function schema.expected_text(e)
  local t = e.type
  if t == "number" then return "a number"
  elseif t == "integer" then return e.auto and 'an integer or "auto"' or "an integer"
  elseif t == "boolean" then return "true or false"
  elseif t == "string" then return "a string"
  elseif t == "enum" then
    return "one of " .. util.quote_list(e.choices) .. (e.path_ok and " or a path to a .lua file" or "")
  elseif t == "list" then
    local what = e.of == "enum" and ("of " .. util.quote_list(e.choices)) or "integers"
    return "a list of " .. fmtn(e.min_len or 0) .. " .. " .. fmtn(e.max_len) .. " " .. what
  elseif t == "schedule" then return "a number or schedule"
  elseif t == "function" then return e.optional and "a function or nil" or "a function"
  end
  return t
end

-- The docs' "accepted" column.
function schema.accepted_text(e)
  local t = e.type
  local s
  if t == "number" or t == "integer" then
    s = (t == "integer" and "integer " or "number ") .. schema.range_text(e)
    if e.auto then s = s .. ' or "auto"' end
  elseif t == "boolean" then s = "true, false"
  elseif t == "string" then
    s = "string"
    if e.name_like then s = s .. " of 1 .. " .. e.max_len .. " characters, no / \\ or control characters"
    elseif e.max_len then s = s .. " of at most " .. e.max_len .. " bytes" end
    if e.optional then s = s .. " or nil" end
  elseif t == "enum" then
    s = util.quote_list(e.choices) .. (e.path_ok and ", or a path ending in .lua" or "")
  elseif t == "list" then
    if e.of == "enum" then
      s = "list of distinct " .. util.quote_list(e.choices)
    else
      s = "list of " .. fmtn(e.min_len) .. " .. " .. fmtn(e.max_len) .. " integers, each " .. schema.range_text(e)
    end
  elseif t == "schedule" then
    s = "number or schedule (constant, linear, cosine, step, function(p)), values " .. schema.range_text(e)
  elseif t == "function" then
    s = e.optional and "function or nil" or "function"
  end
  return s
end

-- checking one value ------------------------------------------------------------

local finite = require("moonrl.number").finite

local function in_range(e, x)
  if not finite(x) then return false end
  if e.min ~= nil then
    if e.min_open then
      if not (x > e.min) then return false end
    elseif not (x >= e.min) then return false end
  end
  if e.max ~= nil then
    if e.max_open then
      if not (x < e.max) then return false end
    elseif not (x <= e.max) then return false end
  end
  return true
end

local function type_error(e, v)
  return nil, e.key .. ": expected " .. schema.expected_text(e) .. ", got " .. util.describe(v)
end

local function range_error(e, label, v, extra)
  return nil, label .. " = " .. util.fmt_value(v) .. " is out of range: accepted " ..
    schema.range_text(e) .. (extra or "")
end

local function is_integer(v)
  return type(v) == "number" and finite(v) and v == math.floor(v)
end

local function check_enum_value(e, label, v, choices)
  for _, c in ipairs(choices) do
    if v == c then return true end
  end
  local msg = label .. " = " .. util.fmt_value(v) .. ": accepted " .. util.quote_list(choices)
  if e.path_ok then msg = msg .. ", or a path to a .lua file" end
  local near = util.closest(v, choices)
  if near then msg = msg .. " - did you mean " .. util.fmt_value(near) .. "?" end
  return nil, msg
end

local function check_schedule(e, v)
  local tv = type(v)
  if tv ~= "number" and tv ~= "table" and tv ~= "function" then return type_error(e, v) end
  if tv == "number" then
    if not in_range(e, v) then return range_error(e, e.key, v) end
    return true
  end
  if tv == "function" then
    -- A function cannot be checked statically: sample it where it will be used.
    for _, p in ipairs({ 0, 0.25, 0.5, 0.75, 1 }) do
      local ok, r = pcall(v, p)
      if not ok then
        return nil, e.key .. ": the schedule function failed at progress " .. fmtn(p) .. ": " .. tostring(r)
      end
      if type(r) ~= "number" then
        return nil, e.key .. ": the schedule function returned " .. util.describe(r) ..
          " at progress " .. fmtn(p) .. ": expected a number"
      end
      if not in_range(e, r) then
        return nil, e.key .. ": the schedule function returned " .. fmtn(r) .. " at progress " ..
          fmtn(p) .. ", out of range: accepted " .. schema.range_text(e)
      end
    end
    return true
  end
  local ok, why = schedule.is_schedule(v)
  if not ok then
    -- "kind = ..." and "gamma must be ..." name a field of the schedule.
    if why:match("^%l+ = ") or why:match("^%l+ must") then return nil, e.key .. "." .. why end
    return nil, e.key .. ": " .. why
  end
  local n = schedule.normalize(v)
  for _, f in ipairs({ "from", "to" }) do
    if v[f] ~= nil and not in_range(e, v[f]) then return range_error(e, e.key .. "." .. f, v[f]) end
  end
  if v.to == nil and not in_range(e, n.to) then
    return nil, e.key .. ": this step schedule reaches " .. fmtn(n.to) ..
      " at the end of training, out of range: accepted " .. schema.range_text(e) .. "; give it a bound `to`"
  end
  return true
end

local function check_list(e, v)
  if type(v) ~= "table" or not util.is_list(v) then return type_error(e, v) end
  local n = #v
  if n < (e.min_len or 0) or n > e.max_len then
    return nil, e.key .. ": expected " .. schema.expected_text(e) .. ", got " .. n ..
      " element" .. (n == 1 and "" or "s") .. " " .. util.fmt_value(v)
  end
  local seen = {}
  for i = 1, n do
    local x = v[i]
    local label = e.key .. "[" .. i .. "]"
    if e.of == "integer" then
      if not is_integer(x) then
        return nil, label .. ": expected an integer, got " .. util.describe(x)
      end
      if not in_range(e, x) then return range_error(e, label, x) end
    else
      if type(x) ~= "string" then
        return nil, label .. ": expected one of " .. util.quote_list(e.choices) .. ", got " .. util.describe(x)
      end
      local ok, err = check_enum_value(e, label, x, e.choices)
      if not ok then return nil, err end
      if e.unique and seen[x] then
        return nil, label .. " = " .. util.fmt_value(x) .. " is listed twice"
      end
      seen[x] = true
    end
  end
  return true
end

-- true | nil, err. err names the key, the value and what is accepted.
function schema.check(e, v)
  if v == nil then
    if e.optional then return true end
    return nil, e.key .. " is missing: expected " .. schema.expected_text(e)
  end
  local t = e.type
  if t == "number" then
    if type(v) ~= "number" then return type_error(e, v) end
    if not in_range(e, v) then return range_error(e, e.key, v) end
  elseif t == "integer" then
    if e.auto and v == "auto" then return true end
    if type(v) ~= "number" then return type_error(e, v) end
    if not finite(v) or v ~= math.floor(v) then
      return nil, e.key .. ": expected " .. schema.expected_text(e) .. ", got " .. util.describe(v)
    end
    if not in_range(e, v) then
      return range_error(e, e.key, v, e.auto and ' or "auto"' or nil)
    end
  elseif t == "boolean" then
    if type(v) ~= "boolean" then return type_error(e, v) end
  elseif t == "string" then
    if type(v) ~= "string" then return type_error(e, v) end
    if e.max_len and #v > e.max_len then
      return nil, e.key .. " = " .. util.fmt_value(v, 40) .. " is too long: at most " .. e.max_len .. " bytes"
    end
    if e.name_like and (#v == 0 or v:find("[/\\%c]")) then
      return nil, e.key .. " = " .. util.fmt_value(v) ..
        ": accepted 1 .. " .. e.max_len .. " characters without / \\ or control characters"
    end
  elseif t == "enum" then
    if type(v) ~= "string" then return type_error(e, v) end
    if e.path_ok and v:match("%.lua$") then return true end
    return check_enum_value(e, e.key, v, e.choices)
  elseif t == "list" then
    return check_list(e, v)
  elseif t == "schedule" then
    return check_schedule(e, v)
  elseif t == "function" then
    if type(v) ~= "function" then return type_error(e, v) end
  else
    error("schema: unknown type " .. tostring(t) .. " for " .. e.key)
  end
  return true
end

return schema

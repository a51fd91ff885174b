-- gen_config_keys.lua - the engine's view of the settings, generated from
-- the one description of every setting (lua/moonrl/config/schema.lua).
--
--   luajit gen_config_keys.lua ROOT OUT.h [HOT.h]
--
-- Writes X-macro tables of the keys that reach mr_config (schema entries
-- with `c`: the field path in mr_config): config.c makes the defaults, the
-- range checks and the checkpoint's keyed config records from them, env.c
-- its bounds. Nothing here is written by hand a second time: a setting's
-- name, type, default and range are the schema's.
--
--   MR_CONFIG_KEYS(INT, REAL, U64, ENUM, SCHED, LIST)
--     INT("env.num_envs", env.num_envs, 192, 1, 1048576)      int; booleans 0 .. 1
--     REAL("ppo.gamma", ppo.gamma, 0.99, 0, 1)                 float or double
--     U64("seed", seed, 1, 0, 9007199254740991)
--     ENUM("env.mode", env.mode, 0, 4, "ground_truth|...")     C value = index of the choice
--     SCHED("ppo.lr", ppo.lr, 1, 3e-4, 1e-4, 0, 1)             kind (MR_SCHED_*), from, to, value bounds
--     LIST("policy.conv_channels", policy.conv_channels, policy.num_conv, 1, 1024, 1, 8)
--   MR_CONFIG_LIST_DEFAULTS(X)    X(field, count_field, index, value)
--   MR_EVAL_KEYS(INT, U64)        the same for mr_eval_config (entries with `ce`)
--   MR_KEY_MIN_<name> / MR_KEY_MAX_<name>   the bounds as constants (env_num_envs, ...)
--
-- HOT.h (src/engine/hot_keys.h, beside moonrl.h, which declares mr_hot_params
-- from it; committed, so the public header reads without a build) holds the
-- engine's hot keys (hot = "engine"), in the order of their hot_slot: the
-- members of mr_hot_params and so the checkpoint's hot record, whose bytes
-- for the existing slots never move (a new key takes the next slot):
--   MR_HOT_KEYS(SCHED, REAL, INT, U64)
--     SCHED("ppo.lr", lr, ppo.lr, 0, 1)     key, member of mr_hot_params, field of mr_config, bounds
--   MR_HOT_COUNT, MR_HOT_SCHEDULES   how many keys, how many of them schedules
local root, out, hot_out = arg[1], arg[2], arg[3]
assert(root and out, "usage: luajit gen_config_keys.lua ROOT OUT.h [HOT.h]")
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
local schema = require("moonrl.config.schema")

local SCHED_KIND = { constant = 0, linear = 1, cosine = 2, step = 3 }

local function num(v)
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format("%d", v) end
  return string.format("%.17g", v)
end

local function ident(key) return (key:gsub("%.", "_")) end

local rows, defaults, bounds, evalrows = {}, {}, {}, {}
for _, e in ipairs(schema.keys) do
  if e.ce then   -- mr_eval_config: integers only
    assert(e.type == "integer", e.key .. ": only integers reach mr_eval_config")
    local wide = e.max > 2147483647
    evalrows[#evalrows + 1] = string.format("%s(%q, %s, %s%s, %s, %s%s)", wide and "U64" or "INT", e.key, e.ce,
      num(e.default), wide and "ull" or "", num(e.min), num(e.max), wide and "ull" or "")
  end
  if e.c then
    local field, k = e.c, string.format("%q", e.key)
    local function bound(lo, hi)
      bounds[#bounds + 1] = string.format("#define MR_KEY_MIN_%s %s\n#define MR_KEY_MAX_%s %s",
        ident(e.key), num(lo), ident(e.key), num(hi))
    end
    if e.type == "integer" and e.max and e.max > 2147483647 then
      rows[#rows + 1] = string.format("U64(%s, %s, %sull, %s, %sull)", k, field, num(e.default), num(e.min), num(e.max))
      bound(e.min, e.max)
    elseif e.type == "integer" then
      rows[#rows + 1] = string.format("INT(%s, %s, %s, %s, %s)", k, field, num(e.default), num(e.min), num(e.max))
      bound(e.min, e.max)
    elseif e.type == "boolean" then
      rows[#rows + 1] = string.format("INT(%s, %s, %d, 0, 1)", k, field, e.default and 1 or 0)
    elseif e.type == "number" then
      assert(not e.min_open and not e.max_open, e.key .. ": open bounds are not generated for the engine")
      rows[#rows + 1] = string.format("REAL(%s, %s, %s, %s, %s)", k, field, num(e.default), num(e.min), num(e.max))
      bound(e.min, e.max)
    elseif e.type == "enum" then
      local index
      for i, c in ipairs(e.choices) do if c == e.default then index = i - 1 end end
      assert(index, e.key .. ": its default is not one of its choices")
      rows[#rows + 1] = string.format("ENUM(%s, %s, %d, %d, %q)", k, field, index, #e.choices,
        table.concat(e.choices, "|"))
    elseif e.type == "schedule" then
      local d = e.default
      local kind = assert(SCHED_KIND[d.kind], e.key .. ": schedule kind " .. tostring(d.kind))
      rows[#rows + 1] = string.format("SCHED(%s, %s, %d, %s, %s, %s, %s)", k, field, kind, num(d.from),
        num(d.to), num(e.min), num(e.max))
      bound(e.min, e.max)
    elseif e.type == "list" and e.of == "integer" then
      local count = assert(e.c_count, e.key .. ": a list needs c_count (the field holding its length)")
      rows[#rows + 1] = string.format("LIST(%s, %s, %s, %s, %s, %d, %d)", k, field, count, num(e.min), num(e.max),
        e.min_len or 0, e.max_len)
      for i, v in ipairs(e.default) do
        defaults[#defaults + 1] = string.format("X(%s, %s, %d, %s)", field, count, i - 1, num(v))
      end
      bound(e.min, e.max)
    else
      error(e.key .. ": type " .. e.type .. " cannot reach the engine")
    end
  end
end

-- The engine's hot keys, in slot order (schema.hot_keys("engine")).
local hotrows, n_sched = {}, 0
for _, key in ipairs(schema.hot_keys("engine")) do
  local e = schema.by_key[key]
  assert(e.c, key .. ": an engine hot key must reach mr_config (c)")
  local member = e.key:match("([^.]+)$")
  local lo, hi = num(e.min), num(e.max)
  local kind
  if e.type == "schedule" then kind, n_sched = "SCHED", n_sched + 1
  elseif e.type == "number" then kind = "REAL"
  elseif e.type == "integer" and e.max > 2147483647 then kind, lo, hi = "U64", lo .. "ull", hi .. "ull"
  elseif e.type == "integer" or e.type == "boolean" then
    kind = "INT"
    if e.type == "boolean" then lo, hi = "0", "1" end
  else
    error(key .. ": type " .. e.type .. " cannot be an engine hot key (schedule, number, integer, boolean)")
  end
  hotrows[#hotrows + 1] = string.format("%s(%q, %s, %s, %s, %s)", kind, e.key, member, e.c, lo, hi)
end

-- Written only when it changed, so an unchanged schema rebuilds nothing.
local function write_if_changed(path, text)
  local old = io.open(path, "r")
  if old then
    local a = old:read("*a")
    old:close()
    if a == text then return end
  end
  local f = assert(io.open(path .. ".tmp", "w"))
  f:write(text)
  f:close()
  assert(os.rename(path .. ".tmp", path))
end

write_if_changed(out, table.concat({
  "/* Generated by src/engine/core/gen_config_keys.lua from lua/moonrl/config/schema.lua:\n",
  " * edit the schema, not this file. */\n#ifndef MR_CONFIG_KEYS_H\n#define MR_CONFIG_KEYS_H\n\n",
  "#define MR_CONFIG_KEYS(INT, REAL, U64, ENUM, SCHED, LIST) \\\n    ",
  table.concat(rows, " \\\n    "), "\n\n",
  "#define MR_CONFIG_LIST_DEFAULTS(X) \\\n    ", table.concat(defaults, " \\\n    "), "\n\n",
  "#define MR_EVAL_KEYS(INT, U64) \\\n    ", table.concat(evalrows, " \\\n    "), "\n\n",
  table.concat(bounds, "\n"), "\n\n#endif\n" }))

if hot_out then
  write_if_changed(hot_out, table.concat({
    "/* hot_keys.h - the engine's hot keys: generated by src/engine/core/gen_config_keys.lua\n",
    " * from lua/moonrl/config/schema.lua (hot = \"engine\", in hot_slot order); edit the\n",
    " * schema, not this file (the build writes it again when they differ).\n",
    " *\n",
    " *   MR_HOT_KEYS(SCHED, REAL, INT, U64)\n",
    " *     X(key, member of mr_hot_params, field of mr_config, min, max)\n",
    " * The members of mr_hot_params, in this order, are the checkpoint's hot\n",
    " * record: the slots of existing keys never move; a new key takes the next. */\n",
    "#ifndef MR_HOT_KEYS_H\n#define MR_HOT_KEYS_H\n\n",
    "#define MR_HOT_KEYS(SCHED, REAL, INT, U64) \\\n    ", table.concat(hotrows, " \\\n    "), "\n\n",
    string.format("#define MR_HOT_COUNT %d\n#define MR_HOT_SCHEDULES %d   /* of them SCHED */\n\n",
      #hotrows, n_sched),
    "#endif\n" }))
end

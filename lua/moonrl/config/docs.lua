-- moonrl.config.docs - docs/config.md, the configuration reference,
-- generated from moonrl.config.schema (lua/moonrl/gen_docs.lua writes it; a spec
-- fails when the file and the schema differ).
--
--   docs.reference_markdown() -> string

local schema = require("moonrl.config.schema")
local schedule = require("moonrl.schedule")
local util = require("moonrl.util")
local serialize = require("moonrl.config.serialize")

local docs = {}

local function md_cell(s)
  return (tostring(s):gsub("|", "\\|"))
end

local function default_text(e)
  local d = e.default
  if d == nil then return "none" end
  if e.type == "schedule" then return "`" .. schedule.to_lua(d) .. "`" end
  if type(d) == "string" then return "`" .. serialize.lua_string(d) .. "`" end
  return "`" .. util.fmt_value(d, 200) .. "`"
end

function docs.reference_markdown()
  local L = {}
  local function add(s) L[#L + 1] = s end
  add("# moonrl configuration reference")
  add("")
  add("Generated from `lua/moonrl/config/schema.lua` by `luajit lua/moonrl/gen_docs.lua`: edit the schema, not")
  add("this file (`spec/gen_docs_spec.lua` fails when the two differ).")
  add("")
  add("A config is a Lua table. The table a run uses is built from layers, each overriding the one")
  add("before: built-in defaults < hardware profile (`configs/hardware/<hardware>.lua`) < optimisation")
  add("level (`configs/levels/<level>.lua`) < experiment file < `--set key=value`. It is validated")
  add("before anything starts: an unknown key, a wrong type or an out-of-range value is an error that")
  add("names the key, the value and what is accepted.")
  add("")
  local scheduled = {}
  for _, e in ipairs(schema.keys) do
    if e.type == "schedule" then scheduled[#scheduled + 1] = "`" .. e.key .. "`" end
  end
  add("- **Schedules** (" .. table.concat(scheduled, ", ") .. ") take a number (a constant),")
  add("  `linear(from, to)`, `cosine(from, to)`, `constant(v)`, `step(from, gamma, every[, to])`,")
  add("  the table form `{kind = \"linear\", from = ..., to = ...}`, or a Lua `function(progress)`;")
  add("  progress runs from 0 to 1 over training. `step` is `from * gamma^floor(p / every)`, never past `to`.")
  add("  Progress is updates done / total updates. When a resume changes `total_steps`, each schedule")
  add("  the resume does not set itself goes on from its value at the last update trained to its end")
  add("  value (`to`) at the new total, with no jump: linear, cosine and step get a new `from` (kept in")
  add("  `config.lua`), a `function(progress)` is stretched over the rest. The resume prints one note")
  add("  naming each key, that value, the update and the new end; setting a schedule on the resume")
  add("  (`--set ppo.lr=...`) uses it as given, at the new total's progress.")
  add("- **hot** keys can change while a run is going (`moonrl ctl RUN_DIR set key=value`).")
  add("- **A value as text** (`--set key=value`, `moonrl ctl set`, the dashboard's set) is data, read by a")
  add("  parser (`moonrl.config.value`), never run as Lua: a number, `true`, `false`, a quoted string")
  add("  (Lua's escapes), a table of values (`{32, 64}`, `{kind = \"linear\", from = 1e-3, to = 1e-4}`), or")
  add("  `linear`, `cosine`, `constant`, `step` with values as arguments. An operator, `math.pi` or a")
  add("  `function` is refused, naming the byte (a function schedule or hook goes in a config file);")
  add("  other text is a string, and a string key's value is always the text as typed.")
  add("- **CUDA only** settings are reported as not applying on cpu; a non-fp32 `precision` from a")
  add("  profile or level falls back there (to bf16 where the CPU has AMX, else fp32, with one note:")
  add("  on AVX512-BF16 without AMX bf16 trained no faster than fp32, BENCHMARKS.md), while one the CPU")
  add("  cannot run set by the experiment is an error (bf16 set by the experiment runs on AVX512-BF16 too).")
  add("  The levels on a cpu: basic = fp32, advanced and ultra = bf16 where the CPU has AMX; the")
  add("  trainer's description line at the start says which ran (\"bf16 (oneDNN avx512_core_amx ...)\");")
  add("  advanced and ultra also measure each conv layer's implementation once per machine")
  add("  (`warmup.prepare` has \"algorithms\", `cpu.conv = auto`: docs/engine.md).")
  add("- `warmup` may also be a `function(info)` returning the `warmup` table, where `info` is")
  add("  `{device = ..., level = ..., num_envs = ...}`.")
  add("- **Metrics of an update in which no episode ended**: the per-episode figures (return, length,")
  add("  food, poison, efficiency) are absent, not 0: `null` in `metrics.jsonl`, an empty cell in")
  add("  `metrics.csv`, no TensorBoard point, `-` on the console and in `train.log`.")
  add("- **Removed:** `cuda.cudnn_benchmark` and `cuda.algo_cache` did nothing (the GPU's")
  add("  convolutions are im2col + cuBLAS: no algorithm search to run or cache) and are gone until")
  add("  code that honours them is written; a config that still sets them gets the usual unknown-key")
  add("  error. The `warmup.prepare` choice `\"algorithms\"` searches the CPU's convolutions per layer")
  add("  (`cpu.conv = \"auto\"`); its cache is described in docs/engine.md.")
  add("")
  add("| key | default | accepted | hot | description |")
  add("|---|---|---|---|---|")
  for _, e in ipairs(schema.keys) do
    local desc = e.desc
    if e.gpu_only then
      desc = desc .. (e.key == "precision" and " (fp16: CUDA only; bf16: CUDA, or a CPU with AVX512-BF16 or AMX)" or " (CUDA only)")
    end
    add("| `" .. e.key .. "` | " .. md_cell(default_text(e)) .. " | " .. md_cell(schema.accepted_text(e)) ..
      " | " .. (e.hot and "yes" or "no") .. " | " .. md_cell(desc) .. " |")
  end
  add("")
  return table.concat(L, "\n")
end

return docs

-- moonrl.run.tweaks - a live tweak file's text, read and checked: what
-- moonrl.run.live applies each time the file is saved.
--
-- The file is a Lua chunk returning a table of config keys, nested or dotted:
--
--   return { ppo = { lr = 1e-4, ent_coef = 0.01 }, ["log.interval"] = 10 }
--
-- It runs in a live file's sandbox, bounded (moonrl.sandbox: live_globals,
-- run_bounded, LIMITS). Source text only: bytecode is refused. Then every
-- key is checked against the schema, keys whose value is what is in force
-- already are dropped, and the rest is checked again as a whole config
-- (cross-key rules). A function the file gives (a schedule, a hook) stays
-- bounded (sandbox.keep_bounded). A syntax error, a bad value, an unknown
-- key or a changed cold key (it needs a restart) fails the whole file; the
-- message names the line (the key's line when the value was wrong).
--
--   tweaks.read(text, label) -> {key = value} | nil, err     the sandboxed load + flatten
--   tweaks.check(cfg, tweaks, text, label) -> {{key=, value=}, ...} (what differs, schema
--                                             order) | nil, err

local sandbox = require("moonrl.sandbox")
local schema = require("moonrl.config.schema")
local util = require("moonrl.util")
local validate = require("moonrl.config.validate")

local tweaks = {}

-- Dotted or nested keys into one flat table; errors name the key.
local function flatten(t, prefix, out, errs)
  for _, k in ipairs(util.sorted_keys(t)) do
    local v = t[k]
    if type(k) ~= "string" then
      errs[#errs + 1] = { msg = "unexpected entry [" .. util.fmt_value(k) .. "]: keys are names such as ppo.lr" }
    else
      local path = prefix and (prefix .. "." .. k) or k
      if schema.by_key[path] then
        if out[path] ~= nil then
          errs[#errs + 1] = { key = path, msg = path .. " is given twice (nested and dotted)" }
        end
        out[path] = v
      elseif schema.section_by_name[path] and type(v) == "table" and not prefix then
        flatten(v, path, out, errs)
      elseif schema.section_by_name[path] then
        errs[#errs + 1] = { key = path, msg = path .. " is a section: give its keys, e.g. " ..
          (path == "ppo" and "ppo = { lr = 1e-4 }" or path .. " = { <key> = ... }") }
      else
        errs[#errs + 1] = { key = path, msg = validate.unknown_key(path) }
      end
    end
  end
end

-- The line of `text` where key (or its last part) is set, or nil.
local function line_of(text, key)
  local leaf = key:match("([^.]+)$")
  local n = 0
  local quoted
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    local code = line:gsub("%-%-.*$", "")
    if code:find('"' .. key .. '"', 1, true) or code:find("'" .. key .. "'", 1, true) then return n end
    if not quoted and code:find("%f[%w_]" .. leaf .. "%s*=") then quoted = n end
  end
  return quoted
end

local function where(label, text, e)
  if e.key and text then
    local n = line_of(text, e.key)
    if n then return label .. ":" .. n .. ": " .. e.msg end
  end
  return label .. ": " .. e.msg
end

function tweaks.read(text, label)
  local chunk, err = sandbox.compile(text, label)
  if not chunk then return nil, err end
  local ok, res = sandbox.run_bounded(chunk)
  if not ok then
    local msg = tostring(res)
    if not msg:find(label, 1, true) then msg = label .. ": " .. msg end
    return nil, msg
  end
  if res == nil then return {} end
  if type(res) ~= "table" then
    return nil, label .. ": returned " .. util.describe(res) .. ", expected a table of config keys: end the file " ..
      "with `return { ppo = { lr = 1e-4 } }`"
  end
  local flat, errs = {}, {}
  flatten(res, nil, flat, errs)
  if #errs > 0 then
    local lines = {}
    for _, e in ipairs(errs) do lines[#lines + 1] = where(label, text, e) end
    return nil, table.concat(lines, "\n")
  end
  return flat
end

-- --------------------------------------------------------------- checking

local function same(a, b)
  if type(a) == "function" and type(b) == "function" then
    if a == b then return true end
    local oka, da = pcall(string.dump, a, true)
    local okb, db = pcall(string.dump, b, true)
    if not (oka and okb and da == db) then return false end
    for i = 1, debug.getinfo(a, "u").nups do
      local _, va = debug.getupvalue(a, i)
      local _, vb = debug.getupvalue(b, i)
      if not util.deep_equal(va, vb) then return false end
    end
    return true
  end
  return util.deep_equal(a, b)
end

function tweaks.check(cfg, tweaks, text, label)
  local errs, out = {}, {}
  for _, e in ipairs(schema.keys) do
    local v = tweaks[e.key]
    if v ~= nil then
      -- A function schedule is sampled by the check: its code is the file's,
      -- so the same bounds apply.
      local ok, okc, cerr = sandbox.bounded(schema.check, e, v)
      if not ok then okc, cerr = nil, e.key .. ": " .. tostring(okc) end
      if not okc then
        errs[#errs + 1] = { key = e.key, msg = cerr }
      else
        if type(v) == "function" then sandbox.keep_bounded(v) end
        local norm = validate.normalize_value(e, v)
        if not same(norm, validate.get(cfg, e.key)) then
          if not e.hot then
            errs[#errs + 1] = { key = e.key, msg = e.key .. " = " .. util.fmt_value(v) ..
              " needs a restart: it is not hot (it cannot change while the run is going)" }
          else
            out[#out + 1] = { key = e.key, value = v }
          end
        end
      end
    end
  end
  if #errs == 0 and #out > 0 then
    -- Together with what is in force: the rules that involve two keys.
    local whole = util.deepcopy(cfg)
    for _, c in ipairs(out) do validate.set(whole, c.key, c.value) end
    local ok, verr = validate.validate(whole)
    if not ok then
      for line in (verr .. "\n"):gmatch("([^\n]+)\n") do errs[#errs + 1] = { msg = line } end
    end
  end
  if #errs > 0 then
    local lines = {}
    for _, e in ipairs(errs) do lines[#lines + 1] = where(label, text, e) end
    return nil, table.concat(lines, "\n")
  end
  return out
end

return tweaks

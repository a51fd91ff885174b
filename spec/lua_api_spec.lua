-- docs/lua-api.md, the Lua API reference, and the code name the same things:
-- every public name of the table `require "moonrl"` returns (and of
-- moonrl.schedule and moonrl.config), every method of a run object and of a
-- sweep object is a heading of the reference, and every name a heading gives
-- exists. Names starting with "_" are moonrl's own and not listed. Also
-- moonrl.wait counts seconds, and moonrl.sleep, the old millisecond form,
-- still works and says once that it is deprecated.

local support = require("support")

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
local ROOT = os.getenv("PWD") or "."
if BIN:sub(1, 1) ~= "/" then BIN = ROOT .. "/" .. BIN end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == 0 or ok == true
end

-- Runs a Lua script with `moonrl run` in a temporary directory; returns exit code, stdout, stderr.
local function run_script(text)
  local dir = support.tmpdir()
  support.write_file(dir .. "/s.lua", text)
  sh(string.format("cd %q && timeout 300 %q run s.lua >%q/.out 2>%q/.err; echo $? >%q/.rc", dir, BIN, dir, dir, dir))
  local rc, out, err = tonumber(support.read_file(dir .. "/.rc")), support.read_file(dir .. "/.out") or "",
    support.read_file(dir .. "/.err") or ""
  support.rm_rf(dir)
  return rc, out, err
end

-- The names the code has, one a line: "moonrl.train", "moonrl.schedule.linear",
-- "run:wait", ... (sweep methods are read from the source: a sweep object
-- needs a sweep to exist).
local function code_names()
  local rc, out, err = run_script([[
local moonrl = require "moonrl"
local function arity(f)
  if type(f) ~= "function" then return "" end
  local i = debug.getinfo(f, "u")
  return " " .. tostring(i.nparams) .. (i.isvararg and "+" or "")
end
local function public(t, prefix)
  for k, v in pairs(t) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" then print(prefix .. k .. arity(v)) end
  end
end
public(moonrl, "moonrl.")
public(moonrl.schedule, "moonrl.schedule.")
public(moonrl.config, "moonrl.config.")
-- the methods of a run object: its metatable's functions; Run.start is the
-- constructor moonrl.train calls, not a method of a run
for k, v in pairs(require("moonrl.run")) do
  if type(v) == "function" and k:sub(1, 1) ~= "_" and k ~= "start" then print("run:" .. k .. arity(v)) end
end
]])
  assert.are.equal(0, rc, out .. err)
  -- name -> its parameter count (self included; "2+": 2 and varargs), or "" (not a function)
  local names = {}
  for line in out:gmatch("[^\n]+") do
    local name, n = line:match("^(%S+) ?(%S*)$")
    names[name] = n
  end
  local src = assert(support.read_file(ROOT .. "/lua/moonrl/sweep/init.lua"))
  for m, params in src:gmatch("\nfunction Sweep:([%a][%w_]*)%(([^)]*)%)") do
    local n = 1
    for _ in params:gmatch("[^,%s]+") do n = n + 1 end
    names["sweep:" .. m] = tostring(n)
  end
  return names
end

-- The number of parameters a heading's signature gives: "(a, b[, c])" 3,
-- "{...}" 1 (a table), "(fn, ...)" "1+"; a method (run:, sweep:) counts self.
local function doc_arity(code)
  local name, rest = code:match("^([%a_][%w_%.:]*)(.*)$")
  local n = name:find(":", 1, true) and 1 or 0
  if rest:sub(1, 1) == "{" then return tostring(n + 1) end
  local args = rest:match("^%((.-)%)")
  if not args then return nil end   -- a field
  args = args:gsub("%b{}", "t"):gsub("%b\"\"", "s"):gsub("[%[%]]", "")
  local vararg = false
  for a in args:gmatch("[^,]+") do
    a = a:gsub("^%s+", ""):gsub("%s+$", "")
    if a == "..." then vararg = true elseif a ~= "" then n = n + 1 end
  end
  return tostring(n) .. (vararg and "+" or "")
end

-- The names the reference's headings give: every `backticked` name in a
-- "##" or "###" heading, up to its argument list.
local function doc_names()
  local text = assert(support.read_file(ROOT .. "/docs/lua-api.md"), "no docs/lua-api.md")
  local names = {}
  for line in text:gmatch("[^\n]+") do
    if line:match("^##") then
      for code in line:gmatch("`([^`]+)`") do
        local name = code:match("^([%a_][%w_%.:]*)")
        if name and (name:match("^moonrl[%.]?") or name:match("^run:") or name:match("^sweep:")) then
          names[name] = doc_arity(code) or false
        end
      end
    end
  end
  return names
end

local function sorted(set)
  local out = {}
  for k in pairs(set) do out[#out + 1] = k end
  table.sort(out)
  return out
end

describe("docs/lua-api.md", function()
  it("documents every public name of the moonrl module, run and sweep objects", function()
    if not have_bin then return pending("no binary at " .. BIN) end
    local code, doc = code_names(), doc_names()
    local missing = {}
    for _, n in ipairs(sorted(code)) do if doc[n] == nil then missing[#missing + 1] = n end end
    assert.are.same({}, missing, "public names with no heading in docs/lua-api.md: " .. table.concat(missing, ", "))
    -- and the reference names nothing that does not exist (the module
    -- tables themselves are sections: moonrl, moonrl.schedule, moonrl.config)
    local ghosts = {}
    for _, n in ipairs(sorted(doc)) do
      if code[n] == nil and n ~= "moonrl" then ghosts[#ghosts + 1] = n end
    end
    assert.are.same({}, ghosts, "docs/lua-api.md names what the code does not have: " .. table.concat(ghosts, ", "))
    assert.truthy(code["run:wait"] and code["sweep:wait"] and code["moonrl.schedule.linear"], "the enumeration found nothing")
  end)

  it("gives each function as many parameters as the code takes", function()
    if not have_bin then return pending("no binary at " .. BIN) end
    local code, doc = code_names(), doc_names()
    local wrong = {}
    for _, n in ipairs(sorted(doc)) do
      local want, have = code[n], doc[n]
      if want and want ~= "" then
        if not have then
          wrong[#wrong + 1] = n .. " is a function: its heading needs (arguments)"
        elseif have ~= want then
          wrong[#wrong + 1] = n .. ": the reference gives " .. have .. " parameters, the code takes " .. want
        end
      elseif want == "" and have then
        wrong[#wrong + 1] = n .. " is not a function, the reference calls it"
      end
    end
    assert.are.same({}, wrong, table.concat(wrong, "; "))
  end)

  it("is linked from the README", function()
    local readme = assert(support.read_file(ROOT .. "/README.md"))
    assert.truthy(readme:find("(docs/lua-api.md)", 1, true), "README.md does not link docs/lua-api.md")
  end)
end)

describe("moonrl.wait and moonrl.sleep", function()
  it("moonrl.wait counts seconds; moonrl.sleep(ms) still counts milliseconds, with one deprecation note", function()
    if not have_bin then return pending("no binary at " .. BIN) end
    local rc, out, err = run_script([[
local moonrl, uv = require "moonrl", require "luv"
local t0 = uv.hrtime()
moonrl.wait(0.3)
print("wait", (uv.hrtime() - t0) / 1e9)
t0 = uv.hrtime()
moonrl.sleep(300)
moonrl.sleep(1)
print("sleep", (uv.hrtime() - t0) / 1e9)
for _, bad in ipairs({ "1", -1, 0 / 0, {} }) do print("bad", select(2, pcall(moonrl.wait, bad))) end
]])
    assert.are.equal(0, rc, out .. err)
    -- lower bounds only: a loaded machine may wake late, never early
    local waited = tonumber(out:match("wait\t([%d%.e%-]+)"))
    local slept = tonumber(out:match("sleep\t([%d%.e%-]+)"))
    assert.truthy(waited and waited >= 0.29 and waited < 60, out)   -- seconds, not milliseconds
    assert.truthy(slept and slept >= 0.29 and slept < 60, out)      -- 300 ms, not 300 s
    local _, notes = err:gsub("moonrl%.sleep%(ms%) counts milliseconds and is deprecated", "")
    assert.are.equal(1, notes, err)
    assert.truthy(err:find("s.lua:6:", 1, true), "the note names the caller: " .. err)
    local _, bads = out:gsub("bad\tmoonrl.wait: expected a number of seconds >= 0", "")
    assert.are.equal(4, bads, out)
    assert.truthy(out:find("to wait for a run, run:wait()", 1, true), out)
  end)
end)

describe("a script's run", function()
  it("announces its directory, and run:progress() tells the warm-up from training and the end", function()
    if not have_bin then return pending("no binary at " .. BIN) end
    local rc, out, err = run_script([[
local moonrl = require "moonrl"
local cfg = { name = "p", device = "cpu", threads = 1, seed = 2, total_steps = 16 * 8 * 2, warmup = { updates = 2 },
  env = { num_envs = 16, grid_size = 16, density_min = 4, density_max = 8 },
  policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 }, ppo = { rollout_steps = 8 },
  log = { console = true, tensorboard = false, checkpoint_interval = 0 } }
local seen = {}
cfg.hooks = { on_update = function(m, run) local p = run:progress() seen[#seen + 1] = p.phase .. " " .. p.update end }
local run = moonrl.train(cfg, { dir = "r" })
local p = run:progress()
print("start", p.phase, p.warmup_done, p.warmup_updates)
run:wait()
p = run:progress()
print("end", p.phase, p.update, p.warmup_done)
print("seen", table.concat(seen, ","))
local q = moonrl.train(cfg, { dir = "q", quiet = true })
q:wait()
]])
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find("start\twarm-up\t0\t2", 1, true), out)
    assert.truthy(out:find("end\tdone\t2\t2", 1, true), out)
    assert.truthy(out:find("seen\ttraining 1,training 2", 1, true), out)
    -- the warm-up is said before it runs, not only after
    local said, done = out:find("moonrl: warming up: 2 untimed updates", 1, true), out:find("warm-up update 1:", 1, true)
    assert.truthy(said and done and said < done, out)
    -- the run says where it writes, once; a quiet one does not
    local _, n = out:gsub("moonrl: run directory: r\n", "")
    assert.are.equal(1, n, out)
    assert.is_nil(out:find("run directory: q", 1, true), out)
  end)
end)

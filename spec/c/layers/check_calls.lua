-- check_calls.lua - the layer rule for calls (docs/architecture.md), which
-- the include check (check_layers.cmake) cannot see: a function declared in
-- moonrl.h is visible everywhere, so core could call a backend's function
-- directly. Here every object file of every layer is read with nm: each
-- symbol it needs (U) that another of the engine's objects defines is looked
-- up, and the call must go the way the layers allow:
--   shared     -> shared
--   interface  -> shared, interface        (core/interface: the memory manager)
--   core       -> shared, interface, core  (a backend only through its table; the
--                                           one exception: backend_select.c takes
--                                           the tables, mr_backend_cpu and _cuda)
--   cpu        -> shared, interface, cpu
--   kernels    -> shared, interface, kernels
--   host       -> shared, interface, core, host (src/host: the public API as core
--                                           implements it)
-- Run by ctest (test_layer_calls):
--   luajit check_calls.lua NM LAYER=OBJ|OBJ|... ... host=DIR
-- (host: the directory under which the moonrl executable's objects are).
-- Exits 1 listing every call that crosses the wrong way.

local nm = arg[1]
local layers, order = {}, {}
for i = 2, #arg do
  local name, list = arg[i]:match("^(%w+)=(.*)$")
  assert(name, "expected LAYER=OBJ|OBJ|..., got " .. arg[i])
  local objs = {}
  if name == "host" then
    local p = io.popen("find " .. string.format("%q", list) .. " -name '*.o' -path '*src/host/*' | sort")
    for line in p:lines() do objs[#objs + 1] = line end
    p:close()
  else
    for o in list:gmatch("[^|]+") do objs[#objs + 1] = o end
  end
  assert(#objs > 0, "no object files for layer " .. name)
  layers[name] = objs
  order[#order + 1] = name
end

local ALLOWED = {
  shared = { shared = true },
  interface = { shared = true, interface = true },
  core = { shared = true, interface = true, core = true },
  cpu = { shared = true, interface = true, cpu = true },
  kernels = { shared = true, interface = true, kernels = true },
  host = { shared = true, interface = true, core = true, host = true },
}
-- (caller's file, symbol) pairs that are the rule's own exceptions
local EXCEPTIONS = {
  ["backend_select.c.o mr_backend_cpu"] = true,
  ["backend_select.c.o mr_backend_cuda"] = true,
}

local function base(path) return path:match("([^/]+)$") end

local defined, needs = {}, {}
for _, layer in ipairs(order) do
  for _, obj in ipairs(layers[layer]) do
    local p = io.popen(string.format("%q -P %q 2>&1", nm, obj))
    for line in p:lines() do
      local sym, kind = line:match("^(%S+) (%a)")
      if sym then
        if kind == "U" then
          needs[#needs + 1] = { layer = layer, obj = obj, sym = sym }
        elseif kind:match("[TDBRC]") then
          defined[sym] = { layer = layer, obj = obj }
        end
      end
    end
    p:close()
  end
end

local bad, checked = {}, 0
for _, n in ipairs(needs) do
  local d = defined[n.sym]
  if d then
    checked = checked + 1
    if not ALLOWED[n.layer][d.layer] and not EXCEPTIONS[base(n.obj) .. " " .. n.sym] then
      bad[#bad + 1] = string.format("  %s (%s) calls %s, defined in %s (%s)", base(n.obj), n.layer, n.sym,
        base(d.obj), d.layer)
    end
  end
end
local count = 0
for _, l in ipairs(order) do count = count + #layers[l] end
print(string.format("check_calls: %d calls between the engine's %d object files checked", checked, count))
if #bad > 0 then
  print("calls across the layers the wrong way (docs/architecture.md: core reaches a backend only through " ..
    "its table; nothing calls up):")
  for _, b in ipairs(bad) do print(b) end
  os.exit(1)
end
print("check_calls: every call goes the way the layers allow")

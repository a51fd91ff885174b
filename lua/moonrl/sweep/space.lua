-- moonrl.sweep.space - what a sweep searches: distributions over config keys,
-- the points of a grid or random search, and the seeds of its trials.
--
-- Every random draw comes from a counter-based generator (splitmix64 over a
-- key made of the sweep seed, the trial's index, a purpose and the config
-- key's name), not from math.random: trial i of a sweep gets the same point
-- and the same seed whatever ran before it, in whatever order, in whatever
-- process - so a sweep is reproducible and a re-run resumes it point for point.
--
--   space.uniform(lo, hi)        a number in [lo, hi)
--   space.loguniform(lo, hi)     log10 is uniform in [log10 lo, log10 hi); 0 < lo < hi
--   space.randint(lo, hi)        an integer in lo .. hi (both included)
--   space.choice{ a, b, ... }    one of the values, equally likely (grid: each in turn)
--   space.grid{ a, b, ... }      every value, each combination of the grid keys once
--   space.is_dist(v) -> boolean
--   space.check(space_table) -> keys (sorted) | nil, err
--   space.grid_size(space, method) -> the number of combinations
--   space.point(space, method, seed, index) -> { key = value, ... }
--       method "grid": grid and choice keys are enumerated (the last key in
--       sorted order varies fastest); "random": only grid keys are, choice
--       keys are drawn. Trial i takes combination ((i - 1) mod size) + 1, so
--       i = 1 .. size covers each combination once. The other keys are drawn.
--       A key whose value is not a distribution is that constant.
--   space.trial_seed(seed, index) -> the config seed of trial `index` (0 .. 2^31-1)
--   space.rng(seed, index, purpose) -> function() -> uniform [0, 1)
--   space.draw(dist, u) -> the value of dist at u, uniform in [0, 1) (what a random point draws)
--   space.describe(dist) -> "loguniform(0.0001, 0.001)", ...
--   space.point_of(space, cfg) -> { key = value, ... }: a resolved config's own
--       values at the space's keys (a schedule gives its starting value, `from`,
--       the constant a sweep would put there): the point to give tpe.points
--       so that a sweep tries the experiment's settings first. A key the config
--       lacks is left out.

local ffi = require("ffi")
local bit = require("bit")
local util = require("moonrl.util")

local space = {}

-- ------------------------------------------------------------- generator

local U64 = ffi.typeof("uint64_t")
local GOLDEN = 0x9E3779B97F4A7C15ULL

local function mix(z)
  z = bit.bxor(z, bit.rshift(z, 30)) * 0xBF58476D1CE4E5B9ULL
  z = bit.bxor(z, bit.rshift(z, 27)) * 0x94D049BB133111EBULL
  return bit.bxor(z, bit.rshift(z, 31))
end

-- FNV-1a of a string, as a uint64 (names the purpose and the key in the counter)
local function hash_string(s)
  local h = 0xcbf29ce484222325ULL
  for i = 1, #s do
    h = bit.bxor(h, U64(s:byte(i))) * 0x100000001b3ULL
  end
  return h
end

function space.rng(seed, index, purpose)
  local state = mix(U64(seed) * GOLDEN + hash_string(tostring(purpose or "")))
  state = mix(bit.bxor(state, U64(index) * 0xD1B54A32D192ED03ULL))
  return function()
    state = state + GOLDEN
    return tonumber(bit.rshift(mix(state), 11)) / 9007199254740992   -- 53 bits / 2^53
  end
end

function space.trial_seed(seed, index)
  return math.floor(space.rng(seed, index, "seed")() * 2147483648)
end

-- ---------------------------------------------------------- distributions

local Dist = {}
Dist.__index = Dist

local finite = require("moonrl.number").finite

local function dist(t) return setmetatable(t, Dist) end

function space.uniform(lo, hi)
  if not finite(lo) or not finite(hi) or not (lo < hi) then
    error("moonrl.uniform(lo, hi): expected numbers lo < hi, got " .. util.fmt_value(lo) .. ", " .. util.fmt_value(hi), 2)
  end
  return dist({ kind = "uniform", lo = lo, hi = hi })
end

function space.loguniform(lo, hi)
  if not finite(lo) or not finite(hi) or not (lo > 0 and lo < hi) then
    error("moonrl.loguniform(lo, hi): expected numbers 0 < lo < hi, got " .. util.fmt_value(lo) .. ", " ..
      util.fmt_value(hi), 2)
  end
  return dist({ kind = "loguniform", lo = lo, hi = hi })
end

function space.randint(lo, hi)
  if not finite(lo) or not finite(hi) or lo ~= math.floor(lo) or hi ~= math.floor(hi) or lo > hi then
    error("moonrl.randint(lo, hi): expected integers lo <= hi, got " .. util.fmt_value(lo) .. ", " .. util.fmt_value(hi), 2)
  end
  return dist({ kind = "randint", lo = lo, hi = hi })
end

local function values_of(name, list)
  if type(list) ~= "table" or not util.is_list(list) or #list == 0 then
    error("moonrl." .. name .. "{...}: expected a non-empty list of values, got " .. util.fmt_value(list), 3)
  end
  local values = {}
  for i, v in ipairs(list) do values[i] = v end
  return values
end

function space.choice(list)
  return dist({ kind = "choice", values = values_of("choice", list) })
end

function space.grid(list)
  return dist({ kind = "grid", values = values_of("grid", list) })
end

function space.is_dist(v) return getmetatable(v) == Dist end

local function fmtv(v)
  if type(v) == "number" then return util.fmt_number(v) end
  return util.fmt_value(v)
end

function space.describe(d)
  if not space.is_dist(d) then return fmtv(d) end
  if d.values then
    local parts = {}
    for i, v in ipairs(d.values) do parts[i] = fmtv(v) end
    return d.kind .. "{ " .. table.concat(parts, ", ") .. " }"
  end
  return d.kind .. "(" .. fmtv(d.lo) .. ", " .. fmtv(d.hi) .. ")"
end

-- ----------------------------------------------------------------- points

function space.check(sp)
  if type(sp) ~= "table" then return nil, "space: expected a table { [\"ppo.lr\"] = moonrl.loguniform(...), ... }" end
  local keys = {}
  for k in pairs(sp) do
    if type(k) ~= "string" then return nil, "space: keys are dotted config keys (\"ppo.lr\"), got " .. util.describe(k) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return keys
end

-- keys enumerated by `method`, in sorted order
local function enumerated(sp, method)
  local out = {}
  for _, k in ipairs((space.check(sp))) do
    local d = sp[k]
    if space.is_dist(d) and (d.kind == "grid" or (method == "grid" and d.kind == "choice")) then
      out[#out + 1] = k
    end
  end
  return out
end

function space.grid_size(sp, method)
  local n = 1
  for _, k in ipairs(enumerated(sp, method)) do n = n * #sp[k].values end
  return n
end

function space.draw(d, u)
  if d.kind == "uniform" then return d.lo + (d.hi - d.lo) * u
  elseif d.kind == "loguniform" then
    return 10 ^ (math.log10(d.lo) + (math.log10(d.hi) - math.log10(d.lo)) * u)
  elseif d.kind == "randint" then return d.lo + math.floor(u * (d.hi - d.lo + 1))
  end
  return util.deepcopy(d.values[1 + math.floor(u * #d.values)])   -- choice (and grid, when drawn)
end

function space.point(sp, method, seed, index)
  local point = {}
  local enum = enumerated(sp, method)
  local set = {}
  -- mixed radix, the last key fastest
  local combo = (index - 1) % space.grid_size(sp, method)
  for j = #enum, 1, -1 do
    local k = enum[j]
    local values = sp[k].values
    point[k] = util.deepcopy(values[combo % #values + 1])
    combo = math.floor(combo / #values)
    set[k] = true
  end
  for _, k in ipairs((space.check(sp))) do
    if not set[k] then
      local d = sp[k]
      if space.is_dist(d) then
        point[k] = space.draw(d, space.rng(seed, index, "space " .. k)())
      else
        point[k] = util.deepcopy(d)
      end
    end
  end
  return point
end

function space.point_of(sp, cfg)
  local config = require("moonrl.config")
  local out = {}
  for k in pairs(sp) do
    local v = config.get(cfg, k)
    if type(v) == "table" and v.kind and v.from ~= nil then v = v.from end
    if v ~= nil and type(v) ~= "table" then out[k] = v end
  end
  return out
end

return space

-- moonrl.policy - a checkpoint's policy, acting on observations you give it:
-- the engine's own inference (mr_trainer_infer, on the cpu, fp32), for
-- checking an export or your own preprocessing against it (`moonrl act`,
-- moonrl.policy(ckpt):act(obs)).
--
-- Public
--   policy.load(path) -> p | nil, err      path: a checkpoint (.mrck) or a run directory
--                                          (its newest valid checkpoint)
--   p.path, p.update, p.env, p.mode        what was loaded
--   p.spaces                               the environment's spaces (engine.env_spaces)
--   p.observation                          {kind = "codes", view = V} (a V x V grid of cell
--                                          codes, uint8) | {kind = "vector", size = N} (floats)
--   p.actions                              logits per observation (a box of d: 2d, its means then
--                                          its log-stds)
--   p.squash                               a box's mapping to its bounds: "clip" | "tanh"
--   p:act(obs) -> {n, logits = {{...}, ...}, value = {...}, probs = {{...}} | nil,
--                  action = {...} (argmax; a box: the means, mapped to the box)} | nil, err
--       obs: an array read by moonrl.formats.npy (uint8 codes (n, V, V) or (V, V) or
--       (n, V*V); floats (n, N) or (N)) or a Lua list of one observation's numbers
--   p:close()

local ffi = require("ffi")   -- the observations' and outputs' buffers (uint8_t, float): no engine type

local policy = {}
local P = {}
P.__index = P

function policy.load(path)
  if type(path) ~= "string" then return nil, "moonrl.policy: expected the path of a checkpoint or run directory" end
  local uv, rs = require("luv"), require("moonrl.run.resume")
  local st = uv.fs_stat(path)
  if not st then return nil, "checkpoint or run directory '" .. path .. "' not found" end
  local ck = path
  if st.type == "directory" then
    local newest, ne = rs.newest(path)
    if not newest then return nil, ne end
    ck = newest.path
  end
  local engine = require("moonrl.engine")
  local t, stored, update = engine.checkpoint_trainer(ck)
  if not t then return nil, stored end
  local env = engine.env_name(tonumber(stored.env.name))
  local spaces = assert(engine.env_spaces(env, engine.env_sizes(stored.env),
    stored.env.program ~= nil and stored.env.program or nil))   -- a Lua environment: what its checkpoint recorded
  local vector, ob = tonumber(stored.policy.obs_vector), spaces.observation
  local view = ob.kind ~= "vector" and ob.shape[2] or nil
  local self = setmetatable({
    path = ck, update = update, env = env, mode = engine.mode_name(tonumber(stored.env.mode)),
    spaces = spaces, actions = tonumber(stored.policy.num_actions), box = tonumber(stored.policy.act_box) > 0,
    squash = tonumber(stored.policy.box_squash) == 1 and "tanh" or "clip",
    observation = vector > 0 and { kind = "vector", size = vector } or
      ob.kind == "image" and { kind = "image", channels = ob.shape[1], view = view, size = ob.shape[1] * view * view } or
      { kind = "codes", view = view },
    trainer = t, config = stored,
  }, P)
  return self
end

local CTYPES = { u1 = "const uint8_t *", i4 = "const int32_t *", i8 = "const int64_t *", f4 = "const float *",
  f8 = "const double *" }

local function shape_text(shape)
  local d = {}
  for i, n in ipairs(shape) do d[i] = tostring(n) end
  return "(" .. table.concat(d, ", ") .. ")"
end

-- obs as the engine reads it: a buffer of n observations, or nil, err.
function P:_input(obs)
  if type(obs) == "table" and obs.data == nil then   -- a Lua list: one observation
    local list = obs
    obs = { dtype = self.observation.kind == "codes" and "i8" or "f8", shape = { #list }, count = #list, list = list }
  end
  if type(obs) ~= "table" or not obs.shape then
    return nil, "expected an observation array (moonrl.formats.npy) or a list of numbers, got " .. type(obs)
  end
  local o = self.observation
  local per = o.kind == "codes" and o.view * o.view or o.size
  local want = o.kind == "codes" and string.format("uint8 cell codes of shape (n, %d, %d), (%d, %d) or (n, %d)",
    o.view, o.view, o.view, o.view, per) or
    o.kind == "image" and string.format("float32 images of shape (n, %d, %d, %d), (%d, %d, %d) or (n, %d), " ..
      "channels first", o.channels, o.view, o.view, o.channels, o.view, o.view, per) or
    string.format("float32 of shape (n, %d) or (%d)", per, per)
  local s = obs.shape
  local last = 1
  if o.kind == "codes" and #s >= 2 and s[#s] == o.view and s[#s - 1] == o.view then last = 2 end
  if o.kind == "image" and #s >= 3 and s[#s] == o.view and s[#s - 1] == o.view and s[#s - 2] == o.channels then
    last = 3
  end
  local row = 1
  for k = #s - last + 1, #s do row = row * s[k] end
  local fits = #s >= 1 and row == per and #s - last <= 1 and obs.count >= per
  if not fits then
    return nil, string.format("the observation has shape %s: %s (env %s) takes %s", shape_text(s), self.path,
      self.env, want)
  end
  local n = obs.count / per
  local src = obs.list or ffi.cast(CTYPES[obs.dtype], obs.data)
  local base = obs.list and 1 or 0
  local buf
  if o.kind == "codes" then
    if obs.dtype == "f4" or obs.dtype == "f8" then
      return nil, "the observation holds floats: " .. self.env .. "'s observations are cell codes (" .. want .. ")"
    end
    buf = ffi.new("uint8_t[?]", n * per)
    for i = 0, n * per - 1 do
      local v = tonumber(src[i + base])
      if v ~= math.floor(v) or v < 0 or v > 255 then
        return nil, string.format("observation value %s at index %d is no cell code (0 .. 255)", tostring(v), i)
      end
      buf[i] = v
    end
  else
    buf = ffi.new("float[?]", n * per)
    for i = 0, n * per - 1 do
      local v = tonumber(src[i + base])
      if v ~= v or v == math.huge or v == -math.huge then
        return nil, string.format("observation value %s at index %d is not finite", tostring(v), i)
      end
      buf[i] = v
    end
  end
  return buf, n
end

function P:act(obs)
  if not self.trainer then return nil, "moonrl.policy: closed" end
  local buf, n = self:_input(obs)
  if not buf then return nil, n end
  local A = self.actions
  local logits, value = ffi.new("float[?]", n * A), ffi.new("float[?]", n)
  local ok, err = self.trainer:infer(ffi.cast("const uint8_t *", buf), n, logits, value)
  if not ok then return nil, err end
  local out = { n = n, logits = {}, value = {}, action = {}, probs = not self.box and {} or nil }
  for i = 0, n - 1 do
    local row, best = {}, 1
    for a = 1, A do
      row[a] = logits[i * A + a - 1]
      if row[a] > row[best] then best = a end
    end
    out.logits[i + 1], out.value[i + 1] = row, value[i]
    if self.box then   -- the means (the row's first d; then the log-stds), mapped to the box as a sample is
      local act, lo, hi = {}, self.spaces.action.low, self.spaces.action.high
      for a = 1, #lo do
        local m = row[a]
        if self.squash == "tanh" then m = lo[a] + (hi[a] - lo[a]) * ((math.tanh(m) + 1) * 0.5) end
        act[a] = math.min(math.max(m, lo[a]), hi[a])
      end
      out.action[i + 1] = act
    else
      local z, p = 0, {}
      for a = 1, A do p[a] = math.exp(row[a] - row[best]); z = z + p[a] end
      for a = 1, A do p[a] = p[a] / z end
      out.probs[i + 1], out.action[i + 1] = p, best - 1
    end
  end
  out.raw_logits, out.raw_value = logits, value   -- float32, as the engine wrote them
  return out
end

function P:close()
  if self.trainer then
    self.trainer:free()
    self.trainer = nil
  end
end

return policy

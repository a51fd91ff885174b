-- moonrl.resources - the files moonrl ships beside its Lua library: the
-- hardware profiles, optimisation levels and default experiment under
-- configs/ (and, for listing, the command modules under lua/moonrl/cli/commands/).
--
-- Files are named by their path relative to the source tree's root
-- ("configs/hardware/ci.lua"). Where they come from:
--   - the copy embedded in the binary, when the host preloaded a module
--     "moonrl.embedded" (package.preload["moonrl.embedded"]) returning
--       { get = function(relpath) -> text | nil,
--         list = function(prefix) -> sorted relpaths starting with prefix,
--         source_dir = a directory | nil }
--     unless its source_dir is set: the user asked to load from a source
--     tree on disk, which is then read instead;
--   - otherwise (no such module: busted, a host without embedded files) the
--     source tree on disk: the host's home (core.home) in the moonrl
--     binary, else the working directory (busted, run from the tree's root).
-- A user's own files (an experiment, a --hardware path ending in .lua) are
-- not resources: they are read from disk where the user said.
--
--   resources.read(relpath) -> text, origin | nil, err
--       origin names the file in messages and chunk names: the path on disk,
--       or relpath for an embedded copy ("@configs/hardware/ci.lua")
--   resources.exists(relpath) -> true | false
--   resources.list(prefix) -> sorted relpaths of the files under prefix
--   resources.root() -> the source tree's directory on disk ("" = the working
--                       directory; it need not exist when files are embedded)
--   resources.embedded() -> the host's table when files come from it, else nil

local resources = {}

local function host_table()
  if package.preload["moonrl.embedded"] == nil then return nil end
  local ok, t = pcall(require, "moonrl.embedded")
  if ok and type(t) == "table" then return t end
  return nil
end

function resources.embedded()
  local t = host_table()
  if t and t.source_dir == nil then return t end
  return nil
end

-- With a trailing "/" unless it is "" (the working directory).
local function as_root(dir)
  if dir == "" or dir:sub(-1) == "/" then return dir end
  return dir .. "/"
end

function resources.root()
  local t = host_table()
  if t and type(t.source_dir) == "string" then return as_root(t.source_dir) end
  -- the host's module when there is one (not under busted)
  local has, core = pcall(require, "moonrl.core")
  if has and type(core) == "table" and type(core.home) == "function" then return as_root(core.home()) end
  return ""
end

local function checked(relpath, fname)
  if type(relpath) ~= "string" or relpath == "" or relpath:sub(1, 1) == "/" or relpath:find("%.%.") then
    error("resources." .. fname .. ": expected a path relative to the source tree such as " ..
      "\"configs/default.lua\", got " .. (type(relpath) == "string" and ("\"" .. relpath .. "\"") or type(relpath)), 3)
  end
  return relpath
end

function resources.read(relpath)
  checked(relpath, "read")
  local emb = resources.embedded()
  if emb then
    local text = emb.get(relpath)
    if type(text) ~= "string" then return nil, "no file " .. relpath .. " in this moonrl binary" end
    return text, relpath
  end
  local path = resources.root() .. relpath
  local f = io.open(path, "rb")
  if not f then return nil, "no file " .. path end
  local text = f:read("*a")
  f:close()
  if not text then return nil, "cannot read " .. path end
  return text, path
end

function resources.exists(relpath)
  checked(relpath, "exists")
  local emb = resources.embedded()
  if emb then return type(emb.get(relpath)) == "string" end
  local f = io.open(resources.root() .. relpath, "rb")
  if not f then return false end
  f:close()
  return true
end

-- Every file below dir (relpaths), depth first; luv is loaded only here.
local function scan(root, dir, out)
  local ok, uv = pcall(require, "luv")
  if not ok then return out end
  local req = uv.fs_scandir(root .. dir)
  while req do
    local name, kind = uv.fs_scandir_next(req)
    if not name then break end
    local rel = dir .. (dir:sub(-1) == "/" and "" or "/") .. name
    if kind == "directory" then scan(root, rel, out) else out[#out + 1] = rel end
  end
  return out
end

function resources.list(prefix)
  if type(prefix) ~= "string" then error("resources.list: expected a path prefix, got " .. type(prefix), 2) end
  local emb = resources.embedded()
  local out
  if emb then
    out = {}
    for _, rel in ipairs(emb.list(prefix) or {}) do out[#out + 1] = rel end
  else
    -- The folder the prefix names (or ends in), filtered by the whole prefix.
    local dir = prefix:match("^(.*)/[^/]*$") or ""
    out = {}
    for _, rel in ipairs(scan(resources.root(), dir == "" and "." or dir, {})) do
      rel = rel:gsub("^%./", "")
      if rel:sub(1, #prefix) == prefix then out[#out + 1] = rel end
    end
  end
  table.sort(out)
  return out
end

return resources

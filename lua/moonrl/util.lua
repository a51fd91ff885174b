-- moonrl.util - small pure helpers shared by the config modules and sinks.
--
-- What it is: value formatting for messages (so every error quotes a value the
-- same way), shortest round-trip number printing, edit distance and
-- "did you mean" suggestions, deep copy, list detection. What it is not: a
-- general utility belt; only what two or more moonrl modules need lives here.
--
-- Public functions
--   util.fmt_number(x) -> string        shortest text that reads back to x
--   util.fmt_value(v [, max_len]) -> string   a value as a message quotes it
--   util.describe(v) -> string          "string \"fast\"", "number 1.5", ...
--   util.is_list(t) -> boolean          1..n keys only (an empty table counts)
--   util.deepcopy(v) -> copy            tables copied, functions shared
--   util.deep_equal(a, b) -> boolean
--   util.edit_distance(a, b) -> integer (swaps of neighbours count 1)
--   util.closest(word, candidates [, max]) -> best | nil
--   util.quote_list(strings) -> '"a", "b"'
--   util.shell_word(s) -> s, or 's' quoted for a POSIX shell where it needs it (a command to show)
--   util.sorted_keys(t) -> list         strings first (sorted), then the rest
--   util.is_bytecode(text) -> boolean   precompiled Lua (it starts with "\27")
--   util.load_text(text, chunkname, origin[, env]) -> chunk | nil, err
--                                       Lua source only: bytecode is refused
--   util.require_text_only()            require's Lua-file searcher refuses bytecode too
--   util.engine_lines(describe, first, indent [, width]) -> list   the engine's one-line
--                                       description as a block: `first` .. its first part,
--                                       then `indent` .. each further part, every line
--                                       under `width` (default 100) columns, nothing dropped
--   util.refuse(msg [, level [, kind]]) error(msg, level) for a refusal of the user's input (an
--                                       occupied directory, a bad key): reported as its message,
--                                       without a stack traceback, when nothing catches it;
--                                       kind "input": bad input, exit 2 (util.is_bad_input)
--   util.is_refusal(err) -> boolean     err was raised by util.refuse
--   util.is_bad_input(err) -> boolean   ... with kind "input"
--   util.read_file(path), util.write_file(path, text), util.mkdir_p(path), util.rm_rf(path)
--   util.write_file_atomic(path, text)  through a temporary file and a rename
--   util.file_kind(stat[, noun]) -> words  "is a directory[, not NOUN]", "is a FIFO (named pipe), not a
--                                       regular file", ...
--   util.check_output(path, opts) -> true | nil, why   may a command write the file a user named?
--                                       a new path or a regular file (opts.replace), never a
--                                       device, FIFO, directory or one of opts.inputs (by inode)
--   util.write_output(path, text, opts) the same check, then an exclusive temporary file and a rename
--   util.rename_over(tmp, path)         a written temporary file renamed over path (removed on failure)
--   util.md_table(rows, right) -> text  a markdown table, columns padded to one width; rows of
--                                       strings, rows[1] the header; right: the columns aligned
--                                       right (header, rule "--:" and cells), a set {[c] = true} or
--                                       a number k: every column after the first k; default 1

local util = {}

local floor, huge = math.floor, math.huge

function util.fmt_number(x)
  if x ~= x then return "nan" end
  if x == huge then return "inf" end
  if x == -huge then return "-inf" end
  if x == floor(x) and x > -1e15 and x < 1e15 then
    return string.format("%d", x)
  end
  for p = 1, 17 do
    local s = string.format("%." .. p .. "g", x)
    if tonumber(s) == x then return s end
  end
  return string.format("%.17g", x)
end

function util.is_list(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  for i = 1, n do
    if t[i] == nil then return false end
  end
  return true
end

function util.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta == "string" end
    if ta == "string" or ta == "number" then return a < b end
    return tostring(a) < tostring(b)
  end)
  return keys
end

local function fmt(v, depth)
  local tv = type(v)
  if tv == "string" then
    return string.format("%q", v):gsub("\\\n", "\\n")
  elseif tv == "number" then
    return util.fmt_number(v)
  elseif tv == "table" then
    if depth > 2 then return "{...}" end
    local parts = {}
    if util.is_list(v) then
      for i = 1, #v do parts[i] = fmt(v[i], depth + 1) end
    else
      for _, k in ipairs(util.sorted_keys(v)) do
        local ks = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k
                   or ("[" .. fmt(k, depth + 1) .. "]")
        parts[#parts + 1] = ks .. " = " .. fmt(v[k], depth + 1)
      end
    end
    return "{" .. table.concat(parts, ", ") .. "}"
  elseif tv == "function" then
    return "a function"
  elseif tv == "nil" then
    return "nil"
  end
  return tostring(v)
end

-- A value the way messages quote it: strings in double quotes, numbers in
-- their shortest form, tables in Lua constructor syntax (cut at max_len).
function util.fmt_value(v, max_len)
  local s = fmt(v, 0)
  max_len = max_len or 80
  if #s > max_len then s = s:sub(1, max_len - 3) .. "..." end
  return s
end

-- "string \"fast\"", "number 1.5", "a function", "nil".
function util.describe(v)
  local tv = type(v)
  if tv == "function" or tv == "nil" then return util.fmt_value(v) end
  return tv .. " " .. util.fmt_value(v)
end

function util.deepcopy(v, seen)
  if type(v) ~= "table" then return v end
  seen = seen or {}
  if seen[v] then return seen[v] end
  local c = {}
  seen[v] = c
  for k, x in pairs(v) do c[util.deepcopy(k, seen)] = util.deepcopy(x, seen) end
  return c
end

function util.deep_equal(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then
    -- NaN equals NaN for our purposes (a config round trip keeps it).
    return type(a) == "number" and type(b) == "number" and a ~= a and b ~= b
  end
  for k, v in pairs(a) do
    if not util.deep_equal(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

-- Edit distance counting insertions, deletions, substitutions and swaps of
-- two neighbouring characters ("pop" -> "ppo" is 1), the usual typos.
function util.edit_distance(a, b)
  local la, lb = #a, #b
  if la == 0 then return lb end
  if lb == 0 then return la end
  local d = {}
  for i = 0, la do d[i] = { [0] = i } end
  for j = 0, lb do d[0][j] = j end
  for i = 1, la do
    local ca, row, prev = a:byte(i), d[i], d[i - 1]
    for j = 1, lb do
      local cb = b:byte(j)
      local cost = (ca == cb) and 0 or 1
      local v = prev[j] + 1
      if row[j - 1] + 1 < v then v = row[j - 1] + 1 end
      if prev[j - 1] + cost < v then v = prev[j - 1] + cost end
      if i > 1 and j > 1 and ca == b:byte(j - 1) and a:byte(i - 1) == cb and d[i - 2][j - 2] + 1 < v then
        v = d[i - 2][j - 2] + 1
      end
      row[j] = v
    end
  end
  return d[la][lb]
end

-- The candidate nearest to `word` by edit distance, if it is near enough:
-- at most `max` edits (default: a third of the word, at least 1, at most 3).
function util.closest(word, candidates, max)
  word = tostring(word)
  max = max or math.min(3, math.max(1, floor(#word / 3)))
  local best, best_d
  local lword = word:lower()
  for _, c in ipairs(candidates) do
    c = tostring(c)
    -- the distance is at least the difference in length: a long word (a
    -- 64 KiB key) is not compared letter by letter with short names
    if math.abs(#lword - #c) <= max then
      local d = util.edit_distance(lword, c:lower())
      if d <= max and (best_d == nil or d < best_d) then best, best_d = c, d end
    end
  end
  return best, best_d
end

function util.shell_word(s)
  s = tostring(s)
  if s:match("^[%w%._/:=@%%,+-]+$") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

function util.quote_list(list)
  local parts = {}
  for i, s in ipairs(list) do parts[i] = util.fmt_value(s) end
  return table.concat(parts, ", ")
end

-- Precompiled Lua: LuaJIT's loaders take bytecode (its first byte is ESC,
-- "\27LJ") as readily as source, and do not verify it, so a crafted chunk
-- can crash the process. Looked for where LuaJIT looks: after a UTF-8 BOM
-- and a first "#" line.
function util.is_bytecode(text)
  local i = 1
  if text:sub(1, 3) == "\239\187\191" then i = 4 end
  if text:byte(i) == 35 then
    local nl = text:find("\n", i, true)
    i = nl and nl + 1 or #text + 1
  end
  return text:byte(i) == 27
end

util.BYTECODE_REFUSED = "precompiled Lua bytecode is not accepted; give the source text"

-- Every chunk moonrl loads from a user (configs, live tweaks, scripts) goes
-- through here: text only (mode "t" as well, in case the check above misses
-- a form LuaJIT knows). origin names the file in the refusal.
function util.load_text(text, chunkname, origin, env)
  if util.is_bytecode(text) then return nil, origin .. ": " .. util.BYTECODE_REFUSED end
  local chunk, err = load(text, chunkname, "t")
  if not chunk then return nil, err end
  if env then setfenv(chunk, env) end
  return chunk
end

-- package.loaders' Lua-file searcher (LuaJIT's own takes bytecode) replaced by
-- one that loads source text only, so a module a config or script requires
-- is held to the same rule as the config itself. The host calls it once
-- (moonrl.cli); loaders = {preload, moonrl's, the Lua files', C, C root}.
function util.require_text_only()
  local loaders = package.loaders
  local i = #loaders - 2   -- the Lua files' searcher: the third from the end
  loaders[i] = function(name)
    local path, err = package.searchpath(name, package.path)
    if not path then return err end
    local text = util.read_file(path)
    if not text then return "\n\tcannot read '" .. path .. "'" end
    local chunk, lerr = util.load_text(text, "@" .. path, path)
    if not chunk then error("error loading module '" .. name .. "' from file '" .. path .. "':\n\t" .. lerr, 0) end
    return chunk
  end
end

-- Refusals are plain strings (a script's pcall sees what error() would give it);
-- the set remembers which messages were refusals, for the reporter.
local refusals, n_refusals = {}, 0

-- kind "input": the refusal is of bad input (a config, a file named in it):
-- the CLI exits 2 for those (util.is_bad_input), 1 for other refusals.
function util.refuse(msg, level, kind)
  level = level == nil and 1 or level
  local where = ""
  if level > 0 then
    local info = debug.getinfo(level + 1, "Sl")
    if info and info.currentline and info.currentline > 0 then where = info.short_src .. ":" .. info.currentline .. ": " end
  end
  local full = where .. tostring(msg)
  if n_refusals >= 1000 then refusals, n_refusals = {}, 0 end
  if not refusals[full] then n_refusals = n_refusals + 1 end
  refusals[full] = kind or refusals[full] or true
  error(full, 0)
end

function util.is_refusal(err)
  return type(err) == "string" and refusals[err] ~= nil
end

function util.is_bad_input(err)
  return type(err) == "string" and refusals[err] == "input"
end

-- A whole file's bytes, or nil when it cannot be opened.
function util.read_file(path)
  local fh = io.open(path, "rb")
  if not fh then return nil end
  local text = fh:read("*a")
  fh:close()
  return text
end

-- What a path that is not a regular file is, in words, from uv.fs_stat's
-- type ("is a directory", "is a FIFO (named pipe), not a regular file", ...);
-- with `noun` ("a checkpoint file"), a directory "is a directory, not " .. noun.
local KINDS = {
  directory = "is a directory", fifo = "is a FIFO (named pipe), not a regular file",
  socket = "is a socket, not a regular file", char = "is a character device, not a regular file",
  block = "is a block device, not a regular file", link = "is a symbolic link, not a regular file",
}
function util.file_kind(st, noun)
  if noun and st and st.type == "directory" then return "is a directory, not " .. noun end
  return KINDS[st and st.type] or "is not a regular file"
end

-- May a file be written at path? The one check of every command that
-- writes a file the user names (export --out, bench --out, doctor --output):
-- a new path, or a regular file when opts.replace (else it is kept: "exists"),
-- never a directory, device, FIFO or socket (whatever a link points at),
-- and never one of opts.inputs (paths this command reads), compared by
-- device and inode, so another name or a link to the input is refused too.
-- opts.flag: the option that replaces ("--force"). true, or nil and a message.
function util.check_output(path, opts)
  opts = opts or {}
  local uv = require("luv")
  local st = uv.fs_stat(path)   -- follows links: what a write would reach
  if not st then
    local lst = uv.fs_lstat(path)
    if lst and lst.type == "link" then   -- a link to nothing: writing would create its target
      return nil, path .. " is a symbolic link to a missing file; accepted: a new path, or a regular file"
    end
    return true
  end
  if st.type ~= "file" then
    return nil, path .. " " .. util.file_kind(st) .. "; accepted: a new path, or a regular file"
  end
  for _, input in ipairs(opts.inputs or {}) do
    local ist = uv.fs_stat(input.path)
    if ist and ist.dev == st.dev and ist.ino == st.ino then
      return nil, path .. " is " .. input.what .. " itself; never overwritten: name another file"
    end
  end
  if not opts.replace then
    return nil, path .. " exists: kept (" .. (opts.flag or "--force") .. " replaces it" ..
      (opts.other and (", " .. opts.other) or "") .. ")"
  end
  return true
end

-- Writes text at path as a command's output, after util.check_output(path,
-- opts): through a temporary file beside it, created exclusively (O_EXCL: a
-- link or FIFO planted at that name is not followed or waited on), then a
-- rename over path. true, or nil and a message.
function util.write_output(path, text, opts)
  local ok, err = util.check_output(path, opts)
  if not ok then return nil, err end
  local uv = require("luv")
  local tmp = path .. "." .. tostring(uv.os_getpid()) .. ".tmp"
  local fd, oerr = uv.fs_open(tmp, "wx", tonumber("644", 8))
  if not fd then return nil, "cannot write " .. tmp .. ": " .. tostring(oerr) end
  local done, werr = 0, nil
  while done < #text do
    local n, e = uv.fs_write(fd, done == 0 and text or text:sub(done + 1), -1)
    if not n or n <= 0 then werr = e or "no progress" break end
    done = done + n
  end
  local closed, cerr = uv.fs_close(fd)
  if werr or not closed then
    os.remove(tmp)
    return nil, "writing " .. path .. " failed: " .. tostring(werr or cerr)
  end
  return util.rename_over(tmp, path)
end

-- A written temporary file renamed over path (the temporary removed when the
-- rename fails): true, or nil and a message.
function util.rename_over(tmp, path)
  local renamed, rerr = os.rename(tmp, path)
  if not renamed then
    os.remove(tmp)
    return nil, "cannot rename " .. tmp .. " to " .. path .. ": " .. tostring(rerr)
  end
  return true
end

-- Writes text to path (replacing it); true, or nil and a message (a full
-- disk too: the write's and the close's answers are checked).
function util.write_file(path, text)
  local f, err = io.open(path, "wb")
  if not f then return nil, "cannot write " .. path .. ": " .. tostring(err) end
  local ok, werr = f:write(text)
  local cok, cerr = f:close()
  if not (ok and cok) then return nil, "cannot write " .. path .. ": " .. tostring(werr or cerr) end
  return true
end

-- Writes text to path through path .. "." .. pid .. ".tmp" and a rename, so
-- a reader (another process too) sees the old file or the new one, never
-- half of one; true, or nil and a message. (The ".tmp" ending is what the
-- readers of run directories skip: run/dir.lua's TensorBoard files.)
function util.write_file_atomic(path, text)
  local tmp = path .. "." .. tostring(require("luv").os_getpid()) .. ".tmp"
  local ok, err = util.write_file(tmp, text)
  if not ok then
    os.remove(tmp)
    return nil, err
  end
  return util.rename_over(tmp, path)
end

-- mkdir -p: true, or nil and a message naming the part that could not be made.
function util.mkdir_p(path)
  local uv = require("luv")
  local acc = path:sub(1, 1) == "/" and "/" or ""
  for part in path:gmatch("[^/]+") do
    acc = acc .. part
    local st = uv.fs_stat(acc)
    if not st then
      local ok, err = uv.fs_mkdir(acc, tonumber("755", 8))
      if not ok and not uv.fs_stat(acc) then return nil, "cannot create " .. acc .. ": " .. tostring(err) end
    elseif st.type ~= "directory" then
      return nil, "cannot create " .. path .. ": " .. acc .. " is not a directory"
    end
    acc = acc .. "/"
  end
  return true
end

-- rm -rf: a file, or a directory and everything under it; links are removed,
-- never followed. Nothing there is fine.
function util.rm_rf(path)
  local uv = require("luv")
  local st = uv.fs_lstat(path)
  if not st then return end
  if st.type == "directory" then
    local req = uv.fs_scandir(path)
    while req do
      local name = uv.fs_scandir_next(req)
      if not name then break end
      util.rm_rf(path .. "/" .. name)
    end
    uv.fs_rmdir(path)
  else
    uv.fs_unlink(path)
  end
end

-- s with every byte that is not part of valid UTF-8 written as \xNN (and,
-- with controls = true, the ASCII control characters and DEL as well, so a
-- message can go to a terminal as it is). A backslash stays as it is.
-- For messages that echo what a client sent.
function util.escape_bytes(s, controls)
  s = tostring(s)
  local pat = controls and "[%z\1-\31\127-\255]" or "[\128-\255]"
  if not s:find(pat) then return s end
  local out, i, n = {}, 1, #s
  local byte = string.byte
  local function cont(k) local b = byte(s, k) return b and b >= 0x80 and b <= 0xBF end
  while i <= n do
    local b = byte(s, i)
    local len = 0
    if b < 0x80 then
      len = (controls and (b < 0x20 or b == 0x7F)) and 0 or 1
    elseif b >= 0xC2 and b <= 0xDF then
      len = cont(i + 1) and 2 or 0
    elseif b >= 0xE0 and b <= 0xEF then
      local b2 = byte(s, i + 1)
      local lo, hi = 0x80, 0xBF
      if b == 0xE0 then lo = 0xA0 elseif b == 0xED then hi = 0x9F end
      len = (b2 and b2 >= lo and b2 <= hi and cont(i + 2)) and 3 or 0
    elseif b >= 0xF0 and b <= 0xF4 then
      local b2 = byte(s, i + 1)
      local lo, hi = 0x80, 0xBF
      if b == 0xF0 then lo = 0x90 elseif b == 0xF4 then hi = 0x8F end
      len = (b2 and b2 >= lo and b2 <= hi and cont(i + 2) and cont(i + 3)) and 4 or 0
    end
    if len == 0 then
      out[#out + 1] = string.format("\\x%02X", b)
      i = i + 1
    else
      out[#out + 1] = s:sub(i, i + len - 1)
      i = i + len
    end
  end
  return table.concat(out)
end

-- Splits s at `sep` where no parenthesis is open.
local function split_top(s, sep)
  local parts, depth, start, i = {}, 0, 1, 1
  while i <= #s do
    local c = s:sub(i, i)
    if c == "(" then depth = depth + 1 elseif c == ")" then depth = math.max(0, depth - 1) end
    if depth == 0 and s:sub(i, i + #sep - 1) == sep then
      parts[#parts + 1] = s:sub(start, i - 1)
      i = i + #sep
      start = i
    else
      i = i + 1
    end
  end
  parts[#parts + 1] = s:sub(start)
  return parts
end

-- The engine's description ("cpu backend, 2 threads, bf16 (...), OpenBLAS (...);
-- cuda.* settings do not apply on the cpu; convolutions (cpu.conv): ...") as
-- lines: the backend and precision first, the BLAS library and each "; " part
-- on a line of its own, a line too long wrapped at a space (indented further).
function util.engine_lines(describe, first, indent, width)
  width = width or 100
  local items = {}
  local parts = split_top(tostring(describe), "; ")
  local head = split_top(parts[1], ", ")
  local keep = {}
  for _, h in ipairs(head) do
    if h:match("^OpenBLAS") then items.blas = h else keep[#keep + 1] = h end
  end
  items[1] = first .. table.concat(keep, ", ")
  if items.blas then items[#items + 1] = indent .. "BLAS: " .. items.blas end
  for i = 2, #parts do items[#items + 1] = indent .. parts[i] end
  local lines = {}
  for _, l in ipairs(items) do
    local cont = (l == items[1] and indent or indent .. "  ")
    while #l >= width do
      local cut
      for j = width - 1, #cont + 10, -1 do
        if l:sub(j, j) == " " then cut = j; break end
      end
      if not cut then break end
      lines[#lines + 1] = l:sub(1, cut - 1)
      l = cont .. l:sub(cut + 1)
    end
    lines[#lines + 1] = l
  end
  return lines
end

function util.md_table(rows, right)
  right = right or 1
  local is_right = type(right) == "number" and function(c) return c > right end or function(c) return right[c] end
  local width = {}
  for _, row in ipairs(rows) do
    for c, cell in ipairs(row) do width[c] = math.max(width[c] or 0, #cell) end
  end
  local lines = {}
  for n, row in ipairs(rows) do
    local cells = {}
    for c, cell in ipairs(row) do
      local pad = string.rep(" ", width[c] - #cell)
      cells[c] = is_right(c) and pad .. cell or cell .. pad
    end
    lines[#lines + 1] = "| " .. table.concat(cells, " | ") .. " |"
    if n == 1 then
      local rule = {}
      for c = 1, #row do
        rule[c] = is_right(c) and string.rep("-", width[c] + 1) .. ":" or string.rep("-", width[c] + 2)
      end
      lines[#lines + 1] = "|" .. table.concat(rule, "|") .. "|"
    end
  end
  return table.concat(lines, "\n")
end

return util

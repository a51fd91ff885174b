-- moonrl.runtime.asyncfile against a scripted fake of luv's fs API, so that what a
-- real disk rarely does (short writes, a failing write, a slow open) happens
-- on cue. The real-luv path is covered by the sink specs.
local asyncfile = require("moonrl.runtime.asyncfile")

local function fake_uv()
  local uv = { pending = {}, writes = {}, data = "", closed = false }
  function uv.fs_open(path, flags, mode, cb)
    uv.opened = { path = path, flags = flags, mode = mode }
    uv.pending[#uv.pending + 1] = function() cb(uv.open_error, uv.open_error == nil and 7 or nil) end
  end
  function uv.fs_write(fd, data, offset, cb)
    assert(fd == 7)
    uv.writes[#uv.writes + 1] = { data = data, offset = offset }
    local n = uv.short and math.min(uv.short, #data) or #data
    local err = table.remove(uv.write_errors or {}, 1)
    uv.pending[#uv.pending + 1] = function()
      if err then return cb(err) end
      assert(offset == #uv.data, "writes must go in order, at the end")
      uv.data = uv.data .. data:sub(1, n)
      cb(nil, n)
    end
  end
  function uv.fs_close(fd, cb)
    uv.pending[#uv.pending + 1] = function() uv.closed = true; cb(nil) end
  end
  -- runs queued callbacks, one at a time, like loop iterations
  function uv.run()
    while #uv.pending > 0 do table.remove(uv.pending, 1)() end
  end
  return uv
end

describe("moonrl.runtime.asyncfile", function()
  it("queues writes until the file is open, then writes them in order and closes", function()
    local uv = fake_uv()
    local f = asyncfile.open(uv, "/x/metrics.jsonl")
    assert.same({ path = "/x/metrics.jsonl", flags = "w", mode = 420 }, uv.opened)
    assert.is_true(f:write("a\n"))
    assert.is_true(f:write("b\n"))
    assert.same({}, uv.writes)       -- nothing before the loop runs
    local closed, cb_err = false, "unset"
    f:close(function(err) closed = true; cb_err = err end)
    assert.is_false(f:write("late\n")) -- closing: refused
    uv.run()
    assert.equal("a\nb\n", uv.data)
    assert.equal(1, #uv.writes)       -- queued chunks joined into one write
    assert.is_true(uv.closed)
    assert.is_true(closed)
    assert.is_nil(cb_err)
    assert.equal(4, f.bytes_written)
  end)

  it("finishes short writes", function()
    local uv = fake_uv()
    uv.short = 3
    local f = asyncfile.open(uv, "p")
    uv.run()
    f:write("0123456789")
    f:write("abc")
    local closed = false
    f:close(function() closed = true end)
    uv.run()
    assert.equal("0123456789abc", uv.data)
    assert.is_true(#uv.writes >= 5)
    for i = 2, #uv.writes do
      assert.is_true(uv.writes[i].offset > uv.writes[i - 1].offset)
    end
    assert.is_true(closed)
  end)

  it("flushed(cb) calls back once the bytes written before it are in the file, not before", function()
    local uv = fake_uv()
    uv.short = 4
    local f = asyncfile.open(uv, "p")
    local seen = {}
    f:flushed(function() seen[#seen + 1] = "empty:" .. uv.data end)   -- nothing queued: at once
    assert.same({ "empty:" }, seen)
    f:write("row 1\n")
    f:flushed(function() seen[#seen + 1] = "1:" .. uv.data end)
    f:write("row 2\n")
    f:flushed(function() seen[#seen + 1] = "2:" .. uv.data end)
    assert.equal(1, #seen)   -- still opening: nothing written
    -- one loop callback at a time: each flushed() fires when its bytes are in, with short writes
    while #uv.pending > 0 do table.remove(uv.pending, 1)() end
    assert.equal("1:row 1\n", seen[2]:sub(1, 8))
    assert.is_true(#seen[2] - 2 >= #"row 1\n")
    assert.equal("2:row 1\nrow 2\n", seen[3])
    -- a failed file calls back at once (nothing more will be written)
    uv.write_errors = { "ENOSPC" }
    f.on_error = function() end
    f:write("row 3\n")
    local late = false
    f:flushed(function() late = true end)
    uv.run()
    assert.is_true(late)
  end)

  it("reports the first write error once and drops what follows", function()
    local uv = fake_uv()
    uv.write_errors = { "ENOSPC: no space left on device" }
    local errors = {}
    local f = asyncfile.open(uv, "/full/m.csv", { on_error = function(m) errors[#errors + 1] = m end })
    f:write("1\n")
    uv.run()
    assert.is_false(f:write("2\n"))
    assert.is_false(f:write("3\n"))
    local got
    f:close(function(err) got = err end)
    uv.run()
    assert.same({ "cannot write /full/m.csv: ENOSPC: no space left on device" }, errors)
    assert.equal("cannot write /full/m.csv: ENOSPC: no space left on device", got)
    assert.is_true(uv.closed) -- the descriptor is still closed
    assert.equal("", uv.data)
  end)

  it("reports a failed open and still calls the close callback", function()
    local uv = fake_uv()
    uv.open_error = "EACCES: permission denied"
    local errors = {}
    local f = asyncfile.open(uv, "/ro/x", { on_error = function(m) errors[#errors + 1] = m end })
    f:write("x")
    local called = false
    f:close(function() called = true end)
    uv.run()
    assert.same({ "cannot open /ro/x: EACCES: permission denied" }, errors)
    assert.is_true(called)
    assert.is_false(uv.closed)
    -- closing again answers at once
    local again = false
    f:close(function() again = true end)
    assert.is_true(again)
  end)

  it("survives an on_error that raises and a uv call that raises", function()
    local uv = fake_uv()
    uv.fs_open = function() error("bad flags") end
    local stderr = io.stderr
    local captured = {}
    io.stderr = { write = function(_, ...) for _, s in ipairs({ ... }) do captured[#captured + 1] = s end end }
    local ok = pcall(function()
      local f = asyncfile.open(uv, "p", { on_error = function() error("handler broke") end })
      f:close()
    end)
    io.stderr = stderr
    assert.is_true(ok)
    assert.matches("cannot open p: .*bad flags", table.concat(captured))
  end)
end)

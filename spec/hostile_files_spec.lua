-- Hostile files (issue 43): what a user names as a file to read or write,
-- when it is not what it should be. Each case runs the real binary
-- (build/moonrl, or $MOONRL_BIN) with a time limit of seconds and checks
-- three things: a clear refusal (exit 2, a message naming what is wrong and
-- what is accepted), nothing overwritten or replaced, and no hang.
--
--   export --out      a FIFO, a directory, a character device (root only:
--                     mknod), the input checkpoint itself (by another path,
--                     by a link): refused, each left as it was
--   bench --out       a FIFO: refused before any benchmark runs
--   policy.init       a FIFO, /dev/zero, a missing file, a file larger than
--                     the network's weights (sparse), weights holding a NaN
--   checkpoints       a crafted one declaring a 3 GiB section (sparse): export
--                     and adopt refuse it in seconds; one written after an
--                     injected NaN: adopt refuses it naming the tensor, the
--                     run goes on and its final checkpoint is finite; a resume
--                     skips it for the newest finite one
--   ctl adopt         a directory, a FIFO: said as what they are
--   --set             env.name=reach env.mode=proxy: exit 2

local support = require("support")
local uv = support.uv
local ffi = require("ffi")

local have_bin = support.have_bin
local function need_bin()
  if not have_bin then pending("no binary at " .. support.BIN .. " (build it: make build)") end
  return have_bin
end

local function has(text, s) return text:find(s, 1, true) ~= nil end

-- moonrl ARGS in dir with a limit of `limit` seconds: exit code, stdout,
-- stderr, seconds taken.
local function moonrl(dir, args, limit)
  local t0 = uv.hrtime()
  local rc, out, err = support.moonrl(args, dir, { timeout = limit or 20 })
  return rc, out, err, (uv.hrtime() - t0) / 1e9
end

local function kind(path)
  local st = uv.fs_lstat(path)
  return st and st.type
end

-- A small config; `more` adds keys.
local function config(dir, name, opts)
  opts = opts or {}
  return support.write_file(dir .. "/" .. name, string.format([[return {
    name = "hostile", device = "cpu", threads = 1, seed = 7, total_steps = %d, warmup = { updates = 0 },
    env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 },
    policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
    ppo = { rollout_steps = 8, lr = 3e-4, clip = 0.2, ent_coef = 0.01 },
    log = { console = false, tensorboard = false, checkpoint_interval = %d, checkpoint_keep = 100 },
    eval = { num_envs = 8, steps = 32 },
    %s
  }]], 64 * (opts.updates or 6), opts.interval or 1, opts.more or ""))
end

-- The floats of section `name` of a checkpoint (this spec's reader, not the
-- engine's): how many are not finite.
local function nonfinite_in(path, name)
  local s = support.checkpoint_section(path, name)
  local p = ffi.cast("const float *", s)
  local bad = 0
  for i = 0, #s / 4 - 1 do
    local v = p[i]
    if v ~= v or v == math.huge or v == -math.huge then bad = bad + 1 end
  end
  return bad
end

local function u32le(n) return string.char(n % 256, math.floor(n / 256) % 256, math.floor(n / 65536) % 256,
  math.floor(n / 16777216) % 256) end

-- A copy of checkpoint src at dst whose section `name` declares `extra` more
-- bytes (the header's total too): a table that adds up over a sparse hole.
local function grow_section(src, dst, name, extra)
  local s = support.read_file(src)
  local function u32(i) local a, b, c, d = s:byte(i, i + 3) return a + b * 256 + c * 65536 + d * 16777216 end
  local function u64(i) return u32(i) + u32(i + 4) * 4294967296 end
  local function le64(n) return u32le(n % 4294967296) .. u32le(math.floor(n / 4294967296)) end
  local f = assert(io.open(dst, "wb"))
  f:write(s:sub(1, 16), le64(u64(17) + extra))
  local count, off = u32(13), 25
  for _ = 1, count do
    local nm = s:sub(off, off + 31):gsub("%z.*$", "")
    local bytes = u64(off + 32)
    f:write(s:sub(off, off + 31), le64(bytes + (nm == name and extra or 0)), s:sub(off + 40, off + 47 + bytes))
    if nm == name then f:seek("cur", extra) end
    off = off + 48 + bytes
  end
  f:write(s:sub(off))
  f:close()
end

describe("hostile files", function()
  local dir, good, nan
  lazy_setup(function()
    if not have_bin then return end
    dir = support.tmpdir()
    config(dir, "cfg.lua")
    local rc, _, err = moonrl(dir, "train cfg.lua --dir good --no-eval", 60)
    assert.are.equal(0, rc, err)
    good = dir .. "/good/checkpoints/update_0000006.mrck"
    -- a run that writes checkpoints whatever the state (faults.max_bad_updates = 0) after a NaN at update 4
    config(dir, "nan.lua", { more = "debug = { inject_nan_at_update = 4 }, faults = { max_bad_updates = 0 }," })
    rc, _, err = moonrl(dir, "train nan.lua --dir nan --no-eval", 60)
    assert.are.equal(0, rc, err)
    nan = dir .. "/nan/checkpoints/update_0000005.mrck"
    assert.truthy(nonfinite_in(nan, "params") > 0, "the injected NaN is not in " .. nan)
    assert.are.equal(0, nonfinite_in(good, "params"))
  end)
  lazy_teardown(function() if dir then support.rm_rf(dir) end end)

  describe("export --out", function()
    it("a FIFO, even with --force: refused at once, the FIFO left as it is", function()
      if not need_bin() then return end
      local fifo = dir .. "/out.fifo"
      assert.truthy(uv.fs_mkfifo and uv.fs_mkfifo(fifo, tonumber("644", 8)) or os.execute("mkfifo " .. fifo))
      local rc, _, err, secs = moonrl(dir, "export " .. good .. " --out out.fifo --force", 10)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "out.fifo is a FIFO (named pipe), not a regular file"), err)
      assert.truthy(has(err, "accepted: a new path, or a regular file"), err)
      assert.are.equal("fifo", kind(fifo))
      assert.truthy(secs < 5, secs)
    end)

    it("a directory, with --force: refused, the directory kept", function()
      if not need_bin() then return end
      assert.truthy(uv.fs_mkdir(dir .. "/outdir", tonumber("755", 8)))
      local rc, _, err = moonrl(dir, "export " .. good .. " --out outdir --force", 10)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "outdir is a directory"), err)
      assert.are.equal("directory", kind(dir .. "/outdir"))
    end)

    it("a character device (made with mknod, as root): refused, still a device", function()
      if not need_bin() then return end
      local dev = dir .. "/null.dev"
      local ok = os.execute(string.format("mknod %q c 1 3 2>/dev/null", dev))
      if not (ok == 0 or ok == true) then pending("mknod needs root") return end
      local rc, _, err = moonrl(dir, "export " .. good .. " --out null.dev --force", 10)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "null.dev is a character device, not a regular file"), err)
      assert.are.equal("char", kind(dev))
    end)

    it("the input checkpoint itself (by another path, by a link), with --force: refused, the checkpoint unchanged",
      function()
        if not need_bin() then return end
        local before = support.read_file(good)
        assert.truthy(uv.fs_symlink(good, dir .. "/link.safetensors"))
        for _, out in ipairs({ good, "good/checkpoints/../checkpoints/update_0000006.mrck", "link.safetensors" }) do
          local rc, _, err = moonrl(dir, "export " .. good .. " --out " .. out .. " --force", 10)
          assert.are.equal(2, rc, err)
          assert.truthy(has(err, "is the checkpoint being exported"), err)
          assert.are.equal(before, support.read_file(good))
        end
        assert.are.equal("link", kind(dir .. "/link.safetensors"))
        -- a new path and an existing regular file (with --force) are written as before
        local rc, _, err = moonrl(dir, "export " .. good .. " --out new.safetensors", 10)
        assert.are.equal(0, rc, err)
        rc, _, err = moonrl(dir, "export " .. good .. " --out new.safetensors --force", 10)
        assert.are.equal(0, rc, err)
        assert.are.equal("file", kind(dir .. "/new.safetensors"))
      end)
  end)

  it("bench --out a FIFO: refused before any benchmark runs", function()
    if not need_bin() then return end
    local fifo = dir .. "/bench.fifo"
    os.execute("mkfifo " .. fifo)
    local rc, _, err, secs = moonrl(dir, "bench env --out bench.fifo", 10)
    assert.are.equal(2, rc, err)
    assert.truthy(has(err, "bench.fifo is a FIFO (named pipe), not a regular file"), err)
    assert.are.equal("fifo", kind(fifo))
    assert.truthy(secs < 5, secs)
  end)

  describe("policy.init", function()
    local function init_from(path, limit)
      local d = support.tmpdir()
      config(d, "cfg.lua")
      local rc, out, err, secs = moonrl(d, "train cfg.lua --dir run --no-eval --set policy.init=" .. path, limit or 10)
      local made = uv.fs_stat(d .. "/run") ~= nil
      support.rm_rf(d)
      return rc, out, err, secs, made
    end

    it("a FIFO: refused at once (not waited on), exit 2, no run directory", function()
      if not need_bin() then return end
      local fifo = dir .. "/init.fifo"
      os.execute("mkfifo " .. fifo)
      local rc, _, err, secs, made = init_from(fifo)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "policy.init: " .. fifo .. " is a FIFO (named pipe), not a regular file"), err)
      assert.falsy(made)
      assert.truthy(secs < 5, secs)
    end)

    it("/dev/zero: refused without reading it, exit 2", function()
      if not need_bin() then return end
      local rc, _, err, secs = init_from("/dev/zero")
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "policy.init: /dev/zero is a character device, not a regular file"), err)
      assert.truthy(secs < 5, secs)
    end)

    it("a missing file: says it is missing, exit 2", function()
      if not need_bin() then return end
      local rc, _, err = init_from(dir .. "/no-such.safetensors")
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "policy.init: no file at " .. dir .. "/no-such.safetensors"), err)
      assert.falsy(has(err, "nil"), err)
    end)

    it("a file far larger than the network's weights (3 GiB, sparse): refused from its size", function()
      if not need_bin() then return end
      local big = dir .. "/big.safetensors"
      local f = assert(io.open(big, "wb"))
      f:write(u32le(2), u32le(0), "{}")
      f:seek("set", 3 * 2 ^ 30)
      f:write("x")
      f:close()
      local rc, _, err, secs = init_from(big)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "is 3221225473 bytes"), err)
      assert.truthy(secs < 5, secs)
    end)

    it("weights holding a NaN: refused naming the tensor, exit 2", function()
      if not need_bin() then return end
      local rc, _, err = moonrl(dir, "export " .. good .. " --out init.safetensors --force", 10)
      assert.are.equal(0, rc, err)
      local st = require("moonrl.formats.safetensors")
      local file = assert(st.decode(support.read_file(dir .. "/init.safetensors")))
      local list = {}
      for name, t in pairs(file.tensors) do
        if name == "value.b" then t.data = "\0\0\192\127" end   -- a quiet NaN
        list[#list + 1] = { name = name, shape = t.shape, data = t.data }
      end
      table.sort(list, function(a, b) return a.name < b.name end)
      support.write_file(dir .. "/nan.safetensors", st.encode(list, file.metadata))
      local rc2, _, err2, _, made = init_from(dir .. "/nan.safetensors")
      assert.are.equal(2, rc2, err2)
      assert.truthy(has(err2, "tensor value.b holds 1 value that is not finite"), err2)
      assert.falsy(made)
    end)
  end)

  describe("checkpoints", function()
    it("a crafted one declaring a 3 GiB section: export refuses it in seconds, exit 2", function()
      if not need_bin() then return end
      local crafted = dir .. "/crafted.mrck"
      grow_section(good, crafted, "params", 3 * 2 ^ 30)
      local rc, _, err, secs = moonrl(dir, "export crafted.mrck --out crafted.safetensors", 20)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "section 'params' declares 3221274132 bytes"), err)
      assert.truthy(secs < 5, secs)
      assert.falsy(uv.fs_stat(dir .. "/crafted.safetensors"))
    end)

    it("ctl adopt: a NaN checkpoint and a crafted one are refused, the run goes on, its final checkpoint finite",
      function()
        if not need_bin() then return end
        local d = support.tmpdir()
        config(d, "long.lua", { updates = 10000000, interval = 0 })
        local p = support.spawn(support.BIN, d, "train long.lua --dir run --no-eval")
        local sock = require("moonrl.control.socket").socket_path(d .. "/run")
        assert.truthy(support.wait_for(function() return uv.fs_stat(sock) ~= nil end, 20000), p.err())
        local rc, out, err = moonrl(d, "ctl run adopt " .. nan, 10)
        assert.are.equal(1, rc, out .. err)
        assert.falsy(has(out, "adopted"), out)
        assert.truthy(has(err, "holds weights that are not finite (NaN or infinite): value.w (16 of 16), " ..
          "value.b (1 of 1)"), err)
        local crafted = d .. "/crafted.mrck"
        grow_section(good, crafted, "params", 3 * 2 ^ 30)
        local secs
        rc, out, err, secs = moonrl(d, "ctl run adopt " .. crafted, 20)
        assert.are.equal(1, rc, out .. err)
        assert.truthy(has(err, "section 'params' declares 3221274132 bytes"), err)
        assert.truthy(secs < 5, secs)
        rc, out, err = moonrl(d, "ctl run stop", 20)
        assert.are.equal(0, rc, out .. err)
        p.wait(30000)
        local cks = support.files(d .. "/run/checkpoints")
        assert.truthy(#cks > 0, p.err())
        for _, name in ipairs(cks) do
          for _, sec in ipairs({ "params", "adam_m", "adam_v" }) do
            assert.are.equal(0, nonfinite_in(d .. "/run/checkpoints/" .. name, sec), name .. " " .. sec)
          end
        end
        support.rm_rf(d)
      end)

    it("a resume skips a newest checkpoint holding NaN for the newest finite one, naming the tensor", function()
      if not need_bin() then return end
      local d = support.tmpdir()
      assert.truthy(os.execute(string.format("cp -r %q %q", dir .. "/nan", d .. "/nan")))
      for _, n in ipairs({ 4, 5, 6 }) do   -- one more update to run after update 3
        os.remove(string.format("%s/nan/checkpoints/update_%07d.mrck", d, n))
      end
      assert.truthy(os.execute(string.format("cp %q %q", nan, d .. "/nan/checkpoints/update_0000005.mrck")))
      local rc, out, err = moonrl(d, "train --resume nan --no-eval", 30)
      assert.are.equal(0, rc, out .. err)
      assert.truthy(has(err, "update_0000005.mrck"), err)
      assert.truthy(has(err, "value.b (1 of 1)"), err)
      assert.truthy(has(out .. err, "update 3"), out .. err)
      support.rm_rf(d)
    end)
  end)

  describe("ctl adopt", function()
    it("a directory or a FIFO is said as what it is, exit 2", function()
      if not need_bin() then return end
      local rc, _, err = moonrl(dir, "ctl good adopt good/checkpoints", 10)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "good/checkpoints is a directory, not a checkpoint file"), err)
      os.execute("mkfifo " .. dir .. "/adopt.fifo")
      rc, _, err = moonrl(dir, "ctl good adopt adopt.fifo", 10)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "adopt.fifo is a FIFO (named pipe), not a regular file"), err)
      rc, _, err = moonrl(dir, "ctl good adopt missing.mrck", 10)
      assert.are.equal(2, rc, err)
      assert.truthy(has(err, "missing.mrck: no such checkpoint file"), err)
    end)
  end)

  it("env.name=reach env.mode=proxy: refused, exit 2", function()
    if not need_bin() then return end
    local rc, _, err = moonrl(dir, "train cfg.lua --dir reach --no-eval --set env.name=reach --set env.mode=proxy", 20)
    assert.are.equal(2, rc, err)
    assert.truthy(has(err, "env.name = reach has only ground_truth"), err)
    assert.falsy(uv.fs_stat(dir .. "/reach"))
  end)
end)

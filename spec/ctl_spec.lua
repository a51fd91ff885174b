-- Controlling a running job from outside: `moonrl ctl` and `moonrl ps`
-- against live runs of the built binary (build/moonrl, or $MOONRL_BIN) in the
-- background, and a fuzz of the control socket's line protocol (random and
-- malformed lines, oversized lines, too many clients, idle clients, abrupt
-- disconnects) after which the run still trains with its values unchanged.
-- A job is `moonrl run job.lua` training a network small enough that an
-- update takes a millisecond, with a total it never reaches: each case stops
-- (or kills) its jobs itself.

local support = require("support")
local json = require("moonrl.formats.json")
local control = require("moonrl.control.client")
local uv = support.uv
local bit = require("bit")

-- This process writes to sockets the job may close (a refused or timed-out
-- client): EPIPE is an answer to check, not a reason to die of SIGPIPE.
local sigpipe = uv.new_signal()
sigpipe:start("sigpipe", function() end)
sigpipe:unref()

local BIN = os.getenv("MOONRL_BIN") or "build/moonrl"
local have_bin = io.open(BIN, "rb") ~= nil
if BIN:sub(1, 1) ~= "/" then BIN = (os.getenv("PWD") or ".") .. "/" .. BIN end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

-- Runs the binary in the foreground; returns exit code, stdout, stderr.
local function moonrl(args, dir)
  local out, err, rc = dir .. "/c.out", dir .. "/c.err", dir .. "/c.rc"
  sh(string.format("cd %q && timeout 60 %q %s >%q 2>%q; echo $? >%q", dir, BIN, args, out, err, rc))
  return tonumber(support.read_file(rc)), support.read_file(out) or "", support.read_file(err) or ""
end

local function wait_for(what, pred, limit_ms) return support.wait_until(what, pred, limit_ms or 20000) end
local function request(sock, req, timeout_ms) return support.control_request(sock, req, timeout_ms, 30000) end

-- Starts `moonrl run job.lua` in the background, training in run_dir.
-- `pre` is Lua run before the run starts, `post` after (the run is `run`).
local function start_job(dir, name, run_dir, pre, post)
  support.write_file(dir .. "/" .. name .. ".lua", string.format([[
    local moonrl = require "moonrl"
    %s
    local run = moonrl.train({
      name = %q, dir = %q, device = "cpu", threads = 1, seed = 7,
      total_steps = 64 * 10000000, warmup = { updates = 0 },
      env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 },
      policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
      ppo = { rollout_steps = 8, lr = 3e-4 },
      log = { console = false, tensorboard = false, checkpoint_interval = 0, checkpoint_keep = 2 },
    }, { hardware = "ci", level = "basic" })
    %s
    local s = run:wait()
    print("finished=" .. s.status)
  ]], pre or "", name, run_dir, post or ""))
  -- timeout: a job a failing case leaves behind is gone in two minutes at most
  sh(string.format("cd %q && (timeout -s KILL 120 %q run %s.lua >%s.out 2>%s.err; echo $? >%s.rc) >/dev/null 2>&1 &",
    dir, BIN, name, name, name, name))
  local job = { dir = dir, name = name, run_dir = run_dir, sock = control.socket_path(run_dir) }
  -- up once its own socket answers (a stale one in its place does not)
  wait_for(name .. "'s control socket", function()
    local r = uv.fs_lstat(job.sock) and request(job.sock, { cmd = "status" }, 1000)
    job.pid = r and r.name == name and r.pid
    return job.pid
  end)
  return job
end

-- The same, for a request that must be answered.
local function ask(sock, req)
  local r, err = request(sock, req)
  assert(r, "no reply to " .. json.encode(req) .. ": " .. tostring(err))
  assert(r.ok, "refused: " .. json.encode(req) .. ": " .. tostring(r.error))
  return r
end

local function wait_job_end(job)
  local rc = job.dir .. "/" .. job.name .. ".rc"
  -- the shell creates the file before it writes the code: wait for the number
  wait_for(job.name .. " to end", function() return tonumber(support.read_file(rc) or "") ~= nil end)
  return tonumber(support.read_file(rc)), support.read_file(job.dir .. "/" .. job.name .. ".out") or "",
    support.read_file(job.dir .. "/" .. job.name .. ".err") or ""
end

-- Whatever happens in a case, its jobs do not outlive it (a case that
-- passes has ended them already).
local function kill_job(job)
  if job and job.pid and not support.read_file(job.dir .. "/" .. job.name .. ".rc") then
    uv.kill(job.pid, "sigkill")
  end
end

-- support.run_until, saying what did not happen in time.
local function run_until(what, pred, ms)
  local ok, err = pcall(support.run_until, pred, ms)
  if not ok then error(what .. ": " .. tostring(err), 2) end
end

-- Serves the loop for ms milliseconds.
local function spin(ms)
  local t, fired = uv.new_timer(), false
  t:start(ms, 0, function() fired = true end)
  support.run_until(function() return fired end, ms + 5000)
  t:close()
end

local function metrics_lines(run_dir)   -- metric rows; event lines (changes) are skipped
  local out = {}
  for _, line in ipairs(support.lines(support.read_file(run_dir .. "/metrics.jsonl") or "")) do
    local r = json.decode(line)
    if r.event == nil then out[#out + 1] = r end
  end
  return out
end

local function mode(path)
  local st = uv.fs_lstat(path)
  return st and bit.band(st.mode, tonumber("777", 8))
end

describe("moonrl ctl", function()
  local dir, jobs
  before_each(function()
    dir = have_bin and support.tmpdir() or nil
    jobs = {}
  end)
  after_each(function()
    for _, j in ipairs(jobs) do kill_job(j) end
    if dir then support.rm_rf(dir) end
  end)

  it("drives a live run: status, get, set, pause, resume, checkpoint, ps, stop", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rd = dir .. "/r"
    -- paused from the start: nothing trains until `ctl resume`
    local job = start_job(dir, "job", rd, nil, "run:pause()")
    jobs[1] = job

    -- only its owner can reach it
    assert.are.equal(tonumber("600", 8), mode(job.sock))
    assert.are.equal(tonumber("700", 8), mode(rd .. "/control"))
    assert.are.equal("socket", uv.fs_lstat(job.sock).type)

    local rc, out, err = moonrl("ctl r status --json", dir)
    assert.are.equal(0, rc, err)
    local st = json.decode(out)
    assert.is_true(st.ok)
    assert.are.equal(rd, st.dir)
    assert.are.equal("job", st.name)
    assert.are.equal(10000000, st.total_updates)
    assert.are.equal(64 * 10000000, st.hot.total_steps)
    assert.are.same({ kind = "constant", from = 3e-4, to = 3e-4 }, st.hot["ppo.lr"])
    for _, k in ipairs(require("moonrl.config.schema").hot_keys()) do
      assert.is_not_nil(st.hot[k], k .. " missing from status.hot")
    end
    wait_for("the paused start", function() return ask(job.sock, { cmd = "status" }).status == "paused" end)
    local paused_at = ask(job.sock, { cmd = "status" }).update

    rc, out = moonrl("ctl r get ppo.lr", dir)
    assert.are.equal(0, rc)
    assert.are.equal("ppo.lr = constant(0.0003)\n", out)

    -- set: validated by the schema; all or nothing
    rc, out, err = moonrl("ctl r set ppo.lr=0.00012345 ppo.vf_coef=0.25", dir)
    assert.are.equal(0, rc, err)
    assert.are.equal("set ppo.lr = constant(0.00012345)\nset ppo.vf_coef = 0.25\n", out)
    rc, out, err = moonrl("ctl r set env.num_envs=4", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("env.num_envs is not hot: it cannot change while the run is going", 1, true), err)
    rc, out, err = moonrl("ctl r set ppo.clip=0.3 ppo.vf_coef=-1", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("ppo.vf_coef", 1, true) and err:find("nothing was changed", 1, true), err)
    rc, out = moonrl("ctl r get ppo.clip", dir)
    assert.are.equal("ppo.clip = linear(0.2, 0.1)\n", out)
    rc, out, err = moonrl("ctl r set ppo.lrr=1", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("did you mean 'ppo.lr'", 1, true), err)
    rc, out = moonrl("ctl r get ppo.vf_coef", dir)
    assert.are.equal("ppo.vf_coef = 0.25\n", out)

    -- resume: every update from here runs with the new values
    rc, out = moonrl("ctl r resume", dir)
    assert.are.equal(0, rc)
    wait_for("updates after resume", function() return #metrics_lines(rd) >= paused_at + 5 end)
    local n = 0
    for _, m in ipairs(metrics_lines(rd)) do
      if m.update > paused_at then
        n = n + 1
        assert.is_true(math.abs(m.lr - 0.00012345) < 1e-15, "update " .. m.update .. ": lr " .. m.lr)
      end
    end
    assert.is_true(n >= 5)

    -- pause: training stops at the next boundary
    rc, out = moonrl("ctl r pause", dir)
    assert.are.equal(0, rc)
    local u1 = tonumber(out:match("^paused after update (%d+)\n$"))
    assert.truthy(u1, out)
    assert.are.equal("paused", ask(job.sock, { cmd = "status" }).status)
    assert.are.equal(u1, ask(job.sock, { cmd = "status" }).update)
    uv.sleep(300)
    assert.are.equal(u1, ask(job.sock, { cmd = "status" }).update)

    -- checkpoint: written while paused, its path printed once it exists
    rc, out, err = moonrl("ctl r checkpoint", dir)
    assert.are.equal(0, rc, err)
    local path = out:match("^checkpoint (%S+)\n$")
    assert.truthy(path, out)
    assert.truthy(uv.fs_stat(path), path)
    assert.truthy(path:find(string.format("update_%07d", u1), 1, true), path)

    -- a client that asks for a checkpoint and leaves at once: the checkpoint
    -- is still written, nothing else happens
    -- (No assert inside a luv callback: luv would exit the process.)
    local gone, gone_err = uv.new_pipe(false), nil
    gone:connect(job.sock, function(cerr)
      gone_err = cerr
      if cerr then return gone:close() end
      gone:write('{"cmd":"checkpoint","id":1}\n', function() gone:close() end)
    end)
    run_until("the leaving client", function() return gone:is_closing() end, 5000)
    assert.is_nil(gone_err)
    wait_for("its checkpoint", function()
      return (support.read_file(rd .. "/train.log") or ""):find("checkpoint [^\n]*update_%d+%.mrck %(update " .. u1 .. "%)\n.*" ..
        "checkpoint [^\n]*update_%d+%.mrck %(update " .. u1 .. "%)\n") ~= nil
    end)
    assert.are.equal(u1, ask(job.sock, { cmd = "status" }).update)

    rc, out = moonrl("ctl r resume", dir)
    assert.are.equal(0, rc)
    wait_for("training again", function() return ask(job.sock, { cmd = "status" }).update > u1 + 2 end)

    -- pause --at-steps: returns at once; the run pauses at the update that reaches the count
    -- (set while paused, so the mark is ahead however fast the updates are)
    rc, out = moonrl("ctl r pause", dir)
    local u2 = tonumber(out:match("^paused after update (%d+)\n$"))
    local mark = 64 * (u2 + 3) + 1
    rc, out, err = moonrl("ctl r pause --at-steps " .. mark .. ",64", dir)
    assert.are.equal(0, rc, err)
    assert.are.equal("pauses at " .. mark .. " agent-steps (now " .. 64 * u2 .. ", update " .. u2 .. ")\n", out)
    rc, out = moonrl("ctl r resume", dir)
    assert.are.equal(0, rc)
    wait_for("the pause at the mark", function() return ask(job.sock, { cmd = "status" }).status == "paused" end)
    assert.are.equal(u2 + 4, ask(job.sock, { cmd = "status" }).update)
    rc, out, err = moonrl("ctl r pause --at-steps soon", dir)
    assert.are.equal(2, rc)
    assert.truthy(err:find("--at-steps: soon is not a whole number of agent-steps > 0", 1, true), err)
    rc, out, err = moonrl("ctl r resume --at-steps 5", dir)
    assert.are.equal(2, rc)
    assert.truthy(err:find("--at-steps is an option of pause", 1, true), err)
    -- a resume answered although the run pauses again at the next update (a mark there), sooner
    -- than the server looks at its status
    local u3 = ask(job.sock, { cmd = "status" }).update
    ask(job.sock, { cmd = "pause", at_steps = { 64 * (u3 + 1), 64 * (u3 + 2) } })
    for i = 1, 2 do
      rc, out, err = moonrl("ctl r resume --timeout 20", dir)
      assert.are.equal(0, rc, err)
      wait_for("the pause at the next mark", function()
        local s = ask(job.sock, { cmd = "status" })
        return s.status == "paused" and s.update == u3 + i
      end)
    end
    local bad = request(job.sock, { cmd = "pause", at_steps = { 10, -1 } })
    assert.is_false(bad.ok)
    assert.truthy(bad.error:find("pause: at_steps: -1 is not a whole number of agent-steps > 0", 1, true), bad.error)
    rc, out = moonrl("ctl r resume", dir)
    assert.are.equal(0, rc)
    wait_for("training again", function() return ask(job.sock, { cmd = "status" }).status == "running" end)

    -- status in words, and ps
    rc, out = moonrl("ctl r status", dir)
    assert.are.equal(0, rc)
    assert.truthy(out:find("^" .. rd:gsub("%p", "%%%0") .. " %(job%): running, update [%d,]+/10,000,000"), out)
    assert.truthy(out:find("agent%-steps/s, ETA %S+\n"), out)
    assert.truthy(out:find("\n    ppo.lr = constant(0.00012345)\n", 1, true), out)
    rc, out = moonrl("ps " .. dir, dir)
    assert.are.equal(0, rc)
    local lines = support.lines(out)
    assert.are.equal(2, #lines, out)
    assert.truthy(lines[1]:match("^DIR%s+NAME%s+STATUS%s+UPDATE%s+PROGRESS%s+SPS%s+ETA$"), out)
    assert.truthy(lines[2]:find("^" .. rd:gsub("%p", "%%%0") .. "%s+job%s+running%s+[%d,]+/10,000,000%s+0%.0%%%s+[%d,]+"), out)

    -- stop: waits for the end, with a final checkpoint; the socket goes away
    rc, out, err = moonrl("ctl r stop", dir)
    assert.are.equal(0, rc, err)
    assert.truthy(out:match("^stopped: stopped after %d+ updates, checkpoint %S+%.mrck\n$"), out)
    local jrc, jout = wait_job_end(job)
    assert.are.equal(0, jrc)
    assert.truthy(jout:find("finished=stopped", 1, true))
    assert.is_nil(uv.fs_lstat(job.sock))
    assert.is_nil(uv.fs_lstat(rd .. "/control"))
    rc, out, err = moonrl("ctl r status", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("no job is running there", 1, true), err)
    rc, out = moonrl("ps " .. dir, dir)
    assert.are.equal("no jobs running under " .. dir .. "\n", out)
    local log = support.read_file(rd .. "/train.log")
    -- moonrl.run.changes: in force from the first update after the pause (the
    -- pause lands before update 1, or after it when update 1 had started)
    assert.truthy(log:find("update " .. (paused_at + 1) .. ": ppo.lr 0.0003 -> 0.00012345 (ctl)", 1, true), log)
  end)

  it("rejects a bad command line with exit code 2", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    for _, c in ipairs({
      { "ctl", "missing RUN_DIR" },
      { "ctl r", "missing the command" },
      { "ctl r frobnicate", "unknown command 'frobnicate'" },
      { "ctl r stauts", "did you mean 'status'" },
      { "ctl r get", "missing the key" },
      { "ctl r get a b", "unexpected argument 'b'" },
      { "ctl r set", "missing KEY=VALUE" },
      { "ctl r set ppo.lr", "expected key=value" },
      { "ctl r pause now", "unexpected argument 'now'" },
      { "ctl r status --timeout x", "--timeout x" },
      { "ps a b", "unexpected argument 'b'" },
    }) do
      local rc, _, err = moonrl(c[1], dir)
      assert.are.equal(2, rc, c[1] .. ": " .. err)
      assert.truthy(err:find(c[2], 1, true), c[1] .. ": " .. err)
    end
  end)

  it("tells a stale socket left by a killed job, and replaces it when a run starts there", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local a = start_job(dir, "a", dir .. "/a")
    jobs[1] = a
    assert.is_number(a.pid)
    uv.kill(a.pid, "sigkill")
    wait_job_end(a)
    assert.truthy(uv.fs_lstat(a.sock), "a killed job leaves its socket")
    local b = start_job(dir, "b", dir .. "/b")
    jobs[2] = b

    local rc, _, err = moonrl("ctl nowhere status", dir)
    assert.are.equal(1, rc)
    assert.are.equal("moonrl ctl: nowhere: no such run directory\n", err)
    rc, _, err = moonrl("ctl a status", dir)
    assert.are.equal(1, rc)
    assert.truthy(err:find("does not answer: the job that made it is no longer running (a stale socket)", 1, true), err)
    local out
    rc, out = moonrl("ps " .. dir, dir)
    assert.are.equal(0, rc)
    local lines = support.lines(out)
    assert.are.equal(3, #lines, out)
    assert.truthy(lines[2]:find("^" .. (dir .. "/a"):gsub("%p", "%%%0") .. "%s+%-%s+not running %(stale socket%)"), out)
    assert.truthy(lines[3]:find("^" .. (dir .. "/b"):gsub("%p", "%%%0") .. "%s+b%s+running"), out)

    -- a run starting in the same directory takes the place
    -- a new run is not started over a run's files (it would be refused: moonrl.run), so the
    -- directory keeps only the stale socket, as after the old run was cleared away
    sh(string.format("cd %q/a && rm -rf config.lua .config.as-written.lua train.log metrics.jsonl metrics.csv changes.lua checkpoints",
      dir))
    local a2 = start_job(dir, "a2", dir .. "/a")   -- up once a2 answers there
    jobs[3] = a2
    assert.are.equal(tonumber("600", 8), mode(a2.sock))
    wait_for("the note in train.log", function()
      return (support.read_file(dir .. "/a/train.log") or ""):find("control: replaced the stale control socket", 1, true)
    end)
    assert.truthy(support.read_file(dir .. "/a2.err"):find("moonrl: note: replaced the stale control socket " ..
      dir .. "/a/control/control.sock (ECONNREFUSED", 1, true))
    rc, out = moonrl("ps " .. dir, dir)
    assert.truthy(out:find("a2%s+running"), out)
    for _, j in ipairs({ a2, b }) do
      assert.is_true(request(j.sock, { cmd = "stop", wait = true, checkpoint = false }).ok)
      assert.are.equal(0, (wait_job_end(j)))
    end
  end)

  it("refuses a control directory or socket that is not owner-only: ctl, ps and the client library", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local a = start_job(dir, "a", dir .. "/a")
    jobs[1] = a
    local cdir = dir .. "/a/control"
    local function refused(path, found, required)
      local rc, out, err = moonrl("ctl a status", dir)
      assert.are.equal(1, rc, out .. err)
      assert.truthy(err:find("moonrl ctl: refusing the control ", 1, true), err)
      for _, w in ipairs({ path, found, required }) do assert.truthy(err:find(w, 1, true), err) end
      rc, out = moonrl("ps " .. dir, dir)
      assert.are.equal(0, rc)
      assert.truthy(out:find("untrusted: refusing the control ", 1, true), out)
      assert.falsy(out:find("running", 1, true), out)
      local r, rerr = request(a.sock, { cmd = "status" })
      assert.is_nil(r)
      assert.truthy(tostring(rerr):find(found, 1, true), tostring(rerr))
    end
    assert.is_true(uv.fs_chmod(cdir, tonumber("777", 8)))
    refused("a/control", "its mode is 0777", "it must be 0700")
    assert.is_true(uv.fs_chmod(cdir, tonumber("750", 8)))
    refused("a/control", "its mode is 0750", "it must be 0700")
    assert.is_true(uv.fs_chmod(cdir, tonumber("700", 8)))
    assert.is_true(uv.fs_chmod(a.sock, tonumber("666", 8)))
    refused("a/control/control.sock", "its mode is 0666", "it must be 0600")
    assert.is_true(uv.fs_chmod(a.sock, tonumber("600", 8)))
    assert.is_true(ask(a.sock, { cmd = "status" }).ok)
    local rc, out = moonrl("ctl a status", dir)
    assert.are.equal(0, rc)
    assert.truthy(out:find("running", 1, true), out)

    -- another user's folder or socket (as root, the one who can make them)
    local ffi = require("ffi")
    pcall(ffi.cdef, "unsigned int geteuid(void);")
    if tonumber(ffi.C.geteuid()) == 0 then
      assert.is_true(uv.fs_chown(cdir, 65534, 65534))
      refused("a/control", "owned by uid 65534, not by this user (uid 0)", "another user could answer")
      assert.is_true(uv.fs_chown(cdir, 0, 0))
      assert.is_true(uv.fs_chown(a.sock, 65534, 65534))
      refused("a/control/control.sock", "owned by uid 65534, not by this user (uid 0)", "another user could answer")
      assert.is_true(uv.fs_chown(a.sock, 0, 0))
    end
    assert.is_true(request(a.sock, { cmd = "stop", wait = true, checkpoint = false }).ok)
    assert.are.equal(0, (wait_job_end(a)))

    -- a run does not listen in a control folder that is not private: it says so and trains on
    local b = dir .. "/b"
    assert.is_true(uv.fs_mkdir(b, tonumber("755", 8)))
    assert.is_true(uv.fs_mkdir(b .. "/control", tonumber("755", 8)))
    assert.is_true(uv.fs_chmod(b .. "/control", tonumber("777", 8)))
    support.write_file(dir .. "/b.lua", string.format([[
      local moonrl = require "moonrl"
      local run = moonrl.train({
        name = "b", dir = %q, device = "cpu", threads = 1, seed = 7, total_steps = 64 * 3, warmup = { updates = 0 },
        env = { num_envs = 8, grid_size = 16, density_min = 4, density_max = 8 },
        policy = { conv_channels = { 4 }, hidden = 16, critic_hidden = 16 },
        ppo = { rollout_steps = 8 },
        log = { console = false, tensorboard = false, checkpoint_interval = 0 },
      }, { hardware = "ci", level = "basic" })
      print("finished=" .. run:wait().status)
    ]], b))
    local rc2, out2, err2 = moonrl("run b.lua", dir)
    assert.are.equal(0, rc2, err2)
    assert.truthy(out2:find("finished=finished", 1, true) or out2:find("finished=", 1, true), out2)
    assert.truthy(err2:find("refusing the control directory " .. b .. "/control: its mode is 0777, it must be 0700",
      1, true), err2)
    assert.is_nil(uv.fs_lstat(b .. "/control/control.sock"))
  end)

  it("escapes bytes that are not UTF-8 (and controls) in every reply that echoes a client's input", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local util = require("moonrl.util")
    local job = start_job(dir, "u", dir .. "/u")
    jobs[1] = job
    local lines = {
      "\255\254",
      '{"cmd":"\255\254"}',
      '{"cmd":"get","key":"\255\254"}',
      '{"cmd":"set","values":{"\255\254":1}}',
      '{"cmd":"set","key":"ppo.\255\254","value":1}',
      '{"cmd":"set","key":"ppo.lr","value":"\255\254\\u001b[31m"}',
      '{"cmd":"get","id":"\255\254"}',
    }
    local c = { pipe = uv.new_pipe(false), buf = "", eof = false }
    c.pipe:connect(job.sock, function(err)
      assert(not err, err)
      c.pipe:read_start(function(rerr, data)
        if rerr or not data then c.eof = true; return c.pipe:close() end
        c.buf = c.buf .. data
      end)
      c.pipe:write(table.concat(lines, "\n") .. "\n")
      c.pipe:shutdown()
    end)
    run_until("the replies", function() return c.eof end, 30000)
    local replies = support.lines(c.buf)
    assert.are.equal(#lines, #replies, c.buf)
    for i, line in ipairs(replies) do
      assert.are.equal(util.escape_bytes(line), line, "reply " .. i .. " is not UTF-8: " .. line)
      local r = assert(json.decode(line))
      assert.is_false(r.ok, line)
      if i < 7 then assert.truthy(r.error:find("\\xFF", 1, true), "reply " .. i .. ": " .. r.error) end
      assert.falsy(r.error:find("[\128-\255%c]"), "reply " .. i .. ": " .. r.error)
    end
    assert.are.equal("\\xFF\\xFE", json.decode(replies[7]).id)
    -- the same through moonrl ctl: its message is printable
    local rc, _, err = moonrl([[ctl u set "$(printf '\377\376')=1"]], dir)
    assert.are.equal(rc == 2 and 2 or 1, rc)
    assert.truthy(err:find("\\xFF\\xFE", 1, true), err)
    assert.falsy(err:sub(1, -2):find("[\128-\255%c]"), err)
    rc, _, err = moonrl([[ctl u get "$(printf 'ppo.\377')"]], dir)
    assert.are.equal(1, rc, err)
    assert.truthy(err:find("ppo.\\xFF", 1, true), err)
    assert.falsy(err:sub(1, -2):find("[\128-\255%c]"), err)
    assert.is_true(request(job.sock, { cmd = "stop", wait = true, checkpoint = false }).ok)
    assert.are.equal(0, (wait_job_end(job)))
  end)

  it("answers 2,000 connections made one after another, none refused as too many", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local job = start_job(dir, "s", dir .. "/s")
    jobs[1] = job
    -- Each connects, sends a request and goes without reading its reply,
    -- but every 25th waits for its reply: there is never more than one
    -- client at a time, so none may be told there are too many.
    local answered, wrong = 0, {}
    for i = 1, 2000 do
      local reader = i % 25 == 0
      local pipe, done, buf = uv.new_pipe(false), false, ""
      pipe:connect(job.sock, function(cerr)
        if cerr then wrong[#wrong + 1] = i .. ": " .. tostring(cerr); done = true; return pipe:close() end
        pipe:write('{"cmd":"help","id":' .. i .. '}\n')
        if not reader then done = true; return pipe:close() end
        pipe:read_start(function(rerr, data)
          if data then buf = buf .. data end
          if rerr or not data or buf:find("\n", 1, true) then
            done = true
            if not pipe:is_closing() then pipe:close() end
          end
        end)
      end)
      run_until("connection " .. i, function() return done end, 30000)
      if reader then
        local r = json.decode((buf:match("^[^\n]*")))
        if type(r) == "table" and r.ok and r.id == i then answered = answered + 1
        else wrong[#wrong + 1] = i .. ": " .. buf end
      end
    end
    assert.are.same({}, wrong)
    assert.are.equal(80, answered)
    -- and one after another, each reading its reply
    for i = 1, 200 do
      local r, err = request(job.sock, { cmd = "help", id = i })
      assert(r and r.ok and r.id == i, tostring(err or (r and r.error)))
    end
    assert.is_true(request(job.sock, { cmd = "stop", wait = true, checkpoint = false }).ok)
    assert.are.equal(0, (wait_job_end(job)))
  end)

  it("survives a fuzz of its protocol: the run keeps training and its values stay", function()
    if not have_bin then return pending("no binary at " .. BIN .. " (build it: make build)") end
    local rd = dir .. "/f"
    local job = start_job(dir, "f", rd,
      [[require("moonrl.control.server").limits.idle_ms = 1500
        require("moonrl.control.server").limits.max_clients = 32
        require("moonrl.control.server").limits.wait_ms = 200]])
    jobs[1] = job
    local before = request(job.sock, { cmd = "status" })
    assert.is_true(before.ok, tostring(before.error))

    math.randomseed(20240611)
    local rnd = math.random

    -- Lines that must each get one error reply and change nothing.
    local bad = {
      "[]", "[1,2]", '"status"', "null", "true", "17", "{}", '{"cmd":null}', '{"cmd":5}', '{"cmd":["stop"]}',
      '{"cmd":"STOP"}', '{"cmd":"stopp"}', '{"cmd":"paus"}', '{"cmd":"\\ud800"}', '{"cmd":"set"}',
      '{"cmd":"set","values":[]}', '{"cmd":"set","values":{}}', '{"cmd":"set","values":[1,2]}',
      '{"cmd":"set","values":{"ppo.lr":null}}', '{"cmd":"set","values":{"ppo.lr":-1}}',
      '{"cmd":"set","values":{"ppo.lr":"fast"}}', '{"cmd":"set","values":{"env.num_envs":4}}',
      '{"cmd":"set","values":{"ppo.lr":0.001,"nope.key":1}}', '{"cmd":"set","values":{"ppo.vf_coef":0.1,"ppo.clip":-3}}',
      '{"cmd":"set","values":{"ppo.lr":0.001,"zz.key":1}}', '{"cmd":"set","values":{"ppo.clip":0.3,"ppo.vf_coef":-1}}',
      '{"cmd":"set","values":{"hooks.on_update":"os.exit()"}}', '{"cmd":"set","values":{"total_steps":1e400}}',
      '{"cmd":"set","values":{"ppo.lr":{"kind":"linear","from":1}}}', '{"cmd":"set","values":{"ppo":{"lr":1}}}',
      '{"cmd":"set","key":"ppo.lr"}', '{"cmd":"set","key":5,"value":1}', '{"cmd":"set","key":"seed","value":3}',
      '{"cmd":"get"}', '{"cmd":"get","key":"nope"}', '{"cmd":"get","key":{}}', '{"cmd":"stop","checkpoint":"no"}',
      '{"cmd":"stop","wait":1}', '{"cmd":"status"', '{"cmd":"status",}', '{"cmd" "status"}', "{'cmd':'status'}",
      '{"cmd":"status"}}', '{"cmd":"status"} x', "\0\1\2", string.rep("[", 20000), string.rep('{"a":', 3000),
      '{"cmd":"' .. string.rep("x", 30000) .. '"}',
    }
    local good = { '{"cmd":"status"}', '{"cmd":"get","key":"ppo.lr"}', '{"cmd":"help"}', '{"cmd":"get","key":"ppo"}' }
    local function random_bytes()
      local t = { string.char(rnd(33, 122)) }   -- never blank, never a JSON object
      if t[1] == "{" then t[1] = "x" end
      for i = 2, rnd(0, 200) do
        local b = rnd(0, 255)
        if b == 10 then b = 11 end
        t[i] = string.char(b)
      end
      return table.concat(t)
    end
    local function next_line()
      local r = rnd()
      if r < 0.35 then return random_bytes(), false end
      if r < 0.85 then return bad[rnd(#bad)], false end
      return good[rnd(#good)], true
    end

    -- A client: sends its lines in random chunks, reads what comes back.
    local function client(lines, how)
      local c = { pipe = uv.new_pipe(false), buf = "", replies = {}, eof = false }
      local function shut()
        if not c.pipe:is_closing() then c.pipe:close() end
        c.eof = true
      end
      c.pipe:connect(job.sock, function(err)
        if err then c.err = err; return shut() end
        c.pipe:read_start(function(rerr, data)
          if rerr or not data then return shut() end
          c.buf = c.buf .. data
          for line in c.buf:gmatch("([^\n]*)\n") do c.replies[#c.replies + 1] = json.decode(line) end
          c.buf = c.buf:match("[^\n]*$")
        end)
        local text = table.concat(lines, "\n") .. (how == "partial" and "" or "\n")
        if how == "abrupt" or how == "partial" then text = text:sub(1, rnd(0, #text)) end
        local pos = 1
        while pos <= #text do
          local n = rnd(1, 4096)
          c.pipe:write(text:sub(pos, pos + n - 1))
          pos = pos + n
        end
        if how == "abrupt" or how == "partial" then shut() end   -- gone mid-request
      end)
      return c
    end

    local total, checked = 0, 0
    for wave = 1, 45 do
      local clients = {}
      for k = 1, 6 do
        local how = ({ "normal", "normal", "normal", "normal", "abrupt", "partial" })[k]
        local lines, want = {}, {}
        for i = 1, rnd(10, 40) do
          lines[i], want[i] = next_line()
        end
        total = total + #lines
        clients[k] = { c = client(lines, how), want = want, how = how, lines = lines }
      end
      local okw, ew = pcall(support.run_until, function()
        for _, cl in ipairs(clients) do
          if cl.how == "normal" and #cl.c.replies < #cl.want and not cl.c.eof then return false end
        end
        return true
      end, 20000)
      if not okw then
        for k, cl in ipairs(clients) do
          io.stderr:write(k, " ", cl.how, " want ", #cl.want, " got ", #cl.c.replies, " eof ", tostring(cl.c.eof), " err ", tostring(cl.c.err), "\n")
          for i, l in ipairs(cl.lines) do io.stderr:write("  ", i, " ", json.encode(l:sub(1, 80)), "\n") end
        end
        error(ew)
      end
      for _, cl in ipairs(clients) do
        if cl.how == "normal" then
          assert.are.equal(#cl.want, #cl.c.replies, "wave " .. wave .. ": one reply per line: " .. json.encode(cl.c.replies))
          for i, r in ipairs(cl.c.replies) do
            assert.are.equal(cl.want[i], r.ok, "wave " .. wave .. " line " .. i .. ": " .. tostring(r.error))
            if not r.ok then assert.is_string(r.error) end
            checked = checked + 1
          end
          cl.c.pipe:close()
        end
      end
      run_until("wave " .. wave .. " closing", function()
        for _, cl in ipairs(clients) do if not cl.c.pipe:is_closing() then return false end end
        return true
      end, 5000)
    end
    assert.is_true(total > 3000, total)
    assert.is_true(checked > 2000, checked)

    -- An oversized line: an error, then the connection closes.
    for _, tail in ipairs({ "", "\n" }) do
      local c = client({ string.rep("a", 70 * 1024) .. tail }, "normal")
      run_until("oversized " .. #tail, function() return c.eof end, 10000)
      assert.are.equal(1, #c.replies)
      assert.truthy(c.replies[1].error:find("longer than 65536 bytes", 1, true), c.replies[1].error)
    end

    -- Too many at once: the one over the limit waits wait_ms (200 ms here) for a
    -- slot, is told and let go; the rest still work.
    local idle = {}
    for i = 1, 32 do
      idle[i] = { pipe = uv.new_pipe(false), replies = {}, eof = false, buf = "" }
      local c = idle[i]
      c.pipe:connect(job.sock, function(err)
        c.err = err
        if err then c.eof = true return end
        c.pipe:read_start(function(_, data)
          if not data then c.eof = true return end
          for line in data:gmatch("([^\n]*)\n") do c.replies[#c.replies + 1] = json.decode(line) end
        end)
      end)
    end
    spin(300)
    for i, c in ipairs(idle) do assert.is_nil(c.err, "idle client " .. i) end
    local extra = client({ '{"cmd":"status"}' }, "normal")
    run_until("the refusal", function() return extra.eof end, 5000)
    assert.are.equal(1, #extra.replies)
    assert.is_false(extra.replies[1].ok)
    assert.truthy(extra.replies[1].error:find("too many connections (32 at once)", 1, true), extra.replies[1].error)
    -- the idle ones time out (1.5 s here) with a message; then there is room again
    run_until("idle timeouts", function()
      for _, c in ipairs(idle) do if not c.eof then return false end end
      return true
    end, 10000)
    for _, c in ipairs(idle) do
      assert.are.equal(1, #c.replies)
      assert.truthy(c.replies[1].error:find("no complete request in 1500 ms", 1, true), c.replies[1].error)
      c.pipe:close()
    end
    -- a slow client, one byte at a time, is timed out the same way
    local slow = { pipe = uv.new_pipe(false), replies = {}, eof = false }
    local drip = uv.new_timer()
    local t0 = uv.hrtime()
    slow.pipe:connect(job.sock, function(cerr)
      if cerr then slow.eof = true return end
      slow.pipe:read_start(function(_, data)
        if not data then slow.eof = true return end
        for line in data:gmatch("([^\n]*)\n") do slow.replies[#slow.replies + 1] = json.decode(line) end
      end)
      drip:start(100, 100, function() if not slow.eof then slow.pipe:write("{") end end)
    end)
    run_until("the slow client's timeout", function() return slow.eof end, 10000)
    drip:close()
    slow.pipe:close()
    local secs = (uv.hrtime() - t0) / 1e9
    assert.is_true(secs > 1.2 and secs < 5, secs)
    assert.truthy(slow.replies[1].error:find("no complete request", 1, true))

    -- Afterwards: answering, training, and every hot value as it was.
    local after = request(job.sock, { cmd = "status", id = "last" })
    assert.is_true(after.ok)
    assert.are.equal("last", after.id)
    assert.are.equal("running", after.status)
    assert.is_true(after.update > before.update, after.update .. " <= " .. before.update)
    assert.are.same(before.hot, after.hot)
    assert.is_true(request(job.sock, { cmd = "stop", wait = true, checkpoint = false }).ok)
    local rc, out, err = wait_job_end(job)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("finished=stopped", 1, true))
    assert.falsy(err:find("traceback", 1, true), err)
    assert.falsy(err:find("control socket", 1, true), err)
    assert.falsy(support.read_file(rd .. "/train.log"):find("%d%d:%d%d:%d%d set "), "a set went through")
  end)
end)

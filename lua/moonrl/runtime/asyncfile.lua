-- moonrl.runtime.asyncfile - an append-only file written through luv's asynchronous
-- fs API, for the sinks.
--
-- write() never blocks and never raises: data is queued and written in order
-- by a chain of uv.fs_write callbacks (pending chunks are joined into one
-- write); the file is opened (truncated) asynchronously on creation and
-- writes queue up until it is open. The first failure (open or write) is
-- reported once through on_error(msg) and later writes are dropped. close(cb)
-- flushes the queue, closes the descriptor and then calls cb(err_or_nil).
-- Nothing happens until the loop runs: this is what keeps the trainer's
-- thread and the loop's timers free of disk latency.
--
-- Public functions
--   asyncfile.open(uv, path [, {on_error = fn(msg), mode = 420, append = true}]) -> file
--                                    append: keep what the file holds and write after it
--   file:write(data) -> true | false (false once the file has failed or is closing)
--   file:close([cb])                 cb(err) after the last byte is written and the fd closed
--   file:flushed(cb)                 cb() once every byte written so far is in the file (written to
--                                    the kernel), or the file has failed or closed; at once if so now
--   file.path, file.failed, file.closed, file.bytes_written

local asyncfile = {}

local File = {}
File.__index = File

local settle   -- below

local function report(self, msg)
  if self.failed then return end
  self.failed = true
  self.error = msg
  self.queue = {}
  local ok = pcall(self.on_error, msg)
  if not ok then io.stderr:write("moonrl: ", msg, "\n") end
  settle(self)
end

-- Calls the flushed() callbacks whose bytes are written (all of them once
-- the file has failed or closed: nothing more will be).
function settle(self)
  local cbs = self.flush_cbs
  if #cbs == 0 then return end
  local keep, due = {}, {}
  for _, w in ipairs(cbs) do
    if self.failed or self.closed or self.bytes_written >= w.mark then due[#due + 1] = w.cb else keep[#keep + 1] = w end
  end
  self.flush_cbs = keep
  for _, cb in ipairs(due) do pcall(cb) end
end

local function finish(self, err)
  self.closed = true
  settle(self)
  local cbs = self.close_cbs
  self.close_cbs = {}
  for _, cb in ipairs(cbs) do cb(err) end
end

local function do_close(self)
  if self.fd == nil then return finish(self, self.error) end
  local fd = self.fd
  self.fd = nil
  self.busy = true
  local ok, err = pcall(self.uv.fs_close, fd, function(cerr)
    self.busy = false
    if cerr then report(self, "cannot close " .. self.path .. ": " .. tostring(cerr)) end
    finish(self, self.error)
  end)
  if not ok then
    self.busy = false
    report(self, "cannot close " .. self.path .. ": " .. tostring(err))
    finish(self, self.error)
  end
end

local function kick(self)
  if self.busy or self.closed then return end
  if self.failed then
    if self.closing then do_close(self) end
    return
  end
  if self.fd == nil then return end -- still opening
  if #self.queue == 0 then
    if self.closing then do_close(self) end
    return
  end
  local data = table.concat(self.queue)
  self.queue = {}
  self.busy = true
  local ok, err = pcall(self.uv.fs_write, self.fd, data, self.append and -1 or self.bytes_written, function(werr, n)
    self.busy = false
    if werr then
      report(self, "cannot write " .. self.path .. ": " .. tostring(werr))
    else
      self.bytes_written = self.bytes_written + n
      if n < #data then table.insert(self.queue, 1, data:sub(n + 1)) end
      settle(self)
    end
    kick(self)
  end)
  if not ok then
    self.busy = false
    report(self, "cannot write " .. self.path .. ": " .. tostring(err))
    kick(self)
  end
end

function asyncfile.open(uv, path, opts)
  opts = opts or {}
  local self = setmetatable({
    uv = uv, path = path, queue = {}, busy = true, closing = false, closed = false,
    failed = false, bytes_written = 0, bytes_queued = 0, close_cbs = {}, flush_cbs = {}, append = opts.append == true,
    on_error = opts.on_error or function(msg) io.stderr:write("moonrl: ", msg, "\n") end,
  }, File)
  local ok, err = pcall(uv.fs_open, path, opts.append and "a" or "w", opts.mode or 420, function(oerr, fd)
    self.busy = false
    if oerr or not fd then
      report(self, "cannot open " .. path .. ": " .. tostring(oerr))
    else
      self.fd = fd
    end
    kick(self)
  end)
  if not ok then
    self.busy = false
    report(self, "cannot open " .. path .. ": " .. tostring(err))
  end
  return self
end

function File:write(data)
  if self.failed or self.closing or self.closed then return false end
  self.queue[#self.queue + 1] = data
  self.bytes_queued = self.bytes_queued + #data
  kick(self)
  return true
end

function File:flushed(cb)
  if self.failed or self.closed or self.bytes_written >= self.bytes_queued then return cb() end
  self.flush_cbs[#self.flush_cbs + 1] = { mark = self.bytes_queued, cb = cb }
end

function File:close(cb)
  if self.closed then
    if cb then cb(self.error) end
    return
  end
  if cb then self.close_cbs[#self.close_cbs + 1] = cb end
  if self.closing then return end
  self.closing = true
  kick(self)
end

return asyncfile

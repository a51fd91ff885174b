-- moonrl.eval.progress - what an evaluation says while it runs: a progress
-- function for moonrl.evaluate (opts.progress = fn(done, total)), written
-- once for `moonrl eval` and for scripts.
--
--   progress.printer{prefix =, label =, write = fn(s), after = seconds} -> fn(done, total)
--     a line at the first 10% of the steps, then at each further 10% once a
--     second has passed since the last line, and at the end, with the time
--     taken; `label` names the row. after > 0: nothing until that many
--     seconds have passed (a short evaluation stays silent), and the last
--     line only when an earlier one was written.

local uv = require("luv")

local progress = {}

function progress.printer(o)
  local t0 = uv.hrtime()
  local shown, last, wrote = -1, t0, false
  local after = (o.after or 0) * 1e9
  local write = o.write or function(s) io.stderr:write(s) end
  return function(done, total)
    local tenth = math.floor(10 * done / total)
    if tenth == shown then return end
    local now = uv.hrtime()
    if now - t0 < after and tenth < 10 then return end
    if tenth == 10 and after > 0 and not wrote then return end
    if shown >= 0 and tenth < 10 and now - last < 1e9 then return end
    shown, last, wrote = tenth, now, true
    write(string.format("%s%s%d%% of %d steps, %.1f s\n", o.prefix or "", o.label and (o.label .. ": ") or "",
      10 * tenth, total, (now - t0) / 1e9))
  end
end

return progress

-- moonrl.run.options - the argument checks a run (moonrl.run) and a run of
-- several ranks (moonrl.run.launched) share, so both refuse the same input
-- with the same words. An error names the caller of the method (level 3:
-- the user's line that called run:stop, not the method itself).
--
--   options.check_stop(opts)   run:stop's options: nil or {checkpoint =, reason = "..."}
--   options.pause_marks(v, what) -> sorted list of agent-step counts | nil, err
--                              a number or a list of whole numbers > 0 (pause_at_steps,
--                              run:pause{at_steps =}, `--pause-at-steps`, ctl pause at_steps)
--   options.pause_marks_text(text, what) -> the same from a command line's "N[,N...]"

local options = {}

function options.check_stop(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("run:stop: expected nil or {checkpoint = false, reason = \"...\"}, got " .. type(opts), 3)
  end
  if opts and opts.reason ~= nil and type(opts.reason) ~= "string" then
    error("run:stop: reason must be a string, got " .. type(opts.reason), 3)
  end
end

function options.pause_marks(v, what)
  local list = type(v) == "table" and v or { v }
  local accepted = " (accepted: a whole number of agent-steps > 0, or a list of them)"
  if type(v) ~= "number" and type(v) ~= "table" then
    return nil, what .. ": expected agent-steps, got " .. type(v) .. accepted
  end
  if #list == 0 then return nil, what .. ": an empty list" .. accepted end
  local out = {}
  for i, n in ipairs(list) do
    if type(n) ~= "number" or n ~= math.floor(n) or n < 1 or n >= 2 ^ 52 then
      return nil, what .. ": " .. tostring(n) .. " is not a whole number of agent-steps > 0" .. accepted
    end
    out[i] = n
  end
  table.sort(out)
  return out
end

function options.pause_marks_text(text, what)
  local list = {}
  for x in text:gmatch("[^,]+") do list[#list + 1] = tonumber(x) or x end
  return options.pause_marks(list, what)
end

return options

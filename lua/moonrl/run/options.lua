-- moonrl.run.options - the argument checks a run (moonrl.run) and a run of
-- several ranks (moonrl.run.launched) share, so both refuse the same input
-- with the same words. An error names the caller of the method (level 3:
-- the user's line that called run:stop, not the method itself).
--
--   options.check_stop(opts)   run:stop's options: nil or {checkpoint =, reason = "..."}

local options = {}

function options.check_stop(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("run:stop: expected nil or {checkpoint = false, reason = \"...\"}, got " .. type(opts), 3)
  end
  if opts and opts.reason ~= nil and type(opts.reason) ~= "string" then
    error("run:stop: reason must be a string, got " .. type(opts.reason), 3)
  end
end

return options

-- moonrl.number - the two small number helpers every part of moonrl uses,
-- written once:
--
--   number.finite(x) -> bool          a number that is neither NaN nor +-inf
--   number.finite_value(x) -> x|nil   tonumber(x) when that is finite, else nil
--   number.thousands(n) -> "16,384"   rounded to an integer, with thousands
--                                     separators ("-1,000"); "-" for a non-number

local number = {}

function number.finite(x)
  return type(x) == "number" and x == x and x ~= math.huge and x ~= -math.huge
end

function number.finite_value(x)
  x = tonumber(x)
  if number.finite(x) then return x end
  return nil
end

function number.thousands(n)
  if type(n) ~= "number" then return "-" end
  local s = string.format("%d", math.floor(n + 0.5))
  local sign, digits = s:match("^(-?)(%d+)$")
  if not digits then return s end
  return sign .. digits:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")
end

return number

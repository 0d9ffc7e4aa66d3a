-- The civil (proleptic Gregorian) calendar in whole milliseconds and days since 1970-01-01,
-- for CL.QUOTA's periods and ANCHOR's instants (core/src/calendar.rs); ANCHOR takes the years 0
-- to 9999.

local div_floor = lib.integers.div_floor

local MS_DAY = 86400000
local ANCHOR_MIN, ANCHOR_MAX = -62167219200000, 253402300799999

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = div_floor(y, 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = div_floor(153 * mp + 2, 5) + d - 1
  return era * 146097 + yoe * 365 + div_floor(yoe, 4) - div_floor(yoe, 100) + doy - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = div_floor(z, 146097)
  local doe = z - era * 146097
  local yoe = div_floor(doe - div_floor(doe, 1460) + div_floor(doe, 36524) - div_floor(doe, 146096), 365)
  local doy = doe - (365 * yoe + div_floor(yoe, 4) - div_floor(yoe, 100))
  local mp = div_floor(5 * doy + 2, 153)
  local d = doy - div_floor(153 * mp + 2, 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
end

local function days_in_month(y, m)
  if m == 2 then return ((y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0) and 29 or 28 end
  if m == 4 or m == 6 or m == 9 or m == 11 then return 30 end
  return 31
end

return {
  MS_DAY = MS_DAY, ANCHOR_MIN = ANCHOR_MIN, ANCHOR_MAX = ANCHOR_MAX,
  days_from_civil = days_from_civil, civil_from_days = civil_from_days,
  days_in_month = days_in_month,
}

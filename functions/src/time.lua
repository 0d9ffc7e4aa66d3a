-- The clock: one instant per call, as T (ms, ns within the ms).


-- @clock begin
-- (The seconds' text is compared with the last call's, one pointer as Lua strings are interned,
-- and converted only when it changed.)
local clock_s, clock_ms
local function clock()
  local t = rcall('TIME')
  local s, us = t[1], t[2] + 0 -- (Lua turns the replied digits into numbers)
  if s ~= clock_s then clock_s, clock_ms = s, s * 1000 end
  local sub_ms = us % 1000
  return clock_ms + (us - sub_ms) / 1000, sub_ms * 1000
end
-- @clock end

-- Reply times: seconds as redis-cell rounds them (whole seconds, plus one when the leftover is
-- at least 1 ms: the ceiling of whole milliseconds over 1000), milliseconds rounded up.
local function reply_time(m, u, millis)
  if millis then return u > 0 and m + 1 or m end
  local r = m % 1000
  return (m - r) / 1000 + (r > 0 and 1 or 0)
end

-- The first whole millisecond at or after an instant (a key's expiry).
local function ceil_ms(m, u) return u > 0 and m + 1 or m end

return { clock = clock, reply_time = reply_time, ceil_ms = ceil_ms }

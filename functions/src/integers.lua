-- Integers. T = (m, u): the value m * 10^6 + u, 0 <= u < 10^6, m a plain integer.


local M = 1000000                       -- the T base: nanoseconds per millisecond
local EXACT = 9007199254740992          -- 2^53: plain numbers stay below it
local MAX_M, MAX_U = 9223372036854, 775807   -- i64::MAX as T
local MIN_M, MIN_U = -9223372036855, 224192  -- i64::MIN as T
local MAX_MS = 9223372036854            -- the largest whole millisecond an i64 of ns holds
local MIN_TAT_M = 1000000000000         -- 10^18 ns (kind::MIN_TAT) as T: (10^12, 0)

local function t_add(am, au, bm, bu)
  local m, u = am + bm, au + bu
  if u >= M then return m + 1, u - M end
  return m, u
end

local function t_sub(am, au, bm, bu)
  local m, u = am - bm, au - bu
  if u < 0 then return m - 1, u + M end
  return m, u
end

local function t_lt(am, au, bm, bu) return am < bm or (am == bm and au < bu) end

-- Whether a T is an i64. A T far outside is never exact, but then it is far outside.
local function t_fits(m, u)
  if m > MAX_M or (m == MAX_M and u > MAX_U) then return false end
  return m > MIN_M or (m == MIN_M and u >= MIN_U)
end

-- T >= 0 times a plain 0 <= q < 2^53. A product beyond i64 may be inexact, but stays beyond.
local function t_mul(m, u, q)
  local qh = floor(q / M)
  local ql = q - qh * M
  local lo = u * ql
  local c = floor(lo / M)
  return m * q + u * qh + c, lo - c * M
end

-- T >= 0 times T >= 0.
local function t_mul_t(am, au, bm, bu)
  local hm, hu = t_mul(am, au, bm)      -- a * bm, to be shifted by 10^6
  local lm, lu = t_mul(am, au, bu)
  return t_add(hm * M + hu, 0, lm, lu)
end

-- Floor division of T >= 0 by T >= 1: the quotient and the remainder, both T.
local function t_divmod(nm, nu, dm, du)
  if dm == 0 then
    -- A divisor below 10^6: long division in base 10^6, every step below 2^53.
    local qh = floor(nm / du)
    local x = (nm - qh * du) * M + nu
    local ql = floor(x / du)
    return qh, ql, 0, x - ql * du
  end
  -- A divisor of 10^6 or more: the quotient is below 2^53. Estimate it in floating point (off
  -- by at most one), then correct it with the exact remainder.
  local q = floor((nm + nu / M) / (dm + du / M))
  if q < 0 then q = 0 end
  local pm, pu = t_mul(dm, du, q)
  local rm, ru = t_sub(nm, nu, pm, pu)
  while rm < 0 do
    q = q - 1
    rm, ru = t_add(rm, ru, dm, du)
  end
  while not t_lt(rm, ru, dm, du) do
    q = q + 1
    rm, ru = t_sub(rm, ru, dm, du)
  end
  local qh = floor(q / M)
  return qh, q - qh * M, rm, ru
end

-- A T as a plain number, capped at 2^53 (for comparisons with a limit below it).
local function t_capped(m, u)
  if m > 9007199254 or (m == 9007199254 and u > 740992) then return EXACT end
  if m < -9007200000 then return -EXACT end
  local v = m * M + u
  if v < -EXACT then return -EXACT end
  return v
end

-- Floor division of plain integers (any sign, |a| < 2^53, b >= 1), exact: the quotient's
-- rounding error stays below 1/b, the least distance of a non-integer quotient to an integer,
-- so Lua's a % b (a - floor(a/b) * b) is exact.
local function div_floor(a, b)
  return (a - a % b) / b
end

-- Ceiling division of a plain a >= 0 by b >= 1.
local function div_ceil(a, b)
  local r = a % b
  return (a - r) / b + (r > 0 and 1 or 0)
end

-- Parses a base-10 signed 64-bit integer exactly as Redis's string2ll: an optional '-', no
-- '+', no spaces, no leading zeros. Returns the T, or nothing.
local function parse_i64(s)
  local n = #s
  if n == 0 or n > 20 then return nil end
  if not find(s, '^%-?[1-9]%d*$') then
    if s == '0' then return 0, 0 end
    return nil
  end
  local neg = byte(s) == 45
  local digits = neg and n - 1 or n
  if digits <= 6 then
    local v = tonumber(neg and sub(s, 2) or s)
    if neg then return -1, M - v end
    return 0, v
  end
  if digits > 19 then return nil end
  local m, u = tonumber(sub(s, neg and 2 or 1, -7)), tonumber(sub(s, -6))
  if neg then
    if m > -MIN_M - 1 or (m == -MIN_M - 1 and u > M - MIN_U) then return nil end
    if u > 0 then return -m - 1, M - u end
    return -m, 0
  end
  if m > MAX_M or (m == MAX_M and u > MAX_U) then return nil end
  return m, u
end

-- The decimal text of a T (as Rust prints an i64).
-- The decimal text of a plain integer.
local function int_text(v) return fmt('%d', v) end

local function t_text(m, u)
  if m >= 0 then
    if m == 0 then return fmt('%d', u) end
    return fmt('%d%06d', m, u)
  end
  if u > 0 then m, u = -m - 1, M - u else m = -m end
  if m == 0 then return fmt('-%d', u) end
  return fmt('-%d%06d', m, u)
end

-- Little-endian i64 (two's complement) of a T within i64.
local function t_le(m, u)
  if m < 0 then -- add 2^64 = 18446744073709 * 10^6 + 551616
    m, u = t_add(m, u, 18446744073709, 551616)
  end
  local ml = m % 65536
  local x = ml * M + u                  -- value = ((m - ml) / 65536 * 10^6) * 65536 + x
  local b01 = x % 65536
  local y = (m - ml) / 65536 * M + (x - b01) / 65536   -- value = y * 65536 + b01, y < 2^48
  local b0 = b01 % 256
  local y0 = y % 256; y = (y - y0) / 256
  local y1 = y % 256; y = (y - y1) / 256
  local y2 = y % 256; y = (y - y2) / 256
  local y3 = y % 256; y = (y - y3) / 256
  local y4 = y % 256
  return char(b0, (b01 - b0) / 256, y0, y1, y2, y3, y4, (y - y4) / 256)
end

-- The T of the little-endian i64 at byte `i` (1-based) of `s`.
local function le_t(s, i)
  local b0, b1, b2, b3, b4, b5, b6, b7 = byte(s, i, i + 7)
  local h = ((((b7 * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 256 + b2   -- < 2^48
  if b7 >= 128 then h = h - 281474976710656 end
  -- value = h * 65536 + g0, and 15625 * 65536 = 1024 * 10^6
  local hr = h % 15625
  local rem = hr * 65536 + b1 * 256 + b0
  local r = rem % M
  return (h - hr) / 15625 * 1024 + (rem - r) / M, r
end

-- The little-endian u32 at byte `i` (1-based).
local function le_u32(s, i)
  local b0, b1, b2, b3 = byte(s, i, i + 3)
  return ((b3 * 256 + b2) * 256 + b1) * 256 + b0
end

local function u32_le(v)
  local b0 = v % 256; v = (v - b0) / 256
  local b1 = v % 256; v = (v - b1) / 256
  local b2 = v % 256
  return char(b0, b1, b2, (v - b2) / 256)
end

-- The i64 bytes of a plain integer (|v| < 2^53).
local function int_le(v)
  local m = floor(v / M)
  return t_le(m, v - m * M)
end

-- `s` repeated n times, by doubling (string.rep adds byte by byte: 10x slower for long runs).
local function repeat_of(s, n)
  if n < 32 then return rep(s, n) end
  local out, have = s, 1
  while have * 2 <= n do out, have = out .. out, have * 2 end
  return out .. repeat_of(s, n - have)
end

-- The n i64 values at byte i (1-based) of s, decoded in C, as an array from 0 (plain numbers:
-- exact below 2^53, the sign kept).
-- Decoded lazily, 256 values at a time, as the call first reads one of them (a call that skips
-- runs of equal counts by comparing their bytes decodes only the blocks it reads).
local function i64_array(s, i, n)
  local blocks = {}
  return setmetatable({}, { __index = function(out, slot)
    if type(slot) ~= 'number' or slot < 0 or slot >= n then return nil end
    local b = slot - slot % 256
    if blocks[b] then return nil end
    blocks[b] = true
    local take = n - b
    if take > 256 then take = 256 end
    local t = { unpack(take == 256 and unpack_i8 or '<' .. rep('i8', take), s, i + b * 8) }
    for j = 1, take do out[b + j - 1] = t[j] end
    return t[slot - b + 1]
  end })
end

return {
  M = M, EXACT = EXACT, MAX_M = MAX_M, MAX_U = MAX_U, MIN_M = MIN_M, MIN_U = MIN_U,
  MAX_MS = MAX_MS, MIN_TAT_M = MIN_TAT_M, t_add = t_add, t_sub = t_sub, t_lt = t_lt,
  t_fits = t_fits, t_mul = t_mul, t_mul_t = t_mul_t, t_divmod = t_divmod, t_capped = t_capped,
  div_floor = div_floor, div_ceil = div_ceil, parse_i64 = parse_i64, int_text = int_text,
  t_text = t_text, t_le = t_le, le_t = le_t, le_u32 = le_u32, u32_le = u32_le, int_le = int_le,
  repeat_of = repeat_of, i64_array = i64_array,
}

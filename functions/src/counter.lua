-- CL.COUNTER: a fixed window counter (core/src/counter.rs). The count (a decimal) on a key
-- expiring when the window closes; all its instants are whole milliseconds.

local errors, integers = lib.errors, lib.integers
local BOUND, ERR, fail, refusal = errors.BOUND, errors.ERR, errors.fail, errors.refusal
local M, MAX_M, MAX_MS, MAX_U = integers.M, integers.MAX_M, integers.MAX_MS, integers.MAX_U
local int_text, parse_i64, t_capped = integers.int_text, integers.parse_i64, integers.t_capped
local t_add, t_sub, t_text = integers.t_add, integers.t_sub, integers.t_text
local decision, invalid = lib.kinds.decision, lib.kinds.invalid

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

-- A count (T) plus the units a debit (quantity qm, qu > 0) counts, within the stored range
-- (below 10^18: the stored forms stay disjoint).
local function debited(cm, cu, qm, qu)
  local km, ku = t_add(cm, cu, qm, qu)
  if km > 999999999999 then fail(fmt(ERR.debit_too_large, BOUND.counter_limit)) end
  return km, ku
end

-- `debit` (quantity above 0 with DEBIT): the units are counted whatever the limit says (the
-- count may pass it), `limited` telling whether they overdrew.
local function counter_decide(p, stored, expiry_ms, nm, nu, qm, qu, q, debit)
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
  if not debit then
    if q > p.limit then return denied(reply(1, count)) end
    if count + q > p.limit then return denied(reply(1, count, um, uu)) end
    if q == 0 then return reply(0, count) end
  end
  if not open then
    local start = nm
    closes = start + p.window
    if closes > MAX_MS then fail(ERR.too_large) end
    um, uu = t_sub(closes, 0, nm, nu)
  end
  if debit then
    -- Retry (a take of q after the debit): when the window closes; never for q above the limit.
    local km, ku = debited(cm, cu, qm, qu)
    local d
    if q > p.limit then d = reply(1, t_capped(km, ku))
    elseif count + q > p.limit then d = reply(1, t_capped(km, ku), um, uu)
    else d = reply(0, t_capped(km, ku)) end
    d.eff, d.value, d.at = 'set', t_text(km, ku), expiry()
    return d
  end
  local c = count + q
  local d = reply(0, c)
  d.eff, d.value, d.at = 'set', int_text(c), expiry()
  return d
end

return {
  counter_params = counter_params, stamped_at = stamped_at, refunded = refunded, debited = debited,
  counter_decide = counter_decide,
}

-- CL.THROTTLE: GCRA, redis-cell's algorithm and stored form (core/src/throttle.rs).

local errors, integers, kinds = lib.errors, lib.integers, lib.kinds
local BOUND, ERR, fail, refusal = errors.BOUND, errors.ERR, errors.fail, errors.refusal
local M, MAX_M, MAX_U, MIN_TAT_M = integers.M, integers.MAX_M, integers.MAX_U, integers.MIN_TAT_M
local parse_i64, t_add, t_capped = integers.parse_i64, integers.t_add, integers.t_capped
local t_divmod, t_fits, t_lt = integers.t_divmod, integers.t_fits, integers.t_lt
local t_mul, t_mul_t, t_sub = integers.t_mul, integers.t_mul_t, integers.t_sub
local t_text = integers.t_text
local ceil_ms = lib.time.ceil_ms
local decision, invalid, since = kinds.decision, kinds.invalid, kinds.since

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

-- The last TAT text written, and its value, are kept in `last_tat`, `last_am` and `last_au`
-- (main.lua): a hot key's next call reads it back, and skips parsing it.

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
-- (D3, text_m, text_m_digits: main.lua)
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
-- none), the span from now to the TAT after the call, and whether that TAT is written; or
-- nothing for a TAT 2^52 ns or more ahead (a debt: the general path).
local function gcra_step(tol, ei, limit, am, au, nm, nu, q)
  local ttl = 0
  if am then
    local dm = am - nm -- the TAT's offset from now, at least 0
    if dm >= 4503599627 then return nil end
    if dm > -4503599627 then
      local off = dm * M + (au - nu)
      if off > 0 then ttl = off end
    end
  end
  local limited, span, retry, write = 0, ttl, nil, false
  if q < 0 then
    span, write = 0, true
    if -q * ei < ttl then span = ttl + q * ei end
  elseif q > limit then
    limited = 1
  elseif ttl + ei * q > tol then
    limited, retry = 1, ttl + ei * q - tol
  else
    span, write = ttl + ei * q, q ~= 0
  end
  -- remaining = floor((tolerance - span) / interval), within [0, limit] as tolerance = interval
  -- * limit; none when the TAT is beyond the tolerance (debt)
  local free = tol - span
  if free < 0 then return limited, 0, retry, span, write end
  return limited, (free - free % ei) / ei, retry, span, write
end

-- The fast path of gcra_decide (tolerance below 2^52 ns), as a decision; nil where it is not
-- taken (see gcra_step).
local function gcra_fast(p, am, au, nm, nu, q)
  local limit = p.limit
  local limited, remaining, retry, span, write = gcra_step(p.tol, p.ei, limit, am, au, nm, nu, q)
  if not limited then return nil end
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

-- A stored TAT is honoured however far ahead it lies (a debit leaves TATs beyond now +
-- tolerance; a clock step and a debt cannot be told apart, and forgiving a debt over-admits).
-- `debit` (quantity above 0 with DEBIT): the TAT moves on by the units whatever the limit says.
local function gcra_decide(p, stored, nm, nu, qm, qu, q, held, debit)
  local am, au -- the TAT
  if stored then
    am, au = tat_of(stored)
    if not am then invalid('throttle', stored) end
  end
  if p.tol and nm < p.fast_until and not held and not debit then
    local d = gcra_fast(p, am, au, nm, nu, q)
    if d then return d end
  end
  if am == nil or t_lt(am, au, nm, nu) then am, au = nm, nu end
  local tlm, tlu = t_sub(am, au, nm, nu)          -- ttl

  if q < 0 then
    -- A refund moves the TAT back by the units returned (exact: a debt may put the TAT
    -- beyond any tolerance), stopping at now (full).
    local bm, bu = t_sub(0, 0, qm, qu)
    bm, bu = t_mul_t(p.em, p.eu, bm, bu)
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
  if debit then
    -- The increment (q * interval, exact for any q) within the duration range, the new TAT an
    -- instant; limited when the same take would have been denied. Retry: when a take of q
    -- would be admitted after the debit (never, for q above the limit).
    local im, iu = t_mul_t(p.em, p.eu, qm, qu)
    if im > 1000000000000 or (im == 1000000000000 and iu > 0) then fail(fmt(ERR.span, BOUND.debit_throttle_span)) end
    local xm, xu = t_add(am, au, im, iu)
    if not t_fits(xm, xu) then fail(ERR.too_large) end
    local limited, rm, ru = 0, nil, nil
    local wm, wu = t_sub(xm, xu, p.tm, p.tu)       -- allowed at, for this call
    if q > p.limit then
      limited = 1
    elseif t_lt(nm, nu, wm, wu) then
      -- `new_TAT − (tolerance − increment)`: the increment is within the tolerance (q within
      -- the limit), so the retry instant is never past the new TAT and never overflows.
      rm, ru = t_sub(p.tm, p.tu, im, iu)
      rm, ru = t_sub(xm, xu, rm, ru)
      rm, ru = t_sub(rm, ru, nm, nu)
      limited = 1
    end
    local sm, su = t_sub(xm, xu, nm, nu)
    local d = gcra_reply(p, limited, sm, su, rm, ru)
    d.eff, d.value, d.at = 'set', t_text(xm, xu), ceil_ms(xm, xu)
    return d
  end
  if q > p.limit then return gcra_reply(p, 1, tlm, tlu) end
  local im, iu = t_mul(p.em, p.eu, q)              -- increment
  local xm, xu = t_add(am, au, im, iu)             -- new TAT
  if not t_fits(xm, xu) then fail(ERR.too_large) end
  local wm, wu = t_sub(xm, xu, p.tm, p.tu)         -- allowed at
  if t_lt(nm, nu, wm, wu) then
    local rm, ru = t_sub(wm, wu, nm, nu)
    return gcra_reply(p, 1, tlm, tlu, rm, ru)
  end
  local sm, su = t_sub(xm, xu, nm, nu)
  local d = gcra_reply(p, 0, sm, su)
  if q ~= 0 then d.eff, d.value, d.at = 'set', t_text(xm, xu), ceil_ms(xm, xu) end
  return d
end

return {
  gcra_params = gcra_params, tat_of = tat_of, instant_ms = instant_ms, gcra_step = gcra_step,
  gcra_decide = gcra_decide,
}

-- CL.BUCKET: a token bucket refilled by whole intervals (core/src/bucket.rs). The key holds
-- minus the deficit and expires when the bucket is full.

local errors, integers, kinds = lib.errors, lib.integers, lib.kinds
local BOUND, ERR, fail, refusal = errors.BOUND, errors.ERR, errors.fail, errors.refusal
local EXACT, M, MAX_M, MAX_MS = integers.EXACT, integers.M, integers.MAX_M, integers.MAX_MS
local MAX_U, int_text = integers.MAX_U, integers.int_text
local MIN_M, MIN_U, div_ceil, div_floor = integers.MIN_M, integers.MIN_U, integers.div_ceil, integers.div_floor
local parse_i64, t_add, t_capped = integers.parse_i64, integers.t_add, integers.t_capped
local t_divmod, t_fits, t_lt, t_mul = integers.t_divmod, integers.t_fits, integers.t_lt, integers.t_mul
local t_mul_t, t_sub, t_text = integers.t_mul_t, integers.t_sub, integers.t_text
local ceil_ms = lib.time.ceil_ms
local decision, invalid, since = kinds.decision, kinds.invalid, kinds.since
local stamped_at = lib.counter.stamped_at

local function bucket_params(cm, cu, tm, tu, interval_ms)
  if cm < 0 or (cm == 0 and cu == 0) then fail(fmt(ERR.range, 'capacity', '1', BOUND.i64_max)) end
  if tm < 0 or (tm == 0 and tu == 0) then fail(fmt(ERR.range, 'tokens', '1', BOUND.i64_max)) end
  -- The refill of an empty bucket, interval * ceil(capacity / tokens), at most 10^18 ns.
  local qm, qu, rm, ru = t_divmod(cm, cu, tm, tu)
  if rm ~= 0 or ru ~= 0 then qm, qu = t_add(qm, qu, 0, 1) end
  if qm >= 9007199254 or t_capped(qm, qu) * interval_ms > 1000000000000 then fail(fmt(ERR.span, BOUND.bucket_span)) end
  local capacity = t_capped(cm, cu)
  -- Tokens beyond 2^53 exceed every deficit: 2^53 refills the same.
  -- (`plain`: tokens below 2^53, bucket_decide's plain numbers)
  return {
    capacity = capacity, tokens = t_capped(tm, tu), tm = tm, tu = tu, interval = interval_ms,
    plain = tm < 9007199254, refuse = refusal(capacity, 'capacity'),
  }
end

-- A plain integer 0 <= v < 2^53 as T.
local function T(v)
  local m = floor(v / M)
  return m, v - m * M
end

-- Deficits are T: a debit leaves debt beyond the capacity, up to an i64 (and a bucket holding
-- one is read as it is). Instants are ms, but for `next_refill` and what follows from it, T:
-- a key without an expiry is full at the last instant an i64 of ns holds, not a whole ms.

-- The refills making up a deficit (T > 0), ceil(d / tokens), as T.
local function refills(p, dm, du)
  local qm, qu, rm, ru = t_divmod(dm, du, p.tm, p.tu)
  if rm ~= 0 or ru ~= 0 then qm, qu = t_add(qm, qu, 0, 1) end
  return qm, qu
end

-- Whether a T value is at most `most` (T).
local function at_most(xm, xu, mm, mu) return not t_lt(mm, mu, xm, xu) end

local MAX_MS_M, MAX_MS_U = 9223372, 36854 -- MAX_MS as T

-- bucket_decide's rules with every deficit T (see bucket_decide).
local function bucket_exact(p, stored, expiry_ms, nm, nu, qm, qu, q, held, debit)
  local I, capacity = p.interval, p.capacity
  local CM, CU = T(capacity)
  local dm, du = 0, 0 -- the deficit now
  local had = false -- the stored bucket was not yet full
  local stepped = false
  local start = nm -- the refill clock starts on the whole ms at or before now
  local rm, ru -- the next refill after now
  if stored then
    local vm, vu = parse_i64(stored)
    -- -deficit with deficit >= 1
    if not vm or vm >= 0 or (vm == MIN_M and vu < MIN_U + 1) then invalid('bucket', stored) end
    local sm, su = t_sub(0, 0, vm, vu)
    -- Full at its expiry: none (or beyond the ns range) reads as the last instant an i64 holds.
    local fm, fu = stamped_at(expiry_ms), 0
    if fm == nil then fm, fu = MAX_M, MAX_U end
    had = t_lt(nm, nu, fm, fu)
    -- A bucket is full at most ceil(deficit / tokens) refills after the clock's start (debt
    -- included); a later full_at (the clock stepped back, the parameters were lowered, the key
    -- lost its expiry) restarts the grid.
    local nm_, nu_ = refills(p, sm, su)
    local wm, wu = t_mul(nm_, nu_, I)
    local cm, cu = t_add(wm, wu, T(start))
    if at_most(wm, wu, MAX_MS_M, MAX_MS_U) and at_most(cm, cu, MAX_MS_M, MAX_MS_U) then
      local ceiling = t_capped(cm, cu)
      if t_lt(ceiling, 0, fm, fu) then fm, fu, stepped = ceiling, 0, true end
    end
    if t_lt(nm, nu, fm, fu) then
      -- refills still ahead: ceil((full_at - now) / interval), a refill at now has happened
      local xm, xu = t_sub(fm, fu, nm, nu)
      local ahead = xu == 0 and div_ceil(xm, I) or div_floor(xm, I) + 1
      local am, au = T(ahead)
      if t_lt(nm_, nu_, am, au) then ahead, am, au = t_capped(nm_, nu_), nm_, nu_ end
      -- deficit - (n - ahead) * tokens
      local km, ku = t_sub(nm_, nu_, am, au)
      km, ku = t_mul_t(km, ku, p.tm, p.tu)
      dm, du = t_sub(sm, su, km, ku)
      rm, ru = fm - (ahead - 1) * I, fu
    else
      stepped = false
    end
  end
  local empty = dm == 0 and du == 0
  if empty then
    stepped = false
    rm, ru = start + I, 0
    if rm > MAX_MS then fail(ERR.too_large) end
  end
  -- The refill at which the deficit (T) is at most `target` (plain), nil meaning now.
  local function covering(xm, xu, target)
    local mm, mu = t_sub(xm, xu, T(target))
    if mm < 0 or (mm == 0 and mu == 0) then return nil end
    local km, ku = refills(p, mm, mu)
    km, ku = t_sub(km, ku, 0, 1)
    km, ku = t_mul(km, ku, I) -- the later refills, in ms
    if not at_most(km, ku, MAX_MS_M, MAX_MS_U) then fail(ERR.too_large) end
    local am, au = rm + t_capped(km, ku), ru
    if not t_fits(am, au) then fail(ERR.too_large) end
    return am, au
  end
  local function until_(am, au)
    if am == nil then return 0, 0 end
    return since(am, au, nm, nu)
  end
  local reset_m, reset_u = until_(covering(dm, du, 0))
  local deficit = t_capped(dm, du) -- (for the reply: remaining is 0 beyond the capacity)
  -- (A denied take stores a bucket pulled back; a peek, of a bucket in debt, stays pure.)
  local function denied(d)
    if stepped and not empty and q ~= 0 then d.eff, d.value, d.at = 'set', '-' .. t_text(dm, du), ceil_ms(covering(dm, du, 0)) end
    return d
  end
  local function settle(xm, xu)
    local am, au = covering(xm, xu, 0)
    local sm, su = until_(am, au)
    local d = decision(0, capacity, t_capped(xm, xu), nil, nil, sm, su)
    if xm == 0 and xu == 0 then
      if had then d.eff = 'del' end
    else
      d.eff, d.value, d.at = 'set', '-' .. t_text(xm, xu), ceil_ms(am, au)
    end
    return d
  end

  if q < 0 then
    local um, uu = t_sub(0, 0, qm, qu) -- the units given back
    if held then
      -- HELD: at most the tokens the grid's refills from now to `held` would still add
      -- (core's bucket::held_units); nothing once now is at `held`.
      um, uu = 0, 0
      if nm < held and not empty and not t_lt(held, 0, rm, ru) then
        local xm = t_sub(held, 0, rm, ru)
        local gm, gu = T(div_floor(xm, I) + 1)
        local bm, bu = t_mul_t(gm, gu, p.tm, p.tu)
        um, uu = t_sub(0, 0, qm, qu)
        if t_lt(bm, bu, um, uu) then um, uu = bm, bu end
        if t_lt(dm, du, um, uu) then um, uu = dm, du end
      end
      if um == 0 and uu == 0 then return decision(0, capacity, deficit, nil, nil, reset_m, reset_u) end
    end
    local xm, xu = t_sub(dm, du, um, uu)
    if xm < 0 then xm, xu = 0, 0 end
    return settle(xm, xu)
  end
  if debit then
    -- The new deficit an i64 whose refills span a duration (10^12 ms).
    local xm, xu = t_add(dm, du, debit[1], debit[2])
    if not t_fits(xm, xu) then fail(fmt(ERR.span, BOUND.debit_bucket_span)) end
    local wm, wu = refills(p, xm, xu)
    wm, wu = t_mul(wm, wu, I)
    if not at_most(wm, wu, 1000000, 0) then fail(fmt(ERR.span, BOUND.debit_bucket_span)) end
    local d = settle(xm, xu)
    if q > capacity then
      d[1] = 1
    elseif t_lt(CM, CU, xm, xu) then
      -- until a draw of q would be admitted on the bucket after the debit
      d[1], d.rm, d.ru = 1, until_(covering(xm, xu, capacity - q))
    end
    return d
  end
  if q > capacity then return denied(decision(1, capacity, deficit, nil, nil, reset_m, reset_u)) end
  local xm, xu = t_add(dm, du, T(q))
  if t_lt(CM, CU, xm, xu) then
    local em, eu = until_(covering(dm, du, capacity - q))
    return denied(decision(1, capacity, deficit, em, eu, reset_m, reset_u))
  end
  if q == 0 then return decision(0, capacity, deficit, nil, nil, reset_m, reset_u) end
  return settle(xm, xu)
end

local function plain_refills(p, d) return div_ceil(d, p.tokens) end

-- `qm, qu`: the quantity (T; `q` capped). `debit` (quantity above 0 with DEBIT): the tokens are
-- drawn whatever the capacity says (the deficit may pass it: debt), `limited` telling whether
-- the same draw would have been denied.
-- In plain numbers (every deficit below 2^53, the key expiring at a whole ms, tokens below
-- 2^53: any bucket a realistic rate leaves), else bucket_exact's T.
local function bucket_decide(p, stored, expiry_ms, nm, nu, qm, qu, q, held, debit)
  if not p.plain then return bucket_exact(p, stored, expiry_ms, nm, nu, qm, qu, q, held, debit) end
  local full_at -- ms; nil: no expiry (or beyond the ns range)
  local deficit = 0
  local had = false -- the stored bucket was not yet full
  local stepped = false
  local start = nm -- the refill clock starts on the whole ms at or before now
  local I, capacity = p.interval, p.capacity
  local next_refill
  if stored then
    local vm, vu = parse_i64(stored)
    -- -deficit with deficit >= 1
    if not vm or vm >= 0 or (vm == MIN_M and vu < MIN_U + 1) then invalid('bucket', stored) end
    if vm < -9007199254 then return bucket_exact(p, stored, expiry_ms, nm, nu, qm, qu, q, held, debit) end
    local d = -(vm * M + vu)
    full_at = stamped_at(expiry_ms)
    had = full_at == nil or full_at > nm
    -- A bucket is full at most ceil(deficit / tokens) refills after the clock's start (debt
    -- included); a later full_at (the clock stepped back, the parameters were lowered, the key
    -- lost its expiry) restarts the grid.
    local span = plain_refills(p, d) * I
    local ceiling = start + span
    if span <= MAX_MS and ceiling <= MAX_MS and (full_at == nil or full_at > ceiling) then
      full_at, stepped = ceiling, true
    end
    if full_at == nil then return bucket_exact(p, stored, expiry_ms, nm, nu, qm, qu, q, held, debit) end
    if full_at > nm then
      local n = plain_refills(p, d)
      -- refills still ahead: ceil((full_at - now) / interval), a refill at now has happened
      local x = full_at - nm
      local ahead = nu == 0 and div_ceil(x, I) or div_floor(x - 1, I) + 1
      if ahead > n then ahead = n end
      deficit = d - (n - ahead) * p.tokens
      next_refill = full_at - (ahead - 1) * I
    else
      stepped = false
    end
  end
  if deficit == 0 then
    stepped = false
    next_refill = start + I
    if next_refill > MAX_MS then fail(ERR.too_large) end
  end
  -- The refill at which the deficit is at most `target` (ms), nil meaning now.
  local function covering(def, target)
    local missing = def - target
    if missing <= 0 then return nil end
    local at = next_refill + (plain_refills(p, missing) - 1) * I
    if at > MAX_MS then fail(ERR.too_large) end
    return at
  end
  local function until_(at)
    if at == nil then return 0, 0 end
    return since(at, 0, nm, nu)
  end
  local reset_m, reset_u = until_(covering(deficit, 0))
  -- (A denied take stores a bucket pulled back; a peek, of a bucket in debt, stays pure.)
  local function denied(d)
    if stepped and deficit > 0 and q ~= 0 then d.eff, d.value, d.at = 'set', '-' .. int_text(deficit), covering(deficit, 0) end
    return d
  end
  local function settle(def)
    local at = covering(def, 0)
    local sm, su = until_(at)
    local d = decision(0, capacity, def, nil, nil, sm, su)
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
        bound = (div_floor(held - next_refill, I) + 1) * p.tokens
        if bound > -q then bound = -q end
        if bound > deficit then bound = deficit end
      end
      if bound == 0 then return decision(0, capacity, deficit, nil, nil, reset_m, reset_u) end
      q = -bound
    end
    local def = deficit + q
    if def < 0 then def = 0 end
    return settle(def)
  end
  if debit then
    local def = deficit + q
    if def >= EXACT then return bucket_exact(p, stored, expiry_ms, nm, nu, qm, qu, q, held, debit) end
    -- The refills covering the new deficit span a duration (10^12 ms).
    if plain_refills(p, def) * I > 1000000000000 then fail(fmt(ERR.span, BOUND.debit_bucket_span)) end
    local d = settle(def)
    if q > capacity then
      d[1] = 1
    elseif def > capacity then
      -- until a draw of q would be admitted on the bucket after the debit
      d[1], d.rm, d.ru = 1, until_(covering(def, capacity - q))
    end
    return d
  end
  if q > capacity then return denied(decision(1, capacity, deficit, nil, nil, reset_m, reset_u)) end
  if deficit + q > capacity then
    local rm, ru = until_(covering(deficit, capacity - q))
    return denied(decision(1, capacity, deficit, rm, ru, reset_m, reset_u))
  end
  if q == 0 then return decision(0, capacity, deficit, nil, nil, reset_m, reset_u) end
  return settle(deficit + q)
end

return { bucket_params = bucket_params, bucket_decide = bucket_decide }

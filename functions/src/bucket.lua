-- CL.BUCKET: a token bucket refilled by whole intervals (core/src/bucket.rs). The key holds
-- minus the deficit and expires when the bucket is full; every instant is a whole ms.

local errors, integers, kinds = lib.errors, lib.integers, lib.kinds
local BOUND, ERR, fail, refusal = errors.BOUND, errors.ERR, errors.fail, errors.refusal
local MAX_MS, MIN_M, MIN_U = integers.MAX_MS, integers.MIN_M, integers.MIN_U
local div_ceil, div_floor, int_text = integers.div_ceil, integers.div_floor, integers.int_text
local parse_i64, t_add, t_capped = integers.parse_i64, integers.t_add, integers.t_capped
local t_divmod, t_sub = integers.t_divmod, integers.t_sub
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

return { bucket_params = bucket_params, bucket_decide = bucket_decide }

-- CL.WINDOW (core/src/window.rs): a sliding window, exact (a log of instants, layout 1) or
-- counted per bucket of PRECISION p (a ring, layout 2).

local errors = lib.errors
local BOUND, ERR, fail, refusal = errors.BOUND, errors.ERR, errors.fail, errors.refusal
local t_capped = lib.integers.t_capped
local decision, since = lib.kinds.decision, lib.kinds.since

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

return {
  MAX_EXACT_LIMIT = MAX_EXACT_LIMIT, RING_MAX_SLOTS = RING_MAX_SLOTS, window_params = window_params, verdict = verdict,
  window_reply = window_reply, emptied = emptied, READ_WHOLE = READ_WHOLE, LONG = LONG,
  read_window = read_window, whole = whole,
}

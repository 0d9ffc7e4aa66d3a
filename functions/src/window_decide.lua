-- A CL.WINDOW call's decision (core/src/window.rs): the stored value, either layout, read as
-- the call's own (converted by window_to_buckets.lua or window_to_exact.lua), and the units a
-- bounded refund (HELD) may stand for.

local integers, window, window_exact, window_buckets = lib.integers, lib.window, lib.window_exact, lib.window_buckets
local div_ceil, div_floor, t_lt, t_sub = integers.div_ceil, integers.div_floor, integers.t_lt, integers.t_sub
local invalid = lib.kinds.invalid
local whole = window.whole
local EMPTY_LOG, exact_decide, log_at = window_exact.EMPTY_LOG, window_exact.exact_decide, window_exact.log_at
local log_first_after, log_parse = window_exact.log_first_after, window_exact.log_parse
local beyond, read_ring = window_buckets.beyond, window_buckets.read_ring
local ring_count, ring_decide = window_buckets.ring_count, window_buckets.ring_decide
local ring_is_ahead, ring_parse = window_buckets.ring_is_ahead, window_buckets.ring_parse
local log_as_ring_reply, log_to_ring = lib.window_to_buckets.log_as_ring_reply, lib.window_to_buckets.log_to_ring
local ring_regroup = lib.window_to_buckets.ring_regroup
local ring_log_reply, ring_to_log = lib.window_to_exact.ring_log_reply, lib.window_to_exact.ring_to_log

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
-- `debit`: see exact_decide and ring_decide (a debit converts as an admission does).
local function window_decide(p, stored, nm, nu, q, dry, held, debit)
  if held and q < 0 then
    q = -window_held_units(p, stored, nm, nu, -q, held)
  end
  read_ring(nil)
  if stored == nil then
    if p.precision then return ring_decide(p, nil, nm, nu, q, nil, nil, dry, debit) end
    return exact_decide(p, EMPTY_LOG, nm, nu, q, nil, nil, debit)
  end
  local version
  if type(stored) == 'table' then
    -- A long value: an exact call reads its log in ranges; anything else reads it whole.
    if byte(stored.s) == 1 then
      local log = log_parse(stored.s, stored)
      if log and not p.precision then return exact_decide(p, log, nm, nu, q, nil, nil, debit) end
      if log then
        local d = not debit and log_as_ring_reply(p, log, nm, nu, q, dry)
        if d then return d end
        local converted, ahead = log_to_ring(p, log, nm, nu, q)
        return ring_decide(p, converted, nm, nu, q, true, ahead, dry, debit)
      end
    end
    stored = whole(stored)
  end
  version = byte(stored)
  local log = version == 1 and log_parse(stored) or nil
  local ring = version == 2 and ring_parse(stored) or nil
  read_ring(ring and stored)
  if ring and q < 0 and not p.precision then
    -- A refund on a ring read without PRECISION is decided on the ring, in its own precision
    -- (its smallest multiple spanning the window in at most 100,000 buckets), and the ring
    -- stays: a log would keep only the newest limit + 1 units to give back from (core's
    -- window::decide and buckets::refund_precision).
    if ring.pu ~= 0 then beyond() end
    local P, W = ring.pm, p.window
    if div_ceil(W, P) > 100000 then P = P * div_ceil(div_ceil(W, 100000), P) end
    p = { limit = p.limit, window = W, precision = P, refuse = p.refuse }
  end
  if p.precision then
    if ring then
      -- Another precision or length, or stamped ahead: regrouped into the call's own first.
      local P, W = p.precision, p.window
      local slots, ahead = div_ceil(W, P) + 1, ring_is_ahead(ring, nm, W)
      if ring.pm == P and ring.pu == 0 and ring.slots == slots and not ahead then
        return ring_decide(p, ring, nm, nu, q, nil, nil, dry, debit)
      end
      local current = div_floor(nm, P)
      local regrouped = ring_regroup(ring, P, slots, div_floor(nm - W, P), current, current + slots - 1)
      return ring_decide(p, regrouped, nm, nu, q, true, ahead, dry, debit)
    end
    if log then
      local d = not debit and log_as_ring_reply(p, log, nm, nu, q, dry)
      if d then return d end
      local converted, ahead = log_to_ring(p, log, nm, nu, q)
      return ring_decide(p, converted, nm, nu, q, true, ahead, dry, debit)
    end
  else
    if log then return exact_decide(p, log, nm, nu, q, nil, nil, debit) end
    if ring then
      local converted, ahead = ring_to_log(p, ring, nm, nu, dry and not debit)
      if converted.counted then
        return ring_log_reply(p, ring, nm, nu, q, converted) or window_decide(p, stored, nm, nu, q)
      end
      return exact_decide(p, converted, nm, nu, q, ahead, dry, debit)
    end
  end
  invalid('window', stored)
end

return { window_decide = window_decide }

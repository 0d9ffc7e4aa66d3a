-- CL.WINDOW state read as a call's own buckets (PRECISION): a ring of another precision or
-- length (or stamped ahead) regrouped, an exact log counted into buckets (PRECISION added on
-- a live key), as core/src/window/buckets.rs converts them.

local integers, window_buckets = lib.integers, lib.window_buckets
local ERR, fail = lib.errors.ERR, lib.errors.fail
local EXACT, M, div_ceil, div_floor = integers.EXACT, integers.M, integers.div_ceil, integers.div_floor
local int_le, le_t, repeat_of = integers.int_le, integers.le_t, integers.repeat_of
local t_lt, t_sub = integers.t_lt, integers.t_sub
local emptied, verdict, window_reply = lib.window.emptied, lib.window.verdict, lib.window.window_reply
local CHUNK = lib.window_exact.CHUNK
local log_at, log_bytes = lib.window_exact.log_at, lib.window_exact.log_bytes
local log_first_after = lib.window_exact.log_first_after
local add_count, beyond, bucket_leaves = window_buckets.add_count, window_buckets.beyond, window_buckets.bucket_leaves
local ring_count, ring_count_at = window_buckets.ring_count, window_buckets.ring_count_at
local ring_count_at_slot, ring_empty = window_buckets.ring_count_at_slot, window_buckets.ring_empty
local ring_slot = window_buckets.ring_slot

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

-- ---- Switching layouts on a live key (PRECISION added).

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

return { ring_regroup = ring_regroup, log_to_ring = log_to_ring, log_as_ring_reply = log_as_ring_reply }

-- CL.WINDOW's ring (layout 2): header [2, 0 x7, p i64, newest i64], then m = ceil(W/p) + 1 u64
-- counts, slot k mod m holding bucket k. Here every bucket index and time is in whole ms.
-- Then the switches between layouts on a live key, and a CL.WINDOW call's decision
-- (`window_decide`: the stored value, either layout, read as the call's own).

local integers, window, window_exact = lib.integers, lib.window, lib.window_exact
local ERR, fail = lib.errors.ERR, lib.errors.fail
local EXACT, M, MAX_MS, div_ceil = integers.EXACT, integers.M, integers.MAX_MS, integers.div_ceil
local div_floor, i64_array, int_le = integers.div_floor, integers.i64_array, integers.int_le
local le_t, repeat_of, t_add = integers.le_t, integers.repeat_of, integers.t_add
local t_fits, t_le, t_lt, t_sub = integers.t_fits, integers.t_le, integers.t_lt, integers.t_sub
local invalid = lib.kinds.invalid
local RING_MAX_SLOTS, emptied, verdict = window.RING_MAX_SLOTS, window.emptied, window.verdict
local whole, window_reply = window.whole, window.window_reply
local CHUNK, EMPTY_LOG, PER = window_exact.CHUNK, window_exact.EMPTY_LOG, window_exact.PER
local exact_decide, log_at = window_exact.exact_decide, window_exact.log_at
local log_bytes, log_first_after = window_exact.log_bytes, window_exact.log_first_after
local log_parse = window_exact.log_parse

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

return { RING_HEAD = RING_HEAD, ring_count_at = ring_count_at, window_decide = window_decide }

-- CL.WINDOW's ring (layout 2; core/src/window/buckets.rs): header [2, 0 x7, p i64, newest
-- i64], then m = ceil(W/p) + 1 u64 counts, slot k mod m holding bucket k. Here every bucket
-- index and time is in whole ms. Its layout, reads and writes, and a call's decision on a ring
-- of its own precision (`ring_decide`); the conversions from other layouts and precisions are
-- window_to_buckets.lua's and window_to_exact.lua's, the dispatch window_decide.lua's.

local integers, window = lib.integers, lib.window
local BOUND, ERR, fail = lib.errors.BOUND, lib.errors.ERR, lib.errors.fail
local EXACT, M, MAX_MS, div_ceil = integers.EXACT, integers.M, integers.MAX_MS, integers.div_ceil
local div_floor, i64_array, int_le = integers.div_floor, integers.i64_array, integers.int_le
local le_t, t_add, t_capped = integers.le_t, integers.t_add, integers.t_capped
local t_fits, t_le = integers.t_fits, integers.t_le
local since = lib.kinds.since
local RING_MAX_SLOTS, emptied, verdict = window.RING_MAX_SLOTS, window.emptied, window.verdict
local window_reply = window.window_reply

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

-- (window_decide.lua tells which stored ring the call reads.)
local function read_ring(s) ring_read = s end

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

-- `ring`: a stored ring of the call's own precision and length (else window_decide regroups
-- it first: `converted`); `converted`: a ring this call built (from an exact log, or
-- regrouped from another precision), used as it is; `ahead` then says whether what it was
-- built from was stamped ahead. `dry` (see exact_decide): a ring not stored as it
-- is (converted, regrouped or new) is not written out; `redo` writes it.
-- `debit` (quantity above 0 with DEBIT): the units go where an admission puts them, whatever
-- the limit says, `limited` telling whether they overdrew.
local function ring_decide(p, ring, nm, nu, q, converted, ahead, dry, debit)
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
  end
  local function leaves(k) return bucket_leaves(P, W, k) end

  local k0, held = ring_from(ring, oldest)
  local used, newest_used = 0, nil
  local counts = {}
  local stored, src = ring.stored, ring.stored and ring.cs or ring.counts
  if converted and ring.used and q >= 0 and verdict(q, ring.used, p.limit) ~= 'denied' then
    -- A ring converted from a long log holds every live entry (log_to_ring says how many,
    -- and the bucket of the newest): its counts are read here only by a refund or a denial
    -- (or a debit that overdraws: its retry time).
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
  if debit then v = 'admit' end
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
    if debit then
      -- (A debit's sum must fit the bucket's i64, `debit` its quantity as T; the twin carries
      -- none at 2^53, and refuses a limit it cannot reply first.)
      local cm, cu = t_add(0, #edits > 0 and 0 or ring_count(ring, top), debit[1], debit[2])
      if not t_fits(cm, cu) then fail(fmt(ERR.debit_too_large, BOUND.i64_max)) end
      if p.refuse then fail(p.refuse) end
      -- (the counts read are valid: the twin's own refusal, not `beyond`'s scan of every count)
      if t_capped(cm, cu) >= EXACT or used + q >= EXACT then fail(fmt(ERR.twin_state, 'CL.WINDOW')) end
    end
    -- (A take's sum is at most its limit; a debit's stays below 2^53, above.)
    if #edits > 0 then
      edits[#edits][2] = q
    else
      edits[1] = { top, ring_count(ring, top) + q }
    end
    local at = leaves(top)
    local d = window_reply(p, 0, used + q, nm, nu, at, 0)
    d.at = at
    if debit and (q > p.limit or used + q > p.limit) then
      -- Overdrawn. Retry (a take of q after the debit, never for q above the limit): when the
      -- oldest buckets holding used + 2q - limit units then have left (q in top's).
      d[1] = 1
      if q <= p.limit then
        local need, freed, rk = used + q - (p.limit - q), 0, top
        for i = 0, held - 1 do
          freed = freed + counts[i] + (k0 + i == top and q or 0)
          if freed >= need then rk = k0 + i break end
        end
        d.rm, d.ru = since(leaves(rk), 0, nm, nu)
      end
    end
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

return {
  RING_HEAD = RING_HEAD, read_ring = read_ring, beyond = beyond, ring_count_at = ring_count_at,
  ring_parse = ring_parse, ring_empty = ring_empty, ring_slot = ring_slot,
  ring_count_at_slot = ring_count_at_slot, ring_count = ring_count, ring_from = ring_from,
  add_count = add_count, ring_is_ahead = ring_is_ahead, bucket_leaves = bucket_leaves,
  ring_decide = ring_decide,
}

-- A CL.WINDOW ring read as an exact log (PRECISION removed on a live key), as
-- core/src/window/buckets.rs's to_log converts it.

local integers, window_buckets = lib.integers, lib.window_buckets
local ERR, fail = lib.errors.ERR, lib.errors.fail
local EXACT, M, div_floor, int_le = integers.EXACT, integers.M, integers.div_floor, integers.int_le
local repeat_of, t_add, t_fits = integers.repeat_of, integers.t_add, integers.t_fits
local t_le, t_lt, t_sub = integers.t_le, integers.t_lt, integers.t_sub
local verdict, window_reply = lib.window.verdict, lib.window.window_reply
local PER = lib.window_exact.PER
local beyond, ring_count = window_buckets.beyond, window_buckets.ring_count
local ring_count_at_slot, ring_from = window_buckets.ring_count_at_slot, window_buckets.ring_from
local ring_is_ahead, ring_slot = window_buckets.ring_is_ahead, window_buckets.ring_slot

-- Runs after which a long ring read without PRECISION has its log's bytes built at once
-- (ring_log_bytes) instead: a ring of uneven counts has nearly a run per bucket, and runs cost
-- far more per bucket than bytes built bucket by bucket.
local EAGER_RUNS = 1024

-- The log ring_to_log reads from a long ring (`cs`, not far ahead, P ms in ns below 2^53), its
-- bytes built bucket by bucket: newest first, the counts read (and checked) as ring_to_log
-- reads them until one past the limit, then the entries oldest first, packed in C 128 at a
-- time from their 32-bit halves stepped by P, in pieces of PER entries as log_built makes them.
-- Counts are decoded in C 256 at a time as unsigned (`block`): a run of them within one block
-- whose sum is below 2^53 holds only valid counts (a negative one reads as 2^63 or more), and
-- is taken whole when it keeps the total within that (and it was not reached
-- before it: then only the next count is read); any other is read count by count.
-- `counted` (a dry call, see exact_decide): only the first part, its log's length and the
-- oldest bucket it takes (and how many of that bucket's), as a table for ring_log_reply.
local function ring_log_bytes(p, ring, nm, nu, hm, hu, k0, held, counted)
  local P, cs, slots, s = ring.pm, ring.cs, ring.slots, ring.s
  local most, count = p.limit + 1, 0
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
-- yet, newest first until one past the limit (the older would leave first; until they have,
-- the log is over its limit, as the ring is: a debt stays a debt); entries at or before
-- now - window are dropped. Buckets are read newest first and only as far as needed, as the
-- module reads them. Also whether the ring was stamped ahead.
-- `dry` (see exact_decide): where the log's bytes would be built at once, only counted.
local function ring_to_log(p, ring, nm, nu, dry)
  local P = ring.pm
  if ring.pu ~= 0 then beyond() end
  local hm, hu = t_sub(nm, nu, p.window, 0)
  local k0, held = ring_from(ring, div_floor(hm, P))
  local far_ahead = ring.far and ring.far > 0
  local most, count = p.limit + 1, 0
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

return { ring_to_log = ring_to_log, ring_log_reply = ring_log_reply }

-- CL.WINDOW's exact log (layout 1): header [1,0,0,0, head u32], then one i64 instant per action.

local integers, window = lib.integers, lib.window
local ERR, fail = lib.errors.ERR, lib.errors.fail
local EXACT, M, div_ceil = integers.EXACT, integers.M, integers.div_ceil
local div_floor, le_t, le_u32 = integers.div_floor, integers.le_t, integers.le_u32
local repeat_of, t_add, t_fits = integers.repeat_of, integers.t_add, integers.t_fits
local t_le, t_lt, t_sub, u32_le = integers.t_le, integers.t_lt, integers.t_sub, integers.u32_le
local ceil_ms, since = lib.time.ceil_ms, lib.kinds.since
local MAX_EXACT_LIMIT, emptied, verdict = window.MAX_EXACT_LIMIT, window.emptied, window.verdict
local window_reply = window.window_reply

-- A log is a string `s` (the whole value), or for a long stored value (see `read_window`) its
-- first READ_WHOLE bytes with `key` set: the rest is read in ranges (GETRANGE) as the call
-- needs them, so that a call costs O(log limit + quantity) like the module's, not O(size).
local function log_parse(s, big)
  local n = big and big.n or #s
  if n < 8 or byte(s, 1) ~= 1 or byte(s, 2) ~= 0 or byte(s, 3) ~= 0 or byte(s, 4) ~= 0 then return nil end
  local body = n - 8
  if body % 8 ~= 0 then return nil end
  local head = le_u32(s, 5)
  if head > body / 8 then return nil end
  return { s = s, head = head, len = body / 8, key = big and big.key, cache = big and {} }
end

-- `rebuilt`: not what the key holds (no key, or converted from a ring), so any write is whole.
local EMPTY_LOG = { s = '', head = 0, len = 0, rebuilt = true }

-- Entries per piece of a long log built by the call (`pieces`: each PER entries but the last,
-- without the header).
local PER = 8192

-- The bytes of a log converted from a ring (runs, see ring_to_log), built when the call writes
-- it: one string, or pieces of PER entries (never one long Lua string).
local function log_built(log)
  local rm, ru, rn, rb, P = log.rm, log.ru, log.rn, log.rb, log.step
  log.runs = nil
  local pieces, cur, held = {}, {}, 0
  local function add(str, n) -- n whole entries, never past the piece's end
    cur[#cur + 1], held = str, held + n
    if held == PER then pieces[#pieces + 1], cur, held = concat(cur), {}, 0 end
  end
  local function add_copies(e, n) -- n copies of the entry e, piece by piece
    while n > 0 do
      local take = PER - held
      if n < take then take = n end
      add(repeat_of(e, take), take)
      n = n - take
    end
  end
  -- Distinct entries (one per bucket) are packed in C from their 32-bit halves, 128 at a time.
  local args, na = {}, 0
  local function flush()
    if na > 0 then
      local n = na / 2
      add(pack(n == 128 and pack_pairs or '<' .. rep('I4i4', n), lua_unpack(args, 1, na)), n)
      na = 0
    end
  end
  local pn = P * M
  local sl = pn % 4294967296
  local sh = (pn - sl) / 4294967296
  -- The 32-bit halves (lo, hi signed) of the instant (pm, pu), stepped on from run to run (runs
  -- ascend) while the step fits a double exactly, else made from the instant's bytes.
  local lo, hi, pm, pu
  for i = 1, #rn do
    local n, m, u = rn[i], rm[i], ru[i]
    if lo and m == pm and u == pu then
      -- (the run starts at the bucket after the last: lo, hi are its instant already)
    elseif lo and (m > pm or (m == pm and u >= pu)) and m - pm < 9000000000 then
      local d = (m - pm) * M + (u - pu)
      local dl = d % 4294967296
      lo, hi = lo + dl, hi + (d - dl) / 4294967296
      if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
    else
      local b0, b1, b2, b3, b4, b5, b6, b7 = byte(t_le(m, u), 1, 8)
      lo = ((b3 * 256 + b2) * 256 + b1) * 256 + b0
      hi = ((b7 * 256 + b6) * 256 + b5) * 256 + b4
      if b7 >= 128 then hi = hi - 4294967296 end
    end
    pm, pu = m + rb[i] * P, u  -- (lo, hi stepped past the run's last bucket, below)
    if pn >= EXACT then
      lo = nil
      flush()
      for _ = 1, rb[i] do
        add_copies(t_le(m, u), n)
        m = m + P
      end
    elseif n == 1 then
      -- rb[i] entries, m + jP for j = 0.., stepped by P
      local left = rb[i]
      while left > 0 do
        -- (as many as fit in the batch and in the piece)
        local take = (256 - na) / 2
        if PER - held - na / 2 < take then take = PER - held - na / 2 end
        if left < take then take = left end
        for j = na + 1, na + 2 * take, 2 do
          args[j], args[j + 1] = lo, hi
          lo, hi = lo + sl, hi + sh
          if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
        end
        na, left = na + 2 * take, left - take
        if na == 256 or held + na / 2 == PER then flush() end
      end
    elseif n <= 16 then
      -- (a few copies of each entry join the batch: no flush between uneven buckets)
      for _ = 1, rb[i] do
        for _ = 1, n do
          args[na + 1], args[na + 2], na = lo, hi, na + 2
          if na == 256 or held + na / 2 == PER then flush() end
        end
        lo, hi = lo + sl, hi + sh
        if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
      end
    else
      flush()
      for _ = 1, rb[i] do
        add_copies(pack('<I4i4', lo, hi), n)
        lo, hi = lo + sl, hi + sh
        if lo >= 4294967296 then lo, hi = lo - 4294967296, hi + 1 end
      end
    end
  end
  flush()
  if held > 0 then pieces[#pieces + 1] = concat(cur) end
  if #pieces <= 1 and log.len <= PER then
    log.s = '\1\0\0\0\0\0\0\0' .. (pieces[1] or '')
  else
    log.pieces = pieces
  end
end

-- The run of a converted log holding entry i (its runs' starts ascend).
local function log_run(log, i)
  local start = log.start
  local lo, hi = 1, log.runs
  while lo < hi do
    local mid = lo + hi + 1
    mid = (mid - mid % 2) / 2
    if start[mid] <= i then lo = mid else hi = mid - 1 end
  end
  return lo
end

-- Bytes a (0-based) to b (exclusive) of a log's value.
local function log_bytes(log, a, b)
  if log.runs then log_built(log) end
  local pieces = log.pieces
  if pieces then
    -- (a and b within the entries: 8 on)
    local out = {}
    while a < b do
      local q = floor((a - 8) / (PER * 8))
      local off = a - 8 - q * PER * 8
      local e = b - a
      if e > PER * 8 - off then e = PER * 8 - off end
      out[#out + 1] = sub(pieces[q + 1], off + 1, off + e)
      a = a + e
    end
    return concat(out)
  end
  if not log.key or b <= #log.s then return sub(log.s, a + 1, b) end
  if a >= b then return '' end
  return rcall('GETRANGE', log.key, a, b - 1)
end

-- Long values are built and written in pieces of at most CHUNK bytes (Lua's cost for one long
-- string grows faster than its length): `parts` lists them, written as SET + APPENDs.
local CHUNK = 65536

-- Appends bytes a (0-based) to b (exclusive) of a log's value to `parts`.
local function log_parts(log, a, b, parts)
  while a < b do
    local e = a + CHUNK
    if e > b then e = b end
    parts[#parts + 1] = log_bytes(log, a, e)
    a = e
  end
end

-- Appends n copies of an 8-byte entry to `parts`.
local function repeat_parts(entry, n, parts)
  local per = CHUNK / 8
  local whole_piece
  while n > 0 do
    if n >= per then
      whole_piece = whole_piece or repeat_of(entry, per)
      parts[#parts + 1], n = whole_piece, n - per
    else
      parts[#parts + 1], n = repeat_of(entry, n), 0
    end
  end
end

local function log_at(log, i)
  if log.runs then
    local r = log_run(log, i)
    local j = i - log.start[r]
    return log.rm[r] + (j - j % log.rn[r]) / log.rn[r] * log.step, log.ru[r]
  end
  local pieces = log.pieces
  if pieces then
    local q = floor(i / PER)
    return le_t(pieces[q + 1], (i - q * PER) * 8 + 1)
  end
  if not log.key or 16 + i * 8 <= #log.s then return le_t(log.s, 9 + i * 8) end
  local wa = log.wa
  if wa and i >= wa and i < wa + #log.ws / 8 then return le_t(log.ws, 1 + (i - wa) * 8) end
  local cache = log.cache
  if not cache then cache = {}; log.cache = cache end
  local c = cache[i]
  if not c then
    local m, u = le_t(rcall('GETRANGE', log.key, 8 + i * 8, 15 + i * 8), 1)
    c = { m, u }
    cache[i] = c
  end
  return c[1], c[2]
end

-- Whether the entry at byte `i` (1-based) of `s` is after the instant (hhi, hlo): its high 32
-- bits (signed), then its low 32 bits.
local function entry_after(s, i, hhi, hlo)
  local elo, ehi = unpack('<I4i4', s, i) -- (decoded in C)
  return ehi > hhi or (ehi == hhi and elo > hlo)
end

-- Entries a remote binary search narrows to before reading them in one range (4 KB).
local LOG_BLOCK = 512
-- Entries of a long log read from the head in one range, where the search usually ends.
local HEAD_WINDOW = 64

-- The first live entry after the instant h (entries ascend), from `from` (else the head) on.
local function log_first_after(log, hm, hu, from)
  -- Entries compare as (high 32 bits, signed; low 32 bits), read straight from their bytes;
  -- the horizon is split so once.
  local h0, h1, h2, h3, h4, h5, h6, h7 = byte(t_le(hm, hu), 1, 8)
  local hhi = ((h7 * 256 + h6) * 256 + h5) * 256 + h4
  if h7 >= 128 then hhi = hhi - 4294967296 end
  local hlo = ((h3 * 256 + h2) * 256 + h1) * 256 + h0
  local s, base = log.s, 9
  local lo, hi = from or log.head, log.len
  if log.runs then
    -- A converted log: the first run whose newest entry is after h, the first of its buckets
    -- after h, then no earlier than `from`.
    local rm, ru, rb, P = log.rm, log.ru, log.rb, log.step
    local a, b = 1, log.runs + 1
    while a < b do
      local mid = a + b
      mid = (mid - mid % 2) / 2
      if t_lt(hm, hu, rm[mid] + (rb[mid] - 1) * P, ru[mid]) then b = mid else a = mid + 1 end
    end
    local i = log.len
    if a <= log.runs then
      -- bucket j's entries, at rm + jP, are after h iff jP > x, or jP >= x when ru > hu
      local x, j = hm - rm[a], 0
      if x >= 0 then
        if ru[a] > hu then j = div_ceil(x, P) else j = div_floor(x, P) + 1 end
      end
      i = log.start[a] + j * log.rn[a]
    end
    if i < lo then i = lo end
    return i
  end
  local pieces = log.pieces
  if pieces then
    -- A long log built by the call: the piece, then within it.
    while hi - lo > PER do
      local mid = lo + hi
      mid = (mid - mid % 2) / 2
      local q = floor(mid / PER)
      if entry_after(pieces[q + 1], (mid - q * PER) * 8 + 1, hhi, hlo) then hi = mid else lo = mid + 1 end
    end
    local q = floor(lo / PER)
    if hi > (q + 1) * PER then q = floor((hi - 1) / PER) end
    if floor(lo / PER) ~= q then
      s, base = log_bytes(log, 8 + lo * 8, 8 + hi * 8), 1 - lo * 8
    else
      s, base = pieces[q + 1], 1 - q * PER * 8
    end
  else
    -- A stored log, searched as the module searches it (core's exact::first_after), so that
    -- even entries out of order give its answer: galloping from the start (probes 1, 2, 4...
    -- entries apart; the horizon only moves forward, so the first after it is usually near the
    -- head), then a binary search below the first probe after h. A long log's entries are
    -- read as needed: the HEAD_WINDOW entries from the head in one range (kept for log_at),
    -- others one by one until the range is one block, then the block.
    local key, w, wa = log.key, nil, nil
    local step = 1
    while lo < hi do
      local p = lo + step - 1
      if p > hi - 1 then p = hi - 1 end
      local after
      if 16 + p * 8 <= #s then
        after = entry_after(s, 9 + p * 8, hhi, hlo)
      else
        local head = log.head
        if not w and not from and p < head + HEAD_WINDOW then
          local e = head + HEAD_WINDOW
          if e > log.len then e = log.len end
          w, wa = rcall('GETRANGE', key, 8 + head * 8, 7 + e * 8), head
          log.ws, log.wa = w, wa
        end
        if w and p >= wa and p < wa + #w / 8 then after = entry_after(w, 1 + (p - wa) * 8, hhi, hlo)
        else after = entry_after(rcall('GETRANGE', key, 8 + p * 8, 15 + p * 8), 1, hhi, hlo) end
      end
      if after then
        hi = p
        break
      end
      lo = p + 1
      step = step * 2
    end
    if 8 + hi * 8 > #s then
      if w and lo >= wa and hi <= wa + #w / 8 then
        s, base = w, 1 - wa * 8
      else
        while hi - lo > LOG_BLOCK do
          local mid = lo + hi
          mid = (mid - mid % 2) / 2
          local after
          if 16 + mid * 8 <= #s then after = entry_after(s, 9 + mid * 8, hhi, hlo)
          else after = entry_after(rcall('GETRANGE', key, 8 + mid * 8, 15 + mid * 8), 1, hhi, hlo) end
          if after then hi = mid else lo = mid + 1 end
        end
        if 8 + hi * 8 > #s and lo < hi then
          s, base = rcall('GETRANGE', key, 8 + lo * 8, 7 + hi * 8), 1 - lo * 8
        end
      end
    end
  end
  while lo < hi do
    local mid = lo + hi
    mid = (mid - mid % 2) / 2
    if entry_after(s, base + mid * 8, hhi, hlo) then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- The edit leaving entries first..keep-1 followed by `appended` (count entries): a whole
-- rewrite when the key is new, the dead entries would outnumber the live ones, or entries lie
-- after now (the clock stepped back: they are rewritten as logged now); else the head and the
-- appended entries in place.
local function log_patch(log, first, keep, appended, count, nm, nu, d)
  local live = keep - first + count
  local future = false
  if keep > first then
    local m, u = log_at(log, keep - 1)
    future = t_lt(nm, nu, m, u)
  end
  if future and log.key and first == 0 and log.head == 0 and not log.rebuilt then
    -- A long stored log with no dead entry: the rewrite leaves every entry up to now where it
    -- is, so only the tail after now is written (SETRANGE), as entries at now.
    local after = log_first_after(log, nm, nu, 0)
    local parts, chunks, at = {}, {}, 8 + after * 8
    repeat_parts(t_le(nm, nu), keep - after, parts)
    if type(appended) == 'table' then
      for i = 1, #appended do parts[#parts + 1] = appended[i] end
    elseif count > 0 then
      parts[#parts + 1] = appended
    end
    for i = 1, #parts do
      chunks[i] = { at, parts[i] }
      at = at + #parts[i]
    end
    d.eff, d.len, d.chunks = 'patch', 8 + keep * 8 + count * 8, chunks
    return d
  end
  if log.rebuilt or first > live or future then
    local parts = { '\1\0\0\0\0\0\0\0' }
    if first < keep then
      if future and log.key then
        -- A long log: the entries after now are the tail from the first one after now (the
        -- log ascends), so they are rewritten at once, without a walk over every entry.
        local after = log_first_after(log, nm, nu, first)
        log_parts(log, 8 + first * 8, 8 + after * 8, parts)
        repeat_parts(t_le(nm, nu), keep - after, parts)
      elseif future then
        -- (Entry by entry, as the module does: the same bytes even for a log out of order.)
        for i = first, keep - 1 do
          local m, u = log_at(log, i)
          if t_lt(nm, nu, m, u) then parts[#parts + 1] = t_le(nm, nu) else parts[#parts + 1] = sub(log.s, 9 + i * 8, 16 + i * 8) end
        end
      else
        log_parts(log, 8 + first * 8, 8 + keep * 8, parts)
      end
    end
    if type(appended) == 'table' then
      for i = 1, #appended do parts[#parts + 1] = appended[i] end
    elseif appended ~= '' then
      parts[#parts + 1] = appended
    end
    d.eff, d.whole = 'patch', parts
    return d
  end
  local chunks = {}
  if first ~= log.head then chunks[#chunks + 1] = { 4, u32_le(first) } end
  if type(appended) == 'table' then
    local at = 8 + keep * 8
    for i = 1, #appended do
      chunks[#chunks + 1] = { at, appended[i] }
      at = at + #appended[i]
    end
  elseif count > 0 then
    chunks[#chunks + 1] = { 8 + keep * 8, appended }
  end
  d.eff, d.len, d.chunks = 'patch', 8 + keep * 8 + count * 8, chunks
  return d
end

-- `ahead`: the log was converted from a ring stamped ahead (see ring_is_ahead). `dry`: the
-- decision is wanted for its reply only (CL.ALL before it knows every limiter admits): the
-- bytes of a converted log are not built; `redo` instead finishes the decision when it is to
-- be written (a function), or is true where the call must decide again (see ring_log_reply).
-- `debit` (quantity above 0 with DEBIT): the units are logged as an admission logs them (at
-- most MAX_EXACT_LIMIT), whatever the limit says, `limited` telling whether they overdrew.
local function exact_decide(p, log, nm, nu, q, ahead, dry, debit)
  dry = dry and log.converted
  local hm, hu = t_sub(nm, nu, p.window, 0) -- horizon: now - window
  local first = log_first_after(log, hm, hu)
  local in_window = log.len - first
  local used = in_window
  local stepped, newm, newu = ahead or false, nil, nil -- the newest entry, no later than now
  if log.len > 0 then
    newm, newu = log_at(log, log.len - 1)
    if t_lt(nm, nu, newm, newu) then stepped, newm, newu = true, nm, nu end
  end
  local fm, fu -- when the newest counting action leaves
  if in_window > 0 then
    fm, fu = t_add(newm, newu, p.window, 0)
    if not t_fits(fm, fu) then fail(ERR.too_large) end
  end

  local v = verdict(q, used, p.limit)
  if debit then
    -- (A take logs at most its limit; a debit may log more, up to the same cap.)
    if q > MAX_EXACT_LIMIT then fail(fmt(ERR.debit_too_long, MAX_EXACT_LIMIT)) end
    -- Nor may debits pile up past twice the cap (a log at its limit, then one debit at its cap).
    if used + q > 2 * MAX_EXACT_LIMIT then fail(fmt(ERR.debit_too_deep, 2 * MAX_EXACT_LIMIT)) end
    v = 'admit'
  end
  if v == 'refund' then
    local units = -q
    if units > in_window then units = in_window end
    -- The oldest live units go: the head moves past them (a 4-byte edit), nothing else
    -- changes, so the newest entry and the key's expiry stay.
    local first2 = first + units
    if first2 == log.len then return emptied(p, in_window > 0) end
    local d = window_reply(p, 0, used - units, nm, nu, fm, fu)
    d.at = ceil_ms(fm, fu)
    if dry then d.redo = function() return log_patch(log, first2, log.len, '', 0, nm, nu, d) end return d end
    return log_patch(log, first2, log.len, '', 0, nm, nu, d)
  elseif v == 'admit' then
    -- Actions are logged at now (the newest entry is no later than now).
    local fm2, fu2 = t_add(nm, nu, p.window, 0)
    if not t_fits(fm2, fu2) then fail(ERR.too_large) end
    local d = window_reply(p, 0, used + q, nm, nu, fm2, fu2)
    d.at = ceil_ms(fm2, fu2)
    if debit and (q > p.limit or used + q > p.limit) then
      -- Overdrawn. Retry (a take of q after the debit, never for q above the limit): when the
      -- oldest used + 2q - limit of the entries then live have left (the debit's own at now;
      -- entries after now are logged at now).
      d[1] = 1
      if q <= p.limit then
        local j = used + q - (p.limit - q) - 1
        local rm, ru = nm, nu
        if j < used then
          rm, ru = log_at(log, first + j)
          if t_lt(nm, nu, rm, ru) then rm, ru = nm, nu end
        end
        rm, ru = t_add(rm, ru, p.window, 0)
        if not t_fits(rm, ru) then fail(ERR.too_large) end
        d.rm, d.ru = since(rm, ru, nm, nu)
      end
    end
    if dry then
      d.redo = function() return exact_decide(p, log, nm, nu, q, ahead, false, debit) end
      return d
    end
    local appended = t_le(nm, nu)
    if q > 1 then
      if q * 8 <= CHUNK then appended = repeat_of(appended, q) else
        local parts = {}
        repeat_parts(appended, q, parts)
        appended = parts
      end
    end
    return log_patch(log, first, log.len, appended, q, nm, nu, d)
  end
  -- Denied (until enough of the oldest actions leave), never admittable, or a peek.
  local limited = v == 'peek' and 0 or 1
  local rm, ru
  if v == 'denied' then
    rm, ru = log_at(log, first + used + q - p.limit - 1)
    if t_lt(nm, nu, rm, ru) then rm, ru = nm, nu end
    rm, ru = t_add(rm, ru, p.window, 0)
    if not t_fits(rm, ru) then fail(ERR.too_large) end
  end
  local d = window_reply(p, limited, used, nm, nu, fm, fu, rm, ru)
  -- A denial rewrites entries stamped in the future (a peek stays pure).
  if stepped and q ~= 0 and fm then
    d.at = ceil_ms(fm, fu)
    if dry then d.redo = function() return log_patch(log, first, log.len, '', 0, nm, nu, d) end return d end
    return log_patch(log, first, log.len, '', 0, nm, nu, d)
  end
  return d
end

return {
  log_parse = log_parse, EMPTY_LOG = EMPTY_LOG, PER = PER, log_bytes = log_bytes, CHUNK = CHUNK,
  log_at = log_at, HEAD_WINDOW = HEAD_WINDOW, log_first_after = log_first_after,
  exact_decide = exact_decide,
}

-- The hot paths of FCALL cl_throttle, cl_window and cl_counter: the common calls decided in
-- plain numbers, everything else handed to store.lua's `single`.

local integers, throttle, window_exact = lib.integers, lib.throttle, lib.window_exact
local run = lib.errors.run
local EXACT, M, MAX_MS, div_ceil = integers.EXACT, integers.M, integers.MAX_MS, integers.div_ceil
local div_floor, int_le, int_text = integers.div_floor, integers.int_le, integers.int_text
local le_t, le_u32, repeat_of = integers.le_t, integers.le_u32, integers.repeat_of
local t_add, t_capped, t_fits = integers.t_add, integers.t_capped, integers.t_fits
local t_le, t_lt, t_sub, u32_le = integers.t_le, integers.t_lt, integers.t_sub, integers.u32_le
local clock = lib.time.clock
local gcra_step, instant_ms, tat_of = throttle.gcra_step, throttle.instant_ms, throttle.tat_of
local LONG, READ_WHOLE = lib.window.LONG, lib.window.READ_WHOLE
local CHUNK, EMPTY_LOG, HEAD_WINDOW = window_exact.CHUNK, window_exact.EMPTY_LOG, window_exact.HEAD_WINDOW
local log_at, log_first_after = window_exact.log_at, window_exact.log_first_after
local RING_HEAD, ring_count_at = lib.window_buckets.RING_HEAD, lib.window_buckets.ring_count_at
local single = lib.store.single

-- FCALL cl_throttle's hot path: a call whose words were seen before (its parameters kept in a
-- tree of tables keyed by the word count, then each word: no string is built to look them up)
-- with a tolerance below 2^52 ns, on a key holding nothing or a TAT, decides here in plain
-- numbers (gcra_step) and writes and replies as `single` would; any other call (the first of
-- its words, an error, another stored value, an instant beyond `fast_until`) goes to `single`.
local HOT, hot_count = {}, 0
local at_ms, at_text -- the last expiry (ms) written, and its text
-- The reply, one table for every call (Redis reads it when the call returns and keeps nothing):
-- no table to allocate and collect per call.
local REPLY = { 0, 0, 0, 0, 0 }

-- `single` for words not seen before, then what the hot path keeps for them (the call
-- succeeded: `single` parsed them): their parameters, or false when it cannot take them (a
-- tolerance of 2^52 ns or more), so that their next calls go to `single` at once.
local function throttle_single(keys, args)
  local reply = single('throttle', keys, args)
  local p, qm, qu, millis, shadow, held, debit = lua_unpack(single_params, 1, 7)
  if hot_count >= 512 then HOT, hot_count = {}, 0 end
  local n = #args
  local node = HOT[n]
  if not node then node = {}; HOT[n] = node end
  for i = 1, n - 1 do
    local next_node = node[args[i]]
    if not next_node then next_node = {}; node[args[i]] = next_node end
    node = next_node
  end
  node[args[n]] = p.tol and not p.refuse and not held and not debit and { p.tol, p.ei, p.limit, t_capped(qm, qu), millis, shadow and qm >= 0, p.fast_until } or false
  hot_count = hot_count + 1
  return reply
end

local function cl_throttle(keys, args)
  local e -- the words' entry: nil when not seen, false when not for the hot path
  if bound and #keys == 1 then
    local n = #args
    e = HOT[n]
    for i = 1, n do
      if not e then break end
      e = e[args[i]]
    end
    if e then
      local nm, nu = clock()
      if nm < e[7] then
        local key = keys[1]
        local stored = rpcall('GET', key)
        local am, au
        if stored == last_tat then
          am, au = last_am, last_au
        elseif type(stored) == 'string' then
          am, au = tat_of(stored)
        end
        local limit, millis = e[3], e[5]
        local limited, remaining, retry, span, write
        if am or stored == false then
          -- (nil for a TAT far ahead: `single`)
          limited, remaining, retry, span, write = gcra_step(e[1], e[2], limit, am, au, nm, nu, e[4])
        end
        if limited then
          -- (ns_t, t_add, instant_text and reply_time inlined: a Lua call costs more than each)
          local su = span % M
          local sm = (span - su) / M
          if write then
            if span ~= 0 then
              local xm, xu = nm + sm, nu + su
              if xu >= M then xm, xu = xm + 1, xu - M end
              if xm ~= text_m then instant_ms(xm) end
              local lo = xu % 1000
              local text = text_m_digits .. D3[(xu - lo) / 1000] .. D3[lo]
              last_tat, last_am, last_au = text, xm, xu
              local at = xu > 0 and xm + 1 or xm
              if at ~= at_ms then at_ms, at_text = at, int_text(at) end
              rcall('SET', key, text, 'PXAT', at_text)
            elseif stored then
              rcall('DEL', key)
            end
          end
          -- Reply times (reply_time): milliseconds rounded up, or whole milliseconds' seconds
          -- rounded up; `unit` in ns.
          local unit, retry_after = millis and M or 1000000000, -1
          if limited == 1 and e[6] then
            limited = 0 -- SHADOW: a denial (a refused take or check) replied as an admission
          elseif retry then
            if not millis then retry = retry - retry % M end
            local rr = retry % unit
            retry_after = (retry - rr) / unit + (rr > 0 and 1 or 0)
          end
          local reset = millis and span or span - su
          local rr = reset % unit
          local r = REPLY
          r[1], r[2], r[3], r[4], r[5] = limited, limit, remaining, retry_after, (reset - rr) / unit + (rr > 0 and 1 or 0)
          return r
        end
      end
    end
  end
  if e == nil then return run(throttle_single, keys, args) end
  return run(single, 'throttle', keys, args)
end

-- cl_window's and cl_counter's hot paths, as cl_throttle's: words seen before (kept in a tree
-- per command) whose common case decides here in plain numbers, with no pcall, decision table
-- or closure per call, and writes and replies as `single` would. A call the hot path does not
-- take (a refund, HELD, a state it does not read: another layout, precision or length, a
-- count at 2^53, a ring stamped ahead, an expiry it cannot carry, an error) returns nil
-- before writing anything and goes to `single`, which reads the key again.
local WHOT, CHOT, whot_count = {}, {}, 0
-- (Offsets and lengths go to redis.call as text: Redis 7.0 turns a Lua number into an
-- argument with printf's %.17g, which costs more than the rest of a small call.)
local READ_WHOLE_LAST = (READ_WHOLE - 1) .. '' -- (made once, at load)

-- A reply time: from now until the instant (xm, xu), 0 when not later (`since` then
-- `reply_time`).
local function until_reply(xm, xu, nm, nu, millis)
  if not (nm < xm or (nm == xm and nu < xu)) then return 0 end
  local m, u = xm - nm, xu - nu
  if u < 0 then m, u = m - 1, u + M end
  if millis then return u > 0 and m + 1 or m end
  local r = m % 1000
  return (m - r) / 1000 + (r > 0 and 1 or 0)
end

-- (rm, ru: when a denied call could be admitted; sm, su: when the limiter is full again)
local function hot_reply_t(e, limited, used, rm, ru, sm, su, nm, nu)
  local limit, millis = e.limit, e.millis
  if limited == 1 and e.shadow then limited, rm = 0, nil end
  local remaining = limit - used
  if remaining < 0 then remaining = 0 elseif remaining > limit then remaining = limit end
  local r = REPLY
  r[1], r[2], r[3] = limited, limit, remaining
  r[4] = rm and until_reply(rm, ru, nm, nu, millis) or -1
  r[5] = sm and until_reply(sm, su, nm, nu, millis) or 0
  return r
end

-- The same with whole milliseconds.
local function hot_reply(e, limited, used, rm, sm, nm, nu)
  return hot_reply_t(e, limited, used, rm, 0, sm, 0, nm, nu)
end

local function expiry_text(at)
  if at ~= at_ms then at_ms, at_text = at, int_text(at) end
  return at_text
end

-- When bucket k stops counting (bucket_leaves), nil where that fails.
local function hot_leaves(P, W, k)
  local x = (k + 1) * P
  if x > MAX_MS or x < -MAX_MS then return nil end
  x = x + W
  if x > MAX_MS then return nil end
  return x
end

-- A ring of the call's own precision and length (at most HOT_SLOTS buckets), not ahead.
local HOT_SLOTS = 128
local ZERO8 = '\0\0\0\0\0\0\0\0'

local function ring_hot(e, key)
  local nm, nu = clock()
  local P, W, slots, q, limit = e.P, e.W, e.slots, e.q, e.limit
  local L = 24 + slots * 8
  local s = rpcall('GETRANGE', key, '0', e.L_text) -- (one byte more: a longer value is not the call's)
  if type(s) ~= 'string' then return nil end
  local current = div_floor(nm, P)
  local newest, used, newest_used, k0, held = current, 0, nil, 0, 0
  -- (An admission on no value needs no EXISTS: its SET NX tells a missing key from an empty
  -- value, which is single's.)
  local fresh = s == '' and q > 0 and q <= limit
  if s == '' then
    if not fresh and rcall('EXISTS', key) ~= 0 then return nil end
  else
    if #s ~= L or sub(s, 1, 16) ~= e.head then return nil end
    local wm, wu = le_t(s, 17)
    if wm > 9007199253 or wm < -9007199253 then return nil end
    newest = wm * M + wu
    if newest > current + e.spanned then return nil end -- stamped ahead: a repair
    held = newest - div_floor(nm - W, P) + 1 -- (ring_from)
    if held < 0 then held = 0 elseif held > slots then held = slots end
    k0 = newest - held + 1
    local slot = k0 - floor(k0 / slots) * slots
    for i = 0, held - 1 do
      -- (decoded in C, as a double: exact below 2^53; a count beyond, or negative, is single's)
      local c = unpack('<i8', s, 25 + slot * 8)
      if c < 0 or c >= EXACT then return nil end
      used = used + c
      if used >= EXACT then return nil end
      if c > 0 then newest_used = k0 + i end
      slot = slot + 1
      if slot == slots then slot = 0 end
    end
  end
  local fm
  if newest_used then
    fm = hot_leaves(P, W, newest_used)
    if not fm then return nil end
  end
  if q > limit then return hot_reply(e, 1, used, nil, fm, nm, nu) end
  if used + q > limit then
    -- Denied until the oldest buckets holding used + q - limit units leave.
    local need, freed, slot = used - (limit - q), 0, k0 - floor(k0 / slots) * slots
    for i = 0, held - 1 do
      freed = freed + unpack('<i8', s, 25 + slot * 8)
      if freed >= need then
        local rm = hot_leaves(P, W, k0 + i)
        if not rm then return nil end
        return hot_reply(e, 1, used, rm, fm, nm, nu)
      end
      slot = slot + 1
      if slot == slots then slot = 0 end
    end
    return nil
  end
  if q == 0 then return hot_reply(e, 0, used, nil, fm, nm, nu) end
  -- Admitted: the units go to now's bucket; the buckets between the newest and it are zeroed.
  local top = current > newest and current or newest
  local at = hot_leaves(P, W, top)
  if not at then return nil end
  local ts = top - floor(top / slots) * slots
  if s == '' or top - newest >= slots then
    -- A new ring: written whole.
    local body = { e.head, int_le(top) }
    for slot = 0, slots - 1 do body[slot + 3] = slot == ts and (COUNT_LE[q] or int_le(q)) or ZERO8 end
    if fresh then
      if not rcall('SET', key, concat(body), 'PXAT', expiry_text(at), 'NX') then return nil end
    else
      rcall('SET', key, concat(body), 'PXAT', expiry_text(at))
    end
  elseif top == newest then
    local c = ring_count_at(s, 24 + ts * 8) + q
    rcall('SETRANGE', key, int_text(24 + ts * 8), COUNT_LE[c] or int_le(c))
    rcall('PEXPIREAT', key, expiry_text(at))
  else
    -- The newest bucket, then the slots from the one after the old newest to now's, in one
    -- range (the bytes between are the key's own, read above).
    local a = (newest + 1) - floor((newest + 1) / slots) * slots
    local cq = COUNT_LE[q] or int_le(q)
    local bytes
    if a <= ts then
      bytes = int_le(top) .. sub(s, 25, 24 + a * 8) .. rep(ZERO8, ts - a) .. cq
    else
      bytes = int_le(top) .. rep(ZERO8, ts) .. cq .. sub(s, 25 + (ts + 1) * 8, 24 + a * 8) .. rep(ZERO8, slots - a)
    end
    rcall('SETRANGE', key, '16', bytes)
    rcall('PEXPIREAT', key, expiry_text(at))
  end
  return hot_reply(e, 0, used + q, nil, at, nm, nu)
end

local HOT_LOG = { s = '', head = 0, len = 0, key = false, cache = false, ws = false, wa = false }

-- An exact log, not stepped ahead, admitting at most CHUNK bytes of entries; a long one
-- once `read_window` found it long (read by length and header, then from its head).
local function log_hot(e, key)
  local nm, nu = clock()
  local W, q, limit = e.W, e.q, e.limit
  local s, n, long, last
  local g = LONG.keys[key]
  if g then
    -- The length this twin left (a guess): a range of 16 bytes from 8 before it holds
    -- exactly 8 iff it is the length, and they are the newest entry.
    if g ~= true then
      last = rpcall('GETRANGE', key, int_text(g - 8), int_text(g + 7))
      if type(last) == 'string' and #last == 8 then n = g else last = nil end
    end
    if not n then n = rpcall('STRLEN', key) end
    if type(n) ~= 'number' or n <= READ_WHOLE then return nil end
    -- The header, with the entries after the head it left when they are near (at most 1 KB).
    local h = LONG.head[key]
    s, long = rcall('GETRANGE', key, '0', h and h < HEAD_WINDOW and int_text(7 + (h + HEAD_WINDOW) * 8) or '7'), true
  else
    s = rpcall('GETRANGE', key, '0', READ_WHOLE_LAST)
    if type(s) ~= 'string' then return nil end
    n = #s
    if n == READ_WHOLE then return nil end
  end
  local log
  local fresh = n == 0 and q > 0 and q <= limit -- (as ring_hot's)
  if n == 0 then
    if not fresh and rcall('EXISTS', key) ~= 0 then return nil end
    log = EMPTY_LOG
  else
    if n < 8 or sub(s, 1, 4) ~= '\1\0\0\0' or (n - 8) % 8 ~= 0 then return nil end
    local len, head = (n - 8) / 8, le_u32(s, 5)
    if head > len then return nil end
    -- (One table for every call, refilled: every field log_first_after and log_at may set,
    -- so that it never grows and no call leaves a table for the collector.)
    log = HOT_LOG
    log.s, log.head, log.len, log.key, log.cache, log.ws, log.wa = s, head, len, long and key, false, false, false
  end
  local len = log.len
  local hm, hu = t_sub(nm, nu, W, 0)
  local first = log_first_after(log, hm, hu)
  local used = len - first
  local fm, fu
  if len > 0 then
    local m, u
    if last then
      m, u = le_t(last, 1)
    elseif long and not (log.wa and len - 1 < log.wa + HEAD_WINDOW) and 16 + (len - 1) * 8 > #s then
      m, u = le_t(rcall('GETRANGE', key, int_text(n - 8), int_text(n - 1)), 1) -- (the newest, read once)
    else
      m, u = log_at(log, len - 1)
    end
    if t_lt(nm, nu, m, u) then return nil end -- stamped ahead: a repair
    if used > 0 then
      fm, fu = t_add(m, u, W, 0)
      if not t_fits(fm, fu) then return nil end
    end
  end
  if long then LONG.keys[key], LONG.head[key] = n, log.head end
  if q > limit then return hot_reply_t(e, 1, used, nil, 0, fm, fu, nm, nu) end
  if used + q > limit then
    -- Denied until the oldest used + q - limit actions leave.
    local rm, ru = log_at(log, first + used + q - limit - 1)
    if t_lt(nm, nu, rm, ru) then rm, ru = nm, nu end
    rm, ru = t_add(rm, ru, W, 0)
    if not t_fits(rm, ru) then return nil end
    return hot_reply_t(e, 1, used, rm, ru, fm, fu, nm, nu)
  end
  if q == 0 then return hot_reply_t(e, 0, used, nil, 0, fm, fu, nm, nu) end
  -- Admitted: q entries at now (log_patch's edits).
  local am, au = t_add(nm, nu, W, 0)
  if not t_fits(am, au) or q * 8 > CHUNK then return nil end
  local at = expiry_text(au > 0 and am + 1 or am)
  local appended = t_le(nm, nu)
  if q > 1 then appended = repeat_of(appended, q) end
  if long then LONG.keys[key], LONG.head[key] = n + q * 8, first end
  if log.rebuilt or first > len - first + q then
    -- Rewritten whole, without the dead entries.
    if long then return nil end
    local value = '\1\0\0\0\0\0\0\0' .. sub(s, 9 + first * 8) .. appended
    if fresh then
      if not rcall('SET', key, value, 'PXAT', at, 'NX') then return nil end
    else
      rcall('SET', key, value, 'PXAT', at)
    end
  elseif first == log.head then
    rcall('APPEND', key, appended) -- (at n: the value's length, read above)
    rcall('PEXPIREAT', key, at)
  elseif not long and n <= 1024 then
    -- The head and the appended entries in one range (the bytes between are the key's own).
    rcall('SETRANGE', key, '4', u32_le(first) .. sub(s, 9) .. appended)
    rcall('PEXPIREAT', key, at)
  else
    rcall('SETRANGE', key, '4', u32_le(first))
    rcall('APPEND', key, appended)
    rcall('PEXPIREAT', key, at)
  end
  return hot_reply_t(e, 0, used + q, nil, 0, am, au, nm, nu)
end

local function counter_hot(e, key)
  local nm, nu = clock()
  local stored = rpcall('GET', key)
  local count, closes = 0, nil
  if stored then
    if type(stored) ~= 'string' then return nil end
    if #stored > 15 or not find(stored, '^[1-9]%d*$') then
      if stored ~= '0' then return nil end
    end
    local at = rcall('PEXPIRETIME', key)
    if at < 0 or at > MAX_MS then return nil end
    if at > nm then count, closes = tonumber(stored), at end
  end
  local q, limit = e.q, e.limit
  if q > limit then return hot_reply(e, 1, count, nil, count > 0 and closes, nm, nu) end
  if count + q > limit then return hot_reply(e, 1, count, closes, closes, nm, nu) end
  if q == 0 then return hot_reply(e, 0, count, nil, count > 0 and closes, nm, nu) end
  if not closes then
    closes = nm + e.W
    if closes > MAX_MS then return nil end
  end
  local c = count + q
  rcall('SET', key, int_text(c), 'PXAT', expiry_text(closes))
  return hot_reply(e, 0, c, nil, closes, nm, nu)
end

-- `single` for words not seen before, then what the hot path keeps for them (see
-- throttle_single), or false where it takes none of their calls.
local function hot_single(kind, keys, args)
  local reply = single(kind, keys, args)
  local p, qm, qu, millis, shadow, held, debit = lua_unpack(single_params, 1, 7)
  local q = t_capped(qm, qu)
  local e = false
  if not p.refuse and not held and not debit and q >= 0 then
    -- (SHADOW answers a refused take or check; `q >= 0` here)
    e = { q = q, limit = p.limit, millis = millis, shadow = shadow, W = p.window }
    if kind == 'counter' then
      e.run = counter_hot
    elseif p.precision and div_ceil(p.window, p.precision) + 1 <= HOT_SLOTS then
      e.run, e.P = ring_hot, p.precision
      e.spanned = div_ceil(p.window, p.precision)
      e.slots = e.spanned + 1
      e.head = RING_HEAD .. t_le(p.precision, 0)
      e.L_text = int_text(24 + e.slots * 8) -- (ring_hot's L, as text)
    elseif not p.precision then
      e.run = log_hot
    else
      e = false
    end
  end
  if whot_count >= 512 then WHOT, CHOT, whot_count = {}, {}, 0 end
  local n = #args
  local root = kind == 'counter' and CHOT or WHOT
  local node = root[n]
  if not node then node = {}; root[n] = node end
  for i = 1, n - 1 do
    local next_node = node[args[i]]
    if not next_node then next_node = {}; node[args[i]] = next_node end
    node = next_node
  end
  node[args[n]] = e
  whot_count = whot_count + 1
  return reply
end

local function hot_entry(root, keys, args)
  if not bound or #keys ~= 1 then return nil end
  local n = #args
  local e = root[n]
  for i = 1, n do
    if not e then return e end
    e = e[args[i]]
  end
  return e
end

local function cl_window(keys, args)
  local e = hot_entry(WHOT, keys, args)
  if e then
    local r = e.run(e, keys[1])
    if r then return r end
  end
  if e == nil then return run(hot_single, 'window', keys, args) end
  return run(single, 'window', keys, args)
end

local function cl_counter(keys, args)
  local e = hot_entry(CHOT, keys, args)
  if e then
    local r = e.run(e, keys[1])
    if r then return r end
  end
  if e == nil then return run(hot_single, 'counter', keys, args) end
  return run(single, 'counter', keys, args)
end

return { cl_throttle = cl_throttle, cl_window = cl_window, cl_counter = cl_counter }

-- Arguments, by each command's table (the module's core/src/command.rs and limiter.rs):
-- arity, then every positional word an integer (left to right), then the optional tail, then
-- the ranges, in the module's order.

local errors, integers, calendar = lib.errors, lib.integers, lib.calendar
local BOUND, ERR, fail, refusal = errors.BOUND, errors.ERR, errors.fail, errors.refusal
local M, div_ceil, div_floor = integers.M, integers.div_ceil, integers.div_floor
local parse_i64, t_capped = integers.parse_i64, integers.t_capped
local gcra_params = lib.throttle.gcra_params
local counter_params = lib.counter.counter_params
local ANCHOR_MAX, ANCHOR_MIN, MS_DAY = calendar.ANCHOR_MAX, calendar.ANCHOR_MIN, calendar.MS_DAY
local civil_from_days, days_from_civil = calendar.civil_from_days, calendar.days_from_civil
local days_in_month = calendar.days_in_month
local QUOTA_PER = lib.quota.QUOTA_PER
local bucket_params = lib.bucket.bucket_params
local window_params = lib.window.window_params
local ZONE_NAMES = lib.zones.ZONE_NAMES

local function integer(s)
  local m, u = parse_i64(s)
  if not m then fail(ERR.integer) end
  return m, u
end

local function is_word(s, upper)
  return #s == #upper and s:upper() == upper
end

-- The optional words of a single command (`[quantity] [MS] [PRECISION p] [SHADOW]`, any order,
-- each at most once; a word not starting with a letter is the quantity) or of a CL.ALL spec
-- (`[QUANTITY q] [PRECISION p]`; `spec` true). Returns the quantity (T, nil when absent),
-- MS, PRECISION's value (T, nil when absent), SHADOW, HELD's value (T) and DEBIT.
local function tail(args, i, last, accepts_precision, spec)
  local qm, qu, millis, pm, pu, shadow, hm, hu, debit
  while i <= last do
    local a = args[i]
    local b = byte(a)
    if not spec and not (b and ((b >= 65 and b <= 90) or (b >= 97 and b <= 122))) and qm == nil then
      qm, qu = integer(a)
    elseif not spec and not millis and is_word(a, 'MS') then
      millis = true
    elseif not spec and not shadow and is_word(a, 'SHADOW') then
      shadow = true
    elseif not spec and not debit and is_word(a, 'DEBIT') then
      debit = true
    elseif spec and qm == nil and is_word(a, 'QUANTITY') then
      i = i + 1
      if i > last then fail(ERR.syntax) end
      qm, qu = integer(args[i])
    elseif accepts_precision and pm == nil and is_word(a, 'PRECISION') then
      i = i + 1
      if i > last then fail(ERR.syntax) end
      pm, pu = integer(args[i])
    elseif hm == nil and is_word(a, 'HELD') then
      i = i + 1
      if i > last then fail(ERR.syntax) end
      hm, hu = integer(args[i])
    else
      fail(ERR.syntax)
    end
    i = i + 1
  end
  return qm, qu, millis, pm, pu, shadow, hm, hu, debit
end

-- `HELD t` (T, nil when absent) of a call with quantity (qm, qu): t in Unix milliseconds, a
-- plain number; only with a refund (core's limiter::held).
local function held_of(hm, hu, qm, qu)
  if hm == nil then return nil end
  if qm >= 0 then fail(ERR.held_refund) end
  if hm < 0 or hm > 9223372 or (hm == 9223372 and hu > 36854) then fail(fmt(ERR.range, 'held', '0', '9223372036854')) end
  return hm * M + hu
end

-- DEBIT (a charge counted whatever the limit says) takes a quantity of 0 or more (checked
-- before HELD, as the module checks it). Returns whether the call debits: a debit of 0 is a
-- pure check, decided as a peek.
local function debit_of(debit, qm, qu)
  if not debit then return false end
  if qm < 0 then fail(ERR.debit_negative) end
  return qm > 0 or qu > 0
end

local UNIT_NAME = { [false] = 'seconds', [true] = 'milliseconds' }

-- A time argument, 1 to 10^18 ns in the call's unit: whole ms (every time argument is whole
-- seconds or milliseconds).
local function duration(m, u, millis, name)
  local max = millis and 1000000000000 or 1000000000
  if m < 0 or (m == 0 and u == 0) or m * M + u > max then
    fail(fmt(ERR.range_unit, name, '1', millis and BOUND.milliseconds or BOUND.seconds, UNIT_NAME[millis]))
  end
  if millis then return m * M + u end
  return (m * M + u) * 1000
end

-- CL.QUOTA's words (core/src/quota.rs `Words`; core/src/calendar.rs `Zone::parse`, `parse_anchor`).

-- A word for an error message: printable ASCII, at most `most` characters (32 unless given;
-- CL.QUOTA's errors echo 40).
local function printable(word, most)
  most = most or 32
  local out = {}
  for i = 1, #word < most and #word or most do
    local b = byte(word, i)
    out[i] = (b >= 33 and b <= 126) and char(b) or '?'
  end
  return concat(out)
end

-- The lowercase names (the module looks a name up regardless of ASCII case), built at the
-- first name-like word.
local zone_set

-- TZ: UTC, Z or a fixed offset, as milliseconds east of UTC; for an IANA name, 0 and the
-- twin's refusal (raised once the call is decided: after every error the module gives).
local function quota_zone(word)
  if word == 'Z' or is_word(word, 'UTC') then return 0 end
  local sign = byte(word)
  if sign == 43 or sign == 45 then
    local r = sub(word, 2)
    local h, mi, s
    if find(r, '^%d%d$') then h, mi, s = tonumber(r), 0, 0
    elseif find(r, '^%d%d%d%d$') then h, mi, s = tonumber(sub(r, 1, 2)), tonumber(sub(r, 3, 4)), 0
    elseif find(r, '^%d%d:%d%d$') then h, mi, s = tonumber(sub(r, 1, 2)), tonumber(sub(r, 4, 5)), 0
    elseif find(r, '^%d%d:%d%d:%d%d$') then h, mi, s = tonumber(sub(r, 1, 2)), tonumber(sub(r, 4, 5)), tonumber(sub(r, 7, 8)) end
    local secs = h and h * 3600 + mi * 60 + s
    if not h or mi > 59 or s > 59 or secs > 93540 then fail(fmt(ERR.quota_offset, printable(word, 40))) end
    return (sign == 45 and -secs or secs) * 1000
  end
  local lower = string.lower
  if not zone_set then
    zone_set = {}
    for prefix, names in _G.pairs(ZONE_NAMES) do
      for name in string.gmatch(names, '%S+') do zone_set[lower(prefix .. name)] = true end
    end
  end
  if not zone_set[lower(word)] then fail(fmt(ERR.unknown_zone, printable(word, 40))) end
  return 0, fmt(ERR.twin_zone, printable(word, 40))
end

-- ANCHOR: Unix time in the call's unit, or `YYYY-MM-DDTHH:MM:SS[.f…](Z|±HH:MM)` on a whole ms.
local function quota_anchor(word, millis)
  local bad = function() fail(fmt(ERR.quota_anchor, printable(word, 40))) end
  local m, u = parse_i64(word)
  if m then
    -- |v| within the anchor range (below 2^53 ms) or out of it: t_capped keeps the order.
    local v = t_capped(m, u)
    local ms = millis and v or v * 1000
    if ms < ANCHOR_MIN or ms > ANCHOR_MAX then bad() end
    return ms
  end
  local y, mo, d, h, mi, s, rest = match(word, '^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)(.*)$')
  if not y then bad() end
  y, mo, d, h, mi, s = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
  if mo < 1 or mo > 12 or d < 1 or d > days_in_month(y, mo) or h > 23 or mi > 59 or s > 59 then bad() end
  local ms = 0
  local frac, zone = match(rest, '^%.(%d+)(.*)$')
  if frac then
    if #frac > 9 then bad() end
    frac = frac .. rep('0', 9 - #frac)
    if sub(frac, 4) ~= '000000' then bad() end
    ms, rest = tonumber(sub(frac, 1, 3)), zone
  end
  local offset
  if rest == 'Z' then offset = 0
  else
    local sign, oh, om = match(rest, '^([+-])(%d%d):(%d%d)$')
    if not sign then bad() end
    oh, om = tonumber(oh), tonumber(om)
    if oh > 23 or om > 59 then bad() end
    offset = (oh * 60 + om) * 60000 * (sign == '-' and -1 or 1)
  end
  local at = days_from_civil(y, mo, d) * MS_DAY + ((h * 60 + mi) * 60 + s) * 1000 + ms - offset
  if at < ANCHOR_MIN or at > ANCHOR_MAX then bad() end
  return at
end

-- The parameters; `words` args[first..last]: limit PER unit, then TZ, ANCHOR and the tail
-- (single: QUANTITY q, HELD t, MS, SHADOW, DEBIT; spec: QUANTITY q, HELD t). `millis` and
-- `debit`: the call's unit and DEBIT (spec only).
local function quota_parse(args, first, last, spec, millis, debit)
  local lm, lu = integer(args[first])
  if not is_word(args[first + 1], 'PER') then fail(ERR.quota_per) end
  local per = QUOTA_PER[args[first + 2]:upper()]
  if not per then fail(ERR.quota_unit) end
  local zone, anchor, rest = nil, nil, {}
  local i = first + 3
  while i <= last do
    local a = args[i]
    if is_word(a, 'TZ') or is_word(a, 'ANCHOR') then
      if i == last then fail(ERR.syntax) end
      if is_word(a, 'TZ') then
        if zone then fail(ERR.syntax) end
        zone = args[i + 1]
      else
        if anchor then fail(ERR.syntax) end
        anchor = args[i + 1]
      end
      i = i + 2
    else
      if #rest >= 7 then fail(ERR.syntax) end
      rest[#rest + 1] = a
      i = i + 1
    end
  end
  local qm, qu, shadow, hm, hu
  local j = 1
  while j <= #rest do
    local a = rest[j]
    if qm == nil and is_word(a, 'QUANTITY') then
      j = j + 1
      if j > #rest then fail(ERR.syntax) end
      qm, qu = integer(rest[j])
    elseif hm == nil and is_word(a, 'HELD') then
      j = j + 1
      if j > #rest then fail(ERR.syntax) end
      hm, hu = integer(rest[j])
    elseif not spec and not millis and is_word(a, 'MS') then millis = true
    elseif not spec and not shadow and is_word(a, 'SHADOW') then shadow = true
    elseif not spec and not debit and is_word(a, 'DEBIT') then debit = true
    else fail(ERR.syntax) end
    j = j + 1
  end
  millis = millis or false
  local offset, zone_refusal = 0, nil
  if zone then offset, zone_refusal = quota_zone(zone) end
  local anchor_ms = anchor and quota_anchor(anchor, millis)
  if lm < 0 or (lm == 0 and lu < 1) or lm > 999999999999 then fail(fmt(ERR.range, 'limit', '1', BOUND.counter_limit)) end
  local limit = t_capped(lm, lu)
  -- Where, within its period, a period starts (local): the anchor's fields or the calendar's.
  local pos = { ms = 0, month = 1, day = 1, weekday = 0 }
  if anchor_ms then
    local lc = anchor_ms + offset
    local days = div_floor(lc, MS_DAY)
    local _, am, ad = civil_from_days(days)
    pos = { ms = lc - days * MS_DAY, month = am, day = ad, weekday = (days + 3) % 7 }
  end
  if qm == nil then qm, qu = 0, 1 end
  local debits = debit_of(debit, qm, qu)
  local held = held_of(hm, hu, qm, qu)
  return { limit = limit, per = per, offset = offset, pos = pos, refuse = zone_refusal or refusal(limit, 'limit') }, qm, qu, millis, shadow or false, held, debits
end

-- Each command's table: its name, positional arguments and optional words (the most its tail
-- may have), its word in a CL.ALL spec, and how its parameters are built from the positional
-- integers `a` (T pairs: a[1], a[2] the first, ...), the unit and PRECISION's value.
local COMMANDS = {
  throttle = {
    name = 'cl.throttle', positional = 3, optional = 6, word = 'THROTTLE',
    build = function(a, millis)
      local period = duration(a[5], a[6], millis, 'period')
      return gcra_params(a[1], a[2], a[3], a[4], period)
    end,
  },
  window = {
    name = 'cl.window', positional = 2, optional = 8, word = 'WINDOW', precision = true,
    build = function(a, millis, pm, pu)
      local window = duration(a[3], a[4], millis, 'window')
      local precision
      if pm then
        -- At most 10000 buckets, stated in the call's unit.
        local w = a[3] * M + a[4]
        local least = div_ceil(w, 10000)
        if pm < 0 or pm * M + pu < least or pm * M + pu > w then
          fail(fmt(ERR.range_unit, 'precision', fmt('%d', least), fmt('%d', w), UNIT_NAME[millis]))
        end
        precision = duration(pm, pu, millis, 'precision')
      end
      return window_params(a[1], a[2], window, precision)
    end,
  },
  bucket = {
    name = 'cl.bucket', positional = 3, optional = 6, word = 'BUCKET',
    build = function(a, millis)
      local interval = duration(a[5], a[6], millis, 'interval')
      return bucket_params(a[1], a[2], a[3], a[4], interval)
    end,
  },
  -- Its words are not all numbers (quota_parse reads them); `positional` counts `PER unit`.
  quota = { name = 'cl.quota', positional = 3, word = 'QUOTA', zone = true },
  counter = {
    name = 'cl.counter', positional = 2, optional = 6, word = 'COUNTER',
    build = function(a, millis)
      local window = duration(a[3], a[4], millis, 'window')
      return counter_params(a[1], a[2], window)
    end,
  },
}

-- The positional integers of a limiter, args[first] on, as T pairs.
local function positional(command, args, first)
  local a = {}
  for i = 1, command.positional do
    a[2 * i - 1], a[2 * i] = integer(args[first + i - 1])
  end
  return a
end

-- Parses a single command's arguments after its key: its parameters, quantity (T), unit,
-- SHADOW, HELD (Unix ms) and whether it debits.
local function parse(kind, args)
  if kind == 'quota' then
    -- `limit PER unit` then at most TZ zone, ANCHOR instant, QUANTITY q, HELD t, MS, SHADOW
    -- and DEBIT.
    if #args < 3 or #args > 14 then fail(fmt(ERR.arity, 'cl.quota')) end
    return quota_parse(args, 1, #args, false, false)
  end
  local command = COMMANDS[kind]
  local n = #args
  if n < command.positional or n > command.positional + command.optional then fail(fmt(ERR.arity, command.name)) end
  local a = positional(command, args, 1)
  local qm, qu, millis, pm, pu, shadow, hm, hu, debit = tail(args, command.positional + 1, n, command.precision, false)
  millis = millis or false
  if qm == nil then qm, qu = 0, 1 end
  local p = command.build(a, millis, pm, pu)
  local debits = debit_of(debit, qm, qu)
  return p, qm, qu, millis, shadow or false, held_of(hm, hu, qm, qu), debits
end

return {
  tail = tail, held_of = held_of, debit_of = debit_of, printable = printable, quota_parse = quota_parse,
  COMMANDS = COMMANDS, positional = positional, parse = parse,
}

-- CL.QUOTA: a calendar quota (core/src/quota.rs) in UTC or a fixed offset (Lua has no tz
-- database: an IANA name is refused). The count (CL.COUNTER's form) on a key expiring at the
-- period's end; a live key expiring at another instant was written under another calendar
-- (or a counter's window, or before the clock stepped back): its count carries over, to the
-- later of the two ends. Every instant here is a whole millisecond, below 2^53.

local integers, calendar = lib.integers, lib.calendar
local div_floor, int_text, parse_i64 = integers.div_floor, integers.int_text, integers.parse_i64
local t_capped, t_sub, t_text = integers.t_capped, integers.t_sub, integers.t_text
local decision, invalid = lib.kinds.decision, lib.kinds.invalid
local debited, refunded, stamped_at = lib.counter.debited, lib.counter.refunded, lib.counter.stamped_at
local MS_DAY, civil_from_days = calendar.MS_DAY, calendar.civil_from_days
local days_from_civil, days_in_month = calendar.days_from_civil, calendar.days_in_month

local QUOTA_PER = { MINUTE = 1, HOUR = 2, DAY = 3, WEEK = 4, MONTH = 5, YEAR = 6 }

local function quota_index(per, lc)
  local days = div_floor(lc, MS_DAY)
  if per == 1 then return div_floor(lc, 60000) end
  if per == 2 then return div_floor(lc, 3600000) end
  if per == 3 then return days end
  if per == 4 then return div_floor(days + 3, 7) end
  local y, m = civil_from_days(days)
  if per == 5 then return y * 12 + m - 1 end
  return y
end

local function quota_local_start(p, index)
  local per, pos = p.per, p.pos
  if per == 1 then return index * 60000 + pos.ms % 60000 end
  if per == 2 then return index * 3600000 + pos.ms % 3600000 end
  if per == 3 then return index * MS_DAY + pos.ms end
  if per == 4 then return (index * 7 - 3 + pos.weekday) * MS_DAY + pos.ms end
  local y, m
  if per == 5 then
    y = div_floor(index, 12)
    m = index - y * 12 + 1
  else
    y, m = index, pos.month
  end
  local dim = days_in_month(y, m)
  return days_from_civil(y, m, pos.day < dim and pos.day or dim) * MS_DAY + pos.ms
end

-- The period [start, end) (ms) holding nm, kept on the (cached) parameters until it ends.
local function quota_period(p, nm)
  if p.ps and p.ps <= nm and nm < p.pe then return p.ps, p.pe end
  local off = p.offset
  local index = quota_index(p.per, nm + off)
  local start = quota_local_start(p, index) - off
  while start > nm do
    index = index - 1
    start = quota_local_start(p, index) - off
  end
  local e = quota_local_start(p, index + 1) - off
  while e <= nm do
    index, start = index + 1, e
    e = quota_local_start(p, index + 1) - off
  end
  p.ps, p.pe = start, e
  return start, e
end

-- `debit`: as CL.COUNTER's.
local function quota_decide(p, stored, expiry_ms, nm, nu, qm, qu, q, debit)
  local _, e = quota_period(p, nm)
  local cm, cu = 0, 0
  local live, moved = false, false
  if stored then
    cm, cu = parse_i64(stored)
    if not cm or cm < 0 or cm > 999999999999 then invalid('quota', stored) end
    local at = stamped_at(expiry_ms) -- nil: no expiry (or beyond i64 ns): lives, ends with this period
    live = at == nil or at > nm
    -- A live key's later expiry stands (no call moves it earlier): the count ends then.
    if live and at and at > e then e = at end
    moved = live and at ~= e
  end
  if not live then cm, cu = 0, 0 end
  local count = t_capped(cm, cu)
  local um, uu = t_sub(e, 0, nm, nu) -- until the period ends
  local function reply(limited, c, rm, ru)
    if c > 0 then return decision(limited, p.limit, c, rm, ru, um, uu) end
    return decision(limited, p.limit, c, rm, ru, 0, 0)
  end
  local function denied(d)
    if moved and q ~= 0 then d.eff, d.value, d.at = 'set', t_text(cm, cu), e end
    return d
  end
  if q < 0 then
    if not live then return reply(0, 0) end
    local km, ku = refunded(cm, cu, qm, qu)
    local c = t_capped(km, ku)
    local d = reply(0, c)
    if c == 0 then d.eff = 'del' else d.eff, d.value, d.at = 'set', t_text(km, ku), e end
    return d
  end
  if debit then
    local km, ku = debited(cm, cu, qm, qu)
    local d
    if q > p.limit then d = reply(1, t_capped(km, ku))
    elseif count + q > p.limit then d = reply(1, t_capped(km, ku), um, uu)
    else d = reply(0, t_capped(km, ku)) end
    d.eff, d.value, d.at = 'set', t_text(km, ku), e
    return d
  end
  if q > p.limit then return denied(reply(1, count)) end
  if count + q > p.limit then return denied(reply(1, count, um, uu)) end
  if q == 0 then return reply(0, count) end
  local c = count + q
  local d = reply(0, c)
  d.eff, d.value, d.at = 'set', int_text(c), e
  return d
end

return { QUOTA_PER = QUOTA_PER, quota_decide = quota_decide }

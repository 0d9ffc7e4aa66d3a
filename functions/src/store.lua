-- Keys: read once, decide, then write the effect (as the module's store.rs: integers as
-- `SET key value PXAT ms`; a window edit in place as SETRANGEs + PEXPIREAT, else one SET).

local ERR, fail = lib.errors.ERR, lib.errors.fail
local int_text, t_capped = lib.integers.int_text, lib.integers.t_capped
local clock, reply_time = lib.time.clock, lib.time.reply_time
local gcra_decide = lib.throttle.gcra_decide
local counter_decide = lib.counter.counter_decide
local quota_decide = lib.quota.quota_decide
local bucket_decide = lib.bucket.bucket_decide
local read_window, whole = lib.window.read_window, lib.window.whole
local CHUNK = lib.window_exact.CHUNK
local window_decide = lib.window_decide.window_decide
local parse = lib.arguments.parse

local function read(key, with_expiry)
  local v = rpcall('GET', key)
  if type(v) == 'table' then
    if v.err then fail(ERR.wrongtype) end
    fail(fmt(ERR.internal, 'GET returned a ' .. type(v)))
  end
  if v == false then return nil end
  if with_expiry then return v, rcall('PEXPIRETIME', key) end
  return v
end

local READS_EXPIRY = { counter = true, bucket = true, quota = true }

local function read_of(kind, key)
  if kind == 'window' then return read_window(key) end
  return read(key, READS_EXPIRY[kind])
end

-- `held` (Unix ms, with a refund only): the refund gives back at most what the limiter still
-- holds of the units (core's Limiter::decide_held); a refund bounded to nothing answers as a
-- peek, and no bounded refund reads as a denial.
-- `dry`: CL.ALL's first pass (see exact_decide). `debit` (a quantity above 0 with DEBIT): the
-- units are counted whatever the limit says, `limited` telling whether they overdrew; the
-- algorithms get it as the quantity's T, { qm, qu }.
local function decide(kind, p, stored, expiry, nm, nu, qm, qu, held, dry, debit)
  local q = t_capped(qm, qu)
  if held and q < 0 and (kind == 'counter' or kind == 'quota') then
    -- Only while the window or period the units were counted in (the one ending at `held`) is open.
    if not (stored and expiry == held and nm < held) then qm, qu, q = 0, 0, 0 end
  end
  -- (A debit carries its quantity as T: some bounds are checked on the exact sum.)
  if debit then debit = { qm, qu } end
  local d
  if kind == 'throttle' then d = gcra_decide(p, stored, nm, nu, qm, qu, q, held, debit)
  elseif kind == 'window' then d = window_decide(p, stored, nm, nu, q, dry, held, debit)
  elseif kind == 'bucket' then d = bucket_decide(p, stored, expiry, nm, nu, qm, qu, q, held, debit)
  elseif kind == 'quota' then d = quota_decide(p, stored, expiry, nm, nu, qm, qu, q, debit)
  else d = counter_decide(p, stored, expiry, nm, nu, qm, qu, q, debit) end
  -- (The call decided without an error the module would give: now the twin's own refusal.)
  if p.refuse then fail(p.refuse) end
  if held and kind ~= 'throttle' then d[1], d.rm = 0, nil end
  return d
end

local function apply(key, d, stored)
  local eff = d.eff
  if not eff then return end
  if eff == 'set' then
    rcall('SET', key, d.value, 'PXAT', int_text(d.at))
  elseif eff == 'del' then
    if stored ~= nil then rcall('DEL', key) end
  elseif type(d.whole) == 'table' then
    -- A value in pieces: the first with its expiry, the others appended (byte for byte the
    -- value the module writes at once); a short one at once.
    local parts = d.whole
    if #parts <= 3 and #parts[1] + #(parts[2] or '') + #(parts[3] or '') <= CHUNK then
      rcall('SET', key, concat(parts), 'PXAT', int_text(d.at))
      return
    end
    rcall('SET', key, parts[1], 'PXAT', int_text(d.at))
    for i = 2, #parts do rcall('APPEND', key, parts[i]) end
  elseif d.whole or stored == nil or d.len < (type(stored) == 'table' and stored.n or #stored) then
    local value = d.whole
    if not value then -- an edit of no key, or a shrink: apply it and write the whole value
      value = sub(whole(stored) or '', 1, d.len)
      if #value < d.len then value = value .. rep('\0', d.len - #value) end
      for i = 1, #d.chunks do
        local c = d.chunks[i]
        value = sub(value, 1, c[1]) .. c[2] .. sub(value, c[1] + #c[2] + 1)
      end
    end
    rcall('SET', key, value, 'PXAT', int_text(d.at))
  else
    for i = 1, #d.chunks do rcall('SETRANGE', key, fmt('%d', d.chunks[i][1]), d.chunks[i][2]) end
    rcall('PEXPIREAT', key, int_text(d.at))
  end
end

local function five(d, millis)
  if d.rm then d[4] = reply_time(d.rm, d.ru, millis) end
  d[5] = reply_time(d.sm, d.su, millis)
  return d
end

-- SHADOW: a denial answered as an admission (`limited` 0, no retry time); the rest of the
-- reply, and what was stored, stay as decided (a debit's effect is dropped by its caller).
local function shadowed(d)
  if d[1] == 1 then d[1], d[4], d.rm = 0, -1, nil end
  return d
end

local PARSED, parsed_count = { throttle = {}, window = {}, bucket = {}, counter = {}, quota = {} }, 0

-- One limiter command: FCALL cl_<kind> 1 key args...
local function single(kind, keys, args)
  if #keys ~= 1 then fail(fmt(ERR.one_key, 'cl_' .. kind, 'cl_' .. kind)) end
  -- Parsed parameters are kept (the library's state lives between calls; the EVAL form starts
  -- afresh each time). The key (the word count, then the words joined by spaces) is the same
  -- for two vectors only when the words hold no space, as every vector that parses.
  local n = #args
  local ck
  if n == 3 then ck = '3' .. args[1] .. ' ' .. args[2] .. ' ' .. args[3]
  elseif n == 2 then ck = '2' .. args[1] .. ' ' .. args[2]
  else ck = n .. concat(args, ' ') end
  local hit = PARSED[kind][ck]
  local p, qm, qu, millis, shadow, held, debit
  if hit then
    p, qm, qu, millis, shadow, held, debit = hit[1], hit[2], hit[3], hit[4], hit[5], hit[6], hit[7]
  else
    p, qm, qu, millis, shadow, held, debit = parse(kind, args)
    if parsed_count >= 512 then PARSED, parsed_count = { throttle = {}, window = {}, bucket = {}, counter = {}, quota = {} }, 0 end
    hit = { p, qm, qu, millis, shadow, held, debit }
    PARSED[kind][ck] = hit
    parsed_count = parsed_count + 1
  end
  single_params = hit
  local key = keys[1]
  local nm, nu = clock()
  local stored, expiry = read_of(kind, key)
  local d = decide(kind, p, stored, expiry, nm, nu, qm, qu, held, false, debit)
  -- SHADOW on a debit writes nothing.
  if not (shadow and debit) then apply(key, d, stored) end
  -- A refused take or check (quantity >= 0), or an overdrawn debit, is a denial; a refund never.
  if shadow and qm >= 0 then shadowed(d) end
  return five(d, millis)
end

return {
  read_of = read_of, decide = decide, apply = apply, five = five, shadowed = shadowed,
  single = single,
}

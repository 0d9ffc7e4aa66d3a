-- Kinds of stored values (core/src/limiter.rs `Algorithm::owning`): disjoint, so that one
-- limiter's key used by another is WRONGTYPE and left alone.

local integers = lib.integers
local ERR, fail = lib.errors.ERR, lib.errors.fail
local MIN_TAT_M, parse_i64, t_lt = integers.MIN_TAT_M, integers.parse_i64, integers.t_lt
local t_sub = integers.t_sub

local function kind_of(stored)
  local b = byte(stored)
  if b == 1 or b == 2 then return 'window' end
  if b == 80 then -- 'P' and a TAT: a pacer's key (CL.PACE, module only), never read here
    local m = parse_i64(sub(stored, 2))
    if m and m >= MIN_TAT_M then return 'pace' end
    return nil
  end
  local m = parse_i64(stored)
  if not m then return nil end
  if m >= MIN_TAT_M then return 'throttle' end
  if m >= 0 then return 'counter' end
  return 'bucket'
end

local STATE_NAME = { throttle = 'CL.THROTTLE', window = 'CL.WINDOW', bucket = 'CL.BUCKET', counter = 'CL.COUNTER', quota = 'CL.QUOTA' }

-- The error for a stored value `own`'s decoder refused.
local function invalid(own, stored)
  local kind = kind_of(stored)
  if kind and kind ~= own then fail(ERR.wrongtype) end
  fail(fmt(ERR.invalid, STATE_NAME[own]))
end

---------------------------------------------------------------------------------------------
-- Decisions. Each algorithm decides without writing and returns a decision:
--   limited (0/1), limit, remaining, retry (rm, ru; rm nil when none), reset (sm, su)
--   and its effect: eff = nil | 'set' (value, at) | 'del' | 'patch' (len, chunks, whole, at);
--   `at` is the key's absolute expiry in whole milliseconds.

-- A decision is also its reply: slots 1 to 5 are the five integers (4 and 5 filled by `five`
-- in the call's unit); Redis replies a table's array part only.
local function decision(limited, limit, used, rm, ru, sm, su)
  local remaining = limit - used
  if remaining < 0 then remaining = 0 elseif remaining > limit then remaining = limit end
  return { limited, limit, remaining, -1, 0, rm = rm, ru = ru, sm = sm, su = su, eff = false, value = false, at = false }
end

-- `b - a` for instants, or zero when a is not earlier.
local function since(bm, bu, am, au)
  if t_lt(am, au, bm, bu) then return t_sub(bm, bu, am, au) end
  return 0, 0
end

return { invalid = invalid, decision = decision, since = since }

-- Errors: every text the twin replies (the module's, and the twin's own refusals), and how a
-- call's error becomes its reply (`run`, which every entry point calls).


-- @errors begin
-- Every error text, in one place: the module's (core/src/error.rs; the ranges of each
-- command's table, core/src/limiter.rs and the algorithms' Params::new).
local ERR = {
  arity = "ERR wrong number of arguments for '%s' command",
  integer = 'ERR value is not an integer or out of range',
  range = 'ERR %s must be an integer from %s to %s',
  held_refund = 'ERR HELD is valid only with a negative quantity (a refund)',
  -- DEBIT (core/src/limiter.rs): a charge, never a refund; and its bounds.
  debit_negative = 'ERR DEBIT takes a quantity of 0 or more (a refund is a negative quantity without DEBIT)',
  debit_too_large = 'ERR DEBIT is too large: a count must stay at most %s',
  debit_too_long = 'ERR DEBIT is too large: an exact window logs at most %s units a call (use PRECISION for larger budgets)',
  debit_too_deep = 'ERR DEBIT is too large: an exact window holds at most %s units (use PRECISION for larger budgets)',
  range_unit = 'ERR %s must be an integer from %s to %s (%s)',
  too_fast = 'ERR rate is too fast: period divided by count is less than one nanosecond',
  span = 'ERR parameters are too large: %s must be at most 1000000000 seconds (1000000000000 milliseconds)',
  too_large = 'ERR parameters are too large: their nanosecond arithmetic overflows 64 bits',
  syntax = 'ERR syntax error',
  wrongtype = 'WRONGTYPE Operation against a key holding the wrong kind of value',
  invalid = 'ERR key does not hold valid %s state',
  internal = 'ERR internal error in the throttle twin: %s',
  -- CL.ALL (core/src/all.rs)
  numkeys = 'ERR numkeys must be an integer from 1 to 16',
  all_twice = 'ERR limiters %d and %d name the same key',
  all_count = 'ERR numkeys is %d but %d limiter specs follow the keys',
  all_word = "ERR limiter %d: expected THROTTLE, WINDOW, BUCKET, COUNTER or QUOTA, got '%s'",
  all_numbers = 'ERR limiter %d: %s takes %d numbers',
  all_option = 'ERR limiter %d: %s does not take %s',
  in_limiter = 'ERR limiter %d: %s',
  -- The twin's own: FCALL's key count, the EVAL form's function name, and what a double
  -- cannot carry exactly.
  one_key = 'ERR %s takes exactly one key: FCALL %s 1 <key> ...',
  eval_name = "ERR unknown function '%s': the first argument is cl_throttle, cl_window, cl_bucket, cl_counter, cl_quota, cl_all, cl_each or cl_version",
  twin_limit = 'ERR parameters are too large for the Functions twin: a %s above 9007199254740991 cannot be replied exactly (use the module)',
  twin_state = 'ERR key holds %s state beyond what the Functions twin computes exactly (use the module)',
  twin_all_ring = 'ERR key holds a CL.WINDOW ring of more than 10000 buckets (throttle.max-buckets raised for the module), which cl_all in the Functions twin does not read: call cl_window on that key alone, or use the module',
  twin_all_converts = 'ERR cl_all would convert the CL.WINDOW state of %d keys (longer than 4 KB, another layout or precision than their specs): the Functions twin converts at most 8 in one call (call cl_window on such keys alone, or use the module)',
  -- CL.QUOTA (core/src/quota.rs), and the twin's own refusal of IANA names.
  quota_unit = 'ERR unit must be MINUTE, HOUR, DAY, WEEK, MONTH or YEAR',
  quota_per = 'ERR expected PER unit after the limit (e.g. 1000 PER MONTH)',
  quota_offset = "ERR bad offset '%s' for TZ: use +HH:MM or -HH:MM (at most 25:59)",
  quota_anchor = "ERR bad ANCHOR '%s': use Unix time in the call's unit or an RFC 3339 instant such as 2026-01-31T09:00:00Z, on a whole millisecond",
  unknown_zone = "ERR unknown time zone '%s' for TZ: use an IANA name (e.g. Europe/Berlin) or an offset (e.g. +05:30)",
  twin_zone = "ERR TZ '%s': the Functions twin has no time zone database; pass a fixed offset such as +01:00 (or use the module)",
}
-- The bounds the range errors state (as text: most are beyond what a double carries exactly).
local BOUND = {
  i64_max = '9223372036854775807',
  max_burst = '999999999999999999',        -- 10^18 - 1: a tolerance of at most 10^18 ns
  count = '1000000000000000000',           -- 10^18
  counter_limit = '999999999999999999',    -- below 10^18, the smallest CL.THROTTLE value
  seconds = '1000000000',                  -- durations: at most 10^18 ns
  milliseconds = '1000000000000',
  exact_limit = '100000',
  exact_hint = 'use PRECISION for larger limits',
  throttle_span = '(max_burst + 1) * period / count',
  bucket_span = 'interval * ceil(capacity / tokens)',
  debit_throttle_span = 'quantity * period / count',
  debit_bucket_span = 'interval * ceil(deficit / tokens)',
}
-- @errors end

-- Errors travel as Lua errors; the text of the last one raised on purpose is kept in `failed`
-- (main.lua: Redis turns error values into strings), so that anything else is known to be a bug.
local function fail(text)
  failed = text
  error(text, 0)
end

-- The twin's own refusals (what a double cannot carry) come after every error the module would
-- give for the same call (any argument error, WRONGTYPE, a state it finds invalid): a limit the
-- twin cannot reply is kept with the parameters (`refuse`) and raised once the call is decided;
-- `twin_refusal` tells such an error from the module's.
local function refusal(limit, name)
  if limit > 9007199254740991 then return fmt(ERR.twin_limit, name) end
  return nil
end

---------------------------------------------------------------------------------------------
-- An entry point's call (the standard library bound first). An error raised by `fail` is the
-- reply; anything else is a bug, answered as an error like the module's caught panics.

local function run(f, a, b, c)
  if not bound then bind() end
  failed = nil
  local ok, res = pcall(f, a, b, c)
  if ok then return res end
  if res == failed then return error_reply(res) end
  return error_reply(fmt(ERR.internal, tostring(res)))
end

return { ERR = ERR, BOUND = BOUND, fail = fail, refusal = refusal, run = run }

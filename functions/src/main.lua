#!lua name=throttle
--[[
redis-throttle's Functions twin, version @VERSION@: CL.THROTTLE, CL.WINDOW, CL.BUCKET,
CL.COUNTER, CL.QUOTA (UTC and fixed offsets), CL.ALL and CL.EACH as Redis Functions, for servers that
cannot load modules (managed Redis and Valkey).

  Load (Redis 7.0+, Valkey 7.2+):  redis-cli -x FUNCTION LOAD REPLACE < functions/throttle.lua
  Call:  FCALL cl_throttle 1 <key> <max_burst> <count> <period> [quantity] [HELD t] [MS] [SHADOW] [DEBIT]
         FCALL cl_window   1 <key> <limit> <window> [quantity] [HELD t] [MS] [PRECISION p] [SHADOW] [DEBIT]
         FCALL cl_bucket   1 <key> <capacity> <tokens> <interval> [quantity] [HELD t] [MS] [SHADOW] [DEBIT]
         FCALL cl_counter  1 <key> <limit> <window> [quantity] [HELD t] [MS] [SHADOW] [DEBIT]
         FCALL cl_quota    1 <key> <limit> PER <unit> [TZ offset] [ANCHOR instant] [QUANTITY q] [HELD t] [MS] [SHADOW] [DEBIT]
         FCALL cl_all <numkeys> <key>... <spec>... [MS] [DETAILS] [SHADOW] [DEBIT]
         FCALL cl_each <numkeys> <key>... <spec>... [MS] [SHADOW] [DEBIT]
         FCALL_RO cl_version 0    (the library's version, as a string; FCALL works too)

Same replies, errors, stored bytes and absolute expiries as the module at the same instant, so
keys move between the twin and the module in both directions. The clock is `TIME` (Redis's
command time, frozen for a whole transaction on 7.2+). The README ("Without the module") says
when to use which. `scripts/twin.sh eval` prints this code as one EVAL/EVALSHA script.

The sources are functions/src: this file (what the library binds and shares, and its parts in
order) and one file per concern, each a function scope whose exports other parts import from
`lib` (so that this main chunk holds few locals: Lua 5.1 allows 200). `make twin` assembles
them into functions/throttle.lua, the one file users load.

Exact arithmetic. Lua numbers are doubles, exact for integers below 2^53, while instants are
nanoseconds near 2^61. Every integer that may pass 2^53 is carried as a pair (m, u) worth
m * 10^6 + u with 0 <= u < 10^6 ("T" below): milliseconds and the nanoseconds within the
millisecond for times, the same split for any other 64-bit integer. Plain numbers are used only
where the value is known to stay below 2^53. The few inputs the twin cannot answer exactly are
refused with an error (they are listed in the README), never answered with a wrong number.
]]

-- At FUNCTION LOAD only `redis` exists; the standard library is bound at the first call.
local floor, byte, char, sub, fmt, find, rep, concat, tonumber, tostring, type, error, pcall
local rcall, rpcall, error_reply, unpack, unpack_i8, unpack_u8, lua_unpack, pack, pack_pairs
local match -- (CL.QUOTA's instants)
local setmetatable -- (a long ring's lazily decoded counts)
local COUNT_LE -- the i64 bytes of each count below 256
local bound = false
local function bind()
  floor = math.floor
  byte, char, sub, fmt, find, rep = string.byte, string.char, string.sub, string.format, string.find, string.rep
  -- (struct: Redis's and Valkey's bundled library; a long ring's counts are decoded with it, 256
  -- at a time. unpack: a table's values as arguments, to make one string of many bytes.)
  unpack, unpack_i8, unpack_u8, lua_unpack = struct.unpack, '<' .. rep('i8', 256), '<' .. rep('I8', 256), _G.unpack
  pack, pack_pairs = struct.pack, '<' .. rep('I4i4', 128)
  concat = table.concat
  match = string.match
  tonumber, tostring, type, error, pcall = _G.tonumber, _G.tostring, _G.type, _G.error, _G.pcall
  setmetatable = _G.setmetatable
  -- Made as they are first asked for, not here: the EVAL form runs this on every call.
  COUNT_LE = setmetatable({}, { __index = function(t, c)
    if c >= 0 and c <= 255 then
      local bytes = char(c) .. '\0\0\0\0\0\0\0'
      t[c] = bytes
      return bytes
    end
  end })
  rcall, rpcall, error_reply = redis.call, redis.pcall, redis.error_reply
  bound = true
end

-- The library's version: the workspace's (Cargo.toml), written in by `make twin`.
local VERSION = '@VERSION@'

-- State shared by several parts, kept here as upvalues of each (a hot path reads them without
-- a table look-up).
-- Errors travel as Lua errors; the text of the last one raised on purpose is kept here (Redis
-- turns error values into strings), so that anything else is known to be a bug (errors.lua).
local failed
-- The last TAT text written, and its value: a hot key's next call reads it back (Lua strings
-- are interned, so the comparison is one pointer), and skips parsing it (throttle.lua, hot.lua).
local last_tat, last_am, last_au
-- The decimal text of the current millisecond, and a table of '000' to '999' (throttle.lua's
-- instant_ms, read by hot.lua's cl_throttle).
local D3, text_m, text_m_digits
-- The last call's parsed parameters (store.lua's `single`; the hot paths keep them).
local single_params

-- The parts, in order: each functions/src/NAME.lua becomes `lib.NAME`, the table it returns.
local lib = {}
-- @include errors
-- @include integers
-- @include time
-- @include kinds
-- @include throttle
-- @include counter
-- @include calendar
-- @include quota
-- @include bucket
-- @include window
-- @include window_exact
-- @include window_buckets
-- @include window_to_buckets
-- @include window_to_exact
-- @include window_decide
-- @include zones
-- @include arguments
-- @include store
-- @include all
-- @include hot
-- @include entry
-- @eval begin
-- return lib.entry.run(lib.entry.eval_dispatch, KEYS, ARGV)
-- @eval end

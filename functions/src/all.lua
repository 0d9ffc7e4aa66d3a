-- CL.ALL numkeys key... spec... [MS] [DETAILS] [SHADOW] [DEBIT]: several limiters decided at one
-- instant, all or nothing (the module's core/src/all.rs); with DEBIT, every limiter counts its
-- quantity, overdrawn or not. The keys are FCALL's keys.
--   spec := THROTTLE max_burst count period [QUANTITY q] [HELD t]
--         | WINDOW limit window [PRECISION p] [QUANTITY q] [HELD t]
--         | BUCKET capacity tokens interval [QUANTITY q] [HELD t]
--         | COUNTER limit window [QUANTITY q] [HELD t]
-- MS, DETAILS, SHADOW and DEBIT may come anywhere after the keys (they end a spec).

local arguments, store = lib.arguments, lib.store
local ERR, fail = lib.errors.ERR, lib.errors.fail
local div_ceil, le_t = lib.integers.div_ceil, lib.integers.le_t
local clock, reply_time = lib.time.clock, lib.time.reply_time
local RING_MAX_SLOTS = lib.window.RING_MAX_SLOTS
local RING_HEAD = lib.window_buckets.RING_HEAD
local COMMANDS, debit_of, held_of = arguments.COMMANDS, arguments.debit_of, arguments.held_of
local positional = arguments.positional
local printable, quota_parse, tail = arguments.printable, arguments.quota_parse, arguments.tail
local apply, decide, five, read_of = store.apply, store.decide, store.five, store.read_of
local shadowed = store.shadowed

local ALL_KINDS = { THROTTLE = 'throttle', WINDOW = 'window', BUCKET = 'bucket', COUNTER = 'counter', QUOTA = 'quota' }
local ALL_MAX_KEYS = 16

-- The options some spec takes (the module's spec_option): one right after a spec that does not
-- take it is that spec's error.
local ALL_OPTIONS = { QUANTITY = true, HELD = true, PRECISION = true, TZ = true, ANCHOR = true }

-- An error of limiter i: every argument error names the limiter; WRONGTYPE (Redis's own key
-- error) and a bug do not.
local function in_limiter(i, text)
  if text == ERR.wrongtype or sub(text, 1, 18) == 'ERR internal error' then return text end
  return fmt(ERR.in_limiter, i, sub(text, 5))
end

-- Runs f(...) with its errors named after limiter i.
local function as_limiter(i, f, ...)
  local ok, r1, r2, r3, r4, r5 = pcall(f, ...)
  if ok then return r1, r2, r3, r4, r5 end
  if r1 == failed then fail(in_limiter(i, r1)) end
  error(r1, 0)
end

-- A spec's numbers and options: its parameters, quantity (T), HELD and whether it debits (the
-- call's DEBIT, `debit`).
local function parse_spec(spec, args, millis, debit)
  if spec.kind == 'quota' then
    local p, qm, qu, _, _, held, debits = quota_parse(args, spec.first, spec.last, true, millis, debit)
    return p, qm, qu, held, debits
  end
  local command = COMMANDS[spec.kind]
  local a = positional(command, args, spec.first)
  local qm, qu, _, pm, pu, _, hm, hu = tail(args, spec.first + command.positional, spec.last, command.precision, true)
  if qm == nil then qm, qu = 0, 1 end
  local p = command.build(a, millis, pm, pu)
  local debits = debit_of(debit, qm, qu)
  return p, qm, qu, held_of(hm, hu, qm, qu), debits
end

-- A call's keys and words: its limiters (parsed specs), then MS, DETAILS (CL.ALL's only),
-- SHADOW and DEBIT. `name`: the command's, for the arity error.
local function parse_call(keys, args, name)
  local nkeys = #keys
  -- Redis's arity: numkeys key and the shortest spec, six words with the name.
  if nkeys + #args < 4 then fail(fmt(ERR.arity, name)) end
  if nkeys < 1 or nkeys > ALL_MAX_KEYS then fail(ERR.numkeys) end
  for i = 2, nkeys do
    for j = 1, i - 1 do
      if keys[i] == keys[j] then fail(fmt(ERR.all_twice, j, i)) end
    end
  end
  -- Split the specs (each its algorithm's word, its numbers, then the options it accepts with
  -- their values) from the call's own words.
  local detailed = name == 'cl.all'
  local specs, calls = {}, {}
  local n, i = #args, 1
  local after_spec = false -- whether args[i] directly follows a spec (no call option between)
  while i <= n do
    local word = args[i]
    local upper = word:upper()
    if upper == 'MS' or (detailed and upper == 'DETAILS') or upper == 'SHADOW' or upper == 'DEBIT' then
      calls[#calls + 1] = upper
      i = i + 1
      after_spec = false
    else
      local index = #specs + 1
      local kind = ALL_KINDS[upper]
      if kind == nil then
        if after_spec and ALL_OPTIONS[upper] then
          fail(fmt(ERR.all_option, index - 1, COMMANDS[specs[index - 1].kind].word, upper))
        end
        if index > nkeys then fail(ERR.syntax) end
        fail(fmt(ERR.all_word, index, printable(word)))
      end
      local command = COMMANDS[kind]
      local last = i + command.positional
      if last > n then fail(fmt(ERR.all_numbers, index, command.word, command.positional)) end
      while last < n do
        local option = args[last + 1]:upper()
        if option ~= 'QUANTITY' and option ~= 'HELD' and not (command.precision and option == 'PRECISION') and not (command.zone and (option == 'TZ' or option == 'ANCHOR')) then break end
        last = last + 2 -- the option and its value (a missing value is the spec's syntax error)
      end
      if last > n then last = n end
      specs[index] = { kind = kind, first = i + 1, last = last }
      i = last + 1
      after_spec = true
    end
  end
  if #specs ~= nkeys then fail(fmt(ERR.all_count, nkeys, #specs)) end
  local millis, details, shadow, debit = false, false, false, false
  for c = 1, #calls do
    if calls[c] == 'MS' and not millis then millis = true
    elseif calls[c] == 'DETAILS' and not details then details = true
    elseif calls[c] == 'SHADOW' and not shadow then shadow = true
    elseif calls[c] == 'DEBIT' and not debit then debit = true
    else fail(ERR.syntax) end
  end
  local parsed = {}
  for s = 1, nkeys do
    local p, qm, qu, held, debits = as_limiter(s, parse_spec, specs[s], args, millis, debit)
    parsed[s] = { kind = specs[s].kind, p = p, qm = qm, qu = qu, held = held, debit = debits }
  end
  return parsed, millis, details, shadow, debit
end

-- Every key read before anything is decided, every limiter decided at one instant: the keys'
-- values and expiries, the decisions and the instant. `dry` (CL.ALL's first pass, whose
-- effects are written only when all admit): decided for the replies alone, a window whose
-- stored state is of another layout or precision not converted (see exact_decide); a debit
-- is decided for writing at once. `name`: the function's, for the twin's own refusals.
local function read_decide(keys, parsed, dry, name)
  local nkeys = #keys
  local nm, nu = clock()
  local stored, expiries, decisions = {}, {}, {}
  for s = 1, nkeys do stored[s], expiries[s] = read_of(parsed[s].kind, keys[s]) end
  -- The longest CL.WINDOW ring cl_all (or cl_each) reads is the twin's own cap, 10,000 buckets (10,001
  -- slots). Reading a longer ring (the module's, under a raised `throttle.max-buckets`) is
  -- O(its buckets) in Lua, up to tens of ms each: 16 in one call would pass the twin's 100 ms.
  -- A cl_all that finds one (its header valid: an invalid one gets the module's error) is
  -- refused, after every error the module would give but for the ring's own counts (not read);
  -- cl_window reads such a ring alone.
  -- Converting a long value (a ring read as a log or regrouped, a log read as buckets) is
  -- O(its size) in Lua, up to ~7 ms at those caps: a cl_all converts at most 8 (by their
  -- headers, whether the call writes or not), else it is refused likewise.
  local function ring_too_long(v)
    if type(v) ~= 'table' or v.n <= 24 + 10001 * 8 or v.n > 24 + RING_MAX_SLOTS * 8 then return false end
    if (v.n - 24) % 8 ~= 0 or sub(v.s, 1, 8) ~= RING_HEAD then return false end
    local pm, pu = le_t(v.s, 9)
    return pm > 0 or (pm == 0 and pu > 0)
  end
  local converting, conversions = {}, 0
  for s = 1, nkeys do
    local v, p = stored[s], parsed[s].p
    if parsed[s].kind == 'window' and type(v) == 'table' then
      local layout = byte(v.s)
      local c = (layout == 1 and p.precision ~= nil) or (layout == 2 and not p.precision)
      if layout == 2 and p.precision then
        local pm, pu = le_t(v.s, 9)
        c = pu ~= 0 or pm ~= p.precision or v.n ~= 24 + (div_ceil(p.window, p.precision) + 1) * 8
      end
      if c then converting[s], conversions = true, conversions + 1 end
    end
  end
  -- A limiter the twin refuses (beyond what a double carries) gives way to another's error
  -- the module would give.
  local refused
  for s = 1, nkeys do
    local it = parsed[s]
    local ok, d
    if it.kind == 'window' and ring_too_long(stored[s]) then
      ok, d = false, (fmt(ERR.in_limiter, s, sub(ERR.twin_all_ring, 5)):gsub('cl_all', name))
      failed = d
    elseif converting[s] and conversions > 8 then
      ok, d = false, (fmt(ERR.twin_all_converts, conversions):gsub('cl_all', name))
      failed = d
    else
      ok, d = pcall(as_limiter, s, decide, it.kind, it.p, stored[s], expiries[s], nm, nu, it.qm, it.qu, it.held, dry and not it.debit, it.debit)
    end
    if ok then
      decisions[s] = d
    elseif d == failed and find(d, 'the Functions twin', 1, true) then
      refused = refused or d
    else
      error(d, 0)
    end
  end
  if refused then fail(refused) end
  return stored, expiries, decisions, nm, nu
end

-- CL.ALL: all admit and every effect is written, or none is (with DEBIT, every one is).
local function all(keys, args)
  local parsed, millis, details, shadow, debit = parse_call(keys, args, 'cl.all')
  local nkeys = #keys
  local stored, expiries, decisions, nm, nu = read_decide(keys, parsed, not debit, 'cl_all')
  local binding, denied = 1, false
  for s = 1, nkeys do
    local d = decisions[s]
    if d[1] == 1 then
      local b = decisions[binding]
      if not denied then
        binding, denied = s, true
      elseif b.rm ~= nil and (d.rm == nil or reply_time(b.rm, b.ru, millis) < reply_time(d.rm, d.ru, millis)) then
        binding = s -- the longest retry_after as replied binds (the first of equals); none (never) is the longest
      end
    elseif not denied and d[3] < decisions[binding][3] then
      binding = s
    end
  end
  if debit then
    -- Every effect is written (a charge is never refused), but with SHADOW none.
    if not shadow then
      for s = 1, nkeys do apply(keys[s], decisions[s], stored[s]) end
    end
  elseif not denied then
    for s = 1, nkeys do
      local redo = decisions[s].redo
      if redo == true then
        local it = parsed[s]
        decisions[s] = as_limiter(s, decide, it.kind, it.p, stored[s], expiries[s], nm, nu, it.qm, it.qu, it.held)
      elseif redo then
        decisions[s] = as_limiter(s, redo)
      end
    end
    for s = 1, nkeys do apply(keys[s], decisions[s], stored[s]) end
  end
  -- SHADOW on a denial (a refused take or check, an overdrawn debit; a refund is never
  -- limited): every reply reads as admitted.
  if denied and shadow then
    for s = 1, nkeys do shadowed(decisions[s]) end
  end
  local b = five(decisions[binding], millis)
  local reply = { b[1], b[2], b[3], b[4], b[5], binding }
  if details then
    local each = {}
    for s = 1, nkeys do
      local d = five(decisions[s], millis)
      each[s] = { d[1], d[2], d[3], d[4], d[5] }
    end
    reply[7] = each
  end
  return reply
end

-- CL.EACH numkeys key... spec... [MS] [DEBIT] [SHADOW] (issue 45; core/src/each.rs): CL.ALL's
-- grammar, but each limiter decided on its own at one instant, as its single command decides:
-- each admitted one (each refund, and every debit) writes its effect, a denied take none (but
-- the repair its single command stores). The reply: each limiter's five integers, in key order.
local function each(keys, args)
  local parsed, millis, _, shadow, debit = parse_call(keys, args, 'cl.each')
  local stored, _, decisions = read_decide(keys, parsed, false, 'cl_each')
  local reply = {}
  for s = 1, #keys do
    local d, it = decisions[s], parsed[s]
    -- (SHADOW with DEBIT writes nothing)
    if not (shadow and debit) then apply(keys[s], d, stored[s]) end
    -- SHADOW: a denial (a refused take or check, an overdrawn debit) reads as admitted.
    if shadow and it.qm >= 0 then shadowed(d) end
    d = five(d, millis)
    reply[s] = { d[1], d[2], d[3], d[4], d[5] }
  end
  return reply
end

return { all = all, each = each }

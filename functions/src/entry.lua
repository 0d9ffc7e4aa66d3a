-- The entry points: the functions FCALL calls, registered by name, and the EVAL form's.

local errors, hot = lib.errors, lib.hot
local ERR, fail, run = errors.ERR, errors.fail, errors.run
local printable = lib.arguments.printable
local single = lib.store.single
local all, each = lib.all.all, lib.all.each
local cl_counter, cl_throttle, cl_window = hot.cl_counter, hot.cl_throttle, hot.cl_window

-- The EVAL form's entry: EVALSHA <sha> <numkeys> <key>... <function> <arguments>...
local EVAL_KINDS = { cl_throttle = 'throttle', cl_window = 'window', cl_bucket = 'bucket', cl_counter = 'counter', cl_quota = 'quota' }
local function eval_dispatch(keys, argv)
  local name, args = argv[1], {}
  for i = 2, #argv do args[i - 1] = argv[i] end
  if name == 'cl_all' then return all(keys, args) end
  if name == 'cl_each' then return each(keys, args) end
  local kind = EVAL_KINDS[name]
  if kind == nil then
    if name == 'cl_version' then return VERSION end
    fail(fmt(ERR.eval_name, name and printable(name) or 'nil'))
  end
  return single(kind, keys, args)
end

-- @library begin
local function register(name, callback, flags)
  redis.register_function { function_name = name, callback = callback, flags = flags }
end
register('cl_throttle', cl_throttle)
register('cl_window', cl_window)
register('cl_bucket', function(keys, args) return run(single, 'bucket', keys, args) end)
register('cl_counter', cl_counter)
register('cl_all', function(keys, args) return run(all, keys, args) end)
register('cl_each', function(keys, args) return run(each, keys, args) end)
register('cl_quota', function(keys, args) return run(single, 'quota', keys, args) end)
-- The version loaders and clients compare with their own (FCALL_RO cl_version 0: no key, no
-- write, so on any node and on read-only replicas).
register('cl_version', function() return VERSION end, { 'no-writes' })
-- @library end

return { run = run, eval_dispatch = eval_dispatch }

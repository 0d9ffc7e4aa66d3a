#!lua name=floor
-- The least an exact-window admission on the Functions twin asks of Redis: cl_window's hot path
-- (functions/throttle.lua) without its logic, only the calls it cannot do without: the server's
-- clock, a read of the log, an 8-byte write (in place, so that the value stays small) and the
-- key's expiry. bench/node.sh and bench/python.sh send it in place of `FCALL cl_window` through
-- the same app and store: no exact window kept in this stored form on the twin can cost Redis
-- less.
redis.register_function('floor_log', function(keys)
  local key = keys[1]
  local t = redis.call('TIME')
  redis.call('GETRANGE', key, '0', '4095')
  redis.call('SETRANGE', key, '8', '\0\0\0\0\0\0\0\0')
  redis.call('PEXPIREAT', key, (t[1] + 60) .. '000')
  return { 0, 10, 9, -1, 60000 }
end)

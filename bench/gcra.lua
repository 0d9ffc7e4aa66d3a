-- A GCRA in Lua, the usual fallback without a module (bench/run.sh, bench/instructions.sh and
-- bench/twin.sh measure against it). ARGV: count, period (seconds), max_burst.
local tat = tonumber(redis.call("GET", KEYS[1]) or "0")
local t = redis.call("TIME"); local now = t[1] * 1000000 + t[2]
local ei = tonumber(ARGV[2]) / tonumber(ARGV[1]) * 1000000; local dvt = ei * (tonumber(ARGV[3]) + 1)
tat = math.max(tat, now); local new = tat + ei
if now < new - dvt then return {1, 0} end
redis.call("SET", KEYS[1], new, "PX", math.ceil((new - now) / 1000)); return {0, 1}

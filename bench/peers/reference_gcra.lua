-- The least a Redis GCRA limiter does per check: the yardstick for the server CPU of the
-- library's token bucket script (bench/peers/run.sh, "Redis, server CPU per check").
-- One string key holds the theoretical arrival time (TAT) in µs; the server's clock decides.
-- No argument checks, no clock-step or late-call rule, no remaining or reset in the reply.
--
--   KEYS[1]  the key
--   ARGV[1]  emission interval in µs (the time one token takes to refill)
--   ARGV[2]  tolerance in µs (burst × interval: how far the TAT may run ahead of now)
--   ARGV[3]  cost in tokens
-- Returns {1, 0} when admitted, {0, µs until it would be} when refused.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local increment = tonumber(ARGV[1]) * tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local allowAt = tat + increment - tonumber(ARGV[2])
if allowAt > now then
  return {0, allowAt - now}
end
tat = tat + increment
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.floor((tat - now) / 1000) + 1)
return {1, 0}

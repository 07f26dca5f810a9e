-- clear_suspension.lua: forget a destination's suspension record.
--
-- KEYS[1]  <prefix>suspended    sorted set, destinations by until (µs)
-- KEYS[2]  <prefix>suspension:<destination>
-- ARGV[1]  the destination
--
-- Returns 1 when there was a record, 0 when not.
redis.call('ZREM', KEYS[1], ARGV[1])
return redis.call('DEL', KEYS[2])

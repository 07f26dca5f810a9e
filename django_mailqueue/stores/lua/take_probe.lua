-- take_probe.lua: take a destination's probe unless a suspension or another holder's probe is in force.
--
-- KEYS[1]  <prefix>suspension:<destination>   hash: until, since, strikes, code, status, text
-- KEYS[2]  <prefix>probe:<destination>        hash: until, holder
-- ARGV[1]  now (µs)
-- ARGV[2]  the probe's until (µs)
-- ARGV[3]  the holder
--
-- Returns {0} when taken (or renewed by its holder), {1, until, since, strikes, code, status, text} when a
-- suspension is in force, {2, until} when another holder's probe is. No expiry on the key (the documented
-- ACL user has no EXPIRE): `end_probe` or `suspend` deletes it; one whose holder died (a small hash) stays,
-- ended by its until, until the destination's next probe or suspension.
local now = tonumber(ARGV[1])
local held = redis.call('HMGET', KEYS[1], 'until', 'since', 'strikes', 'code', 'status', 'text')
if held[1] and tonumber(held[1]) > now then
  return {1, held[1], held[2], held[3], held[4], held[5], held[6]}
end
local probe = redis.call('HMGET', KEYS[2], 'until', 'holder')
if probe[1] and tonumber(probe[1]) > now and probe[2] ~= ARGV[3] then
  return {2, probe[1]}
end
redis.call('HSET', KEYS[2], 'until', ARGV[2], 'holder', ARGV[3])
return {0}

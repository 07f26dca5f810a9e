-- end_probe.lua: end a destination's probe, when the holder still holds it.
--
-- KEYS[1]  <prefix>probe:<destination>        hash: until, holder
-- ARGV[1]  the holder
--
-- Returns 1 when it was the holder's, 0 when not.
if redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

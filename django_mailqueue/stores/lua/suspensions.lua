-- suspensions.lua: the suspensions in force.
--
-- KEYS[1]  <prefix>suspended    sorted set, destinations by until (µs)
-- ARGV[1]  the prefix (each destination's hash: <prefix>suspension:<destination>)
-- ARGV[2]  now (µs)
-- ARGV[3]  '1' when only the destinations that follow are wanted, '0' for all
-- ARGV[4…] the destinations wanted
--
-- Returns, per suspension in force (its until after now), the destination then its hash as
-- HGETALL gives it.
local prefix, now = ARGV[1], ARGV[2]
local destinations = {}
if ARGV[3] == '1' then
  for i = 4, #ARGV do
    destinations[#destinations + 1] = ARGV[i]
  end
else
  destinations = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
end
local found = {}
for _, destination in ipairs(destinations) do
  local key = prefix .. 'suspension:' .. destination
  local ends = redis.call('HGET', key, 'until')
  if ends and tonumber(ends) > tonumber(now) then
    found[#found + 1] = destination
    found[#found + 1] = redis.call('HGETALL', key)
  end
end
return found

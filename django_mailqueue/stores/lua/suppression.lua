-- suppression.lua (after store_suppressions.lua): edit the suppression list by hand, in one step.
--
-- KEYS[1]  <prefix>suppressed           hash, address -> entry (JSON)
-- KEYS[2]  <prefix>suppressed:by_time   sorted set, the addresses scored by minus their time (µs)
-- ARGV[1]  'add', 'remove' or 'prune'
-- 'add':    ARGV[2] m, then per entry the 3 values store_suppressions takes; returns m
-- 'remove': ARGV[2...] the addresses; returns how many were listed
-- 'prune':  ARGV[2] minus the time (µs) before which entries go; returns how many went
local op = ARGV[1]
if op == 'add' then
  local m = tonumber(ARGV[2])
  store_suppressions(KEYS[1], KEYS[2], 3, m)
  return m
end
local gone = {}
if op == 'remove' then
  for i = 2, #ARGV do
    gone[#gone + 1] = ARGV[i]
  end
else
  gone = redis.call('ZRANGE', KEYS[2], '(' .. ARGV[2], '+inf', 'BYSCORE')
end
local removed = 0
for i = 1, #gone, 1000 do
  local part = {unpack(gone, i, math.min(i + 999, #gone))}
  removed = removed + redis.call('HDEL', KEYS[1], unpack(part))
  redis.call('ZREM', KEYS[2], unpack(part))
end
return removed

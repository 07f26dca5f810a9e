-- complete.lua: record an attempt's outcome and let go of the lease, for the
-- lease's owner at the revision it claimed.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- ARGV[1]  the prefix (item keys, <prefix>message:<id>, <prefix>ready:<queue>)
-- ARGV[2]  item id
-- ARGV[3]  owner
-- ARGV[4]  the revision the owner claimed
-- ARGV[5]  'drop' (every recipient is final) or 'record', and for 'record':
-- ARGV[6]  recipients (JSON, computed by the caller from the item read at that revision)
-- ARGV[7]  next attempt (µs)
-- ARGV[8]  attempts
-- ARGV[9]  delay warned ('0' or '1')
--
-- Returns 1 once recorded (or the item and its message dropped), 0 when the
-- owner does not hold the lease at that revision (nothing is written), -1 when
-- there is no such item. Every other write to an item's outcome fields comes
-- from this script, and each claim bumps `rev`, so owner and revision together
-- prove the caller's reading is current.
local prefix, id = ARGV[1], ARGV[2]
local key = prefix .. 'item:' .. id
local f = redis.call('HMGET', key, 'owner', 'rev', 'member', 'queue')
if not f[3] then
  return -1
end
if f[1] ~= ARGV[3] or f[2] ~= ARGV[4] then
  return 0
end
local member, queue = f[3], f[4]
redis.call('ZREM', KEYS[1], member)
if ARGV[5] == 'drop' then
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', prefix .. 'ready:' .. queue, member)
  redis.call('DEL', key, prefix .. 'message:' .. id)
  return 1
end
local due = ARGV[7]
redis.call('HSET', key, 'rcpts', ARGV[6], 'next', due, 'attempts', ARGV[8], 'delay', ARGV[9], 'reclaims', 0)
redis.call('HINCRBY', key, 'rev', 1)
redis.call('HDEL', key, 'owner', 'expires')
redis.call('ZADD', KEYS[2], due, member)
redis.call('ZADD', prefix .. 'ready:' .. queue, due, member)
redis.call('SADD', KEYS[3], queue)
return 1

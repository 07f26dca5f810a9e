-- reschedule.lua (after keys.lua and store_items.lua): move an item's next attempt.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items by when they become claimable again
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- KEYS[4…] the item's <prefix>item:<id>, <prefix>message:<id>, <prefix>ready:<queue> and admin indexes,
--          <prefix>ids (keys.lua)
-- ARGV[1]  the prefix (the channel <prefix>wakeup)
-- ARGV[2]  item id
-- ARGV[3]  the new next attempt (µs)
-- ARGV[4]  owner, or '' for none
--
-- With an owner: only while that owner holds the lease, which it lets go of (the
-- item goes back to its queue's ready set). Without: the lease, if any, stays.
-- Idle workers are told, since the item may be due now.
-- Returns 1 when moved, 0 when there is no such item, it is kept failed (failed.lua sends it again), or the
-- owner does not hold it.
local prefix, id, due, owner = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local key = declared(prefix)
local item_key = key('item:' .. id)
local f = redis.call('HMGET', item_key, 'owner', 'expires', 'member', 'queue', 'domains', 'attempts', 'failed')
local member, queue = f[3], f[4]
if not member or f[7] then
  return 0
end
if owner ~= '' then
  if f[1] ~= owner then
    return 0
  end
  redis.call('HDEL', item_key, 'owner', 'expires')
  redis.call('ZREM', KEYS[1], member)
  f[1] = false
end
redis.call('HSET', item_key, 'next', due)
redis.call('ZADD', KEYS[2], due, member)
index_item(key, member, queue, f[5] or '', due, f[6] ~= '0')
if f[1] then
  local score = f[2]
  if tonumber(due) > tonumber(f[2]) then
    score = due
  end
  redis.call('ZADD', KEYS[1], score, member)
else
  redis.call('ZADD', key('ready:' .. queue), due, member)
  redis.call('SADD', KEYS[3], queue)
end
redis.call('PUBLISH', prefix .. 'wakeup', 0)
return 1

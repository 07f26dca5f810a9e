-- complete.lua (after keys.lua, replay.lua, store_items.lua, store_suppressions.lua and quota.lua): record an attempt's outcome,
-- add its DSNs, put its addresses on the suppression list and let go of the lease, for the lease's owner at
-- the revision it claimed — all or nothing.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- KEYS[4]  <prefix>seq      string, the counter that orders items (for the DSNs)
-- KEYS[5]  <prefix>suppressed           hash, the suppression list's entries
-- KEYS[6]  <prefix>suppressed:by_time   sorted set, its addresses by minus their time
-- KEYS[7…] every other key it touches (keys.lua): the item's <prefix>item:<id>, <prefix>message:<id>,
--          <prefix>ready:<queue> and admin indexes, <prefix>failed, <prefix>ids, <prefix>queue_names, each DSN's
--          keys (as add.lua's), and when the store retries the call's marker <prefix>replay:<ms>:<token>
-- ARGV[1]  the prefix (the wake-up channel <prefix>wakeup)
-- ARGV[2]  item id
-- ARGV[3]  owner
-- ARGV[4]  the revision the owner claimed
-- ARGV[5]  'drop' (every recipient is final), 'keep' (every recipient final, one failed, KEEP_FAILED: the
--          item stays, out of its ready set and the tried sets, scored NEVER, in <prefix>failed by when it
--          failed) or 'record'
-- ARGV[6]  recipients (JSON, computed by the caller from the item read at that revision; '' with 'drop')
-- ARGV[7]  next attempt (µs; core.items.NEVER with 'keep'; '' with 'drop')
-- ARGV[8]  attempts ('' with 'drop')
-- ARGV[9]  delay warned ('0' or '1'; '' with 'drop')
-- ARGV[10] MAX_ITEMS, or '' for no bound, or a partition's 'M:N:p' (as add.lua's; checked only when DSNs follow)
-- ARGV[11] with 'keep': when it failed (µs), else ''
-- ARGV[12] n, how many DSN items follow
-- then, per DSN, the 13 values add.lua takes: id, queue, next attempt (µs), created (µs),
--          sender, recipients (JSON), size, Message-ID, subject, message bytes, domains, words, addresses
-- then m, how many suppression entries follow, and per entry the 3 values store_suppressions takes
--
-- Returns 1 once recorded (or the item and its message dropped) and the DSNs added,
-- 0 when the owner does not hold the lease at that revision, -1 when there is no
-- such item, -2 when the DSNs would pass MAX_ITEMS, -3 when a DSN's id is queued
-- already; nothing is written unless 1. Every other write to an item's outcome
-- fields comes from this script, and each claim bumps `rev`, so owner and revision
-- together prove the caller's reading is current. A retry of a call that ran (its marker
-- found) returns 1 and writes nothing.
local prefix, id = ARGV[1], ARGV[2]
local n = tonumber(ARGV[12])
local key, marker = declared(prefix)
local item_key = key('item:' .. id)
if replayed(marker) then
  return 1
end
local f = redis.call('HMGET', item_key, 'owner', 'rev', 'member', 'queue', 'domains')
if not f[3] then
  return -1
end
if f[1] ~= ARGV[3] or f[2] ~= ARGV[4] then
  return 0
end
if n > 0 and ARGV[10] ~= '' and redis.call('ZCARD', KEYS[2]) + n > bound_of(key, ARGV[10]) then
  return -2
end
if queued_already(key, 13, n) then
  return -3
end

-- Told before the first write (as in add.lua), so that a channel the ACL denies writes nothing.
if n > 0 then
  redis.call('PUBLISH', prefix .. 'wakeup', n)
end

local member, queue = f[3], f[4]
redis.call('ZREM', KEYS[1], member)
if ARGV[5] == 'drop' then
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZREM', key('ready:' .. queue), member)
  unindex_item(key, member, queue, f[5])
  unindex_terms(key, member)
  redis.call('DEL', item_key, key('message:' .. id))
elseif ARGV[5] == 'keep' then
  local never = ARGV[7]
  redis.call('HSET', item_key, 'rcpts', ARGV[6], 'next', never, 'attempts', ARGV[8], 'delay', ARGV[9], 'reclaims', 0,
             'failed', ARGV[11])
  redis.call('HINCRBY', item_key, 'rev', 1)
  redis.call('HDEL', item_key, 'owner', 'expires')
  redis.call('ZADD', KEYS[2], never, member)
  redis.call('ZREM', key('ready:' .. queue), member)
  unindex_item(key, member, queue, f[5])
  index_item(key, member, queue, f[5] or '', never, false)
  redis.call('ZADD', key('failed'), ARGV[11], member)
else
  local due = ARGV[7]
  redis.call('HSET', item_key, 'rcpts', ARGV[6], 'next', due, 'attempts', ARGV[8], 'delay', ARGV[9], 'reclaims', 0)
  redis.call('HINCRBY', item_key, 'rev', 1)
  redis.call('HDEL', item_key, 'owner', 'expires')
  redis.call('ZADD', KEYS[2], due, member)
  redis.call('ZADD', key('ready:' .. queue), due, member)
  redis.call('SADD', KEYS[3], queue)
  index_item(key, member, queue, f[5] or '', due, ARGV[8] ~= '0')
end

store_items(key, KEYS[4], KEYS[2], KEYS[3], 13, n)
local after_dsns = 13 + n * STRIDE  -- store_items.lua: the values per item
store_suppressions(KEYS[5], KEYS[6], after_dsns + 1, tonumber(ARGV[after_dsns]))
mark(marker, '1')
return 1

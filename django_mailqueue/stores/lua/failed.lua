-- failed.lua (after keys.lua and store_items.lua): the items kept failed (KEEP_FAILED, complete.lua's 'keep'), sent
-- again or pruned, in one step. The store read the items first and declares their keys (keys.lua).
--
-- KEYS[1]  <prefix>failed   sorted set, the kept failed items by when they failed (µs)
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- KEYS[4…] the indexes every item is in (`Keys.indexes`), and per item read its keys (`Keys.of_item`)
-- ARGV[1]  the prefix (the channel <prefix>wakeup; the declared keys by their names after it)
-- ARGV[2]  'again' or 'prune'
-- 'again': ARGV[3] now (µs), then per item 3 values: id, the revision read, its recipients once sent again
--          (JSON, computed by the caller: core.items.sent_again). Each item still kept at that revision is due
--          now as if added then (created now, no attempts, out of `failed`, back in its ready set and indexes
--          as never tried); returns per item 1 when sent again, 0 when not (gone, not failed, or changed).
-- 'prune': ARGV[3] the time (µs) before which kept items go, then the members read in `failed` before it; each
--          still there before that time goes (one sent again meanwhile stays); returns how many went.
local prefix, op = ARGV[1], ARGV[2]
local key, _, known = declared(prefix)

if op == 'prune' then
  local before, gone = tonumber(ARGV[3]), 0
  for i = 4, #ARGV do
    local member = ARGV[i]
    local id = string.sub(member, 18)
    local when = redis.call('ZSCORE', KEYS[1], member)
    local item = known('item:' .. id)
    if when and tonumber(when) < before and item then
      local f = redis.call('HMGET', item, 'queue', 'domains')
      redis.call('ZREM', KEYS[1], member)
      redis.call('ZREM', KEYS[2], member)
      if f[1] then
        unindex_item(key, member, f[1], f[2])
        unindex_terms(key, member)
      end
      redis.call('DEL', item, key('message:' .. id))
      gone = gone + 1
    end
  end
  return gone
end

local now = ARGV[3]
-- Told before the first write (as in add.lua), so that a channel the ACL denies writes nothing.
redis.call('PUBLISH', prefix .. 'wakeup', 0)
local answers = {}
for i = 4, #ARGV, 3 do
  local item = key('item:' .. ARGV[i])
  local f = redis.call('HMGET', item, 'member', 'queue', 'domains', 'rev', 'failed')
  local member, queue = f[1], f[2]
  if not member or not f[5] or f[4] ~= ARGV[i + 1] then
    table.insert(answers, 0)
  else
    redis.call('HSET', item, 'rcpts', ARGV[i + 2], 'next', now, 'created', now, 'attempts', 0, 'delay', 0,
               'reclaims', 0)
    redis.call('HINCRBY', item, 'rev', 1)
    redis.call('HDEL', item, 'failed', 'owner', 'expires')
    redis.call('ZREM', KEYS[1], member)
    redis.call('ZADD', KEYS[2], now, member)
    redis.call('ZADD', key('ready:' .. queue), now, member)
    redis.call('SADD', KEYS[3], queue)
    unindex_item(key, member, queue, f[3])
    index_item(key, member, queue, f[3] or '', now, false)
    table.insert(answers, 1)
  end
end
return answers

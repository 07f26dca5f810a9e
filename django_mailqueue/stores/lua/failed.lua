-- failed.lua (after store_items.lua): the items kept failed (KEEP_FAILED, complete.lua's 'keep'), sent again or
-- pruned, in one step.
--
-- KEYS[1]  <prefix>failed   sorted set, the kept failed items by when they failed (µs)
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- ARGV[1]  the prefix (item keys, <prefix>message:<id>, <prefix>ready:<queue>, the channel <prefix>wakeup)
-- ARGV[2]  'again' or 'prune'
-- 'again': ARGV[3] now (µs), then per item 3 values: id, the revision read, its recipients once sent again
--          (JSON, computed by the caller: core.items.sent_again). Each item still kept at that revision is due
--          now as if added then (created now, no attempts, out of `failed`, back in its ready set and indexes
--          as never tried); returns per item 1 when sent again, 0 when not (gone, not failed, or changed).
-- 'prune': ARGV[3] the time (µs) before which kept items go, ARGV[4] the most to drop in this call;
--          returns how many went (the caller calls again while that is the most).
local prefix, op = ARGV[1], ARGV[2]
-- Not yet declared in KEYS: this script still names item keys from the prefix (docs/redis.md, "Redis Cluster").
local function built(name)
  return prefix .. name
end

if op == 'prune' then
  local members = redis.call('ZRANGE', KEYS[1], '-inf', '(' .. ARGV[3], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[4]))
  for _, member in ipairs(members) do
    local id = string.sub(member, 18)
    local f = redis.call('HMGET', prefix .. 'item:' .. id, 'queue', 'domains')
    redis.call('ZREM', KEYS[1], member)
    redis.call('ZREM', KEYS[2], member)
    if f[1] then
      unindex_item(built, member, f[1], f[2])
      unindex_terms(built, member)
    end
    redis.call('DEL', prefix .. 'item:' .. id, prefix .. 'message:' .. id)
  end
  return #members
end

local now = ARGV[3]
-- Told before the first write (as in add.lua), so that a channel the ACL denies writes nothing.
redis.call('PUBLISH', prefix .. 'wakeup', 0)
local answers = {}
for i = 4, #ARGV, 3 do
  local key = prefix .. 'item:' .. ARGV[i]
  local f = redis.call('HMGET', key, 'member', 'queue', 'domains', 'rev', 'failed')
  local member, queue = f[1], f[2]
  if not member or not f[5] or f[4] ~= ARGV[i + 1] then
    table.insert(answers, 0)
  else
    redis.call('HSET', key, 'rcpts', ARGV[i + 2], 'next', now, 'created', now, 'attempts', 0, 'delay', 0,
               'reclaims', 0)
    redis.call('HINCRBY', key, 'rev', 1)
    redis.call('HDEL', key, 'failed', 'owner', 'expires')
    redis.call('ZREM', KEYS[1], member)
    redis.call('ZADD', KEYS[2], now, member)
    redis.call('ZADD', prefix .. 'ready:' .. queue, now, member)
    redis.call('SADD', KEYS[3], queue)
    unindex_item(built, member, queue, f[3])
    index_item(built, member, queue, f[3] or '', now, false)
    table.insert(answers, 1)
  end
end
return answers

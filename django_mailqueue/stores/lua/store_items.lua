-- store_items.lua: put before add.lua and complete.lua (`LuaScript(..., uses=...)`): how a script
-- checks and stores new items, each given as 10 values from ARGV[first] on: id, queue, next
-- attempt (µs), created (µs), sender, recipients (JSON), size, Message-ID, subject, message bytes.

-- The id of the first of the n items already queued, or nil.
local function queued_already(prefix, first, n)
  for i = 0, n - 1 do
    local id = ARGV[first + i * 10]
    if redis.call('EXISTS', prefix .. 'item:' .. id) == 1 then
      return id
    end
  end
  return nil
end

-- Store the n items with their messages, due in their queues' ready sets.
local function store_items(prefix, seq_key, items_key, queues_key, first, n)
  for i = 0, n - 1 do
    local base = first + i * 10
    local id, queue, due = ARGV[base], ARGV[base + 1], ARGV[base + 2]
    local member = string.format('%016d', redis.call('INCR', seq_key)) .. ':' .. id
    redis.call('HSET', prefix .. 'item:' .. id,
      'id', id, 'member', member, 'queue', queue, 'next', due, 'created', ARGV[base + 3],
      'sender', ARGV[base + 4], 'rcpts', ARGV[base + 5], 'size', ARGV[base + 6],
      'mid', ARGV[base + 7], 'subject', ARGV[base + 8],
      'attempts', 0, 'rev', 0, 'reclaims', 0, 'delay', 0)
    redis.call('SET', prefix .. 'message:' .. id, ARGV[base + 9])
    redis.call('ZADD', items_key, due, member)
    redis.call('ZADD', prefix .. 'ready:' .. queue, due, member)
    redis.call('SADD', queues_key, queue)
  end
end


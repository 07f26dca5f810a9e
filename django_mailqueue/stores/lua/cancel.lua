-- cancel.lua (after store_items.lua): drop an item and its message, leased or not.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- ARGV[1]  the prefix (item keys, <prefix>message:<id>, <prefix>ready:<queue>, <prefix>failed)
-- ARGV[2]  item id
--
-- Returns the item's hash as it stood, a flat list of fields and values, or
-- false when there is no such item (a message left without its item goes too).
local prefix, id = ARGV[1], ARGV[2]
local key = prefix .. 'item:' .. id
local fields = redis.call('HGETALL', key)
if #fields == 0 then
  redis.call('DEL', prefix .. 'message:' .. id)
  return false
end
local f = redis.call('HMGET', key, 'member', 'queue', 'domains')
if f[1] then
  redis.call('ZREM', KEYS[1], f[1])
  redis.call('ZREM', KEYS[2], f[1])
  redis.call('ZREM', prefix .. 'failed', f[1])
  if f[2] then
    redis.call('ZREM', prefix .. 'ready:' .. f[2], f[1])
    unindex_item(prefix, f[1], f[2], f[3])
  end
end
redis.call('DEL', key, prefix .. 'message:' .. id)
return fields

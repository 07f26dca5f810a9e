-- cancel.lua (after keys.lua and store_items.lua): drop an item and its message, leased or not.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3…] the item's <prefix>item:<id>, <prefix>message:<id>, <prefix>ready:<queue> and admin indexes,
--          <prefix>ids, <prefix>failed (keys.lua)
-- ARGV[1]  the prefix
-- ARGV[2]  item id
--
-- Returns the item's hash as it stood, a flat list of fields and values, or
-- false when there is no such item (a message left without its item goes too).
local prefix, id = ARGV[1], ARGV[2]
local key = declared(prefix)
local item_key = key('item:' .. id)
local fields = redis.call('HGETALL', item_key)
if #fields == 0 then
  redis.call('DEL', key('message:' .. id))
  return false
end
local f = redis.call('HMGET', item_key, 'member', 'queue', 'domains')
if f[1] then
  redis.call('ZREM', KEYS[1], f[1])
  redis.call('ZREM', KEYS[2], f[1])
  redis.call('ZREM', key('failed'), f[1])
  if f[2] then
    redis.call('ZREM', key('ready:' .. f[2]), f[1])
    unindex_item(key, f[1], f[2], f[3])
    unindex_terms(key, f[1])
  end
end
redis.call('DEL', item_key, key('message:' .. id))
return fields

-- renew.lua: extend the leases an owner holds.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items by when they become claimable again
-- KEYS[2..] <prefix>item:<id> of each id below, in the same order
-- ARGV[1]  the prefix
-- ARGV[2]  owner
-- ARGV[3]  the new lease expiry (µs)
-- ARGV[4..] item ids
--
-- Returns the ids whose lease the owner holds (expired or not, as long as no one
-- took it), each now renewed. An item that is gone, or leased to another owner,
-- is left as it is and not returned.
local prefix, owner, expires = ARGV[1], ARGV[2], ARGV[3]
local held = {}
for i = 4, #ARGV do
  local key = KEYS[i - 2]
  local f = redis.call('HMGET', key, 'owner', 'next', 'member')
  if f[1] == owner and f[3] then
    redis.call('HSET', key, 'expires', expires)
    local score = expires
    if tonumber(f[2]) > tonumber(expires) then
      score = f[2]
    end
    redis.call('ZADD', KEYS[1], score, f[3])
    table.insert(held, ARGV[i])
  end
end
return held

-- store_suppressions.lua: put before complete.lua and suppression.lua (`LuaScript(..., uses=...)`): how a
-- script puts addresses on the suppression list, each given as 3 values from ARGV[first] on: the address,
-- its entry (JSON: [code, status, text, since µs, item id or null]) and minus its time (µs), its score.
--
-- The list is two keys: <prefix>suppressed, a hash address -> entry (one HMGET looks up a batch), and
-- <prefix>suppressed:by_time, a sorted set of the addresses scored by minus their time, so that ZRANGE
-- BYSCORE gives the newest first and equal times by address.

-- Put the m entries on the list; an address listed already is replaced.
local function store_suppressions(hash_key, time_key, first, m)
  for i = 0, m - 1 do
    local base = first + i * 3
    redis.call('HSET', hash_key, ARGV[base], ARGV[base + 1])
    redis.call('ZADD', time_key, ARGV[base + 2], ARGV[base])
  end
end


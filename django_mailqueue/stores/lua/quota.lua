-- quota.lua: a partition's share of MAX_ITEMS (a queue split into partitions; docs/redis.md, "Partitions").
--
-- `quota_of(quota_key, spec)`: spec is 'M:N:p' (MAX_ITEMS, the partition count, this partition). The hash
-- <prefix>quota holds `share`, the items this partition may hold, and `bound`, the 'M:N' it was set for. A
-- partition not yet met takes its even share of M (M // N, one more for the first M % N); one set for another
-- M or N moves by the difference of the two even shares. The shares of every partition (with those moving
-- between two, taken but not yet given) add up to M: an add or DSN within its partition's share keeps the
-- queue within M, checked in the script that adds.
local function even_share(m, n, p)
  return math.floor(m / n) + ((p < m % n) and 1 or 0)
end

local function quota_of(quota_key, spec)
  local m, n, p = string.match(spec, '^(%d+):(%d+):(%d+)$')
  m, n, p = tonumber(m), tonumber(n), tonumber(p)
  local bound = m .. ':' .. n
  local f = redis.call('HMGET', quota_key, 'bound', 'share')
  if not f[2] then
    local share = even_share(m, n, p)
    redis.call('HSET', quota_key, 'bound', bound, 'share', share)
    return share
  end
  local share = tonumber(f[2])
  if f[1] ~= bound then
    local om, on = string.match(f[1], '^(%d+):(%d+)$')
    share = share + even_share(m, n, p) - even_share(tonumber(om), tonumber(on), p)
    redis.call('HSET', quota_key, 'bound', bound, 'share', share)
  end
  return share
end

-- The bound an add or a completion's DSNs are checked against: MAX_ITEMS, or 'M:N:p''s share.
local function bound_of(key, given)
  if string.find(given, ':', 1, true) then
    return quota_of(key('quota'), given)
  end
  return tonumber(given)
end

-- quota_take.lua (after quota.lua): give up what this partition's share has beyond its items, for another
-- partition whose adds found their share short; and name the transfers that were never given.
--
-- KEYS[1]  <prefix>quota       hash, this partition's share (quota.lua)
-- KEYS[2]  <prefix>items       sorted set, this partition's items
-- KEYS[3]  <prefix>quota:out   hash, the transfers taken from this share: token -> '<to>:<k>:<ms>'
-- ARGV[1]  'M:N:p' (quota.lua)
-- ARGV[2]  how many the other partition asks for
-- ARGV[3]  the transfer's token
-- ARGV[4]  the partition it is for
-- ARGV[5]  now (ms, the caller's clock)
-- ARGV[6]  a transfer taken before this (ms) and still in quota:out was never given (its taker stopped)
--
-- Returns {k, token, '<to>:<k>:<ms>', ...}: k taken (0 to ARGV[2]), then the transfers never given.
local share = quota_of(KEYS[1], ARGV[1])
local spare = share - redis.call('ZCARD', KEYS[2])
local k = math.max(0, math.min(spare, tonumber(ARGV[2])))
local reply = {k}
local out = redis.call('HGETALL', KEYS[3])
for i = 1, #out, 2 do
  local at = tonumber(string.match(out[i + 1], ':(%d+)$'))
  if at < tonumber(ARGV[6]) then
    table.insert(reply, out[i])
    table.insert(reply, out[i + 1])
  end
end
if k > 0 then
  redis.call('HINCRBY', KEYS[1], 'share', -k)
  redis.call('HSET', KEYS[3], ARGV[3], ARGV[4] .. ':' .. k .. ':' .. ARGV[5])
end
return reply

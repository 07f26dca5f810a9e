-- quota_give.lua (after quota.lua): add a transfer taken from another partition (quota_take.lua) to this
-- partition's share, once: the token's key makes a second give of the same transfer (a recovery's, after a
-- taker stopped, or a late one) do nothing.
--
-- KEYS[1]  <prefix>quota            hash, this partition's share (quota.lua)
-- KEYS[2]  <prefix>quota:in:<token>  string, '1' once the transfer is given, living ARGV[3] ms
-- ARGV[1]  'M:N:p' (quota.lua)
-- ARGV[2]  k, how many the transfer moves
-- ARGV[3]  how long the token's key lives (ms)
--
-- Returns 1 when given now, 0 when it was given before.
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then
  return 0
end
quota_of(KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'share', tonumber(ARGV[2]))
return 1

-- take_tokens.lua: take up to `want` whole tokens from a token bucket, for every worker of the store.
--
-- KEYS[1]  <prefix>bucket:<key>   hash: left (tokens after the last take), updated (µs)
-- ARGV[1]  rate, tokens a second
-- ARGV[2]  burst, the most the bucket holds
-- ARGV[3]  want
-- ARGV[4]  now (µs)
--
-- core/shaping.take_from_bucket in Lua, the same floating-point operations in the same order: a new
-- bucket is full; a clock behind the bucket's refills nothing; 1e-9 is core/shaping.TOKEN_SLACK.
-- Numbers are written with 17 digits (Lua's own conversion keeps 14). Returns how many were taken.
local rate, burst, want, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local held = redis.call('HMGET', KEYS[1], 'left', 'updated')
local tokens, updated
if not held[2] then
  tokens, updated = burst, now
else
  tokens, updated = tonumber(held[1]), tonumber(held[2])
  if now > updated then
    tokens = tokens + (now - updated) * rate / 1e6
    updated = now
  end
  if tokens > burst then
    tokens = burst
  end
end
local taken = math.min(want, math.floor(tokens + 1e-9))
redis.call('HSET', KEYS[1], 'left', string.format('%.17g', tokens - taken), 'updated', string.format('%d', updated))
return taken

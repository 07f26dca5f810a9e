-- take_tokens.lua: take up to `want` whole tokens from a token bucket, for every worker of the store.
--
-- KEYS[1]  <prefix>bucket:<key>   hash: left (tokens after the last take), updated (µs); with a window also
--                                 flying, done: "time*tokens" entries (µs on the server's clock), comma-separated
-- ARGV[1]  rate, tokens a second
-- ARGV[2]  burst, the most the bucket holds
-- ARGV[3]  want
-- ARGV[4]  now (µs)
-- ARGV[5..9] (a window only) cap, period (µs), expire (µs), tokens reported done, how long ago they ended (µs)
--
-- core/shaping.take_from_bucket in Lua, the same floating-point operations in the same order: a new
-- bucket is full; a clock behind the bucket's refills nothing; 1e-9 is core/shaping.TOKEN_SLACK.
-- The window is core/shaping.window_take on the server's clock (TIME). Numbers are written with 17
-- digits (Lua's own conversion keeps 14). Returns how many were taken.
local rate, burst, want, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local held = redis.call('HMGET', KEYS[1], 'left', 'updated', 'flying', 'done')
local flying, done, clock = {}, {}, 0
if ARGV[5] then
  local cap, period, expire, report = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
  local ended = tonumber(ARGV[9])
  local time = redis.call('TIME')
  clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local count = 0
  for t, n in string.gmatch(held[3] or '', '(%d+)%*(%d+)') do
    t, n = tonumber(t), tonumber(n)
    if t > clock - expire then
      flying[#flying + 1] = {t, n}
      count = count + n
    end
  end
  local moved = math.min(report, count)
  local left, kept = moved, {}
  for _, entry in ipairs(flying) do
    if left >= entry[2] then
      left = left - entry[2]
    else
      kept[#kept + 1] = {entry[1], entry[2] - left}
      left = 0
    end
  end
  flying = kept
  local dated = clock - ended
  for t, n in string.gmatch(held[4] or '', '(%d+)%*(%d+)') do
    t, n = tonumber(t), tonumber(n)
    if t > clock - period then
      done[#done + 1] = {t, n}
    end
  end
  if moved > 0 and dated > clock - period then
    done[#done + 1] = {dated, moved}
  end
  local used = 0
  for _, entry in ipairs(flying) do
    used = used + entry[2]
  end
  for _, entry in ipairs(done) do
    used = used + entry[2]
  end
  want = math.min(want, math.max(0, cap - used))
end
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
if ARGV[5] then
  if taken > 0 then
    flying[#flying + 1] = {clock, taken}
  end
  local function join(list)
    local parts = {}
    for i, entry in ipairs(list) do
      parts[i] = string.format('%d*%d', entry[1], entry[2])
    end
    return table.concat(parts, ',')
  end
  redis.call('HSET', KEYS[1], 'flying', join(flying), 'done', join(done))
end
return taken

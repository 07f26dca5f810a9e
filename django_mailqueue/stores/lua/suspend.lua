-- suspend.lua: record that no worker connects to a destination before a time.
--
-- KEYS[1]  <prefix>suspended    sorted set, destinations by until (µs)
-- KEYS[2]  <prefix>probe:<destination>   its probe (take_probe.lua): ended by this write
-- ARGV[1]  the prefix (each destination's hash: <prefix>suspension:<destination>)
-- ARGV[2]  destination
-- ARGV[3]  until (µs)
-- ARGV[4]  now (µs)
-- ARGV[5]  how long past its until a record is kept (µs): core/shaping.FORGET_AFTER
-- ARGV[6]  the reply's code, or '' for none
-- ARGV[7]  the reply's enhanced status
-- ARGV[8]  the reply's text
--
-- core/shaping.next_suspension: with a record (even one past its until, until it is forgotten),
-- the later until, since kept, and strikes + 1 — the same strikes while it is still in force (the
-- same episode, met by another worker too); else 1 strike since now. Records forgotten by now are
-- dropped here first. Returns {until, since, strikes}.
local prefix, destination, now, forget = ARGV[1], ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - forget))
for _, gone in ipairs(stale) do
  redis.call('DEL', prefix .. 'suspension:' .. gone)
  redis.call('ZREM', KEYS[1], gone)
end
local key = prefix .. 'suspension:' .. destination
local held = redis.call('HMGET', key, 'until', 'since', 'strikes')
local ends, since, strikes = ARGV[3], ARGV[4], 1
if held[1] then
  since, strikes = held[2], tonumber(held[3])
  if tonumber(held[1]) <= now then
    strikes = strikes + 1
  end
  if tonumber(held[1]) > tonumber(ends) then
    ends = held[1]
  end
end
redis.call('HSET', key, 'until', ends, 'since', since, 'strikes', strikes,
  'code', ARGV[6], 'status', ARGV[7], 'text', ARGV[8])
redis.call('ZADD', KEYS[1], ends, destination)
redis.call('DEL', KEYS[2])
return {ends, since, strikes}

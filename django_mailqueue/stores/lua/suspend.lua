-- suspend.lua (after keys.lua): record that no worker connects to a destination before a time.
--
-- KEYS  <prefix>suspended (sorted set, destinations by until, µs), <prefix>suspension:<destination> (its hash),
--       <prefix>probe:<destination> (its probe, take_probe.lua: ended by this write), and the hash of each
--       destination the store read forgotten by now (below) — every key it touches (keys.lua)
-- ARGV[1]  the prefix (the keys above are found by their names after it)
-- ARGV[2]  destination
-- ARGV[3]  until (µs)
-- ARGV[4]  now (µs)
-- ARGV[5]  how long past its until a record is kept (µs): core/shaping.FORGET_AFTER
-- ARGV[6]  the reply's code, or '' for none
-- ARGV[7]  the reply's enhanced status
-- ARGV[8]  the reply's text
-- ARGV[9…] the destinations the store read from `suspended` scored by now - ARGV[5] (forgotten)
--
-- core/shaping.next_suspension: with a record (even one past its until, until it is forgotten),
-- the later until, since kept, and strikes + 1 — the same strikes while it is still in force (the
-- same episode, met by another worker too); else 1 strike since now. The forgotten records read are
-- dropped here first, each still forgotten (a suspension renewed since the read stays). Returns
-- {until, since, strikes}.
local key = declared(ARGV[1])
local destination, now, forget = ARGV[2], tonumber(ARGV[4]), tonumber(ARGV[5])
local suspended = key('suspended')
for i = 9, #ARGV do
  local gone = ARGV[i]
  local score = redis.call('ZSCORE', suspended, gone)
  if score and tonumber(score) <= now - forget then
    redis.call('DEL', key('suspension:' .. gone))
    redis.call('ZREM', suspended, gone)
  end
end
local record = key('suspension:' .. destination)
local held = redis.call('HMGET', record, 'until', 'since', 'strikes')
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
redis.call('HSET', record, 'until', ends, 'since', since, 'strikes', strikes,
  'code', ARGV[6], 'status', ARGV[7], 'text', ARGV[8])
redis.call('ZADD', suspended, ends, destination)
redis.call('DEL', key('probe:' .. destination))
return {ends, since, strikes}

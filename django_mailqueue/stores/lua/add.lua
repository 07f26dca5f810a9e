-- add.lua (after keys.lua, replay.lua, store_items.lua and quota.lua): store a batch of items with their messages, all or nothing.
--
-- KEYS[1]  <prefix>schema   string, the layout version
-- KEYS[2]  <prefix>seq      string, the counter that orders items
-- KEYS[3]  <prefix>items    sorted set, every item by next attempt
-- KEYS[4]  <prefix>queues   set, names of the queues whose ready set may hold items
-- KEYS[5…] every other key the items touch (keys.lua): per item <prefix>item:<id>, <prefix>message:<id>,
--          <prefix>ready:<queue> and its admin indexes (<prefix>queue:<queue>, <prefix>domain:<domain> of each
--          recipient domain), and <prefix>ids, <prefix>queue_names; when the store retries, the call's marker
--          <prefix>replay:<ms>:<token> (see replay.lua)
-- ARGV[1]  the prefix (the wake-up channel is <prefix>wakeup)
-- ARGV[2]  the layout version
-- ARGV[3]  MAX_ITEMS, or '' for no bound, or in a partitioned queue 'M:N:p': the partition's share of M
--          (quota.lua, <prefix>quota declared)
-- ARGV[4]  n, how many items follow
-- then, per item, 13 values: id, queue, next attempt (µs), created (µs), sender,
--          recipients (JSON), size, Message-ID, subject, message bytes, domains, words, addresses
--
-- Returns {'ok'} once every item is stored and idle workers are told;
-- {'full', held} when the batch would pass MAX_ITEMS; {'duplicate', id} when an
-- item with that id is queued already; {'schema', found} when the prefix holds
-- another application's schema key. Nothing is written unless 'ok'. A retry of a call
-- that ran (its marker found) returns {'ok'} and writes nothing.
--
-- Every check comes before the first write: under maxmemory a script is refused
-- at its first write, so a refusal also leaves nothing half stored.
local prefix = ARGV[1]
local n = tonumber(ARGV[4])
local key, marker = declared(prefix)

if replayed(marker) then
  return {'ok'}
end

local found = redis.pcall('GET', KEYS[1])
if type(found) == 'table' then
  return {'schema', 'a key of type ' .. redis.call('TYPE', KEYS[1])['ok']}
end
if found and found ~= ARGV[2] then
  return {'schema', found}
end

if ARGV[3] ~= '' then
  local held = redis.call('ZCARD', KEYS[3])
  if held + n > bound_of(key, ARGV[3]) then
    return {'full', held}
  end
end

local queued = queued_already(key, 5, n)
if queued then
  return {'duplicate', queued}
end

-- Told first, so that a channel the ACL denies fails before anything is written;
-- subscribers read it only once the script has run whole.
redis.call('PUBLISH', prefix .. 'wakeup', n)
if not found then
  redis.call('SET', KEYS[1], ARGV[2])
end
store_items(key, KEYS[2], KEYS[3], KEYS[4], 5, n)
mark(marker, '1')
return {'ok'}

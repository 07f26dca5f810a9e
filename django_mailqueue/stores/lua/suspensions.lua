-- suspensions.lua (after keys.lua; reads only): the suspensions in force among some destinations.
--
-- KEYS  <prefix>suspension:<destination> of each destination below — every key it reads (keys.lua)
-- ARGV[1]  the prefix (the keys above are found by their names after it)
-- ARGV[2]  now (µs)
-- ARGV[3…] the destinations: those asked for, or (all) those the store read from <prefix>suspended scored
--          after now
--
-- Returns, per suspension in force (its until after now), the destination then its hash as
-- HGETALL gives it.
local key = declared(ARGV[1])
local now = tonumber(ARGV[2])
local found = {}
for i = 3, #ARGV do
  local destination = ARGV[i]
  local record = key('suspension:' .. destination)
  local ends = redis.call('HGET', record, 'until')
  if ends and tonumber(ends) > now then
    found[#found + 1] = destination
    found[#found + 1] = redis.call('HGETALL', record)
  end
end
return found

-- page.lua: read a page of items in one step (reads only).
--
-- KEYS[1]  <prefix>items    sorted set, every item by next attempt, then oldest
-- ARGV[1]  the prefix (item keys are <prefix>item:<id>)
-- ARGV[2]  the first rank (0-based)
-- ARGV[3]  the last rank (inclusive)
-- ARGV[4]  '1' to count ranks from the end (the latest next attempt first), else ''
--
-- Returns {total, page}: how many members `items` holds, and per member in that
-- range whose item hash exists, its hash as a flat list of fields and values.
local prefix = ARGV[1]
local page = {}
local members
if ARGV[4] == '1' then
  members = redis.call('ZRANGE', KEYS[1], ARGV[2], ARGV[3], 'REV')
else
  members = redis.call('ZRANGE', KEYS[1], ARGV[2], ARGV[3])
end
for _, member in ipairs(members) do
  local fields = redis.call('HGETALL', prefix .. 'item:' .. string.sub(member, 18))
  if #fields > 0 then
    table.insert(page, fields)
  end
end
return {redis.call('ZCARD', KEYS[1]), page}

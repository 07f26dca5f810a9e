-- schema.lua: claim a key prefix for the queue, or say whose it is.
--
-- KEYS[1]  <prefix>schema   the layout version key
-- KEYS[2]  <prefix>search_layout  set with the schema: a new queue's search indexes hold every item from the start
-- ARGV[1]  the layout version this code writes (e.g. "django-mailqueue:1")
-- ARGV[2]  the search's layout (redis_layout.SEARCH_LAYOUT)
--
-- Returns {type, value}: the key's type and, for a string, its value. A prefix
-- with no schema key is the queue's from now on: the version is written and
-- returned. Anything else is another application's, and the caller refuses it.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
  redis.call('SET', KEYS[1], ARGV[1])
  if KEYS[2] then
    redis.call('SET', KEYS[2], ARGV[2])
  end
  return {'string', ARGV[1]}
end
if kind ~= 'string' then
  return {kind, ''}
end
return {kind, redis.call('GET', KEYS[1])}

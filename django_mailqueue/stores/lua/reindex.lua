-- reindex.lua (after store_items.lua): the search's terms of items queued before the search had indexes
-- (`RedisStore.build_search_index`, docs/admin.md "Search"): each item still there gets its `words` and
-- `addrs` and enters `word:<w>` and `addrs` at its next attempt now, its old terms (if any) taken out first.
--
-- KEYS[1]  <prefix>items    sorted set, every item by next attempt (names the queue's slot)
-- ARGV[1]  the prefix
-- ARGV[2]  n, how many items follow
-- then, per item, 3 values: id, words (space-separated), addresses (one a line), as item_args gives them
--
-- Returns how many items were still there.
local prefix, n = ARGV[1], tonumber(ARGV[2])
-- Not yet declared in KEYS: this script still names the items' keys from the prefix (docs/redis.md, "The scripts").
local function built(name)
  return prefix .. name
end
local done = 0
for i = 0, n - 1 do
  local base = 3 + i * 3
  local key = prefix .. 'item:' .. ARGV[base]
  local f = redis.call('HMGET', key, 'member', 'next')
  if f[1] then
    unindex_terms(built, f[1])
    redis.call('HSET', key, 'words', ARGV[base + 1], 'addrs', ARGV[base + 2])
    index_terms(built, f[1], f[2])
    done = done + 1
  end
end
return done

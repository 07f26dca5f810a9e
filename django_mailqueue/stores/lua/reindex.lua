-- reindex.lua (after keys.lua and store_items.lua): the search's terms of items queued before the search had its
-- present indexes (`RedisStore.build_search_index`, docs/admin.md "Search"): each item still there gets its `words`
-- and `addrs` and enters `words` and `addrs` now, its terms (if any) taken out first; the sets of the layout before
-- (`word:<w>`, a sorted set a word) of its old words are deleted whole.
--
-- KEYS[1]  <prefix>items    sorted set, every item by next attempt (names the queue's slot)
-- KEYS[2…] <prefix>words, <prefix>addrs, per item its <prefix>item:<id> and the <prefix>word:<w> of each word its
--          hash's `words` held (keys.lua)
-- ARGV[1]  the prefix
-- ARGV[2]  n, how many items follow
-- then, per item, 4 values: id, words (space-separated), addresses (one a line), as item_args gives them, and the
--          words its hash held (space-separated: the `word:<w>` keys to delete)
--
-- Returns how many items were still there.
local prefix, n = ARGV[1], tonumber(ARGV[2])
local key = declared(prefix)
local done = 0
for i = 0, n - 1 do
  local base = 3 + i * 4
  local item = key('item:' .. ARGV[base])
  local member = redis.call('HGET', item, 'member')
  if member then
    unindex_terms(key, member)
    for word in string.gmatch(ARGV[base + 3], '%S+') do
      redis.call('DEL', key('word:' .. word))
    end
    redis.call('HSET', item, 'words', ARGV[base + 1], 'addrs', ARGV[base + 2])
    index_terms(key, member)
    done = done + 1
  end
end
return done

-- store_items.lua: put before add.lua and complete.lua (`LuaScript(..., uses=...)`): how a script
-- checks and stores new items, each given as 13 values from ARGV[first] on: id, queue, next
-- attempt (µs), created (µs), sender, recipients (JSON), size, Message-ID, subject, message bytes,
-- the recipients' domains (lowercase, distinct, space-separated), the subject's words (lowercase,
-- distinct, space-separated: `core.search.subject_words`), the recipients' addresses (lowercase,
-- distinct, one a line); and how an item enters and leaves the admin's indexes (docs/redis.md, "The keys").
-- Each function takes `key`, what finds a key by its name after the queue's prefix (keys.lua's `declared`).

local STRIDE = 13

-- At most this many keys or (score, member) pairs go in one command (Lua's `unpack` takes fewer than 8,000 values).
local CHUNK = 1000

-- The id of the first of the n items already queued, or nil: one EXISTS a chunk, item by item only once one is.
local function queued_already(key, first, n)
  for start = 0, n - 1, CHUNK do
    local last = math.min(start + CHUNK, n) - 1
    local names = {}
    for i = start, last do
      names[#names + 1] = key('item:' .. ARGV[first + i * STRIDE])
    end
    if redis.call('EXISTS', unpack(names)) > 0 then
      for i = start, last do
        local id = ARGV[first + i * STRIDE]
        if redis.call('EXISTS', key('item:' .. id)) == 1 then
          return id
        end
      end
    end
  end
  return nil
end

-- The search's indexes of an item (docs/admin.md, "Search"), from its hash's `words` and `addrs`: `words`, every
-- subject word with its item (`<word>\0<member>`), and `addrs`, every address with its item (`<address>\0<member>`),
-- all scored 0: a word is a ZRANGEBYLEX of `words`, an address start one of `addrs`. Neither changes while the item
-- is queued: they are written when it is stored (store_items, reindex.lua) and taken out when it goes.
local function index_terms(key, member)
  local t = redis.call('HMGET', key('item:' .. string.sub(member, 18)), 'words', 'addrs')
  for word in string.gmatch(t[1] or '', '%S+') do
    redis.call('ZADD', key('words'), 0, word .. '\0' .. member)
  end
  for address in string.gmatch(t[2] or '', '[^\n]+') do
    redis.call('ZADD', key('addrs'), 0, address .. '\0' .. member)
  end
end

local function unindex_terms(key, member)
  local t = redis.call('HMGET', key('item:' .. string.sub(member, 18)), 'words', 'addrs')
  for word in string.gmatch(t[1] or '', '%S+') do
    redis.call('ZREM', key('words'), word .. '\0' .. member)
  end
  for address in string.gmatch(t[2] or '', '[^\n]+') do
    redis.call('ZREM', key('addrs'), address .. '\0' .. member)
  end
end

-- The admin's indexes of an item (docs/redis.md): its id's 32 hex digits in `ids` (by bytes: a prefix is a
-- ZRANGEBYLEX), its queue's and each recipient domain's sets, and while it has
-- been tried (attempts > 0: `tried`) the tried sets of all, of its queue and of each domain, every one scored
-- by the next attempt. An item that moves stays in the search's (`index_terms`): one that goes leaves them too.
local function index_item(key, member, queue, domains, due, tried)
  redis.call('ZADD', key('ids'), 0, (string.gsub(string.sub(member, 18), '-', '')))
  redis.call('ZADD', key('queue:' .. queue), due, member)
  for domain in string.gmatch(domains, '%S+') do
    redis.call('ZADD', key('domain:' .. domain), due, member)
    if tried then
      redis.call('ZADD', key('tried_domain:' .. domain), due, member)
    end
  end
  if tried then
    redis.call('ZADD', key('tried'), due, member)
    redis.call('ZADD', key('tried_queue:' .. queue), due, member)
  end
end

local function unindex_item(key, member, queue, domains)
  redis.call('ZREM', key('ids'), (string.gsub(string.sub(member, 18), '-', '')))
  redis.call('ZREM', key('queue:' .. queue), member)
  for domain in string.gmatch(domains or '', '%S+') do
    redis.call('ZREM', key('domain:' .. domain), member)
    redis.call('ZREM', key('tried_domain:' .. domain), member)
  end
  redis.call('ZREM', key('tried'), member)
  redis.call('ZREM', key('tried_queue:' .. queue), member)
end

-- Send `values` (a list of `count` values) as `command name values…`, at most CHUNK times `per` values a command.
local function write(command, name, values, count, per)
  for start = 1, count, CHUNK * per do
    redis.call(command, name, unpack(values, start, math.min(start + CHUNK * per - 1, count)))
  end
end

-- A list of values and its length, grown by `add` (faster than `#` and a closure a key).
local function list_of(lists, name)
  local found = lists[name]
  if not found then
    found = {values = {}, n = 0}
    lists[name] = found
  end
  return found
end

-- Store the n items with their messages, due in their queues' ready sets, and in the indexes `index_item`
-- keeps (not tried yet) and the search's (`index_terms`), as n calls of them would: every sorted set written once a
-- batch, each distinct queue name once (docs/performance.md, "Redis enqueue and the search indexes"). The numbers
-- are Lua strings: a number would be formatted again for each command that takes it.
local function store_items(key, seq_key, items_key, queues_key, first, n)
  if n == 0 then
    return
  end
  -- n INCRs at once; GET and SET, which the documented ACL allows (docs/redis.md), not INCRBY
  local seq = tonumber(redis.call('GET', seq_key) or '0')
  redis.call('SET', seq_key, seq + n)
  -- (due, member) pairs by queue (items, ready:<q> and queue:<q> take the same) and by domain; (0, entry) pairs
  local by_queue, by_domain = {}, {}
  local ids, words, addrs = {}, {}, {}
  local n_ids, n_words, n_addrs = 0, 0, 0
  for i = 0, n - 1 do
    local base = first + i * STRIDE
    local id, queue, due = ARGV[base], ARGV[base + 1], ARGV[base + 2]
    local member = string.format('%016d', seq + i + 1) .. ':' .. id
    redis.call('HSET', key('item:' .. id),
      'id', id, 'member', member, 'queue', queue, 'next', due, 'created', ARGV[base + 3],
      'sender', ARGV[base + 4], 'rcpts', ARGV[base + 5], 'size', ARGV[base + 6],
      'mid', ARGV[base + 7], 'subject', ARGV[base + 8], 'domains', ARGV[base + 10],
      'words', ARGV[base + 11], 'addrs', ARGV[base + 12],
      'attempts', '0', 'rev', '0', 'reclaims', '0', 'delay', '0')
    redis.call('SET', key('message:' .. id), ARGV[base + 9])
    local q = list_of(by_queue, queue)
    q.values[q.n + 1], q.values[q.n + 2], q.n = due, member, q.n + 2
    -- index_item's and index_terms' writes, the terms from the arguments rather than the hash just written
    ids[n_ids + 1], ids[n_ids + 2], n_ids = '0', (string.gsub(id, '-', '')), n_ids + 2
    for domain in string.gmatch(ARGV[base + 10], '%S+') do
      local d = list_of(by_domain, domain)
      d.values[d.n + 1], d.values[d.n + 2], d.n = due, member, d.n + 2
    end
    local tail = '\0' .. member
    for word in string.gmatch(ARGV[base + 11], '%S+') do
      words[n_words + 1], words[n_words + 2], n_words = '0', word .. tail, n_words + 2
    end
    for address in string.gmatch(ARGV[base + 12], '[^\n]+') do
      addrs[n_addrs + 1], addrs[n_addrs + 2], n_addrs = '0', address .. tail, n_addrs + 2
    end
  end
  local names = {}
  for queue, q in pairs(by_queue) do
    write('ZADD', items_key, q.values, q.n, 2)
    write('ZADD', key('ready:' .. queue), q.values, q.n, 2)
    write('ZADD', key('queue:' .. queue), q.values, q.n, 2)
    names[#names + 1] = queue
  end
  for domain, d in pairs(by_domain) do
    write('ZADD', key('domain:' .. domain), d.values, d.n, 2)
  end
  write('ZADD', key('ids'), ids, n_ids, 2)
  write('ZADD', key('words'), words, n_words, 2)
  write('ZADD', key('addrs'), addrs, n_addrs, 2)
  write('SADD', queues_key, names, #names, 1)
  write('SADD', key('queue_names'), names, #names, 1)
end

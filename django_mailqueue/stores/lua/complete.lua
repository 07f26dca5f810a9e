-- complete.lua (after keys.lua, replay.lua, store_items.lua, store_suppressions.lua and quota.lua): record a batch of
-- attempts' outcomes — per item its DSNs added, its addresses put on the suppression list and its lease let go, for
-- the lease's owner at the revision it claimed — each item all or nothing, in order, as that many calls one after
-- the other would.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- KEYS[4]  <prefix>seq      string, the counter that orders items (for the DSNs)
-- KEYS[5]  <prefix>suppressed           hash, the suppression list's entries
-- KEYS[6]  <prefix>suppressed:by_time   sorted set, its addresses by minus their time
-- KEYS[7…] every other key it touches (keys.lua): each item's <prefix>item:<id>, <prefix>message:<id>,
--          <prefix>ready:<queue> and admin indexes, <prefix>failed, <prefix>ids, <prefix>queue_names, each DSN's
--          keys (as add.lua's), and when the store retries the call's marker <prefix>replay:<ms>:<token>
-- ARGV[1]  the prefix (the wake-up channel <prefix>wakeup)
-- ARGV[2]  MAX_ITEMS, or '' for no bound, or a partition's 'M:N:p' (as add.lua's; checked only when DSNs follow)
-- ARGV[3]  k, how many items follow; then per item:
--   id, owner, the revision the owner claimed,
--   'drop' (every recipient is final), 'keep' (every recipient final, one failed, KEEP_FAILED: the item stays, out
--   of its ready set and the tried sets, scored NEVER, in <prefix>failed by when it failed) or 'record',
--   recipients (JSON, computed by the caller from the item read at that revision; '' with 'drop'),
--   next attempt (µs; core.items.NEVER with 'keep'; '' with 'drop'), attempts ('' with 'drop'),
--   delay warned ('0' or '1'; '' with 'drop'), with 'keep' when it failed (µs) else '',
--   n, how many DSN items follow, and per DSN the 13 values add.lua takes: id, queue, next attempt (µs),
--   created (µs), sender, recipients (JSON), size, Message-ID, subject, message bytes, domains, words, addresses,
--   then m, how many suppression entries follow, and per entry the 3 values store_suppressions takes
--
-- Returns per item 1 once recorded (or the item and its message dropped) and its DSNs added, 0 when the owner does
-- not hold the lease at that revision, -1 when there is no such item, -2 when its DSNs would pass MAX_ITEMS, -3
-- when a DSN's id is queued already; nothing of an item is written unless 1. Every other write to an item's
-- outcome fields comes from this script, and each claim bumps `rev`, so owner and revision together prove the
-- caller's reading is current. A retry of a call that ran (its marker found) returns its answers and writes
-- nothing.
--
-- The members leaving a sorted set are taken out together, one ZREM a key for the batch (docs/performance.md,
-- helper `rdeliver`): the leases of the items whose outcome cannot be refused once their owner is checked (no
-- DSNs) first — a write that adds no memory, so that under maxmemory the rest runs, as each call's own ZREM
-- first did —, the dropped items' index entries at the end, and before any check that counts `items`.
local prefix, bound = ARGV[1], ARGV[2]
local key, marker = declared(prefix)
local prior = replayed(marker)
if prior then
  local answers = {}
  for answer in string.gmatch(prior, '%S+') do
    answers[#answers + 1] = tonumber(answer)
  end
  return answers
end

-- Members to take out of a sorted set, by key, and `flush` to take them out.
local leaving = {}
local function leave(name, member)
  local found = list_of(leaving, name)
  found.n = found.n + 1
  found.values[found.n] = member
end
local function flush()
  for name, found in pairs(leaving) do
    write('ZREM', name, found.values, found.n, 1)
  end
  leaving = {}
end

local function read(item_key)
  return redis.call('HMGET', item_key, 'owner', 'rev', 'member', 'queue', 'domains', 'words', 'addrs')
end

-- The items, their hashes read and the owner checked (a repeated id is read again in its turn).
local items, answers, seen = {}, {}, {}

-- Read item i's hash; its answer now if it is gone (-1) or no longer this lease's (0).
local function check(i, c)
  c.f = read(c.item_key)
  if not c.f[3] then
    answers[i] = -1
  elseif c.f[1] ~= c.owner or c.f[2] ~= c.rev then
    answers[i] = 0
  end
end
local at = 4
for i = 1, tonumber(ARGV[3]) do
  local c = {id = ARGV[at], owner = ARGV[at + 1], rev = ARGV[at + 2], mode = ARGV[at + 3], at = at}
  c.item_key = key('item:' .. c.id)
  c.n = tonumber(ARGV[at + 9])
  c.dsns = at + 10
  c.m_at = c.dsns + c.n * STRIDE
  at = c.m_at + 1 + tonumber(ARGV[c.m_at]) * 3
  if seen[c.id] then
    c.again = true
  else
    seen[c.id] = true
    check(i, c)
  end
  items[i] = c
end

-- The leases of the items that nothing refuses now, out in one ZREM: the call's first write.
for i, c in ipairs(items) do
  if not answers[i] and not c.again and c.n == 0 then
    leave(KEYS[1], c.f[3])
    c.left = true
  end
end
flush()

for i, c in ipairs(items) do
  if c.again then
    check(i, c)
  end
  local n = c.n
  if not answers[i] and n > 0 then
    flush()
    if bound ~= '' and redis.call('ZCARD', KEYS[2]) + n > bound_of(key, bound) then
      answers[i] = -2
    elseif queued_already(key, c.dsns, n) then
      answers[i] = -3
    else
      -- Told before the item's first write (as in add.lua), so that a channel the ACL denies writes nothing.
      redis.call('PUBLISH', prefix .. 'wakeup', n)
    end
  end
  if not answers[i] then
    local f, a = c.f, c.at
    local member, queue = f[3], f[4]
    if not c.left then
      redis.call('ZREM', KEYS[1], member)
    end
    if c.mode == 'drop' then
      leave(KEYS[2], member)
      leave(key('ready:' .. queue), member)
      leave(key('ids'), (string.gsub(string.sub(member, 18), '-', '')))
      leave(key('queue:' .. queue), member)
      for domain in string.gmatch(f[5] or '', '%S+') do
        leave(key('domain:' .. domain), member)
        leave(key('tried_domain:' .. domain), member)
      end
      leave(key('tried'), member)
      leave(key('tried_queue:' .. queue), member)
      local tail = '\0' .. member
      for word in string.gmatch(f[6] or '', '%S+') do
        leave(key('words'), word .. tail)
      end
      for address in string.gmatch(f[7] or '', '[^\n]+') do
        leave(key('addrs'), address .. tail)
      end
      redis.call('DEL', c.item_key, key('message:' .. c.id))
    elseif c.mode == 'keep' then
      local never = ARGV[a + 5]
      redis.call('HSET', c.item_key, 'rcpts', ARGV[a + 4], 'next', never, 'attempts', ARGV[a + 6],
                 'delay', ARGV[a + 7], 'reclaims', 0, 'failed', ARGV[a + 8])
      redis.call('HINCRBY', c.item_key, 'rev', 1)
      redis.call('HDEL', c.item_key, 'owner', 'expires')
      redis.call('ZADD', KEYS[2], never, member)
      redis.call('ZREM', key('ready:' .. queue), member)
      unindex_item(key, member, queue, f[5])
      index_item(key, member, queue, f[5] or '', never, false)
      redis.call('ZADD', key('failed'), ARGV[a + 8], member)
    else
      local due = ARGV[a + 5]
      redis.call('HSET', c.item_key, 'rcpts', ARGV[a + 4], 'next', due, 'attempts', ARGV[a + 6],
                 'delay', ARGV[a + 7], 'reclaims', 0)
      redis.call('HINCRBY', c.item_key, 'rev', 1)
      redis.call('HDEL', c.item_key, 'owner', 'expires')
      redis.call('ZADD', KEYS[2], due, member)
      redis.call('ZADD', key('ready:' .. queue), due, member)
      redis.call('SADD', KEYS[3], queue)
      index_item(key, member, queue, f[5] or '', due, ARGV[a + 6] ~= '0')
    end
    store_items(key, KEYS[4], KEYS[2], KEYS[3], c.dsns, n)
    store_suppressions(KEYS[5], KEYS[6], c.m_at + 1, tonumber(ARGV[c.m_at]))
    answers[i] = 1
  end
end
flush()
for _, answer in ipairs(answers) do
  if answer == 1 then
    mark(marker, table.concat(answers, ' '))
    break
  end
end
return answers

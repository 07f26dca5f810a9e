-- claim.lua (after keys.lua and replay.lua): lease up to `limit` of the due candidates the store read just
-- before (redis_claiming.py), earliest due first, each checked again here: the script runs whole, the read did not.
--
-- KEYS  <prefix>leases, <prefix>items, <prefix>queues, the ready set <prefix>ready:<queue> of each queue
--       below, <prefix>item:<id> and <prefix>message:<id> of each candidate, and (when the store retries) the
--       call's marker, <prefix>replay:<ms>:<token> (see replay.lua) — every key it touches (keys.lua)
-- ARGV[1]  the prefix (the keys above are found by their names after it)
-- ARGV[2]  owner
-- ARGV[3]  now (µs)
-- ARGV[4]  lease expiry (µs)
-- ARGV[5]  limit
-- ARGV[6]  'lanes': the queues below are served in their order; 'all': every queue (those of <prefix>queues
--          when read), merged, and a queue whose ready set is gone leaves <prefix>queues
-- ARGV[7]  q, how many queues follow; then per queue its name, c, and c members of its ready set read due
-- then    e, and e members of <prefix>leases read expired (scored by now)
--
-- A candidate is taken only while still as read, as its item's hash says (docs/redis.md, "The keys": an item is
-- in its ready set while it has no owner and is not kept failed, in `leases` while it has one, scored by its next
-- attempt / the later of its expiry and next attempt): the same member, due by now, and not leased (a ready one)
-- or leased with the lease expired (a lease read), its queue among those served. Within a
-- queue (or across all with 'all') the earliest next attempt comes first, then the oldest: a member is a
-- 16-digit sequence number, ':', and the id. A claim moves an item to `leases`, sets owner and expires, bumps
-- `rev`, and bumps `reclaims` when it takes an expired lease. A member whose item hash is gone is dropped
-- here, with its message.
--
-- Returns {skipped, item, item, …}: how many candidates were not taken because they had changed since the
-- read or were dropped (the store reads again when it got fewer than `limit` and skipped is above 0), then
-- per claimed item the values of its hash's FIELDS (below) after the claim, in that order, in claim order. A
-- retry of a call that ran (its marker found) returns the items that call claimed and the owner still holds,
-- and claims nothing.
local key, marker = declared(ARGV[1])
local owner, now, expires = ARGV[2], ARGV[3], ARGV[4]
local limit = tonumber(ARGV[5])
local now_n, expires_n = tonumber(now), tonumber(expires)
local leases_key, items_key, queues_key = key('leases'), key('items'), key('queues')

-- what a claimed item's reply holds, in this order (redis_claiming.CLAIMED_FIELDS)
local FIELDS = {'id', 'sender', 'rcpts', 'size', 'created', 'next', 'attempts', 'queue', 'owner', 'expires', 'rev',
                'reclaims', 'delay', 'mid', 'subject', 'failed', 'domains', 'words'}

local prior = replayed(marker)
if prior then
  local out = {0}
  for id in string.gmatch(prior, '[^ ]+') do
    local item = key('item:' .. id)
    if redis.call('HGET', item, 'owner') == owner then
      table.insert(out, redis.call('HMGET', item, unpack(FIELDS)))
    end
  end
  return out
end
local claimed = {}
local skipped = 0

local function drop(member, ready_key)
  redis.call('ZREM', leases_key, member)
  redis.call('ZREM', items_key, member)
  if ready_key then
    redis.call('ZREM', ready_key, member)
  end
  redis.call('DEL', key('message:' .. string.sub(member, 18)))
  skipped = skipped + 1
end

local function earlier(a, b)
  if a.due ~= b.due then
    return a.due < b.due
  end
  return a.seq < b.seq
end

-- The queues as given, each with its candidates still due in its ready set.
local lanes = {}
local at = 8
for _ = 1, tonumber(ARGV[7]) do
  local queue, c = ARGV[at], tonumber(ARGV[at + 1])
  local ready_key = key('ready:' .. queue)
  local list = {}
  for i = at + 2, at + 1 + c do
    local member = ARGV[i]
    local id = string.sub(member, 18)
    -- Still in its ready set, due, as the item says: a ready item has no owner and is not kept failed, and its
    -- score is its next attempt (one HMGET, what the one-script claim's EXISTS cost).
    local f = redis.call('HMGET', key('item:' .. id), 'member', 'next', 'owner', 'failed', 'rev')
    if not f[1] then
      drop(member, ready_key)
    elseif f[1] ~= member or f[3] or f[4] or tonumber(f[2]) > now_n then
      skipped = skipped + 1
    else
      table.insert(list, {member = member, id = id, due = tonumber(f[2]), next = f[2], rev = tonumber(f[5]),
                          seq = tonumber(string.sub(member, 1, 16)), key = ready_key})
    end
  end
  table.insert(lanes, {queue = queue, key = ready_key, list = list})
  at = at + 2 + c
end

-- Expired leases of due items, by queue: few, the leftovers of stopped workers.
local expired = {}
for i = at + 1, at + tonumber(ARGV[at]) do
  local member = ARGV[i]
  local id = string.sub(member, 18)
  -- Still leased and claimable by now: its score in `leases` is the later of its expiry and its next attempt.
  local f = redis.call('HMGET', key('item:' .. id), 'queue', 'next', 'member', 'owner', 'expires', 'rev', 'reclaims')
  if not f[1] then
    drop(member, nil)
  elseif f[3] ~= member or not f[4] or tonumber(f[5]) > now_n or tonumber(f[2]) > now_n then
    skipped = skipped + 1
  else
    local list = expired[f[1]]
    if not list then
      list = {}
      expired[f[1]] = list
    end
    table.insert(list, {member = member, id = id, due = tonumber(f[2]), next = f[2], rev = tonumber(f[6]),
                        reclaims = tonumber(f[7] or '0'), seq = tonumber(string.sub(member, 1, 16)), leased = true})
  end
end

-- The candidates chosen, in claim order; written together below.
local chosen = {}
local function take(list, want)
  table.sort(list, earlier)
  for i = 1, math.min(want, #list) do
    chosen[#chosen + 1] = list[i]
  end
end

if ARGV[6] == 'lanes' then
  for _, lane in ipairs(lanes) do
    local want = limit - #chosen
    if want <= 0 then
      break
    end
    for _, c in ipairs(expired[lane.queue] or {}) do
      table.insert(lane.list, c)
    end
    take(lane.list, want)
  end
else
  local list = {}
  for _, lane in ipairs(lanes) do
    for _, c in ipairs(lane.list) do
      table.insert(list, c)
    end
    if redis.call('EXISTS', lane.key) == 0 then
      redis.call('SREM', queues_key, lane.queue)
    end
  end
  for _, leases in pairs(expired) do
    for _, c in ipairs(leases) do
      table.insert(list, c)
    end
  end
  take(list, limit)
end

-- The chosen leave their ready sets (an expired lease `leases`) in one ZREM a key and enter `leases` in one ZADD
-- (docs/performance.md, helper `rdeliver`). The ZREMs first: under maxmemory Redis refuses a script at a first
-- write that may add memory, and a claim should still run to drain a full queue.
local leaving, entering, n_entering = {}, {}, 0
for _, c in ipairs(chosen) do
  local from = c.key or leases_key
  local members = leaving[from]
  if not members then
    members = {}
    leaving[from] = members
  end
  members[#members + 1] = c.member
  -- scored by the later of the lease's expiry and the next attempt
  entering[n_entering + 1] = c.due > expires_n and c.next or expires
  entering[n_entering + 2] = c.member
  n_entering = n_entering + 2
end
-- at most 1,000 members a command (Lua's `unpack` takes fewer than 8,000 values)
local function send(command, name, values, n)
  for start = 1, n, 1000 do
    redis.call(command, name, unpack(values, start, math.min(start + 999, n)))
  end
end
for from, members in pairs(leaving) do
  send('ZREM', from, members, #members)
end
local out = {skipped}
for _, c in ipairs(chosen) do
  local item = key('item:' .. c.id)
  -- owner and expiry set, `rev` bumped (and `reclaims` for an expired lease), as read just above
  if c.leased then
    redis.call('HSET', item, 'owner', owner, 'expires', expires, 'rev', c.rev + 1, 'reclaims', c.reclaims + 1)
  else
    redis.call('HSET', item, 'owner', owner, 'expires', expires, 'rev', c.rev + 1)
  end
  out[#out + 1] = redis.call('HMGET', item, unpack(FIELDS))
  claimed[#claimed + 1] = c.id
end
send('ZADD', leases_key, entering, n_entering)
if #claimed > 0 then
  mark(marker, table.concat(claimed, ' '))
end
return out

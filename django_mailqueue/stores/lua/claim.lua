-- claim.lua (after replay.lua): lease up to `limit` due items to an owner, earliest due first.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items by when they become claimable again:
--                           the later of the lease's expiry and the next attempt
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- KEYS[4]  (when the store retries) the call's marker, <prefix>replay:<ms>:<token> (see replay.lua)
-- ARGV[1]  the prefix (item keys, <prefix>ready:<queue>, <prefix>message:<id>)
-- ARGV[2]  owner
-- ARGV[3]  now (µs)
-- ARGV[4]  lease expiry (µs)
-- ARGV[5]  limit
-- ARGV[6..] the queues in the order they are served; none: every queue, merged
--
-- Candidates are the first due members of each queue's ready set
-- (<prefix>ready:<queue>, scored by next attempt) and every expired, due lease.
-- Within a queue (or across all when no queue is named) the earliest next
-- attempt comes first, then the oldest: a member is a 16-digit sequence number,
-- ':', and the id. A claim moves an item to `leases`, sets owner and expires,
-- bumps `rev`, and bumps `reclaims` when it takes an expired lease.
-- A member whose item hash is gone is dropped here, with its message.
--
-- Returns a list with, per claimed item, its hash after the claim as a flat
-- list of fields and values, in claim order. A retry of a call that ran (its marker
-- found) returns the items that call claimed and the owner still holds, and claims nothing.
local prefix, owner, now, expires = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local limit = tonumber(ARGV[5])
local expires_n = tonumber(expires)

local prior = replayed(KEYS[4])
if prior then
  local out = {}
  for id in string.gmatch(prior, '[^ ]+') do
    local key = prefix .. 'item:' .. id
    if redis.call('HGET', key, 'owner') == owner then
      table.insert(out, redis.call('HGETALL', key))
    end
  end
  return out
end
local claimed = {}

local function drop(member, ready_key)
  redis.call('ZREM', KEYS[1], member)
  redis.call('ZREM', KEYS[2], member)
  if ready_key then
    redis.call('ZREM', ready_key, member)
  end
  redis.call('DEL', prefix .. 'message:' .. string.sub(member, 18))
end

local function earlier(a, b)
  if a.due ~= b.due then
    return a.due < b.due
  end
  return a.seq < b.seq
end

-- Expired leases of due items, by queue: few, the leftovers of stopped workers.
local expired = {}
local leased = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, member in ipairs(leased) do
  local id = string.sub(member, 18)
  local f = redis.call('HMGET', prefix .. 'item:' .. id, 'queue', 'next')
  if not f[1] then
    drop(member, nil)
  else
    local list = expired[f[1]]
    if not list then
      list = {}
      expired[f[1]] = list
    end
    table.insert(list, {member = member, id = id, due = tonumber(f[2]),
                        seq = tonumber(string.sub(member, 1, 16)), leased = true})
  end
end

-- The first `want` due members of a queue's ready set whose items exist.
local function ready(queue, want, into)
  local key = prefix .. 'ready:' .. queue
  local taken = 0
  while taken < want do
    local got = redis.call('ZRANGEBYSCORE', key, '-inf', now, 'WITHSCORES', 'LIMIT', taken, want - taken)
    if #got == 0 then
      break
    end
    for i = 1, #got, 2 do
      local member = got[i]
      local id = string.sub(member, 18)
      if redis.call('EXISTS', prefix .. 'item:' .. id) == 1 then
        table.insert(into, {member = member, id = id, due = tonumber(got[i + 1]),
                            seq = tonumber(string.sub(member, 1, 16)), key = key})
        taken = taken + 1
      else
        drop(member, key)
      end
    end
  end
  return key
end

local function take(list, want, out)
  table.sort(list, earlier)
  for i = 1, math.min(want, #list) do
    local c = list[i]
    local key = prefix .. 'item:' .. c.id
    -- A ZREM first: under maxmemory Redis refuses a script at a first write that
    -- may add memory, and a claim should still run to drain a full queue.
    if c.leased then
      redis.call('ZREM', KEYS[1], c.member)
      redis.call('HINCRBY', key, 'reclaims', 1)
    else
      redis.call('ZREM', c.key, c.member)
    end
    redis.call('HSET', key, 'owner', owner, 'expires', expires)
    redis.call('HINCRBY', key, 'rev', 1)
    local score = expires
    if c.due > expires_n then
      score = redis.call('HGET', key, 'next')
    end
    redis.call('ZADD', KEYS[1], score, c.member)
    table.insert(out, redis.call('HGETALL', key))
    table.insert(claimed, c.id)
  end
end

local out = {}
if #ARGV > 5 then
  for i = 6, #ARGV do
    local want = limit - #out
    if want <= 0 then
      break
    end
    local list = {}
    ready(ARGV[i], want, list)
    for _, c in ipairs(expired[ARGV[i]] or {}) do
      table.insert(list, c)
    end
    take(list, want, out)
  end
else
  local list = {}
  for _, queue in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    local key = ready(queue, limit, list)
    if redis.call('EXISTS', key) == 0 then
      redis.call('SREM', KEYS[3], queue)
    end
  end
  for _, leases in pairs(expired) do
    for _, c in ipairs(leases) do
      table.insert(list, c)
    end
  end
  take(list, limit, out)
end
if #claimed > 0 then
  mark(KEYS[4], table.concat(claimed, ' '))
end
return out

-- select.lua (reads only): the items passing the admin's filters — state, queue, recipient domain — read
-- from the indexes store_items.lua keeps (docs/redis.md, "The keys").
--
-- KEYS[1]  <prefix>items    sorted set, every item by next attempt
-- KEYS[2]  <prefix>leases   sorted set, leased items
-- ARGV[1]  the prefix (item keys, <prefix>queue:<q>, <prefix>domain:<d>, <prefix>tried,
--          <prefix>tried_queue:<q>, <prefix>tried_domain:<d>)
-- ARGV[2]  now (µs): decides due, scheduled and leased
-- ARGV[3]  state: 'due', 'scheduled', 'deferred', 'leased', 'failed', or '' for any
-- ARGV[4]  queue, or '' for any
-- ARGV[5]  domain (lowercase), or '' for any
-- ARGV[6]  offset: how many passing items to pass over first
-- ARGV[7]  limit: how many to give, or to count to
-- ARGV[8]  '1': the latest next attempt first, else ''
-- ARGV[9]  'list' or 'count'
-- ARGV[10] the rank of the index to start at (a 'list' reply's first element), or '' for its first
-- ARGV[11] core.items.NEVER (µs): the score of the items kept failed in every set but the tried ones, which
--          they leave (complete.lua's 'keep'); scheduled items end before it
--
-- The scope is a domain's items, else a queue's, else all; one index is walked in the list's order —
-- the scope's tried set for "deferred", else the scope's set — from the first rank whose score may pass
-- (due items end at now, scheduled ones begin after it and end before NEVER, where the failed ones are); each
-- member's item is read and tested for the filters the index does not decide. The leased items are those of
-- `leases` whose lease runs past now: few (those scored after now), read one by one and sorted. A count of
-- one scope (not a domain and a queue together) is sorted-set arithmetic: ZCARD and ZCOUNT of the scope's
-- set and of its tried set, less the leased items.
--
-- Returns for 'count' how many pass, at most the limit; for 'list' {rank, hashes}: the rank to go on
-- from (-1 at the end) and each passing item's hash as a flat list of fields and values.
local prefix, now_s = ARGV[1], ARGV[2]
local now = tonumber(now_s)
local state, queue, domain = ARGV[3], ARGV[4], ARGV[5]
local offset, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
local reverse, mode = ARGV[8] == '1', ARGV[9]
local never = ARGV[11]

-- queue, owner, expires, attempts, next, failed; nil when the item is gone
local function read(member)
  local f = redis.call('HMGET', prefix .. 'item:' .. string.sub(member, 18), 'queue', 'owner', 'expires',
                       'attempts', 'next', 'failed')
  if not f[1] then
    return nil
  end
  return f
end

local function leased(f)
  return f[2] and f[3] and tonumber(f[3]) > now
end

local function state_of(f)
  if f[6] then
    return 'failed'
  end
  if leased(f) then
    return 'leased'
  end
  if f[4] ~= '0' then
    return 'deferred'
  end
  if tonumber(f[5]) <= now then
    return 'due'
  end
  return 'scheduled'
end

local function passes(f)
  return (queue == '' or f[1] == queue) and (state == '' or state_of(f) == state)
end

local function hash(member)
  return redis.call('HGETALL', prefix .. 'item:' .. string.sub(member, 18))
end

-- The items leased now, of the queue when one is asked for, in the list's order. A lease's score is the later
-- of its expiry and the next attempt (claim.lua, renew.lua): only those scored after now may be held.
local function leased_now()
  local out = {}
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_s, '+inf')) do
    local f = read(member)
    if f and leased(f) and (queue == '' or f[1] == queue) then
      table.insert(out, {member = member, f = f, due = tonumber(f[5])})
    end
  end
  table.sort(out, function(a, b)
    if a.due ~= b.due then
      return a.due < b.due
    end
    return a.member < b.member
  end)
  return out
end

-- The items of the filter's scope (a domain's, else a queue's, else all) and those of them tried.
local all_key, tried_key = KEYS[1], prefix .. 'tried'
if domain ~= '' then
  all_key, tried_key = prefix .. 'domain:' .. domain, prefix .. 'tried_domain:' .. domain
elseif queue ~= '' then
  all_key, tried_key = prefix .. 'queue:' .. queue, prefix .. 'tried_queue:' .. queue
end
local in_scope = function(_) return true end
if domain ~= '' then
  in_scope = function(member) return redis.call('ZSCORE', all_key, member) ~= false end
end

if mode == 'count' and (domain == '' or queue == '') then
  local n
  if state == '' then
    n = redis.call('ZCARD', all_key)
  elseif state == 'failed' then
    n = redis.call('ZCOUNT', all_key, never, never)
  else
    local held = {}
    for _, l in ipairs(leased_now()) do
      if in_scope(l.member) then
        table.insert(held, l)
      end
    end
    if state == 'leased' then
      n = #held
    elseif state == 'deferred' then
      n = redis.call('ZCARD', tried_key)
      for _, l in ipairs(held) do
        if l.f[4] ~= '0' then
          n = n - 1
        end
      end
    else
      local lo, hi = '-inf', now_s
      if state == 'scheduled' then
        lo, hi = '(' .. now_s, '(' .. never
      end
      n = redis.call('ZCOUNT', all_key, lo, hi) - redis.call('ZCOUNT', tried_key, lo, hi)
      for _, l in ipairs(held) do
        if l.f[4] == '0' and ((state == 'due') == (l.due <= now)) then
          n = n - 1
        end
      end
    end
  end
  return math.min(math.max(n, 0), limit)
end

local found, passed, out = 0, 0, {}

-- Take a passing member: true once `limit` are taken.
local function take(member)
  if passed < offset then
    passed = passed + 1
    return false
  end
  found = found + 1
  if mode == 'list' then
    table.insert(out, hash(member))
  end
  return found >= limit
end

local function reply(rank)
  if mode == 'count' then
    return found
  end
  return {rank, out}
end

if state == 'leased' then
  local held = leased_now()
  local first, last, step = 1, #held, 1
  if reverse then
    first, last, step = #held, 1, -1
  end
  for i = first, last, step do
    if in_scope(held[i].member) and take(held[i].member) then
      return reply(-1)
    end
  end
  return reply(-1)
end

local key = all_key
if state == 'deferred' then
  key = tried_key
end
local first, last = 0, redis.call('ZCARD', key) - 1
if state == 'due' then
  last = redis.call('ZCOUNT', key, '-inf', now_s) - 1
elseif state == 'scheduled' then
  first = redis.call('ZCOUNT', key, '-inf', now_s)
  last = redis.call('ZCOUNT', key, '-inf', '(' .. never) - 1
elseif state == 'failed' then
  first = redis.call('ZCOUNT', key, '-inf', '(' .. never)
end
local pos = reverse and last or first
if ARGV[10] ~= '' then
  pos = tonumber(ARGV[10])
end
local batch = 200
while (reverse and pos >= first) or (not reverse and pos <= last) do
  local a, b = pos, math.min(last, pos + batch - 1)
  if reverse then
    a, b = math.max(first, pos - batch + 1), pos
  end
  local members = redis.call('ZRANGE', key, a, b)
  local i0, i1, di = 1, #members, 1
  if reverse then
    i0, i1, di = #members, 1, -1
  end
  for i = i0, i1, di do
    local f = read(members[i])
    if f and passes(f) and take(members[i]) then
      local next_rank = a + i
      if reverse then
        next_rank = a + i - 2
      end
      return reply(next_rank)
    end
  end
  if reverse then
    pos = a - 1
  else
    pos = b + 1
  end
end
return reply(-1)

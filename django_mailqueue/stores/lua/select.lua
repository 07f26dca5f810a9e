-- select.lua (after keys.lua; reads only): the items passing the admin's filters — state, queue, recipient domain —
-- read from the indexes store_items.lua keeps (docs/redis.md, "The keys"). It reads only the items whose keys the
-- store declared (keys.lua): one it meets undeclared it asks for, and the store calls again with them declared.
--
-- KEYS[1]  <prefix>items    sorted set, every item by next attempt
-- KEYS[2]  <prefix>leases   sorted set, leased items
-- KEYS[3…] <prefix>tried, the scope's sets (<prefix>queue:<q> and <prefix>tried_queue:<q>, <prefix>domain:<d> and
--          <prefix>tried_domain:<d>), then the item:<id> of each item the store was asked for
-- ARGV[1]  the prefix (the declared keys by their names after it)
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
-- ARGV[12] the member to start at (an 'again' reply's): its rank now, when it is still there, before ARGV[10]'s
-- ARGV[13] '1': the store's last round for these items, which passes over an item it did not declare; else ''
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
-- from (-1 at the end) and each passing item's hash as a flat list of fields and values. Or, when it met an item
-- not declared, {'again', rank, member, passed, found, hashes, asked}: the walk stopped at that rank and member,
-- having passed over `passed` and found `found` (their hashes in a 'list'), and `asked` are the members from there
-- (at most 1,000) whose items to declare; rank -2 when a lease scored after now was not declared (the store calls
-- again from the start, those declared too).
local prefix, now_s = ARGV[1], ARGV[2]
local now = tonumber(now_s)
local state, queue, domain = ARGV[3], ARGV[4], ARGV[5]
local offset, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
local reverse, mode = ARGV[8] == '1', ARGV[9]
local never = ARGV[11]
local key, _, known = declared(prefix)
local last_round = ARGV[13] == '1'
local ASK = 1000

-- queue, owner, expires, attempts, next, failed; nil when the item is gone, false when it was not declared (on the
-- last round: nil, passed over)
local function read(member)
  local item = known('item:' .. string.sub(member, 18))
  if not item then
    if last_round then
      return nil
    end
    return false
  end
  local f = redis.call('HMGET', item, 'queue', 'owner', 'expires', 'attempts', 'next', 'failed')
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
  return redis.call('HGETALL', key('item:' .. string.sub(member, 18)))
end

-- The items leased now, of the queue when one is asked for, in the list's order, and the members of those not
-- declared. A lease's score is the later of its expiry and the next attempt (claim.lua, renew.lua): only those
-- scored after now may be held.
local function leased_now()
  local out, unread = {}, {}
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_s, '+inf')) do
    local f = read(member)
    if f == false then
      table.insert(unread, member)
    elseif f and leased(f) and (queue == '' or f[1] == queue) then
      table.insert(out, {member = member, f = f, due = tonumber(f[5])})
    end
  end
  table.sort(out, function(a, b)
    if a.due ~= b.due then
      return a.due < b.due
    end
    return a.member < b.member
  end)
  return out, unread
end

-- The reply that asks for the leases not declared: the store calls again from the start.
local function again_from_start(unread)
  return {'again', -2, '', 0, 0, {}, unread}
end

-- The items of the filter's scope (a domain's, else a queue's, else all) and those of them tried.
local all_key, tried_key = KEYS[1], key('tried')
if domain ~= '' then
  all_key, tried_key = key('domain:' .. domain), key('tried_domain:' .. domain)
elseif queue ~= '' then
  all_key, tried_key = key('queue:' .. queue), key('tried_queue:' .. queue)
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
    local leased_list, unread = leased_now()
    if #unread > 0 then
      return again_from_start(unread)
    end
    for _, l in ipairs(leased_list) do
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
  local held, unread = leased_now()
  if #unread > 0 then
    return again_from_start(unread)
  end
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

local index = all_key
if state == 'deferred' then
  index = tried_key
end
local first, last = 0, redis.call('ZCARD', index) - 1
if state == 'due' then
  last = redis.call('ZCOUNT', index, '-inf', now_s) - 1
elseif state == 'scheduled' then
  first = redis.call('ZCOUNT', index, '-inf', now_s)
  last = redis.call('ZCOUNT', index, '-inf', '(' .. never) - 1
elseif state == 'failed' then
  first = redis.call('ZCOUNT', index, '-inf', '(' .. never)
end
local pos = reverse and last or first
if ARGV[10] ~= '' then
  pos = tonumber(ARGV[10])
end
-- The rank of the member now (the documented ACL has no ZRANK): where it was, else after those scored before it,
-- among those of its score; nil when it is gone.
local function rank_of(member, guess)
  if redis.call('ZRANGE', index, guess, guess)[1] == member then
    return guess
  end
  local score = redis.call('ZSCORE', index, member)
  if not score then
    return nil
  end
  local at = redis.call('ZCOUNT', index, '-inf', '(' .. score)
  while true do
    local got = redis.call('ZRANGE', index, at, at + 999)
    if #got == 0 then
      return nil
    end
    for i, m in ipairs(got) do
      if m == member then
        return at + i - 1
      end
    end
    at = at + #got
  end
end
if ARGV[12] ~= '' then
  local at = rank_of(ARGV[12], pos)
  if at and at >= first and at <= last then
    pos = at
  end
end

-- The reply that asks for the items from `rank` on (the member there, not declared): at most ASK of the walk.
local function again_at(rank, member)
  local a, b = rank, math.min(last, rank + ASK - 1)
  if reverse then
    a, b = math.max(first, rank - ASK + 1), rank
  end
  return {'again', rank, member, passed, found, out, redis.call('ZRANGE', index, a, b)}
end
local batch = 200
while (reverse and pos >= first) or (not reverse and pos <= last) do
  local a, b = pos, math.min(last, pos + batch - 1)
  if reverse then
    a, b = math.max(first, pos - batch + 1), pos
  end
  local members = redis.call('ZRANGE', index, a, b)
  local i0, i1, di = 1, #members, 1
  if reverse then
    i0, i1, di = #members, 1, -1
  end
  for i = i0, i1, di do
    local f = read(members[i])
    if f == false then
      return again_at(a + i - 1, members[i])
    end
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

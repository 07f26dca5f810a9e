-- defer_destination.lua (after store_items.lua): move the items waiting for a suspended destination to the
-- suspension's end, a bounded slice a call so no call holds the server long.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items by when they become claimable again
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- ARGV[1]  the prefix (item keys, <prefix>ready:<queue>)
-- ARGV[2]  until (µs): the new next attempt
-- ARGV[3]  now (µs)
-- ARGV[4]  n, how many candidate sets follow
-- ARGV[5]  budget: the most members this call examines
-- ARGV[6]  the candidate set to start at (1-based)
-- ARGV[7]  how many of its members before until to pass over (those an earlier call left in place)
-- ARGV[8 … 7+n]  the candidate sets: sorted sets of members by next attempt
-- ARGV[8+n …]    the domains (lowercase)
--
-- An item moves when it is not leased at now (no owner, or an expired lease), its next attempt is
-- before until, and its pending recipients are all at the domains (a domain compared in ASCII
-- lowercase). Its next attempt becomes until (which takes it out of every candidate set's range), its
-- revision is bumped, its attempts and recipients stay.
-- Returns {moved, set, skip}: the next call starts at that set, passing over skip members; set > n when
-- every candidate set is done.
local prefix, due, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- Not yet declared in KEYS: this script still names item keys from the prefix (docs/redis.md, "Redis Cluster").
local function built(name)
  return prefix .. name
end
local due_n = tonumber(due)
local n = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local set, skip = tonumber(ARGV[6]), tonumber(ARGV[7])
local wanted = {}
for i = 8 + n, #ARGV do
  wanted[ARGV[i]] = true
end

-- Whether the recipients (rcpts JSON) have a pending one, and every pending one is at the domains.
local function only_at_domains(rcpts)
  local pending = false
  for _, r in ipairs(cjson.decode(rcpts)) do
    if r[2] == 'pending' then
      local domain = string.match(r[1], '@([^@]*)$')
      if not domain or not wanted[string.lower(domain)] then
        return false
      end
      pending = true
    end
  end
  return pending
end

-- Whether the member moved (it then leaves the candidate sets' range).
local function move(member)
  local key = prefix .. 'item:' .. string.sub(member, 18)
  local f = redis.call('HMGET', key, 'owner', 'expires', 'queue', 'rcpts', 'next', 'domains', 'attempts')
  local leased = f[1] and tonumber(f[2]) > now
  if not f[3] or leased or tonumber(f[5]) >= due_n or not only_at_domains(f[4]) then
    return false
  end
  redis.call('HSET', key, 'next', due)
  redis.call('HINCRBY', key, 'rev', 1)
  redis.call('ZADD', KEYS[2], due, member)
  index_item(built, member, f[3], f[6] or '', due, f[7] ~= '0')
  if f[1] then -- an expired lease: claimable again at the later of its expiry and until
    local score = due
    if tonumber(f[2]) > due_n then
      score = f[2]
    end
    redis.call('ZADD', KEYS[1], score, member)
  else
    redis.call('ZADD', prefix .. 'ready:' .. f[3], due, member)
    redis.call('SADD', KEYS[3], f[3])
  end
  return true
end

local moved = 0
while set <= n and budget > 0 do
  local members = redis.call('ZRANGEBYSCORE', ARGV[7 + set], '-inf', '(' .. due, 'LIMIT', skip, budget)
  for _, member in ipairs(members) do
    if move(member) then
      moved = moved + 1
    else
      skip = skip + 1 -- still in range: the next slice passes over it
    end
  end
  budget = budget - #members
  if budget > 0 then -- the set gave fewer than asked: it is done
    set, skip = set + 1, 0
  end
end
return {moved, set, skip}

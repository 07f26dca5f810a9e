-- defer_destination.lua (after keys.lua and store_items.lua): move the items waiting for a suspended destination to
-- the suspension's end, one slice of candidates the store read first (a domain's set, `DEFER_SLICE` members), their
-- keys declared (keys.lua): each is checked again by its hash here, so one claimed, moved or gone meanwhile stays.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items by when they become claimable again
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- KEYS[4…] the indexes every item is in (`Keys.indexes`), and per candidate read its keys (`Keys.of_item`)
-- ARGV[1]  the prefix (the declared keys by their names after it)
-- ARGV[2]  until (µs): the new next attempt
-- ARGV[3]  now (µs)
-- ARGV[4]  n, how many candidates follow
-- ARGV[5 … 4+n]  the candidates' members
-- ARGV[5+n …]    the domains (lowercase)
--
-- An item moves when it is not leased at now (no owner, or an expired lease), its next attempt is
-- before until, and its pending recipients are all at the domains (a domain compared in ASCII
-- lowercase). Its next attempt becomes until (which takes it out of every candidate set's range), its
-- revision is bumped, its attempts and recipients stay. Returns how many moved.
local prefix, due, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local key, _, known = declared(prefix)
local due_n = tonumber(due)
local n = tonumber(ARGV[4])
local wanted = {}
for i = 5 + n, #ARGV do
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
  local item = known('item:' .. string.sub(member, 18))
  if not item then
    return false
  end
  local f = redis.call('HMGET', item, 'owner', 'expires', 'queue', 'rcpts', 'next', 'domains', 'attempts')
  local leased = f[1] and tonumber(f[2]) > now
  -- gone, or gone and added again since the read (its keys not declared)
  if not f[3] or not known('ready:' .. f[3]) or leased or tonumber(f[5]) >= due_n or not only_at_domains(f[4]) then
    return false
  end
  redis.call('HSET', item, 'next', due)
  redis.call('HINCRBY', item, 'rev', 1)
  redis.call('ZADD', KEYS[2], due, member)
  index_item(key, member, f[3], f[6] or '', due, f[7] ~= '0')
  if f[1] then -- an expired lease: claimable again at the later of its expiry and until
    local score = due
    if tonumber(f[2]) > due_n then
      score = f[2]
    end
    redis.call('ZADD', KEYS[1], score, member)
  else
    redis.call('ZADD', key('ready:' .. f[3]), due, member)
    redis.call('SADD', KEYS[3], f[3])
  end
  return true
end

local moved = 0
for i = 5, 4 + n do
  if move(ARGV[i]) then
    moved = moved + 1
  end
end
return moved

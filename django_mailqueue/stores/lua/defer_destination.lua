-- defer_destination.lua (after store_items.lua): move the items waiting for a suspended destination to the
-- suspension's end.
--
-- KEYS[1]  <prefix>leases   sorted set, leased items by when they become claimable again
-- KEYS[2]  <prefix>items    sorted set, every item by next attempt
-- KEYS[3]  <prefix>queues   set, names of the queues whose ready set may hold items
-- ARGV[1]  the prefix (item keys, <prefix>ready:<queue>)
-- ARGV[2]  until (µs): the new next attempt
-- ARGV[3]  now (µs)
-- ARGV[4]  n, how many candidate sets follow
-- ARGV[5 … 4+n]  the candidate sets: sorted sets of members by next attempt
-- ARGV[5+n …]    the domains (lowercase)
--
-- An item moves when it is not leased at now (no owner, or an expired lease), its next attempt is
-- before until, and its pending recipients are all at the domains (a domain compared in ASCII
-- lowercase). Its next attempt becomes until, its revision is bumped, its attempts and recipients stay.
-- Returns how many moved.
local prefix, due, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
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

local seen, moved = {}, 0
for i = 5, 4 + n do
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', ARGV[i], '-inf', '(' .. due)) do
    if not seen[member] then
      seen[member] = true
      local key = prefix .. 'item:' .. string.sub(member, 18)
      local f = redis.call('HMGET', key, 'owner', 'expires', 'queue', 'rcpts', 'next', 'domains', 'attempts')
      local leased = f[1] and tonumber(f[2]) > now
      if f[3] and not leased and tonumber(f[5]) < due_n and only_at_domains(f[4]) then
        redis.call('HSET', key, 'next', due)
        redis.call('HINCRBY', key, 'rev', 1)
        redis.call('ZADD', KEYS[2], due, member)
        index_item(prefix, member, f[3], f[6] or '', due, f[7] ~= '0')
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
        moved = moved + 1
      end
    end
  end
end
return moved

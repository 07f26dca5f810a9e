-- overview.lua (reads only): the admin overview's counts by state, of the whole queue and of each queue
-- named, in one step: the leased items read once, every other count sorted-set arithmetic on the
-- indexes store_items.lua keeps (docs/redis.md, "The keys"), as select.lua counts one scope.
--
-- KEYS[1]  <prefix>items    sorted set, every item by next attempt
-- KEYS[2]  <prefix>leases   sorted set, leased items
-- KEYS[3]  <prefix>tried    sorted set, the items tried (attempts > 0) by next attempt
-- ARGV[1]  the prefix (item keys, <prefix>queue:<q>, <prefix>tried_queue:<q>)
-- ARGV[2]  now (µs): decides due, scheduled and leased
-- ARGV[3]  core.items.NEVER (µs): the score of the items kept failed, which are in no tried set
-- ARGV[4…] the queues to count
--
-- Returns per scope — the whole queue first, then each queue of ARGV[4…] — {due, scheduled, deferred,
-- leased, failed}: each item in exactly one state, as `QueueItem.state_at` decides it.
local prefix, now_s, never = ARGV[1], ARGV[2], ARGV[3]
local now = tonumber(now_s)

-- The items leased now: {queue, tried, due} each (a lease past its time is not one: the item is in the
-- state its attempts and next attempt say). A lease's score is the later of its expiry and the next attempt
-- (claim.lua), so only those scored after now may be held.
local held = {}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_s, '+inf')) do
  local f = redis.call('HMGET', prefix .. 'item:' .. string.sub(member, 18), 'queue', 'owner', 'expires',
                       'attempts', 'next')
  if f[1] and f[2] and f[3] and tonumber(f[3]) > now then
    table.insert(held, {queue = f[1], tried = f[4] ~= '0', due = tonumber(f[5]) <= now})
  end
end

local function counts(all_key, tried_key, queue)
  local total, tried = redis.call('ZCARD', all_key), redis.call('ZCARD', tried_key)
  local all_due, tried_due = redis.call('ZCOUNT', all_key, '-inf', now_s), redis.call('ZCOUNT', tried_key, '-inf', now_s)
  local failed = redis.call('ZCOUNT', all_key, never, never)
  local due, scheduled, deferred, leased = all_due - tried_due, (total - all_due) - (tried - tried_due) - failed, tried, 0
  for _, l in ipairs(held) do
    if queue == nil or l.queue == queue then
      leased = leased + 1
      if l.tried then
        deferred = deferred - 1
      elseif l.due then
        due = due - 1
      else
        scheduled = scheduled - 1
      end
    end
  end
  return {math.max(due, 0), math.max(scheduled, 0), math.max(deferred, 0), leased, failed}
end

local out = {counts(KEYS[1], KEYS[3], nil)}
for i = 4, #ARGV do
  table.insert(out, counts(prefix .. 'queue:' .. ARGV[i], prefix .. 'tried_queue:' .. ARGV[i], ARGV[i]))
end
return out

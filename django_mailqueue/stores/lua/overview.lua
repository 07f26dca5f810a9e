-- overview.lua (after keys.lua; reads only): the admin overview's counts by state, of the whole queue and of each
-- queue named, in one step: the leased items read once, every other count sorted-set arithmetic on the indexes
-- store_items.lua keeps (docs/redis.md, "The keys"), as select.lua counts one scope. The store read the leases
-- first and declares their items' keys (keys.lua); a lease it did not read (taken since) is asked for.
--
-- KEYS[1]  <prefix>items    sorted set, every item by next attempt
-- KEYS[2]  <prefix>leases   sorted set, leased items
-- KEYS[3]  <prefix>tried    sorted set, the items tried (attempts > 0) by next attempt
-- KEYS[4…] each queue's <prefix>queue:<q> and <prefix>tried_queue:<q>, then the item:<id> of each lease read
-- ARGV[1]  the prefix (the declared keys by their names after it)
-- ARGV[2]  now (µs): decides due, scheduled and leased
-- ARGV[3]  core.items.NEVER (µs): the score of the items kept failed, which are in no tried set
-- ARGV[4]  '1': the store's last round, which counts a lease it did not read as not held; else ''
-- ARGV[5…] the queues to count
--
-- Returns per scope — the whole queue first, then each queue of ARGV[5…] — {due, scheduled, deferred,
-- leased, failed}: each item in exactly one state, as `QueueItem.state_at` decides it; or {'again', members…}:
-- the leases scored after now whose items the store did not declare (it reads them and calls again).
local prefix, now_s, never = ARGV[1], ARGV[2], ARGV[3]
local key, _, known = declared(prefix)
local now = tonumber(now_s)

-- The items leased now: {queue, tried, due} each (a lease past its time is not one: the item is in the
-- state its attempts and next attempt say). A lease's score is the later of its expiry and the next attempt
-- (claim.lua), so only those scored after now may be held.
local held, unread = {}, {}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_s, '+inf')) do
  local item = known('item:' .. string.sub(member, 18))
  if not item then
    table.insert(unread, member)
  else
    local f = redis.call('HMGET', item, 'queue', 'owner', 'expires', 'attempts', 'next')
    if f[1] and f[2] and f[3] and tonumber(f[3]) > now then
      table.insert(held, {queue = f[1], tried = f[4] ~= '0', due = tonumber(f[5]) <= now})
    end
  end
end
if #unread > 0 and ARGV[4] ~= '1' then
  table.insert(unread, 1, 'again')
  return unread
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
for i = 5, #ARGV do
  table.insert(out, counts(key('queue:' .. ARGV[i]), key('tried_queue:' .. ARGV[i]), ARGV[i]))
end
return out

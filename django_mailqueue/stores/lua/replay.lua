-- replay.lua: put before add.lua, claim.lua and complete.lua (`LuaScript(..., uses=...)`): the marker that
-- makes a call the store sends again after a lost answer (a failover, a broken connection) do nothing twice.
--
-- The marker key, given last in KEYS when the store retries calls (`failover_timeout` > 0), is
-- <prefix>replay:<lifetime in ms>:<token>, the token new for each call and the same for its retries. The
-- script that finds it answers as its first run did; the script that runs writes it, with the writes it
-- guards, so that a replica has both or neither. It lives the lifetime its name gives.

-- The marker's value when the call ran already, else nil (also when the store gave no marker).
-- Found, it is written again (its lifetime anew): a write, so that a WAIT after this call (sync_replicas) waits
-- until the replicas have everything up to here, the first run's writes included.
local function replayed(marker)
  if not marker then
    return nil
  end
  local value = redis.call('GET', marker)
  if value then
    redis.call('SET', marker, value, 'PX', string.match(marker, 'replay:(%d+):'))
    return value
  end
  return nil
end

-- Write the marker (when given), holding `value`.
local function mark(marker, value)
  if marker then
    local lifetime = string.match(marker, 'replay:(%d+):')
    redis.call('SET', marker, value, 'PX', lifetime)
  end
end

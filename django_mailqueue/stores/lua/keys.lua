-- keys.lua: put before every script that names keys by what follows the queue's prefix (`LuaScript(...,
-- uses=...)`): a script touches only the keys its caller declared in KEYS (Redis Cluster runs a script on the
-- node of its declared keys, and the scripting documentation requires it). `declared(prefix)` gives the function
-- that finds a declared key by its name after the prefix — an undeclared one is an error, never built — and the
-- call's replay marker, the declared key whose name starts with `replay:` (nil when the store gave none), and
-- `known`, which finds a declared key or gives nil (a script that read its keys first skips what was not read).
local function declared(prefix)
  local by_name, marker = {}, nil
  local after = #prefix + 1
  for _, key in ipairs(KEYS) do
    local name = string.sub(key, after)
    by_name[name] = key
    if string.sub(name, 1, 7) == 'replay:' then
      marker = key
    end
  end
  local function key(name)
    local found = by_name[name]
    if not found then
      error('the store did not declare the key ' .. name .. ' (its name after the prefix)')
    end
    return found
  end
  local function known(name)
    return by_name[name]
  end
  return key, marker, known
end

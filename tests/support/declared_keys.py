"""A check that a Redis store script touches only the keys it declares in KEYS: each script run with a prelude
that wraps `redis.call` and `redis.pcall` and refuses any key not among KEYS (docs/redis.md, "The scripts")."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator

import pytest

from django_mailqueue.stores import redis_scripts as scripts

#: A local `redis` shadows the global for the whole script: every command's keys are checked against KEYS first.
#: The keys of a command: DEL and EXISTS take keys only; PUBLISH a channel and TIME nothing, no key; every other
#: command the store's scripts send takes one key, first.
PRELUDE = """
local redis = (function(real)
  local declared = {}
  for _, key in ipairs(KEYS) do
    declared[key] = true
  end
  local function check(args)
    local verb = string.upper(args[1])
    if verb == 'PUBLISH' or verb == 'TIME' then
      return
    end
    local last = 2
    if verb == 'DEL' or verb == 'EXISTS' then
      last = #args
    end
    for i = 2, last do
      if not declared[args[i]] then
        error('UNDECLARED key ' .. tostring(args[i]) .. ' in ' .. verb)
      end
    end
  end
  return setmetatable({
    call = function(...) check({...}); return real.call(...) end,
    pcall = function(...) check({...}); return real.pcall(...) end,
  }, {__index = real})
end)(redis)
"""


@contextlib.contextmanager
def checked(monkeypatch: pytest.MonkeyPatch, chosen: Iterable[scripts.LuaScript]) -> Iterator[None]:
    """Within: each chosen script runs with the prelude (a source of its own, so a SHA of its own)."""
    for script in chosen:
        source = PRELUDE + script.source
        monkeypatch.setattr(script, "source", source)
        monkeypatch.setattr(script, "sha", hashlib.sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest())
    yield

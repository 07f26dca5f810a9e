"""The Redis store's Lua scripts: loaded from package files, run by EVALSHA with EVAL as the fallback."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

import redis
import redis.asyncio

#: What a script is given: names and values, as text or as bytes kept as they are.
Arg = str | bytes | int


class LuaScript:
    """One script of `stores/lua/`, named by the SHA-1 that `EVALSHA` takes.

    Redis forgets scripts on a restart, a failover or `SCRIPT FLUSH`; the first
    call after that gets `NOSCRIPT` and sends the source with `EVAL`, which runs
    it and caches it again. No `SCRIPT LOAD`, so an ACL user needs only `EVALSHA`
    and `EVAL`.
    """

    def __init__(self, name: str, *, uses: Sequence[str] = ()) -> None:
        self.name = name
        # `uses`: files of shared local functions, put before the script's own text.
        self.source = "".join(_read(part) for part in (*uses, name))
        self.sha = hashlib.sha1(self.source.encode("utf-8"), usedforsecurity=False).hexdigest()

    def run(self, client: redis.Redis[bytes], keys: Sequence[str], args: Sequence[Arg]) -> Any:
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args)

    async def arun(self, client: redis.asyncio.Redis[bytes], keys: Sequence[str], args: Sequence[Arg]) -> Any:
        try:
            return await client.execute_command(  # type: ignore[no-untyped-call]
                "EVALSHA", self.sha, len(keys), *keys, *args
            )
        except redis.exceptions.NoScriptError:
            return await client.execute_command(  # type: ignore[no-untyped-call]
                "EVAL", self.source, len(keys), *keys, *args
            )

    def __repr__(self) -> str:
        return f"LuaScript({self.name!r})"


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


SCHEMA = LuaScript("schema")
ADD = LuaScript("add", uses=["store_items"])
CLAIM = LuaScript("claim")
RENEW = LuaScript("renew")
COMPLETE = LuaScript("complete", uses=["store_items"])
RESCHEDULE = LuaScript("reschedule")
CANCEL = LuaScript("cancel")
PAGE = LuaScript("page")
TAKE_TOKENS = LuaScript("take_tokens")
SUSPEND = LuaScript("suspend")
SUSPENSIONS = LuaScript("suspensions")
CLEAR_SUSPENSION = LuaScript("clear_suspension")
DEFER_DESTINATION = LuaScript("defer_destination")

ALL = (
    SCHEMA,
    ADD,
    CLAIM,
    RENEW,
    COMPLETE,
    RESCHEDULE,
    CANCEL,
    PAGE,
    TAKE_TOKENS,
    SUSPEND,
    SUSPENSIONS,
    CLEAR_SUSPENSION,
    DEFER_DESTINATION,
)

"""The Redis store's Lua scripts: loaded from package files, run by EVALSHA with EVAL as the fallback."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis
import redis.asyncio

from .redis_cluster import is_redirect

#: What a script is given: names and values, as text or as bytes kept as they are.
Arg = str | bytes | int


@dataclass(frozen=True)
class Wait:
    """`WAIT replicas timeout` after a write: the store's `sync_replicas` and `sync_timeout`."""

    replicas: int
    timeout_ms: int


class ReplicasBehind(Exception):  # noqa: N818 - a condition, not a driver error
    """WAIT came back with fewer replicas than asked: the write is on the primary, not known to be on them.

    `reply` is the script's reply (what the write did on the primary).
    """

    def __init__(self, acked: int, wanted: int, reply: Any) -> None:
        super().__init__(f"{acked} of {wanted} replicas acknowledged the write")
        self.acked = acked
        self.wanted = wanted
        self.reply = reply


class LuaScript:
    """One script of `stores/lua/`, named by the SHA-1 that `EVALSHA` takes.

    Redis forgets scripts on a restart, a failover or `SCRIPT FLUSH`; the first
    call after that gets `NOSCRIPT` and sends the source with `EVAL`, which runs
    it and caches it again. No `SCRIPT LOAD`, so an ACL user needs only `EVALSHA`
    and `EVAL`.
    """

    def __init__(self, name: str, *, uses: Sequence[str] = (), wrote: Callable[[Any], bool] = bool) -> None:
        self.name = name
        #: whether a reply says the script wrote something (what a WAIT then waits for)
        self.wrote = wrote
        # `uses`: files of shared local functions, put before the script's own text.
        self.source = "".join(_read(part) for part in (*uses, name))
        self.sha = hashlib.sha1(self.source.encode("utf-8"), usedforsecurity=False).hexdigest()

    def run(
        self, client: redis.Redis[bytes], keys: Sequence[str], args: Sequence[Arg], wait: Wait | None = None
    ) -> Any:
        """The script's reply; with `wait`, sent with a WAIT on the same connection (ReplicasBehind when short)."""
        if wait is not None:
            return _raised(run_many(client, self, [(keys, args)], wait)[0])
        try:
            return client.execute_command("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args)

    async def arun(
        self, client: redis.asyncio.Redis[bytes], keys: Sequence[str], args: Sequence[Arg], wait: Wait | None = None
    ) -> Any:
        if wait is not None:
            return _raised((await arun_many(client, self, [(keys, args)], wait))[0])
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


Call = tuple[Sequence[str], Sequence[Arg]]


def _raised(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def run_many(client: redis.Redis[bytes], script: LuaScript, calls: Sequence[Call], wait: Wait | None) -> list[Any]:
    """Each call's reply (an error as its exception), in one round trip: EVALSHA each, then WAIT when asked.

    The calls Redis answers NOSCRIPT are sent again with EVAL (and WAIT) in a second one.
    Raises ReplicasBehind when WAIT counts fewer replicas than asked and a call wrote something.
    """
    replies, acked = _pipelined(client, [("EVALSHA", script.sha, c) for c in calls], wait)
    again = [i for i, reply in enumerate(replies) if isinstance(reply, redis.exceptions.NoScriptError)]
    if again:
        redone, acked = _pipelined(client, [("EVAL", script.source, calls[i]) for i in again], wait)
        for i, reply in zip(again, redone, strict=True):
            replies[i] = reply
    _check_wait(script, wait, acked, replies)
    return replies


async def arun_many(
    client: redis.asyncio.Redis[bytes], script: LuaScript, calls: Sequence[Call], wait: Wait | None
) -> list[Any]:
    replies, acked = await _apipelined(client, [("EVALSHA", script.sha, c) for c in calls], wait)
    again = [i for i, reply in enumerate(replies) if isinstance(reply, redis.exceptions.NoScriptError)]
    if again:
        redone, acked = await _apipelined(client, [("EVAL", script.source, calls[i]) for i in again], wait)
        for i, reply in zip(again, redone, strict=True):
            replies[i] = reply
    _check_wait(script, wait, acked, replies)
    return replies


def _pipelined(
    client: redis.Redis[bytes], commands: Sequence[tuple[str, str, Call]], wait: Wait | None
) -> tuple[list[Any], int | None]:
    pipe = client.pipeline(transaction=False)
    for verb, script, (keys, args) in commands:
        pipe.execute_command(verb, script, len(keys), *keys, *args)  # type: ignore[no-untyped-call, unused-ignore]
    if wait is not None:
        pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)  # type: ignore[no-untyped-call, unused-ignore]
    replies = pipe.execute(raise_on_error=False)
    return _split(replies, wait)


async def _apipelined(
    client: redis.asyncio.Redis[bytes], commands: Sequence[tuple[str, str, Call]], wait: Wait | None
) -> tuple[list[Any], int | None]:
    pipe = client.pipeline(transaction=False)
    for verb, script, (keys, args) in commands:
        pipe.execute_command(verb, script, len(keys), *keys, *args)
    if wait is not None:
        pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
    replies = await pipe.execute(raise_on_error=False)
    return _split(replies, wait)


def _split(replies: list[Any], wait: Wait | None) -> tuple[list[Any], int | None]:
    for reply in replies:
        if is_redirect(reply):  # a Cluster's slot moved: no call was run there; the caller sends them again
            raise reply
    if wait is None:
        return list(replies), None
    acked = replies[-1]
    if isinstance(acked, Exception):
        raise acked
    return list(replies[:-1]), int(acked)


def _check_wait(script: LuaScript, wait: Wait | None, acked: int | None, replies: list[Any]) -> None:
    if wait is None or acked is None or acked >= wait.replicas:
        return
    if any(script.wrote(reply) for reply in replies if not isinstance(reply, Exception)):
        raise ReplicasBehind(acked, wait.replicas, replies[0] if len(replies) == 1 else replies)


def _first_is_ok(reply: Any) -> bool:
    return bool(reply) and reply[0] in (b"ok", "ok")


SCHEMA = LuaScript("schema")
ADD = LuaScript("add", uses=["keys", "replay", "store_items", "quota"], wrote=_first_is_ok)
CLAIM = LuaScript("claim", uses=["keys", "replay"], wrote=lambda reply: len(reply) > 1)
RENEW = LuaScript("renew")
COMPLETE = LuaScript(
    "complete",
    uses=["keys", "replay", "store_items", "store_suppressions", "quota"],
    wrote=lambda reply: any(answer == 1 for answer in reply),
)
QUOTA_TAKE = LuaScript("quota_take", uses=["quota"], wrote=lambda reply: int(reply[0]) > 0)
QUOTA_GIVE = LuaScript("quota_give", uses=["quota"], wrote=lambda reply: reply == 1)
RESCHEDULE = LuaScript("reschedule", uses=["keys", "store_items"], wrote=lambda reply: reply == 1)
CANCEL = LuaScript("cancel", uses=["keys", "store_items"])
TAKE_TOKENS = LuaScript("take_tokens")
SUSPEND = LuaScript("suspend", uses=["keys"])
SUSPENSIONS = LuaScript("suspensions", uses=["keys"])
CLEAR_SUSPENSION = LuaScript("clear_suspension")
TAKE_PROBE = LuaScript("take_probe", wrote=lambda reply: int(reply[0]) == 0)
END_PROBE = LuaScript("end_probe", wrote=lambda reply: int(reply) > 0)
DEFER_DESTINATION = LuaScript("defer_destination", uses=["keys", "store_items"])
SUPPRESSION = LuaScript("suppression", uses=["store_suppressions"], wrote=lambda reply: int(reply) > 0)
SELECT = LuaScript("select", uses=["keys"])
OVERVIEW = LuaScript("overview", uses=["keys"])
REINDEX = LuaScript("reindex", uses=["keys", "store_items"], wrote=lambda reply: int(reply) > 0)
FAILED = LuaScript(
    "failed", uses=["keys", "store_items"], wrote=lambda reply: any(reply) if isinstance(reply, list) else bool(reply)
)

ALL = (
    SCHEMA,
    ADD,
    CLAIM,
    RENEW,
    COMPLETE,
    RESCHEDULE,
    CANCEL,
    TAKE_TOKENS,
    SUSPEND,
    SUSPENSIONS,
    CLEAR_SUSPENSION,
    TAKE_PROBE,
    END_PROBE,
    DEFER_DESTINATION,
    SUPPRESSION,
    SELECT,
    OVERVIEW,
    FAILED,
    REINDEX,
)

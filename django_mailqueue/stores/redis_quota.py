"""A partitioned Redis queue's `MAX_ITEMS`, held exactly: each partition's share of it (lua/quota.lua), moved to a
partition whose add found its share short (docs/redis.md, "Partitions")."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import redis_scripts as scripts
from .redis_layout import text

if TYPE_CHECKING:
    from .redis import RedisStore
    from .redis_clients import AsyncClient, SyncClient

#: How long a partition remembers a transfer it was given (so that giving it again does nothing): 30 days.
QUOTA_GIVEN_MS = 30 * 24 * 3600 * 1000
#: A transfer taken longer ago than this and still in `quota:out` was never given (its taker stopped): the next
#: transfer from that partition gives it. Far above any call's retries (socket and failover timeouts).
NEVER_GIVEN_MS = 5 * 60 * 1000


def share_spec(max_items: int, partitions: int, partition: int) -> str:
    """`M:N:p`: what add.lua, complete.lua and the quota scripts take for a partition's share."""
    return f"{max_items}:{partitions}:{partition}"


def _take_call(parts: Sequence[RedisStore], source: int, to: int, want: int, max_items: int) -> scripts.Call:
    part, now = parts[source], int(time.time() * 1000)
    keys = [part.keys.quota, part.keys.items, part.keys.quota_out]
    token = uuid.uuid4().hex
    spec = share_spec(max_items, len(parts), source)
    return keys, [spec, str(want), token, str(to), str(now), str(now - NEVER_GIVEN_MS)]


def _to_give(call: scripts.Call, reply: Any) -> tuple[int, list[tuple[str, int, int]]]:
    """How many the take moved, and the transfers to give: (token, to, k), this one's first."""
    taken = int(reply[0])
    found = [(text(reply[i]), text(reply[i + 1])) for i in range(1, len(reply), 2)]
    if taken:
        token, to, now = (text(arg) for arg in call[1][2:5])
        found.insert(0, (token, f"{to}:{taken}:{now}"))
    gives = []
    for token, what in found:
        to, k, _ = what.split(":")
        gives.append((token, int(to), int(k)))
    return taken, gives


def _give_call(parts: Sequence[RedisStore], token: str, to: int, k: int, max_items: int) -> scripts.Call:
    dest = parts[to]
    return [dest.keys.quota, dest.keys.quota_in(token)], [
        share_spec(max_items, len(parts), to),
        str(k),
        str(QUOTA_GIVEN_MS),
    ]


def transfer(parts: Sequence[RedisStore], to: int, want: int, max_items: int) -> int:
    """Move up to `want` of the other partitions' spare shares (share less items) to partition `to`, the next
    ones first. Each move: take (one script on the source, recorded in its `quota:out`), give (one script on `to`,
    once by token), forget the record. A record a stopped taker left, in any partition, `to`'s included, is given
    on the way (to its partition). How
    much was given, to any partition: 0 when an add refused for want of share may not fit on a second try."""
    moved = given = 0
    for step in range(len(parts)):  # `to` itself first, for its records only
        source = (to + step) % len(parts)
        part = parts[source]
        call = _take_call(parts, source, to, want - moved if step else 0, max_items)
        taken, gives = _to_give(call, _run(part, scripts.QUOTA_TAKE, call))
        for token, dest, k in gives:
            if dest >= len(parts):
                continue  # a partition of another count (mailqueue.E030): left recorded
            given += k if _run(parts[dest], scripts.QUOTA_GIVE, _give_call(parts, token, dest, k, max_items)) else 0
            part._do(functools.partial(_forget, part=part, token=token))
        moved += taken
        if moved >= want:
            break
    return given


def _run(part: RedisStore, script: scripts.LuaScript, call: scripts.Call) -> Any:
    return part._do(functools.partial(script.run, keys=call[0], args=call[1], wait=part.wait))


async def atransfer(parts: Sequence[RedisStore], to: int, want: int, max_items: int) -> int:
    moved = given = 0
    for step in range(len(parts)):  # `to` itself first, for its records only
        source = (to + step) % len(parts)
        part = parts[source]
        call = _take_call(parts, source, to, want - moved if step else 0, max_items)

        async def take(c: AsyncClient[bytes], call: scripts.Call = call, part: RedisStore = part) -> Any:
            return await scripts.QUOTA_TAKE.arun(c, *call, part.wait)

        taken, gives = _to_give(call, await part._ado(take))
        for token, dest, k in gives:
            if dest >= len(parts):
                continue
            give_call = _give_call(parts, token, dest, k, max_items)

            async def give(c: AsyncClient[bytes], call: scripts.Call = give_call, dest: int = dest) -> Any:
                return await scripts.QUOTA_GIVE.arun(c, *call, parts[dest].wait)

            async def forget(c: AsyncClient[bytes], token: str = token, part: RedisStore = part) -> Any:
                return await c.execute_command("HDEL", part.keys.quota_out, token)  # type: ignore[no-untyped-call]

            given += k if await parts[dest]._ado(give) else 0
            await part._ado(forget)
        moved += taken
        if moved >= want:
            break
    return given


def _forget(client: SyncClient[bytes], part: RedisStore, token: str) -> Any:
    return client.execute_command("HDEL", part.keys.quota_out, token)


__all__ = ["NEVER_GIVEN_MS", "QUOTA_GIVEN_MS", "atransfer", "share_spec", "transfer"]

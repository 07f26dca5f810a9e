"""The Redis store's system checks: `mailqueue.W001` when its server may evict queue keys, `mailqueue.E030` when
items are left in partitions a Cluster queue's `partitions` no longer reaches (which also stops a worker's start)."""

from __future__ import annotations

import builtins
import functools
from typing import TYPE_CHECKING

from django.core import checks
from django.core.checks import CheckMessage

from ..core.errors import QueueError
from . import configured_store_class

if TYPE_CHECKING:
    from .redis import RedisStore

HINT = (
    "Run the queue's Redis with maxmemory-policy noeviction (redis.conf, or CONFIG SET maxmemory-policy "
    "noeviction), so that a full Redis refuses new mail instead of evicting queued items and messages; "
    "see the Redis store's documentation."
)


def maxmemory_policy_warnings() -> list[CheckMessage]:
    """W001 for the configured store when it is a RedisStore whose server's policy is not `noeviction`.

    Connects to Redis (briefly, with the store's own settings); any failure is
    reported as the warning's text, never raised.
    """
    found = configured_store_class(_redis_store)
    if found is None:
        return []
    settings, cls = found
    try:
        store = cls(settings.store.options, max_items=settings.max_items)
    except QueueError:
        return []
    try:
        policy = store.maxmemory_policy()
    except QueueError as exc:
        return [
            checks.Warning(f"could not read the Redis store's maxmemory-policy: {exc}", hint=HINT, id="mailqueue.W001")
        ]
    finally:
        store.close()
    if policy is None:
        return [
            checks.Warning(
                f"could not read the maxmemory-policy of the Redis store's server ({store.place}): "
                "its user may not run CONFIG GET",
                hint="CONFIG is not permitted for the store's ACL user (as the documented ACL line has it); check "
                "by hand that the server runs with maxmemory-policy noeviction. " + HINT,
                id="mailqueue.W001",
            )
        ]
    if policy != "noeviction":
        return [
            checks.Warning(
                f"the Redis store's server ({store.place}) runs with maxmemory-policy {policy!r}: "
                "when it is full it evicts keys, and queued items or their messages are lost",
                hint=HINT,
                id="mailqueue.W001",
            )
        ]
    return []


@functools.lru_cache(maxsize=8)
def _every_layout(key_prefix: str) -> tuple[tuple[str, int, int], ...]:
    """(key prefix, partition, count) of every partition but 0 of every `partitions` count (~2,000 tags)."""
    from .redis_connection import MOST_PARTITIONS  # here, not above: these checks run where redis-py is not installed
    from .redis_layout import every_partition_tag, tagged_prefix

    tags = every_partition_tag(key_prefix, MOST_PARTITIONS)
    return tuple(
        (tagged_prefix(key_prefix, tags[(partition, count)]), partition, count)
        for count in range(2, MOST_PARTITIONS + 1)
        for partition in range(1, count)
    )


#: A stranded partition: its number and every `partitions` count that has its tag (a tag may be several counts').
Where = tuple[int, tuple[int, ...]]


def other_layouts(key_prefix: str, partitions: int) -> dict[str, Where]:
    """The items key of every partition that another `partitions` count has and this one does not reach, with the
    partition and the counts that have it: a partition's hash tag depends on the count (docs/redis.md)."""
    from .redis_layout import Keys, layout_prefix

    reached = {layout_prefix(key_prefix, cluster=True, partition=p, partitions=partitions) for p in range(partitions)}
    found: dict[str, Where] = {}
    for prefix, partition, count in _every_layout(key_prefix):
        if prefix not in reached:
            key = Keys(prefix).items
            _, counts = found.get(key, (partition, ()))
            found[key] = (partition, (*counts, count))
    return found


def stranded_partitions(store: RedisStore) -> dict[Where, int]:
    """The items held by partitions the store does not reach, by (partition, the counts that have it); nothing
    off a Cluster. One pipeline of `ZCARD`s a primary."""
    if not store.cluster:
        return {}
    layouts = other_layouts(store.key_prefix, len(getattr(store, "parts", [store])))
    counts = store._clients.cluster_counts(builtins.list(layouts))
    return {where: n for where, n in zip(layouts.values(), counts, strict=True) if n}


async def astranded_partitions(store: RedisStore) -> dict[Where, int]:
    """`stranded_partitions` in the running loop, on the asyncio cluster client the store's calls use."""
    if not store.cluster:
        return {}
    layouts = other_layouts(store.key_prefix, len(getattr(store, "parts", [store])))
    counts = await store._clients.acluster_counts(builtins.list(layouts))
    return {where: n for where, n in zip(layouts.values(), counts, strict=True) if n}


def stranded_errors() -> list[CheckMessage]:
    """E030 for the configured store when it is a Cluster queue with items in partitions it does not reach."""
    found = configured_store_class(_redis_store)
    if found is None:
        return []
    settings, cls = found
    if not settings.store.options.get("cluster"):
        return []
    try:
        store = cls(settings.store.options, max_items=settings.max_items)
    except QueueError:
        return []
    try:
        stranded = stranded_partitions(store)
    except QueueError:
        return []  # Redis out of reach: W001 says so
    finally:
        store.close()
    if not stranded:
        return []
    return [checks.Error(stranded_text(store, stranded), hint=STRANDED_HINT, id="mailqueue.E030")]


#: What E030 and a refused worker tell to do.
STRANDED_HINT = (
    "Set 'partitions' back to the count named, run the workers until `manage.py mailqueue_status` shows the queue "
    'empty, then change it; see docs/redis.md, "Partitions".'
)


def stranded_text(store: RedisStore, stranded: dict[Where, int]) -> str:
    """What E030 says of `stranded_partitions(store)`: each partition, the counts that have it, and its items (no
    URL, no credentials): `partition 1 of 2 or 3: 4 items`."""
    held = ", ".join(
        f"partition {p} of {' or '.join(map(str, counts))}: {count} items"
        for (p, counts), count in sorted(stranded.items())
    )
    return (
        f"the Redis store's queue holds items in partitions that 'partitions' "
        f"{len(getattr(store, 'parts', [store]))} does not reach ({held}): they would never be delivered"
    )


async def worker_refusal(store: object) -> str | None:
    """Why a worker must not start on `store`: a Cluster queue with items in partitions it does not reach (E030's
    reading, one pipeline a primary, in the worker's event loop on the cluster client its claims use); None
    otherwise, and when Redis cannot be reached (the worker waits for it)."""
    if not getattr(store, "cluster", False):
        return None
    from .redis import RedisStore

    if not isinstance(store, RedisStore):
        return None
    try:
        stranded = await astranded_partitions(store)
    except QueueError:
        return None
    if not stranded:
        return None
    return f"{stranded_text(store, stranded)}. {STRANDED_HINT}"


def _redis_store() -> type[RedisStore]:
    from .redis import RedisStore

    return RedisStore

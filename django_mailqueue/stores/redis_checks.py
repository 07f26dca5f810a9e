"""The Redis store's system check: `mailqueue.W001` when its server may evict queue keys."""

from __future__ import annotations

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


def _redis_store() -> type[RedisStore]:
    from .redis import RedisStore

    return RedisStore

"""The claimed batch: what `QueueStore.claim_batch` answers — the items claimed, their pending recipients on the
suppression list and their messages — and the default's steps, the store's `claim`, `suppressed` and
`read_messages` one after the other (docs/architecture.md, "The claim, in one store call")."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from ..core.errors import QueueError
from ..core.items import QueueItem, Suppression
from ..suppression import suppression_key

if TYPE_CHECKING:
    from .base import QueueStore


@dataclass
class ClaimedBatch:
    """The items a `claim_batch` leased, in claim order, with what the worker reads for them before it delivers.

    `listed` and `messages` are what their reads found; each read that failed leaves its part empty and says why
    in its error (the claim itself stands: the items are leased)."""

    items: list[QueueItem] = field(default_factory=list)
    #: per claimed item (every one a key when the look-up was asked and worked), its pending recipients on the
    #: suppression list: address as the item holds it -> entry
    listed: dict[uuid.UUID, dict[str, Suppression]] = field(default_factory=dict)
    #: the suppression look-up's error: nothing is known of the list
    listed_error: QueueError | None = None
    #: the messages of the items of at most `read_up_to` bytes, by id (an item whose message is lost: left out)
    messages: dict[uuid.UUID, bytes] = field(default_factory=dict)
    #: the messages' read's error: none was read
    messages_error: QueueError | None = None


def pending_keys(items: Sequence[QueueItem]) -> dict[str, str]:
    """The items' pending recipients' addresses -> their keys on the suppression list (`suppression_key`)."""
    return {r.address: suppression_key(r.address) for item in items for r in item.pending}


def listed_by_item(
    items: Sequence[QueueItem], keys: dict[str, str], found: dict[str, Suppression]
) -> dict[uuid.UUID, dict[str, Suppression]]:
    """Each item's pending recipients whose key (`keys`) is among the entries `found`."""
    if not found:
        return {item.id: {} for item in items}
    return {
        item.id: {r.address: found[keys[r.address]] for r in item.pending if keys[r.address] in found} for item in items
    }


def threaded_twins(store: QueueStore) -> bool:
    """Whether the store's `aclaim`, `asuppressed` and `aread_messages` are `QueueStore`'s, each its synchronous
    method in a thread: `claim_batch` in one thread then does what they would."""
    from .base import QueueStore

    kind = type(store)
    return all(getattr(kind, name) is getattr(QueueStore, name) for name in ("aclaim", "asuppressed", "aread_messages"))


def small_ids(items: Sequence[QueueItem], read_up_to: int) -> list[uuid.UUID]:
    return [item.id for item in items if item.size <= read_up_to]


def compose(
    store: QueueStore,
    *,
    owner: str,
    now: datetime,
    lease_expires: datetime,
    queues: Sequence[str] | None,
    limit: int,
    suppressed_since: datetime | None,
    read_up_to: int,
) -> ClaimedBatch:
    """`claim_batch` from `claim`, `suppressed` and `read_messages`, in the calling thread."""
    batch = ClaimedBatch(store.claim(owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit))
    if not batch.items:
        return batch
    if suppressed_since is not None:
        keys = pending_keys(batch.items)
        try:
            found = store.suppressed(sorted(set(keys.values())), since=suppressed_since) if keys else {}
        except QueueError as exc:
            batch.listed_error = exc
        else:
            batch.listed = listed_by_item(batch.items, keys, found)
    small = small_ids(batch.items, read_up_to)
    if small:
        try:
            batch.messages = store.read_messages(small)
        except QueueError as exc:
            batch.messages_error = exc
    return batch


async def acompose(
    store: QueueStore,
    *,
    owner: str,
    now: datetime,
    lease_expires: datetime,
    queues: Sequence[str] | None,
    limit: int,
    suppressed_since: datetime | None,
    read_up_to: int,
) -> ClaimedBatch:
    """`compose` through the async twins `aclaim`, `asuppressed` and `aread_messages`: a store's own, native ones."""
    claimed = await store.aclaim(owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit)
    batch = ClaimedBatch(claimed)
    if not claimed:
        return batch
    if suppressed_since is not None:
        keys = pending_keys(claimed)
        try:
            found = await store.asuppressed(sorted(set(keys.values())), since=suppressed_since) if keys else {}
        except QueueError as exc:
            batch.listed_error = exc
        else:
            batch.listed = listed_by_item(claimed, keys, found)
    small = small_ids(claimed, read_up_to)
    if small:
        try:
            batch.messages = await store.aread_messages(small)
        except QueueError as exc:
            batch.messages_error = exc
    return batch

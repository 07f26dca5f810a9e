"""`QueueStore.claim_batch`'s default: a store's `claim`, `suppressed` and `read_messages` (their async twins where
the store has its own), one thread for the three where it has not; a read that fails leaves the claim standing."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest

from django_mailqueue.core.errors import Code, QueueError
from django_mailqueue.core.items import QueueItem, Suppression
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.testing.contract import NO, T0, at, new_item

GONE = Suppression("gone@x.org", NO, T0)


def filled(store: MemoryStore) -> MemoryStore:
    store.suppress([GONE])
    store.add_many([new_item(["gone@X.org", "b@x.org"]), new_item(["c@x.org"])], now=T0)
    return store


class NativeTwins(MemoryStore):
    """A store with async twins of its own for the claim, the look-up and the read: the default calls them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def aclaim(self, **kwargs: Any) -> list[QueueItem]:
        self.calls.append("aclaim")
        return self.claim(**kwargs)

    async def asuppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        self.calls.append("asuppressed")
        return self.suppressed(addresses, since=since)

    async def aread_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        self.calls.append("aread_messages")
        return self.read_messages(item_ids)


class CountedThreads(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    async def _in_thread(self, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.threads.append(func.__name__)
        return await super()._in_thread(func, *args, **kwargs)


class Failing(MemoryStore):
    """The look-up, or the messages' read, out of reach."""

    def __init__(self, failing: str) -> None:
        super().__init__()
        self.failing = failing

    def suppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        if self.failing == "suppressed":
            raise QueueError(Code.STORE_UNAVAILABLE, "out of reach (injected)")
        return super().suppressed(addresses, since=since)

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        if self.failing == "read_messages":
            raise QueueError(Code.STORE_UNAVAILABLE, "out of reach (injected)")
        return super().read_messages(item_ids)


ASK: dict[str, Any] = {"owner": "w", "now": T0, "lease_expires": at(60), "limit": 5, "suppressed_since": T0}


async def test_native_async_twins_are_called_one_after_the_other() -> None:
    store = filled(NativeTwins())
    batch = await store.aclaim_batch(**ASK, read_up_to=1000)
    assert store.calls == ["aclaim", "asuppressed", "aread_messages"]
    first, second = batch.items
    assert batch.listed == {first.id: {"gone@X.org": GONE}, second.id: {}}
    assert set(batch.messages) == {first.id, second.id}


async def test_the_default_twins_make_one_thread_hand_off() -> None:
    store = filled(CountedThreads())
    batch = await store.aclaim_batch(**ASK, read_up_to=1000)
    assert store.threads == ["claim_batch"] and len(batch.items) == 2 and len(batch.messages) == 2


@pytest.mark.parametrize("twin", [False, True], ids=["sync", "async"])
async def test_a_failed_look_up_leaves_the_claim_and_the_read(twin: bool) -> None:
    store = filled(Failing("suppressed"))
    batch = await store.aclaim_batch(**ASK, read_up_to=1000) if twin else store.claim_batch(**ASK, read_up_to=1000)
    assert len(batch.items) == 2 and all(store.get(i.id) == i for i in batch.items)  # leased
    assert batch.listed == {} and batch.listed_error is not None
    assert batch.listed_error.code == Code.STORE_UNAVAILABLE
    assert len(batch.messages) == 2 and batch.messages_error is None


@pytest.mark.parametrize("twin", [False, True], ids=["sync", "async"])
async def test_a_failed_read_leaves_the_claim_and_the_look_up(twin: bool) -> None:
    store = filled(Failing("read_messages"))
    batch = await store.aclaim_batch(**ASK, read_up_to=1000) if twin else store.claim_batch(**ASK, read_up_to=1000)
    assert len(batch.items) == 2 and batch.listed_error is None and len(batch.listed) == 2
    assert batch.messages == {} and batch.messages_error is not None

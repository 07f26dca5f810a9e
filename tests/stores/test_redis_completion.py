"""The Redis store's completion of an item it claimed: one round trip, made from the item as claimed, with
complete.lua checking the owner and revision (docs/redis.md, "The scripts")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_mailqueue.core.errors import Code
from django_mailqueue.core.items import CompleteRequest, Completion, RecipientState
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, at, new_item, outcome

pytestmark = pytest.mark.redis

Maker = Callable[..., RedisStore]

DONE = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
LATER = Completion((outcome("rcpt@example.org", RecipientState.PENDING),), next_attempt=at(300))


def counted(store: RedisStore, monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """How many times the store went to Redis through `name` (`_do` or `_ado`: one round trip, retried apart)."""
    calls = [0]
    real = getattr(store, name)

    def call(*args: Any) -> Any:
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(store, name, call)
    return calls


async def test_a_batch_of_completions_of_claimed_items_is_one_round_trip(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make()
    try:
        for _ in range(3):
            await store.aadd(new_item(), now=T0)
        claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=3)
        calls = counted(store, monkeypatch, "_ado")
        answers = await store.acomplete_many([CompleteRequest(i.id, "w", i.revision, DONE) for i in claimed])
        assert calls == [1] and [a.done for a in answers] == [True, True, True]  # type: ignore[union-attr]
        assert await store.acount() == 0
    finally:
        await store.aclose()


def test_a_completion_of_a_claimed_item_is_one_round_trip(make: Maker, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make()
    store.add(new_item(), now=T0)
    (item,) = store.claim(owner="w", now=T0, lease_expires=at(60))
    calls = counted(store, monkeypatch, "_do")
    after = store.complete(item.id, owner="w", revision=item.revision, completion=LATER)
    assert calls == [1] and after is not None
    assert store.get(item.id) == after  # the item as the script left it, computed from the claimed one


async def test_a_claimed_item_another_worker_took_meanwhile_is_lease_lost(make: Maker) -> None:
    """The first worker's claimed item is stale: complete.lua, not a read, finds the other owner."""
    store, rival = make(), make()
    try:
        await store.aadd(new_item(), now=T0)
        (mine,) = await store.aclaim(owner="a", now=T0, lease_expires=at(10))
        (theirs,) = await rival.aclaim(owner="b", now=at(20), lease_expires=at(80))
        (answer,) = await store.acomplete_many([CompleteRequest(mine.id, "a", mine.revision, DONE)])
        assert isinstance(answer, QueueError) and answer.code == Code.LEASE_LOST
        with pytest.raises(QueueError) as lost:
            store.complete(mine.id, owner="a", revision=mine.revision, completion=DONE)
        assert lost.value.code == Code.LEASE_LOST
        assert (await rival.aget(theirs.id)) == theirs  # nothing written by the stale completions
        assert await rival.acomplete(theirs.id, owner="b", revision=theirs.revision, completion=DONE) is not None
    finally:
        await store.aclose()
        await rival.aclose()


async def test_a_claimed_item_cancelled_meanwhile_is_gone(make: Maker) -> None:
    store, admin = make(), make()
    try:
        await store.aadd(new_item(), now=T0)
        (mine,) = await store.aclaim(owner="a", now=T0, lease_expires=at(60))
        assert await admin.acancel(mine.id) is not None
        (answer,) = await store.acomplete_many([CompleteRequest(mine.id, "a", mine.revision, LATER)])
        assert answer is None and await store.acount() == 0
    finally:
        await store.aclose()
        await admin.aclose()

"""The Redis store's calls that read the keys a script will touch first, then run it with them declared (docs/redis.md,
"The scripts"): a claim's candidates — what another worker takes or what is dropped in between is skipped, and the
claim reads again until it has its limit or nothing more is due — and a suspension's forgotten records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from django_mailqueue.core.items import Reply
from django_mailqueue.core.shaping import FORGET_AFTER
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, at, new_item
from tests.stores.conftest import Maker

pytestmark = pytest.mark.redis

LANES = pytest.mark.parametrize("queues", [None, ["default"]], ids=["all", "lanes"])


def between_read_and_write(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch, meddle: Callable[[], None], step: str = "_call"
) -> None:
    """`meddle` runs once, after the store's first read and before its first script (`step` makes its call)."""
    real = getattr(store, step)
    done: list[bool] = []

    def call(*args: Any) -> Any:
        if not done:
            done.append(True)
            meddle()
        return real(*args)

    monkeypatch.setattr(store, step, call)


@LANES
def test_candidates_another_worker_took_are_skipped_and_the_claim_reads_again(
    make: Maker, monkeypatch: pytest.MonkeyPatch, queues: list[str] | None
) -> None:
    store, rival = make(), make()
    added = store.add_many([new_item(not_before=at(i)) for i in range(10)], now=T0)
    taken: list[Any] = []
    between_read_and_write(
        store, monkeypatch, lambda: taken.extend(rival.claim(owner="b", now=at(20), lease_expires=at(80), limit=3))
    )
    claimed = store.claim(owner="a", now=at(20), lease_expires=at(80), queues=queues, limit=5)
    assert [i.id for i in taken] == [i.id for i in added[:3]]
    assert [i.id for i in claimed] == [i.id for i in added[3:8]]
    assert all(i.owner == "a" for i in claimed)


@LANES
def test_an_item_deleted_between_read_and_write_is_dropped_and_the_next_taken(
    make: Maker, monkeypatch: pytest.MonkeyPatch, queues: list[str] | None
) -> None:
    store = make()
    first, second = store.add_many([new_item(not_before=at(1)), new_item(not_before=at(2))], now=T0)
    between_read_and_write(store, monkeypatch, lambda: store.cancel(first.id))
    claimed = store.claim(owner="a", now=at(20), lease_expires=at(80), queues=queues, limit=1)
    assert [i.id for i in claimed] == [second.id]
    assert store.count() == 1


def test_an_expired_lease_another_worker_took_first_is_skipped(make: Maker, monkeypatch: pytest.MonkeyPatch) -> None:
    store, rival = make(), make()
    stale, fresh = store.add_many([new_item(not_before=at(1)), new_item(not_before=at(2))], now=T0)
    store.claim(owner="gone", now=at(1), lease_expires=at(10), limit=1)
    taken: list[Any] = []
    between_read_and_write(
        store, monkeypatch, lambda: taken.extend(rival.claim(owner="b", now=at(20), lease_expires=at(80), limit=1))
    )
    claimed = store.claim(owner="a", now=at(20), lease_expires=at(80), limit=2)
    assert [(i.id, i.reclaims) for i in taken] == [(stale.id, 1)]
    assert [i.id for i in claimed] == [fresh.id]


def test_async_candidates_another_worker_took_are_skipped_and_the_claim_reads_again(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    added = store.add_many([new_item(not_before=at(i)) for i in range(6)], now=T0)
    taken: list[Any] = []
    between_read_and_write(
        store, monkeypatch, lambda: taken.extend(rival.claim(owner="b", now=at(20), lease_expires=at(80), limit=2))
    )

    async def claim() -> list[Any]:
        try:
            return await store.aclaim(owner="a", now=at(20), lease_expires=at(80), limit=3)
        finally:
            await store.aclose()

    claimed = asyncio.run(claim())
    assert [i.id for i in claimed] == [i.id for i in added[2:5]]


def test_a_claim_of_every_queue_finds_a_queue_first_seen_since_its_last_claim(make: Maker) -> None:
    store = make()
    store.add(new_item(), now=T0)
    assert len(store.claim(owner="a", now=at(1), lease_expires=at(60), limit=5)) == 1
    late = store.add(new_item(queue="late"), now=T0)
    assert [i.id for i in store.claim(owner="a", now=at(1), lease_expires=at(60), limit=5)] == [late.id]


THROTTLED = Reply(421, "4.7.0", "slow down")


def test_a_forgotten_suspension_renewed_after_the_read_is_kept(make: Maker, monkeypatch: pytest.MonkeyPatch) -> None:
    store, rival = make(), make()
    store.suspend("a.example", until=at(60), reply=THROTTLED, now=T0)
    later = at(60) + FORGET_AFTER + timedelta(seconds=1)
    renewed: list[Any] = []
    between_read_and_write(
        store,
        monkeypatch,
        lambda: renewed.append(
            rival.suspend("a.example", until=later + timedelta(hours=1), reply=THROTTLED, now=later)
        ),
        step="_suspend",
    )
    store.suspend("b.example", until=later + timedelta(minutes=5), reply=THROTTLED, now=later)
    assert [s.destination for s in store.suspensions(now=later)] == ["a.example", "b.example"]
    assert renewed[0].strikes == 1  # forgotten: a new episode


def test_a_forgotten_suspension_is_dropped_by_the_next(make: Maker) -> None:
    store = make()
    store.suspend("a.example", until=at(60), reply=THROTTLED, now=T0)
    later = at(60) + FORGET_AFTER + timedelta(seconds=1)
    store.suspend("b.example", until=later + timedelta(minutes=5), reply=THROTTLED, now=later)
    assert [s.destination for s in store.suspensions(now=T0, destinations=["a.example", "b.example"])] == ["b.example"]

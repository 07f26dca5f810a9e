"""The Redis store moves a suspended destination's items a slice at a time: many small script calls, each
bounded, and together exactly what one unbounded move would do (the contract suite's cases, at scale)."""

from __future__ import annotations

import pytest

from django_mailqueue.stores import redis_shaping
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, at, new_item
from tests.stores.conftest import Maker

pytestmark = pytest.mark.redis


@pytest.fixture
def store(make: Maker) -> RedisStore:
    return make()


def fill(store: RedisStore) -> tuple[set[str], set[str]]:
    """9 items at x.example leased to a live worker (they stay), then 60 at x.example or Z.example, every third
    with a recipient at y.example too (they stay). The ids that must move and those that must stay."""
    for n in range(9):
        store.add(new_item([f"held{n}@x.example"]), now=T0)
    stay = {item.id for item in store.claim(owner="w", now=T0, lease_expires=at(600), limit=9)}
    move = set()
    for n in range(60):
        domain = "x.example" if n % 2 else "Z.example"
        rcpts = [f"r{n}@{domain}", f"s{n}@y.example"] if n % 3 == 0 else [f"r{n}@{domain}"]
        item = store.add(new_item(rcpts), now=T0)
        (stay if n % 3 == 0 else move).add(item.id)
    assert len(stay) == 29 and len(move) == 40
    return move, stay


@pytest.mark.parametrize("slice_", [1, 7, 1000])
@pytest.mark.parametrize("in_async", [False, True])
async def test_a_move_in_slices_moves_exactly_what_one_would(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch, slice_: int, in_async: bool
) -> None:
    monkeypatch.setattr(redis_shaping, "DEFER_SLICE", slice_)
    move, stay = fill(store)
    domains, until = ["x.example", "z.example"], at(900)
    if in_async:
        moved = await store.adefer_destination(domains, until=until, now=at(5))
        await store.aclose()
    else:
        moved = store.defer_destination(domains, until=until, now=at(5))
    assert moved == len(move)
    for item_id in move | stay:
        item = store.get(item_id)
        assert item is not None
        assert item.next_attempt == (until if item_id in move else T0), item.recipients
    # a second pass finds nothing left to move
    assert store.defer_destination(domains, until=until, now=at(5)) == 0

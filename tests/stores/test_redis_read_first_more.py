"""The Redis store's other calls that read first the keys a script will touch (docs/redis.md, "The scripts"): what
changes between the read and the script is checked again by the script: kept failed items sent again or pruned, a
destination's items deferred."""

from __future__ import annotations

from typing import Any

import pytest

from django_mailqueue.core.items import Completion, ItemQuery, ItemState, QueueItem, RecipientState
from django_mailqueue.stores import redis_scripts as scripts
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, at, new_item
from django_mailqueue.testing.contract.support import NO, outcome
from tests.stores.conftest import Maker
from tests.stores.test_redis_read_first import between_read_and_write

pytestmark = pytest.mark.redis


def after_read(store: RedisStore, monkeypatch: pytest.MonkeyPatch, step: str, meddle: Any) -> None:
    """`meddle` runs once, right after the store's read `step` returned (before the script it read for)."""
    real = getattr(store, step)
    done: list[bool] = []

    def read(*args: Any) -> Any:
        found = real(*args)
        if not done:
            done.append(True)
            meddle()
        return found

    monkeypatch.setattr(store, step, read)


def kept(store: RedisStore, when: float, address: str = "a@x.org") -> QueueItem:
    """An item added at T0 whose one recipient failed at `when`, kept (`keep_failed`)."""
    added = store.add(new_item([address]), now=T0)
    (item,) = store.claim(owner="w", now=at(when), lease_expires=at(when + 60), limit=1)
    assert item.id == added.id
    completion = Completion(
        (outcome(address, RecipientState.FAILED, NO),), next_attempt=at(when + 300), now=at(when), keep_failed=True
    )
    recorded = store.complete(item.id, owner="w", revision=item.revision, completion=completion)
    assert recorded is not None and recorded.kept
    return recorded


def test_a_kept_item_sent_again_between_a_prunes_read_and_script_stays(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    first, second = kept(store, 10), kept(store, 20, "b@y.org")
    after_read(store, monkeypatch, "_prunable", lambda: rival.send_again([first.id], now=at(30)))
    assert store.prune_failed(before=at(25)) == 1
    assert store.get(second.id) is None
    again = store.get(first.id)
    assert again is not None and not again.kept and store.read_message(first.id) is not None
    assert [i.id for i in store.claim(owner="w", now=at(40), lease_expires=at(100), limit=5)] == [first.id]


def test_a_kept_item_sent_again_by_another_between_the_read_and_the_script_is_sent_once(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    item = kept(store, 10)
    answers: list[Any] = []
    after_read(store, monkeypatch, "_sent_again_read", lambda: answers.extend(rival.send_again([item.id], now=at(30))))
    assert store.send_again([item.id], now=at(31)) == [None]
    assert answers[0] is not None and answers[0].revision == item.revision + 1
    found = store.get(item.id)
    assert found is not None and found.revision == item.revision + 1 and found.created == at(30)


def test_a_candidate_claimed_between_a_deferrals_read_and_script_stays_leased(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    first, second = store.add_many([new_item(["a@d7.test"]), new_item(["b@d7.test"])], now=T0)
    taken: list[Any] = []
    between_read_and_write(
        store,
        monkeypatch,
        lambda: taken.extend(rival.claim(owner="b", now=at(1), lease_expires=at(60), limit=1)),
        step="_defer",
    )
    assert store.defer_destination(["d7.test"], until=at(300), now=at(1)) == 1
    assert [i.id for i in taken] == [first.id]
    held, moved = store.get(first.id), store.get(second.id)
    assert held is not None and held.owner == "b" and held.next_attempt == T0
    assert moved is not None and moved.next_attempt == at(300)


def test_a_candidate_cancelled_between_a_deferrals_read_and_script_stays_gone(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    first, second = store.add_many([new_item(["a@d7.test"]), new_item(["b@d7.test"])], now=T0)
    between_read_and_write(store, monkeypatch, lambda: rival.cancel(first.id), step="_defer")
    assert store.defer_destination(["d7.test"], until=at(300), now=at(1)) == 1
    assert store.get(first.id) is None and store.count() == 1
    assert [i.id for i in store.claim(owner="a", now=at(400), lease_expires=at(460), limit=5)] == [second.id]


def after_first_call(monkeypatch: pytest.MonkeyPatch, script: scripts.LuaScript, meddle: Any) -> list[Any]:
    """`meddle` runs once, right after the script's first call (one that asks for items); the replies, recorded."""
    real = script.run
    replies: list[Any] = []

    def run(client: Any, keys: Any, args: Any, wait: Any = None) -> Any:
        reply = real(client, keys, args, wait)
        replies.append(reply)
        if len(replies) == 1:
            meddle()
        return reply

    monkeypatch.setattr(script, "run", run)
    return replies


def test_a_lease_taken_after_the_overview_asked_for_the_leases_is_asked_for_and_counted(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    store.add_many([new_item() for _ in range(3)], now=T0)
    store.claim(owner="a", now=at(1), lease_expires=at(60), limit=1)
    replies = after_first_call(
        monkeypatch, scripts.OVERVIEW, lambda: rival.claim(owner="b", now=at(1), lease_expires=at(60), limit=1)
    )
    counts = store.count_by_state(ItemQuery(now=at(2)), limit=100)
    assert counts[ItemState.LEASED] == 2 and counts[ItemState.DUE] == 1
    assert len(replies) == 3  # asked for the first lease, then for the one taken since, then counted


def test_items_claimed_or_cancelled_after_select_asked_for_them_are_read_as_they_are_now(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    added = store.add_many([new_item() for _ in range(4)], now=T0)

    def meddle() -> None:
        rival.claim(owner="b", now=at(1), lease_expires=at(60), limit=1)
        rival.cancel(added[1].id)

    replies = after_first_call(monkeypatch, scripts.SELECT, meddle)
    assert [i.id for i in store.list(ItemQuery(state=ItemState.DUE, now=at(2)))] == [added[2].id, added[3].id]
    assert len(replies) == 2


def test_a_lease_taken_after_select_asked_for_the_leases_is_asked_for_and_counted(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    store.add_many([new_item() for _ in range(3)], now=T0)
    store.claim(owner="a", now=at(1), lease_expires=at(60), limit=1)
    after_first_call(
        monkeypatch, scripts.SELECT, lambda: rival.claim(owner="b", now=at(1), lease_expires=at(60), limit=1)
    )
    assert store.count(ItemQuery(state=ItemState.DUE, now=at(2))) == 1


def test_an_item_added_inside_the_part_a_select_asked_for_is_asked_for_in_turn(
    make: Maker, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = make(), make()
    added = store.add_many([new_item(not_before=at(i + 1)) for i in range(3)], now=T0)
    late: list[Any] = []
    replies = after_first_call(
        monkeypatch, scripts.SELECT, lambda: late.append(rival.add(new_item(not_before=at(2.5)), now=T0))
    )
    listed = [i.id for i in store.list(ItemQuery(queue="default"))]
    assert listed == [added[0].id, added[1].id, late[0].id, added[2].id]
    assert len(replies) == 3

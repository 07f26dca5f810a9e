"""The ORM store on SQLite and its one write lock: its own transactions wait for the lock within
`lock_wait` instead of failing after the connection's busy timeout; outcomes are decided before the lock."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DatabaseError, connections, transaction

from django_mailqueue.core.items import CompleteRequest, Completion, QueueItem, RecipientState
from django_mailqueue.exceptions import QueueError
from django_mailqueue.history import History, HistoryEntry
from django_mailqueue.models import DeliveryRecord
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.stores.orm.rows import ItemRow
from django_mailqueue.stores.orm.sqlite import SqliteDialect
from django_mailqueue.stores.orm.sqlite_wait import is_busy
from django_mailqueue.testing.contract import OK, T0, at, new_item, outcome

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def write_lock_held(seconds: float) -> Iterator[None]:
    """Another connection (as another process would) holds SQLite's write lock for `seconds`."""
    other = sqlite3.connect(
        connections["default"].settings_dict["NAME"], isolation_level=None, timeout=30, check_same_thread=False
    )
    other.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(seconds, other.execute, ["COMMIT"])
    timer.start()
    try:
        yield
    finally:
        timer.join()
        other.close()


def busy_timeout_ms() -> int:
    conn = connections["default"]
    conn.ensure_connection()
    return int(conn.connection.execute("PRAGMA busy_timeout").fetchone()[0])


def test_an_add_waits_for_a_lock_held_past_the_busy_timeout() -> None:
    store = OrmStore({"database": "default", "lock_wait": 30})
    configured = busy_timeout_ms()
    connections["default"].connection.execute("PRAGMA busy_timeout = 300")  # as if Django's timeout were 0.3 s
    try:
        with write_lock_held(1.5):
            began = time.monotonic()
            added = store.add(new_item(), now=T0)
            waited = time.monotonic() - began
        assert store.get(added.id) is not None
        assert waited >= 1.0  # it waited past its connection's 0.3 s, and got the lock once it was free
        assert busy_timeout_ms() == 300  # the connection's own timeout is put back
    finally:
        connections["default"].connection.execute(f"PRAGMA busy_timeout = {configured}")


def test_an_add_gives_up_after_lock_wait() -> None:
    store = OrmStore({"database": "default", "lock_wait": 0.5})
    configured = busy_timeout_ms()
    with write_lock_held(2.0):
        began = time.monotonic()
        with pytest.raises(QueueError) as raised:
            store.add(new_item(), now=T0)
        waited = time.monotonic() - began
    assert raised.value.code == "STORE_UNAVAILABLE" and "database is locked" in raised.value.message
    assert is_busy(raised.value)
    assert 0.4 <= waited < 1.5  # the bound, not the connection's 20 s timeout
    assert busy_timeout_ms() == configured
    assert store.count() == 0


def test_an_add_inside_the_callers_transaction_is_not_tried_again() -> None:
    """The caller's transaction is the caller's: the store cannot roll it back and try again, so the
    connection's own timeout applies (here 0.3 s, with the lock held for longer)."""
    store = OrmStore({"database": "default", "lock_wait": 30})
    configured = busy_timeout_ms()
    connections["default"].connection.execute("PRAGMA busy_timeout = 300")
    try:
        with write_lock_held(2.0), pytest.raises(QueueError) as raised, transaction.atomic():
            store.add(new_item(), now=T0)
        assert is_busy(raised.value)
    finally:
        connections["default"].connection.execute(f"PRAGMA busy_timeout = {configured}")


def test_a_worker_write_waits_for_the_lock_too() -> None:
    store = OrmStore({"database": "default", "lock_wait": 30})
    item = store.add(new_item(), now=T0)
    configured = busy_timeout_ms()
    connections["default"].connection.execute("PRAGMA busy_timeout = 300")
    try:
        with write_lock_held(1.0):
            (claimed,) = store.claim(owner="w1", now=T0, lease_expires=at(60))
        with write_lock_held(1.0):
            done = store.complete(
                item.id,
                owner="w1",
                revision=claimed.revision,
                completion=Completion(
                    (outcome(claimed.recipients[0].address, RecipientState.DELIVERED, OK),), next_attempt=at(300)
                ),
            )
        assert done is not None and done.done and store.get(item.id) is None
        entry = HistoryEntry(
            item=claimed,
            outcome=outcome(claimed.recipients[0].address, RecipientState.DELIVERED, OK),
            attempt=1,
            recorded=T0,
        )
        with write_lock_held(1.0):
            History("default").record([entry])
        assert DeliveryRecord.objects.filter(item_id=item.id).count() == 1
    finally:
        connections["default"].connection.execute(f"PRAGMA busy_timeout = {configured}")


def test_a_database_error_other_than_the_lock_is_not_tried_again() -> None:
    store = OrmStore({"database": "default", "lock_wait": 30})
    added = store.add(new_item(), now=T0)
    duplicate = new_item(id=added.id)  # the same id twice: the database refuses it at once
    began = time.monotonic()
    with pytest.raises(QueueError) as raised:
        store.add(duplicate, now=T0)
    assert raised.value.code == "STORE_UNAVAILABLE" and not is_busy(raised.value)
    assert isinstance(raised.value.__cause__, DatabaseError)
    assert time.monotonic() - began < 1.0


class ChangingDialect(SqliteDialect):
    """`change()` runs inside the completion's transaction just before its rows are locked: what
    another worker or an operator could do between the early read and the lock."""

    change: Callable[[], object] | None = None

    def lock(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        self._change()
        return super().lock(item_ids)

    def lock_leases(self, item_ids: Sequence[uuid.UUID]) -> set[tuple[Any, ...]] | None:
        self._change()
        return super().lock_leases(item_ids)

    def _change(self) -> None:
        if self.connection.in_atomic_block and self.change is not None:
            change, self.change = self.change, None
            change()


class ChangedBeforeTheLock(OrmStore):
    dialect_class = ChangingDialect

    def __init__(self, change: Callable[[], object] | None) -> None:
        super().__init__({"database": "default"})
        assert isinstance(self.dialect, ChangingDialect)
        self.changing = self.dialect
        self.changing.change = change


def delivered(item: QueueItem) -> Completion:
    return Completion(
        tuple(outcome(r.address, RecipientState.DELIVERED, OK) for r in item.recipients), next_attempt=at(300)
    )


def test_outcomes_are_decided_again_when_an_item_changed_before_the_lock() -> None:
    taken_by_other = ChangedBeforeTheLock(None)
    first, second, third = taken_by_other.add_many([new_item(), new_item(), new_item()], now=T0)
    claimed = {i.id: i for i in taken_by_other.claim(owner="w1", now=T0, lease_expires=at(60), limit=3)}
    # Between the early read and the lock: the first item's lease is taken by another worker (its
    # lease expired), the second is cancelled by an operator.
    taken_by_other.changing.change = lambda: (
        taken_by_other.claim(owner="w2", now=at(120), lease_expires=at(180), limit=1),
        OrmStore({"database": "default"}).cancel(second.id),
    )
    answers = taken_by_other.complete_many(
        [
            CompleteRequest(item.id, "w1", claimed[item.id].revision, delivered(claimed[item.id]))
            for item in (first, second, third)
        ]
    )
    assert isinstance(answers[0], QueueError) and answers[0].code == "LEASE_LOST"
    assert answers[1] is None
    assert isinstance(answers[2], QueueItem) and answers[2].done
    still = taken_by_other.get(first.id)
    assert still is not None and still.owner == "w2"  # w1's outcome was not written over w2's lease
    assert taken_by_other.get(second.id) is None and taken_by_other.get(third.id) is None


def test_outcomes_decided_before_the_lock_are_written_when_nothing_changed() -> None:
    store = ChangedBeforeTheLock(lambda: None)
    item = store.add(new_item(["a@x.org", "b@x.org"]), now=T0)
    (claimed,) = store.claim(owner="w1", now=T0, lease_expires=at(60))
    completion = Completion((outcome("a@x.org", RecipientState.DELIVERED, OK),), next_attempt=at(300))
    (answer,) = store.complete_many([CompleteRequest(item.id, "w1", claimed.revision, completion)])
    assert isinstance(answer, QueueItem)
    kept = store.get(item.id)
    assert kept is not None and kept.owner is None and kept.attempts == 1
    assert [r.state for r in kept.recipients] == [RecipientState.DELIVERED, RecipientState.PENDING]

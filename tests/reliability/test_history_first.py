"""History before the outcome: a recorded outcome always has its history rows, committed, however slow
or out of reach the history's database is (docs/reliability.md, "History before the outcome")."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections
from django.db.models import F

from django_mailqueue import signals
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.errors import Code, QueueError
from django_mailqueue.core.items import CompleteRequest, NewItem, QueueItem
from django_mailqueue.history import History
from django_mailqueue.models import DeliveryRecord, QueuedItem
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.testing.fakes import REJECTED, ScriptedDeliverer
from django_mailqueue.worker import Worker
from tests.reliability.test_known_bugs import MESSAGE, CountsHistoryWhenRecording, run_until, settings

pytestmark = pytest.mark.django_db(transaction=True)


def hold_write_lock(path: str, locked: threading.Event, release: threading.Event, longest: float) -> None:
    """Hold SQLite's write lock on `path` (another process's long transaction) until `release`, or `longest` s."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(longest)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


async def test_a_slow_history_database_holds_the_outcome_back() -> None:
    """The soak's "no history record of the 550 failure": the history write waited at most LEASE / 4, then
    went on in the background while the outcome was recorded, so a worker killed then lost the rows."""
    store = CountsHistoryWhenRecording()
    deliverer = ScriptedDeliverer(script={"b@dest.test": [REJECTED]})
    store.add(NewItem("a@origin.test", ("b@dest.test", "c@dest.test"), MESSAGE), now=SystemClock().now())
    locked, path = threading.Event(), str(connections["default"].settings_dict["NAME"])
    # Held until the outcome is recorded — or, when the worker waits for the history as it must, 6 LEASEs.
    holder = threading.Thread(target=hold_write_lock, args=(path, locked, store.recording, 6.0))
    holder.start()
    try:
        assert locked.wait(5), "the write lock was never taken"
        worker = Worker(store=store, settings=settings(lease=1.0), deliverer=deliverer, history=History("default"))
        await run_until(worker, lambda: store.count() == 0, timeout=30)  # the failure, then its DSN delivered
    finally:
        store.recording.set()
        holder.join()

    # The item's two recipients, then its failure DSN's one: each outcome recorded after its rows.
    assert store.history_when_recorded == [2, 1], "an outcome was recorded before its history rows were committed"
    assert worker.stats.leases_lost == 0 and not worker.stats.errors, worker.stats


async def test_a_history_database_down_past_the_lease_delays_the_outcome_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The history's database refuses every write for longer than the lease while the store is up: the worker
    keeps the outcome, renews the lease, tells the outage once, and records the outcome (told once, the
    message delivered once) only after its history row is written."""
    original = History.record
    down_until = time.monotonic() + 3.0  # three LEASEs
    refused = [0]

    def refusing_record(self: History, *args: Any, **kwargs: Any) -> Any:
        if time.monotonic() < down_until:
            refused[0] += 1
            raise DatabaseError("server closed the connection unexpectedly (injected)")
        return original(self, *args, **kwargs)

    told: list[str] = []

    def receive(sender: Any, signal: Any = None, **kwargs: Any) -> None:
        told.append(kwargs["error"].code if "error" in kwargs else "delivered")

    monkeypatch.setattr(History, "record", refusing_record)
    store = CountsHistoryWhenRecording()
    deliverer = ScriptedDeliverer()
    item = store.add(NewItem("a@origin.test", ("b@dest.test",), MESSAGE), now=SystemClock().now())
    signals.error.connect(receive, weak=False, dispatch_uid="hf-down-error")
    signals.delivered.connect(receive, weak=False, dispatch_uid="hf-down-delivered")
    try:
        worker = Worker(store=store, settings=settings(lease=1.0), deliverer=deliverer, history=History("default"))
        await run_until(worker, lambda: store.get(item.id) is None, timeout=20)
    finally:
        signals.error.disconnect(dispatch_uid="hf-down-error")
        signals.delivered.disconnect(dispatch_uid="hf-down-delivered")

    rows = await sync_to_async(lambda: DeliveryRecord.objects.filter(item_id=item.id).count())()
    assert refused[0] > 1, "the outage never lasted"
    assert store.get(item.id) is None and store.history_when_recorded == [1], store.history_when_recorded
    assert rows == 1 and deliverer.deliveries_to("b@dest.test") == 1
    assert told == ["STORE_UNAVAILABLE", "delivered"], told
    assert worker.stats.leases_lost == 0, worker.stats


# --- the ORM store: the rows in the completion's own transaction ---------------------------------------------


class TakenMeanwhile(OrmStore):
    """An ORM store whose every item is taken by another worker just before its completion: LEASE_LOST."""

    def complete_many(self, requests: Sequence[CompleteRequest], **kwargs: Any) -> list[QueueItem | None | QueueError]:
        ids = [request.item_id for request in requests]
        QueuedItem.objects.using(self.alias).filter(id__in=ids).update(owner="other", revision=F("revision") + 1)
        return super().complete_many(requests, **kwargs)


class RefusesCompletions(OrmStore):
    """An ORM store whose completions and renewals fail (the database out of reach for them): the lease runs out."""

    def complete_many(self, requests: Sequence[CompleteRequest], **kwargs: Any) -> list[QueueItem | None | QueueError]:
        raise QueueError(Code.STORE_UNAVAILABLE, "the database refused the operation (injected)")

    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> list[uuid.UUID]:
        raise QueueError(Code.STORE_UNAVAILABLE, "the database refused the operation (injected)")


async def deliver(store: OrmStore, done: Callable[[Worker], Awaitable[bool]], recipients: tuple[str, ...]) -> Worker:
    deliverer = ScriptedDeliverer(script={"b@dest.test": [REJECTED]})
    await store.aadd(NewItem("a@origin.test", recipients, MESSAGE), now=SystemClock().now())
    worker = Worker(store=store, settings=settings(lease=1.0), deliverer=deliverer, history=History(store.alias))
    task = asyncio.create_task(worker.run())
    deadline = time.monotonic() + 30
    while not await done(worker) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(task, 10)
    return worker


async def rows() -> list[str]:
    return await sync_to_async(
        lambda: list(DeliveryRecord.objects.order_by("id").values_list("recipient", flat=True))
    )()


async def test_on_the_orm_store_the_rows_are_written_in_the_completions_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The history shares the ORM store's database: an attempt's rows and its outcome commit together (one
    commit a batch fewer), never the rows alone first."""
    original, inside = History.record, []

    def record(self: History, entries: Any) -> None:
        inside.append(connections[self.alias].in_atomic_block)
        original(self, entries)

    monkeypatch.setattr(History, "record", record)
    store = OrmStore()

    async def empty(worker: Worker) -> bool:
        return await store.acount() == 0

    worker = await deliver(store, empty, ("b@dest.test", "c@dest.test"))  # the failure, then its DSN delivered
    assert sorted(await rows()) == ["a@origin.test", "b@dest.test", "c@dest.test"]
    assert inside and all(inside), "history rows were committed apart from the completion"
    assert worker.stats.leases_lost == 0 and not worker.stats.errors, worker.stats


async def test_on_the_orm_store_an_attempt_whose_outcome_is_refused_still_has_its_rows() -> None:
    """LEASE_LOST (another worker took the item): the outcome is not recorded, the attempt's rows are."""
    store = TakenMeanwhile()

    async def lost(worker: Worker) -> bool:
        return worker.stats.leases_lost > 0

    worker = await deliver(store, lost, ("c@dest.test",))
    assert await rows() == ["c@dest.test"] and worker.stats.leases_lost == 1
    (item,) = await store.alist()
    assert item.owner == "other" and item.attempts == 0


async def test_on_the_orm_store_rows_the_completion_never_took_are_written_alone() -> None:
    """The completion refused until the lease runs out: nothing recorded (LEASE_LOST), the rows written alone,
    marked `lease_lost`. (The worker may claim the item again before it stops: each attempt has its row.)"""
    store = RefusesCompletions()

    async def lost(worker: Worker) -> bool:
        return worker.stats.leases_lost > 0

    worker = await deliver(store, lost, ("c@dest.test",))
    written = await sync_to_async(lambda: list(DeliveryRecord.objects.values_list("recipient", "lease_lost")))()
    assert written and set(written) == {("c@dest.test", True)} and len(written) == worker.stats.leases_lost


async def test_on_the_orm_store_a_dsn_without_room_writes_the_rows_once() -> None:
    """FULL: the outcome is recorded again without its DSN; the rows, written with the first try, are not
    written a second time."""
    store = OrmStore(max_items=1)

    async def empty(worker: Worker) -> bool:
        return await store.acount() == 0

    worker = await deliver(store, empty, ("b@dest.test",))
    assert await rows() == ["b@dest.test"]
    assert worker.stats.dsns == 0 and worker.stats.errors, worker.stats  # DSN_FAILED told


# --- whether the rows ride with the completion is the store's to say (`completes_with_history`) -------------


class CompletesItsOwnWay(OrmStore):
    """A subclass whose `complete_many` takes no `also` (written before the capability): the worker must not
    pass it one (it raised TypeError, the attempt an INTERNAL error)."""

    def complete_many(self, requests: Sequence[CompleteRequest]) -> list[QueueItem | None | QueueError]:
        return super().complete_many(requests)


class HistoryApart(OrmStore):
    """A subclass that opts out: its completions take no history rows."""

    def completes_with_history(self, alias: str) -> bool:
        return False


@pytest.mark.parametrize("kind", [CompletesItsOwnWay, HistoryApart])
async def test_an_orm_store_that_takes_no_rows_gets_them_written_first(
    kind: type[OrmStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    original, inside = History.record, []

    def record(self: History, entries: Any) -> None:
        inside.append(connections[self.alias].in_atomic_block)
        original(self, entries)

    monkeypatch.setattr(History, "record", record)
    store = kind()
    assert not store.completes_with_history(store.alias)

    async def empty(worker: Worker) -> bool:
        return await store.acount() == 0

    worker = await deliver(store, empty, ("b@dest.test", "c@dest.test"))  # the failure, then its DSN delivered
    assert sorted(await rows()) == ["a@origin.test", "b@dest.test", "c@dest.test"]
    assert inside and not any(inside), "history rows were handed to a completion that takes none"
    assert worker.stats.leases_lost == 0 and not worker.stats.errors, worker.stats


def test_the_orm_store_takes_rows_for_its_own_database_only() -> None:
    store = OrmStore()
    assert store.completes_with_history("default") and not store.completes_with_history("pg")
    assert not store.completes_with_history("other")

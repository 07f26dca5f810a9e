"""History before the outcome: a recorded outcome always has its history rows, committed, however slow
or out of reach the history's database is (docs/reliability.md, "History before the outcome")."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connections

from django_mailqueue import signals
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem
from django_mailqueue.history import History
from django_mailqueue.models import DeliveryRecord
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

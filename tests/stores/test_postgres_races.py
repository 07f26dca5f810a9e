"""Races on PostgreSQL: many claimers and many adders, each on its own connection."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections

from django_mailqueue.core.items import NewItem
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.testing.contract import T0, at, new_item
from tests.support.databases import WITH_SERIALIZABLE

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True, databases=WITH_SERIALIZABLE),
]


def _in_threads(count: int, work):  # type: ignore[no-untyped-def]
    barrier = threading.Barrier(count)

    def run(index: int):  # type: ignore[no-untyped-def]
        try:
            barrier.wait()
            return work(index)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def _drain(alias: str, total: int) -> list[list[uuid.UUID]]:
    store = OrmStore({"database": alias})

    def drain(index: int) -> list[uuid.UUID]:
        taken: list[uuid.UUID] = []
        while claimed := store.claim(owner=f"w{index}", now=at(1), lease_expires=at(600), limit=5):
            taken.extend(item.id for item in claimed)
        return taken

    return _in_threads(8, drain)


@pytest.mark.parametrize("alias", ["pg", "pg_serializable"])
def test_eight_claimers_drain_2000_items_each_claimed_once(pg_alias: str, alias: str) -> None:
    if alias == "pg_serializable":
        with connections[alias].cursor() as cursor:
            cursor.execute("SHOW default_transaction_isolation")
            assert cursor.fetchone()[0] == "serializable"
    adder = OrmStore({"database": "pg"})
    for start in range(0, 2000, 500):
        adder.add_many([new_item([f"r{start + i}@example.org"]) for i in range(500)], now=T0)
    results = _drain(alias, 2000)
    every = [item_id for taken in results for item_id in taken]
    assert len(every) == 2000
    assert len(set(every)) == 2000
    assert sum(1 for taken in results if taken) >= 2, "the claimers did not run concurrently"


@pytest.mark.parametrize("alias", ["pg", "pg_serializable"])
def test_eight_adders_never_pass_max_items(pg_alias: str, alias: str) -> None:
    store = OrmStore({"database": alias}, max_items=100)

    def add(index: int) -> int:
        added = 0
        for _ in range(30):
            try:
                store.add(new_item(), now=T0 + timedelta(microseconds=index))
                added += 1
            except QueueError as exc:
                assert exc.code == "FULL", exc
        return added

    counts = _in_threads(8, add)
    assert sum(counts) == 100
    assert OrmStore({"database": "pg"}).count() == 100


def test_a_message_larger_than_a_read_slice_comes_back_byte_for_byte(pg_alias: str) -> None:
    import random

    from django_mailqueue.core.items import NewItem
    from django_mailqueue.stores.base import READ_CHUNK

    store = OrmStore({"database": "pg"})
    rng = random.Random(7)
    sizes = [0, 1, READ_CHUNK, READ_CHUNK + 1, 2 * READ_CHUNK + 12345]
    messages = {size: bytes(rng.getrandbits(8) for _ in range(size)) for size in sizes}
    items = {size: store.add(NewItem("a@o.test", ("b@d.test",), data), now=T0) for size, data in messages.items()}

    assert store.read_messages([item.id for item in items.values()]) == {
        item.id: messages[size] for size, item in items.items()
    }
    for size, item in items.items():
        assert store.read_message(item.id) == messages[size]
    store.cancel(items[READ_CHUNK + 1].id)
    assert store.read_message(items[READ_CHUNK + 1].id) is None


def test_a_message_of_up_to_a_page_stays_in_its_row_and_a_larger_one_goes_to_toast(pg_alias: str) -> None:
    import os

    from django_mailqueue.core.items import NewItem

    store = OrmStore({"database": "pg"})

    def toasted_chunks() -> int:
        with connections["pg"].cursor() as cursor:
            cursor.execute(
                "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'mailqueue_message'::regclass"
            )
            (toast,) = cursor.fetchone()
            cursor.execute(f"SELECT count(*) FROM {toast}")  # noqa: S608 - a name from the catalogue
            return int(cursor.fetchone()[0])

    before = toasted_chunks()
    small = os.urandom(7000)  # incompressible: without the migration it would be moved to TOAST
    store.add(NewItem("a@o.test", ("b@d.test", "c@d.test"), small), now=T0)
    assert toasted_chunks() == before
    large = os.urandom(9000)
    item = store.add(NewItem("a@o.test", ("b@d.test",), large), now=T0)
    assert toasted_chunks() > before
    assert store.read_message(item.id) == large


@pytest.mark.parametrize("alias", ["pg", "pg_serializable"])
@pytest.mark.parametrize("durable", [True, False], ids=["outcome", "lease"])
def test_every_write_runs_at_read_committed_and_only_leases_skip_the_flush(
    pg_alias: str, alias: str, durable: bool
) -> None:
    store = OrmStore({"database": alias})
    for _ in range(2):  # the second time on a connection whose default is known
        with store._write(durable=durable) as conn, conn.cursor() as cursor:
            cursor.execute("SHOW transaction_isolation")
            assert cursor.fetchone()[0] == "read committed"
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == ("on" if durable else "off")


def test_a_claim_waits_for_the_wal_flush(pg_alias: str) -> None:
    """A claim a server crash forgot put the item's revision back: its worker claimed it again at the
    same revision, and the first attempt's outcome was recorded under the second lease — the message
    went out twice with no LEASE_LOST (the fault run on PostgreSQL, once: "duplicates outside every
    window"). Claims commit with the WAL flushed; only renewals skip it."""
    store = OrmStore({"database": pg_alias})
    store.add(NewItem("a@o.test", ("b@d.test",), b"Subject: x\r\n\r\nx\r\n"), now=T0)
    statements: list[str] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, many, context)

    with connections[pg_alias].execute_wrapper(capture):
        (claimed,) = store.claim(owner="w1", now=T0, lease_expires=T0 + timedelta(seconds=60))
    assert statements and not any("synchronous_commit" in sql for sql in statements), statements


def test_a_renewal_is_one_statement_committed_without_the_flush(pg_alias: str) -> None:
    """A renewal holds no row lock between statements: a worker stopped (SIGSTOP, a frozen VM) inside a
    renewal's transaction kept every other worker from its items past their leases, SKIP LOCKED passing
    them by (a CI run's `test_a_paused_worker_past_its_lease…`). Its own commit skips the WAL flush; inside a
    caller's transaction the caller's commit is left durable."""
    from django.db import transaction

    store = OrmStore({"database": pg_alias})
    conn = connections[pg_alias]
    store.add(new_item(), now=T0)
    (claimed,) = store.claim(owner="w1", now=T0, lease_expires=T0 + timedelta(seconds=60))
    calls: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        calls.append((sql, params))
        return execute(sql, params, many, context)

    later = T0 + timedelta(seconds=90)
    with conn.execute_wrapper(capture):
        assert store.renew([claimed.id, uuid.uuid4()], owner="w1", lease_expires=later) == [claimed.id]
        assert store.renew([claimed.id], owner="w2", lease_expires=later) == []
    assert len(calls) == 2 and all("synchronous_commit" in sql for sql, _ in calls), calls
    assert [params[0] for _, params in calls] == ["off", "off"]
    held = store.get(claimed.id)
    assert held is not None and held.lease_expires == later and held.owner == "w1"
    with conn.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"  # set for the statement's own transaction only
    calls.clear()
    with transaction.atomic(using=pg_alias), conn.execute_wrapper(capture):
        assert store.renew([claimed.id], owner="w1", lease_expires=later) == [claimed.id]
        with conn.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"
    assert calls[0][1][0] is None


def test_a_token_take_skips_the_flush_only_in_its_own_transaction(pg_alias: str) -> None:
    """The bucket's row stays locked until the take commits: its own transaction does not wait for the WAL
    flush (docs/shaping.md). Inside a caller's transaction the take leaves the caller's commit durable."""
    from django.db import transaction

    store = OrmStore({"database": pg_alias})
    conn = connections[pg_alias]
    statements: list[str] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, many, context)

    with conn.execute_wrapper(capture):
        assert store.take_tokens("relay:a.test:25", rate=1, burst=2, want=1, now=T0) == 1
    assert any("synchronous_commit" in sql for sql in statements), statements
    with conn.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"  # SET LOCAL: nothing left on the connection
    with transaction.atomic(using=pg_alias):
        assert store.take_tokens("relay:a.test:25", rate=1, burst=2, want=1, now=T0) == 1
        with conn.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"


@pytest.mark.asyncio
async def test_a_wait_that_times_out_while_connecting_leaves_no_connection_open(pg_alias: str) -> None:
    """A listener's timeout may cancel its connect between the connection and its LISTEN."""
    import gc
    import warnings

    from django_mailqueue.stores.orm.pg_listen import PgListener

    settings = connections[pg_alias].settings_dict
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in [*range(1, 41)] * 4:  # timeouts of 1 to 40 ms: some land inside the LISTEN round trip
            listener = PgListener(settings, "mailqueue_test_cancelled_connect")
            await listener.wait(step / 1000)
            await listener.close()
        gc.collect()
    leaked = [w for w in caught if issubclass(w.category, ResourceWarning) and "AsyncConnection" in str(w.message)]
    assert leaked == []


def test_a_suspend_outlives_the_end_of_the_probe_it_found(pg_alias: str) -> None:
    """The fault run on PostgreSQL, once: a suspend's placeholder insert found a probe-only row, that probe's
    `end_probe` deleted the row, and the suspend's lock then found nothing (DoesNotExist, an INTERNAL error).
    Here the probe's holder locks the row, waits until the suspend waits on it, then deletes it."""
    from django.db import transaction

    from django_mailqueue.core.items import Reply
    from django_mailqueue.models import Suspension as SuspensionRow

    store = OrmStore({"database": pg_alias})
    assert store.take_probe("mx:a.test", holder="w1", until=at(60), now=at(1)) is None
    locked, release = threading.Event(), threading.Event()

    def end_probe_slowly() -> None:
        try:
            with transaction.atomic(using=pg_alias):
                SuspensionRow.objects.using(pg_alias).select_for_update().get(destination="mx:a.test")
                locked.set()
                assert release.wait(30)
                assert SuspensionRow.objects.using(pg_alias).filter(destination="mx:a.test").delete()[0] == 1
        finally:
            connections.close_all()

    def suspend() -> int:
        try:
            reply = Reply(421, "4.7.0", "Try again later")
            return store.suspend("mx:a.test", until=at(300), reply=reply, now=at(2)).strikes
        finally:
            connections.close_all()

    with ThreadPoolExecutor(2) as pool:
        ender = pool.submit(end_probe_slowly)
        assert locked.wait(30)
        suspender = pool.submit(suspend)
        with connections[pg_alias].cursor() as cursor:
            for _ in range(300):  # the suspend waits on the row lock (or has finished: the test then proves less)
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
                if cursor.fetchone()[0] or suspender.done():
                    break
                threading.Event().wait(0.05)
            else:
                pytest.fail("the suspend never waited on the probe's row")
        assert not suspender.done(), "the suspend did not wait on the locked row"
        release.set()
        ender.result(timeout=30)
        assert suspender.result(timeout=30) == 1
    (kept,) = store.suspensions(now=at(2))
    assert (kept.destination, kept.strikes, kept.until) == ("mx:a.test", 1, at(300))

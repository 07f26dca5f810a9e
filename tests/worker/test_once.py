"""`mailqueue_work --once` on every store while the store fails for a moment: it delivers everything that was
due, or — the store out of reach at every try — exits 1 and says so; never exit 0 with due mail left."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from io import StringIO
from typing import Any

import pytest
from django.core.mail import send_mail
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_mailqueue.conf import QueueSettings
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.errors import Code, QueueError
from django_mailqueue.core.items import NewItem, QueueItem
from django_mailqueue.stores import get_store
from django_mailqueue.stores.claimed_batch import ClaimedBatch, acompose
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.testing.fakes import ScriptedDeliverer
from django_mailqueue.worker import Worker
from django_mailqueue.worker.engine import ONCE_TRIES
from django_mailqueue.worker.factory import build_worker
from tests.support.databases import DATABASES
from tests.worker.conftest import MailWorld, SignalRecorder, only_kept_failed

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)

#: the store calls a `--once` run reaches due mail through: the claim (with its reads), and the claimed batch's
#: suppression look-up (the one made with the claim, then the worker's own again)
REACHING = ("aclaim_batch", "asuppressed")
#: twins a store's own `aclaim_batch` may not call (a pipeline of its own, one thread for the sync methods)
WITHIN_THE_CLAIM = ("asuppressed", "aread_messages")


class Flaky:
    """One async method of a real store whose first `failures` calls raise `STORE_UNAVAILABLE`, as a store out
    of reach for a moment does, before the store answers."""

    def __init__(self, method: Callable[..., Awaitable[Any]], failures: int) -> None:
        self.method = method
        self.failures = failures
        self.calls = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self.failures:
            raise QueueError(Code.STORE_UNAVAILABLE, "the store is out of reach (a test's failure)")
        return await self.method(*args, **kwargs)


def fail(monkeypatch: pytest.MonkeyPatch, method: str, failures: int) -> Flaky:
    store = get_store()
    flaky = Flaky(getattr(store, method), failures)
    monkeypatch.setattr(store, method, flaky)
    if method in WITHIN_THE_CLAIM:  # the claimed batch made through the twins, the flaky one among them
        monkeypatch.setattr(store, "aclaim_batch", functools.partial(acompose, store))
    return flaky


def work_once() -> str:
    out = StringIO()
    call_command("mailqueue_work", "--once", stdout=out, stderr=StringIO())
    return out.getvalue()


def send(count: int) -> None:
    for n in range(count):
        send_mail(f"Hello {n}", "Body.\n", "sender@origin.test", [f"someone{n}@dest.test"])


@pytest.mark.parametrize("method", REACHING)
def test_a_store_error_for_a_moment_is_tried_again_and_every_due_item_is_delivered(
    mail_world: MailWorld,
    store_config: dict[str, Any],
    received: SignalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        send(3)
        flaky = fail(monkeypatch, method, failures=2)
        summary = work_once()
        assert get_store().count() == 0
    assert flaky.calls >= 3 and "3 delivered" in summary
    assert sorted(m.rcpt_tos[0] for m in mail_world.mx.messages) == [f"someone{n}@dest.test" for n in range(3)]
    assert received.names().count("error") == 2 and received.names().count("delivered") == 3
    assert all(e["error"].code == Code.STORE_UNAVAILABLE for e in received.of("error"))


@pytest.mark.parametrize("method", REACHING)
def test_a_store_out_of_reach_at_every_try_exits_1_and_leaves_the_mail_due(
    mail_world: MailWorld,
    store_config: dict[str, Any],
    received: SignalRecorder,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        send(2)
        flaky = fail(monkeypatch, method, failures=ONCE_TRIES)
        with pytest.raises(CommandError, match="^--once left mail in the queue that it could not reach: "):
            work_once()
        assert flaky.calls == ONCE_TRIES and mail_world.mx.messages == []
        assert received.names() == ["error"] * ONCE_TRIES
        left = get_store().list()
        assert len(left) == 2
        assert all(i.attempts == 0 and i.owner is None and i.next_attempt <= SystemClock().now() for i in left)
        summary = work_once()  # the store answers again: the next run reaches it all
        assert get_store().count() == 0 and "2 delivered" in summary


def test_a_message_read_failing_for_a_moment_is_read_again_and_delivered(
    mail_world: MailWorld, store_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        send(1)
        fail(monkeypatch, "aread_messages", failures=1)  # the read with the claim: the attempt reads it itself
        read = fail(monkeypatch, "aread_message", failures=2)
        summary = work_once()
        assert get_store().count() == 0
    assert read.calls == 3 and "1 delivered" in summary and len(mail_world.mx.messages) == 1


class ClaimsAfterAttempts:
    """A worker's claims as a slow store may answer them (on SQLite, another write held the lock meanwhile): a
    claim asked for while attempts are under way reaches the store only once they have all ended — their outcomes
    and DSNs recorded — with the `now` it was asked with. Counts the claims it held back."""

    def __init__(self, worker: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
        self.worker = worker
        self.claim = worker.store.aclaim_batch
        self.ended = asyncio.Event()
        self.held_back = 0
        attempt_ended = worker._attempt_ended

        def ended(task: asyncio.Task[None]) -> None:
            attempt_ended(task)
            self.ended.set()

        monkeypatch.setattr(worker, "_attempt_ended", ended)
        monkeypatch.setattr(worker.store, "aclaim_batch", self)

    async def __call__(self, **kwargs: Any) -> ClaimedBatch:
        if self.worker._running:
            self.held_back += 1
        while self.worker._running:
            self.ended.clear()
            await self.ended.wait()
        result: ClaimedBatch = await self.claim(**kwargs)
        return result


def test_a_dsn_queued_while_a_claim_was_under_way_is_delivered_by_the_same_run(
    mail_world: MailWorld, store_config: dict[str, Any], received: SignalRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim asked for right after the first item started reaches the store after that item's failure DSN was
    queued, due from the record — later than the claim's `now`: it finds nothing, and nothing is under way any
    more. The run claims again (the DSN goes) rather than end with the DSN due."""
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        send_mail("Doomed", "Body.\n", "sender@origin.test", ["rejected@dest.test"])
        worker = build_worker(once=True)
        claims = ClaimsAfterAttempts(worker, monkeypatch)
        stats = asyncio.run(worker.run())
        assert only_kept_failed(get_store()), [(i.sender, i.attempts) for i in get_store().list()]
    assert claims.held_back >= 1 and stats.dsns == 1 and stats.claimed == 2 and stats.unreached is None
    (report,) = mail_world.mx.messages
    assert report.rcpt_tos == ["sender@origin.test"]
    assert received.names() == ["failed", "dsn", "delivered"]


class DownFromTheRecord(MemoryStore):
    """A memory store that records no outcome and renews no lease: out of reach from the first outcome on."""

    def complete(self, item_id: Any, **kwargs: Any) -> QueueItem | None:
        raise QueueError(Code.STORE_UNAVAILABLE, "the store is out of reach (a test's failure)")

    def renew(self, ids: Any, **kwargs: Any) -> list[Any]:
        raise QueueError(Code.STORE_UNAVAILABLE, "the store is out of reach (a test's failure)")


async def test_an_outcome_the_store_cannot_take_before_the_lease_runs_out_stops_the_run_short() -> None:
    store = DownFromTheRecord()
    item = store.add(
        NewItem("a@origin.test", ("b@dest.test",), b"Subject: hi\r\n\r\nbody\r\n"), now=SystemClock().now()
    )
    deliverer = ScriptedDeliverer()
    settings = QueueSettings(hostname="mq.test.example", lease=1.0, poll_interval=0.1, history_days=0)
    worker = Worker(store=store, settings=settings, deliverer=deliverer, once=True)
    stats = await asyncio.wait_for(worker.run(), 30)
    assert stats.unreached is not None and stats.unreached.code == Code.LEASE_LOST and stats.leases_lost == 1
    assert len(deliverer.calls) == 1 and store.get(item.id) is not None  # delivered once, not recorded: left

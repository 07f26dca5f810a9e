"""The worker engine on the memory store with a scripted deliverer and a fake clock."""

from __future__ import annotations

import asyncio
import email
import random
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from django_mailqueue import signals
from django_mailqueue.conf import load_settings
from django_mailqueue.core.clock import FakeClock
from django_mailqueue.core.errors import Code, QueueError
from django_mailqueue.core.items import NewItem, RecipientState, Reply, Suppression
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.testing.damage import lose_message
from django_mailqueue.testing.fakes import DELIVERED, GREYLISTED, REJECTED, ScriptedDeliverer
from django_mailqueue.worker import Worker
from django_mailqueue.worker.engine import ONCE_TRIES
from django_mailqueue.worker.flow import RECORDING_FACTOR

MESSAGE = b"From: a@example.com\r\nTo: b@example.org\r\nSubject: hi\r\nMessage-ID: <orig-1@example.com>\r\n\r\nbody\r\n"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def connect(self) -> None:
        for name in ("delivered", "deferred", "failed", "dsn", "error"):
            getattr(signals, name).connect(self._make(name), weak=False, dispatch_uid=f"recorder-{name}")

    def disconnect(self) -> None:
        for name in ("delivered", "deferred", "failed", "dsn", "error"):
            getattr(signals, name).disconnect(dispatch_uid=f"recorder-{name}")

    def _make(self, name: str):  # type: ignore[no-untyped-def]
        def receive(sender: Any, **kwargs: Any) -> None:
            self.events.append((name, kwargs))

        return receive

    def names(self) -> list[str]:
        return [name for name, _ in self.events]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    rec.connect()
    yield rec
    rec.disconnect()


def make_worker(store: MemoryStore, clock: FakeClock, deliverer: ScriptedDeliverer, **settings: Any) -> Worker:
    parsed = load_settings({"HOSTNAME": "mq.test.example", "POLL_INTERVAL": 0.05, **settings})
    return Worker(
        store=store, settings=parsed, deliverer=deliverer, clock=clock, once=True, owner="w-test", rng=random.Random(7)
    )


def add(
    store: MemoryStore,
    clock: FakeClock,
    recipients: tuple[str, ...] = ("b@example.org",),
    sender: str = "a@example.com",
    message: bytes = MESSAGE,
) -> NewItem:
    item = NewItem(
        sender=sender, recipients=recipients, message=message, message_id="<orig-1@example.com>", subject="hi"
    )
    store.add(item, now=clock.now())
    return item


async def test_delivered_and_dropped(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock)
    stats = await make_worker(store, clock, ScriptedDeliverer()).run()
    assert stats.delivered == 1
    assert store.get(item.id) is None and store.read_message(item.id) is None
    assert recorder.names() == ["delivered"]
    kwargs = recorder.events[0][1]
    assert kwargs["item_id"] == item.id and kwargs["recipient"] == "b@example.org"
    assert kwargs["reply"] == DELIVERED and kwargs["attempt"] == 1


async def test_deferred_then_delivered_on_the_schedule(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock)
    deliverer = ScriptedDeliverer({"b@example.org": [GREYLISTED, DELIVERED]})
    await make_worker(store, clock, deliverer, RETRY_DELAYS=[60, 120]).run()
    held = store.get(item.id)
    assert held is not None and held.attempts == 1 and held.recipients[0].reply == GREYLISTED
    assert clock.now() + timedelta(seconds=60) <= held.next_attempt <= clock.now() + timedelta(seconds=66)
    assert recorder.names() == ["deferred"]
    assert recorder.events[0][1]["next_attempt"] == held.next_attempt
    clock.advance(30)
    await make_worker(store, clock, deliverer).run()
    assert len(deliverer.calls) == 1  # not due yet
    clock.set(held.next_attempt)
    await make_worker(store, clock, deliverer).run()
    assert store.get(item.id) is None
    assert recorder.names() == ["deferred", "delivered"]
    assert recorder.events[1][1]["attempt"] == 2


async def test_retry_delays_last_one_repeats(clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock)
    deliverer = ScriptedDeliverer({"b@example.org": [GREYLISTED]})
    gaps = []
    for _ in range(4):
        before = clock.now()
        await make_worker(store, clock, deliverer, RETRY_DELAYS=[10, 20, 40]).run()
        held = store.get(item.id)
        assert held is not None
        gaps.append((held.next_attempt - before).total_seconds())
        clock.set(held.next_attempt)
    assert [int(g) for g in gaps] == [10, 20, 40, 40] or all(
        base <= g <= base * 1.1 for g, base in zip(gaps, [10, 20, 40, 40], strict=True)
    )


async def test_always_451_fails_after_max_lifetime_with_a_dsn(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock)
    deliverer = ScriptedDeliverer({"b@example.org": [GREYLISTED]})
    for _ in range(50):
        await make_worker(store, clock, deliverer, RETRY_DELAYS=[600], MAX_LIFETIME=3600, DELAY_WARNING=None).run()
        held = store.get(item.id)
        if held is None or held.kept:
            break
        clock.set(held.next_attempt)
    kept = store.get(item.id)  # failed, kept KEEP_FAILED (7 days by default) to be sent again
    assert kept is not None and kept.kept and kept.recipients[0].reply == GREYLISTED
    names = recorder.names()
    failed_at = names.index("failed")
    assert names[failed_at + 1] == "dsn" and names.count("failed") == 1
    failed = recorder.events[failed_at][1]
    assert failed["reply"] == GREYLISTED  # the last temporary reply is kept
    assert failed["attempt"] == names.count("deferred") + 1
    dsn = recorder.events[failed_at + 1][1]
    assert dsn["kind"] == "failed" and dsn["of"] == item.id and dsn["to"] == "a@example.com"
    # the DSN went out in the same run, from <> to the sender
    assert [(c.sender, c.recipients) for c in deliverer.calls][-1] == ("", ("a@example.com",))
    assert [i.id for i in store.list()] == [item.id]  # its DSN delivered, the item kept failed


async def test_exactly_one_delayed_dsn(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock)
    deliverer = ScriptedDeliverer({"b@example.org": [GREYLISTED]})
    for _ in range(6):
        await make_worker(store, clock, deliverer, RETRY_DELAYS=[1000], DELAY_WARNING=1500, MAX_LIFETIME=10**6).run()
        held = store.get(item.id)
        assert held is not None
        clock.set(held.next_attempt)
    dsns = [kwargs for name, kwargs in recorder.events if name == "dsn"]
    assert len(dsns) == 1 and dsns[0]["kind"] == "delayed"
    report = next(call.message for call in deliverer.calls if call.sender == "")
    parsed = email.message_from_bytes(report)
    assert parsed.get_content_type() == "multipart/report"
    status = parsed.get_payload()[1]
    assert status.get_content_type() == "message/delivery-status"
    text = report.decode()
    assert "Action: delayed" in text and "Will-Retry-Until:" in text and "Status: 4.7.1" in text


async def test_failure_dsn_fields_and_none_for_the_null_sender(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock, recipients=("b@example.org", "c@example.org"))
    deliverer = ScriptedDeliverer({"b@example.org": [REJECTED]})
    await make_worker(store, clock, deliverer).run()
    assert recorder.names()[:3] == ["failed", "delivered", "dsn"] or recorder.names()[:3] == [
        "delivered",
        "failed",
        "dsn",
    ]
    dsn_item = next(kw for name, kw in recorder.events if name == "dsn")
    assert dsn_item["recipients"] == ["b@example.org"]
    # the DSN itself is delivered in the same run (it is due at once), from <>
    assert any(call.sender == "" and call.recipients == ("a@example.com",) for call in deliverer.calls)
    dsn_call = next(call for call in deliverer.calls if call.sender == "")
    parsed = email.message_from_bytes(dsn_call.message)
    assert parsed["Auto-Submitted"] == "auto-replied"
    assert parsed["In-Reply-To"] == "<orig-1@example.com>" and parsed["References"] == "<orig-1@example.com>"
    assert "report-type=delivery-status" in parsed["Content-Type"]
    parts = parsed.get_payload()
    assert [p.get_content_type() for p in parts] == ["text/plain", "message/delivery-status", "text/rfc822-headers"]
    fields = dsn_call.message.decode()
    for name in (
        "Reporting-MTA: dns; mq.test.example",
        "Final-Recipient: rfc822; b@example.org",
        "Action: failed",
        "Status: 5.1.1",
        "Remote-MTA: dns; mx.test.example",
        "Diagnostic-Code: smtp; 550 5.1.1 No such user",
        "Last-Attempt-Date:",
        "Arrival-Date:",
    ):
        assert name in fields
    assert "Will-Retry-Until" not in fields
    assert "Subject: hi" in parts[2].get_payload()
    # a DSN about a DSN is never sent: make the DSN's recipient reject too
    assert [i.kept for i in store.list() if i.id == item.id] == [True]


async def test_no_dsn_for_a_message_from_the_null_sender(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    add(store, clock, sender="")
    await make_worker(store, clock, ScriptedDeliverer({"b@example.org": [REJECTED]})).run()
    assert recorder.names() == ["failed"]
    assert [i.kept for i in store.list()] == [True]  # no DSN; the item kept failed


async def test_dsn_false_turns_them_off(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    add(store, clock)
    await make_worker(store, clock, ScriptedDeliverer({"b@example.org": [REJECTED]}), DSN=False).run()
    assert recorder.names() == ["failed"]
    assert [i.kept for i in store.list()] == [True]  # no DSN; the item kept failed


async def test_keep_failed_0_drops_a_failed_item_at_once(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock)
    await make_worker(store, clock, ScriptedDeliverer({"b@example.org": [REJECTED]}), KEEP_FAILED=0).run()
    assert recorder.names()[:2] == ["failed", "dsn"]
    assert store.get(item.id) is None and store.read_message(item.id) is None
    assert store.count() == 0  # its DSN delivered too


async def test_a_kept_item_sent_again_delivers_only_its_failed_recipients(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock, sender="", recipients=("ok@example.org", "no@example.org"))
    # a failure the operator can fix (not one that lists the address: that one would fail again at once)
    expired = Reply(550, "5.7.1", "Account expired")
    deliverer = ScriptedDeliverer({"no@example.org": [expired, DELIVERED]})
    await make_worker(store, clock, deliverer).run()
    kept = store.get(item.id)
    assert kept is not None and kept.kept and kept.failed_at == clock.now()
    clock.advance(3600)
    await make_worker(store, clock, deliverer).run()  # a kept item is never claimed
    assert deliverer.deliveries_to("no@example.org") == 1
    assert store.send_again([item.id], now=clock.now())[0] is not None
    await make_worker(store, clock, deliverer).run()
    assert deliverer.deliveries_to("no@example.org") == 2 and deliverer.deliveries_to("ok@example.org") == 1
    assert store.get(item.id) is None
    assert sorted(recorder.names()) == ["delivered", "delivered", "failed"]


async def test_a_full_queue_records_the_outcome_without_its_dsn(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore(max_items=1)
    item = add(store, clock)
    worker = make_worker(store, clock, ScriptedDeliverer({"b@example.org": [REJECTED]}))
    stats = await worker.run()
    assert recorder.names() == ["error", "failed"]
    error = recorder.events[0][1]["error"]
    assert error.code == "DSN_FAILED" and recorder.events[0][1]["item_id"] == item.id
    assert "failed DSN" in error.message and "MAX_ITEMS" in error.message
    assert [i.kept for i in store.list()] == [True] and stats.failed == 1 and stats.dsns == 0


async def test_a_recipient_final_is_never_tried_again(clock: FakeClock) -> None:
    store = MemoryStore()
    add(store, clock, recipients=("ok@example.org", "later@example.org", "no@example.org"))
    deliverer = ScriptedDeliverer({"later@example.org": [GREYLISTED, DELIVERED], "no@example.org": [REJECTED]})
    await make_worker(store, clock, deliverer, DSN=False).run()
    (held,) = store.list()
    clock.set(held.next_attempt)
    await make_worker(store, clock, deliverer, DSN=False).run()
    assert deliverer.deliveries_to("ok@example.org") == 1
    assert deliverer.deliveries_to("no@example.org") == 1
    assert deliverer.deliveries_to("later@example.org") == 2
    assert [i.kept for i in store.list()] == [True]  # no@ failed: kept to be sent again


async def test_a_lost_message_fails_every_pending_recipient_in_order(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock, recipients=("b@example.org", "c@example.org"))
    lose_message(store, item.id)
    deliverer = ScriptedDeliverer()
    await make_worker(store, clock, deliverer).run()
    names = recorder.names()
    assert names[:4] == ["error", "failed", "failed", "dsn"]
    error = recorder.events[0][1]["error"]
    assert error.code == "MESSAGE_UNREADABLE" and recorder.events[0][1]["item_id"] == item.id
    assert recorder.events[1][1]["reply"].status == "5.3.0" and recorder.events[1][1]["reply"].code is None
    assert not any(call.recipients == ("b@example.org", "c@example.org") for call in deliverer.calls)
    dsn_call = next(call for call in deliverer.calls if call.sender == "")
    parts = email.message_from_bytes(dsn_call.message).get_payload()
    assert [p.get_content_type() for p in parts] == ["text/plain", "message/delivery-status"]


async def test_a_reclaimed_too_often_item_fails(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock)
    for owner in ("dead-1", "dead-2", "dead-3"):
        store.claim(owner=owner, now=clock.now(), lease_expires=clock.now() + timedelta(seconds=10))
        clock.advance(10)
    deliverer = ScriptedDeliverer()
    await make_worker(store, clock, deliverer, MAX_RECLAIMS=1).run()
    assert deliverer.deliveries_to("b@example.org") == 0
    assert recorder.names()[:2] == ["failed", "dsn"]
    kept = store.get(item.id)
    assert kept is not None and kept.kept and kept.recipients[0].reply is not None
    assert kept.recipients[0].reply.status == "5.4.0"


async def test_lease_lost_records_nothing(recorder: Recorder, clock: FakeClock) -> None:
    store = MemoryStore()
    item = add(store, clock)
    gate = asyncio.Event()
    deliverer = ScriptedDeliverer(gate=gate)
    worker = make_worker(store, clock, deliverer, LEASE=1)
    run = asyncio.create_task(worker.run())
    while not deliverer.calls:
        await asyncio.sleep(0.01)
    clock.advance(5)  # the lease expired; another worker takes the item
    taken = store.claim(owner="other", now=clock.now(), lease_expires=clock.now() + timedelta(seconds=300))
    assert [t.id for t in taken] == [item.id]
    gate.set()
    await asyncio.wait_for(run, 10)
    assert "delivered" not in recorder.names()
    assert any(name == "error" and kw["error"].code == "LEASE_LOST" for name, kw in recorder.events)
    held = store.get(item.id)
    assert held is not None and held.owner == "other" and held.recipients[0].state is RecipientState.PENDING


async def test_stop_finishes_attempts_under_way_and_gives_back_the_rest(clock: FakeClock) -> None:
    store = MemoryStore()
    for i in range(6):
        add(store, clock, recipients=(f"r{i}@example.org",))
    gate = asyncio.Event()
    deliverer = ScriptedDeliverer(gate=gate)
    parsed = load_settings({"HOSTNAME": "mq.test.example", "POLL_INTERVAL": 0.05})
    worker = Worker(
        store=store, settings=parsed, deliverer=deliverer, clock=clock, owner="w", concurrency=2, prefetch=2
    )
    run = asyncio.create_task(worker.run())
    while len(deliverer.calls) < 2:
        await asyncio.sleep(0.01)
    worker.stop()
    await asyncio.sleep(0.05)
    gate.set()
    stats = await asyncio.wait_for(run, 10)
    assert stats.delivered == 2 and stats.given_back == 2
    left = store.list()
    assert len(left) == 4
    assert all(i.owner is None and i.attempts == 0 and i.next_attempt <= clock.now() for i in left)


async def test_a_raising_receiver_is_logged_and_ignored(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    def boom(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    signals.delivered.connect(boom, dispatch_uid="boom")
    try:
        store = MemoryStore()
        add(store, clock)
        stats = await make_worker(store, clock, ScriptedDeliverer()).run()
    finally:
        signals.delivered.disconnect(dispatch_uid="boom")
    assert stats.delivered == 1 and store.count() == 0
    assert "receiver raised" in caplog.text


async def test_an_idle_worker_wakes_when_mail_is_added(clock: FakeClock) -> None:
    store = MemoryStore()
    parsed = load_settings({"HOSTNAME": "mq.test.example", "POLL_INTERVAL": 30})
    deliverer = ScriptedDeliverer()
    worker = Worker(store=store, settings=parsed, deliverer=deliverer, clock=clock, owner="w")
    run = asyncio.create_task(worker.run())
    await asyncio.sleep(0.2)
    add(store, clock)
    for _ in range(100):
        if deliverer.calls:
            break
        await asyncio.sleep(0.02)
    assert deliverer.calls, "the worker did not wake within 2 s (poll interval is 30 s)"
    worker.stop()
    await asyncio.wait_for(run, 35)


async def test_queues_in_order_of_preference(clock: FakeClock) -> None:
    store = MemoryStore()
    for queue in ("bulk", "urgent", "bulk", "urgent"):
        store.add(
            NewItem(sender="a@example.com", recipients=(f"{queue}@example.org",), message=MESSAGE, queue=queue),
            now=clock.now(),
        )
    store.add(
        NewItem(sender="a@example.com", recipients=("other@example.org",), message=MESSAGE, queue="other"),
        now=clock.now(),
    )
    deliverer = ScriptedDeliverer()
    parsed = load_settings({"HOSTNAME": "mq.test.example"})
    await Worker(
        store=store,
        settings=parsed,
        deliverer=deliverer,
        clock=clock,
        once=True,
        concurrency=1,
        prefetch=0,
        queues=["urgent", "bulk"],
    ).run()
    assert [c.recipients[0] for c in deliverer.calls] == ["urgent@example.org"] * 2 + ["bulk@example.org"] * 2
    assert store.count() == 1


async def test_a_lost_reply_after_data_is_told_and_logged(
    recorder: Recorder, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    from django_mailqueue.testing.fakes import GREYLISTED

    store = MemoryStore()
    item = add(store, clock)
    deliverer = ScriptedDeliverer(script={"b@example.org": [GREYLISTED]}, lost_after_data=frozenset({"b@example.org"}))
    caplog.set_level("WARNING", logger="django_mailqueue")
    await make_worker(store, clock, deliverer).run()
    errors = [kwargs["error"] for name, kwargs in recorder.events if name == "error"]
    assert [e.code for e in errors] == ["REPLY_LOST"] and "b@example.org" in errors[0].message
    stored = store.get(item.id)
    assert stored is not None and stored.pending  # tried again later: a duplicate is possible, a loss is not
    assert any(r.getMessage().startswith(f"error item={stored.id} REPLY_LOST: ") for r in caplog.records)


class SlowRecordingStore(MemoryStore):
    """Records outcomes only once `release` is set: the store is slow to write."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.recorded = 0

    async def acomplete_many(self, requests: Any) -> Any:
        await self.release.wait()
        answers = await super().acomplete_many(requests)
        self.recorded += len(requests)
        return answers


def start_with_a_slow_store(items: int) -> tuple[SlowRecordingStore, ScriptedDeliverer, Worker, asyncio.Task[Any]]:
    """A worker (CONCURRENCY 2) running on `items` queued messages, whose outcomes the store holds back."""
    clock = FakeClock()
    store = SlowRecordingStore()
    for _ in range(items):
        add(store, clock)
    deliverer = ScriptedDeliverer()
    worker = make_worker(store, clock, deliverer, CONCURRENCY=2)
    return store, deliverer, worker, asyncio.create_task(worker.run())


async def test_a_slot_is_free_once_the_smtp_part_ends_while_the_outcome_waits_for_the_store() -> None:
    store, deliverer, worker, run = start_with_a_slow_store(12)
    try:
        # Nothing is recorded yet, but every message has been handed to SMTP: two slots, reused.
        for _ in range(200):
            if len(deliverer.calls) == 12:
                break
            await asyncio.sleep(0.01)
        assert len(deliverer.calls) == 12
        assert store.recorded == 0
        assert worker._flow.delivering == 0 and worker._flow.recording == 12
    finally:
        store.release.set()
    stats = await asyncio.wait_for(run, 5)
    assert stats.delivered == 12 and store.recorded == 12 and store.count() == 0


async def test_held_items_stay_bounded_however_slow_the_record() -> None:
    store, deliverer, worker, run = start_with_a_slow_store(40)
    limit = (1 + RECORDING_FACTOR) * 2 + worker.prefetch
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            assert len(worker._held) <= limit
        assert len(deliverer.calls) == limit  # every held item was tried; the rest wait in the store
        assert store.recorded == 0
    finally:
        store.release.set()
    stats = await asyncio.wait_for(run, 5)
    assert stats.delivered == 40


# --- the suppression list ----------------------------------------------------------------------------


async def test_a_listed_recipient_fails_without_a_delivery_call_and_a_5_1_1_lists_the_next(
    recorder: Recorder, clock: FakeClock
) -> None:
    store = MemoryStore()
    store.suppress([Suppression("gone@example.org", REJECTED, clock.now(), None)])
    add(store, clock, recipients=("Gone@EXAMPLE.org",))
    add(store, clock, recipients=("gone@example.org", "new-gone@example.org", "fine@example.org"))
    deliverer = ScriptedDeliverer(script={"new-gone@example.org": [REJECTED]})
    await make_worker(store, clock, deliverer, DSN=False).run()
    # the local part keeps its case: Gone@ is another address than gone@, and is tried
    assert sorted(call.recipients for call in deliverer.calls) == [
        ("Gone@EXAMPLE.org",),
        ("new-gone@example.org", "fine@example.org"),
    ]
    failed = [kwargs for name, kwargs in recorder.events if name == "failed"]
    assert {f["recipient"]: f["reply"].code for f in failed} == {"gone@example.org": None, "new-gone@example.org": 550}
    listed = store.suppressed(["gone@example.org", "new-gone@example.org"], since=clock.now() - timedelta(days=1))
    assert listed["new-gone@example.org"].reply == REJECTED and listed["gone@example.org"].item_id is None


class LookUpFails(MemoryStore):
    """A memory store whose first `failures` suppression look-ups find the store out of reach."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.look_ups = 0

    def suppressed(self, addresses: Any, *, since: Any) -> Any:
        self.look_ups += 1
        if self.look_ups <= self.failures:
            raise QueueError(Code.STORE_UNAVAILABLE, "the store is out of reach")
        return super().suppressed(addresses, since=since)


def listed_and_fine(store: MemoryStore, clock: FakeClock) -> None:
    store.suppress([Suppression("gone@example.org", REJECTED, clock.now(), None)])
    add(store, clock, recipients=("gone@example.org", "fine@example.org"))


async def test_a_failed_look_up_is_told_and_made_again_before_any_address_is_mailed(
    recorder: Recorder, clock: FakeClock
) -> None:
    store = LookUpFails(1)
    listed_and_fine(store, clock)
    deliverer = ScriptedDeliverer()
    stats = await make_worker(store, clock, deliverer, DSN=False).run()
    assert store.look_ups == 2 and [call.recipients for call in deliverer.calls] == [("fine@example.org",)]
    assert recorder.names() == ["error", "failed", "delivered"]
    assert all(i.kept for i in store.list()) and stats.unreached is None  # the listed address's item kept failed


async def test_once_a_look_up_failing_every_try_stops_the_run_short_and_its_item_stays_due(
    recorder: Recorder, clock: FakeClock
) -> None:
    """Under a fake clock too the run ends: the tries are counted, and the item goes back due now."""
    store = LookUpFails(ONCE_TRIES)
    listed_and_fine(store, clock)
    deliverer = ScriptedDeliverer()
    stats = await asyncio.wait_for(make_worker(store, clock, deliverer).run(), 30)
    assert store.look_ups == ONCE_TRIES and deliverer.calls == []
    assert stats.unreached is not None and stats.unreached.code == Code.STORE_UNAVAILABLE
    assert recorder.names() == ["error"] * ONCE_TRIES
    (item,) = store.list()
    assert item.attempts == 0 and item.owner is None and item.next_attempt <= clock.now()
    await make_worker(store, clock, deliverer, DSN=False).run()  # the store answers again: a run reaches it
    assert [call.recipients for call in deliverer.calls] == [("fine@example.org",)]
    assert all(i.kept for i in store.list())  # the listed address's item kept failed


async def test_a_running_worker_gives_an_item_whose_look_up_failed_back_for_a_second(
    recorder: Recorder, clock: FakeClock
) -> None:
    store = LookUpFails(1)
    listed_and_fine(store, clock)
    deliverer = ScriptedDeliverer()
    parsed = load_settings({"HOSTNAME": "mq.test.example", "POLL_INTERVAL": 0.05})
    worker = Worker(store=store, settings=parsed, deliverer=deliverer, clock=clock, owner="w")
    run = asyncio.create_task(worker.run())
    for _ in range(200):
        if store.list()[0].next_attempt > clock.now():  # given back, due later
            break
        await asyncio.sleep(0.01)
    worker.stop()
    stats = await asyncio.wait_for(run, 10)
    assert deliverer.calls == [] and recorder.names() == ["error"] and stats.unreached is None
    (item,) = store.list()
    assert item.attempts == 0 and item.owner is None and item.next_attempt == clock.now() + timedelta(seconds=1)

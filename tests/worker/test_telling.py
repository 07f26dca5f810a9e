"""The worker's signals: the outcomes recorded together are told in one thread hand-off, each in its order."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from django_mailqueue import signals
from django_mailqueue.conf import load_settings
from django_mailqueue.core.clock import FakeClock
from django_mailqueue.core.items import NewItem
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.testing.fakes import REJECTED, ScriptedDeliverer
from django_mailqueue.worker import Worker, events

MESSAGE = b"From: a@example.com\r\nSubject: hi\r\n\r\nbody\r\n"


async def test_outcomes_recorded_together_are_told_in_few_thread_hand_offs(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    recipients = [(f"r{i}@example.org", f"s{i}@example.org") for i in range(40)]
    for pair in recipients:
        store.add(NewItem(sender="a@example.com", recipients=pair, message=MESSAGE), now=clock.now())
    hand_offs: list[int] = []
    sent = events.send_events

    def counted(sender: type, told: Sequence[events.Event]) -> None:
        hand_offs.append(len(told))
        sent(sender, told)

    monkeypatch.setattr(events, "send_events", counted)
    heard: list[tuple[str, Any, str]] = []

    def receive(sender: Any, signal: Any, **kwargs: Any) -> None:
        name = "delivered" if signal is signals.delivered else "failed"
        heard.append((name, kwargs["item_id"], kwargs["recipient"]))

    signals.delivered.connect(receive, weak=False, dispatch_uid="test-telling")
    signals.failed.connect(receive, weak=False, dispatch_uid="test-telling")
    try:
        settings = load_settings(
            {"HOSTNAME": "mq.test.example", "POLL_INTERVAL": 0.05, "CONCURRENCY": 20, "DSN": False}
        )
        deliverer = ScriptedDeliverer(script={f"s{i}@example.org": [REJECTED] for i in range(40)})
        worker = Worker(
            store=store, settings=settings, deliverer=deliverer, clock=clock, once=True, rng=random.Random(7)
        )
        stats = await worker.run()
    finally:
        signals.delivered.disconnect(dispatch_uid="test-telling")
        signals.failed.disconnect(dispatch_uid="test-telling")
    assert stats.delivered == 40 and stats.failed == 40
    # every outcome told once, each attempt's in its recipients' order, right after one another
    assert len(heard) == 80 and sum(hand_offs) == 80
    for first, second in zip(heard[::2], heard[1::2], strict=True):
        assert first[0] == "delivered" and second[0] == "failed" and first[1] == second[1]
    assert len({item_id for _, item_id, _ in heard}) == 40
    # one hand-off an attempt before: 40; now the outcomes a completion batch recorded go together
    assert len(hand_offs) <= 10, hand_offs

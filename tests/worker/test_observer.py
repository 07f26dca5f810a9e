"""The worker's observer (core/observer.py): told each recorded outcome's events, each attempt and session."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.dispatch import Signal
from django.test import override_settings

from django_mailqueue import signals
from django_mailqueue.conf import get_settings
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem, QueueItem
from django_mailqueue.stores import get_store
from django_mailqueue.worker import Worker
from tests.worker.conftest import STORES, MailWorld

MESSAGE = b"From: sender@origin.test\r\nSubject: observed\r\n\r\nbody\r\n"


class RecordingObserver:
    def __init__(self) -> None:
        self.told_events: list[tuple[list[str], QueueItem | None]] = []
        self.attempts: list[float] = []
        self.sessions: list[tuple[str, float]] = []

    def told(self, events: Sequence[tuple[Signal, dict[str, Any]]], *, item: QueueItem | None, now: datetime) -> None:
        names = {getattr(signals, n): n for n in ("delivered", "deferred", "failed", "dsn", "error")}
        self.told_events.append(([names[signal] for signal, _ in events], item))

    def attempt(self, seconds: float) -> None:
        self.attempts.append(seconds)

    def session(self, domain: str, seconds: float) -> None:
        self.sessions.append((domain, seconds))


async def test_the_observer_hears_what_the_signals_say(mail_world: MailWorld) -> None:
    observer = RecordingObserver()
    with override_settings(MAILQUEUE=mail_world.mailqueue(STORES["memory"])):
        store = get_store()
        now = SystemClock().now()
        first = store.add(
            NewItem(
                sender="sender@origin.test", recipients=("someone@dest.test", "greylisted@dest.test"), message=MESSAGE
            ),
            now=now,
        )
        second = store.add(NewItem(sender="", recipients=("rejected@dest.test",), message=MESSAGE), now=now)
        worker = Worker(store=store, settings=get_settings(), once=True, observer=observer)
        stats = await worker.run()
    assert (stats.delivered, stats.deferred, stats.failed) == (1, 1, 1)
    by_item = {item.id: sorted(names) for names, item in observer.told_events if item is not None}
    assert by_item == {first.id: ["deferred", "delivered"], second.id: ["failed"]}
    assert len(observer.attempts) == 2 and all(0 <= s < 30 for s in observer.attempts)
    assert [domain for domain, _ in observer.sessions] == ["dest.test", "dest.test"]
    assert worker.in_flight == 0 and worker.bytes_in_flight == 0

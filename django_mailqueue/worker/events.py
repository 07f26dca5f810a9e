"""Telling Django signals from the worker without blocking its event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from django.dispatch import Signal

from .. import signals

logger = logging.getLogger("django_mailqueue")

Event = tuple[Signal, dict[str, Any]]


def send_events(sender: type, events: Sequence[Event]) -> None:
    """Send each event in order; a receiver that raises is logged and ignored."""
    for signal, kwargs in events:
        for receiver, result in signal.send_robust(sender, **kwargs):
            if isinstance(result, BaseException):
                logger.error(
                    "a %s receiver raised and was ignored: %r",
                    _name(signal),
                    receiver,
                    exc_info=(type(result), result, result.__traceback__),
                )


async def tell(sender: type, events: Sequence[Event]) -> None:
    """Send `events` in a thread, in order: sync receivers (and async ones, which
    Django runs in their own loop) never block the worker's event loop."""
    # Most sites listen to few signals: skip the thread hop when nobody listens.
    listened = heard(sender, events)
    if listened:
        await asyncio.to_thread(send_events, sender, listened)


async def tell_batch(sender: type, batch: Sequence[Sequence[Event]]) -> list[None]:
    """Send the events of several outcomes in one thread hand-off, in order (`Batcher`'s write: the worker's
    outcomes recorded together are told together; each outcome's events stay in their order)."""
    await asyncio.to_thread(send_events, sender, [event for events in batch for event in events])
    return [None] * len(batch)


def heard(sender: type, events: Sequence[Event]) -> list[Event]:
    """The events some receiver listens to."""
    return [event for event in events if event[0].has_listeners(sender)]


def worker_signals_heard() -> bool:
    """Some receiver is connected to a signal an outcome is told with (any sender): else there is nothing to send."""
    return bool(
        signals.delivered.receivers
        or signals.failed.receivers
        or signals.deferred.receivers
        or signals.dsn.receivers
        or signals.error.receivers
    )


def _name(signal: Signal) -> str:
    for name in ("delivered", "deferred", "failed", "dsn", "error"):
        if getattr(signals, name) is signal:
            return name
    return "signal"

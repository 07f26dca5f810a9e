"""The retry schedule: when a deferred item is tried next, and when its recipients expire."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from ..conf import QueueSettings

#: At most this share of a delay is added at random, so deferred items spread out.
JITTER = 0.1


def next_attempt_after(
    settings: QueueSettings, *, now: datetime, attempts: int, rng: random.Random | None = None
) -> datetime:
    """When to try again after the `attempts`-th attempt (1 for the first).

    `RETRY_DELAYS[attempts - 1]`, the last delay repeating, plus up to 10% at
    random — never earlier than the configured delay.
    """
    delays = settings.retry_delays
    delay = delays[min(max(attempts, 1), len(delays)) - 1]
    spread = (rng or random).uniform(0, JITTER * delay)
    return now + timedelta(seconds=delay + spread)


def expired(settings: QueueSettings, *, created: datetime, now: datetime) -> bool:
    """The item has been queued `MAX_LIFETIME` or longer: its pending recipients fail."""
    return now - created >= timedelta(seconds=settings.max_lifetime)


def retry_until(settings: QueueSettings, *, created: datetime) -> datetime:
    return created + timedelta(seconds=settings.max_lifetime)


def delay_warning_due(settings: QueueSettings, *, created: datetime, now: datetime) -> bool:
    return settings.delay_warning is not None and now - created >= timedelta(seconds=settings.delay_warning)

"""Clocks: where the queue reads the time, so tests can move it by hand."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Anything with `now()` giving an aware UTC datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """The machine's clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that stands still until moved: `advance(seconds)` or `set(when)`."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(when: datetime) -> int:
    """An aware datetime as whole microseconds since the Unix epoch (exact)."""
    if when.tzinfo is None:
        raise ValueError("naive datetime: the queue keeps aware UTC times only")
    delta = when - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    """The aware UTC datetime `micros` microseconds after the Unix epoch."""
    return EPOCH + timedelta(microseconds=micros)

"""What a worker tells an observer (the Prometheus metrics): plain calls in its event loop, never I/O."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django.dispatch import Signal

    from .items import QueueItem


class Observer(Protocol):
    """Told by the worker (`Worker(observer=...)`) and its `Deliverer`, in the event loop.

    Each method must return at once: count, never wait (no store, socket or file).
    """

    def told(self, events: Sequence[tuple[Signal, dict[str, Any]]], *, item: QueueItem | None, now: datetime) -> None:
        """The signals about to be sent, with their arguments: one recorded attempt of `item` (an `error` for a
        lost message, each recipient's `delivered` / `deferred` / `failed`, the `dsn`s), or an `error` alone
        (`item` None)."""

    def attempt(self, seconds: float) -> None:
        """One attempt's delivery part (DNS and every session, not the store) took `seconds`."""

    def session(self, domain: str, seconds: float) -> None:
        """One session with one server (or one exchange on a reused connection) for the recipients of an attempt
        that share a destination, `domain` being the first one's, took `seconds`."""

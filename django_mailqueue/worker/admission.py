"""The worker's traffic-shaping steps: starting waiting items as their destinations allow, holding those of a
suspended destination without an attempt, giving back what waits too long, telling suspensions."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from .. import signals
from ..core.items import RecipientOutcome, RecipientState
from ..delivery.destinations import DestinationReport, suspended_reply
from .attempt import Attempt
from .events import Event, tell
from .record import AttemptOutcome
from .shaper import GIVE_BACK_AFTER, Hold, Ticket, Wait

if TYPE_CHECKING:
    from ..core.clock import Clock
    from ..core.observer import Observer
    from ..stores.base import QueueStore
    from .engine import WorkerStats
    from .flow import Flow
    from .shaper import Shaper

logger = logging.getLogger("django_mailqueue")


class ShapingSteps:
    """The `Worker`'s steps that traffic shaping changes (a mixin: the state is the worker's)."""

    if TYPE_CHECKING:
        store: QueueStore
        clock: Clock
        observer: Observer | None
        shaper: Shaper | None
        stats: WorkerStats
        _flow: Flow
        _waiting: deque[Attempt]
        _held: dict[uuid.UUID, Attempt]
        _running: set[asyncio.Task[None]]
        _stopping: asyncio.Event
        _blocked: int
        once: bool

        async def _attempt(self, attempt: Attempt) -> None: ...
        def _attempt_ended(self, task: asyncio.Task[None]) -> None: ...
        async def _record(self, attempt: Attempt, outcome: AttemptOutcome) -> None: ...
        async def _give_back_later(self, attempt: Attempt, *, seconds: float) -> None: ...

    def _start_waiting(self) -> None:
        """Start waiting items while slots are free, in order — passing over (traffic shaping) those whose
        destination is at its limit, and recording without an attempt those whose destinations are suspended."""
        blocked: deque[Attempt] = deque()
        waits: list[Wait] = []
        while self._waiting and not self._stopping.is_set():
            attempt = self._waiting[0]
            if attempt.lost:
                self._waiting.popleft()
                continue
            cost = self._flow.cost(attempt.item.size)
            if not self._flow.may_start(cost):
                break
            self._waiting.popleft()
            if self.shaper is not None:
                admission = self.shaper.admit(attempt.item)
                if isinstance(admission, Wait):
                    blocked.append(attempt)
                    waits.append(admission)
                    continue
                if isinstance(admission, Hold) and not attempt.listed:
                    self._hold(attempt, admission)
                    continue
                # a suspended item with recipients on the suppression list goes on: they fail now, the others
                # find the destination suspended in the deliverer and wait for its end (no attempt counted)
                attempt.ticket = admission if not isinstance(admission, Hold) else Ticket()
            attempt.cost = cost
            self._flow.start(cost)
            task = asyncio.create_task(self._attempt(attempt), name=f"mailqueue-attempt-{attempt.item.id}")
            attempt.task = task
            self._running.add(task)
            task.add_done_callback(self._attempt_ended)
        if blocked:
            self._waiting.extendleft(reversed(blocked))
        self._blocked = len(blocked)
        if len(blocked) > self._flow.prefetch and not self.once:  # --once delivers all that is due now
            self._give_back_blocked(list(blocked), waits)

    def _give_back_blocked(self, blocked: list[Attempt], waits: list[Wait]) -> None:
        """More items wait for busy destinations than the prefetch: those past it that would wait longer than
        `GIVE_BACK_AFTER` (a slow rate) go back to the store, each due when its destination may take it (no
        attempt counted), so they hold no room that other destinations' items could use."""
        assert self.shaper is not None
        places: dict[str, int] = {}
        later: list[tuple[Attempt, float]] = []
        for index, (attempt, wait) in enumerate(zip(blocked, waits, strict=True)):
            key = wait.policy.key
            places[key] = places.get(key, 0) + 1
            seconds = self.shaper.wait_estimate(wait.policy, places[key])
            if index >= self._flow.prefetch and seconds >= GIVE_BACK_AFTER:
                later.append((attempt, seconds))
                self._waiting.remove(attempt)
        if not later:
            return
        self._blocked -= len(later)
        task = asyncio.create_task(self._give_back_all(later), name="mailqueue-give-back")
        self._running.add(task)
        task.add_done_callback(self._attempt_ended)

    async def _give_back_all(self, later: list[tuple[Attempt, float]]) -> None:
        await asyncio.gather(*(self._give_back_later(attempt, seconds=seconds) for attempt, seconds in later))
        self.stats.given_back += len(later)

    def _hold(self, attempt: Attempt, hold: Hold) -> None:
        """Record the item without an attempt, due at the end of its destinations' suspension; no slot."""
        self._flow.hold()
        task = asyncio.create_task(self._record_held(attempt, hold), name=f"mailqueue-hold-{attempt.item.id}")
        attempt.task = task
        self._running.add(task)
        task.add_done_callback(self._attempt_ended)

    async def _record_held(self, attempt: Attempt, hold: Hold) -> None:
        item = attempt.item
        try:
            reply = suspended_reply(hold.suspension)
            outcomes = tuple(
                RecipientOutcome(r.address, RecipientState.PENDING, r.reply or reply, r.remote_mta)
                for r in item.pending
            )
            attempt.message = None
            await self._record(attempt, AttemptOutcome(outcomes, held_until=hold.suspension.until))
            self.stats.held += 1
        except Exception:  # noqa: BLE001 - one item's bug must not stop the worker
            logger.exception("recording the held item %s failed unexpectedly", item.id)
        finally:
            if self._held.get(item.id) is attempt:
                del self._held[item.id]
            self._flow.end_recording()

    async def _shape(self, reports: Sequence[DestinationReport]) -> datetime | None:
        """Act on what the attempt's destinations said (traffic shaping); tell each suspension it recorded.
        When a destination of it is suspended (now, or meanwhile by another attempt): the end of the latest
        suspension, when the item is tried again."""
        if self.shaper is None or not reports:
            return None
        made = await self.shaper.observe(reports)
        for suspension in made:
            self.stats.suspended += 1
            logger.warning(
                "suspended destination=%s until=%s strikes=%d after: %s",
                suspension.destination,
                suspension.until.isoformat(timespec="seconds"),
                suspension.strikes,
                suspension.reply,
            )
            event: Event = (
                signals.suspended,
                {"destination": suspension.destination, "reply": suspension.reply, "until": suspension.until},
            )
            if self.observer is not None:
                self.observer.told([event], item=None, now=self.clock.now())
            await tell(type(self.store), [event])
        if not made and not self.shaper.suspending:
            return None  # no suspension anywhere in the view: nothing for the item to wait for
        ends = [s.until for s in made]
        ends += [s.until for r in reports if (s := self.shaper.suspended(r.policy.key)) is not None]
        return max(ends, default=None)

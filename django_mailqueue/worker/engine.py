"""The worker engine: an asyncio loop that claims, delivers, records and tells, with leases renewed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from .. import signals
from ..conf import QueueSettings
from ..core.clock import Clock, SystemClock
from ..core.errors import Code, QueueError
from ..core.items import (
    QueueItem,
    RecipientOutcome,
    RecipientState,
)
from ..core.observer import Observer
from ..history import History, HistoryEntry
from ..stores.base import QueueStore
from .admission import ShapingSteps
from .attempt import PREFETCH_SIZE, Attempt, AttemptDeliverer, Retry
from .batching import Batcher
from .dsn import original_header_block
from .events import Event, tell, tell_batch
from .flow import RECORD_LINGER, Flow
from .log_limit import LogLimit
from .record import AttemptOutcome, message_lost, reclaimed_too_often
from .recording import Completing, RecordingSteps
from .shaper import BLOCKED_RECHECK, TICKET, Shaper
from .suppression import NOTHING_TRIED, cut_off, listed_from, listed_outcomes, look_up

logger = logging.getLogger("django_mailqueue")

#: With `once`: how many times a store call that reaches due mail (the claim, the suppression look-up, a message's
#: read) is tried before the run stops short (`WorkerStats.unreached`); the pauses double from 0.2 s, 3 s in all.
ONCE_TRIES = 5


@dataclass
class WorkerStats:
    """What a worker did, for `--once`'s summary and for tests."""

    claimed: int = 0
    delivered: int = 0
    deferred: int = 0
    failed: int = 0
    dsns: int = 0
    leases_lost: int = 0
    given_back: int = 0
    #: items recorded without an attempt, their destinations being suspended
    held: int = 0
    #: destinations this worker suspended
    suspended: int = 0
    errors: list[str] = field(default_factory=list)
    #: with `once`: the store error that left mail in the queue it could not deliver or record (the command
    #: exits 1); None when the run reached everything that was due
    unreached: QueueError | None = None


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker(ShapingSteps, RecordingSteps):
    """Delivers the queue of `store` until stopped (or, with `once`, until nothing is due).

    One asyncio loop holds up to `concurrency` attempts in flight. The store is
    only reached through its async methods, signal receivers run in a thread,
    so the loop never blocks. One timer renews every lease this worker holds at
    half the lease.
    """

    def __init__(
        self,
        *,
        store: QueueStore,
        settings: QueueSettings,
        deliverer: AttemptDeliverer | None = None,
        clock: Clock | None = None,
        owner: str | None = None,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        once: bool = False,
        rng: random.Random | None = None,
        prefetch: int | None = None,
        history: History | None = None,
        close_store: bool = False,
        observer: Observer | None = None,
        shaper: Shaper | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        if deliverer is None:
            from .factory import smtp_deliverer

            shaper = shaper or Shaper(settings, store, clock=self.clock, concurrency=concurrency)
            deliverer = smtp_deliverer(settings, clock=self.clock, observer=observer, shaper=shaper)
        self.deliverer = deliverer
        #: traffic shaping (None: none, e.g. a scripted deliverer's worker)
        self.shaper = shaper
        #: told what happened, in the loop (the Prometheus metrics): see core/observer.py
        self.observer = observer
        self.owner = owner or default_owner()
        self.queues = list(queues) if queues else None
        self.concurrency = concurrency or settings.concurrency
        self._flow = Flow.for_concurrency(self.concurrency, max_bytes=settings.max_bytes_in_flight, prefetch=prefetch)
        self.prefetch = self._flow.prefetch
        self.once = once
        self.history = history
        #: close the store (`aclose`) when the run ends: the worker was built for it (`build_worker`)
        self.close_store = close_store
        self.rng = rng or random.Random()
        self.stats = WorkerStats()
        #: the WARNINGs of delivery problems: one per destination, problem and minute
        self._warnings = LogLimit()
        self._stopping = asyncio.Event()
        self._held: dict[uuid.UUID, Attempt] = {}
        self._waiting: deque[Attempt] = deque()
        self._running: set[asyncio.Task[None]] = set()
        #: tasks of `_running` ended so far: with `once`, a claim that found nothing shows no due mail left only when
        #: none ended after it was asked for (an outcome's DSNs are due from its record, maybe after the claim's now)
        self._ended = 0
        #: set when a slot frees or an attempt ends: the loop may start or claim more
        self._changed = asyncio.Event()
        #: items waiting for a destination at its limit (traffic shaping): they hold no slot
        self._blocked = 0
        if shaper is not None:
            shaper.wake = self._changed.set
        self._wake: asyncio.Task[bool] | None = None
        #: the history's rows written in the completion's own transaction (the store says it can: the ORM store's
        #: database is the history's), else committed before it
        self._rows_with_outcome = history is not None and store.completes_with_history(history.alias)
        self._completions: Batcher[Completing, QueueItem | None | QueueError] = Batcher(
            self._write_completions,
            limit=100,
            linger=RECORD_LINGER,
            more_coming=lambda: self._flow.more_coming,
            enough=self._flow.batch_enough,
        )
        self._history: Batcher[HistoryEntry, None] = Batcher(
            self._write_history,
            limit=500,
            linger=RECORD_LINGER,
            more_coming=lambda: self._flow.more_coming,
            enough=self._flow.batch_enough,
        )
        #: the signals of outcomes recorded together, told in one thread hand-off (each attempt waits for its own)
        self._told: Batcher[Sequence[Event], None] = Batcher(lambda batch: tell_batch(type(self.store), batch))

    @property
    def bytes_in_flight(self) -> int:
        """Bytes counted against `MAX_BYTES_IN_FLIGHT` now (twice each message under way)."""
        return self._flow.bytes_in_flight

    @property
    def in_flight(self) -> int:
        """Attempts in their SMTP part now (at most `concurrency`)."""
        return self._flow.delivering

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.settings.lease)

    def stop(self) -> None:
        """Claim nothing more; let attempts under way finish; give back the rest."""
        self._stopping.set()
        self._changed.set()  # the loop's wait (`_idle`) ends

    # --- the loop -------------------------------------------------------------------

    async def run(self) -> WorkerStats:
        renewer = asyncio.create_task(self._renew_leases(), name="mailqueue-renew")
        try:
            await self._loop()
        finally:
            await self._give_back()
            if self._running:
                await asyncio.gather(*self._running, return_exceptions=True)
            await self._completions.close()
            await self._history.close()
            await self._told.close()
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            if self._wake is not None:
                self._wake.cancel()
                with contextlib.suppress(BaseException):
                    await self._wake
            await self.deliverer.aclose()
            if self.shaper is not None:
                await self.shaper.aclose()
            if self.history is not None:
                await self.history.aclose()
            if self.close_store:
                await self.store.aclose()
        return self.stats

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            self._changed.clear()
            if self.shaper is not None:
                self.shaper.refresh_soon()
            self._start_waiting()
            # Items waiting for a destination at its limit do not take the room of others (up to the prefetch).
            free = min(self._blocked, self._flow.prefetch)
            room = self._flow.room(len(self._held) - free)
            claimed: list[QueueItem] = []
            asked = self._flow.claim_now(room, len(self._waiting) - self._blocked)
            ended = self._ended
            if asked:
                claimed = await self._claim(room)
                self._start_waiting()
            if claimed:
                continue
            # Done when nothing is held or under way, and the empty claim was asked for after the last attempt
            # ended: one asked for before may have reached the store after its DSNs, due later than its now.
            if self.once and asked and not self._held and not self._running and ended == self._ended:
                return
            await self._idle(room > 0)

    async def _claim(self, room: int) -> list[QueueItem]:
        retry = Retry()
        while True:
            now = self.clock.now()
            try:
                batch = await self.store.aclaim_batch(
                    owner=self.owner, now=now, lease_expires=now + self.lease, queues=self.queues, limit=room,
                    suppressed_since=cut_off(self.settings.suppression, now), read_up_to=PREFETCH_SIZE,
                )  # fmt: skip
                break
            except QueueError as exc:
                await self._error(exc, None)
                if not self.once:
                    await self._sleep(min(5.0, self.settings.poll_interval))
                    return []
                if not await self._once_again(exc, retry):
                    return []
        claimed = batch.items
        if self.shaper is not None and claimed and self.shaper.stale:
            await self.shaper.refresh()  # the claimed items are admitted against a fresh view
        attempts = [Attempt(item) for item in claimed]
        for attempt in attempts:
            self.stats.claimed += 1
            self._held[attempt.item.id] = attempt
            self._waiting.append(attempt)
        # The suppression list could not be read: the attempts wait (given back), or with `once` it is read again.
        unknown = listed_from(batch, attempts)
        while unknown is not None:
            await self._error(unknown, None)
            if not (self.once and await self._once_again(unknown, retry)):
                break
            now = self.clock.now()
            unknown = await look_up(self.store, attempts, self.settings.suppression, now=now)
        if batch.messages_error is not None:
            await self._error(batch.messages_error, None)
        else:
            for attempt in attempts:
                if attempt.item.size <= PREFETCH_SIZE:
                    attempt.message, attempt.prefetched = batch.messages.get(attempt.item.id), True
        return claimed

    def _attempt_ended(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._ended += 1
        self._changed.set()

    def _end_delivery(self, attempt: Attempt) -> None:
        """The attempt's SMTP part is over: free its slot and its bytes; its outcome is recorded next."""
        if attempt.recording:
            return
        attempt.recording = True
        self._flow.end_delivery(attempt.cost)
        attempt.cost, attempt.message = 0, None
        if attempt.ticket is not None and self.shaper is not None:
            self.shaper.release(attempt.ticket)
            attempt.ticket = None
        self._changed.set()

    async def _idle(self, can_claim: bool) -> None:
        """Wait for an attempt to end, a stop, or (with room to claim) for new mail or the poll interval: each of
        them sets `_changed`, so a turn waits on that one event (no task, no `asyncio.wait` a turn)."""
        if can_claim and (self._wake is None or self._wake.done()):
            self._wake = asyncio.ensure_future(self.store.await_added(self.settings.poll_interval))
            self._wake.add_done_callback(self._woken)
        # More items wait for busy destinations than the prefetch: look again soon, their turn may be far off
        if self._blocked > self._flow.prefetch:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), BLOCKED_RECHECK)
        else:
            await self._changed.wait()

    def _woken(self, wake: asyncio.Future[bool]) -> None:
        """The store's wait for new mail ended (an add, or the poll interval): the loop claims again."""
        self._changed.set()

    async def _once_again(self, exc: QueueError, retry: Retry) -> bool:
        """With `once`, after the store error `exc` kept due mail out of reach: True after a pause (the retry's,
        doubling) while the call has tries left (`ONCE_TRIES`); else the run stops short — claims nothing more,
        gives back what it holds — keeping `exc` for its exit, and False."""
        retry.tries += 1
        if retry.tries < ONCE_TRIES:
            await self._sleep(retry.delay)
            retry.delay = min(retry.delay * 2, 2.0)
            return not self._stopping.is_set()
        self._stop_short(exc)
        return False

    def _stop_short(self, exc: QueueError) -> None:
        """With `once`: mail was left in the queue for `exc`; the run ends as soon as it can, and says so."""
        if self.stats.unreached is None:
            self.stats.unreached = exc
        self.stop()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _give_back(self) -> None:
        """Return claimed-but-unstarted items: due at once, no attempt counted."""
        while self._waiting:
            attempt = self._waiting.popleft()
            self._held.pop(attempt.item.id, None)
            if attempt.lost:
                continue
            try:
                if await self.store.areschedule(attempt.item.id, at=self.clock.now(), owner=self.owner):
                    self.stats.given_back += 1
            except QueueError as exc:
                await self._error(exc, attempt.item.id)

    async def _give_back_later(self, attempt: Attempt, *, seconds: float) -> None:
        """Let go of an item without an attempt counted, due again in `seconds`."""
        try:
            await self.store.areschedule(
                attempt.item.id, at=self.clock.now() + timedelta(seconds=seconds), owner=self.owner
            )
        except QueueError:
            pass  # the lease expires by itself, and the item is claimed again then
        self._held.pop(attempt.item.id, None)

    async def _renew_leases(self) -> None:
        interval = max(0.05, self.settings.lease / 2)
        while True:
            await asyncio.sleep(interval)
            ids = [item_id for item_id, attempt in self._held.items() if not attempt.lost]
            if not ids:
                continue
            try:
                expires = self.clock.now() + self.lease
                held = set(await self.store.arenew(ids, owner=self.owner, lease_expires=expires))
            except QueueError as exc:
                await self._error(exc, None)
                continue
            for item_id in ids:
                attempt = self._held.get(item_id)
                if item_id in held and attempt is not None:
                    attempt.lease_expires = expires
                if item_id not in held and attempt is not None and not attempt.lost:
                    await self._lose(attempt, "its lease was not renewed: another worker holds it, or it is gone")

    async def _lose(self, attempt: Attempt, why: str) -> None:
        """The lease is gone: an SMTP part under way is cut (another worker holds the item); an attempt past it
        goes on to write its history rows, marked `lease_lost`, and records nothing (`RecordingSteps._record`)."""
        attempt.lost = True
        self.stats.leases_lost += 1
        if attempt.task is not None and not attempt.task.done() and not attempt.recording:
            attempt.task.cancel()
        self._held.pop(attempt.item.id, None)
        await self._error(
            QueueError(
                Code.LEASE_LOST,
                f"lost the lease on {attempt.item.id}: {why}; nothing was recorded",
                item_id=attempt.item.id,
            ),
            attempt.item.id,
        )

    # --- one attempt ----------------------------------------------------------------

    async def _attempt(self, attempt: Attempt) -> None:
        item = attempt.item
        try:
            await self._deliver_item(attempt)
        except asyncio.CancelledError:
            if not attempt.lost:
                raise
        except Exception as exc:  # noqa: BLE001 - one item's bug must not stop the worker
            logger.exception("the attempt on %s failed unexpectedly", item.id)
            await self._error(
                QueueError(Code.INTERNAL, f"the attempt on {item.id} failed: {type(exc).__name__} (see the log)"),
                item.id,
            )
        finally:
            if self._held.get(item.id) is attempt:
                del self._held[item.id]
            self._end_delivery(attempt)
            self._flow.end_recording()

    async def _deliver_item(self, attempt: Attempt) -> None:
        item = attempt.item
        pending = item.pending
        if not pending:
            return
        if item.reclaims > self.settings.max_reclaims:
            outcomes = reclaimed_too_often(item)
            original = attempt.message if attempt.prefetched else await self.store.aread_message(item.id)
            headers = self._end_delivery_keeping_headers(attempt, outcomes, original)
            await self._record(attempt, AttemptOutcome(outcomes, headers=headers))
            return
        if attempt.listed is None:  # the suppression look-up failed (and was told): try again a little later
            await self._give_back_later(attempt, seconds=1.0)
            return
        retry = Retry()
        while True:
            try:
                message = attempt.message if attempt.prefetched else await self.store.aread_message(item.id)
                gone = message is None and await self.store.aget(item.id) is None
                break
            except QueueError as exc:  # the store is out of reach: try again a little later
                await self._error(exc, item.id)
                if not (self.once and await self._once_again(exc, retry)):
                    await self._give_back_later(attempt, seconds=1.0)
                    return
        if message is None:
            if gone:
                return  # cancelled, or finished by another worker: nothing to do
            outcomes = message_lost(item)
            self._end_delivery(attempt)
            await self._record(attempt, AttemptOutcome(outcomes, message_lost=True))
            return
        listed = attempt.listed  # on the suppression list: failed at once, not tried
        unlisted = [r.address for r in pending if r.address not in listed]
        TICKET.set(attempt.ticket)
        result = await self.deliverer.deliver(item.sender, unlisted, message) if unlisted else NOTHING_TRIED
        outcomes = (*listed_outcomes(listed), *result.outcomes)
        headers = self._end_delivery_keeping_headers(attempt, outcomes, message)
        del message
        retry_at = await self._shape(result.destinations)
        await self._record(
            attempt,
            AttemptOutcome(
                outcomes,
                possibly_delivered=result.possibly_delivered,
                errors=tuple(result.errors),
                headers=headers,
                listed=frozenset(listed),
                held_until=result.held_until,
                retry_at=retry_at,
            ),
        )

    def _end_delivery_keeping_headers(
        self, attempt: Attempt, outcomes: Sequence[RecipientOutcome], original: bytes | None
    ) -> bytes | None:
        """End the attempt's SMTP part; of its message keep only the header block a DSN may quote
        (when some recipient did not get it), so no message body waits for the record."""
        self._end_delivery(attempt)
        if original is None or not self.settings.dsn or attempt.item.sender == "":
            return None
        if all(o.state is RecipientState.DELIVERED for o in outcomes):
            return None
        return original_header_block(original)

    async def _error(self, error: QueueError, item_id: uuid.UUID | None) -> None:
        self.stats.errors.append(error.code)
        logger.warning("error item=%s %s", item_id, error)
        events: list[Event] = [(signals.error, {"error": error, "item_id": item_id})]
        if self.observer is not None:
            self.observer.told(events, item=None, now=self.clock.now())
        await tell(type(self.store), events)

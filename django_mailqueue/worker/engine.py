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
from typing import Any, Literal

from .. import signals
from ..conf import QueueSettings
from ..core.clock import Clock, SystemClock
from ..core.errors import Code, QueueError
from ..core.items import (
    CompleteRequest,
    Completion,
    QueueItem,
    RecipientOutcome,
    RecipientState,
    apply_completion,
)
from ..core.observer import Observer
from ..history import History, HistoryEntry
from ..stores.base import QueueStore
from .admission import ShapingSteps
from .attempt import PREFETCH_SIZE, Attempt, AttemptDeliverer, Retry
from .batching import Batcher
from .dsn import original_header_block
from .events import Event, tell
from .flow import RECORD_LINGER, Flow
from .log_limit import LogLimit
from .record import AttemptOutcome, Record, decide, message_lost, reclaimed_too_often
from .shaper import BLOCKED_RECHECK, TICKET, Shaper
from .suppression import NOTHING_TRIED, listed_outcomes, look_up

logger = logging.getLogger("django_mailqueue")


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


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker(ShapingSteps):
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
        #: set when a slot frees or an attempt ends: the loop may start or claim more
        self._changed = asyncio.Event()
        #: items waiting for a destination at its limit (traffic shaping): they hold no slot
        self._blocked = 0
        if shaper is not None:
            shaper.wake = self._changed.set
        self._wake: asyncio.Task[bool] | None = None
        self._completions: Batcher[CompleteRequest, QueueItem | None | QueueError] = Batcher(
            self.store.acomplete_many,
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
            if self._flow.claim_now(room, len(self._waiting) - self._blocked):
                claimed = await self._claim(room)
                self._start_waiting()
            if claimed:
                continue
            if self.once and not self._held and not self._running:
                return  # an attempt still telling or queueing a DSN may add due mail
            await self._idle(room > 0)

    async def _claim(self, room: int) -> list[QueueItem]:
        now = self.clock.now()
        try:
            claimed = await self.store.aclaim(
                owner=self.owner, now=now, lease_expires=now + self.lease, queues=self.queues, limit=room
            )
        except QueueError as exc:
            await self._error(exc, None)
            await self._sleep(min(5.0, self.settings.poll_interval))
            return []
        if self.shaper is not None and claimed and self.shaper.stale:
            await self.shaper.refresh()  # the claimed items are admitted against a fresh view
        attempts = [Attempt(item) for item in claimed]
        for attempt in attempts:
            self.stats.claimed += 1
            self._held[attempt.item.id] = attempt
            self._waiting.append(attempt)
        if (unknown := await look_up(self.store, attempts, self.settings.suppression, now=now)) is not None:
            await self._error(unknown, None)  # the suppression list could not be read: the attempts wait
        small = [a for a in attempts if a.item.size <= PREFETCH_SIZE]
        if small:
            try:
                found = await self.store.aread_messages([a.item.id for a in small])
            except QueueError as exc:
                await self._error(exc, None)
            else:
                for attempt in small:
                    attempt.message, attempt.prefetched = found.get(attempt.item.id), True
        return claimed

    def _attempt_ended(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
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
        """Wait for an attempt to end, or (with room to claim) for new mail or the poll interval."""
        changed = asyncio.ensure_future(self._changed.wait())
        stop = asyncio.ensure_future(self._stopping.wait())
        waits: set[asyncio.Future[Any]] = {changed, stop}
        if can_claim:
            if self._wake is None or self._wake.done():
                self._wake = asyncio.ensure_future(self.store.await_added(self.settings.poll_interval))
            waits.add(self._wake)
        # More items wait for busy destinations than the prefetch: look again soon, their turn may be far off
        recheck = BLOCKED_RECHECK if self._blocked > self._flow.prefetch else None
        try:
            await asyncio.wait(waits, timeout=recheck, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            changed.cancel()

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
        attempt.lost = True
        self.stats.leases_lost += 1
        if attempt.task is not None and not attempt.task.done():
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
        try:
            message = attempt.message if attempt.prefetched else await self.store.aread_message(item.id)
            gone = message is None and await self.store.aget(item.id) is None
        except QueueError as exc:  # the store is out of reach: try again a little later
            await self._error(exc, item.id)
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

    async def _record(self, attempt: Attempt, outcome: AttemptOutcome) -> None:
        """Write what `outcome` means (history rows, committed, then the completion with its DSNs in one
        store call) and tell it. A crash before the completion leaves the attempt unrecorded, and no DSN;
        a recorded outcome always has its history rows."""
        item = attempt.item
        record = decide(item, outcome, self.settings, now=self.clock.now(), rng=self.rng)
        if attempt.lost:
            return
        if self.history is not None and not await self._write_history_first(attempt, record.history()):
            return
        recorded, record = await self._complete(attempt, record)
        if recorded is False:
            return
        self._held.pop(item.id, None)
        if recorded is None:
            lease = attempt.lease_expires or item.lease_expires
            if lease is None or lease <= self.clock.now():  # now: the completion itself may have stalled
                self.stats.leases_lost += 1
                await self._error(
                    QueueError(
                        Code.LEASE_LOST,
                        f"the item {item.id} is gone and its lease had expired: "
                        "it was cancelled or finished by another worker; nothing was recorded",
                        item_id=item.id,
                    ),
                    item.id,
                )
                return
        # None with the lease held: cancelled while we held it. The outcomes are told; no DSN was added.
        await self._tell(record, with_dsns=recorded is not None)

    async def _tell(self, record: Record, *, with_dsns: bool) -> None:
        item = record.item
        for problem in record.problems:
            self._warn(problem, item.id)
        for lost in record.replies_lost:
            logger.warning("error item=%s %s", item.id, lost)  # an operator's grep finds the duplicate window
        for decided in record.decided:
            if not (record.held and decided.state is RecipientState.PENDING):
                self._log(item, decided)
        self.stats.delivered += record.count(RecipientState.DELIVERED)
        self.stats.failed += record.count(RecipientState.FAILED)
        if not record.held:
            self.stats.deferred += record.count(RecipientState.PENDING)
        if with_dsns:
            for note in record.dsns:
                self.stats.dsns += 1
                logger.info("dsn item=%s kind=%s dsn=%s to=<%s>", item.id, note.kind, note.item.id, item.sender)
        events = record.events(with_dsns=with_dsns)
        if self.observer is not None:
            self.observer.told(events, item=item, now=self.clock.now())
        await tell(type(self.store), events)

    async def _complete(self, attempt: Attempt, record: Record) -> tuple[QueueItem | None | Literal[False], Record]:
        """Record the outcome with its DSNs; while the store is out of reach, try again as long as the
        lease holds. When the queue has no room for the DSNs, DSN_FAILED is told and the outcome recorded
        without them. False when nothing could be recorded (the error is told)."""
        item, retry = attempt.item, Retry()
        while True:
            completion = record.completion
            try:
                answer = await self._completions.submit(CompleteRequest(item.id, self.owner, item.revision, completion))
                if isinstance(answer, QueueError):
                    raise answer
                if answer is None and retry.told:
                    return self._landed_before(item, completion), record
                return answer, record
            except QueueError as exc:
                if exc.code == Code.FULL and record.dsns:
                    for note in record.dsns:
                        why = f"the {note.kind} DSN for {item.id} could not be queued: {exc.message}"
                        await self._error(QueueError(Code.DSN_FAILED, why, item_id=item.id), item.id)
                    record = record.without_dsns()
                    continue
                if exc.code == Code.LEASE_LOST and retry.told:
                    landed = await self._landed_before_lease_lost(item, completion)
                    if landed is not None:
                        return landed, record
                if await self._pause_to_retry(attempt, exc, retry):
                    continue
                if exc.code == Code.LEASE_LOST:
                    if attempt.lost:
                        return False, record  # the lease renewer found it first, and counted and told it
                    # Marked before telling: the renewer must not count it again, nor cancel this task's tell.
                    attempt.lost = True
                    self.stats.leases_lost += 1
                if not retry.told or exc.code != Code.STORE_UNAVAILABLE:
                    await self._error(exc, item.id)
                if exc.code == Code.STORE_UNAVAILABLE:
                    await self._lease_ran_out(attempt)
                return False, record

    async def _lease_ran_out(self, attempt: Attempt, what: str = "the store") -> None:
        """The store (or `what`) stayed out of reach until the attempt's lease ran out (or was about to): nothing
        is recorded and another attempt delivers the item again — LEASE_LOST, as for a stalled worker."""
        if attempt.lost:
            return  # lost earlier, and told then
        attempt.lost = True
        self.stats.leases_lost += 1
        item_id = attempt.item.id
        await self._error(
            QueueError(
                Code.LEASE_LOST,
                f"lost the lease on {item_id}: {what} was out of reach until the lease ran out; nothing was "
                "recorded, and the item will be delivered again",
                item_id=item_id,
            ),
            item_id,
        )

    async def _pause_to_retry(self, attempt: Attempt, exc: QueueError, retry: Retry) -> bool:
        """After a failed store write: when the store is out of reach and the lease will still hold
        after the pause, tell the outage (once), pause (doubling up to 2 s, or a quarter of the lease: a
        lease renewed meanwhile holds for as long as the outage) and say True."""
        lease = attempt.lease_expires or attempt.item.lease_expires
        if (
            exc.code != Code.STORE_UNAVAILABLE
            or attempt.lost
            or lease is None
            or self.clock.now() + timedelta(seconds=retry.delay) >= lease
        ):
            return False
        if not retry.told:
            await self._error(exc, attempt.item.id)
            retry.told = True
        await asyncio.sleep(retry.delay)
        retry.delay = min(retry.delay * 2, 2.0, self.settings.lease / 4)
        return True

    def _landed_before(self, item: QueueItem, completion: Completion) -> QueueItem:
        """The item as an earlier try of this completion left it.

        A try that failed with STORE_UNAVAILABLE may have been applied all the same (the
        store committed, then the connection broke before its answer came back). Retries
        only happen while this worker's lease holds, so no other worker can have taken the
        item meanwhile: finding it gone (or moved on) then means our own earlier try landed
        — or, rarely, an operator acted at that moment. Either way the outcome is told and
        its DSNs kept: a DSN sent twice is better than one lost.
        """
        logger.info("the store lost its answer to the completion of %s; the earlier try was recorded", item.id)
        return apply_completion(item, completion)

    async def _landed_before_lease_lost(self, item: QueueItem, completion: Completion) -> QueueItem | None:
        """After a lost answer, LEASE_LOST: the item as our earlier try left it when the store shows
        exactly that (released, one revision on, our outcomes), else None (another change won)."""
        try:
            current = await self.store.aget(item.id)
        except QueueError:
            return self._landed_before(item, completion)  # cannot tell: keep the DSNs rather than lose them
        expected = apply_completion(item, completion)
        if (
            current is not None
            and current.owner is None
            and current.revision == expected.revision
            and current.recipients == expected.recipients
        ):
            return self._landed_before(item, completion)
        return None

    async def _write_history_first(self, attempt: Attempt, entries: Sequence[HistoryEntry]) -> bool:
        """Write `entries` (with other attempts' in one batch), committed, before the outcome is recorded;
        while the database refuses them, try again as long as the lease holds (renewed meanwhile). False
        when it ran out first: nothing is recorded, LEASE_LOST is told. Duplicated, never missing:
        docs/reliability.md, "History before the outcome"."""
        retry, pending = Retry(), list(entries)
        while pending:
            answers = await asyncio.gather(*(self._history.enqueue(e) for e in pending), return_exceptions=True)
            failed = [(entry, answer) for entry, answer in zip(pending, answers, strict=True) if answer is not None]
            pending = [entry for entry, _ in failed]
            if not failed:
                return True
            exc = failed[0][1]
            if not isinstance(exc, QueueError):
                raise exc
            if await self._pause_to_retry(attempt, exc, retry):
                continue
            if not retry.told:
                await self._error(exc, attempt.item.id)
            await self._lease_ran_out(attempt, "the database of the delivery history")
            return False
        return True

    async def _write_history(self, entries: list[HistoryEntry]) -> list[None]:
        if self.history is not None:
            await self.history.arecord(entries)
        return [None] * len(entries)

    async def _error(self, error: QueueError, item_id: uuid.UUID | None) -> None:
        self.stats.errors.append(error.code)
        logger.warning("error item=%s %s", item_id, error)
        events: list[Event] = [(signals.error, {"error": error, "item_id": item_id})]
        if self.observer is not None:
            self.observer.told(events, item=None, now=self.clock.now())
        await tell(type(self.store), events)

    def _warn(self, error: QueueError, item_id: uuid.UUID) -> None:
        """The WARNING of an `error` the delivery reported: one per destination (else message), problem and
        minute; how many were held back goes with the next."""
        key = (error.code, getattr(error, "destination", None) or error.message)
        held = self._warnings.admit(key, self.clock.now().timestamp())
        if held is not None:
            more = f" (and {held} more like it since the last such line)" if held else ""
            logger.warning("error item=%s %s%s", item_id, error, more)

    def _log(self, item: QueueItem, outcome: RecipientOutcome) -> None:
        reply = outcome.reply
        logger.info(
            "%s item=%s to=<%s> relay=%s status=%s (%s)",
            {"delivered": "delivered", "failed": "failed", "pending": "deferred"}[outcome.state.value],
            item.id,
            outcome.address,
            outcome.remote_mta or "none",
            reply.status,
            reply,
        )

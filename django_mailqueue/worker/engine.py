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
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .. import signals
from ..conf import QueueSettings
from ..core.clock import Clock, SystemClock
from ..core.errors import Code, QueueError
from ..core.items import (
    CompleteRequest,
    Completion,
    NewItem,
    QueueItem,
    Recipient,
    RecipientOutcome,
    RecipientState,
    Reply,
    apply_completion,
)
from ..history import History, HistoryEntry
from ..stores.base import QueueStore
from .batching import Batcher
from .dsn import DsnKind, DsnReport, build_dsn, original_header_block
from .events import Event, tell
from .log_limit import LogLimit
from .retries import delay_warning_due, expired, next_attempt_after, retry_until

if TYPE_CHECKING:
    from ..delivery import AttemptResult

logger = logging.getLogger("django_mailqueue")

UNREADABLE = Reply(None, "5.3.0", "Message unreadable: the queue store holds the item but not its message")


class AttemptDeliverer(Protocol):
    """What the worker needs of the delivery layer (`django_mailqueue.delivery.Deliverer`)."""

    async def deliver(self, sender: str, recipients: Sequence[str], message: bytes) -> AttemptResult: ...

    async def aclose(self) -> None: ...


@dataclass
class _Attempt:
    item: QueueItem
    task: asyncio.Task[None] | None = None
    lost: bool = False
    #: the message, when it was read with the claim (small messages are)
    message: bytes | None = None
    prefetched: bool = False
    #: bytes counted against MAX_BYTES_IN_FLIGHT while the attempt runs
    cost: int = 0
    #: when the lease ends, as last claimed or renewed
    lease_expires: datetime | None = None
    #: the SMTP part is over and its slot free: the outcome is being recorded
    recording: bool = False


@dataclass
class _Retry:
    """A store write tried again while the store is out of reach and the lease holds."""

    delay: float = 0.2
    #: the outage was told — and an earlier try may have been applied, its answer lost
    told: bool = False


#: Messages up to this size are read in one call right after the claim; larger ones when their attempt starts.
PREFETCH_SIZE = 256 * 1024

#: Items claimed ahead of the free slots, in `CONCURRENCY`s: the larger the claims, the fewer claim
#: transactions per message (one claim is made once half of them have started).
PREFETCH_FACTOR = 3

#: How long an outcome (or a history row) waits for others' company before its store call, while other
#: attempts are still delivering — or until `RECORD_FILL` × `CONCURRENCY` of them are ready: fewer,
#: larger batches cost far less CPU per message. The attempt's `CONCURRENCY` slot is already free by
#: then, so the wait does not slow delivery.
RECORD_LINGER = 0.05
RECORD_FILL = 3
#: Items whose outcomes are being recorded a worker holds at most, in `CONCURRENCY`s (beyond this
#: it claims nothing more until the store catches up): two batches' worth, one lingering, one written.
RECORDING_FACTOR = 2 * RECORD_FILL


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
    errors: list[str] = field(default_factory=list)


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
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
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        if deliverer is None:
            from ..delivery import Deliverer
            from ..delivery.smtp import CACHE_TIME, SmtpTransport

            deliverer = Deliverer(settings, clock=self.clock, transport=SmtpTransport(cache_time=CACHE_TIME))
        self.deliverer = deliverer
        self.owner = owner or default_owner()
        self.queues = list(queues) if queues else None
        self.concurrency = concurrency or settings.concurrency
        self.prefetch = prefetch if prefetch is not None else PREFETCH_FACTOR * self.concurrency
        self.once = once
        self.history = history
        self.rng = rng or random.Random()
        self.stats = WorkerStats()
        #: the WARNINGs of delivery problems: one per destination, problem and minute
        self._warnings = LogLimit()
        self._stopping = asyncio.Event()
        self._held: dict[uuid.UUID, _Attempt] = {}
        self._waiting: deque[_Attempt] = deque()
        self._running: set[asyncio.Task[None]] = set()
        #: attempts in their SMTP part (at most `concurrency`), and those recording their outcome
        self._delivering = 0
        self._recording = 0
        #: set when a slot frees or an attempt ends: the loop may start or claim more
        self._changed = asyncio.Event()
        self._wake: asyncio.Task[bool] | None = None
        self._bytes_in_flight = 0
        self._completions: Batcher[CompleteRequest, QueueItem | None | QueueError] = Batcher(
            self.store.acomplete_many,
            limit=100,
            linger=RECORD_LINGER,
            more_coming=self._more_coming,
            enough=RECORD_FILL * self.concurrency,
        )
        self._history: Batcher[HistoryEntry, None] = Batcher(
            self._write_history,
            limit=500,
            linger=RECORD_LINGER,
            more_coming=self._more_coming,
            enough=RECORD_FILL * self.concurrency,
        )

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
            if self.history is not None:
                await self.history.aclose()
        return self.stats

    def _more_coming(self) -> bool:
        """Other attempts are delivering, so more outcomes will be ready soon."""
        return self._delivering > 0

    def _room(self) -> int:
        """How many more items to claim: slots and prefetch not taken by items waiting or delivering —
        and, however many outcomes are being recorded (a slow store), never more than `_hold_limit` held."""
        busy = len(self._held) - self._recording
        return min(self.concurrency + self.prefetch - busy, self._hold_limit - len(self._held))

    @property
    def _hold_limit(self) -> int:
        """Items held at most: those delivering or claimed ahead, plus up to `RECORDING_FACTOR` × CONCURRENCY
        whose outcomes are being recorded (each keeps a lease and a header block; a busy worker has up to
        `RECORD_LINGER` of them waiting, and a batch being written)."""
        return (1 + RECORDING_FACTOR) * self.concurrency + self.prefetch

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            self._changed.clear()
            self._start_waiting()
            room = self._room()
            claimed: list[QueueItem] = []
            # Claim in batches (half the prefetch at least) unless nothing is left waiting:
            # a claim per finished attempt would cost a store round trip per message.
            if room > 0 and (not self._waiting or room >= max(1, self.prefetch // 2)):
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
        attempts = [_Attempt(item) for item in claimed]
        for attempt in attempts:
            self.stats.claimed += 1
            self._held[attempt.item.id] = attempt
            self._waiting.append(attempt)
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

    def _start_waiting(self) -> None:
        while self._waiting and self._delivering < self.concurrency and not self._stopping.is_set():
            attempt = self._waiting[0]
            if attempt.lost:
                self._waiting.popleft()
                continue
            # Each message counts twice (as read, and as written to the socket); one that is
            # larger than the whole budget still goes, alone.
            cost = 2 * attempt.item.size
            if self._bytes_in_flight and self._bytes_in_flight + cost > self.settings.max_bytes_in_flight:
                break
            self._waiting.popleft()
            attempt.cost = cost
            self._bytes_in_flight += cost
            self._delivering += 1
            task = asyncio.create_task(self._attempt(attempt), name=f"mailqueue-attempt-{attempt.item.id}")
            attempt.task = task
            self._running.add(task)
            task.add_done_callback(self._attempt_ended)

    def _attempt_ended(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._changed.set()

    def _end_delivery(self, attempt: _Attempt) -> None:
        """The attempt's SMTP part is over: free its slot and its bytes; its outcome is recorded next."""
        if attempt.recording:
            return
        attempt.recording = True
        self._delivering -= 1
        self._recording += 1
        self._bytes_in_flight -= attempt.cost
        attempt.cost, attempt.message = 0, None
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
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
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

    async def _give_back_later(self, attempt: _Attempt, *, seconds: float) -> None:
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

    async def _lose(self, attempt: _Attempt, why: str) -> None:
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

    async def _attempt(self, attempt: _Attempt) -> None:
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
            self._recording -= 1

    async def _deliver_item(self, attempt: _Attempt) -> None:
        item = attempt.item
        pending = item.pending
        if not pending:
            return
        if item.reclaims > self.settings.max_reclaims:
            reply = Reply(
                None,
                "5.4.0",
                f"the item was reclaimed {item.reclaims} times without an outcome: each attempt lost its worker",
            )
            outcomes = tuple(RecipientOutcome(r.address, RecipientState.FAILED, reply) for r in pending)
            original = attempt.message if attempt.prefetched else await self.store.aread_message(item.id)
            headers = self._end_delivery_keeping_headers(attempt, outcomes, original)
            await self._record(
                attempt, outcomes, possibly_delivered=frozenset(), errors=(), headers=headers, message_lost=False
            )
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
            outcomes = tuple(RecipientOutcome(r.address, RecipientState.FAILED, UNREADABLE) for r in pending)
            self._end_delivery(attempt)
            await self._record(
                attempt, outcomes, possibly_delivered=frozenset(), errors=(), headers=None, message_lost=True
            )
            return
        result = await self.deliverer.deliver(item.sender, [r.address for r in pending], message)
        headers = self._end_delivery_keeping_headers(attempt, result.outcomes, message)
        del message
        await self._record(
            attempt,
            result.outcomes,
            possibly_delivered=result.possibly_delivered,
            errors=tuple(result.errors),
            headers=headers,
            message_lost=False,
        )

    def _end_delivery_keeping_headers(
        self, attempt: _Attempt, outcomes: Sequence[RecipientOutcome], original: bytes | None
    ) -> bytes | None:
        """End the attempt's SMTP part; of its message keep only the header block a DSN may quote
        (when some recipient did not get it), so no message body waits for the record."""
        self._end_delivery(attempt)
        if original is None or not self.settings.dsn or attempt.item.sender == "":
            return None
        if all(o.state is RecipientState.DELIVERED for o in outcomes):
            return None
        return original_header_block(original)

    async def _record(
        self,
        attempt: _Attempt,
        outcomes: Sequence[RecipientOutcome],
        *,
        possibly_delivered: frozenset[str],
        errors: Sequence[QueueError],
        headers: bytes | None,
        message_lost: bool,
    ) -> None:
        item = attempt.item
        now = self.clock.now()
        number = item.attempts + 1
        if expired(self.settings, created=item.created, now=now):
            outcomes = [
                replace(o, state=RecipientState.FAILED) if o.state is RecipientState.PENDING else o for o in outcomes
            ]
        still_pending = [o for o in outcomes if o.state is RecipientState.PENDING]
        warn = (
            bool(still_pending)
            and not item.delay_warned
            and self.settings.dsn
            and item.sender != ""
            and delay_warning_due(self.settings, created=item.created, now=now)
        )
        next_attempt = next_attempt_after(self.settings, now=now, attempts=number, rng=self.rng)
        completion = Completion(tuple(outcomes), next_attempt=next_attempt, delay_warned=warn)
        if attempt.lost:
            return
        newly_failed: list[Recipient] = []
        delayed: list[Recipient] = []
        by_address = {o.address: o for o in outcomes}
        for recipient in item.pending:
            decided = by_address.get(recipient.address)
            if decided is None:
                continue
            as_kept = Recipient(recipient.address, decided.state, decided.reply, decided.remote_mta)
            if decided.state is RecipientState.FAILED:
                newly_failed.append(as_kept)
            elif decided.state is RecipientState.PENDING:
                delayed.append(as_kept)
        # The history and the DSNs are written before the outcome is recorded: a crash in
        # between leaves a record of an attempt that is then made again, and may send a DSN
        # twice — never loses either.
        if self.history is not None:
            await self._write_history_first(
                [
                    HistoryEntry(
                        item=item,
                        outcome=o,
                        attempt=number,
                        recorded=now,
                        possibly_delivered=o.address in possibly_delivered,
                    )
                    for o in outcomes
                ]
            )
        dsns: list[tuple[DsnKind, NewItem, list[Recipient]]] = []
        if self.settings.dsn and item.sender != "":
            if newly_failed:
                dsns.append(("failed", self._build_dsn("failed", item, newly_failed, now, headers), newly_failed))
            if warn and delayed:
                dsns.append(("delayed", self._build_dsn("delayed", item, delayed, now, headers), delayed))
            queued: list[tuple[DsnKind, NewItem, list[Recipient]]] = []
            for entry in dsns:
                answer = await self._queue_dsn(attempt, entry[0], entry[1], now)
                if answer == "unreachable" and item.reclaims < self.settings.max_reclaims:
                    # The store stayed out of reach for the whole lease: record nothing (the
                    # outcome could not be written either, most likely), and let the item be
                    # tried again once its lease has expired — its DSN with it. (Bounded: an
                    # item reclaimed too often is failed, and recorded whatever its DSN does.)
                    await self._drop_dsns(queued)
                    await self._lease_ran_out(attempt)
                    return
                if answer == "queued":
                    queued.append(entry)
            dsns = queued
        recorded = await self._complete(attempt, completion)
        if recorded is False:
            await self._drop_dsns(dsns)
            return
        self._held.pop(item.id, None)
        told_dsn = True
        if recorded is None:
            lease = attempt.lease_expires or item.lease_expires
            if lease is None or lease <= self.clock.now():  # now: the completion itself may have stalled
                self.stats.leases_lost += 1
                await self._drop_dsns(dsns)
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
            told_dsn = False  # cancelled while we held it: tell the outcomes, send no DSN
            await self._drop_dsns(dsns)
        events: list[Event] = []
        sender = type(self.store)
        if message_lost:
            unreadable = QueueError(
                Code.MESSAGE_UNREADABLE,
                f"The message of {item.id} is unreadable: the store holds the item but not "
                "its message, so every pending recipient failed",
                item_id=item.id,
            )
            self._warn(unreadable, item.id)
            events.append((signals.error, {"error": unreadable, "item_id": item.id}))
        for problem in errors:
            self._warn(problem, item.id)
            events.append((signals.error, {"error": problem, "item_id": item.id}))
        for address in sorted(possibly_delivered):
            lost = QueueError(
                Code.REPLY_LOST,
                f"the reply after the end of data for {address} was lost: {item.id} may have been "
                "delivered to it already and will be tried again",
                item_id=item.id,
            )
            logger.warning("error item=%s %s", item.id, lost)  # an operator's grep finds the duplicate window
            events.append((signals.error, {"error": lost, "item_id": item.id}))
        for recipient in item.pending:
            decided = by_address.get(recipient.address)
            if decided is None:
                continue
            kwargs: dict[str, Any] = {
                "item_id": item.id,
                "recipient": recipient.address,
                "reply": decided.reply,
                "attempt": number,
            }
            self._log(item, decided)
            if decided.state is RecipientState.DELIVERED:
                self.stats.delivered += 1
                events.append((signals.delivered, kwargs))
            elif decided.state is RecipientState.FAILED:
                self.stats.failed += 1
                events.append((signals.failed, kwargs))
            else:
                self.stats.deferred += 1
                events.append((signals.deferred, {**kwargs, "next_attempt": next_attempt}))
        if told_dsn:
            for kind, dsn, recipients in dsns:
                self.stats.dsns += 1
                logger.info("dsn item=%s kind=%s dsn=%s to=<%s>", item.id, kind, dsn.id, item.sender)
                events.append(
                    (
                        signals.dsn,
                        {
                            "kind": kind,
                            "dsn_id": dsn.id,
                            "of": item.id,
                            "to": item.sender,
                            "recipients": [r.address for r in recipients],
                        },
                    )
                )
        await tell(sender, events)

    async def _complete(self, attempt: _Attempt, completion: Completion) -> QueueItem | None | Literal[False]:
        """Record the outcome; while the store is out of reach, try again as long as the lease
        holds. False when nothing could be recorded (the error is told)."""
        item, retry = attempt.item, _Retry()
        while True:
            try:
                answer = await self._completions.submit(CompleteRequest(item.id, self.owner, item.revision, completion))
                if isinstance(answer, QueueError):
                    raise answer
                if answer is None and retry.told:
                    return self._landed_before(item, completion)
                return answer
            except QueueError as exc:
                if exc.code == Code.LEASE_LOST and retry.told:
                    landed = await self._landed_before_lease_lost(item, completion)
                    if landed is not None:
                        return landed
                if await self._pause_to_retry(attempt, exc, retry):
                    continue
                if exc.code == Code.LEASE_LOST:
                    self.stats.leases_lost += 1
                if not retry.told or exc.code != Code.STORE_UNAVAILABLE:
                    await self._error(exc, item.id)
                if exc.code == Code.STORE_UNAVAILABLE:
                    await self._lease_ran_out(attempt)
                return False

    async def _lease_ran_out(self, attempt: _Attempt) -> None:
        """The store stayed out of reach until the attempt's lease ran out (or was about to): nothing
        is recorded and another attempt delivers the item again — LEASE_LOST, as for a stalled worker."""
        if attempt.lost:
            return  # lost earlier, and told then
        attempt.lost = True
        self.stats.leases_lost += 1
        item_id = attempt.item.id
        await self._error(
            QueueError(
                Code.LEASE_LOST,
                f"lost the lease on {item_id}: the store was out of reach until the lease ran out; nothing was "
                "recorded, and the item will be delivered again",
                item_id=item_id,
            ),
            item_id,
        )

    async def _pause_to_retry(self, attempt: _Attempt, exc: QueueError, retry: _Retry) -> bool:
        """After a failed store write: when the store is out of reach and the lease will still hold
        after the pause, tell the outage (once), pause (doubling up to 2 s) and say True."""
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
        retry.delay = min(retry.delay * 2, 2.0)
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

    async def _write_history_first(self, entries: Sequence[HistoryEntry]) -> None:
        """Write `entries` (with other attempts' in one batch), waiting at most a quarter of the lease:
        a slow database must not cost the lease. Past that the write goes on in the background."""
        if not entries:
            return
        written = asyncio.gather(*(self._history.enqueue(entry) for entry in entries))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(written), timeout=max(0.5, self.settings.lease / 4))

    async def _write_history(self, entries: list[HistoryEntry]) -> list[None]:
        if self.history is not None:
            await self.history.arecord(entries)
        return [None] * len(entries)

    def _build_dsn(
        self, kind: DsnKind, item: QueueItem, recipients: Sequence[Recipient], now: datetime, headers: bytes | None
    ) -> NewItem:
        report = DsnReport(
            kind=kind,
            item=item,
            recipients=recipients,
            reporting_mta=self.settings.hostname,
            last_attempt=now,
            retry_until=retry_until(self.settings, created=item.created) if kind == "delayed" else None,
            original_headers=headers,
        )
        return build_dsn(report, now=now)

    async def _queue_dsn(
        self, attempt: _Attempt, kind: DsnKind, dsn: NewItem, now: datetime
    ) -> Literal["queued", "refused", "unreachable"]:
        """Queue one DSN; while the store is out of reach, try again as long as the lease holds.

        "refused": the store said no (a full queue, …): DSN_FAILED is told and the outcome
        is recorded all the same. "unreachable": the store stayed out of reach.
        """
        item, retry = attempt.item, _Retry()
        while True:
            try:
                # A try that failed may have been applied (its answer lost): never add it twice.
                if retry.told and await self.store.aget(dsn.id) is not None:
                    return "queued"
                await self.store.aadd(dsn, now=now)
                return "queued"
            except QueueError as exc:
                if await self._pause_to_retry(attempt, exc, retry):
                    continue
                why = f"the {kind} DSN for {item.id} could not be queued: {exc.message}"
                await self._error(QueueError(Code.DSN_FAILED, why, item_id=item.id), item.id)
                return "unreachable" if exc.code == Code.STORE_UNAVAILABLE else "refused"

    async def _drop_dsns(self, dsns: Sequence[tuple[DsnKind, NewItem, list[Recipient]]]) -> None:
        """Take back DSNs queued for an outcome that was not recorded after all."""
        for _, dsn, _ in dsns:
            try:
                await self.store.acancel(dsn.id)
            except QueueError as exc:
                await self._error(exc, dsn.id)

    async def _error(self, error: QueueError, item_id: uuid.UUID | None) -> None:
        self.stats.errors.append(error.code)
        logger.warning("error item=%s %s", item_id, error)
        await tell(type(self.store), [(signals.error, {"error": error, "item_id": item_id})])

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

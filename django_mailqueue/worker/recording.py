"""The worker's recording steps: an attempt's outcome written — its history rows first, then the completion with
its DSNs in one store call, tried again while the lease holds — and told; an answer the store lost, found landed."""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

from ..core.errors import Code, QueueError
from ..core.items import CompleteRequest, Completion, QueueItem, RecipientOutcome, RecipientState, apply_completion
from ..history import HistoryEntry
from .attempt import Attempt, Retry
from .events import Event, heard, worker_signals_heard
from .record import AttemptOutcome, Record, decide

if TYPE_CHECKING:
    from ..conf import QueueSettings
    from ..core.clock import Clock
    from ..core.observer import Observer
    from ..history import History
    from ..stores.base import QueueStore
    from .batching import Batcher
    from .engine import WorkerStats
    from .log_limit import LogLimit

logger = logging.getLogger("django_mailqueue")

#: A completion and the history rows written in its transaction (none unless the store `completes_with_history`).
Completing = tuple[CompleteRequest, Sequence[HistoryEntry]]


class RecordingSteps:
    """The `Worker`'s steps from an attempt's outcome to its record and its telling (a mixin: the state is the
    worker's)."""

    if TYPE_CHECKING:
        store: QueueStore
        settings: QueueSettings
        clock: Clock
        rng: random.Random
        owner: str
        once: bool
        history: History | None
        observer: Observer | None
        stats: WorkerStats
        _held: dict[uuid.UUID, Attempt]
        _warnings: LogLimit
        _completions: Batcher[Completing, QueueItem | None | QueueError]
        _rows_with_outcome: bool
        _history: Batcher[HistoryEntry, None]
        _told: Batcher[Sequence[Event], None]

        async def _error(self, error: QueueError, item_id: uuid.UUID | None) -> None: ...
        def _stop_short(self, exc: QueueError) -> None: ...

    async def _record(self, attempt: Attempt, outcome: AttemptOutcome) -> None:
        """Write what `outcome` means (history rows, committed, then the completion with its DSNs in one
        store call — or both in one transaction where the store `completes_with_history`) and tell it. A
        crash before the completion leaves the attempt unrecorded, and no DSN; a recorded outcome always has
        its history rows."""
        item = attempt.item
        record = decide(item, outcome, self.settings, now=self.clock.now(), rng=self.rng)
        if attempt.lost:  # the renewer found the lease gone once the SMTP part was over: the rows, marked
            await self._write_unrecorded(attempt, record.history())
            return
        rows: Sequence[HistoryEntry] = ()
        rows_first = self.history is not None and not self._rows_with_outcome
        if self.history is not None:
            if self._rows_with_outcome:
                rows = record.history()
            elif not await self._write_history_first(attempt, record.history()):
                return
        recorded, record = await self._complete(attempt, record, rows)
        if recorded is False:
            if attempt.lost and rows_first:  # written as the outcome's, which was then not recorded
                await self._mark_unrecorded(attempt, record)
            return
        self._held.pop(item.id, None)
        if recorded is None:
            lease = attempt.lease_expires or item.lease_expires
            if lease is None or lease <= self.clock.now():  # now: the completion itself may have stalled
                if not attempt.lost:  # else the renewer found it first, and counted and told it
                    attempt.lost = True
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
                await self._mark_unrecorded(attempt, record)  # written first, or with the completion
                return
        # None with the lease held: cancelled while we held it. The outcomes are told; no DSN was added.
        await self._tell(record, with_dsns=recorded is not None)

    async def _tell(self, record: Record, *, with_dsns: bool) -> None:
        item = record.item
        for problem in record.problems:
            self._warn(problem, item.id)
        for lost in record.replies_lost:
            logger.warning("error item=%s %s", item.id, lost)  # an operator's grep finds the duplicate window
        if logger.isEnabledFor(logging.INFO):  # the line's arguments are not even made otherwise
            for decided in record.decided:
                if not (record.held and decided.state is RecipientState.PENDING):
                    self._log(item, decided)
        stats = self.stats
        for decided in record.decided:  # one pass, not one a state
            state = decided.state
            if state is RecipientState.DELIVERED:
                stats.delivered += 1
            elif state is RecipientState.FAILED:
                stats.failed += 1
            elif not record.held:
                stats.deferred += 1
        if with_dsns:
            for note in record.dsns:
                self.stats.dsns += 1
                logger.info("dsn item=%s kind=%s dsn=%s to=<%s>", item.id, note.kind, note.item.id, item.sender)
        if self.observer is None and not worker_signals_heard():
            return  # nobody to tell: the events are not even made
        events = record.events(with_dsns=with_dsns)
        if self.observer is not None:
            self.observer.told(events, item=item, now=self.clock.now())
        listened = heard(type(self.store), events)
        if listened:  # with the other outcomes' told meanwhile: one thread hand-off for them all
            await self._told.enqueue(listened)

    async def _complete(
        self, attempt: Attempt, record: Record, rows: Sequence[HistoryEntry] = ()
    ) -> tuple[QueueItem | None | Literal[False], Record]:
        """Record the outcome with its DSNs (and `rows`, the history's, in the same transaction: written once,
        whatever the answer); while the store is out of reach, try again as long as the lease holds. When the
        queue has no room for the DSNs, DSN_FAILED is told and the outcome recorded without them. False when
        nothing could be recorded (the error is told; `rows` the store never took are then written alone)."""
        unwritten = list(rows)
        answer = await self._complete_while_held(attempt, record, unwritten)
        if unwritten and answer[0] is False:
            self._history.post([replace(e, lease_lost=True) for e in unwritten] if attempt.lost else unwritten)
        return answer

    async def _complete_while_held(
        self, attempt: Attempt, record: Record, unwritten: list[HistoryEntry]
    ) -> tuple[QueueItem | None | Literal[False], Record]:
        item, retry = attempt.item, Retry()
        while True:
            completion = record.completion
            try:
                request = CompleteRequest(item.id, self.owner, item.revision, completion)
                answer = await self._completions.enqueue((request, tuple(unwritten)))
                unwritten.clear()  # written with the answer, whatever it is
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
        error = QueueError(
            Code.LEASE_LOST,
            f"lost the lease on {item_id}: {what} was out of reach until the lease ran out; nothing was "
            "recorded, and the item will be delivered again",
            item_id=item_id,
        )
        await self._error(error, item_id)
        if self.once:
            self._stop_short(error)  # the store was out of reach for a whole lease: a `--once` run ends, and says so

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
            answers = await _answers([self._history.enqueue(e) for e in pending])
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

    async def _write_completions(self, batch: list[Completing]) -> Sequence[QueueItem | None | QueueError]:
        """A batch's completions in one store call; the history rows riding with them in its transaction, those
        of a LEASE_LOST answer marked `lease_lost` (their attempt's outcome is not recorded)."""
        requests = [request for request, _ in batch]
        if not any(entries for _, entries in batch):
            return await self.store.acomplete_many(requests)
        history = self.history
        assert history is not None  # _rows_with_outcome

        def write(answers: Sequence[QueueItem | None | QueueError]) -> None:
            history.record(
                [
                    replace(entry, lease_lost=True) if _lease_lost(answer) else entry
                    for (_, entries), answer in zip(batch, answers, strict=True)
                    for entry in entries
                ]
            )

        return await self.store.acomplete_many(requests, also=write)

    async def _write_unrecorded(self, attempt: Attempt, entries: Sequence[HistoryEntry]) -> None:
        """The rows of an attempt whose lease was lost before its outcome could be recorded, marked `lease_lost`:
        it reached a server, and says so without claiming the item's outcome. One try (the lease is gone: nothing
        waits for them); the database refusing them is told."""
        if self.history is None or not entries:
            return
        answers = await _answers([self._history.enqueue(replace(e, lease_lost=True)) for e in entries])
        refused = next((answer for answer in answers if answer is not None), None)
        if isinstance(refused, QueueError):
            await self._error(refused, attempt.item.id)
        elif refused is not None:
            raise refused

    async def _mark_unrecorded(self, attempt: Attempt, record: Record) -> None:
        """Mark `lease_lost` the rows written for `record` as its outcome's, which was then not recorded (LEASE_LOST,
        or gone past the lease): another attempt's outcome is the item's."""
        if self.history is None:
            return
        try:
            await self.history.amark_lease_lost(record.history())
        except QueueError as exc:
            await self._error(exc, attempt.item.id)

    async def _write_history(self, entries: list[HistoryEntry]) -> list[None]:
        if self.history is not None:
            await self.history.arecord(entries)
        return [None] * len(entries)

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


def _lease_lost(answer: QueueItem | None | QueueError) -> bool:
    return isinstance(answer, QueueError) and answer.code == Code.LEASE_LOST


async def _answers(futures: list[asyncio.Future[None]]) -> list[BaseException | None]:
    """Each future's answer or exception, in order (`gather(return_exceptions=True)` without its own future and
    callbacks: the entries of one attempt are answered by one batch). Cancelled, the rest are cancelled too."""
    answers: list[BaseException | None] = []
    try:
        for future in futures:
            try:
                await future
            except Exception as exc:  # noqa: BLE001 - handed to the caller, as gather would
                answers.append(exc)
            else:
                answers.append(None)
    finally:
        for future in futures:
            future.cancel()  # nothing for the done ones
    return answers

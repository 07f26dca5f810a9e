"""What an attempt's outcome means — the completion, its DSNs, history rows, signals — decided without I/O."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from .. import signals
from ..conf import QueueSettings
from ..core.errors import Code, QueueError
from ..core.items import Completion, NewItem, QueueItem, Recipient, RecipientOutcome, RecipientState, Reply
from ..history import HistoryEntry
from ..suppression import entries_for
from .dsn import DsnKind, DsnReport, build_dsn
from .events import Event
from .retries import delay_warning_due, expired, next_attempt_after, retry_until


@dataclass(frozen=True)
class AttemptOutcome:
    """What one attempt on an item came to, as the delivery (or the worker itself) decided it."""

    outcomes: tuple[RecipientOutcome, ...]
    #: recipients whose reply after the end of data was lost: they may have the message already
    possibly_delivered: frozenset[str] = frozenset()
    #: problems the delivery reported (told as `error` signals)
    errors: tuple[QueueError, ...] = ()
    #: the original's header block, for the DSNs to quote (None: not kept, or the message was lost)
    headers: bytes | None = None
    #: the store held the item but not its message: every pending recipient failed with 5.3.0
    message_lost: bool = False
    #: recipients the suppression list failed (not tried): not listed again
    listed: frozenset[str] = frozenset()
    #: no attempt was made (its destinations are suspended): it waits until then, no attempt counted
    held_until: datetime | None = None
    #: a destination of it is suspended: it is tried again at the suspension's end, not by RETRY_DELAYS
    retry_at: datetime | None = None


@dataclass(frozen=True)
class DsnNote:
    """One DSN of a record: its kind, the item queued for it and the recipients it reports."""

    kind: DsnKind
    item: NewItem
    recipients: tuple[Recipient, ...]


@dataclass(frozen=True)
class Record:
    """What to write for an attempt (one `complete` call, history rows) and what to tell once written."""

    item: QueueItem
    #: the attempt's number (1 for the first)
    attempt: int
    #: when the outcome was decided: the history rows' time, and the DSNs' `created`
    recorded_at: datetime
    completion: Completion
    dsns: tuple[DsnNote, ...]
    #: the outcome of each pending recipient the attempt decided, in the item's order
    decided: tuple[RecipientOutcome, ...]
    #: every outcome as recorded (the history's rows)
    outcomes: tuple[RecipientOutcome, ...]
    possibly_delivered: frozenset[str]
    #: the message was lost, or the delivery reported problems: warned and told as `error`
    problems: tuple[QueueError, ...]
    #: a lost reply after the end of data, one per recipient: logged and told as `error`
    replies_lost: tuple[QueueError, ...]
    #: no attempt was made (its destinations are suspended): no history row, no `deferred` signal for it
    held: bool = False

    def without_dsns(self) -> Record:
        """This record with no DSN (the store had no room for them)."""
        return replace(self, dsns=(), completion=replace(self.completion, dsns=()))

    def history(self) -> list[HistoryEntry]:
        return [
            HistoryEntry(
                item=self.item,
                outcome=o,
                attempt=self.attempt,
                recorded=self.recorded_at,
                possibly_delivered=o.address in self.possibly_delivered,
            )
            for o in self.outcomes
            if not (self.held and o.state is RecipientState.PENDING)
        ]

    def events(self, *, with_dsns: bool) -> list[Event]:
        """The signals, in order: the problems, the lost replies, each recipient's outcome, then the DSNs
        (only `with_dsns`: an item cancelled while it was delivered gets none)."""
        item = self.item
        events: list[Event] = [(signals.error, {"error": e, "item_id": item.id}) for e in self.problems]
        events += [(signals.error, {"error": e, "item_id": item.id}) for e in self.replies_lost]
        for decided in self.decided:
            kwargs: dict[str, Any] = {
                "item_id": item.id,
                "recipient": decided.address,
                "reply": decided.reply,
                "attempt": self.attempt,
            }
            if decided.state is RecipientState.DELIVERED:
                events.append((signals.delivered, kwargs))
            elif decided.state is RecipientState.FAILED:
                events.append((signals.failed, kwargs))
            elif not self.held:
                events.append((signals.deferred, {**kwargs, "next_attempt": self.completion.next_attempt}))
        if with_dsns:
            for note in self.dsns:
                kwargs = {
                    "kind": note.kind,
                    "dsn_id": note.item.id,
                    "of": item.id,
                    "to": item.sender,
                    "recipients": [r.address for r in note.recipients],
                }
                events.append((signals.dsn, kwargs))
        return events


def decide(
    item: QueueItem, outcome: AttemptOutcome, settings: QueueSettings, *, now: datetime, rng: random.Random
) -> Record:
    """What `outcome` means for `item` at `now`: pending recipients fail past `MAX_LIFETIME`, the next
    attempt follows the retry schedule, DSNs are due for recipients newly failed (and, once, for
    those still pending after `DELAY_WARNING`), and those failed with a status of `SUPPRESSION` go on
    the suppression list. An outcome `held_until` a suspension's end counts no attempt and is due then;
    one with `retry_at` is due then (not by the retry schedule), its attempt counted."""
    held = outcome.held_until is not None
    number = item.attempts + (0 if held else 1)
    outcomes = outcome.outcomes
    if expired(settings, created=item.created, now=now):
        outcomes = tuple(
            replace(o, state=RecipientState.FAILED) if o.state is RecipientState.PENDING else o for o in outcomes
        )
    dsn_wanted = settings.dsn and item.sender != ""
    warn = (
        dsn_wanted
        and any(o.state is RecipientState.PENDING for o in outcomes)
        and not item.delay_warned
        and delay_warning_due(settings, created=item.created, now=now)
    )
    next_attempt = (
        outcome.held_until or outcome.retry_at or next_attempt_after(settings, now=now, attempts=number, rng=rng)
    )
    by_address = {o.address: o for o in outcomes}
    decided = tuple(by_address[r.address] for r in item.pending if r.address in by_address)
    newly_failed = tuple(_as_kept(o) for o in decided if o.state is RecipientState.FAILED)
    delayed = tuple(_as_kept(o) for o in decided if o.state is RecipientState.PENDING)
    dsns: list[DsnNote] = []
    if dsn_wanted:
        if newly_failed:
            dsns.append(_dsn("failed", item, newly_failed, now, outcome.headers, settings))
        if warn and delayed:
            dsns.append(_dsn("delayed", item, delayed, now, outcome.headers, settings))
    completion = Completion(
        outcomes,
        next_attempt=next_attempt,
        count_attempt=not held,
        delay_warned=warn,
        dsns=tuple(note.item for note in dsns),
        now=now,
        suppress=entries_for(item, decided, settings.suppression, now=now, listed=outcome.listed),
        keep_failed=settings.keep_failed > 0,
    )
    problems = list(outcome.errors)
    if outcome.message_lost:
        problems.insert(0, _unreadable(item.id))
    return Record(
        item=item,
        attempt=number,
        completion=completion,
        dsns=tuple(dsns),
        decided=decided,
        outcomes=outcomes,
        possibly_delivered=outcome.possibly_delivered,
        problems=tuple(problems),
        replies_lost=tuple(_reply_lost(item.id, address) for address in sorted(outcome.possibly_delivered)),
        recorded_at=now,
        held=held,
    )


UNREADABLE = Reply(None, "5.3.0", "Message unreadable: the queue store holds the item but not its message")


def message_lost(item: QueueItem) -> tuple[RecipientOutcome, ...]:
    """The store holds the item but not its message: every pending recipient fails (5.3.0)."""
    return tuple(RecipientOutcome(r.address, RecipientState.FAILED, UNREADABLE) for r in item.pending)


def reclaimed_too_often(item: QueueItem) -> tuple[RecipientOutcome, ...]:
    """Past `MAX_RECLAIMS` (each attempt lost its worker): every pending recipient fails (5.4.0)."""
    why = f"the item was reclaimed {item.reclaims} times without an outcome: each attempt lost its worker"
    reply = Reply(None, "5.4.0", why)
    return tuple(RecipientOutcome(r.address, RecipientState.FAILED, reply) for r in item.pending)


def _as_kept(outcome: RecipientOutcome) -> Recipient:
    return Recipient(outcome.address, outcome.state, outcome.reply, outcome.remote_mta)


def _dsn(
    kind: DsnKind,
    item: QueueItem,
    recipients: Sequence[Recipient],
    now: datetime,
    headers: bytes | None,
    settings: QueueSettings,
) -> DsnNote:
    report = DsnReport(
        kind=kind,
        item=item,
        recipients=recipients,
        reporting_mta=settings.hostname,
        last_attempt=now,
        retry_until=retry_until(settings, created=item.created) if kind == "delayed" else None,
        original_headers=headers,
    )
    return DsnNote(kind, build_dsn(report, now=now), tuple(recipients))


def _unreadable(item_id: uuid.UUID) -> QueueError:
    return QueueError(
        Code.MESSAGE_UNREADABLE,
        f"The message of {item_id} is unreadable: the store holds the item but not "
        "its message, so every pending recipient failed",
        item_id=item_id,
    )


def _reply_lost(item_id: uuid.UUID, address: str) -> QueueError:
    return QueueError(
        Code.REPLY_LOST,
        f"the reply after the end of data for {address} was lost: {item_id} may have been "
        "delivered to it already and will be tried again",
        item_id=item_id,
    )

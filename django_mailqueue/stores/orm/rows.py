"""The ORM store's rows as tuples, whatever the dialect: their columns, the item they hold, and the
outcomes `complete_many` writes back — decided by pure functions of the rows read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...core.clock import from_micros, to_micros
from ...core.errors import Code, QueueError
from ...core.items import (
    CompleteRequest,
    NewItem,
    QueueItem,
    Recipient,
    RecipientState,
    Reply,
    apply_completion,
    due_micros,
)

#: An item's row, its columns in this order.
ITEM_FIELDS = (
    "seq",
    "id",
    "sender",
    "size",
    "created",
    "next_attempt",
    "attempts",
    "queue",
    "owner",
    "lease_expires",
    "revision",
    "reclaims",
    "delay_warned",
    "message_id",
    "subject",
    "failed_at",
)
#: A recipient's row, its columns in this order (the item's `seq` first; in `id`'s place the row's key as the dialect
#: reads it: SQLite's is (seq, position)).
RECIPIENT_FIELDS = ("item_id", "id", "address", "state", "reply_code", "reply_status", "reply_text", "remote_mta")
#: What an outcome writes back to a recipient's row: these, then the row's key (its `id`, or the dialect's key).
RECIPIENT_WRITTEN = ("state", "reply_code", "reply_status", "reply_text", "remote_mta")
#: What an outcome writes back to a kept item's row: these, then its `seq`; the lease is let go besides.
ITEM_WRITTEN = ("attempts", "next_attempt", "revision", "delay_warned", "failed_at")

ItemRow = tuple[Any, ...]
RecipientRow = tuple[Any, ...]


def to_item(row: ItemRow, recipients: Sequence[RecipientRow]) -> QueueItem:
    """The item a row (ITEM_FIELDS) and its recipients' rows (RECIPIENT_FIELDS, by position) hold."""
    (
        _seq,
        item_id,
        sender,
        size,
        created,
        next_attempt,
        attempts,
        queue,
        owner,
        lease_expires,
        revision,
        reclaims,
        delay_warned,
        message_id,
        subject,
        failed_at,
    ) = row
    return QueueItem(
        id=item_id,
        sender=sender,
        recipients=tuple(
            Recipient(
                address=address,
                state=RecipientState(state),
                reply=Reply(code, status, text) if (status or text or code is not None) else None,
                remote_mta=remote_mta,
            )
            for _item, _id, address, state, code, status, text, remote_mta in recipients
        ),
        size=size,
        created=from_micros(created),
        next_attempt=from_micros(next_attempt),
        attempts=attempts,
        queue=queue,
        owner=owner,
        lease_expires=from_micros(lease_expires) if lease_expires is not None else None,
        revision=revision,
        reclaims=reclaims,
        delay_warned=delay_warned,
        message_id=message_id,
        subject=subject,
        failed_at=from_micros(failed_at) if failed_at is not None else None,
    )


@dataclass
class CompletionPlan:
    """What `complete_many` answers and writes, decided from the items' rows as they were read."""

    answers: list[QueueItem | None | QueueError] = field(default_factory=list)
    #: items to drop (every recipient final, not kept failed), by `seq`
    dropped: list[int] = field(default_factory=list)
    #: RECIPIENT_WRITTEN then `id`, of each recipient whose row changes
    changed: list[tuple[Any, ...]] = field(default_factory=list)
    #: ITEM_WRITTEN then `seq`, of each item left in the store
    kept: dict[int, tuple[Any, ...]] = field(default_factory=dict)


def plan_completions(
    requests: Sequence[CompleteRequest],
    rows: Sequence[ItemRow],
    recipients: dict[int, list[RecipientRow]],
    items: dict[int, QueueItem] | None = None,
) -> CompletionPlan:
    """The outcome of each request, applied only for the lease's owner at the revision it claimed: the
    item after it, None for an item gone, LEASE_LOST otherwise. A pure function of the rows read (`items`:
    the item each row holds, by seq, when the caller has it: `to_item` is not made again)."""
    plan = CompletionPlan()
    by_id = {row[1]: row for row in rows}
    revision = {item_id: row[10] for item_id, row in by_id.items()}
    for request in requests:
        row = by_id.get(request.item_id)
        if row is None:
            plan.answers.append(None)
            continue
        seq, owner = row[0], row[8]
        if owner != request.owner or revision[request.item_id] != request.revision:
            plan.answers.append(
                QueueError(
                    Code.LEASE_LOST,
                    f"the lease on {request.item_id} is no longer held by {request.owner}",
                    item_id=request.item_id,
                )
            )
            continue
        before = items[seq] if items is not None else to_item(row, recipients[seq])
        after = apply_completion(before, request.completion)
        plan.answers.append(after)
        revision[request.item_id] = after.revision  # a second request for the same item is stale
        if after.done and not after.kept:
            plan.dropped.append(seq)
            continue
        for rec_row, old, new in zip(recipients[seq], before.recipients, after.recipients, strict=True):
            if new != old:
                plan.changed.append(recipient_written(new, rec_row[1]))
        failed_at = to_micros(after.failed_at) if after.failed_at is not None else None
        plan.kept[seq] = (
            after.attempts,
            to_micros(after.next_attempt),
            after.revision,
            after.delay_warned,
            failed_at,
            seq,
        )
    return plan


def recipient_written(recipient: Recipient, row_id: Any) -> tuple[Any, ...]:
    """RECIPIENT_WRITTEN for `recipient`, then its row's key (RECIPIENT_FIELDS' second)."""
    reply = recipient.reply
    return (
        recipient.state.value,
        reply.code if reply else None,
        reply.status if reply else "",
        reply.text if reply else "",
        recipient.remote_mta,
        row_id,
    )


def lease_fields(rows: Sequence[ItemRow]) -> set[tuple[Any, ...]]:
    """(seq, owner, revision) of each row: every write to an item's recipients or counters moves its revision."""
    return {(row[0], row[8], row[10]) for row in rows}


#: The columns' lengths an added item's Message-ID and subject are cut to (`as_added`'s `text_limits`).
TEXT_LIMITS = (998, 255)


def added_values(new: NewItem, now: datetime, now_us: int) -> list[Any]:
    """The values of `new` added at `now` (`now_us`: its microseconds) as `as_added` stores it, in the order
    the add statements take them: id, sender, size, created, next_attempt, queue, message_id, subject (the
    last two cut to `TEXT_LIMITS`)."""
    return [
        new.id,
        new.sender,
        len(new.message),
        now_us,
        due_micros(new, now, now_us),
        new.queue,
        new.message_id[: TEXT_LIMITS[0]],
        new.subject[: TEXT_LIMITS[1]],
    ]

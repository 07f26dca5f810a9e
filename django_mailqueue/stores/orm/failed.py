"""The ORM store's kept failed items (`KEEP_FAILED`): sending them again, pruning them — run in the store's
write transactions. A kept item's `next_attempt` is `NEVER`: the due index's one range the claim never reads."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F

from ...core.clock import to_micros
from ...core.items import NEVER, QueueItem, sent_again
from ...models import QueuedItem
from .base import Dialect
from .rows import recipient_written, to_item

#: A kept failed item's next attempt, in the column's microseconds.
NEVER_US = to_micros(NEVER)


def send_again(
    dialect: Dialect, conn: BaseDatabaseWrapper, item_ids: Sequence[uuid.UUID], now: datetime
) -> list[QueueItem | None]:
    """`QueueStore.send_again` in the caller's transaction: the rows locked and read, the kept failed ones and
    their failed recipients written (`core.items.sent_again`), idle workers told."""
    now_us = to_micros(now)
    locked = [row for row in dialect.lock(list(dict.fromkeys(item_ids))) if row[-1] is not None]  # failed_at
    recipients = dialect.recipients([row[0] for row in locked])
    again: dict[uuid.UUID, QueueItem] = {}
    changed = []
    for row in locked:
        before = to_item(row, recipients[row[0]])
        after = again[before.id] = sent_again(before, now)
        for rec_row, old, new in zip(recipients[row[0]], before.recipients, after.recipients, strict=True):
            if new != old:
                changed.append(recipient_written(new, rec_row[1]))
    if locked:
        dialect.write_back([], changed)
        QueuedItem.objects.using(dialect.alias).filter(seq__in=[row[0] for row in locked]).update(
            created=now_us,
            next_attempt=now_us,
            attempts=0,
            revision=F("revision") + 1,
            reclaims=0,
            delay_warned=False,
            failed_at=None,
            owner=None,
            lease_expires=None,
        )
        dialect.wake(conn)
    return [again.get(item_id) for item_id in item_ids]


def prune(dialect: Dialect, before: datetime) -> int:
    """`QueueStore.prune_failed` in the caller's transaction: the kept items read from the due index's `NEVER`
    range, those failed before `before` dropped."""
    seqs = list(
        QueuedItem.objects.using(dialect.alias)
        .filter(next_attempt=NEVER_US, failed_at__lt=to_micros(before))
        .values_list("seq", flat=True)
    )
    dialect.drop(seqs)
    return len(seqs)

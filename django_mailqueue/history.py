"""Delivery history: the worker's record of every outcome, kept `HISTORY_DAYS` and pruned in batches."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from .dbthreads import DatabaseThreads, drop_if_broken
from .items import QueueItem, RecipientOutcome, RecipientState
from .models import DeliveryRecord

logger = logging.getLogger("django_mailqueue")

_STATE = {RecipientState.DELIVERED: "delivered", RecipientState.FAILED: "failed", RecipientState.PENDING: "deferred"}


@dataclass(frozen=True)
class HistoryEntry:
    item: QueueItem
    outcome: RecipientOutcome
    attempt: int
    recorded: datetime
    possibly_delivered: bool = False


class History:
    """Writes history rows to the database `alias` (the ORM store's, else "default")."""

    def __init__(self, alias: str = "default") -> None:
        self.alias = alias
        self._threads = DatabaseThreads(1, "mailqueue-history")

    def record(self, entries: Sequence[HistoryEntry]) -> None:
        if not entries:
            return
        rows = [
            DeliveryRecord(
                item_id=e.item.id,
                message_id=e.item.message_id[:998],
                sender=e.item.sender,
                recipient=e.outcome.address,
                domain=e.outcome.address.rpartition("@")[2].lower()[:255],
                queue=e.item.queue,
                state=_STATE[e.outcome.state],
                reply_code=e.outcome.reply.code,
                reply_status=e.outcome.reply.status[:16],
                reply_text=e.outcome.reply.text,
                remote_mta=e.outcome.remote_mta[:255],
                attempt=e.attempt,
                possibly_delivered=e.possibly_delivered,
                recorded=e.recorded,
            )
            for e in entries
        ]
        drop_if_broken(connections[self.alias])
        DeliveryRecord.objects.using(self.alias).bulk_create(rows)

    async def arecord(self, entries: Sequence[HistoryEntry]) -> None:
        """Write the records; through a database blip, try again for about half a minute
        before giving up (and saying so in the log)."""
        delay = 0.2
        for attempt in range(8):
            try:
                await self._threads.run(self.record, entries)
                return
            except DatabaseError:
                if attempt == 7:
                    logger.exception("delivery history could not be written (%d records lost)", len(entries))
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 8.0)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._threads.close)


def history_alias(store: object) -> str:
    """Where the history lives: the ORM store's database, else "default"."""
    alias = getattr(store, "alias", None)
    return alias if isinstance(alias, str) else DEFAULT_DB_ALIAS


def prune(*, days: int, now: datetime, batch: int = 5000, alias: str = "default") -> int:
    """Delete records older than `days` days (all when 0), `batch` rows per statement; how many went."""
    cutoff = now - timedelta(days=days)
    removed = 0
    records = DeliveryRecord.objects.using(alias)
    while True:
        ids = list(records.filter(recorded__lt=cutoff).order_by("id").values_list("id", flat=True)[:batch])
        if not ids:
            return removed
        removed += records.filter(id__in=ids)._raw_delete(alias)

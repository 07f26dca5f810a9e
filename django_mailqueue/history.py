"""Delivery history: the worker's record of every outcome, kept `HISTORY_DAYS` and pruned in batches."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Q

from .core.errors import Code, QueueError
from .core.items import QueueItem, RecipientOutcome, RecipientState, address_domain
from .models import DeliveryRecord
from .stores.orm.pg_binding import binary_cursor
from .stores.orm.sqlite import own_cursor
from .stores.orm.sqlite_wait import wait_for_lock
from .stores.orm.threads import DatabaseThreads, drop_if_broken

_STATE = {RecipientState.DELIVERED: "delivered", RecipientState.FAILED: "failed", RecipientState.PENDING: "deferred"}


@dataclass(frozen=True)
class HistoryEntry:
    item: QueueItem
    outcome: RecipientOutcome
    attempt: int
    recorded: datetime
    possibly_delivered: bool = False
    #: the attempt's outcome was not recorded, its lease lost: the row does not claim the item's outcome
    lease_lost: bool = False


class History:
    """Writes history rows to the database `alias` (the ORM store's, else "default")."""

    def __init__(self, alias: str = "default") -> None:
        self.alias = alias
        self._threads = DatabaseThreads(1, "mailqueue-history")

    def record(self, entries: Sequence[HistoryEntry]) -> None:
        """One INSERT of many rows (in batches the database allows), without model instances."""
        if not entries:
            return
        conn = connections[self.alias]
        drop_if_broken(conn)
        # the fields' get_db_prep_save, less the steps that change nothing for a UUID and an aware datetime
        native_uuid = conn.features.has_native_uuid_field
        recorded = conn.ops.adapt_datetimefield_value
        rows = [
            (
                e.item.id if native_uuid else e.item.id.hex,
                e.item.message_id[:998],
                e.item.sender,
                e.outcome.address,
                address_domain(e.outcome.address)[:255],
                e.item.queue,
                _STATE[e.outcome.state],
                e.outcome.reply.code,
                e.outcome.reply.status[:16],
                e.outcome.reply.text,
                e.outcome.remote_mta[:255],
                e.attempt,
                e.possibly_delivered,
                e.lease_lost,
                recorded(e.recorded),
            )
            for e in entries
        ]
        if conn.vendor == "postgresql":
            # One array per column: the statement's text is the same for any number of rows (a
            # VALUES list of 20 rows is 280 placeholders for psycopg to find anew every time).
            # One statement is atomic by itself: no BEGIN and COMMIT round trips around it.
            with binary_cursor(conn) as cursor:
                cursor.execute(_POSTGRES_INSERT, [list(column) for column in zip(*rows, strict=True)])
            return
        if conn.vendor == "sqlite" and not conn.in_atomic_block:
            wait_for_lock(conn, lambda: self._insert(conn, rows))
        else:
            self._insert(conn, rows)

    def _insert(self, conn: BaseDatabaseWrapper, rows: list[tuple[Any, ...]]) -> None:
        """On SQLite through `sqlite3`'s own cursor (`own_cursor`): Django's would rewrite the `%s` of a
        statement of up to 999 parameters for each batch."""
        size = max(1, conn.ops.bulk_batch_size(_FIELDS, rows))
        cursor_of = own_cursor if conn.vendor == "sqlite" else _django_cursor
        with transaction.atomic(using=self.alias, savepoint=False), cursor_of(conn) as (cursor, qmark):
            for start in range(0, len(rows), size):
                batch = rows[start : start + size]
                cursor.execute(_insert_sql(conn, len(batch), qmark), [value for row in batch for value in row])

    async def arecord(self, entries: Sequence[HistoryEntry]) -> None:
        """Write the records, committed, in one try; STORE_UNAVAILABLE when the database refused them
        (the worker tries again: docs/reliability.md, "History before the outcome")."""
        try:
            await self._threads.run(self.record, entries)
        except DatabaseError as exc:
            raise _unavailable(self.alias, exc) from exc

    def mark_lease_lost(self, entries: Sequence[HistoryEntry]) -> int:
        """Mark the rows written for `entries` (by item, attempt and time) `lease_lost`: their attempt's outcome
        was then not recorded. How many rows were marked."""
        attempts = {(e.item.id, e.attempt, e.recorded) for e in entries}
        if not attempts:
            return 0
        which = Q()
        for item_id, attempt, recorded in attempts:
            which |= Q(item_id=item_id, attempt=attempt, recorded=recorded)
        conn = connections[self.alias]
        drop_if_broken(conn)
        rows = DeliveryRecord.objects.using(self.alias).filter(which, lease_lost=False)
        if conn.vendor == "sqlite" and not conn.in_atomic_block:
            return wait_for_lock(conn, lambda: rows.update(lease_lost=True))
        return rows.update(lease_lost=True)

    async def amark_lease_lost(self, entries: Sequence[HistoryEntry]) -> int:
        """`mark_lease_lost` in the history's thread; STORE_UNAVAILABLE when the database refused it."""
        try:
            return await self._threads.run(self.mark_lease_lost, entries)
        except DatabaseError as exc:
            raise _unavailable(self.alias, exc) from exc

    async def aclose(self) -> None:
        await asyncio.to_thread(self._threads.close)


def _unavailable(alias: str, exc: DatabaseError) -> QueueError:
    reason = str(exc).splitlines()[0] if str(exc) else ""
    return QueueError(
        Code.STORE_UNAVAILABLE,
        f"the delivery history could not be written to the database {alias!r}: {type(exc).__name__}: {reason}",
    )


#: The columns a record writes (all but the id), `item_id` first and `recorded` last.
_FIELDS: list[Field[Any, Any]] = [
    DeliveryRecord._meta.get_field(name)  # type: ignore[misc]
    for name in (
        "item_id",
        "message_id",
        "sender",
        "recipient",
        "domain",
        "queue",
        "state",
        "reply_code",
        "reply_status",
        "reply_text",
        "remote_mta",
        "attempt",
        "possibly_delivered",
        "lease_lost",
        "recorded",
    )
]


_POSTGRES_INSERT = (
    f"INSERT INTO {DeliveryRecord._meta.db_table} ({', '.join(str(field.column) for field in _FIELDS)}) "  # noqa: S608
    "SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], "
    "%b::smallint[], %b::text[], %b::text[], %b::text[], %b::integer[], %b::boolean[], %b::boolean[], "
    "%b::timestamptz[])"
)


@contextlib.contextmanager
def _django_cursor(conn: BaseDatabaseWrapper) -> Iterator[tuple[CursorWrapper, bool]]:
    with conn.cursor() as cursor:
        yield cursor, False


def _insert_sql(conn: BaseDatabaseWrapper, rows: int, qmark: bool = False) -> str:
    """The insert of `rows` rows, its placeholders `%s` (`?` with `qmark`: `sqlite3`'s own cursor)."""
    quote = conn.ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in _FIELDS)
    placeholders = [["?" if qmark else "%s"] * len(_FIELDS)] * rows
    values = conn.ops.bulk_insert_sql(_FIELDS, placeholders)  # type: ignore[arg-type] # rows of placeholders
    return f"INSERT INTO {quote(DeliveryRecord._meta.db_table)} ({columns}) {values}"  # noqa: S608 - no input


def history_alias(store: object) -> str:
    """The database the worker writes history to: the ORM store's, else "default"."""
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
        removed += records.filter(id__in=ids).delete()[0]  # one DELETE: the records have no relations

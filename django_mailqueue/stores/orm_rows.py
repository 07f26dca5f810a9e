"""The ORM store's rows as tuples: the worker's statements (claim, lock, read, write back, drop) written by
hand on SQLite and PostgreSQL, and made by the ORM on any other database."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import F, Q

from ..core.clock import from_micros, to_micros
from ..core.errors import Code, QueueError
from ..core.items import CompleteRequest, QueueItem, Recipient, RecipientState, Reply, apply_completion
from ..models import QueuedItem, QueuedMessage, QueuedRecipient
from .pg_binding import binary_cursor, in_binary

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
)
#: A recipient's row, its columns in this order (the item's `seq` first).
RECIPIENT_FIELDS = ("item_id", "id", "address", "state", "reply_code", "reply_status", "reply_text", "remote_mta")
#: What an outcome writes back to a recipient's row: these, then the row's `id`.
RECIPIENT_WRITTEN = ("state", "reply_code", "reply_status", "reply_text", "remote_mta")
#: What an outcome writes back to a kept item's row: these, then its `seq`; the lease is let go besides.
ITEM_WRITTEN = ("attempts", "next_attempt", "revision", "delay_warned")

ItemRow = tuple[Any, ...]
RecipientRow = tuple[Any, ...]

_ITEMS = QueuedItem._meta.db_table
_RECIPIENTS = QueuedRecipient._meta.db_table
_MESSAGES = QueuedMessage._meta.db_table
_ITEM_COLUMNS = ", ".join(ITEM_FIELDS)
_RECIPIENT_COLUMNS = ", ".join(RECIPIENT_FIELDS)
#: SQLite's bound on the parameters of one statement, as Django counts it.
_SQLITE_CHUNK = 900


def due(alias: str, lane: str | None, now_us: int) -> models.QuerySet[QueuedItem]:
    """Items due at `now_us` and not leased (their lease expired, or none), of `lane` when given."""
    items = (
        QueuedItem.objects.using(alias)
        .filter(next_attempt__lte=now_us)
        .filter(Q(lease_expires__isnull=True) | Q(lease_expires__lte=now_us))
    )
    return items.filter(queue=lane) if lane is not None else items


class OrmRows:
    """The statements through the ORM: for any database Django supports."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def claim(self, lane: str | None, owner: str, now_us: int, expires_us: int, limit: int) -> list[ItemRow]:
        items = QueuedItem.objects.using(self.alias)
        taken = list(
            due(self.alias, lane, now_us)
            .order_by("next_attempt", "seq")
            .select_for_update(skip_locked=True)
            .values_list("seq", flat=True)[:limit]
        )
        if not taken:
            return []
        items.filter(seq__in=taken).update(
            owner=owner,
            lease_expires=expires_us,
            revision=F("revision") + 1,
            reclaims=models.Case(models.When(owner__isnull=False, then=F("reclaims") + 1), default=F("reclaims")),
        )
        return list(items.filter(seq__in=taken).values_list(*ITEM_FIELDS))

    def read(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        """The items' rows, without a lock."""
        return list(
            QueuedItem.objects.using(self.alias).filter(id__in=list(item_ids)).order_by("seq").values_list(*ITEM_FIELDS)
        )

    def lock(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        """Lock the items' rows for the rest of the transaction, and read them."""
        return list(
            QueuedItem.objects.using(self.alias)
            .filter(id__in=list(item_ids))
            .order_by("seq")
            .select_for_update()
            .values_list(*ITEM_FIELDS)
        )

    def recipients(self, seqs: Sequence[int]) -> dict[int, list[RecipientRow]]:
        found: dict[int, list[RecipientRow]] = {seq: [] for seq in seqs}
        if seqs:
            rows = (
                QueuedRecipient.objects.using(self.alias)
                .filter(item_id__in=list(seqs))
                .order_by("item_id", "position")
                .values_list(*RECIPIENT_FIELDS)
            )
            for row in rows:
                found[row[0]].append(row)
        return found

    def write_back(self, items: Sequence[tuple[Any, ...]], recipients: Sequence[tuple[Any, ...]]) -> None:
        """`items`: ITEM_WRITTEN values then `seq`; `recipients`: RECIPIENT_WRITTEN values then `id`."""
        if recipients:
            QueuedRecipient.objects.using(self.alias).bulk_update(
                [QueuedRecipient(id=r[-1], **dict(zip(RECIPIENT_WRITTEN, r, strict=False))) for r in recipients],
                list(RECIPIENT_WRITTEN),
            )
        if items:
            QueuedItem.objects.using(self.alias).bulk_update(
                [
                    QueuedItem(
                        seq=i[-1],
                        owner=None,
                        lease_expires=None,
                        reclaims=0,
                        **dict(zip(ITEM_WRITTEN, i, strict=False)),
                    )
                    for i in items
                ],
                [*ITEM_WRITTEN, "owner", "lease_expires", "reclaims"],
            )

    def drop(self, seqs: Sequence[int]) -> None:
        """Delete items with their recipients and messages."""
        QueuedMessage.objects.using(self.alias).filter(item_id__in=seqs)._raw_delete(self.alias)
        QueuedRecipient.objects.using(self.alias).filter(item_id__in=seqs)._raw_delete(self.alias)
        QueuedItem.objects.using(self.alias).filter(seq__in=seqs)._raw_delete(self.alias)


class SqlRows(OrmRows):
    """The same statements written by hand for SQLite and PostgreSQL: the worker's path without the
    ORM's statement building and model instances, which cost more than the database's own work.

    PostgreSQL takes each list as one array parameter, so a statement's text never changes;
    SQLite takes one placeholder per value, in chunks under its bound.
    """

    def __init__(self, alias: str, conn: BaseDatabaseWrapper) -> None:
        super().__init__(alias)
        self._conn = conn
        self.postgres = conn.vendor == "postgresql"

    def _cursor(self) -> AbstractContextManager[CursorWrapper]:
        """On PostgreSQL a cursor binding every parameter in binary (the statements write `%b`)."""
        return binary_cursor(self._conn) if self.postgres else self._conn.cursor()

    def _sql(self, sql: str) -> str:
        return in_binary(sql) if self.postgres else sql

    def claim(self, lane: str | None, owner: str, now_us: int, expires_us: int, limit: int) -> list[ItemRow]:
        """One statement: the earliest due rows taken and leased. On PostgreSQL the inner SELECT locks
        them with SKIP LOCKED, so concurrent claimers pass each other by; SQLite has one writer at a time."""
        lane_sql, lane_params = ("AND queue = %s", [lane]) if lane is not None else ("", [])
        locking = " FOR UPDATE SKIP LOCKED" if self.postgres else ""
        sql = (
            f"UPDATE {_ITEMS} SET owner = %s, lease_expires = %s, revision = revision + 1, "  # noqa: S608
            "reclaims = reclaims + (CASE WHEN owner IS NULL THEN 0 ELSE 1 END) "
            f"WHERE seq IN (SELECT seq FROM {_ITEMS} WHERE next_attempt <= %s "
            f"AND (lease_expires IS NULL OR lease_expires <= %s) {lane_sql} "
            f"ORDER BY next_attempt, seq LIMIT %s{locking}) RETURNING {_ITEM_COLUMNS}"
        )
        with self._cursor() as cursor:
            cursor.execute(self._sql(sql), [owner, expires_us, now_us, now_us, *lane_params, limit])
            return [self._item_row(row) for row in cursor.fetchall()]

    def read(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        rows: list[ItemRow] = []
        with self._cursor() as cursor:
            if self.postgres:
                cursor.execute(
                    f"SELECT {_ITEM_COLUMNS} FROM {_ITEMS} WHERE id = ANY(%b) ORDER BY seq",  # noqa: S608
                    [list(item_ids)],
                )
                return list(cursor.fetchall())
            for chunk in _chunks([i.hex for i in item_ids]):
                cursor.execute(f"SELECT {_ITEM_COLUMNS} FROM {_ITEMS} WHERE id IN ({_marks(chunk)})", chunk)  # noqa: S608
                rows.extend(self._item_row(row) for row in cursor.fetchall())
        return rows

    def lock(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        rows: list[ItemRow] = []
        with self._cursor() as cursor:
            if self.postgres:
                cursor.execute(
                    f"SELECT {_ITEM_COLUMNS} FROM {_ITEMS} WHERE id = ANY(%b) "  # noqa: S608
                    "ORDER BY seq FOR UPDATE",
                    [list(item_ids)],
                )
                return list(cursor.fetchall())
            # A write first, so SQLite takes its write lock now, not at a later upgrade that could
            # fail at once with SQLITE_BUSY.
            for chunk in _chunks([i.hex for i in item_ids]):
                cursor.execute(
                    f"UPDATE {_ITEMS} SET revision = revision WHERE id IN ({_marks(chunk)}) "  # noqa: S608
                    f"RETURNING {_ITEM_COLUMNS}",
                    chunk,
                )
                rows.extend(self._item_row(row) for row in cursor.fetchall())
        return rows

    def recipients(self, seqs: Sequence[int]) -> dict[int, list[RecipientRow]]:
        found: dict[int, list[RecipientRow]] = {seq: [] for seq in seqs}
        if not seqs:
            return found
        select = f"SELECT {_RECIPIENT_COLUMNS} FROM {_RECIPIENTS} WHERE item_id "  # noqa: S608
        with self._cursor() as cursor:
            if self.postgres:
                cursor.execute(select + "= ANY(%b) ORDER BY item_id, position", [list(seqs)])
                rows = cursor.fetchall()
            else:
                rows = []
                for chunk in _chunks(list(seqs)):
                    cursor.execute(select + f"IN ({_marks(chunk)}) ORDER BY item_id, position", chunk)
                    rows.extend(cursor.fetchall())
        for row in rows:
            found[row[0]].append(row)
        return found

    def write_back(self, items: Sequence[tuple[Any, ...]], recipients: Sequence[tuple[Any, ...]]) -> None:
        with self._cursor() as cursor:
            if recipients:
                cursor.executemany(
                    self._sql(
                        f"UPDATE {_RECIPIENTS} SET state = %s, reply_code = %s, reply_status = %s, "  # noqa: S608
                        "reply_text = %s, remote_mta = %s WHERE id = %s"
                    ),
                    list(recipients),
                )
            if items:
                cursor.executemany(
                    self._sql(
                        f"UPDATE {_ITEMS} SET attempts = %s, next_attempt = %s, revision = %s, "  # noqa: S608
                        "delay_warned = %s, owner = NULL, lease_expires = NULL, reclaims = 0 WHERE seq = %s"
                    ),
                    list(items),
                )

    def drop(self, seqs: Sequence[int]) -> None:
        with self._cursor() as cursor:
            if self.postgres:
                # One statement: Django's foreign keys on PostgreSQL are checked at commit.
                cursor.execute(_DROP_POSTGRES, [list(seqs)] * 3)
                return
            for chunk in _chunks(list(seqs)):
                marks = _marks(chunk)
                for table, column in ((_MESSAGES, "item_id"), (_RECIPIENTS, "item_id"), (_ITEMS, "seq")):
                    cursor.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", chunk)  # noqa: S608

    def _item_row(self, row: tuple[Any, ...]) -> ItemRow:
        # SQLite keeps a UUID as 32 hex digits and a boolean as 0 or 1.
        if self.postgres:
            return row
        return (row[0], uuid.UUID(hex=row[1]), *row[2:12], bool(row[12]), *row[13:])


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
    )


@dataclass
class CompletionPlan:
    """What `complete_many` answers and writes, decided from the items' rows as they were read."""

    answers: list[QueueItem | None | QueueError] = field(default_factory=list)
    #: items to drop (every recipient final), by `seq`
    dropped: list[int] = field(default_factory=list)
    #: RECIPIENT_WRITTEN then `id`, of each recipient whose row changes
    changed: list[tuple[Any, ...]] = field(default_factory=list)
    #: ITEM_WRITTEN then `seq`, of each item kept
    kept: dict[int, tuple[Any, ...]] = field(default_factory=dict)


def plan_completions(
    requests: Sequence[CompleteRequest], rows: Sequence[ItemRow], recipients: dict[int, list[RecipientRow]]
) -> CompletionPlan:
    """The outcome of each request, applied only for the lease's owner at the revision it claimed: the
    item after it, None for an item gone, LEASE_LOST otherwise. A pure function of the rows read."""
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
        before = to_item(row, recipients[seq])
        after = apply_completion(before, request.completion)
        plan.answers.append(after)
        revision[request.item_id] = after.revision  # a second request for the same item is stale
        if after.done:
            plan.dropped.append(seq)
            continue
        for rec_row, old, new in zip(recipients[seq], before.recipients, after.recipients, strict=True):
            if new != old:
                plan.changed.append(recipient_written(new, rec_row[1]))
        plan.kept[seq] = (after.attempts, to_micros(after.next_attempt), after.revision, after.delay_warned, seq)
    return plan


def recipient_written(recipient: Recipient, row_id: int) -> tuple[Any, ...]:
    """RECIPIENT_WRITTEN for `recipient`, then its row's id."""
    reply = recipient.reply
    return (
        recipient.state.value,
        reply.code if reply else None,
        reply.status if reply else "",
        reply.text if reply else "",
        recipient.remote_mta,
        row_id,
    )


def _chunks(values: list[Any]) -> list[list[Any]]:
    return [values[start : start + _SQLITE_CHUNK] for start in range(0, len(values), _SQLITE_CHUNK)]


def _marks(values: Sequence[Any]) -> str:
    return ", ".join(["%s"] * len(values))


_DROP_POSTGRES = (
    f"WITH m AS (DELETE FROM {_MESSAGES} WHERE item_id = ANY(%b)), "  # noqa: S608 - no input
    f"r AS (DELETE FROM {_RECIPIENTS} WHERE item_id = ANY(%b)) "
    f"DELETE FROM {_ITEMS} WHERE seq = ANY(%b)"
)

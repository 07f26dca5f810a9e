"""`OrmStore`: the contract on Django's ORM — SQLite by default, PostgreSQL, any database Django supports."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import logging
import uuid
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from django.db import DatabaseError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Q

from ..core.clock import from_micros, to_micros
from ..core.errors import Code, QueueError
from ..core.items import (
    CompleteRequest,
    Completion,
    ItemQuery,
    ItemState,
    NewItem,
    QueueItem,
    Recipient,
    RecipientState,
    address_domain,
)
from ..core.status import QueueSummary
from ..models import QueuedItem, QueuedMessage, QueuedRecipient, QueueLock
from .base import READ_CHUNK, QueueStore, check_completion, check_new_item, check_owner
from .dbthreads import DatabaseThreads, drop_if_broken
from .orm_rows import ITEM_FIELDS, CompletionPlan, ItemRow, OrmRows, SqlRows, due, plan_completions, to_item
from .pg_binding import binary_cursor
from .sqlite_wait import wait_for_lock

if TYPE_CHECKING:
    from .pg_listen import PgListener

logger = logging.getLogger("django_mailqueue.stores.orm")
_T = TypeVar("_T")
_P = ParamSpec("_P")

#: The PostgreSQL channel an add notifies, so idle workers wake at once.
NOTIFY_CHANNEL = "django_mailqueue"
_ADD_LOCK = "add"


def _waits_for_lock(method: Callable[Concatenate[OrmStore, _P], _T]) -> Callable[Concatenate[OrmStore, _P], _T]:
    """On SQLite, outside the caller's transaction: `method`'s own transaction waits for the write lock,
    up to the store's `lock_wait` in all, rather than failing after the connection's busy timeout."""

    @functools.wraps(method)
    def waiting(store: OrmStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        conn = store._connection
        if conn.vendor != "sqlite" or conn.in_atomic_block:
            return method(store, *args, **kwargs)
        return wait_for_lock(conn, lambda: method(store, *args, **kwargs), wait=store.lock_wait)

    return waiting


class OrmStore(QueueStore):
    """Items in the database Django's `DATABASES[OPTIONS["database"]]` names.

    An add joins the caller's transaction: a `send_mail()` inside
    `transaction.atomic()` that rolls back queues nothing. Every transaction the
    store runs itself on PostgreSQL starts with `SET TRANSACTION ISOLATION LEVEL
    READ COMMITTED`, whatever the sessions default to; the claim takes rows with
    `SELECT … FOR UPDATE SKIP LOCKED`. On SQLite, whose writers are serialised,
    each transaction starts with a write, and the claim is one conditional
    `UPDATE … RETURNING`.
    """

    supports_transactional_add = True
    #: False: the worker's statements through the ORM on SQLite and PostgreSQL too (the tests
    #: run the contract that way, for the databases that only have that path).
    hand_written_sql = True

    def __init__(self, options: Mapping[str, Any] | None = None, *, max_items: int | None = None) -> None:
        super().__init__(options, max_items=max_items)
        self.alias: str = str(self.options.get("database", "default"))
        self._listener: PgListener | None = None
        #: adds made through this store object (any thread), for the SQLite wake-up
        self._adds = 0
        self._threads = DatabaseThreads(int(self.options.get("threads", 4)), "mailqueue-orm")
        #: SQLite: how long a write the store runs in a transaction of its own waits for the write lock, in all
        self.lock_wait = float(self.options.get("lock_wait", 30))

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> builtins.list[str]:
        unknown = set(options) - {"database", "threads", "lock_wait"}
        if unknown:
            return [f"OrmStore takes 'database', 'threads' and 'lock_wait', not {sorted(unknown)}"]
        threads = options.get("threads", 4)
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 64:
            return ["'threads' must be a whole number from 1 to 64"]
        lock_wait = options.get("lock_wait", 30)
        if isinstance(lock_wait, bool) or not isinstance(lock_wait, int | float) or not 0 <= lock_wait <= 3600:
            return ["'lock_wait' must be a number of seconds from 0 to 3600"]
        alias = options.get("database", "default")
        if not isinstance(alias, str):
            return ["'database' must be an alias of DATABASES"]
        from django.conf import settings

        if alias not in settings.DATABASES:
            return [f"'database' {alias!r} is not an alias of DATABASES ({', '.join(settings.DATABASES)})"]
        return []

    @property
    def supports_wakeup(self) -> bool:  # type: ignore[override]
        return self._connection.vendor in ("postgresql", "sqlite")

    # --- transactions -------------------------------------------------------------

    @property
    def _connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    @contextlib.contextmanager
    def _write(self, *, join: bool = False, durable: bool = True) -> Iterator[BaseDatabaseWrapper]:
        """A transaction for a write: the caller's (with a savepoint) when `join` and
        one is open, else the store's own, at READ COMMITTED on PostgreSQL.

        `durable=False` (renewals, on PostgreSQL): the commit does not wait for the WAL
        flush. A server crash may then forget the last fraction of a second of renewals —
        the lease ends at its earlier expiry — but never an add, a claim or an outcome. (A
        forgotten claim would put the item's revision back: its worker, claiming it again,
        would get the same revision, and both attempts' outcomes would be recorded.)
        """
        conn = self._connection
        try:
            if join and conn.in_atomic_block:
                with transaction.atomic(using=self.alias, savepoint=True):
                    yield conn
                return
            own = not conn.in_atomic_block
            if own:
                drop_if_broken(conn)
            skip_set = durable and own and conn.vendor == "postgresql" and _read_committed_already(conn)
            with transaction.atomic(using=self.alias):
                if conn.vendor == "postgresql" and not _nested(conn) and not skip_set:
                    with conn.cursor() as cursor:
                        cursor.execute(_READ_COMMITTED if durable else _READ_COMMITTED_LEASE)
                yield conn
        except QueueError:
            raise
        except DatabaseError as exc:
            raise _unavailable(exc) from exc

    @contextlib.contextmanager
    def _read(self) -> Iterator[None]:
        conn = self._connection
        if not conn.in_atomic_block:
            drop_if_broken(conn)
        try:
            yield
        except DatabaseError as exc:
            raise _unavailable(exc) from exc

    # --- writing ------------------------------------------------------------------

    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        for new in items:
            check_new_item(new)
        if not items:
            return []
        now_us = to_micros(now)
        self._adds += 1
        conn = self._connection
        if conn.vendor == "postgresql" and self.max_items is None:
            return self._add_postgres(conn, items, now, now_us)
        return self._add(items, now, now_us)

    @_waits_for_lock
    def _add(self, items: Sequence[NewItem], now: datetime, now_us: int) -> builtins.list[QueueItem]:
        with self._write(join=True) as conn:
            if self.max_items is not None:
                self._check_room(conn, len(items))
            if conn.vendor == "sqlite" and conn.features.can_return_rows_from_bulk_insert:
                return self._insert_sqlite(conn, items, now, now_us)
            added = [_as_added(new, now, now_us) for new in items]
            rows = [
                QueuedItem(
                    id=item.id,
                    sender=item.sender,
                    size=item.size,
                    created=now_us,
                    next_attempt=to_micros(item.next_attempt),
                    queue=item.queue,
                    message_id=item.message_id,
                    subject=item.subject,
                )
                for item in added
            ]
            created = QueuedItem.objects.using(self.alias).bulk_create(rows)
            if any(row.seq is None for row in created):
                by_id = dict(
                    QueuedItem.objects.using(self.alias).filter(id__in=[r.id for r in rows]).values_list("id", "seq")
                )
                for row in created:
                    row.seq = by_id[row.id]
            QueuedRecipient.objects.using(self.alias).bulk_create(
                [
                    QueuedRecipient(item_id=row.seq, position=i, address=address, domain=address_domain(address))
                    for row, new in zip(created, items, strict=True)
                    for i, address in enumerate(new.recipients)
                ]
            )
            QueuedMessage.objects.using(self.alias).bulk_create(
                [
                    QueuedMessage(item_id=row.seq, data=bytes(new.message))
                    for row, new in zip(created, items, strict=True)
                ]
            )
            if conn.vendor == "postgresql":
                with conn.cursor() as cursor:
                    cursor.execute("SELECT pg_notify(%s, '')", [NOTIFY_CHANNEL])
        return added

    def _add_postgres(
        self, conn: BaseDatabaseWrapper, items: Sequence[NewItem], now: datetime, now_us: int
    ) -> builtins.list[QueueItem]:
        """Items, recipients and messages in one statement per 500 items (one round trip): atomic by
        itself in autocommit, and a part of the caller's transaction inside one."""
        added: builtins.list[QueueItem] = []
        if not conn.in_atomic_block:
            drop_if_broken(conn)
        try:
            if len(items) > 500 and not conn.in_atomic_block:
                with transaction.atomic(using=self.alias):
                    return self._add_postgres(conn, items, now, now_us)
            for start in range(0, len(items), 500):
                chunk = items[start : start + 500]
                added.extend(self._insert_postgres(conn, chunk, now, now_us))
        except DatabaseError as exc:
            raise _unavailable(exc) from exc
        return added

    def _insert_postgres(
        self, conn: BaseDatabaseWrapper, items: Sequence[NewItem], now: datetime, now_us: int
    ) -> builtins.list[QueueItem]:
        # Columns as arrays, unnested by the server: the statement's text is the same for every
        # batch (parsed once by psycopg), and no parameter list grows with the batch.
        ids: builtins.list[uuid.UUID] = []
        senders: builtins.list[str] = []
        sizes: builtins.list[int] = []
        dues: builtins.list[int] = []
        queues: builtins.list[str] = []
        message_ids: builtins.list[str] = []
        subjects: builtins.list[str] = []
        r_ids: builtins.list[uuid.UUID] = []
        r_positions: builtins.list[int] = []
        r_addresses: builtins.list[str] = []
        r_domains: builtins.list[str] = []
        data: builtins.list[bytes] = []
        result = [_as_added(new, now, now_us) for new in items]
        for new, item in zip(items, result, strict=True):
            ids.append(new.id)
            senders.append(new.sender)
            sizes.append(item.size)
            dues.append(to_micros(item.next_attempt))
            queues.append(new.queue)
            message_ids.append(item.message_id)
            subjects.append(item.subject)
            for position, address in enumerate(new.recipients):
                r_ids.append(new.id)
                r_positions.append(position)
                r_addresses.append(address)
                r_domains.append(address_domain(address))
            data.append(bytes(new.message))
        if len(items) == 1:
            # One item (every send_mail()): plain parameters, the recipients as a VALUES list —
            # no arrays to dump and no joins to plan, twice the rate of the general statement.
            sql = _POSTGRES_ADD_ONE.format(rows=", ".join(["(%b, %b, %b)"] * len(r_ids)), **_TABLES)
            params: builtins.list[Any] = [
                ids[0],
                senders[0],
                sizes[0],
                now_us,
                dues[0],
                queues[0],
                message_ids[0],
                subjects[0],
            ]
            for position, address, domain in zip(r_positions, r_addresses, r_domains, strict=True):
                params += [position, address, domain]
            params += [data[0], NOTIFY_CHANNEL]
        else:
            sql = _POSTGRES_ADD.format(**_TABLES)
            params = [
                now_us,
                ids,
                senders,
                sizes,
                dues,
                queues,
                message_ids,
                subjects,
                r_ids,
                r_positions,
                r_addresses,
                r_domains,
                ids,
                data,
                NOTIFY_CHANNEL,
            ]
        with binary_cursor(conn) as cursor:
            cursor.execute(sql, params)
        return result

    def _insert_sqlite(
        self, conn: BaseDatabaseWrapper, items: Sequence[NewItem], now: datetime, now_us: int
    ) -> builtins.list[QueueItem]:
        """Items, recipients and messages in three statements per 500 items, without model instances
        (the ORM's bulk_create costs more than SQLite's own work here)."""
        result: builtins.list[QueueItem] = []
        with conn.cursor() as cursor:
            for start in range(0, len(items), 500):
                chunk = items[start : start + 500]
                params: builtins.list[Any] = []
                for new in chunk:
                    item = _as_added(new, now, now_us)
                    params += [
                        new.id.hex,
                        new.sender,
                        item.size,
                        now_us,
                        to_micros(item.next_attempt),
                        new.queue,
                        item.message_id,
                        item.subject,
                    ]
                    result.append(item)
                cursor.execute(
                    _SQLITE_ADD_ITEMS.format(
                        items=QueuedItem._meta.db_table, rows=", ".join([_SQLITE_ITEM_ROW] * len(chunk))
                    ),
                    params,
                )
                seq_of = {uuid.UUID(hex=str(item_id)): seq for item_id, seq in cursor.fetchall()}
                cursor.executemany(
                    f"INSERT INTO {QueuedRecipient._meta.db_table} "  # noqa: S608 - table names are ours
                    "(item_id, position, address, domain, state, reply_status, reply_text, remote_mta) "
                    "VALUES (%s, %s, %s, %s, 'pending', '', '', '')",
                    [
                        (seq_of[new.id], position, address, address_domain(address))
                        for new in chunk
                        for position, address in enumerate(new.recipients)
                    ],
                )
                cursor.executemany(
                    f"INSERT INTO {QueuedMessage._meta.db_table} (item_id, data) VALUES (%s, %s)",  # noqa: S608
                    [(seq_of[new.id], bytes(new.message)) for new in chunk],
                )
        return result

    def _check_room(self, conn: BaseDatabaseWrapper, adding: int) -> None:
        """Count under a lock row, so concurrent adders never pass `max_items` together."""
        assert self.max_items is not None
        locks = QueueLock.objects.using(self.alias)
        if not locks.filter(name=_ADD_LOCK).update(counter=F("counter") + 1):
            locks.bulk_create([QueueLock(name=_ADD_LOCK)], ignore_conflicts=True)
            locks.filter(name=_ADD_LOCK).update(counter=F("counter") + 1)
        bound = self.max_items + 1
        with conn.cursor() as cursor:
            cursor.execute(
                f"SELECT COUNT(*) FROM (SELECT 1 FROM {QueuedItem._meta.db_table} LIMIT %s) AS bounded",  # noqa: S608
                [bound],
            )
            (held,) = cursor.fetchone()
        if held + adding > self.max_items:
            raise QueueError(Code.FULL, f"the queue holds {held} items; MAX_ITEMS is {self.max_items}")

    @_waits_for_lock
    def claim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        check_owner(owner)
        if limit < 1:
            return []
        now_us, expires_us = to_micros(now), to_micros(lease_expires)
        lanes: Sequence[str | None] = list(queues) if queues else [None]
        with self._write() as conn:
            rows = self._rows(conn)
            taken: builtins.list[ItemRow] = []
            for lane in lanes:
                wanted = limit - len(taken)
                if wanted <= 0:
                    break
                taken.extend(rows.claim(lane, owner, now_us, expires_us, wanted))
            if not taken:
                return []
            recipients = rows.recipients([row[0] for row in taken])
        lane_of = {name: i for i, name in enumerate(queues or ())}
        taken.sort(key=lambda row: (lane_of.get(row[7], 0), row[5], row[0]))  # queue, next_attempt, seq
        return [to_item(row, recipients[row[0]]) for row in taken]

    def _rows(self, conn: BaseDatabaseWrapper) -> OrmRows:
        """The worker's statements: written by hand on SQLite and PostgreSQL, else the ORM's."""
        if self.hand_written_sql and conn.vendor in ("sqlite", "postgresql"):
            return SqlRows(self.alias, conn)
        return OrmRows(self.alias)

    @_waits_for_lock
    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> builtins.list[uuid.UUID]:
        check_owner(owner)
        if not ids:
            return []
        with self._write(durable=False):
            mine = QueuedItem.objects.using(self.alias).filter(id__in=list(ids), owner=owner)
            mine.update(lease_expires=to_micros(lease_expires))
            held = set(mine.values_list("id", flat=True))
        return [item_id for item_id in ids if item_id in held]

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        (answer,) = self.complete_many([CompleteRequest(item_id, owner, revision, completion)])
        if isinstance(answer, QueueError):
            raise answer
        return answer

    @_waits_for_lock
    def complete_many(self, requests: Sequence[CompleteRequest]) -> builtins.list[QueueItem | None | QueueError]:
        """Every request in one transaction: the rows locked, read, and written back in a
        handful of statements whatever the number of items.

        On SQLite, whose one write lock every writer waits for, the rows are read and the
        outcomes decided before the transaction; in it, the rows are locked and, when
        none changed meanwhile (owner, revision), only written.
        """
        for request in requests:
            check_owner(request.owner)
            check_completion(request.completion)
        if not requests:
            return []
        ids = [r.item_id for r in requests]
        early: tuple[builtins.list[ItemRow], CompletionPlan] | None = None
        if self._connection.vendor == "sqlite" and not self._connection.in_atomic_block:
            with self._read():
                rows = self._rows(self._connection)
                read = rows.read(ids)
                early = read, plan_completions(requests, read, rows.recipients([row[0] for row in read]))
        with self._write() as conn:
            rows = self._rows(conn)
            locked = rows.lock(ids)
            if early is not None and _lease_fields(early[0]) == _lease_fields(locked):
                plan = early[1]
            else:
                plan = plan_completions(requests, locked, rows.recipients([row[0] for row in locked]))
            if plan.dropped:
                rows.drop(plan.dropped)
            rows.write_back(list(plan.kept.values()), plan.changed)
        return plan.answers

    @_waits_for_lock
    def reschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        if owner is not None:
            check_owner(owner)
        with self._write():
            target = QueuedItem.objects.using(self.alias).filter(id=item_id)
            if owner is not None:
                moved = target.filter(owner=owner).update(next_attempt=to_micros(at), owner=None, lease_expires=None)
            else:
                moved = target.update(next_attempt=to_micros(at))
            return moved > 0

    @_waits_for_lock
    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        with self._write() as conn:
            rows = self._rows(conn)
            locked = rows.lock([item_id])
            if not locked:
                return None
            seq = locked[0][0]
            item = to_item(locked[0], rows.recipients([seq])[seq])
            rows.drop([seq])
            return item

    # --- reading ------------------------------------------------------------------

    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        with self._read():
            found = self._load(QueuedItem.objects.using(self.alias).filter(id=item_id))
        return found[0][1] if found else None

    def _load(self, rows: models.QuerySet[QueuedItem]) -> builtins.list[tuple[int, QueueItem]]:
        items = list(rows.values_list(*ITEM_FIELDS))
        recipients = OrmRows(self.alias).recipients([row[0] for row in items])
        return [(row[0], to_item(row, recipients[row[0]])) for row in items]

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        with self._read():
            if self._connection.vendor == "postgresql":
                return self._read_messages_binary(list(item_ids))
            rows = (
                QueuedMessage.objects.using(self.alias)
                .filter(item__id__in=list(item_ids))
                .values_list("item__id", "data")
            )
            return {item_id: bytes(data) for item_id, data in rows}

    def read_message(self, item_id: uuid.UUID) -> bytes | None:
        return self.read_messages([item_id]).get(item_id)

    def _read_messages_binary(self, item_ids: builtins.list[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        """PostgreSQL: the messages in binary format. Django's cursor asks for text, in which
        a bytea comes as hex — twice the message's size held by libpq besides the bytes."""
        import psycopg

        conn = self._connection
        found: dict[uuid.UUID, bytes] = {}
        with conn.wrap_database_errors:
            conn.ensure_connection()
            with psycopg.Cursor(conn.connection) as cursor:
                # Prepared only as the connection's prepare_threshold says (Django's default: never).
                cursor.execute(_READ_MESSAGES, [READ_CHUNK, item_ids], binary=True)
                large: builtins.list[tuple[uuid.UUID, int, int]] = []
                for item_id, seq, size, data in cursor.fetchall():
                    if data is not None:
                        found[item_id] = data
                    else:
                        large.append((item_id, seq, size))
                # A large message comes in slices: libpq keeps its input buffer as large as
                # the largest row it ever read, for as long as the connection lives.
                for item_id, seq, size in large:
                    parts = []
                    for start in range(0, size, READ_CHUNK):
                        cursor.execute(_READ_SLICE, [start + 1, READ_CHUNK, seq], binary=True)
                        row = cursor.fetchone()
                        if row is None:
                            break  # cancelled or finished meanwhile
                        parts.append(row[0])
                    else:
                        found[item_id] = b"".join(parts)
        return found

    def _query(self, query: ItemQuery | None) -> models.QuerySet[QueuedItem]:
        rows = QueuedItem.objects.using(self.alias).all()
        if query is None:
            return rows
        if query.queue is not None:
            rows = rows.filter(queue=query.queue)
        if query.domain is not None:
            rows = rows.filter(
                seq__in=QueuedRecipient.objects.using(self.alias).filter(domain=query.domain.lower()).values("item_id")
            )
        if query.search:
            rows = rows.filter(
                Q(sender__icontains=query.search)
                | Q(
                    seq__in=QueuedRecipient.objects.using(self.alias)
                    .filter(address__icontains=query.search)
                    .values("item_id")
                )
            )
        if query.state is not None:
            if query.now is None:
                raise ValueError("a state filter needs `now`")
            now_us = to_micros(query.now)
            leased = Q(owner__isnull=False, lease_expires__gt=now_us)
            if query.state is ItemState.LEASED:
                rows = rows.filter(leased)
            elif query.state is ItemState.DEFERRED:
                rows = rows.filter(attempts__gt=0).exclude(leased)
            elif query.state is ItemState.DUE:
                rows = rows.filter(attempts=0, next_attempt__lte=now_us).exclude(leased)
            else:
                rows = rows.filter(attempts=0, next_attempt__gt=now_us).exclude(leased)
        return rows

    def list(self, query: ItemQuery | None = None, *, offset: int = 0, limit: int = 100) -> builtins.list[QueueItem]:
        with self._read():
            page = self._query(query).order_by("next_attempt", "seq")[offset : offset + limit]
            return [item for _, item in self._load(page)]

    def count(self, query: ItemQuery | None = None) -> int:
        with self._read():
            return self._query(query).count()

    def iter_items(self, query: ItemQuery | None = None, *, batch: int = 500) -> Iterator[QueueItem]:
        """Resumes after the last (next_attempt, seq) read, on the index `list` orders by: no OFFSET to skip."""
        rows = self._query(query).order_by("next_attempt", "seq")
        after: Q | None = None
        while True:
            with self._read():
                page = self._load((rows if after is None else rows.filter(after))[:batch])
            yield from (item for _, item in page)
            if len(page) < batch:
                return
            seq, last = page[-1]
            next_us = to_micros(last.next_attempt)
            after = Q(next_attempt__gt=next_us) | Q(next_attempt=next_us, seq__gt=seq)

    def summary(self, *, now: datetime) -> QueueSummary:
        """Aggregate queries: one per part of the summary, whatever the queue's size."""
        now_us = to_micros(now)
        leased = Q(owner__isnull=False, lease_expires__gt=now_us)
        state = models.Case(
            models.When(leased, then=models.Value(ItemState.LEASED.value)),
            models.When(attempts__gt=0, then=models.Value(ItemState.DEFERRED.value)),
            models.When(next_attempt__lte=now_us, then=models.Value(ItemState.DUE.value)),
            default=models.Value(ItemState.SCHEDULED.value),
            output_field=models.CharField(),
        )
        summary = QueueSummary(now=now)
        with self._read():
            rows = (
                QueuedItem.objects.using(self.alias)
                .annotate(state=state)
                .values("queue", "state")
                .annotate(n=models.Count("seq"))
                .order_by()
            )
            for row in rows:
                summary.total += row["n"]
                summary.by_state[row["state"]] += row["n"]
                summary.by_queue.setdefault(row["queue"], Counter())[row["state"]] += row["n"]
            domains = (
                QueuedRecipient.objects.using(self.alias)
                .filter(state=RecipientState.PENDING.value, item__attempts__gt=0)
                .exclude(item__owner__isnull=False, item__lease_expires__gt=now_us)
                .values("domain")
                .annotate(n=models.Count("id"))
                .order_by("-n", "domain")[:100]
            )
            for by_domain in domains:
                summary.deferred_by_domain[by_domain["domain"]] = by_domain["n"]
            oldest = self._load(due(self.alias, None, now_us).order_by("next_attempt", "seq")[:1])
            summary.oldest_due = oldest[0][1] if oldest else None
        return summary

    # --- for tests: damage as a real store might suffer it ---------------------------

    def lose_message(self, item_id: uuid.UUID) -> None:
        """Delete an item's message row but keep the item (a test of the 5.3.0 flow)."""
        QueuedMessage.objects.using(self.alias).filter(item__id=item_id).delete()

    # --- waking ---------------------------------------------------------------------

    async def await_added(self, timeout: float) -> bool:
        vendor = self._connection.vendor
        if vendor == "sqlite":
            return await self._await_sqlite_commit(timeout)
        if vendor != "postgresql":
            return await super().await_added(timeout)
        if self._listener is None:
            from .pg_listen import PgListener

            self._listener = PgListener(self._connection.settings_dict, NOTIFY_CHANNEL)
        return await self._listener.wait(timeout)

    async def _in_thread(self, func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """The async twins run in the store's own threads: at most `threads` connections."""
        return await self._threads.run(func, *args, **kwargs)

    def close(self) -> None:
        """Stop the store's threads and close their database connections."""
        self._threads.close()

    async def _await_sqlite_commit(self, timeout: float) -> bool:
        """SQLite has no NOTIFY: watch `PRAGMA data_version`, which changes when another
        connection (any process on the machine) commits, every 25 ms."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        added = self._adds  # adds by this process: data_version ignores a connection's own commits
        try:
            start = await self._in_thread(self._data_version)
            while loop.time() < deadline:
                await asyncio.sleep(min(0.025, max(0.0, deadline - loop.time())))
                if self._adds != added or await self._in_thread(self._data_version) != start:
                    return True
        except DatabaseError:
            await asyncio.sleep(max(0.0, deadline - loop.time()))
        return False

    def _data_version(self) -> int:
        with self._connection.cursor() as cursor:
            cursor.execute("PRAGMA data_version")
            return int(cursor.fetchone()[0])

    async def aclose(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()
        await asyncio.to_thread(self.close)


#: One statement adding items, their recipients and their messages, and waking workers. Every
#: parameter is sent in binary (`%b`): psycopg then writes the arrays and the message bytes as they
#: are, where the text format would escape every element in Python (half the time of a batch).
_POSTGRES_ADD = (
    "WITH added AS (INSERT INTO {items} (id, sender, size, created, next_attempt, attempts, "
    "queue, revision, reclaims, delay_warned, message_id, subject) "
    "SELECT i.id, i.sender, i.size, %b, i.next_attempt, 0, i.queue, 0, 0, false, i.message_id, i.subject "
    "FROM unnest(%b::uuid[], %b::text[], %b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::text[]) "
    "WITH ORDINALITY AS i(id, sender, size, next_attempt, queue, message_id, subject, n) ORDER BY i.n "
    "RETURNING seq, id), "
    "recipients AS (INSERT INTO {recipients} (item_id, position, address, domain, state, "
    "reply_status, reply_text, remote_mta) SELECT added.seq, r.position, r.address, r.domain, 'pending', '', '', '' "
    "FROM added JOIN unnest(%b::uuid[], %b::smallint[], %b::text[], %b::text[]) AS r(id, position, address, domain) "
    "ON r.id = added.id), "
    "messages AS (INSERT INTO {messages} (item_id, data) SELECT added.seq, m.data FROM added "
    "JOIN unnest(%b::uuid[], %b::bytea[]) AS m(id, data) ON m.id = added.id) "
    "SELECT pg_notify(%b, '')"
)
#: The same for one item, its recipients as rows of (position, address, domain).
_POSTGRES_ADD_ONE = (
    "WITH added AS (INSERT INTO {items} (id, sender, size, created, next_attempt, attempts, "
    "queue, revision, reclaims, delay_warned, message_id, subject) "
    "VALUES (%b, %b, %b, %b, %b, 0, %b, 0, 0, false, %b, %b) RETURNING seq), "
    "recipients AS (INSERT INTO {recipients} (item_id, position, address, domain, state, "
    "reply_status, reply_text, remote_mta) SELECT added.seq, r.position, r.address, r.domain, 'pending', '', '', '' "
    "FROM added, (VALUES {rows}) AS r(position, address, domain)), "
    "messages AS (INSERT INTO {messages} (item_id, data) SELECT added.seq, %b FROM added) "
    "SELECT pg_notify(%b, '')"
)
_TABLES = {
    "items": QueuedItem._meta.db_table,
    "recipients": QueuedRecipient._meta.db_table,
    "messages": QueuedMessage._meta.db_table,
}


_READ_MESSAGES = (
    "SELECT i.id, m.item_id, octet_length(m.data), "  # noqa: S608 - table names, no input
    "CASE WHEN octet_length(m.data) <= %s THEN m.data END "
    f"FROM {QueuedMessage._meta.db_table} m JOIN {QueuedItem._meta.db_table} i ON i.seq = m.item_id "
    "WHERE i.id = ANY(%s)"
)
_READ_SLICE = f"SELECT substring(data FROM %s FOR %s) FROM {QueuedMessage._meta.db_table} WHERE item_id = %s"  # noqa: S608
_SQLITE_ITEM_ROW = "(%s, %s, %s, %s, %s, 0, %s, NULL, NULL, 0, 0, 0, %s, %s)"
_SQLITE_ADD_ITEMS = (
    "INSERT INTO {items} (id, sender, size, created, next_attempt, attempts, queue, owner, lease_expires, "
    "revision, reclaims, delay_warned, message_id, subject) VALUES {rows} RETURNING id, seq"
)
_READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
_READ_COMMITTED_LEASE = f"{_READ_COMMITTED}; SET LOCAL synchronous_commit TO OFF"


#: psycopg 3 connections known to run their transactions at READ COMMITTED anyway.
_READ_COMMITTED_CONNECTIONS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _read_committed_already(conn: BaseDatabaseWrapper) -> bool:
    """Whether a transaction on `conn` starts at READ COMMITTED without being told (asked
    once per connection, outside a transaction), so the SET can be spared."""
    try:
        import psycopg
    except ImportError:  # psycopg2: always SET
        return False
    conn.ensure_connection()
    raw = conn.connection
    if not isinstance(raw, psycopg.Connection):
        return False
    known = _READ_COMMITTED_CONNECTIONS.get(raw)
    if known is None:
        if raw.isolation_level is not None:
            known = raw.isolation_level == psycopg.IsolationLevel.READ_COMMITTED
        else:
            with conn.cursor() as cursor:
                cursor.execute("SHOW default_transaction_isolation")
                row = cursor.fetchone()
            known = row is not None and row[0] == "read committed"
        _READ_COMMITTED_CONNECTIONS[raw] = known
    return known and raw.isolation_level in (None, psycopg.IsolationLevel.READ_COMMITTED)


def _lease_fields(rows: Sequence[ItemRow]) -> set[tuple[Any, ...]]:
    """(seq, owner, revision) of each row: every write to an item's recipients or counters moves its revision."""
    return {(row[0], row[8], row[10]) for row in rows}


def _nested(conn: BaseDatabaseWrapper) -> bool:
    return len(conn.savepoint_ids) > 0


def _as_added(new: NewItem, now: datetime, now_us: int) -> QueueItem:
    """The item as an add stores it: due at `now` unless it has a later `not_before`, texts cut to their columns."""
    due = new.not_before if new.not_before is not None and new.not_before > now else now
    return QueueItem(
        id=new.id,
        sender=new.sender,
        recipients=tuple(Recipient(a) for a in new.recipients),
        size=len(new.message),
        created=from_micros(now_us),
        next_attempt=from_micros(to_micros(due)),
        queue=new.queue,
        message_id=new.message_id[:998],
        subject=new.subject[:255],
    )


def _unavailable(exc: DatabaseError) -> QueueError:
    # The driver's text can name the host, never the password (Django does not put it
    # in errors); keep only the class and the first line to stay short.
    reason = str(exc).splitlines()[0] if str(exc) else ""
    return QueueError(Code.STORE_UNAVAILABLE, f"the database refused the operation: {type(exc).__name__}: {reason}")

"""The PostgreSQL dialect: the statements written by hand (`sql/postgresql/`), each list one array parameter
and every parameter in binary; transactions at READ COMMITTED; wake-ups by LISTEN/NOTIFY."""

from __future__ import annotations

import builtins
import contextlib
import uuid
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL

from ...core.clock import from_micros
from ...core.items import NewItem, QueueItem, address_domain, as_added, due_micros
from ...core.search import terms
from ...core.shaping import Window
from ..base import READ_CHUNK
from .base import HandWritten
from .pg_arrays import ByteaArray, Int2Array, Int8Array, TextArray, UuidArray
from .pg_binding import binary_cursor, execute_autocommit
from .pg_listen import PgListener
from .pg_search import candidate_reads, tested_sql, word_index_present
from .portable import PortableDialect
from .rows import TEXT_LIMITS, ItemRow, RecipientRow, added_values
from .statements import statement, with_rows
from .threads import DatabaseThreads

#: The channel an add notifies, so idle workers wake at once.
NOTIFY_CHANNEL = "django_mailqueue"
#: Items added in one statement.
ADD_CHUNK = 500

#: psycopg 3 connections known to run their transactions at READ COMMITTED anyway.
_READ_COMMITTED_CONNECTIONS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


class PostgresDialect(HandWritten, PortableDialect):
    """Every transaction the store runs itself starts with `SET TRANSACTION ISOLATION LEVEL READ
    COMMITTED`, whatever the sessions default to (spared where the connection is known to start there);
    the claim takes rows with `SELECT … FOR UPDATE SKIP LOCKED`; an add of up to 500 items is one
    statement, which notifies idle workers."""

    name = "postgresql"
    wakes = True
    one_statement_add = ADD_CHUNK

    def __init__(self, alias: str, threads: DatabaseThreads) -> None:
        super().__init__(alias, threads)
        self._listener: PgListener | None = None
        #: whether the subject's trigram index exists (asked once)
        self._trigram: bool | None = None

    def cursor(self) -> AbstractContextManager[CursorWrapper]:
        return binary_cursor(self.connection)

    @contextlib.contextmanager
    def atomic(self, conn: BaseDatabaseWrapper, *, durable: bool) -> Iterator[None]:
        """`durable=False` (renewals): the commit does not wait for the WAL flush. A server crash may then
        forget the last fraction of a second of renewals — the lease ends at its earlier expiry — but never
        an add, a claim or an outcome (docs/stores.md, "The dialects")."""
        own = not conn.in_atomic_block
        set_level = own and not (durable and _read_committed_already(conn))
        with transaction.atomic(using=self.alias):
            if set_level:
                with conn.cursor() as cursor:
                    cursor.execute(statement(self.name, "read_committed" if durable else "read_committed_lease"))
            yield

    def wake(self, conn: BaseDatabaseWrapper) -> None:
        with conn.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [NOTIFY_CHANNEL])

    def add_rows(
        self, conn: BaseDatabaseWrapper, items: Sequence[NewItem], now: datetime, now_us: int, *, returning: bool = True
    ) -> builtins.list[QueueItem]:
        """One statement per 500 items (one round trip): atomic by itself in autocommit."""
        added: builtins.list[QueueItem] = []
        for start in range(0, len(items), ADD_CHUNK):
            added.extend(self._insert(conn, items[start : start + ADD_CHUNK], now, now_us, returning))
        return added

    def _insert(
        self, conn: BaseDatabaseWrapper, items: Sequence[NewItem], now: datetime, now_us: int, returning: bool
    ) -> builtins.list[QueueItem]:
        """The items as stored when `returning` (else none: `QueueStore.put_many`)."""
        if returning:
            created = from_micros(now_us)
            result = [as_added(new, now, now_us, text_limits=TEXT_LIMITS, created=created) for new in items]
        else:
            result = []
        if len(items) == 1:
            # One item (every send_mail()): plain parameters, twice the rate of the general statement.
            (new,) = items
            params = added_values(new, now, now_us)
            for position, address in enumerate(new.recipients):
                params += [position, address, address_domain(address)]
            params += [bytes(new.message), NOTIFY_CHANNEL]
            sql = with_rows(self.name, "add_one", len(new.recipients))
        else:
            # Columns as arrays in binary, packed by hand (`pg_arrays`): the statement's text is the same for
            # every batch (parsed once by psycopg).
            r_ids: builtins.list[uuid.UUID] = []
            r_positions: builtins.list[int] = []
            r_addresses: builtins.list[str] = []
            for new in items:
                recipients = new.recipients
                r_ids += [new.id] * len(recipients)
                r_positions += range(len(recipients))
                r_addresses += recipients
            ids = UuidArray.of([new.id for new in items])
            message_id_limit, subject_limit = TEXT_LIMITS
            params = [
                now_us,
                ids,
                TextArray.of([new.sender for new in items]),
                Int8Array.of([len(new.message) for new in items]),
                Int8Array.of([due_micros(new, now, now_us) for new in items]),
                TextArray.of([new.queue for new in items]),
                TextArray.of([new.message_id[:message_id_limit] for new in items]),
                TextArray.of([new.subject[:subject_limit] for new in items]),
                UuidArray.of(r_ids),
                Int2Array.of(r_positions),
                TextArray.of(r_addresses),
                TextArray.of([address_domain(address) for address in r_addresses]),
                ids,
                ByteaArray.of_varlena([bytes(new.message) for new in items]),
                NOTIFY_CHANNEL,
            ]
            sql = statement(self.name, "add")
        execute_autocommit(conn, sql, params)
        return result

    def read(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        return self._item_rows("read", item_ids)

    def lock(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        return self._item_rows("lock", item_ids)

    def lock_leases(self, item_ids: Sequence[uuid.UUID]) -> set[tuple[Any, ...]] | None:
        return set(self._item_rows("lock_leases", item_ids))

    def _item_rows(self, name: str, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        with self.cursor() as cursor:
            cursor.execute(statement(self.name, name), [list(item_ids)])
            return list(cursor.fetchall())

    def recipients(self, seqs: Sequence[int]) -> dict[int, list[RecipientRow]]:
        found: dict[int, list[RecipientRow]] = {seq: [] for seq in seqs}
        if seqs:
            with self.cursor() as cursor:
                cursor.execute(statement(self.name, "recipients"), [list(seqs)])
                for row in cursor.fetchall():
                    found[row[0]].append(row)
        return found

    def renew(self, item_ids: Sequence[uuid.UUID], owner: str, expires_us: int) -> set[uuid.UUID] | None:
        """One statement; in its own transaction its commit does not wait for the WAL flush (docs/reliability.md)."""
        asynchronous = None if self.connection.in_atomic_block else "off"
        with self.cursor() as cursor:
            cursor.execute(statement(self.name, "renew"), [asynchronous, expires_us, list(item_ids), owner])
            return {row[0] for row in cursor.fetchall()}

    def take_tokens(self, name: str, rate: float, burst: int, want: int, now_us: int) -> int:
        """One statement; in its own transaction its commit does not wait for the WAL flush (the bucket's row
        stays locked until the commit: docs/shaping.md), in the caller's it leaves the caller's commit as it is."""
        asynchronous = None if self.connection.in_atomic_block else "off"
        with self.cursor() as cursor:
            cursor.execute(
                statement(self.name, "take_tokens"),
                [asynchronous, name, rate, burst, float(burst), min(want, burst), now_us],
            )
            return int(cursor.fetchone()[0])

    def take_window(
        self, name: str, rate: float, burst: int, want: int, now_us: int, window: Window, done: int, ended: int
    ) -> int:
        """One call of the function migration 0019 made (`clock_timestamp()` read once the row is locked); its
        commit as `take_tokens`'s."""
        asynchronous = None if self.connection.in_atomic_block else "off"
        with self.cursor() as cursor:
            cursor.execute(
                "SELECT mailqueue_take_window(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [
                    asynchronous,
                    name,
                    rate,
                    burst,
                    min(want, burst),
                    now_us,
                    window.cap,
                    window.period,
                    window.expire,
                    done,
                    ended,
                ],
            )
            return int(cursor.fetchone()[0])

    def drop(self, seqs: Sequence[int]) -> None:
        with self.cursor() as cursor:
            cursor.execute(statement(self.name, "drop"), [list(seqs)] * 3)

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        """The messages in binary format. Django's cursor asks for text, in which a bytea comes
        as hex — twice the message's size held by libpq besides the bytes."""
        import psycopg

        conn = self.connection
        found: dict[uuid.UUID, bytes] = {}
        with conn.wrap_database_errors:
            conn.ensure_connection()
            with psycopg.Cursor(conn.connection) as cursor:
                # Prepared only as the connection's prepare_threshold says (Django's default: never).
                cursor.execute(statement(self.name, "read_messages"), [READ_CHUNK, list(item_ids)], binary=True)
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
                        cursor.execute(statement(self.name, "read_slice"), [start + 1, READ_CHUNK, seq], binary=True)
                        row = cursor.fetchone()
                        if row is None:
                            break  # cancelled or finished meanwhile
                        parts.append(row[0])
                    else:
                        found[item_id] = b"".join(parts)
        return found

    def queue_names(self, limit: int) -> builtins.list[str]:
        """Django's cursor (text parameters): an admin's statement, which `EXPLAIN` can be shown."""
        with self.connection.cursor() as cursor:
            cursor.execute(statement(self.name, "queues"), [limit])
            return [row[0] for row in cursor.fetchall()]

    def seq_in(self, seqs: builtins.list[int]) -> Q:
        """One array parameter (`= ANY`), not one per seq: planned in a millisecond for 20,000, and tested hashed."""
        # the package's own condition; the seqs are one parameter
        return Q(RawSQL(statement(self.name, "seq_in"), [seqs], output_field=BooleanField()))  # noqa: S611

    def search_probe(
        self, scope: QuerySet[Any], search: str, *, order_by: Sequence[str], rows: int, offset: int, limit: int
    ) -> builtins.list[int] | None:
        """The first `rows` rows of `scope` as a subquery each term is tested on (`search_tested_*.sql`), read in
        their order: PostgreSQL stops once the page is found (a word in 1 subject of 7: 357 rows for a page of 51)."""
        inner, params = scope.values("seq", "next_attempt", "subject")[:rows].query.sql_with_params()
        tested, tested_params = tested_sql(self.name, search)
        order = ", ".join(f"{column.lstrip('-')} DESC" if column.startswith("-") else column for column in order_by)
        # Django's own SQL of the scope, the package's statements and column names; the values are parameters
        sql = f"SELECT seq FROM ({inner}) AS mailqueue_item WHERE {tested} ORDER BY {order} LIMIT %s OFFSET %s"  # noqa: S608
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [*params, *tested_params, limit, offset])
            found = [row[0] for row in cursor.fetchall()]
        return found if len(found) == limit else None

    def search_candidates(self, search: str, bound: int) -> builtins.list[int] | None:
        """Each term's items read from its index up to the bound — a domain's range of `mailqueue_recipient_domain`,
        an address start's of `mailqueue_recipient_address_start`, a word's of the subject's trigram index — and
        intersected; a term with more, or a word no index serves (no pg_trgm, under 3 characters), left out (the
        store tests every term on the rows found); None when every term is."""
        conn = self.connection
        if self._trigram is None:
            self._trigram = word_index_present(conn)
        found: set[int] | None = None
        with conn.cursor() as cursor:
            for term in terms(search):
                matched: set[int] | None = set()
                for name, value in candidate_reads(term, indexed_words=self._trigram) or []:
                    cursor.execute(statement(self.name, name), [value, bound + 1])
                    rows = cursor.fetchall()
                    if matched is None or len(rows) > bound:
                        matched = None
                        break
                    matched.update(row[0] for row in rows)
                if matched is not None and candidate_reads(term, indexed_words=self._trigram) is not None:
                    found = matched if found is None else found & matched
        return sorted(found) if found is not None and len(found) <= bound else None

    async def await_added(self, timeout: float) -> bool:
        if self._listener is None:
            self._listener = PgListener(self.connection.settings_dict, NOTIFY_CHANNEL)
        return await self._listener.wait(timeout)

    async def aclose(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()


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
                cursor.execute(statement("postgresql", "show_isolation"))
                row = cursor.fetchone()
            known = row is not None and row[0] == "read committed"
        _READ_COMMITTED_CONNECTIONS[raw] = known
    return known and raw.isolation_level in (None, psycopg.IsolationLevel.READ_COMMITTED)

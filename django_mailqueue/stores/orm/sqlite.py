"""The SQLite dialect: the worker's statements written by hand (`sql/sqlite/`), one placeholder per value in
chunks under SQLite's bound; writes that wait for its one write lock; wake-ups from `PRAGMA data_version`."""

from __future__ import annotations

import asyncio
import builtins
import functools
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, TypeVar

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ...core.clock import from_micros
from ...core.items import NewItem, QueueItem, Reply, Suppression, address_domain, as_added
from .base import HandWritten
from .portable import PortableDialect
from .rows import TEXT_LIMITS, ItemRow, RecipientRow, added_values
from .sqlite_wait import wait_for_lock
from .statements import statement, with_rows
from .threads import DatabaseThreads

_T = TypeVar("_T")
#: SQLite's bound on the parameters of one statement, as Django counts it.
CHUNK = 900
#: Items added in one statement (8 parameters each; their messages 2 each, in one more).
ADD_CHUNK = 500
#: The recipients an item added alone may have for `_insert_one` (one statement under SQLite's bound of 999).
ONE_RECIPIENTS = 200
#: How often an idle worker looks at `PRAGMA data_version`, in seconds.
POLL = 0.025


class SqliteDialect(HandWritten, PortableDialect):
    """SQLite serialises its writers: each transaction the store runs itself starts with a write (so it
    holds the lock from the start) and waits for the lock up to the store's `lock_wait`; the claim is one
    conditional `UPDATE … RETURNING`; `complete_many` decides outcomes before it takes the lock."""

    name = "sqlite"
    wakes = True
    plans_before_lock = True

    def __init__(self, alias: str, threads: DatabaseThreads) -> None:
        super().__init__(alias, threads)
        #: adds made through this dialect (any thread): `data_version` ignores the connection's own commits
        self.adds = 0

    def run_write(self, write: Callable[[], _T], *, lock_wait: float) -> _T:
        conn = self.connection
        if conn.in_atomic_block:
            return write()
        return wait_for_lock(conn, write, wait=lock_wait)

    def cursor(self) -> AbstractContextManager[CursorWrapper]:
        return self.connection.cursor()

    def item_row(self, row: tuple[Any, ...]) -> ItemRow:
        # SQLite keeps a UUID as 32 hex digits and a boolean as 0 or 1.
        return (row[0], uuid.UUID(hex=row[1]), *row[2:12], bool(row[12]), *row[13:])

    def wake(self, conn: BaseDatabaseWrapper) -> None:
        self.adds += 1

    def add_rows(
        self, conn: BaseDatabaseWrapper, items: Sequence[NewItem], now: datetime, now_us: int, *, returning: bool = True
    ) -> builtins.list[QueueItem]:
        """Items, recipients and messages in one multi-row `INSERT` each per 500 items (more for recipients
        past the statement's bound on parameters), without model instances, through `add_cursor`: the
        ORM's bulk_create, a statement stepped once a row, or Django's `%s` rewrite of a statement of
        hundreds of parameters costs more than SQLite's own work here (docs/performance.md, "The bulk
        enqueue floor"). With `returning=False` no `QueueItem` is made: for a batch, making them (and the
        garbage collections their objects bring on) costs more than SQLite's own work."""
        self.adds += 1
        if not conn.features.can_return_rows_from_bulk_insert:  # SQLite before 3.35: no RETURNING
            return super().add_rows(conn, items, now, now_us, returning=returning)
        with add_cursor(conn) as (cursor, written):
            return _insert(cursor, written, conn, items, now, now_us, returning=returning)

    def add_alone(
        self,
        conn: BaseDatabaseWrapper,
        items: Sequence[NewItem],
        now: datetime,
        now_us: int,
        *,
        returning: bool,
        lock_wait: float,
    ) -> builtins.list[QueueItem] | None:
        """In autocommit, with nothing of Django's watching the statements (no query log, no
        `execute_wrappers`): the add as its own transaction on `sqlite3`'s connection — `BEGIN` (in Django's
        `transaction_mode`), the statements, `COMMIT`, waiting for the write lock as the store's own writes
        do — without Django's `atomic()` and cursor around it (docs/performance.md, "One `send_mail()` on
        SQLite: the add without `atomic()`"). Errors come as Django's. None otherwise: the store's path."""
        if (
            conn.in_atomic_block
            or getattr(conn, "execute_wrappers", True)  # Django's list of them; unknown: Django's path
            or conn.queries_logged
            or not conn.get_autocommit()
            or conn.connection.in_transaction
            or not conn.features.can_return_rows_from_bulk_insert
        ):
            return None
        mode = getattr(conn, "transaction_mode", None)  # OPTIONS["transaction_mode"], Django 5.1+
        begin = f"BEGIN {mode}" if mode else "BEGIN"
        one = not returning and len(items) == 1 and len(items[0].recipients) <= ONE_RECIPIENTS
        self.adds += 1

        def write() -> builtins.list[QueueItem]:
            conn.validate_thread_sharing()
            raw = conn.connection
            with conn.wrap_database_errors:
                cursor = raw.cursor()
                try:
                    cursor.execute(begin)
                    try:
                        if one:
                            _insert_one(cursor, items[0], now, now_us)
                            added: builtins.list[QueueItem] = []
                        else:
                            added = _insert(cursor, _qmark, conn, items, now, now_us, returning=returning)
                        raw.commit()
                    except BaseException:
                        raw.rollback()
                        raise
                finally:
                    cursor.close()
            return added

        return wait_for_lock(conn, write, wait=lock_wait)

    def read(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        return self._item_rows("read", [i.hex for i in item_ids])

    def lock(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        return self._item_rows("lock", [i.hex for i in item_ids])

    def renew(self, item_ids: Sequence[uuid.UUID], owner: str, expires_us: int) -> set[uuid.UUID] | None:
        """One statement a chunk of ids, each committed by itself (a renewal is per item)."""
        held: set[uuid.UUID] = set()
        with self.cursor() as cursor:
            for chunk in _chunks([i.hex for i in item_ids]):
                cursor.execute(_in(statement(self.name, "renew"), chunk), [expires_us, owner, *chunk])
                held.update(uuid.UUID(hex=row[0]) for row in cursor.fetchall())
        return held

    def lock_leases(self, item_ids: Sequence[uuid.UUID]) -> set[tuple[Any, ...]] | None:
        leases: set[tuple[Any, ...]] = set()
        with self.cursor() as cursor:
            for chunk in _chunks([i.hex for i in item_ids]):
                cursor.execute(_in(statement(self.name, "lock_leases"), chunk), chunk)
                leases.update(cursor.fetchall())
        return leases

    def _item_rows(self, name: str, ids: list[str]) -> list[ItemRow]:
        rows: list[ItemRow] = []
        with self.cursor() as cursor:
            for chunk in _chunks(ids):
                cursor.execute(_in(statement(self.name, name), chunk), chunk)
                rows.extend(self.item_row(row) for row in cursor.fetchall())
        return rows

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        """One statement a chunk of ids, not the ORM's join (its query built and its ids converted each time)."""
        found: dict[uuid.UUID, bytes] = {}
        of_hex = {i.hex: i for i in item_ids}
        with self.cursor() as cursor:
            for chunk in _chunks(list(of_hex)):
                cursor.execute(_in(statement(self.name, "read_messages"), chunk), chunk)
                found.update((of_hex[item_id], bytes(data)) for item_id, data in cursor.fetchall())
        return found

    def suppressed(self, addresses: Sequence[str], since_us: int) -> dict[str, Suppression]:
        """One statement a chunk of addresses (the worker's look-up of a claimed batch), not the ORM's query."""
        found: dict[str, Suppression] = {}
        with self.cursor() as cursor:
            for chunk in _chunks(list(dict.fromkeys(addresses))):
                cursor.execute(_in(statement(self.name, "suppressed"), chunk), [*chunk, since_us])
                for address, code, status, text, since, item_id in cursor.fetchall():
                    held = uuid.UUID(hex=item_id) if item_id is not None else None
                    found[address] = Suppression(address, Reply(code, status, text), from_micros(since), held)
        return found

    def recipients(self, seqs: Sequence[int]) -> dict[int, list[RecipientRow]]:
        """Each row's key is (seq, position), the table's primary key since migration 0022 (`id` is no index)."""
        found: dict[int, list[RecipientRow]] = {seq: [] for seq in seqs}
        with self.cursor() as cursor:
            for chunk in _chunks(list(seqs)):
                cursor.execute(_in(statement(self.name, "recipients"), chunk), chunk)
                for seq, position, *rest in cursor.fetchall():
                    found[seq].append((seq, (seq, position), *rest))
        return found

    def write_back(self, items: Sequence[tuple[Any, ...]], recipients: Sequence[tuple[Any, ...]]) -> None:
        """`recipients`' keys (`recipients`: (seq, position)) as write_recipient.sql's last two values."""
        super().write_back(items, [(*row[:-1], *row[-1]) for row in recipients])

    def drop(self, seqs: Sequence[int]) -> None:
        with self.cursor() as cursor:
            for chunk in _chunks(list(seqs)):
                for sql in statement(self.name, "drop").split(";"):  # one statement at a time, as sqlite3 runs them
                    cursor.execute(_in(sql, chunk), chunk)

    async def await_added(self, timeout: float) -> bool:
        """SQLite has no NOTIFY: watch `PRAGMA data_version`, which changes when another
        connection (any process on the machine) commits, every `POLL` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        added = self.adds  # adds by this process: data_version ignores a connection's own commits
        try:
            start = await self.threads.run(self._data_version)
            while loop.time() < deadline:
                await asyncio.sleep(min(POLL, max(0.0, deadline - loop.time())))
                if self.adds != added or await self.threads.run(self._data_version) != start:
                    return True
        except DatabaseError:
            await asyncio.sleep(max(0.0, deadline - loop.time()))
        return False

    def _data_version(self) -> int:
        with self.cursor() as cursor:
            cursor.execute(statement(self.name, "data_version"))
            return int(cursor.fetchone()[0])


@contextmanager
def add_cursor(conn: BaseDatabaseWrapper) -> Iterator[tuple[CursorWrapper, Callable[[str, int], str]]]:
    """A cursor for the add's statements, and how to write them (`with_rows`' arguments): `own_cursor`'s."""
    with own_cursor(conn) as (cursor, qmark):
        yield cursor, _qmark if qmark else _percent


@contextmanager
def own_cursor(conn: BaseDatabaseWrapper) -> Iterator[tuple[CursorWrapper, bool]]:
    """A cursor for statements of many parameters, and whether they take SQLite's `?` (True) or `%s`:
    `sqlite3`'s own cursor in Django's wrapper (`execute_wrapper`s, errors as Django's, the transaction's
    state checked), without the `%s` → `?` rewrite Django's SQLite cursor makes of every statement;
    Django's cursor and `%s` when its query log is on (`DEBUG`, a test's capture), which formats a
    statement's parameters into its `%s`."""
    if conn.queries_logged:
        with conn.cursor() as cursor:
            yield cursor, False
        return
    conn.ensure_connection()
    conn.validate_thread_sharing()
    raw = conn.connection.cursor()
    try:
        yield conn.make_cursor(raw), True
    finally:
        raw.close()


def _insert(
    cursor: Any,
    written: Callable[[str, int], str],
    conn: BaseDatabaseWrapper,
    items: Sequence[NewItem],
    now: datetime,
    now_us: int,
    *,
    returning: bool,
) -> builtins.list[QueueItem]:
    """The add's statements on `cursor`, written by `written`; the items as stored when `returning`."""
    result: builtins.list[QueueItem] = []
    created = from_micros(now_us) if returning else None
    recipient_rows = (conn.features.max_query_params or CHUNK) // 4  # Django's bound: 999 parameters
    for start in range(0, len(items), ADD_CHUNK):
        chunk = items[start : start + ADD_CHUNK]
        params: builtins.list[Any] = []
        hexes: builtins.list[str] = []
        for new in chunk:
            values = added_values(new, now, now_us)
            values[0] = key = new.id.hex  # SQLite keeps a UUID as 32 hex digits
            hexes.append(key)
            params += values
            if returning:
                result.append(as_added(new, now, now_us, text_limits=TEXT_LIMITS, created=created))
        seqs: Sequence[int]
        if len(chunk) == 1:  # a send_mail()
            cursor.execute(written("add_one", 1), params)
            seqs = [cursor.lastrowid]
        else:
            cursor.execute(written("add", len(chunk)), params)
            seqs = _added_seqs(cursor, written, hexes)
        recipients: builtins.list[Any] = []
        for seq, new in zip(seqs, chunk, strict=True):
            for position, address in enumerate(new.recipients):
                recipients += (seq, position, address, address_domain(address))
        for at in range(0, len(recipients), 4 * recipient_rows):
            part = recipients[at : at + 4 * recipient_rows]
            cursor.execute(written("add_recipient", len(part) // 4), part)
        messages: builtins.list[Any] = []
        for seq, new in zip(seqs, chunk, strict=True):
            messages += (seq, bytes(new.message))
        cursor.execute(written("add_message", len(chunk)), messages)
    return result


def _insert_one(cursor: Any, new: NewItem, now: datetime, now_us: int) -> None:
    """`_insert` of one item (a `send_mail()`) of at most `ONE_RECIPIENTS` recipients, nothing returned:
    its row (`add_one.sql`, its seq the rowid), its recipients' rows in one statement, its message's."""
    values = added_values(new, now, now_us)
    values[0] = new.id.hex  # SQLite keeps a UUID as 32 hex digits
    cursor.execute(_ADD_ONE, values)
    seq = cursor.lastrowid
    recipients = new.recipients
    if len(recipients) == 1:
        address = recipients[0]
        cursor.execute(_ADD_RECIPIENT, (seq, 0, address, address_domain(address)))
    else:
        rows: builtins.list[Any] = []
        for position, address in enumerate(recipients):
            rows += (seq, position, address, address_domain(address))
        cursor.execute(_qmark("add_recipient", len(recipients)), rows)
    cursor.execute(_ADD_MESSAGE, (seq, bytes(new.message)))


def _added_seqs(cursor: Any, written: Callable[[str, int], str], hexes: Sequence[str]) -> Sequence[int]:
    """The seqs of the rows `add.sql` just made, ids `hexes`, in their order. SQLite gives a row added without
    a rowid one more than the table's largest (sqlite.org/autoinc.html), so one statement's rows get
    consecutive rowids, the last the cursor's `lastrowid`, the table's largest then — unless the largest was
    2**63 - 1, when SQLite picks unused rowids at random: then the largest is not the last row's, and
    the rows are read back by id. The add's transaction holds the write lock: no other writer comes between
    (a trigger of the site's that adds rows to the items table is not provided for)."""
    last = cursor.lastrowid
    cursor.execute(written("add_last", 0), ())
    if cursor.fetchone()[0] == last:
        return range(last - len(hexes) + 1, last + 1)
    cursor.execute(written("add_seqs", len(hexes)), hexes)
    seq_of = dict(cursor.fetchall())  # {id as 32 hex digits: seq}
    return [seq_of[key] for key in hexes]


def _percent(name: str, rows: int) -> str:
    return with_rows(SqliteDialect.name, name, rows)


@functools.cache
def _qmark(name: str, rows: int) -> str:
    return with_rows(SqliteDialect.name, name, rows).replace("%s", "?")


#: `_insert_one`'s statements, for one item and one recipient.
_ADD_ONE, _ADD_RECIPIENT, _ADD_MESSAGE = (_qmark(name, 1) for name in ("add_one", "add_recipient", "add_message"))


def _chunks(values: list[Any]) -> list[list[Any]]:
    return [values[start : start + CHUNK] for start in range(0, len(values), CHUNK)]


def _in(sql: str, values: Sequence[Any]) -> str:
    """`sql` with its `{marks}` as one `%s` for each value."""
    return sql.replace("{marks}", ", ".join(["%s"] * len(values)))

"""The ORM store's dialects: the statements `OrmStore` runs on one kind of database, chosen once per alias."""

from __future__ import annotations

import abc
import asyncio
import builtins
import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Q, QuerySet
from django.db.models.functions import Lower

from ...core.items import NewItem, QueueItem, Suppression
from ...core.search import terms
from ...core.shaping import Window
from ...models import QueuedRecipient
from . import suppression
from .rows import ItemRow, RecipientRow
from .statements import statement
from .threads import DatabaseThreads

_T = TypeVar("_T")


class Dialect(abc.ABC):
    """How `OrmStore` speaks to one kind of database: its adds, the worker's statements, its wake-ups.

    One object serves every thread and keeps no connection: each call works on the calling
    thread's `connections[alias]`. Statements run inside the transaction the store opened.
    """

    #: "sqlite", "postgresql" or "portable"; the folder of its statements under `sql/`.
    name: ClassVar[str]
    #: `await_added` returns promptly after an add in any process (the store's `supports_wakeup`).
    wakes: ClassVar[bool] = False
    #: `complete_many` reads the rows and decides the outcomes before it takes the write lock.
    plans_before_lock: ClassVar[bool] = False
    #: An add of up to this many items is one statement, atomic by itself: no transaction is opened for it.
    one_statement_add: ClassVar[int] = 0

    def __init__(self, alias: str, threads: DatabaseThreads) -> None:
        self.alias = alias
        #: the store's threads, where the async waits run their statements
        self.threads = threads

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    def run_write(self, write: Callable[[], _T], *, lock_wait: float) -> _T:
        """`write()`, a transaction of the store's own: SQLite tries it again while another writer holds the lock."""
        return write()

    @contextlib.contextmanager
    def atomic(self, conn: BaseDatabaseWrapper, *, durable: bool) -> Iterator[None]:
        """A transaction for a write: the store's own, or a savepoint in the caller's. `durable=False`
        (renewals): the database may forget the last moments of them in a crash (PostgreSQL does)."""
        with transaction.atomic(using=self.alias):
            yield

    def wake(self, conn: BaseDatabaseWrapper) -> None:  # noqa: B027 - the portable dialect wakes no one
        """Tell idle workers items became due, in the write's transaction (`send_again`), as an add does."""

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
        """The add of an unbounded queue without a transaction of the store's: up to `one_statement_add` items
        in one statement, atomic by itself or a part of the caller's transaction. None: the store runs
        `add_rows` in its transaction (`OrmStore._add`)."""
        if len(items) <= self.one_statement_add:
            return self.add_rows(conn, items, now, now_us, returning=returning)
        return None

    @abc.abstractmethod
    def add_rows(
        self, conn: BaseDatabaseWrapper, items: Sequence[NewItem], now: datetime, now_us: int, *, returning: bool = True
    ) -> builtins.list[QueueItem]:
        """Insert the items, their recipients and messages; the items as stored (with `returning=False`, a
        dialect may return none: `QueueStore.put_many`)."""

    @abc.abstractmethod
    def claim(self, lane: str | None, owner: str, now_us: int, expires_us: int, limit: int) -> list[ItemRow]:
        """Lease up to `limit` due items of `lane` (any when None), earliest due first; their rows after."""

    @abc.abstractmethod
    def read(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        """The items' rows, without a lock."""

    @abc.abstractmethod
    def lock(self, item_ids: Sequence[uuid.UUID]) -> list[ItemRow]:
        """Lock the items' rows for the rest of the transaction, and read them."""

    def lock_leases(self, item_ids: Sequence[uuid.UUID]) -> set[tuple[Any, ...]] | None:
        """Lock the items' rows as `lock` does, and read only (seq, owner, revision) of each (`rows.lease_fields`);
        None: this dialect locks whole rows only (`lock`)."""
        return None

    def renew(self, item_ids: Sequence[uuid.UUID], owner: str, expires_us: int) -> set[uuid.UUID] | None:
        """`QueueStore.renew`'s write in one statement committed by itself, the ids still `owner`'s after it;
        None: this dialect renews in a transaction of the store's (through the ORM)."""
        return None

    @abc.abstractmethod
    def recipients(self, seqs: Sequence[int]) -> dict[int, list[RecipientRow]]:
        """The recipients' rows of the items by `seq`, in order; every seq asked is a key."""

    @abc.abstractmethod
    def write_back(self, items: Sequence[tuple[Any, ...]], recipients: Sequence[tuple[Any, ...]]) -> None:
        """`items`: ITEM_WRITTEN values then `seq`, their leases let go; `recipients`: RECIPIENT_WRITTEN then `id`."""

    @abc.abstractmethod
    def drop(self, seqs: Sequence[int]) -> None:
        """Delete the items with their recipients and messages."""

    @abc.abstractmethod
    def take_tokens(self, name: str, rate: float, burst: int, want: int, now_us: int) -> int:
        """`QueueStore.take_tokens`, atomic by itself (outside a transaction of the store's)."""

    @abc.abstractmethod
    def take_window(
        self, name: str, rate: float, burst: int, want: int, now_us: int, window: Window, done: int, ended: int
    ) -> int:
        """`QueueStore.take_tokens` with a window, atomic by itself, on the database's clock."""

    @abc.abstractmethod
    def take_probe(self, destination: str, holder: str, until_us: int, now_us: int) -> bool:
        """`QueueStore.take_probe`'s write, atomic by itself: True when the probe was taken."""

    @abc.abstractmethod
    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        """The messages of the items that have one."""

    def suppressed(self, addresses: Sequence[str], since_us: int) -> dict[str, Suppression]:
        """The suppression list's entries of `addresses` since `since_us`: through the ORM here."""
        return suppression.look_up(self.alias, addresses, since_us)

    @abc.abstractmethod
    def queue_names(self, limit: int) -> list[str]:
        """The names of the queues holding items, sorted, at most `limit`."""

    def search_filter(self, search: str) -> Q:
        """`search` (`core.search.terms`) as a filter of item rows: for each term, a recipient at its domain, or
        a recipient address starting with it (`LOWER(address) LIKE 'start%'`, an index range on PostgreSQL) or
        its word in the subject; every term must match."""
        recipients = QueuedRecipient.objects.using(self.alias)
        # a word's bound: PostgreSQL's `\y` (`\b` is a backspace there), else `\b` (SQLite's REGEXP is Python's re)
        bound = r"\y" if connections[self.alias].vendor == "postgresql" else r"\b"
        found = Q()
        for term in terms(search):
            if term.domain is not None:
                found &= Q(seq__in=recipients.filter(domain=term.domain).values("item_id"))
                continue
            starting = recipients.annotate(lower_address=Lower("address")).filter(lower_address__startswith=term.text)
            matched = Q(seq__in=starting.values("item_id"))
            if term.word:
                matched |= Q(subject__iregex=f"{bound}{term.text}{bound}")
            found &= matched
        return found

    def seq_in(self, seqs: list[int]) -> Q:
        """The item rows whose seq is one of `seqs` (the search's candidates)."""
        return Q(seq__in=seqs)

    def search_probe(
        self, scope: QuerySet[Any], search: str, *, order_by: Sequence[str], rows: int, offset: int, limit: int
    ) -> list[int] | None:
        """The seqs of a page of `search` (`offset`, `limit`) tested on the first `rows` rows of `scope` in its
        order (`order_by`), when they hold the whole page; else None, and the store asks `search_candidates`.
        A common search (a big domain, a common word) finds its page there, where its indexes would list too
        many. None here: a search is tested on each row the list reads anyway where no index serves it."""
        return None

    def search_candidates(self, search: str, bound: int) -> list[int] | None:
        """The seqs of the items that match `search` (of a search of several terms, a superset: the store tests
        `search_filter` on them too), read from indexes, when there are at most `bound` of them; None when there are
        more, or no index serves the search: the store then tests it row by row, on the rows its other filters and
        its order read."""
        return None

    async def await_added(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for an add; True if one came. This one sleeps: the worker polls."""
        await asyncio.sleep(timeout)
        return False

    async def aclose(self) -> None:
        """Let go of what the waits hold (a listening connection)."""
        return None


class HandWritten:
    """The part the SQLite and PostgreSQL dialects share of their hand-written worker statements: the
    claim in one `UPDATE … RETURNING` and the write-back, each a statement of `sql/<name>/`."""

    name: ClassVar[str]

    @abc.abstractmethod
    def cursor(self) -> AbstractContextManager[CursorWrapper]:
        """A cursor on the calling thread's connection for the dialect's statements."""

    def item_row(self, row: tuple[Any, ...]) -> ItemRow:
        """An item's row as the driver returns it, as ITEM_FIELDS describe it."""
        return row

    def claim(self, lane: str | None, owner: str, now_us: int, expires_us: int, limit: int) -> list[ItemRow]:
        lane_sql, lane_params = (statement(self.name, "claim_lane"), [lane]) if lane is not None else ("", [])
        with self.cursor() as cursor:
            cursor.execute(
                statement(self.name, "claim").replace("{lane}", lane_sql),
                [owner, expires_us, now_us, now_us, *lane_params, limit],
            )
            return [self.item_row(row) for row in cursor.fetchall()]

    def take_tokens(self, name: str, rate: float, burst: int, want: int, now_us: int) -> int:
        """One `INSERT … ON CONFLICT DO UPDATE … RETURNING`: the row's lock serialises the takers of a bucket."""
        with self.cursor() as cursor:
            cursor.execute(
                statement(self.name, "take_tokens"), [name, rate, burst, float(burst), min(want, burst), now_us]
            )
            return int(cursor.fetchone()[0])

    def take_probe(self, destination: str, holder: str, until_us: int, now_us: int) -> bool:
        """One `INSERT … ON CONFLICT DO UPDATE … WHERE … RETURNING`: a row back when the probe was taken."""
        with self.cursor() as cursor:
            cursor.execute(statement(self.name, "take_probe"), [destination, now_us, until_us, holder])
            return cursor.fetchone() is not None

    def queue_names(self, limit: int) -> list[str]:
        """A loose scan of the queue index: a `min()` per name, not a read of every item."""
        with self.cursor() as cursor:
            cursor.execute(statement(self.name, "queues"), [limit])
            return [row[0] for row in cursor.fetchall()]

    def write_back(self, items: Sequence[tuple[Any, ...]], recipients: Sequence[tuple[Any, ...]]) -> None:
        with self.cursor() as cursor:
            if recipients:
                cursor.executemany(statement(self.name, "write_recipient"), list(recipients))
            if items:
                cursor.executemany(statement(self.name, "write_item"), list(items))

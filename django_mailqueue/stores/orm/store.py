"""`OrmStore`: the contract on Django's ORM, in the dialect of its database — SQLite, PostgreSQL, or portable."""

from __future__ import annotations

import asyncio
import builtins
import inspect
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q

from ...core.clock import to_micros
from ...core.errors import QueueError
from ...core.items import (
    CompleteRequest,
    Completion,
    ItemOrder,
    ItemQuery,
    NewItem,
    QueueItem,
    Reply,
    Suppression,
)
from ...core.shaping import Suspension, Window
from ...core.status import QueueSummary
from ...models import QueuedItem
from ..base import OVERVIEW_QUEUES, AlsoWrite, QueueStore
from ..inputs import (
    check_aware,
    check_completion,
    check_defer,
    check_key,
    check_new_item,
    check_order,
    check_owner,
    check_probe,
    check_suppressions,
    check_suspend,
    check_take,
)
from ..kept import Kept
from . import failed, queries, room, shaping, suppression, transactions
from .base import Dialect
from .portable import PortableDialect
from .rows import ItemRow, RecipientRow, lease_fields, plan_completions, to_item
from .threads import DatabaseThreads, drop_if_broken
from .transactions import own_write

_T = TypeVar("_T")

#: Item rows, their recipients' rows by seq, and (when known) the items they hold by seq.
_Rows = tuple[builtins.list[ItemRow], dict[int, builtins.list[RecipientRow]], dict[int, QueueItem] | None]


def dialect_for(vendor: str) -> type[Dialect]:
    """The dialect of a Django database backend's `vendor`; any other vendor speaks the portable one. Each
    dialect's module is imported for its vendor only (a worker on SQLite never loads PostgreSQL's)."""
    if vendor == "sqlite":
        from .sqlite import SqliteDialect

        return SqliteDialect
    if vendor == "postgresql":
        from .postgresql import PostgresDialect

        return PostgresDialect
    return PortableDialect


def _takes_also(method: Callable[..., object]) -> bool:
    """Whether `method` can be given `also=` (by name, or in its `**kwargs`)."""
    parameters = inspect.signature(method).parameters.values()
    return any(p.name == "also" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


class OrmStore(QueueStore):
    """Items in the database Django's `DATABASES[OPTIONS["database"]]` names.

    An add joins the caller's transaction: a `send_mail()` inside
    `transaction.atomic()` that rolls back queues nothing. The statements are the
    dialect's (`dialect_class`, else the one of the database's vendor), chosen once
    when the store is built: docs/stores.md, "The ORM store's dialects".
    """

    supports_transactional_add = True
    #: The dialect for every database; None: each database's own (`dialect_for` its vendor). A
    #: subclass may name one — the tests run the contract with `PortableDialect` on SQLite and PostgreSQL.
    dialect_class: type[Dialect] | None = None

    def __init__(self, options: Mapping[str, Any] | None = None, *, max_items: int | None = None) -> None:
        super().__init__(options, max_items=max_items)
        self.alias: str = str(self.options.get("database", "default"))
        self._threads = DatabaseThreads(int(self.options.get("threads", 4)), "mailqueue-orm")
        #: SQLite: how long a write the store runs in a transaction of its own waits for the write lock, in all
        self.lock_wait = float(self.options.get("lock_wait", 30))
        self._lock_row_made = False
        kind = self.dialect_class or dialect_for(connections[self.alias].vendor)
        self.dialect: Dialect = kind(self.alias, self._threads)
        #: the rows (item's, recipients') this store's claims returned, by item id, until the item's completion:
        #: a completion whose locked rows still show the claim (seq, owner, revision) is decided from them
        self._claimed: Kept[tuple[ItemRow, builtins.list[RecipientRow], QueueItem]] = Kept()

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
        return self.dialect.wakes

    # --- transactions (stores/orm/transactions.py) ----------------------------------

    @property
    def _connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    def _write(self, *, join: bool = False, durable: bool = True) -> AbstractContextManager[BaseDatabaseWrapper]:
        """A transaction for a write on the store's database (`transactions.write`)."""
        return transactions.write(self.alias, self.dialect, join=join, durable=durable)

    def _errors(self) -> AbstractContextManager[BaseDatabaseWrapper]:
        """Statements outside a transaction of the store's (`transactions.errors`)."""
        return transactions.errors(self.alias)

    # --- writing ------------------------------------------------------------------

    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        return self._add_many(items, now, returning=True)

    def put_many(self, items: Sequence[NewItem], *, now: datetime) -> int:
        self._add_many(items, now, returning=False)
        return len(items)

    def _add_many(self, items: Sequence[NewItem], now: datetime, *, returning: bool) -> builtins.list[QueueItem]:
        for new in items:
            check_new_item(new)
        if not items:
            return []
        now_us = to_micros(now)
        if self.max_items is None:
            # `_errors()` written out (the single send_mail()'s path): one statement, or the dialect's own
            # transaction (`Dialect.add_alone`)
            conn = connections[self.alias]
            if not conn.in_atomic_block:
                drop_if_broken(conn)
            try:
                added = self.dialect.add_alone(conn, items, now, now_us, returning=returning, lock_wait=self.lock_wait)
            except DatabaseError as exc:
                raise transactions.unavailable(exc) from exc
            if added is not None:
                return added
        return self._add(items, now, now_us, returning)

    @own_write
    def _add(self, items: Sequence[NewItem], now: datetime, now_us: int, returning: bool) -> builtins.list[QueueItem]:
        if self.max_items is not None and not self._lock_row_made:
            self._make_lock_row()
        with self._write(join=True) as conn:
            if self.max_items is not None:
                room.check_room(self.alias, self.max_items, len(items))
            return self.dialect.add_rows(conn, items, now, now_us, returning=returning)

    def _make_lock_row(self) -> None:
        """The lock row the `max_items` bound counts under (stores/orm/room.py), in a transaction of its own."""
        with self._write():
            room.make_lock_row(self.alias)
        self._lock_row_made = True

    @own_write
    def claim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        check_owner(owner)
        if limit < 1:
            return []
        now_us, expires_us = to_micros(now), to_micros(lease_expires)
        lanes: Sequence[str | None] = list(queues) if queues else [None]
        with self._write():
            taken: builtins.list[ItemRow] = []
            for lane in lanes:
                wanted = limit - len(taken)
                if wanted <= 0:
                    break
                taken.extend(self.dialect.claim(lane, owner, now_us, expires_us, wanted))
            if not taken:
                return []
            recipients = self.dialect.recipients([row[0] for row in taken])
        lane_of = {name: i for i, name in enumerate(queues or ())}
        taken.sort(key=lambda row: (lane_of.get(row[7], 0), row[5], row[0]))  # queue, next_attempt, seq
        items = [to_item(row, recipients[row[0]]) for row in taken]
        self._claimed.put((item.id, (row, recipients[row[0]], item)) for row, item in zip(taken, items, strict=True))
        return items

    def _take_claimed(self, ids: builtins.list[uuid.UUID]) -> _Rows | None:
        """The rows this store's claims returned for `ids` and their items, forgotten here; None unless it has
        every one."""
        kept = self._claimed.pop(ids)
        found = [entry for entry in kept if entry is not None]
        if len(found) != len(ids) or len(set(ids)) != len(ids):
            return None
        return (
            [row for row, _, _ in found],
            {row[0]: rec for row, rec, _ in found},
            {row[0]: it for row, _, it in found},
        )

    @own_write
    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> builtins.list[uuid.UUID]:
        check_owner(owner)
        if not ids:
            return []
        with self._errors():  # one statement where the dialect has it: no row lock held between statements
            held = self.dialect.renew(ids, owner, to_micros(lease_expires))
        if held is None:
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

    def completes_with_history(self, alias: str) -> bool:
        """True for the store's own database: `complete_many` runs `also` in its transaction — unless a subclass
        overrides `complete_many` or `acomplete_many` with no `also` to take (the worker then writes rows first)."""
        return alias == self.alias and all(_takes_also(method) for method in (self.complete_many, self.acomplete_many))

    @own_write
    def complete_many(
        self, requests: Sequence[CompleteRequest], *, also: AlsoWrite | None = None
    ) -> builtins.list[QueueItem | None | QueueError]:
        """Every request in one transaction: the rows locked, read, and written back in a
        handful of statements whatever the number of items.

        Where the dialect `plans_before_lock` (SQLite, whose one write lock every writer waits
        for), the rows are read and the outcomes decided before the transaction; in it, the rows
        are locked and, when none changed meanwhile (owner, revision), only written.

        `also(answers)` runs in the same transaction, on the store's connection, whatever each
        request's answer: the worker writes the attempts' history rows with it (docs/reliability.md,
        "History before the outcome"). Its database error rolls everything back (STORE_UNAVAILABLE).
        """
        for request in requests:
            check_owner(request.owner)
            check_completion(request.completion)
        if not requests:
            return []
        ids = [r.item_id for r in requests]
        dialect = self.dialect
        # the rows as this store's claim returned them, else (SQLite) as read now: the outcomes are decided from
        # them before the lock, and written when the locked rows show no change since (seq, owner, revision)
        rows = self._take_claimed(ids)
        if rows is None and dialect.plans_before_lock and not self._connection.in_atomic_block:
            with self._errors():
                read = dialect.read(ids)
                rows = read, dialect.recipients([row[0] for row in read]), None
        early = None if rows is None else (rows[0], plan_completions(requests, *rows))
        adding = sum(len(r.completion.dsns) for r in requests)
        if adding and self.max_items is not None and not self._lock_row_made:
            self._make_lock_row()
        with self._write() as conn:
            # with rows decided from, the lock reads only what shows a change since (the rows when it does)
            leases = dialect.lock_leases(ids) if early is not None else None
            locked: builtins.list[ItemRow] | None = None
            if leases is None:
                locked = dialect.lock(ids)
                leases = lease_fields(locked)
            full = room.no_room(self.alias, self.max_items, adding)
            planned = requests if full is None else [r for r in requests if not r.completion.dsns]
            if full is None and early is not None and lease_fields(early[0]) == leases:
                plan = early[1]
            else:
                if locked is None:
                    locked = dialect.read(ids)  # locked already
                plan = plan_completions(planned, locked, dialect.recipients([row[0] for row in locked]))
            if plan.dropped:
                dialect.drop(plan.dropped)
            dialect.write_back(list(plan.kept.values()), plan.changed)
            suppressed: builtins.list[Suppression] = []
            for request, answer in zip(planned, plan.answers, strict=True):
                # A completion's DSNs and suppressions go in with its outcome, in this transaction: both or neither.
                if request.completion.dsns and isinstance(answer, QueueItem):
                    now = request.completion.now
                    assert now is not None  # check_completion
                    dialect.add_rows(conn, request.completion.dsns, now, to_micros(now))
                if isinstance(answer, QueueItem):
                    suppressed += request.completion.suppress
            suppression.write(self.alias, suppressed)
            if full is None:
                answers = plan.answers
            else:
                planned_answers = iter(plan.answers)
                answers = [full if r.completion.dsns else next(planned_answers) for r in requests]
            if also is not None:
                also(answers)
        return answers

    async def acomplete_many(
        self, requests: Sequence[CompleteRequest], *, also: AlsoWrite | None = None
    ) -> builtins.list[QueueItem | None | QueueError]:
        if also is None:  # a subclass's `complete_many` may take none (`completes_with_history`)
            return await self._in_thread(self.complete_many, requests)
        return await self._in_thread(self.complete_many, requests, also=also)

    @own_write
    def reschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        if owner is not None:
            check_owner(owner)
        with self._write():
            target = QueuedItem.objects.using(self.alias).filter(id=item_id, failed_at__isnull=True)
            if owner is not None:
                moved = target.filter(owner=owner).update(next_attempt=to_micros(at), owner=None, lease_expires=None)
            else:
                moved = target.update(next_attempt=to_micros(at))
            return moved > 0

    @own_write
    def send_again(self, item_ids: Sequence[uuid.UUID], *, now: datetime) -> builtins.list[QueueItem | None]:
        check_aware(now, "now")
        with self._write() as conn:
            return failed.send_again(self.dialect, conn, item_ids, now)

    @own_write
    def prune_failed(self, *, before: datetime) -> int:
        check_aware(before, "before")
        with self._write():
            return failed.prune(self.dialect, before)

    @own_write
    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        with self._write():
            locked = self.dialect.lock([item_id])
            if not locked:
                return None
            seq = locked[0][0]
            item = to_item(locked[0], self.dialect.recipients([seq])[seq])
            self.dialect.drop([seq])
            return item

    @own_write
    def cancel_many(self, item_ids: Sequence[uuid.UUID]) -> builtins.list[QueueItem | None]:
        """One transaction for them all: the rows locked, read and deleted a statement each."""
        with self._write():
            locked = self.dialect.lock(builtins.list(dict.fromkeys(item_ids)))
            seqs = [row[0] for row in locked]
            recipients = self.dialect.recipients(seqs)
            found = {item.id: item for item in (to_item(row, recipients[row[0]]) for row in locked)}
            self.dialect.drop(seqs)
        return [found.pop(item_id, None) for item_id in item_ids]

    # --- traffic shaping ------------------------------------------------------------

    @own_write
    def take_tokens(
        self,
        key: str,
        *,
        rate: float,
        burst: int,
        want: int,
        now: datetime,
        window: Window | None = None,
        done: int = 0,
        ended: float = 0.0,
    ) -> int:
        """One statement on SQLite and PostgreSQL, atomic by itself; a transaction on the portable dialect. With a
        window: a function call on PostgreSQL, the portable dialect's transaction elsewhere."""
        check_take(key, rate, burst, want, now, window, done, ended)
        with self._errors():
            if window is not None:
                return self.dialect.take_window(
                    key, float(rate), burst, want, to_micros(now), window, done, round(ended * 1e6)
                )
            return self.dialect.take_tokens(key, float(rate), burst, want, to_micros(now))

    @own_write
    def suspend(self, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
        check_suspend(destination, until, reply, now)
        with self._write():
            return shaping.suspend(self.alias, destination, until=until, reply=reply, now=now)

    def suspensions(self, *, now: datetime, destinations: Sequence[str] | None = None) -> builtins.list[Suspension]:
        check_aware(now, "now")
        with self._errors():
            return shaping.suspensions(self.alias, now=now, destinations=destinations)

    @own_write
    def clear_suspension(self, destination: str) -> bool:
        check_key(destination, "a destination")
        with self._errors():
            return shaping.clear_suspension(self.alias, destination)

    @own_write
    def take_probe(
        self, destination: str, *, holder: str, until: datetime, now: datetime
    ) -> Suspension | datetime | None:
        """One statement on SQLite and PostgreSQL, atomic by itself; a read after it when not taken."""
        check_probe(destination, holder, until, now)
        with self._errors():
            if self.dialect.take_probe(destination, holder, to_micros(until), to_micros(now)):
                return None
            return shaping.probe_in_force(self.alias, destination, now=now)

    @own_write
    def end_probe(self, destination: str, *, holder: str) -> bool:
        check_key(destination, "a destination")
        with self._errors():
            return shaping.end_probe(self.alias, destination, holder=holder)

    @own_write
    def defer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        check_defer(domains, until, now)
        with self._write():
            return shaping.defer_destination(self.alias, domains, until=until, now=now)

    # --- reading ------------------------------------------------------------------

    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        with self._errors():
            found = queries.load(self.alias, QueuedItem.objects.using(self.alias).filter(id=item_id))
        return found[0][1] if found else None

    def present(self, item_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        with self._errors():
            found = QueuedItem.objects.using(self.alias).filter(id__in=list(item_ids)).values_list("id", flat=True)
            return set(found)

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        with self._errors():
            return self.dialect.read_messages(item_ids)

    def read_message(self, item_id: uuid.UUID) -> bytes | None:
        return self.read_messages([item_id]).get(item_id)

    def list(
        self,
        query: ItemQuery | None = None,
        *,
        offset: int = 0,
        limit: int = 100,
        order: ItemOrder = ItemOrder.NEXT_ATTEMPT,
    ) -> builtins.list[QueueItem]:
        check_order(self, order)
        with self._errors():
            return queries.page(self.alias, self.dialect, query, offset, limit, order)

    def count(self, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        with self._errors():
            return queries.count(self.alias, self.dialect, query, limit)

    def iter_items(self, query: ItemQuery | None = None, *, batch: int = 500) -> Iterator[QueueItem]:
        """Resumes after the last (next_attempt, seq) read, on the index `list` orders by: no OFFSET to skip."""
        rows = queries.matching(self.alias, self.dialect, query).order_by("next_attempt", "seq")
        after: Q | None = None
        while True:
            with self._errors():
                found = queries.load(self.alias, (rows if after is None else rows.filter(after))[:batch])
            yield from (item for _, item in found)
            if len(found) < batch:
                return
            after = queries.after(*found[-1])

    def queues(self, *, limit: int = OVERVIEW_QUEUES) -> builtins.list[str]:
        with self._errors():
            return self.dialect.queue_names(limit)

    def summary(self, *, now: datetime) -> QueueSummary:
        """Aggregate queries: one per part of the summary, whatever the queue's size."""
        with self._errors():
            return queries.summary(self.alias, now)

    # --- the suppression list (stores/orm/suppression.py) ----------------------------------

    def suppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        with self._errors():
            return self.dialect.suppressed(addresses, to_micros(since))

    def list_suppressed(
        self, *, since: datetime, search: str | None = None, offset: int = 0, limit: int = 100
    ) -> builtins.list[Suppression]:
        with self._errors():
            return suppression.page(self.alias, to_micros(since), search, offset, limit)

    def count_suppressed(self, *, since: datetime, search: str | None = None) -> int:
        with self._errors():
            return suppression.count(self.alias, to_micros(since), search)

    @own_write
    def suppress(self, entries: Sequence[Suppression]) -> None:
        check_suppressions(entries)
        with self._write():
            suppression.write(self.alias, entries)

    @own_write
    def unsuppress(self, addresses: Sequence[str]) -> int:
        with self._write():
            return suppression.remove(self.alias, addresses)

    @own_write
    def prune_suppressed(self, *, before: datetime) -> int:
        with self._write():
            return suppression.prune(self.alias, to_micros(before))

    # --- waking ---------------------------------------------------------------------

    async def await_added(self, timeout: float) -> bool:
        return await self.dialect.await_added(timeout)

    async def _in_thread(self, func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """The async twins run in the store's own threads: at most `threads` connections."""
        return await self._threads.run(func, *args, **kwargs)

    def close(self) -> None:
        """Stop the store's threads and close their database connections."""
        self._threads.close()

    async def aclose(self) -> None:
        await self.dialect.aclose()
        await asyncio.to_thread(self.close)

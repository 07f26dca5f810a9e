"""`OrmStore`: the contract on Django's ORM, in the dialect of its database — SQLite, PostgreSQL, or portable."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from django.db import DatabaseError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Q

from ...core.clock import to_micros
from ...core.errors import Code, QueueError
from ...core.items import (
    CompleteRequest,
    Completion,
    ItemOrder,
    ItemQuery,
    ItemState,
    NewItem,
    QueueItem,
    RecipientState,
    Reply,
    Suppression,
)
from ...core.shaping import Suspension
from ...core.status import QueueSummary
from ...models import QueuedItem, QueuedRecipient, QueueLock
from ..base import OVERVIEW_QUEUES, QueueStore
from ..inputs import (
    check_aware,
    check_completion,
    check_defer,
    check_key,
    check_new_item,
    check_order,
    check_owner,
    check_suppressions,
    check_suspend,
    check_take,
)
from . import failed, shaping, suppression
from .base import Dialect
from .portable import PortableDialect, due, orm_recipients
from .postgresql import PostgresDialect
from .rows import ITEM_FIELDS, ItemRow, lease_fields, plan_completions, to_item
from .sqlite import SqliteDialect
from .threads import DatabaseThreads, drop_if_broken

_T = TypeVar("_T")
_P = ParamSpec("_P")

_ADD_LOCK = "add"
#: `list`'s orders: the due index (next_attempt, seq) either way, or the primary key (the order of adds).
_ORDER_BY = {
    ItemOrder.NEXT_ATTEMPT: ("next_attempt", "seq"),
    ItemOrder.NEXT_ATTEMPT_DESC: ("-next_attempt", "-seq"),
    ItemOrder.OLDEST: ("seq",),
    ItemOrder.NEWEST: ("-seq",),
}
#: The states that are a range of next attempts (before now, after it, `NEVER`): counted in the due index's order.
_RANGES = (ItemState.DUE, ItemState.SCHEDULED, ItemState.FAILED)
_NEVER_US = failed.NEVER_US
#: A search whose indexes find at most this many items lists them by key; more, it is tested on each row read
#: in the list's order (where matches are that common, a page of them comes early).
SEARCH_BOUND = 3_000
#: The dialect of each Django database vendor; any other vendor speaks the portable one.
DIALECTS: dict[str, type[Dialect]] = {"sqlite": SqliteDialect, "postgresql": PostgresDialect}


def dialect_for(vendor: str) -> type[Dialect]:
    """The dialect of a Django database backend's `vendor`."""
    return DIALECTS.get(vendor, PortableDialect)


def _own_write(method: Callable[Concatenate[OrmStore, _P], _T]) -> Callable[Concatenate[OrmStore, _P], _T]:
    """`method` runs a write in a transaction of its own (outside the caller's), as its dialect runs those:
    on SQLite, waiting for the write lock up to the store's `lock_wait` in all."""

    @functools.wraps(method)
    def run(store: OrmStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return store.dialect.run_write(lambda: method(store, *args, **kwargs), lock_wait=store.lock_wait)

    return run


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

    # --- transactions -------------------------------------------------------------

    @property
    def _connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    @contextlib.contextmanager
    def _write(self, *, join: bool = False, durable: bool = True) -> Iterator[BaseDatabaseWrapper]:
        """A transaction for a write: the caller's (with a savepoint) when `join` and
        one is open, else the store's own, begun as the dialect begins one.
        `durable=False`: renewals, which a crash may forget (`Dialect.atomic`)."""
        conn = self._connection
        try:
            if join and conn.in_atomic_block:
                with transaction.atomic(using=self.alias, savepoint=True):
                    yield conn
                return
            if not conn.in_atomic_block:
                drop_if_broken(conn)
            with self.dialect.atomic(conn, durable=durable):
                yield conn
        except QueueError:
            raise
        except DatabaseError as exc:
            raise _unavailable(exc) from exc

    @contextlib.contextmanager
    def _errors(self) -> Iterator[BaseDatabaseWrapper]:
        """Statements outside a transaction of the store's: a broken connection dropped first, errors as QueueErrors."""
        conn = self._connection
        if not conn.in_atomic_block:
            drop_if_broken(conn)
        try:
            yield conn
        except DatabaseError as exc:
            raise _unavailable(exc) from exc

    # --- writing ------------------------------------------------------------------

    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        for new in items:
            check_new_item(new)
        if not items:
            return []
        now_us = to_micros(now)
        if self.max_items is None and len(items) <= self.dialect.one_statement_add:
            with self._errors() as conn:  # one statement: atomic by itself, or a part of the caller's transaction
                return self.dialect.add_rows(conn, items, now, now_us)
        return self._add(items, now, now_us)

    @_own_write
    def _add(self, items: Sequence[NewItem], now: datetime, now_us: int) -> builtins.list[QueueItem]:
        if self.max_items is not None and not self._lock_row_made:
            self._make_lock_row()
        with self._write(join=True) as conn:
            if self.max_items is not None:
                self._check_room(len(items))
            return self.dialect.add_rows(conn, items, now, now_us)

    def _make_lock_row(self) -> None:
        """The lock row `_check_room` counts under, made in a transaction of its own before the first bounded
        add: on MySQL and MariaDB, adders making it inside their add transactions deadlock on the shared
        locks their duplicate inserts take."""
        with self._write():
            QueueLock.objects.using(self.alias).bulk_create([QueueLock(name=_ADD_LOCK)], ignore_conflicts=True)
        self._lock_row_made = True

    def _check_room(self, adding: int) -> None:
        """Count under a lock row, so concurrent adders never pass `max_items` together."""
        assert self.max_items is not None
        locks = QueueLock.objects.using(self.alias)
        if not locks.filter(name=_ADD_LOCK).update(counter=F("counter") + 1):
            locks.bulk_create([QueueLock(name=_ADD_LOCK)], ignore_conflicts=True)
            locks.filter(name=_ADD_LOCK).update(counter=F("counter") + 1)
        held = QueuedItem.objects.using(self.alias).order_by()[: self.max_items + 1].count()  # at most the bound
        if held + adding > self.max_items:
            raise QueueError(Code.FULL, f"the queue holds {held} items; MAX_ITEMS is {self.max_items}")

    @_own_write
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
        return [to_item(row, recipients[row[0]]) for row in taken]

    @_own_write
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

    @_own_write
    def complete_many(self, requests: Sequence[CompleteRequest]) -> builtins.list[QueueItem | None | QueueError]:
        """Every request in one transaction: the rows locked, read, and written back in a
        handful of statements whatever the number of items.

        Where the dialect `plans_before_lock` (SQLite, whose one write lock every writer waits
        for), the rows are read and the outcomes decided before the transaction; in it, the rows
        are locked and, when none changed meanwhile (owner, revision), only written.
        """
        for request in requests:
            check_owner(request.owner)
            check_completion(request.completion)
        if not requests:
            return []
        ids = [r.item_id for r in requests]
        dialect = self.dialect
        early = None
        if dialect.plans_before_lock and not self._connection.in_atomic_block:
            with self._errors():
                read = dialect.read(ids)
                early = read, plan_completions(requests, read, dialect.recipients([row[0] for row in read]))
        adding = sum(len(r.completion.dsns) for r in requests)
        if adding and self.max_items is not None and not self._lock_row_made:
            self._make_lock_row()
        with self._write() as conn:
            locked = dialect.lock(ids)
            full = self._no_room(adding)
            planned = requests if full is None else [r for r in requests if not r.completion.dsns]
            if full is None and early is not None and lease_fields(early[0]) == lease_fields(locked):
                plan = early[1]
            else:
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
            return plan.answers
        answers = iter(plan.answers)
        return [full if r.completion.dsns else next(answers) for r in requests]

    def _no_room(self, adding: int) -> QueueError | None:
        """FULL when `adding` DSNs would take the queue past `max_items` (the requests carrying them then record
        nothing); None when they fit, or there is no bound."""
        if self.max_items is None or not adding:
            return None
        try:
            self._check_room(adding)
        except QueueError as exc:
            return exc
        return None

    @_own_write
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

    @_own_write
    def send_again(self, item_ids: Sequence[uuid.UUID], *, now: datetime) -> builtins.list[QueueItem | None]:
        check_aware(now, "now")
        with self._write() as conn:
            return failed.send_again(self.dialect, conn, item_ids, now)

    @_own_write
    def prune_failed(self, *, before: datetime) -> int:
        check_aware(before, "before")
        with self._write():
            return failed.prune(self.dialect, before)

    @_own_write
    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        with self._write():
            locked = self.dialect.lock([item_id])
            if not locked:
                return None
            seq = locked[0][0]
            item = to_item(locked[0], self.dialect.recipients([seq])[seq])
            self.dialect.drop([seq])
            return item

    @_own_write
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

    @_own_write
    def take_tokens(self, key: str, *, rate: float, burst: int, want: int, now: datetime) -> int:
        """One statement on SQLite and PostgreSQL, atomic by itself; a transaction on the portable dialect."""
        check_take(key, rate, burst, want, now)
        with self._errors():
            return self.dialect.take_tokens(key, float(rate), burst, want, to_micros(now))

    @_own_write
    def suspend(self, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
        check_suspend(destination, until, reply, now)
        with self._write():
            return shaping.suspend(self.alias, destination, until=until, reply=reply, now=now)

    def suspensions(self, *, now: datetime, destinations: Sequence[str] | None = None) -> builtins.list[Suspension]:
        check_aware(now, "now")
        with self._errors():
            return shaping.suspensions(self.alias, now=now, destinations=destinations)

    @_own_write
    def clear_suspension(self, destination: str) -> bool:
        check_key(destination, "a destination")
        with self._errors():
            return shaping.clear_suspension(self.alias, destination)

    @_own_write
    def defer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        check_defer(domains, until, now)
        with self._write():
            return shaping.defer_destination(self.alias, domains, until=until, now=now)

    # --- reading ------------------------------------------------------------------

    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        with self._errors():
            found = self._load(QueuedItem.objects.using(self.alias).filter(id=item_id))
        return found[0][1] if found else None

    def present(self, item_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        with self._errors():
            found = QueuedItem.objects.using(self.alias).filter(id__in=list(item_ids)).values_list("id", flat=True)
            return set(found)

    def _load(self, rows: models.QuerySet[QueuedItem]) -> builtins.list[tuple[int, QueueItem]]:
        items = list(rows.values_list(*ITEM_FIELDS))
        recipients = orm_recipients(self.alias, [row[0] for row in items])
        return [(row[0], to_item(row, recipients[row[0]])) for row in items]

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        with self._errors():
            return self.dialect.read_messages(item_ids)

    def read_message(self, item_id: uuid.UUID) -> bytes | None:
        return self.read_messages([item_id]).get(item_id)

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
        if query.id_prefix is not None:
            # a range of the unique index on id: a uuid compares as its hex digits do
            rows = rows.filter(
                id__gte=uuid.UUID(query.id_prefix.ljust(32, "0")), id__lte=uuid.UUID(query.id_prefix.ljust(32, "f"))
            )
        if query.search:
            found = self.dialect.search_candidates(query.search, SEARCH_BOUND)
            rows = (
                rows.filter(seq__in=found)
                if found is not None
                else rows.filter(self.dialect.search_filter(query.search))
            )
        if query.state is not None:
            if query.now is None:
                raise ValueError("a state filter needs `now`")
            now_us = to_micros(query.now)
            leased = Q(owner__isnull=False, lease_expires__gt=now_us)
            if query.state is ItemState.LEASED:
                rows = rows.filter(leased)
            elif query.state is ItemState.FAILED:
                rows = rows.filter(next_attempt=_NEVER_US)
            elif query.state is ItemState.DEFERRED:
                rows = rows.filter(attempts__gt=0, next_attempt__lt=_NEVER_US).exclude(leased)
            elif query.state is ItemState.DUE:
                rows = rows.filter(attempts=0, next_attempt__lte=now_us).exclude(leased)
            else:
                rows = rows.filter(attempts=0, next_attempt__gt=now_us, next_attempt__lt=_NEVER_US).exclude(leased)
        return rows

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
            page = self._query(query).order_by(*_ORDER_BY[order])[offset : offset + limit]
            return [item for _, item in self._load(page)]

    def count(self, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        with self._errors():
            rows = self._query(query)
            if limit is None:
                return rows.count()
            if (
                query is not None
                and query.domain is None
                and not query.search
                and (query.state in _RANGES or (query.state is ItemState.DEFERRED and query.queue is None))
            ):
                # in the list's order, so the database reads the due (or the queue's) index from its range's start
                # up to `limit` entries, or the deferred one (a queue's deferred items: its partial index, in any
                # order): unordered it may scan the table from its start, and items added in time order keep the
                # scheduled ones at its end
                rows = rows.order_by("next_attempt", "seq")
            # sliced, Django counts a LIMITed subquery: the database stops at `limit` rows
            return rows[:limit].count()

    def iter_items(self, query: ItemQuery | None = None, *, batch: int = 500) -> Iterator[QueueItem]:
        """Resumes after the last (next_attempt, seq) read, on the index `list` orders by: no OFFSET to skip."""
        rows = self._query(query).order_by("next_attempt", "seq")
        after: Q | None = None
        while True:
            with self._errors():
                page = self._load((rows if after is None else rows.filter(after))[:batch])
            yield from (item for _, item in page)
            if len(page) < batch:
                return
            seq, last = page[-1]
            next_us = to_micros(last.next_attempt)
            after = Q(next_attempt__gt=next_us) | Q(next_attempt=next_us, seq__gt=seq)

    def queues(self, *, limit: int = OVERVIEW_QUEUES) -> builtins.list[str]:
        with self._errors():
            return self.dialect.queue_names(limit)

    def summary(self, *, now: datetime) -> QueueSummary:
        """Aggregate queries: one per part of the summary, whatever the queue's size."""
        now_us = to_micros(now)
        leased = Q(owner__isnull=False, lease_expires__gt=now_us)
        state = models.Case(
            models.When(next_attempt=_NEVER_US, then=models.Value(ItemState.FAILED.value)),
            models.When(leased, then=models.Value(ItemState.LEASED.value)),
            models.When(attempts__gt=0, then=models.Value(ItemState.DEFERRED.value)),
            models.When(next_attempt__lte=now_us, then=models.Value(ItemState.DUE.value)),
            default=models.Value(ItemState.SCHEDULED.value),
            output_field=models.CharField(),
        )
        summary = QueueSummary(now=now)
        with self._errors():
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

    # --- the suppression list (stores/orm/suppression.py) ----------------------------------

    def suppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        with self._errors():
            return suppression.look_up(self.alias, addresses, to_micros(since))

    def list_suppressed(
        self, *, since: datetime, search: str | None = None, offset: int = 0, limit: int = 100
    ) -> builtins.list[Suppression]:
        with self._errors():
            return suppression.page(self.alias, to_micros(since), search, offset, limit)

    def count_suppressed(self, *, since: datetime, search: str | None = None) -> int:
        with self._errors():
            return suppression.count(self.alias, to_micros(since), search)

    @_own_write
    def suppress(self, entries: Sequence[Suppression]) -> None:
        check_suppressions(entries)
        with self._write():
            suppression.write(self.alias, entries)

    @_own_write
    def unsuppress(self, addresses: Sequence[str]) -> int:
        with self._write():
            return suppression.remove(self.alias, addresses)

    @_own_write
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


def _unavailable(exc: DatabaseError) -> QueueError:
    # The driver's text can name the host, never the password (Django does not put it
    # in errors); keep only the class and the first line to stay short.
    reason = str(exc).splitlines()[0] if str(exc) else ""
    return QueueError(Code.STORE_UNAVAILABLE, f"the database refused the operation: {type(exc).__name__}: {reason}")

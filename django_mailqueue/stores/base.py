"""The store contract: `QueueStore`, the abstract class every store implements.

Its reading, traffic-shaping and suppression-list parts are abstract classes of their own, `QueueStore`'s bases:
`base_reading.ReadingContract`, `base_shaping.ShapingContract` and `base_suppression.SuppressionContract`."""

from __future__ import annotations

import abc
import asyncio
import builtins
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..core.errors import Code, QueueError
from ..core.items import (
    CompleteRequest,
    Completion,
    ItemOrder,
    ItemQuery,
    NewItem,
    QueueItem,
    Reply,
    Suppression,
)
from ..core.shaping import Suspension, Window
from ..core.status import QueueSummary
from .base_reading import OVERVIEW_DOMAIN_SAMPLE, OVERVIEW_QUEUES, ReadingContract
from .base_shaping import ShapingContract
from .base_suppression import SuppressionContract
from .claimed_batch import ClaimedBatch, acompose, compose, threaded_twins

# The input checks a store runs (`inputs`), importable from here as the store contract has long named them.
from .inputs import (
    check_address,
    check_aware,
    check_completion,
    check_defer,
    check_key,
    check_new_item,
    check_order,
    check_outcome,
    check_owner,
    check_suppressions,
    check_suspend,
    check_take,
)

_T = TypeVar("_T")

#: What `complete_many(…, also=)` runs in the completions' own transaction, given their answers in order: the
#: worker's history rows (only on a store that `completes_with_history`).
AlsoWrite = Callable[[Sequence[QueueItem | None | QueueError]], object]

__all__ = [
    "AlsoWrite",
    "ClaimedBatch",
    "OVERVIEW_DOMAIN_SAMPLE",
    "OVERVIEW_QUEUES",
    "READ_CHUNK",
    "QueueStore",
    "ReadingContract",
    "ShapingContract",
    "SuppressionContract",
    "check_address",
    "check_aware",
    "check_completion",
    "check_defer",
    "check_key",
    "check_new_item",
    "check_order",
    "check_outcome",
    "check_owner",
    "check_suppressions",
    "check_suspend",
    "check_take",
]

#: A message larger than this is read in slices of this size (ORM on PostgreSQL, Redis): a driver
#: holds a whole reply before handing it over (docs/performance.md, "Memory with 10 MiB messages").
READ_CHUNK = 1024 * 1024


class QueueStore(ReadingContract, ShapingContract, SuppressionContract):
    """Where items wait: added by the backend, claimed and completed by workers.

    Promises every store keeps (the contract suite in `django_mailqueue.testing`
    checks each one):

    - `add` / `add_many` store each item and its message in one step: an item is
      never claimable before its message can be read, and a batch is all or
      nothing. With `max_items` set, the bound holds under concurrent adders.
    - `claim` is atomic: two claimers, in any process or on any machine, never
      hold the same item. The earliest due item comes first, equally due ones
      oldest first; an item whose lease expired is claimable again.
    - `complete` applies the outcomes, the next attempt and the attempt count and
      lets go of the lease in one step, only for the lease's owner at the
      revision it claimed; a final recipient state never changes; an item whose
      every recipient is final is dropped with its message — or, when the
      completion says `keep_failed` and one recipient failed, kept in that same
      step in state failed (`failed_at`, `next_attempt` `NEVER`) with its message.
    - A kept failed item is never claimed, never due, scheduled, deferred or
      leased, not moved by `reschedule` nor `defer_destination`; `send_again`
      makes it due (`core.items.sent_again` is the rule), `prune_failed` drops
      it, `cancel` too. It counts in `count()` and against `max_items`.
    - `complete` adds the completion's DSN items in that same step: the outcome
      is never recorded without its DSNs, nor a DSN added without its outcome.
      With `max_items` set, DSNs that would pass it refuse the whole completion
      (`FULL`, nothing recorded).
    - `complete` puts the completion's `suppress` entries on the suppression list
      in that same step: both or neither.
    - Times are given by the caller: a store keeps no clock.
    - Nothing a store returns is shared with what it keeps.
    - Text a store keeps holds no NUL and no lone surrogate, and an envelope
      address no line break (`text.LINE_BREAKS`): such input is refused as `INVALID`.
    - Errors are `QueueError`s with the contract's codes; a store out of reach
      raises `STORE_UNAVAILABLE`, whose message holds no secret.

    Methods are synchronous (the backend and the admin call them); each has an
    async twin with Django's `a` prefix, which by default runs the synchronous
    one in a thread, and which a store may implement natively.
    """

    #: The store can wake an idle worker when an item is added (`await_added`).
    supports_wakeup: bool = False
    """True when `await_added()` returns promptly after an add in any process."""

    #: The orders `list` gives from an index (no sort of the whole queue): the admin's sortable columns.
    orders: frozenset[ItemOrder] = frozenset(ItemOrder)

    #: `count(query, limit=n)` of a state, queue, domain or id-prefix filter reads an index, about n entries at
    #: most, not the whole queue: the admin then shows its totals on every page view.
    bounded_counts: bool = True

    #: `claim` gives the earliest due item of the whole store first, and items equally due — in claims, and in
    #: `list`'s order among items also equally old — come in the order they were added. False: that holds within
    #: each part of the store; claims take from the parts in turn, and `list` breaks such ties by id (a Redis
    #: queue split into `partitions`). The contract's tests of that order then do not apply.
    in_add_order: bool = True

    #: `max_items` holds under concurrent adders. False: it is checked against counts read before the add, so
    #: concurrent adders may pass it by a batch each (no store of this package; the contract then skips it).
    exact_max_items: bool = True

    #: A store whose add joins the caller's database transaction.
    supports_transactional_add: bool = False
    """True when an add inside `transaction.atomic()` is undone by its rollback."""

    def completes_with_history(self, alias: str) -> bool:
        """True when `complete_many(requests, also=write)` runs `write(answers)` — the worker's history rows for
        the Django database `alias` — in the completions' own transaction, whatever each answer: rows and
        outcomes commit together or not at all (`OrmStore`, for its own database). False (the default): the
        store takes no `also`, and the worker writes the rows first, committed (docs/stores.md, "History in the
        completion's transaction"). A subclass overriding `complete_many` without `also` answers False."""
        return False

    def __init__(self, options: Mapping[str, Any] | None = None, *, max_items: int | None = None) -> None:
        problems = self.check_options(options or {})
        if problems:
            raise QueueError(Code.INVALID_OPTION, f"{type(self).__name__}: {problems[0]}")
        self.options: Mapping[str, Any] = dict(options or {})
        self.max_items = max_items

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> builtins.list[str]:
        """What is wrong in `options`, without connecting to anything; [] when nothing."""
        return [] if not options else [f"{cls.__name__} takes no options, got {sorted(options)}"]

    # --- writing ---------------------------------------------------------------

    @abc.abstractmethod
    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        """Store every item with its message, in one step and one round trip.

        `now` becomes each item's `created`, and its `next_attempt` unless the
        item has a later `not_before`. Raises `FULL` (nothing stored) when the
        batch would take the queue past `max_items`, `INVALID` for text a store
        cannot keep.
        """

    def put_many(self, items: Sequence[NewItem], *, now: datetime) -> int:
        """Store every item as `add_many` does (the same step, bound and refusals) and return how many,
        without the items as stored: a store may then spare itself making them (the ORM store on SQLite
        does). The email backend's call."""
        return len(self.add_many(items, now=now))

    def add(self, item: NewItem, *, now: datetime) -> QueueItem:
        """Store one item with its message; see `add_many`."""
        return self.add_many([item], now=now)[0]

    @abc.abstractmethod
    def claim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        """Lease up to `limit` due items to `owner` until `lease_expires`.

        Due: `next_attempt <= now` and no lease, or a lease expired by `now`.
        Items of `queues[0]` come before those of `queues[1]` and so on (all
        queues when None); within a queue, earliest `next_attempt` first, then
        the oldest. Each claim bumps the item's `revision`; taking an expired
        lease also bumps `reclaims`. Atomic across processes.
        """

    def claim_batch(
        self,
        *,
        owner: str,
        now: datetime,
        lease_expires: datetime,
        queues: Sequence[str] | None = None,
        limit: int = 1,
        suppressed_since: datetime | None = None,
        read_up_to: int = 0,
    ) -> ClaimedBatch:
        """`claim`, then what the worker reads for the items before it delivers, in one call (its async twin: one
        thread hand-off, one round trip where the store can): with `suppressed_since`, the pending recipients on
        the suppression list as `suppressed` gives them; the messages of the items of at most `read_up_to` bytes
        as `read_messages` does. A read that fails leaves its part empty, its error in the answer; the claim's
        error raises. The default calls the three methods (`claimed_batch.compose`)."""
        return compose(
            self, owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit,
            suppressed_since=suppressed_since, read_up_to=read_up_to,
        )  # fmt: skip

    @abc.abstractmethod
    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> builtins.list[uuid.UUID]:
        """Extend the leases `owner` holds on `ids`; return the ids still held.

        A lease another owner took, or an item that is gone, is not renewed and
        not returned.
        """

    @abc.abstractmethod
    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        """Record an attempt's outcome, in one step, and let go of the lease.

        Only while `owner` holds the lease at `revision` (the item's revision as
        claimed); otherwise raises `LEASE_LOST` and records nothing. Returns the
        item as recorded — with `done` true when every recipient is final, in
        which case the item and its message are gone from the store unless it is
        `kept` (`completion.keep_failed` and a recipient failed: state failed,
        failed at `completion.now`) — or None when no item has that id
        (cancelled, or finished by another worker).

        `completion.dsns` are added (created at `completion.now`) in the same
        step, and only when the outcome is recorded: none with LEASE_LOST or
        None. Raises `FULL` (nothing recorded) when they would take the queue
        past `max_items`.
        """

    def complete_many(
        self, requests: Sequence[CompleteRequest], *, also: AlsoWrite | None = None
    ) -> builtins.list[QueueItem | None | QueueError]:
        """`complete` for several items at once: one answer per request, in order.

        Each answer is what `complete` would return for that request, or the
        `QueueError` it would raise (`LEASE_LOST`, `INVALID`, `FULL`); a store may
        record them in one transaction or round trip. The default calls
        `complete` for each. `also`: only where `completes_with_history`, else TypeError.
        """
        self._refuse_also(also)
        answers: builtins.list[QueueItem | None | QueueError] = []
        for request in requests:
            try:
                answers.append(
                    self.complete(
                        request.item_id, owner=request.owner, revision=request.revision, completion=request.completion
                    )
                )
            except QueueError as exc:
                if exc.code not in (Code.LEASE_LOST, Code.INVALID, Code.FULL):
                    raise
                answers.append(exc)
        return answers

    def _refuse_also(self, also: AlsoWrite | None) -> None:
        """TypeError for an `also` given to a store whose completions take none (`completes_with_history`)."""
        if also is not None:
            raise TypeError(f"{type(self).__name__}.complete_many takes no `also`: see completes_with_history()")

    @abc.abstractmethod
    def reschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        """Move an item's next attempt to `at`; True when moved.

        With `owner`: only while that owner holds the lease, which it lets go
        of (a worker giving back an item it will not deliver). Without: the
        lease, if any, stays. An empty `owner` is `INVALID`. A kept failed item
        is not moved (False): `send_again` is its way back.
        """

    @abc.abstractmethod
    def send_again(self, item_ids: Sequence[uuid.UUID], *, now: datetime) -> builtins.list[QueueItem | None]:
        """Put kept failed items back in the queue, due at `now`, in one step: one answer per id, in order —
        the item as sent again (`core.items.sent_again`: its failed recipients pending, its delivered ones
        delivered, `created` now, no attempts), or None for an id that is not a kept failed item (gone, or
        not failed). Wakes idle workers as an add does."""

    @abc.abstractmethod
    def prune_failed(self, *, before: datetime) -> int:
        """Drop the kept failed items that failed before `before`, with their messages; how many
        (`manage.py mailqueue_prune_history`, at now - `KEEP_FAILED`)."""

    @abc.abstractmethod
    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        """Drop an item and its message, leased or not; the item as it stood, or None."""

    def cancel_many(self, item_ids: Sequence[uuid.UUID]) -> builtins.list[QueueItem | None]:
        """`cancel` for several items: one answer per id, in order (the admin's action on a filter).

        The default calls `cancel` for each; a store may drop them in one step.
        """
        return [self.cancel(item_id) for item_id in item_ids]

    async def asummary(self, *, now: datetime) -> QueueSummary:
        return await self._in_thread(self.summary, now=now)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Let go of connections the store opened itself; closing twice is fine."""

    # --- waking idle workers ------------------------------------------------------

    async def await_added(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for an add (in any process); True if one came.

        The default sleeps the whole timeout: the worker then polls.
        """
        await asyncio.sleep(timeout)
        return False

    # --- async twins -------------------------------------------------------------

    async def _in_thread(self, func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Run a synchronous method off the event loop (the async twins' default)."""
        return await asyncio.to_thread(func, *args, **kwargs)

    async def aadd_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        return await self._in_thread(self.add_many, items, now=now)

    async def aput_many(self, items: Sequence[NewItem], *, now: datetime) -> int:
        return len(await self.aadd_many(items, now=now))

    async def aadd(self, item: NewItem, *, now: datetime) -> QueueItem:
        return (await self.aadd_many([item], now=now))[0]

    async def aclaim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        return await self._in_thread(
            self.claim, owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit
        )

    async def aclaim_batch(
        self,
        *,
        owner: str,
        now: datetime,
        lease_expires: datetime,
        queues: Sequence[str] | None = None,
        limit: int = 1,
        suppressed_since: datetime | None = None,
        read_up_to: int = 0,
    ) -> ClaimedBatch:
        """While `aclaim`, `asuppressed` and `aread_messages` are the defaults (each the synchronous method in a
        thread), `claim_batch` in one thread; else those three twins one after the other (a store's native ones)."""
        if threaded_twins(self):
            return await self._in_thread(
                self.claim_batch, owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit,
                suppressed_since=suppressed_since, read_up_to=read_up_to,
            )  # fmt: skip
        return await acompose(
            self, owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit,
            suppressed_since=suppressed_since, read_up_to=read_up_to,
        )  # fmt: skip

    async def arenew(
        self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime
    ) -> builtins.list[uuid.UUID]:
        return await self._in_thread(self.renew, ids, owner=owner, lease_expires=lease_expires)

    async def acomplete(
        self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion
    ) -> QueueItem | None:
        return await self._in_thread(self.complete, item_id, owner=owner, revision=revision, completion=completion)

    async def areschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        return await self._in_thread(self.reschedule, item_id, at=at, owner=owner)

    async def acancel(self, item_id: uuid.UUID) -> QueueItem | None:
        return await self._in_thread(self.cancel, item_id)

    async def acancel_many(self, item_ids: Sequence[uuid.UUID]) -> builtins.list[QueueItem | None]:
        return await self._in_thread(self.cancel_many, item_ids)

    async def atake_tokens(
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
        return await self._in_thread(
            self.take_tokens, key, rate=rate, burst=burst, want=want, now=now, window=window, done=done, ended=ended
        )

    async def asuspend(self, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
        return await self._in_thread(self.suspend, destination, until=until, reply=reply, now=now)

    async def asuspensions(
        self, *, now: datetime, destinations: Sequence[str] | None = None
    ) -> builtins.list[Suspension]:
        return await self._in_thread(self.suspensions, now=now, destinations=destinations)

    async def aclear_suspension(self, destination: str) -> bool:
        return await self._in_thread(self.clear_suspension, destination)

    async def atake_probe(
        self, destination: str, *, holder: str, until: datetime, now: datetime
    ) -> Suspension | datetime | None:
        return await self._in_thread(self.take_probe, destination, holder=holder, until=until, now=now)

    async def aend_probe(self, destination: str, *, holder: str) -> bool:
        return await self._in_thread(self.end_probe, destination, holder=holder)

    async def adefer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        return await self._in_thread(self.defer_destination, domains, until=until, now=now)

    async def asuppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        return await self._in_thread(self.suppressed, addresses, since=since)

    async def aget(self, item_id: uuid.UUID) -> QueueItem | None:
        return await self._in_thread(self.get, item_id)

    async def acomplete_many(
        self, requests: Sequence[CompleteRequest], *, also: AlsoWrite | None = None
    ) -> builtins.list[QueueItem | None | QueueError]:
        if also is None:
            return await self._in_thread(self.complete_many, requests)
        return await self._in_thread(self.complete_many, requests, also=also)

    async def aread_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        return await self._in_thread(self.read_messages, item_ids)

    async def aread_message(self, item_id: uuid.UUID) -> bytes | None:
        return await self._in_thread(self.read_message, item_id)

    async def alist(
        self,
        query: ItemQuery | None = None,
        *,
        offset: int = 0,
        limit: int = 100,
        order: ItemOrder = ItemOrder.NEXT_ATTEMPT,
    ) -> builtins.list[QueueItem]:
        return await self._in_thread(self.list, query, offset=offset, limit=limit, order=order)

    async def acount(self, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        return await self._in_thread(self.count, query, limit=limit)

    async def aclose(self) -> None:
        await self._in_thread(self.close)

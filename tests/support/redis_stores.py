"""Redis stores a test builds and closes afterwards: as they are, or behind the asyncio twins (every sync method of
the contract run through the store's native async twin on a loop of its own)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from django_mailqueue.core.items import Completion, ItemOrder, ItemQuery, NewItem, QueueItem, Reply, Suppression
from django_mailqueue.core.shaping import Suspension, Window
from django_mailqueue.stores.base import QueueStore
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing import QueueStoreContract
from django_mailqueue.testing.contract import StoreFactory

from .redis_server import delete_prefix, unique_prefix

T = TypeVar("T")

#: Builds a RedisStore: `max_items`, then options added to the ones the factory was given.
Maker = Callable[..., RedisStore]


@contextmanager
def fresh_prefixes(url: str, tag: str) -> Iterator[Callable[[], dict[str, Any]]]:
    """Options for a store on `url` under a prefix of its own at each call; every prefix's keys deleted at the end."""
    prefixes: list[str] = []

    def options() -> dict[str, Any]:
        prefixes.append(unique_prefix(tag))
        return {"url": url, "key_prefix": prefixes[-1]}

    try:
        yield options
    finally:
        for prefix in prefixes:
            delete_prefix(url, prefix)


@contextmanager
def redis_stores(options: Callable[[], dict[str, Any]], *, one: bool = False) -> Iterator[Maker]:
    """A maker of stores from `options()` (called once a store, so each may take a fresh prefix), closing each store
    it made when the block ends. `one`: the test's setup allows a single store (a user's one prefix)."""
    made: list[RedisStore] = []

    def build(max_items: int | None = None, **extra: Any) -> RedisStore:
        assert not (one and made), "this suite builds one store per test"
        store = RedisStore({**options(), **extra}, max_items=max_items)
        made.append(store)
        return store

    try:
        yield build
    finally:
        for store in made:
            store.close()


@contextmanager
def async_twins(options: Callable[[], dict[str, Any]]) -> Iterator[StoreFactory]:
    """As `redis_stores`, each store behind `AsyncTwins` on one loop thread; closed through `aclose`."""
    loop = LoopThread()
    made: list[RedisStore] = []

    def make(max_items: int | None = None) -> QueueStore:
        inner = RedisStore(options(), max_items=max_items)
        made.append(inner)
        return AsyncTwins(inner, loop)

    try:
        yield make
    finally:
        for inner in made:
            loop.call(inner.aclose())
        loop.stop()


class RedisContract(QueueStoreContract):
    """The contract on a Redis store: no database thread to end."""

    def end_thread(self) -> None:
        pass  # the store's connection pool is shared by threads; no database is used


class AsyncTwinsContract(RedisContract):
    """The contract through `async_twins`: a lost message is lost in the store behind the twins."""

    def lose_message(self, store: QueueStore, item_id: uuid.UUID) -> None:
        assert isinstance(store, AsyncTwins)
        super().lose_message(store.inner, item_id)


class LoopThread:
    """An event loop running in a thread of its own, for calling async twins from sync code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class AsyncTwins(QueueStore):
    """A store whose every sync method runs the RedisStore's native async twin on one loop."""

    def __init__(self, inner: RedisStore, loop: LoopThread) -> None:
        super().__init__()
        self.orders = inner.orders
        self.in_add_order = inner.in_add_order
        self.exact_max_items = inner.exact_max_items
        self.inner = inner
        self.loop = loop
        self.max_items = inner.max_items

    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> list[QueueItem]:
        return self.loop.call(self.inner.aadd_many(items, now=now))

    def claim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> list[QueueItem]:
        return self.loop.call(
            self.inner.aclaim(owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit)
        )

    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> list[uuid.UUID]:
        return self.loop.call(self.inner.arenew(ids, owner=owner, lease_expires=lease_expires))

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        return self.loop.call(self.inner.acomplete(item_id, owner=owner, revision=revision, completion=completion))

    def reschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        return self.loop.call(self.inner.areschedule(item_id, at=at, owner=owner))

    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        return self.loop.call(self.inner.acancel(item_id))

    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        return self.loop.call(self.inner.aget(item_id))

    def read_message(self, item_id: uuid.UUID) -> bytes | None:
        return self.loop.call(self.inner.aread_message(item_id))

    def list(
        self,
        query: ItemQuery | None = None,
        *,
        offset: int = 0,
        limit: int = 100,
        order: ItemOrder = ItemOrder.NEXT_ATTEMPT,
    ) -> list[QueueItem]:
        return self.loop.call(self.inner.alist(query, offset=offset, limit=limit, order=order))

    def count(self, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        return self.loop.call(self.inner.acount(query, limit=limit))

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
        return self.loop.call(
            self.inner.atake_tokens(
                key, rate=rate, burst=burst, want=want, now=now, window=window, done=done, ended=ended
            )
        )

    def suspend(self, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
        return self.loop.call(self.inner.asuspend(destination, until=until, reply=reply, now=now))

    def suspensions(self, *, now: datetime, destinations: Sequence[str] | None = None) -> list[Suspension]:
        return self.loop.call(self.inner.asuspensions(now=now, destinations=destinations))

    def clear_suspension(self, destination: str) -> bool:
        return self.loop.call(self.inner.aclear_suspension(destination))

    def defer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        return self.loop.call(self.inner.adefer_destination(domains, until=until, now=now))

    def take_probe(
        self, destination: str, *, holder: str, until: datetime, now: datetime
    ) -> Suspension | datetime | None:
        return self.loop.call(self.inner.atake_probe(destination, holder=holder, until=until, now=now))

    def end_probe(self, destination: str, *, holder: str) -> bool:
        return self.loop.call(self.inner.aend_probe(destination, holder=holder))

    def suppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        return self.loop.call(self.inner.asuppressed(addresses, since=since))

    # the list's reading and editing have no async twins of their own (the admin and the commands are sync)

    def list_suppressed(
        self, *, since: datetime, search: str | None = None, offset: int = 0, limit: int = 100
    ) -> list[Suppression]:
        return self.inner.list_suppressed(since=since, search=search, offset=offset, limit=limit)

    def count_suppressed(self, *, since: datetime, search: str | None = None) -> int:
        return self.inner.count_suppressed(since=since, search=search)

    def suppress(self, entries: Sequence[Suppression]) -> None:
        self.inner.suppress(entries)

    def unsuppress(self, addresses: Sequence[str]) -> int:
        return self.inner.unsuppress(addresses)

    def prune_suppressed(self, *, before: datetime) -> int:
        return self.inner.prune_suppressed(before=before)

    # the kept failed items' admin calls have no async twins (the admin and the commands are sync)

    def send_again(self, item_ids: Sequence[uuid.UUID], *, now: datetime) -> list[QueueItem | None]:
        return self.inner.send_again(item_ids, now=now)

    def prune_failed(self, *, before: datetime) -> int:
        return self.inner.prune_failed(before=before)

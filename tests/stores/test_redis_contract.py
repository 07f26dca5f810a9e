"""The store contract suite on Redis: as a plain URL, as the documented ACL user, and through the async twins."""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections.abc import Coroutine, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from django_mailqueue.core.items import Completion, ItemOrder, ItemQuery, NewItem, QueueItem, Reply, Suppression
from django_mailqueue.core.shaping import Suspension
from django_mailqueue.stores.base import QueueStore
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing import QueueStoreContract
from django_mailqueue.testing.contract import StoreFactory
from tests.support.redis_server import delete_prefix

pytestmark = pytest.mark.redis

T = TypeVar("T")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "redis.md"


class TestRedisStore(QueueStoreContract):
    @pytest.fixture
    def make_store(self, redis_url: str) -> Iterator[StoreFactory]:
        made: list[RedisStore] = []
        prefixes: list[str] = []

        def make(max_items: int | None = None) -> QueueStore:
            prefix = f"mqtest-contract-{uuid.uuid4().hex[:12]}:"
            prefixes.append(prefix)
            store = RedisStore({"url": redis_url, "key_prefix": prefix}, max_items=max_items)
            made.append(store)
            return store

        yield make
        for store in made:
            store.close()
        for prefix in prefixes:
            delete_prefix(redis_url, prefix)

    def end_thread(self) -> None:
        pass  # the store's connection pool is shared by threads; no database is used


# --- the ACL user of docs/redis.md -------------------------------------------------------------


def documented_acl_line() -> str:
    """The `ACL SETUSER` line of docs/redis.md, the one operators are told to use."""
    found = re.findall(r"^ACL SETUSER mailqueue-worker .*$", DOCS.read_text(), flags=re.MULTILINE)
    assert len(found) == 1, "docs/redis.md must give exactly one ACL line"
    return found[0]


def acl_rules(prefix: str, password: str) -> list[str]:
    """The documented line's rules for another prefix and password."""
    words = documented_acl_line().split()[3:]
    rules = []
    for word in words:
        if word.startswith(">"):
            word = f">{password}"
        elif word.startswith(("~mailqueue:", "&mailqueue:")):
            word = word[0] + prefix + word[len("~mailqueue:") :]
        rules.append(word)
    assert "~" + prefix + "*" in rules and "-@all" in rules
    return rules


@pytest.fixture
def acl_user(redis_url: str) -> Iterator[tuple[str, str, str]]:
    """A user made with the documented ACL line for a fresh prefix: (url, prefix, password)."""
    user = f"mqtest-{uuid.uuid4().hex[:10]}"
    password = uuid.uuid4().hex
    prefix = f"mqtest-acl-{uuid.uuid4().hex[:10]}:"
    with redis.Redis.from_url(redis_url) as admin:
        admin.execute_command("ACL", "SETUSER", user, "reset", *acl_rules(prefix, password))
    parts = redis_url.split("://", 1)[1].split("/", 1)
    url = f"redis://{user}:{password}@{parts[0]}/{parts[1] if len(parts) > 1 else '0'}"
    yield url, prefix, password
    with redis.Redis.from_url(redis_url) as admin:
        admin.execute_command("ACL", "DELUSER", user)
    delete_prefix(redis_url, prefix)


class TestRedisStoreAsDocumentedAclUser(QueueStoreContract):
    """The whole contract, as a user with exactly the documented permissions."""

    @pytest.fixture
    def make_store(self, acl_user: tuple[str, str, str], redis_url: str) -> Iterator[StoreFactory]:
        url, prefix, _ = acl_user
        made: list[RedisStore] = []

        def make(max_items: int | None = None) -> QueueStore:
            # one prefix per test (the user's); a second store in a test would share it
            assert not made, "the ACL suite builds one store per test"
            store = RedisStore({"url": url, "key_prefix": prefix}, max_items=max_items)
            made.append(store)
            return store

        yield make
        for store in made:
            store.close()

    def end_thread(self) -> None:
        pass

    def test_the_user_may_not_touch_other_keys(self, acl_user: tuple[str, str, str]) -> None:
        url, prefix, _ = acl_user
        with redis.Redis.from_url(url) as client:
            client.set(f"{prefix}x", "1")
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.set("elsewhere:x", "1")
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command("CONFIG", "GET", "maxmemory-policy")


def test_the_docs_acl_line_grants_no_category_and_no_admin_command() -> None:
    words = documented_acl_line().split()
    granted = {w[1:] for w in words if w.startswith("+")}
    assert not any(g.startswith("@") for g in granted)
    assert not granted & {"config", "flushall", "flushdb", "keys", "script", "acl", "debug", "shutdown"}


# --- the async twins, through the same suite -------------------------------------------------------


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

    def take_tokens(self, key: str, *, rate: float, burst: int, want: int, now: datetime) -> int:
        return self.loop.call(self.inner.atake_tokens(key, rate=rate, burst=burst, want=want, now=now))

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


class TestRedisStoreAsyncTwins(QueueStoreContract):
    """The whole contract through `aadd_many`, `aclaim`, `arenew`, `acomplete`, … on redis-py's asyncio client."""

    @pytest.fixture
    def make_store(self, redis_url: str) -> Iterator[StoreFactory]:
        loop = LoopThread()
        made: list[RedisStore] = []

        def make(max_items: int | None = None) -> QueueStore:
            prefix = f"mqtest-async-{uuid.uuid4().hex[:12]}:"
            inner = RedisStore({"url": redis_url, "key_prefix": prefix}, max_items=max_items)
            made.append(inner)
            return AsyncTwins(inner, loop)

        yield make
        for inner in made:
            loop.call(inner.aclose())
            delete_prefix(redis_url, inner.key_prefix)
        loop.stop()

    def end_thread(self) -> None:
        pass

    def lose_message(self, store: QueueStore, item_id: uuid.UUID) -> None:
        assert isinstance(store, AsyncTwins)
        super().lose_message(store.inner, item_id)

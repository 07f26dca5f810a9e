"""The Redis store's connections: a sync and an asyncio client, the prefix's schema checked on first use,
Redis's errors as `QueueError`s, and the wake-up subscription."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.client

from ..core.errors import Code, QueueError
from ..core.masking import SecretMask
from . import redis_connection as conn
from . import redis_scripts as scripts
from . import redis_sentinel as sentinel
from .redis_cluster import MOST_REDIRECTS, AsyncSlotFinder, SharedFinder, SlotFinder, is_moved, is_redirect
from .redis_layout import LAYOUT_VERSION, SEARCH_LAYOUT, Keys, fields, text

logger = logging.getLogger("django_mailqueue.stores.redis")

T = TypeVar("T")
SyncClient = redis.Redis  # the generic parameters are the stubs' only
AsyncClient = redis.asyncio.Redis


#: What redis-py raises when a call fails: a cluster client's own errors (no node reachable, a command it cannot
#: route) are not RedisErrors.
DRIVER_ERRORS = (redis.RedisError, OSError, redis.exceptions.RedisClusterException)

#: The first pause between two tries of a call while the primary fails over, and the longest.
FIRST_PAUSE = 0.05
LONGEST_PAUSE = 1.0


def _counts_by_primary(finder: redis.RedisCluster[bytes], keys: list[str]) -> list[int]:
    """`ZCARD` of each key in one plain pipeline a primary: redis-py's cluster pipeline spends ~3× the CPU a
    command, and a worker's start counts ~2,000 keys (docs/performance.md, "Redis Cluster")."""
    groups: dict[str, tuple[Any, list[int]]] = {}
    for index, key in enumerate(keys):
        node = finder.get_node_from_key(key)
        if node is None:
            raise redis.exceptions.ClusterDownError(f"no primary serves the slot of {key}")
        groups.setdefault(node.name, (node, []))[1].append(index)
    counts = [0] * len(keys)
    for node, indexes in groups.values():
        pipe = finder.get_redis_connection(node).pipeline(transaction=False)
        for index in indexes:
            pipe.zcard(keys[index])
        for index, count in zip(indexes, pipe.execute(), strict=True):
            counts[index] = int(count)
    return counts


class RedisClients:
    """The clients of one store, made on first use from `url` (and `password`), a django-redis `cache`, or
    `sentinel` (the primary its sentinels name); with `cluster`, `url` is any node of a Redis Cluster, and the
    clients are plain ones to the primary serving the queue's slot (every key of the queue is in it), found through
    redis-py's cluster clients and found again when the slot moves (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: the call is
    sent again, up to `MOST_REDIRECTS` times) or its primary stops answering.

    With `failover_timeout` > 0, a call that fails because the primary is gone or read-only is sent again,
    pausing between tries, until it succeeds or that many seconds have passed since its first failure.
    """

    def __init__(
        self,
        keys: Keys,
        *,
        url: str | None,
        cache: str | None,
        password: str | None,
        timeout: float,
        sentinel_spec: sentinel.SentinelSpec | None = None,
        failover_timeout: float = 0.0,
        cluster: bool = False,
    ) -> None:
        self.keys = keys
        self.cluster = cluster
        self._timeout = timeout
        self._url = url
        self._cache = cache
        self._password = password
        self._sentinel = sentinel_spec
        self.failover_timeout = failover_timeout
        self._mask = SecretMask(password)
        if url is not None:
            self._mask = self._mask.adding(urlsplit(url).password)
            self.place = conn.where(url)
        elif sentinel_spec is not None:
            self._mask = self._mask.adding(sentinel_spec.sentinel_password)
            self.place = sentinel_spec.place
        else:
            self.place = f"the server of cache {cache!r}"
        self._lock = threading.Lock()
        self._client: SyncClient[bytes] | None = None
        self._owns_client = False
        self._sync_sentinel: Any = None
        self._async_settings: tuple[dict[str, Any], type[Any]] | None = None
        self._async: tuple[asyncio.AbstractEventLoop, AsyncClient[bytes], Any] | None = None
        self._pubsub: redis.asyncio.client.PubSub | None = None
        #: on a Cluster, the plain client of the `url`'s node the wake-up subscription is made on
        self._listener: AsyncClient[bytes] | None = None
        #: on a Cluster, what finds the primary of the queue's slot: for the sync client, and for one event loop's
        self._finder = SlotFinder(url, timeout, password, keys.schema) if cluster and url is not None else None
        self._afinders = SharedFinder()
        self.ready = False
        #: the wake-up channels `await_added` subscribes to (none: the store's own, `<prefix>wakeup`)
        self.channels: list[str] = []

    def share_finder(self, other: RedisClients) -> None:
        """Find the slot's primary through `other`'s asyncio cluster client: one slot map for a store's parts."""
        self._afinders = other._afinders

    def sync(self) -> SyncClient[bytes]:
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                if self._finder is not None:
                    self._client = self._finder.client()
                    self._owns_client = True
                elif self._url is not None:
                    self._client = conn.sync_client_from_url(self._url, self._timeout, self._password)
                    self._owns_client = True
                elif self._sentinel is not None:
                    self._client, self._sync_sentinel = sentinel.sync_client(self._sentinel, self._timeout)
                    self._owns_client = True
                else:
                    assert self._cache is not None
                    cached = conn.cache_clients(self._cache, self._timeout)
                    self._mask = self._mask.adding(cached.password)
                    if cached.sentinel is not None:
                        # django-redis's Sentinel pool: the store asks the same sentinels with clients of its own
                        self._sentinel = cached.sentinel
                        self._mask = self._mask.adding(cached.sentinel.sentinel_password)
                        self.place = f"{cached.sentinel.place} (cache {self._cache!r})"
                        self._client, self._sync_sentinel = sentinel.sync_client(self._sentinel, self._timeout)
                        self._owns_client = True
                    else:
                        self._async_settings = (cached.async_settings, cached.async_class)
                        self._client = cached.client
                        self._owns_client = cached.owned
            return self._client

    def async_(self) -> AsyncClient[bytes]:
        loop = asyncio.get_running_loop()
        current = self._async
        if current is not None and current[0] is loop:
            return current[1]
        # An asyncio client belongs to the loop it connected on: a store used from a
        # new loop gets a new client (the worker's loop is one for its whole run).
        manager: Any = None
        if self._url is not None:
            client = conn.async_client_from_url(self._url, self._timeout, self._password)
        else:
            if self._sentinel is None and self._async_settings is None:
                self.sync()  # a cache alias: its settings, or its sentinels
            if self._sentinel is not None:
                client, manager = sentinel.async_client(self._sentinel, self._timeout)
            else:
                assert self._async_settings is not None
                client = conn.async_client_from_settings(*self._async_settings)
        conn.pack_with_hiredis(client)
        self._async = (loop, client, manager)
        self._pubsub = None
        self._listener = None
        return client

    async def _aclient(self) -> AsyncClient[bytes]:
        """`async_()`, or on a Cluster the plain client of the slot's primary for the running loop."""
        if self._finder is None:
            return self.async_()
        loop = asyncio.get_running_loop()
        current = self._async
        if current is not None and current[0] is loop:
            return current[1]
        client = await self._afinder(loop).client(self.keys.schema)
        conn.pack_with_hiredis(client)
        current = self._async
        if current is not None and current[0] is loop:  # found by a call made at the same time: one client
            await _quietly(client.aclose())  # type: ignore[attr-defined, unused-ignore]
            return current[1]
        self._async = (loop, client, None)
        self._pubsub = None
        self._listener = None
        return client

    def _afinder(self, loop: asyncio.AbstractEventLoop) -> AsyncSlotFinder:
        """The asyncio slot finder of `loop`, shared with the store's other parts (on a Cluster only)."""
        assert self._finder is not None
        shared = self._afinders
        if shared.current is None or shared.current[0] is not loop:
            shared.current = (loop, AsyncSlotFinder(self._finder.url, self._timeout, self._password))
        return shared.current[1]

    def _unpin(self) -> None:
        """On a Cluster, after a redirect or a broken connection: the next call finds the slot's primary anew."""
        assert self._finder is not None
        with self._lock:
            client, self._client = self._client, None
        self._finder.lost()
        if client is not None:
            client.close()

    async def _aunpin(self) -> None:
        current, self._async = self._async, None
        if self._afinders.current is not None:
            self._afinders.current[1].lost()
        if current is not None and current[0] is asyncio.get_running_loop():
            await _quietly(current[1].aclose())  # type: ignore[attr-defined, unused-ignore]

    def do(self, work: Callable[[SyncClient[bytes]], T]) -> T:
        """Run `work` on the sync client: the prefix checked first, Redis's errors as `QueueError`s.

        `work` is sent again while the primary fails over (see the class), so it must be one
        round trip, or several that may each run twice (reads, or scripts given a replay marker).
        """
        tries = _Tries(self.failover_timeout)
        while True:
            try:
                client = self.sync()
                if not self.ready:
                    self._check_schema(scripts.SCHEMA.run(client, self._schema_keys, self._schema_args))
                    with contextlib.suppress(redis.RedisError):
                        self._note_policy(client.config_get("maxmemory-policy"))
                return work(client)
            except (scripts.ReplicasBehind, *DRIVER_ERRORS) as exc:
                if self._finder is not None and (is_redirect(exc) or conn.follows_failover(exc)):
                    self._unpin()
                pause = self._pause_or_raise(exc, tries)
                if isinstance(exc, redis.exceptions.ReadOnlyError) and self._client is not None and not self.cluster:
                    # a `url` that reached a replica: the next connections resolve and connect anew
                    self._client.connection_pool.disconnect(inuse_connections=False)
                time.sleep(pause)

    async def ado(self, work: Callable[[AsyncClient[bytes]], Awaitable[T]]) -> T:
        tries = _Tries(self.failover_timeout)
        while True:
            try:
                client = await self._aclient()
                if not self.ready:
                    self._check_schema(await scripts.SCHEMA.arun(client, self._schema_keys, self._schema_args))
                    with contextlib.suppress(redis.RedisError):
                        self._note_policy(await client.config_get("maxmemory-policy"))
                return await work(client)
            except (scripts.ReplicasBehind, *DRIVER_ERRORS) as exc:
                if self._finder is not None and (is_redirect(exc) or conn.follows_failover(exc)):
                    await self._aunpin()
                pause = self._pause_or_raise(exc, tries)
                if isinstance(exc, redis.exceptions.ReadOnlyError) and self._async is not None and not self.cluster:
                    await self._async[1].connection_pool.disconnect(inuse_connections=False)
                await asyncio.sleep(pause)

    def _pause_or_raise(self, exc: Exception, tries: _Tries) -> float:
        """After `work` failed with `exc` (in `do` or `ado`): the pause before it is sent again, the primary
        failing over; else raise the error as a `QueueError`."""
        if isinstance(exc, scripts.ReplicasBehind):
            raise self.replicas_behind(exc) from None
        pause = tries.pause(exc)
        if pause is None:
            raise conn.translate(exc, self._mask, self.place, tries.spent()) from None
        return pause

    def translate(self, exc: BaseException) -> QueueError:
        """A driver's error met outside `do` / `ado` (a reply of a pipeline), as they make it."""
        return conn.translate(exc, self._mask, self.place)

    def replicas_behind(self, behind: scripts.ReplicasBehind) -> QueueError:
        return QueueError(
            Code.STORE_UNAVAILABLE,
            f"Redis at {self.place} did the write, but only {behind.acked} of the {behind.wanted} replicas asked "
            "for (sync_replicas) acknowledged it within sync_timeout: it is on the primary and is lost if the "
            "primary fails before a replica gets it",
        )

    def maxmemory_policy(self) -> str | None:
        """The server's `maxmemory-policy`; None when the store's user may not run `CONFIG GET`.

        Raises `STORE_UNAVAILABLE` when Redis cannot be reached.
        """
        try:
            if self._finder is not None:  # every primary's: the first that is not noeviction
                primaries = redis.RedisCluster.PRIMARIES
                replies = self._finder.finder().config_get("maxmemory-policy", target_nodes=primaries)
                policies = [_policy(reply) for reply in replies.values()]
                if None in policies:
                    return None
                return next((p for p in policies if p != "noeviction"), "noeviction")
            reply = self.sync().config_get("maxmemory-policy")
        except redis.exceptions.NoPermissionError:
            return None
        except DRIVER_ERRORS as exc:
            raise conn.translate(exc, self._mask, self.place) from None
        return _policy(reply)

    def cluster_counts(self, keys: list[str]) -> list[int]:
        """`ZCARD` of each key, wherever its slot is (one pipeline a primary); on a Cluster only.

        Raises `STORE_UNAVAILABLE` when Redis cannot be reached.
        """
        if self._finder is None:
            raise QueueError(Code.INVALID, "keys of other slots are counted on a Redis Cluster only")
        try:
            finder = self._finder.finder()
            try:
                return _counts_by_primary(finder, keys)
            except DRIVER_ERRORS as exc:
                if not is_redirect(exc):
                    raise
            pipe = finder.pipeline(transaction=False)  # a slot moved: redis-py's cluster pipeline follows it
            for key in keys:
                pipe.zcard(key)
            return [int(count) for count in pipe.execute()]
        except DRIVER_ERRORS as exc:
            raise conn.translate(exc, self._mask, self.place) from None

    async def acluster_counts(self, keys: list[str]) -> list[int]:
        """`cluster_counts` in the running loop, through the asyncio cluster client its calls use (one slot map
        read for the worker's whole run, not a sync client's besides)."""
        if self._finder is None:
            raise QueueError(Code.INVALID, "keys of other slots are counted on a Redis Cluster only")
        try:
            return await self._afinder(asyncio.get_running_loop()).counts(keys)
        except DRIVER_ERRORS as exc:
            raise conn.translate(exc, self._mask, self.place) from None

    def _note_policy(self, reply: Any) -> None:
        policy = _policy(reply)
        if policy is not None and policy != "noeviction":
            logger.warning(
                "the Redis server of the queue (%s) runs with maxmemory-policy %r: when full it evicts queued "
                "items and messages; use noeviction (mailqueue.W001)",
                self.place,
                policy,
            )

    @property
    def _schema_keys(self) -> list[str]:
        """schema.lua's keys: the layout's, and the search's layout mark a new prefix starts with."""
        return [self.keys.schema, self.keys.search_layout]

    @property
    def _schema_args(self) -> list[scripts.Arg]:
        return [LAYOUT_VERSION, SEARCH_LAYOUT]

    def _check_schema(self, found: Any) -> None:
        kind, value = (text(part) for part in found)
        if kind == "string" and value == LAYOUT_VERSION:
            self.ready = True
            return
        held = f"{value[:60]!r}" if kind == "string" else f"a key of type {kind}"
        raise self.foreign(held)

    def foreign(self, held: str) -> QueueError:
        return QueueError(
            Code.INVALID_OPTION,
            f"key_prefix {self.keys.prefix!r} on {self.place} is another application's: {self.keys.schema} holds "
            f"{held}, not this store's layout version {LAYOUT_VERSION!r}; give the store a key_prefix of its own",
        )

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            owned, self._owns_client = self._owns_client, False
            manager, self._sync_sentinel = self._sync_sentinel, None
            current, self._async = self._async, None
            pubsub, self._pubsub = self._pubsub, None
            listener, self._listener = self._listener, None
            afinder, self._afinders.current = self._afinders.current, None
        if current is not None:
            loop, aclient, amanager = current
            if not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(_close_async(aclient, pubsub, amanager, listener))
        if afinder is not None and not afinder[0].is_closed() and not afinder[0].is_running():
            afinder[0].run_until_complete(_quietly(afinder[1].aclose()))
        self._close_sync(client, owned, manager)
        if self._finder is not None:
            self._finder.close()

    async def aclose(self) -> None:
        current, self._async = self._async, None
        pubsub, self._pubsub = self._pubsub, None
        listener, self._listener = self._listener, None
        if current is not None and current[0] is asyncio.get_running_loop():
            await _close_async(current[1], pubsub, current[2], listener)
        afinder, self._afinders.current = self._afinders.current, None
        if afinder is not None and afinder[0] is asyncio.get_running_loop():
            await _quietly(afinder[1].aclose())
        with self._lock:
            client, self._client = self._client, None
            owned, self._owns_client = self._owns_client, False
            manager, self._sync_sentinel = self._sync_sentinel, None
        self._close_sync(client, owned, manager)
        if self._finder is not None:
            self._finder.close()

    @staticmethod
    def _close_sync(client: SyncClient[bytes] | None, owned: bool, manager: Any) -> None:
        if client is None or not owned:
            return
        if manager is not None:
            sentinel.close_sync(client, manager)
        else:
            client.close()

    async def await_added(self, timeout: float) -> bool:
        """Wait for an add's message on `<prefix>wakeup`; True once one came.

        The subscription is made by the first call and kept, so an add between
        two calls is not missed: the next call returns True at once. When Redis
        cannot be reached, the call sleeps out the timeout (the worker polls).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        try:
            pubsub = await self._subscription()
            woke = False
            while True:
                wait = 0.0 if woke else max(deadline - loop.time(), 0.0)
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=wait)
                if message is not None:
                    woke = True
                    continue
                if woke:
                    return True
                if loop.time() >= deadline:
                    return False
        except DRIVER_ERRORS as exc:
            logger.warning("waiting for adds on %s failed, polling instead: %s", self.place, self._mask(str(exc)))
            broken, self._pubsub = self._pubsub, None
            if broken is not None:
                await _quietly(broken.aclose())  # type: ignore[attr-defined, unused-ignore]
                await asyncio.sleep(0)
            await asyncio.sleep(max(deadline - loop.time(), 0.0))
            return False

    async def _subscription(self) -> redis.asyncio.client.PubSub:
        client = await self._aclient()
        if self._pubsub is None:
            if self.cluster:
                # PUBLISH reaches every node of a Cluster: one node's subscription hears every add
                assert self._url is not None
                if self._listener is None:
                    self._listener = conn.async_client_from_url(self._url, self._timeout, self._password)
                client = self._listener
            pubsub = client.pubsub()
            await pubsub.subscribe(*(self.channels or [self.keys.wakeup]))
            self._pubsub = pubsub
        return self._pubsub


def _policy(reply: Any) -> str | None:
    """The value of a `CONFIG GET maxmemory-policy` reply (a dict, or a flat list)."""
    found = fields(reply) if reply else {}
    return found.get("maxmemory-policy")


async def _quietly(closing: Awaitable[Any]) -> None:
    try:
        await closing
    except DRIVER_ERRORS:
        pass


async def _close_async(
    client: AsyncClient[bytes],
    pubsub: redis.asyncio.client.PubSub | None,
    manager: Any = None,
    listener: AsyncClient[bytes] | None = None,
) -> None:
    if pubsub is not None:
        await _quietly(pubsub.aclose())  # type: ignore[attr-defined, unused-ignore]
        await asyncio.sleep(0)  # the pub/sub connection closes without waiting: let its transport go
    if listener is not None:
        await _quietly(listener.aclose())  # type: ignore[attr-defined, unused-ignore]
    if manager is not None:
        await _quietly(sentinel.close_async(client, manager))
    else:
        await _quietly(client.aclose())  # type: ignore[attr-defined, unused-ignore]


class _Tries:
    """The tries of one call while the primary fails over: how long to pause before the next, or None
    when the call must give up (no failover error, retries off, or `limit` seconds spent)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.first_failure: float | None = None
        self.next_pause = FIRST_PAUSE
        self.redirects = 0

    def pause(self, exc: BaseException) -> float | None:
        if is_redirect(exc):  # not run: sent again (the slot map read anew), MOVED at once, the others after a pause
            self.redirects += 1
            if self.redirects > MOST_REDIRECTS:
                return None
            return 0.0 if is_moved(exc) else FIRST_PAUSE * self.redirects
        if self.limit <= 0 or not conn.follows_failover(exc):
            return None
        now = time.monotonic()
        if self.first_failure is None:
            self.first_failure = now
        left = self.first_failure + self.limit - now
        if left <= 0:
            return None
        pause = min(self.next_pause, left)
        self.next_pause = min(self.next_pause * 2, LONGEST_PAUSE)
        return pause

    def spent(self) -> float:
        return 0.0 if self.first_failure is None else time.monotonic() - self.first_failure

"""The Redis store's connections: a sync and an asyncio client, the prefix's schema checked on first use,
Redis's errors as `QueueError`s, and the wake-up subscription."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
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
from .redis_layout import LAYOUT_VERSION, Keys, fields, text

logger = logging.getLogger("django_mailqueue.stores.redis")

T = TypeVar("T")
SyncClient = redis.Redis  # the generic parameters are the stubs' only
AsyncClient = redis.asyncio.Redis


class RedisClients:
    """The clients of one store, made on first use from `url` (and `password`) or a django-redis `cache`."""

    def __init__(self, keys: Keys, *, url: str | None, cache: str | None, password: str | None, timeout: float) -> None:
        self.keys = keys
        self._timeout = timeout
        self._url = url
        self._cache = cache
        self._password = password
        self._mask = SecretMask(password)
        if url is not None:
            self._mask = self._mask.adding(urlsplit(url).password)
            self.place = conn.where(url)
        else:
            self.place = f"the server of cache {cache!r}"
        self._lock = threading.Lock()
        self._client: SyncClient[bytes] | None = None
        self._owns_client = False
        self._async_settings: tuple[dict[str, Any], type[Any]] | None = None
        self._async: tuple[asyncio.AbstractEventLoop, AsyncClient[bytes]] | None = None
        self._pubsub: redis.asyncio.client.PubSub | None = None
        self.ready = False

    def sync(self) -> SyncClient[bytes]:
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                if self._url is not None:
                    self._client = conn.sync_client_from_url(self._url, self._timeout, self._password)
                    self._owns_client = True
                else:
                    assert self._cache is not None
                    cached = conn.cache_clients(self._cache, self._timeout)
                    self._mask = self._mask.adding(cached.password)
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
        if self._url is not None:
            client = conn.async_client_from_url(self._url, self._timeout, self._password)
        else:
            if self._async_settings is None:
                self.sync()
            assert self._async_settings is not None
            client = conn.async_client_from_settings(*self._async_settings)
        self._async = (loop, client)
        self._pubsub = None
        return client

    def do(self, work: Callable[[SyncClient[bytes]], T]) -> T:
        """Run `work` on the sync client: the prefix checked first, Redis's errors as `QueueError`s."""
        try:
            client = self.sync()
            if not self.ready:
                self._check_schema(scripts.SCHEMA.run(client, [self.keys.schema], [LAYOUT_VERSION]))
                with contextlib.suppress(redis.RedisError):
                    self._note_policy(client.execute_command("CONFIG", "GET", "maxmemory-policy"))
            return work(client)
        except QueueError:
            raise
        except (redis.RedisError, OSError) as exc:
            raise conn.translate(exc, self._mask, self.place) from None

    async def ado(self, work: Callable[[AsyncClient[bytes]], Awaitable[T]]) -> T:
        try:
            client = self.async_()
            if not self.ready:
                self._check_schema(await scripts.SCHEMA.arun(client, [self.keys.schema], [LAYOUT_VERSION]))
                with contextlib.suppress(redis.RedisError):
                    self._note_policy(await client.execute_command("CONFIG", "GET", "maxmemory-policy"))  # type: ignore[no-untyped-call]
            return await work(client)
        except QueueError:
            raise
        except (redis.RedisError, OSError) as exc:
            raise conn.translate(exc, self._mask, self.place) from None

    def maxmemory_policy(self) -> str | None:
        """The server's `maxmemory-policy`; None when the store's user may not run `CONFIG GET`.

        Raises `STORE_UNAVAILABLE` when Redis cannot be reached.
        """
        try:
            reply = self.sync().execute_command("CONFIG", "GET", "maxmemory-policy")
        except redis.exceptions.NoPermissionError:
            return None
        except (redis.RedisError, OSError) as exc:
            raise conn.translate(exc, self._mask, self.place) from None
        return _policy(reply)

    def _note_policy(self, reply: Any) -> None:
        policy = _policy(reply)
        if policy is not None and policy != "noeviction":
            logger.warning(
                "the Redis server of the queue (%s) runs with maxmemory-policy %r: when full it evicts queued "
                "items and messages; use noeviction (mailqueue.W001)",
                self.place,
                policy,
            )

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
            current, self._async = self._async, None
            pubsub, self._pubsub = self._pubsub, None
        if current is not None:
            loop, aclient = current
            if not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(_close_async(aclient, pubsub))
        if client is not None and owned:
            client.close()

    async def aclose(self) -> None:
        current, self._async = self._async, None
        pubsub, self._pubsub = self._pubsub, None
        if current is not None and current[0] is asyncio.get_running_loop():
            await _close_async(current[1], pubsub)
        with self._lock:
            client, self._client = self._client, None
            owned, self._owns_client = self._owns_client, False
        if client is not None and owned:
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
        except (redis.RedisError, OSError) as exc:
            logger.warning("waiting for adds on %s failed, polling instead: %s", self.place, self._mask(str(exc)))
            broken, self._pubsub = self._pubsub, None
            if broken is not None:
                await _quietly(broken.aclose())  # type: ignore[attr-defined, unused-ignore]
                await asyncio.sleep(0)
            await asyncio.sleep(max(deadline - loop.time(), 0.0))
            return False

    async def _subscription(self) -> redis.asyncio.client.PubSub:
        client = self.async_()
        if self._pubsub is None:
            pubsub = client.pubsub()
            await pubsub.subscribe(self.keys.wakeup)
            self._pubsub = pubsub
        return self._pubsub


def _policy(reply: Any) -> str | None:
    """The value of a `CONFIG GET maxmemory-policy` reply (a dict, or a flat list)."""
    found = fields(reply) if reply else {}
    return found.get("maxmemory-policy")


async def _quietly(closing: Awaitable[Any]) -> None:
    try:
        await closing
    except (redis.RedisError, OSError):
        pass


async def _close_async(client: AsyncClient[bytes], pubsub: redis.asyncio.client.PubSub | None) -> None:
    if pubsub is not None:
        await _quietly(pubsub.aclose())  # type: ignore[attr-defined, unused-ignore]
        await asyncio.sleep(0)  # the pub/sub connection closes without waiting: let its transport go
    await _quietly(client.aclose())  # type: ignore[attr-defined, unused-ignore]

"""Redis Sentinel for the Redis store: its OPTIONS checked, and clients that ask the sentinels for the primary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.backoff
import redis.retry
import redis.sentinel

#: The options that belong to Sentinel (with `sentinels`), beside the common ones.
SENTINEL_OPTION_NAMES = frozenset({"sentinels", "service_name", "sentinel_password", "username", "db"})


@dataclass(frozen=True)
class SentinelSpec:
    """Where the primary of a service is found, and how to log in to the sentinels and to the data nodes."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    @property
    def place(self) -> str:
        """The service as it may be shown: sentinels, service and database, no credentials."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"sentinel://{hosts}/{self.service_name}/{self.db}"

    def connection_kwargs(self, timeout: float) -> dict[str, Any]:
        """What every connection to a data node (the primary) is made with."""
        kwargs: dict[str, Any] = {
            "db": self.db,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "decode_responses": False,
        }
        if self.username:
            kwargs["username"] = self.username
        if self.password:
            kwargs["password"] = self.password
        return kwargs

    def sentinel_kwargs(self, timeout: float) -> dict[str, Any]:
        """What each connection to a sentinel is made with: its own password, never the data nodes'."""
        kwargs: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if self.sentinel_password:
            kwargs["password"] = self.sentinel_password
        return kwargs


def spec_from_options(options: Mapping[str, Any]) -> SentinelSpec:
    """The spec of OPTIONS that `check_sentinel_options` found nothing wrong in."""
    return SentinelSpec(
        sentinels=tuple((str(host), int(port)) for host, port in options["sentinels"]),
        service_name=str(options["service_name"]),
        db=int(options.get("db", 0)),
        username=options.get("username"),
        password=options.get("password"),
        sentinel_password=options.get("sentinel_password"),
    )


def check_sentinel_options(options: Mapping[str, Any]) -> list[str]:
    """What is wrong in the Sentinel part of `OPTIONS`; [] when nothing (or when it has no `sentinels`)."""
    problems: list[str] = []
    sentinels = options.get("sentinels")
    if sentinels is None:
        given = sorted(name for name in SENTINEL_OPTION_NAMES if name in options)
        if given:
            problems.append(f"{given} go(es) with 'sentinels'; without it give 'url' or 'cache'")
        return problems
    if not _is_address_list(sentinels):
        problems.append("'sentinels' must be a non-empty list of (host, port) pairs, e.g. [('10.0.0.5', 26379)]")
    name = options.get("service_name")
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        problems.append("'service_name' must be the name the sentinels monitor the primary by (no spaces)")
    db = options.get("db", 0)
    if isinstance(db, bool) or not isinstance(db, int) or not 0 <= db <= 65535:
        problems.append("'db' must be a database number, 0 or more")
    for secret in ("username", "password", "sentinel_password"):
        value = options.get(secret)
        if value is not None and (not isinstance(value, str) or not value):
            problems.append(f"{secret!r} must be a non-empty string")
    return problems


def _is_address_list(value: Any) -> bool:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or not value:
        return False
    for entry in value:
        if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != 2:
            return False
        host, port = entry
        if not isinstance(host, str) or not host or isinstance(port, bool) or not isinstance(port, int):
            return False
        if not 0 < port < 65536:
            return False
    return True


def sync_client(spec: SentinelSpec, timeout: float) -> tuple[redis.Redis[bytes], redis.sentinel.Sentinel]:
    """A client of the service's primary (asked of the sentinels at each new connection), and its Sentinel.

    A connection to a primary that was demoted (READONLY) is dropped and the
    next one asks again; the store's own loop retries (redis-py's retries off).
    """
    retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    sentinel = redis.sentinel.Sentinel(
        list(spec.sentinels), sentinel_kwargs={**spec.sentinel_kwargs(timeout), "retry": retry}
    )
    client: redis.Redis[bytes] = sentinel.master_for(
        spec.service_name, redis_class=redis.Redis, retry=retry, **spec.connection_kwargs(timeout)
    )
    return client, sentinel


def async_client(
    spec: SentinelSpec, timeout: float
) -> tuple[redis.asyncio.Redis[bytes], redis.asyncio.sentinel.Sentinel]:
    retry = redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)
    sentinel = redis.asyncio.sentinel.Sentinel(
        list(spec.sentinels), sentinel_kwargs={**spec.sentinel_kwargs(timeout), "retry": retry}
    )
    client: redis.asyncio.Redis[bytes] = sentinel.master_for(
        spec.service_name, redis_class=redis.asyncio.Redis, retry=retry, **spec.connection_kwargs(timeout)
    )
    return client, sentinel


def close_sync(client: redis.Redis[bytes], sentinel: redis.sentinel.Sentinel) -> None:
    client.close()
    client.connection_pool.disconnect()
    for node in sentinel.sentinels:
        node.close()
        node.connection_pool.disconnect()


async def close_async(client: redis.asyncio.Redis[bytes], sentinel: redis.asyncio.sentinel.Sentinel) -> None:
    await client.aclose()  # type: ignore[attr-defined, unused-ignore]
    await client.connection_pool.disconnect()
    for node in sentinel.sentinels:
        await node.aclose()  # type: ignore[attr-defined, unused-ignore]
        await node.connection_pool.disconnect()


def spec_from_pool(pool: Any) -> SentinelSpec | None:
    """The spec of a django-redis Sentinel pool (`redis.sentinel.SentinelConnectionPool`); None for another pool."""
    if not isinstance(pool, redis.sentinel.SentinelConnectionPool):
        return None
    manager = pool.sentinel_manager
    sentinels = tuple(
        (str(node.connection_pool.connection_kwargs["host"]), int(node.connection_pool.connection_kwargs["port"]))
        for node in manager.sentinels
    )
    sentinel_password = manager.sentinel_kwargs.get("password")
    kwargs = pool.connection_kwargs
    return SentinelSpec(
        sentinels=sentinels,
        service_name=str(pool.service_name),
        db=int(kwargs.get("db") or 0),
        username=kwargs.get("username") or None,
        password=kwargs.get("password") or None,
        sentinel_password=sentinel_password if isinstance(sentinel_password, str) else None,
    )

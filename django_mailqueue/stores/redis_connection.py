"""The Redis store's connections: its OPTIONS checked, its clients built, Redis's errors made `QueueError`s."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.retry
import redis.backoff
import redis.connection
import redis.retry
import redis.sentinel

try:
    import hiredis
except ImportError:  # pragma: no cover - redis-py packs commands in Python then
    hiredis = None  # type: ignore[assignment]

from ..core.errors import Code, QueueError
from ..core.masking import SecretMask
from .redis_sentinel import SENTINEL_OPTION_NAMES, SentinelSpec, check_sentinel_options, spec_from_pool

#: The keys `OPTIONS` may hold.
OPTION_NAMES = frozenset(
    {
        "url",
        "password",
        "cache",
        "key_prefix",
        "on_commit",
        "socket_timeout",
        "failover_timeout",
        "sync_replicas",
        "sync_timeout",
        "cluster",
        "partitions",
        *SENTINEL_OPTION_NAMES,
    }
)
DEFAULT_PREFIX = "mailqueue:"
DEFAULT_SOCKET_TIMEOUT = 10.0
#: Seconds a call keeps retrying while the primary is gone or read-only: with `sentinels`, and otherwise.
DEFAULT_FAILOVER_TIMEOUT_SENTINEL = 60.0
DEFAULT_FAILOVER_TIMEOUT = 0.0
DEFAULT_SYNC_TIMEOUT = 1.0
#: Lowercase letters, digits, `_ : . -`, a letter first: no `{` (the store adds the Cluster hash tag itself)
#: and no glob character, so `SCAN MATCH <prefix>*` and `~<prefix>*` mean the queue's keys.
PREFIX_RULE = re.compile(r"[a-z][a-z0-9_:.\-]{0,39}")
URL_SCHEMES = ("redis", "rediss", "unix")

#: The connection settings an asyncio client may take from a django-redis pool.
_ASYNC_KWARGS = frozenset(
    {
        "host",
        "port",
        "db",
        "username",
        "password",
        "path",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "client_name",
        "credential_provider",
        "encoding",
        "encoding_errors",
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
    }
)


def check_options(options: Mapping[str, Any]) -> list[str]:
    """What is wrong in a RedisStore's `OPTIONS`, without connecting; [] when nothing."""
    problems: list[str] = []
    problems.extend(_cluster_problems(options))
    unknown = set(options) - OPTION_NAMES
    if unknown:
        problems.append(f"unknown option(s) {sorted(unknown)}; RedisStore takes {sorted(OPTION_NAMES)}")
    url, cache, sentinels = options.get("url"), options.get("cache"), options.get("sentinels")
    if [url, cache, sentinels].count(None) != 2:
        problems.append(
            "give exactly one of 'url' (redis://, rediss:// or unix://), 'cache' (a CACHES alias) and "
            "'sentinels' (with 'service_name')"
        )
    if url is not None:
        problems.extend(_url_problems(url))
    problems.extend(check_sentinel_options(options))
    password = options.get("password")
    if password is not None:
        if not isinstance(password, str) or not password:
            problems.append("'password' must be a non-empty string")
        elif url is None and sentinels is None:
            problems.append("'password' goes with 'url' or 'sentinels'; a 'cache' alias takes its password from CACHES")
        elif isinstance(url, str) and _url_password(url):
            problems.append("give the password in 'url' or in 'password', not in both")
    if cache is not None:
        problems.extend(_cache_problems(cache))
    prefix = options.get("key_prefix", DEFAULT_PREFIX)
    if not isinstance(prefix, str) or not PREFIX_RULE.fullmatch(prefix):
        problems.append(
            "'key_prefix' must be 1 to 40 of lowercase letters, digits, '_', ':', '.' and '-', starting with a letter"
        )
    if not isinstance(options.get("on_commit", False), bool):
        problems.append("'on_commit' must be True or False")
    timeout = options.get("socket_timeout", DEFAULT_SOCKET_TIMEOUT)
    if not _seconds(timeout, 3600):
        problems.append("'socket_timeout' must be a number of seconds, more than 0 and at most 3600")
    failover = options.get("failover_timeout", 0)
    if not _seconds(failover, 600, zero=True):
        problems.append("'failover_timeout' must be a number of seconds, from 0 (no retries) to 600")
    replicas = options.get("sync_replicas", 0)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= 100:
        problems.append("'sync_replicas' must be a whole number of replicas, from 0 (no WAIT) to 100")
    sync_timeout = options.get("sync_timeout", DEFAULT_SYNC_TIMEOUT)
    if not _seconds(sync_timeout, 3600):
        problems.append("'sync_timeout' must be a number of seconds, more than 0")
    elif replicas and _seconds(timeout, 3600) and sync_timeout >= timeout:
        problems.append("'sync_timeout' must be less than 'socket_timeout' (the reply to WAIT comes after it)")
    return problems


#: The most hash-tagged parts a queue is split into on a Cluster (`partitions`).
MOST_PARTITIONS = 64


def _cluster_problems(options: Mapping[str, Any]) -> list[str]:
    cluster = options.get("cluster", False)
    if not isinstance(cluster, bool):
        return ["'cluster' must be True or False"]
    partitions = options.get("partitions", 1)
    if not cluster:
        return ["'partitions' goes with 'cluster': True"] if "partitions" in options else []
    problems = []
    if options.get("url") is None:
        problems.append("a Redis Cluster is reached by 'url' (any of its nodes), not by 'cache' or 'sentinels'")
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MOST_PARTITIONS:
        problems.append(f"'partitions' must be a whole number from 1 to {MOST_PARTITIONS}")
    if options.get("sync_replicas", 0):
        problems.append("'sync_replicas' is not supported with 'cluster' (give 0): WAIT is not sent on a Cluster")
    return problems


def _seconds(value: Any, most: float, *, zero: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (0 <= value if zero else 0 < value) and value <= most


def failover_timeout(options: Mapping[str, Any]) -> float:
    """Seconds a failed call is retried while the primary is gone or read-only (0: never)."""
    through_sentinel = bool(options.get("sentinels")) or (
        isinstance(options.get("cache"), str) and cache_uses_sentinel(options["cache"])
    )
    default = DEFAULT_FAILOVER_TIMEOUT_SENTINEL if through_sentinel else DEFAULT_FAILOVER_TIMEOUT
    return float(options.get("failover_timeout", default))


def cache_uses_sentinel(alias: str) -> bool:
    """Whether the django-redis cache `alias` is configured to reach Redis through Sentinel (read from the
    settings: nothing connects)."""
    from django.conf import settings

    cache = getattr(settings, "CACHES", {}).get(alias, {})
    options = cache.get("OPTIONS", {}) or {}
    named = (
        options.get("CLIENT_CLASS"),
        options.get("CONNECTION_FACTORY") or getattr(settings, "DJANGO_REDIS_CONNECTION_FACTORY", None),
        options.get("CONNECTION_POOL_CLASS"),
    )
    return any(isinstance(name, str) and "Sentinel" in name for name in named)


def follows_failover(exc: BaseException) -> bool:
    """Whether `exc` is what a call meets while a primary fails over: no connection, no answer, or a
    read-only replica where the primary was. Refused credentials and every other refusal are not."""
    if isinstance(exc, redis.exceptions.AuthenticationError | redis.exceptions.AuthorizationError):
        return False
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return True
    if isinstance(exc, redis.exceptions.ResponseError):
        return str(exc).startswith(("MASTERDOWN", "LOADING", "NOREPLICAS"))
    return isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | OSError)


def _url_problems(url: Any) -> list[str]:
    if not isinstance(url, str) or not url:
        return ["'url' must be a string such as redis://host:6379/0"]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return ["'url' is not a URL"]
    if parts.scheme not in URL_SCHEMES:
        return ["'url' must start with redis://, rediss:// or unix://"]
    if parts.scheme == "unix" and not parts.path:
        return ["a unix:// 'url' needs the socket's path"]
    try:
        redis.connection.parse_url(url)
    except ValueError:
        return ["'url' is not a Redis URL (see redis-py's Redis.from_url)"]
    return []


def _url_password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def _cache_problems(alias: Any) -> list[str]:
    if not isinstance(alias, str) or not alias:
        return ["'cache' must be the alias of a CACHES entry"]
    from django.conf import settings

    caches = getattr(settings, "CACHES", {})
    if alias not in caches:
        return [f"'cache' {alias!r} is not an alias of CACHES ({', '.join(caches) or 'none'})"]
    backend = str(caches[alias].get("BACKEND", ""))
    if not backend.startswith("django_redis."):
        return [f"'cache' {alias!r} is not a django-redis cache (its BACKEND is {backend!r})"]
    return []


def where(url: str) -> str:
    """A URL as it may be shown: scheme, host, port and database, never the userinfo."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def sync_client_from_url(url: str, timeout: float, password: str | None = None) -> redis.Redis[bytes]:
    # No retries: a command whose connection drops midway may have run (an add, a
    # claim); the caller is told STORE_UNAVAILABLE instead of it being run twice.
    # A connection the server closed (a restart) is replaced when it is next taken
    # from the pool, before any command is sent on it.
    return redis.Redis.from_url(
        url,
        password=password,  # the URL's own password wins (there is at most one: check_options)
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
        decode_responses=False,
    )


def async_client_from_url(url: str, timeout: float, password: str | None = None) -> redis.asyncio.Redis[bytes]:
    return redis.asyncio.Redis.from_url(
        url,
        password=password,  # the URL's own password wins (there is at most one: check_options)
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0),
        decode_responses=False,
    )


def sync_cluster_client(url: str, timeout: float, password: str | None = None) -> redis.RedisCluster[bytes]:
    """A Redis Cluster client from any node's URL: it reads the slot map and sends each command to the primary of
    its keys' slot, following MOVED and ASK; no retries, as `sync_client_from_url`."""
    return redis.RedisCluster.from_url(
        url,
        password=password,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
        decode_responses=False,
    )


def async_cluster_client(url: str, timeout: float, password: str | None = None) -> redis.asyncio.RedisCluster[bytes]:
    return redis.asyncio.RedisCluster.from_url(
        url,
        password=password,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0),  # type: ignore[arg-type]  # its from_url says the sync Retry
        decode_responses=False,
    )


#: Arguments longer than this go through redis-py's own packing, which sends them without a copy.
_PACKED_MOST = 6000


class _HiredisPacking:
    """An asyncio connection that packs its commands with hiredis (C) instead of redis-py's Python: a completion's
    script call has some 30 arguments, ~40 us a call in Python against ~6 with hiredis. Anything but short text,
    bytes and integers (EVALSHA's key count; not bool) goes through redis-py's packing as before."""

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0] if args else None
        if (
            type(first) is str
            and " " not in first
            and all(type(a) is int or ((type(a) is str or type(a) is bytes) and len(a) <= _PACKED_MOST) for a in args)
        ):
            return [hiredis.pack_command(args)]
        return super().pack_command(*args)  # type: ignore[misc, no-any-return]  # the connection class's


_PACKING: dict[type[Any], type[Any]] = {}


def pack_with_hiredis(client: redis.asyncio.Redis[bytes]) -> None:
    """Make `client`'s new connections pack their commands with hiredis, when it is installed (redis-py's asyncio
    connections do not use it); the sync clients already do."""
    pool = getattr(client, "connection_pool", None)
    cls = getattr(pool, "connection_class", None)
    if hiredis is None or not isinstance(cls, type) or issubclass(cls, _HiredisPacking):
        return
    packing = _PACKING.get(cls)
    if packing is None:
        packing = _PACKING[cls] = type(f"Hiredis{cls.__name__}", (_HiredisPacking, cls), {})
    pool.connection_class = packing  # type: ignore[union-attr]


@dataclass
class CacheConnection:
    """What the store takes from a django-redis cache: a sync client, and how to make an asyncio one."""

    client: redis.Redis[bytes]
    #: True when the store made `client` (and its pool) itself, and so closes it
    owned: bool
    async_settings: dict[str, Any]
    async_class: type[Any]
    password: str | None
    #: set when the cache reaches Redis through Sentinel (django-redis's SentinelConnectionFactory)
    sentinel: SentinelSpec | None = None


def cache_clients(alias: str, timeout: float) -> CacheConnection:
    """django-redis's client for `alias`, and what an asyncio client needs to reach the same server.

    The sync client is django-redis's own, or one on a pool of the same settings
    when that pool decodes responses (the store reads messages as bytes).
    """
    from django_redis import get_redis_connection

    client: redis.Redis[bytes] = get_redis_connection(alias)
    pool = client.connection_pool
    spec = spec_from_pool(pool)
    if spec is not None:
        return CacheConnection(client, False, {}, type(None), spec.password, sentinel=spec)
    kwargs = dict(pool.connection_kwargs)
    sync_class = pool.connection_class
    async_class: type[Any]
    if issubclass(sync_class, redis.connection.UnixDomainSocketConnection):
        async_class = redis.asyncio.connection.UnixDomainSocketConnection
    elif issubclass(sync_class, redis.connection.SSLConnection):
        async_class = redis.asyncio.connection.SSLConnection
    else:
        async_class = redis.asyncio.connection.Connection
    accepted = _parameters(async_class)
    settings = {k: v for k, v in kwargs.items() if k in _ASYNC_KWARGS and k in accepted}
    settings.setdefault("socket_timeout", kwargs.get("orig_socket_timeout") or timeout)
    settings.setdefault("socket_connect_timeout", kwargs.get("orig_socket_connect_timeout") or timeout)
    owned = False
    if kwargs.get("decode_responses"):
        own = dict(kwargs, decode_responses=False)
        client = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=sync_class, **own))
        owned = True
    password = kwargs.get("password")
    return CacheConnection(client, owned, settings, async_class, password if isinstance(password, str) else None)


def async_client_from_settings(settings: Mapping[str, Any], connection_class: type[Any]) -> redis.asyncio.Redis[bytes]:
    retry = redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)
    pool = redis.asyncio.ConnectionPool(
        connection_class=connection_class, decode_responses=False, retry=retry, **settings
    )
    # from_pool: the client owns the pool, and aclose() disconnects it
    client: redis.asyncio.Redis[bytes] = redis.asyncio.Redis.from_pool(pool)  # type: ignore[attr-defined, unused-ignore]
    return client


def _parameters(cls: type[Any]) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names.update(inspect.signature(init).parameters)
    return names


def translate(exc: BaseException, mask: SecretMask, place: str, retried: float = 0.0) -> QueueError:
    """A driver's error as `STORE_UNAVAILABLE`, its text with every password masked; `retried`: the seconds
    the call was tried again for before giving up."""
    error = _translate(exc, mask, place)
    if retried > 0:
        error = QueueError(Code.STORE_UNAVAILABLE, f"{error.message} (tried again for {retried:.1f} s)")
    return error


def _translate(exc: BaseException, mask: SecretMask, place: str) -> QueueError:
    text = mask(str(exc)).splitlines()[0] if str(exc) else ""
    kind = type(exc).__name__
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        # redis-py's text holds each sentinel client's repr: only the kinds of their errors are kept
        failures = re.findall(r" - (?:\w+:)?(\w+)", text)
        said = f"the sentinels failed with {', '.join(failures)}" if failures else "the sentinels name none up"
        message = (
            f"no sentinel of {place} names a primary that is up (a failover under way, or the sentinels out of "
            f"reach or refusing the sentinel_password): {kind}: {said}"
        )
    elif type(exc).__name__ == "OutOfMemoryError" or text.startswith("OOM"):
        message = (
            f"Redis at {place} is out of memory and refused the write (used memory is over its 'maxmemory'; "
            "with maxmemory-policy noeviction it refuses rather than evict queue keys): raise maxmemory, "
            f"or bound the queue with MAX_ITEMS and MAX_MESSAGE_SIZE. Redis said: {text}"
        )
    elif isinstance(exc, redis.exceptions.ReadOnlyError):
        message = f"Redis at {place} is a read-only replica; point the store at the primary. Redis said: {text}"
    elif isinstance(exc, redis.exceptions.NoPermissionError):
        message = (
            f"the Redis user at {place} lacks a permission the store needs (see the ACL line in the Redis "
            f"store's documentation). Redis said: {text}"
        )
    elif isinstance(exc, redis.exceptions.AuthenticationError | redis.exceptions.AuthorizationError):
        message = f"Redis at {place} refused the credentials: {kind}: {text}"
    elif isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | OSError):
        message = f"Redis at {place} is out of reach: {kind}: {text}"
    elif isinstance(exc, redis.exceptions.RedisClusterException):
        message = f"the Redis Cluster at {place} is out of reach or cannot take the call: {kind}: {text}"
    else:
        message = f"Redis at {place} refused the operation: {kind}: {text}"
    return QueueError(Code.STORE_UNAVAILABLE, mask(message))

"""The Redis store on a Redis Cluster: plain clients to the primary serving the queue's hash slot, found through
redis-py's cluster clients, and found again when the slot moves or its primary stops answering."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio

from . import redis_connection as conn

#: A Cluster's answers that mean the command was not run where it was sent: the slot is served elsewhere now
#: (MOVED), is being moved (ASK, TRYAGAIN), or has no primary yet (CLUSTERDOWN). Sent again once the slot map is
#: read anew. (`MovedError` is an `AskError`.)
REDIRECTS = (redis.exceptions.AskError, redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError)

#: How many times in a row a call is sent again after a redirect, the slot map read anew before each.
MOST_REDIRECTS = 5


def node_url(url: str, host: str, port: int) -> str:
    """`url` (any node's) with `host:port` in place of its own: the same scheme, credentials and options."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{where}" if userinfo else where))


#: The same answers by their first word: redis-py 5.0 gives them to a plain client as bare `ResponseError`s.
REDIRECT_WORDS = ("MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN")


def is_redirect(exc: BaseException) -> bool:
    if isinstance(exc, REDIRECTS):
        return True
    return isinstance(exc, redis.exceptions.ResponseError) and _reply(exc).startswith(REDIRECT_WORDS)


def is_moved(exc: BaseException) -> bool:
    """MOVED: the slot is served elsewhere for good (sent again at once, the map read anew)."""
    return isinstance(exc, redis.exceptions.MovedError) or _reply(exc).startswith("MOVED ")


def _reply(exc: BaseException) -> str:
    """The server's error reply, also out of the words redis-py 5.0 wraps a pipeline's in: `Command # 1 (...) of
    pipeline caused error: ('MOVED 530 127.0.0.1:7001',)`."""
    text = str(exc)
    _, found, tail = text.partition(" of pipeline caused error: ")
    return tail.lstrip("('\"") if found else text


class SlotFinder:
    """Which primary serves the slot of `key` (every key of the queue hashes to it), through redis-py's sync
    cluster client; `lost()` after a redirect or a broken connection makes the next `node()` read the map anew."""

    def __init__(self, url: str, timeout: float, password: str | None, key: str) -> None:
        self.url = url
        self.timeout = timeout
        self.password = password
        self.key = key
        self.cluster: redis.RedisCluster[bytes] | None = None
        self._stale = False

    def finder(self) -> redis.RedisCluster[bytes]:
        if self.cluster is None:
            self.cluster = conn.sync_cluster_client(self.url, self.timeout, self.password)
        return self.cluster

    def node(self) -> tuple[str, int]:
        finder = self.finder()
        if self._stale:
            finder.nodes_manager.initialize()
            self._stale = False
        node = finder.get_node_from_key(self.key)
        if node is None:
            raise redis.exceptions.ClusterDownError(f"no primary serves the slot of {self.key}")
        return str(node.host), int(node.port)

    def client(self) -> redis.Redis[bytes]:
        """A plain client of the slot's primary (the caller owns it)."""
        host, port = self.node()
        return conn.sync_client_from_url(node_url(self.url, host, port), self.timeout, self.password)

    def lost(self) -> None:
        self._stale = True

    def close(self) -> None:
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            cluster.close()


class AsyncSlotFinder:
    """`SlotFinder` on redis-py's asyncio cluster client, for one event loop; shared by a partitioned store's parts
    (one slot map read for all, not one a part: docs/performance.md, "The worker's start")."""

    def __init__(self, url: str, timeout: float, password: str | None) -> None:
        self.url = url
        self.timeout = timeout
        self.password = password
        self.cluster: redis.asyncio.RedisCluster[bytes] | None = None
        self._stale = False

    async def _finder(self) -> Any:
        """The cluster client, its slot map read (once, or anew after `lost()`)."""
        if self.cluster is None:
            self.cluster = conn.async_cluster_client(self.url, self.timeout, self.password)
        finder: Any = self.cluster
        if self._stale:
            await finder.nodes_manager.initialize()
            self._stale = False
        else:
            await finder.initialize()  # once: the slot map read under the client's lock
        return finder

    async def client(self, key: str) -> redis.asyncio.Redis[bytes]:
        """A plain client of the primary serving `key`'s slot (the caller owns it)."""
        node = _node_of((await self._finder()), key)
        return conn.async_client_from_url(node_url(self.url, node.host, node.port), self.timeout, self.password)

    async def counts(self, keys: list[str]) -> list[int]:
        """`ZCARD` of each key, wherever its slot is: one plain pipeline a primary (as the sync `SlotFinder`'s
        cluster client counts them for `manage.py check`; a worker counts on the loop it runs in, with the slot map
        its claims use). After a redirect, through redis-py's cluster pipeline, which follows it."""
        finder = await self._finder()
        groups: dict[str, tuple[Any, list[int]]] = {}
        for index, key in enumerate(keys):
            node = _node_of(finder, key)
            groups.setdefault(node.name, (node, []))[1].append(index)
        counts = [0] * len(keys)
        try:
            for node, indexes in groups.values():
                client = conn.async_client_from_url(
                    node_url(self.url, node.host, node.port), self.timeout, self.password
                )
                conn.pack_with_hiredis(client)
                try:
                    pipe = client.pipeline(transaction=False)
                    for index in indexes:
                        pipe.zcard(keys[index])
                    for index, count in zip(indexes, await pipe.execute(), strict=True):
                        counts[index] = int(count)
                finally:
                    await client.aclose()  # type: ignore[attr-defined, unused-ignore]
        except (redis.RedisError, OSError) as exc:
            if not is_redirect(exc):
                raise
            self.lost()
            pipe = (await self._finder()).pipeline(transaction=False)
            for key in keys:
                pipe.zcard(key)
            counts = [int(count) for count in await pipe.execute()]
        return counts

    def lost(self) -> None:
        self._stale = True

    async def aclose(self) -> None:
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            await cluster.aclose()  # type: ignore[attr-defined, unused-ignore]


def _node_of(finder: Any, key: str) -> Any:
    node = finder.get_node_from_key(key)
    if node is None:
        raise redis.exceptions.ClusterDownError(f"no primary serves the slot of {key}")
    return node


class SharedFinder:
    """The asyncio `AsyncSlotFinder` of the running loop, in a box the parts of one store share."""

    def __init__(self) -> None:
        self.current: tuple[asyncio.AbstractEventLoop, AsyncSlotFinder] | None = None

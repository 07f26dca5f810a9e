"""The Redis store's suppression list: looked up with one HMGET, edited by suppression.lua, listed by time."""

from __future__ import annotations

import abc
import builtins
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from ..core.clock import to_micros
from ..core.items import Suppression
from . import redis_scripts as scripts
from .base import QueueStore
from .inputs import check_suppressions
from .redis_clients import AsyncClient, SyncClient, T
from .redis_layout import Keys, load_suppression, suppression_args, text

#: Addresses a search reads per ZRANGE.
SEARCH_PAGE = 1000


class RedisSuppressionList(QueueStore):
    """The suppression list's methods of `RedisStore` (see docs/redis.md, "The keys")."""

    keys: Keys
    #: WAIT after a write (`sync_replicas`), as the store's other scripts
    wait: scripts.Wait | None

    @abc.abstractmethod
    def _do(self, work: Callable[[SyncClient[bytes]], T]) -> T: ...

    @abc.abstractmethod
    async def _ado(self, work: Callable[[AsyncClient[bytes]], Awaitable[T]]) -> T: ...

    def suppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        wanted = builtins.list(dict.fromkeys(addresses))
        if not wanted:
            return {}
        raws = self._do(lambda client: client.execute_command("HMGET", self.keys.suppressed, *wanted))
        return live_entries(wanted, raws, since)

    async def asuppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        wanted = builtins.list(dict.fromkeys(addresses))
        if not wanted:
            return {}

        async def work(client: AsyncClient[bytes]) -> Any:
            return await client.execute_command("HMGET", self.keys.suppressed, *wanted)  # type: ignore[no-untyped-call]

        return live_entries(wanted, await self._ado(work), since)

    def _addresses(self, since: datetime, first: int, count: int) -> builtins.list[str]:
        """Addresses at ranks `first` on of those listed at or after `since`, the newest first."""
        top = str(-to_micros(since))
        found = self._do(
            lambda client: client.execute_command(
                "ZRANGE", self.keys.suppressed_by_time, "-inf", top, "BYSCORE", "LIMIT", first, count
            )
        )
        return [text(raw) for raw in found]

    def _matching(self, since: datetime, search: str) -> Iterator[str]:
        """Every address listed at or after `since` containing `search` (any case), the newest first: a scan,
        as Redis indexes no part of an address."""
        needle, first = search.lower(), 0
        while page := self._addresses(since, first, SEARCH_PAGE):
            yield from (address for address in page if needle in address.lower())
            first += len(page)

    def list_suppressed(
        self, *, since: datetime, search: str | None = None, offset: int = 0, limit: int = 100
    ) -> builtins.list[Suppression]:
        offset, limit = max(offset, 0), max(limit, 0)
        if not limit:
            return []
        if search:
            matching = self._matching(since, search)
            addresses = [a for i, a in zip(range(offset + limit), matching, strict=False) if i >= offset]
        else:
            addresses = self._addresses(since, offset, limit)
        if not addresses:
            return []
        raws = self._do(lambda client: client.execute_command("HMGET", self.keys.suppressed, *addresses))
        return builtins.list(live_entries(addresses, raws, since).values())  # one removed meanwhile is left out

    def count_suppressed(self, *, since: datetime, search: str | None = None) -> int:
        if search:
            return sum(1 for _ in self._matching(since, search))
        top = str(-to_micros(since))
        return int(self._do(lambda client: client.execute_command("ZCOUNT", self.keys.suppressed_by_time, "-inf", top)))

    def _edit(self, args: Sequence[scripts.Arg]) -> int:
        keys = [self.keys.suppressed, self.keys.suppressed_by_time]
        return int(self._do(lambda client: scripts.SUPPRESSION.run(client, keys, args, self.wait)))

    def suppress(self, entries: Sequence[Suppression]) -> None:
        check_suppressions(entries)
        if entries:
            self._edit(["add", *suppression_args(entries)])

    def unsuppress(self, addresses: Sequence[str]) -> int:
        return self._edit(["remove", *addresses]) if addresses else 0

    def prune_suppressed(self, *, before: datetime) -> int:
        return self._edit(["prune", str(-to_micros(before))])


def live_entries(addresses: Sequence[str], raws: Sequence[Any], since: datetime) -> dict[str, Suppression]:
    """The entries HMGET found for `addresses`, in their order, listed at or after `since`."""
    found = (load_suppression(a, raw) for a, raw in zip(addresses, raws, strict=True) if raw is not None)
    return {entry.address: entry for entry in found if entry.since >= since}

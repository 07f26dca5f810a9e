"""The Redis store's reads for the admin and the commands: list, count and walk, filtered from the indexes the
scripts keep (select.lua, docs/redis.md "The keys"); which items are present; the queues' names."""

from __future__ import annotations

import abc
import builtins
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from ..core.clock import to_micros
from ..core.items import NEVER, ItemOrder, ItemQuery, ItemState, QueueItem, matches
from ..core.search import terms
from ..core.status import QueueSummary
from . import redis_scripts as scripts
from .base import OVERVIEW_QUEUES, QueueStore
from .inputs import check_order
from .redis_clients import SyncClient
from .redis_layout import Keys, fields, text, to_item

_R = TypeVar("_R")

#: Items `list` and `count` read per script call when a search or an id prefix is tested on them.
SCAN_PAGE = 500
#: The score of the items kept failed (select.lua's ARGV[11]).
_NEVER = str(to_micros(NEVER))
#: The order of overview.lua's counts in each scope.
_STATE_ORDER = (ItemState.DUE, ItemState.SCHEDULED, ItemState.DEFERRED, ItemState.LEASED, ItemState.FAILED)


class RedisReading(QueueStore):
    """The reading methods of `RedisStore`: an unfiltered page by rank (page.lua), the state, queue and domain
    filters from their sorted sets (select.lua) — a search's `@domain` term as the domain filter —, an id prefix
    from `ids`, a search's other terms tested on what those give."""

    keys: Keys
    key_prefix: str

    @abc.abstractmethod
    def _do(self, work: Callable[[SyncClient[bytes]], _R]) -> _R: ...

    def present(self, item_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        ids = builtins.list(dict.fromkeys(item_ids))

        def work(client: SyncClient[bytes]) -> builtins.list[Any]:
            pipe = client.pipeline(transaction=False)
            for item_id in ids:
                pipe.execute_command("EXISTS", self.keys.item(item_id))  # type: ignore[no-untyped-call]
            return pipe.execute()

        return {item_id for item_id, held in zip(ids, self._do(work) if ids else [], strict=True) if held}

    def _page(self, first: int, count: int, *, reverse: bool = False) -> tuple[int, builtins.list[QueueItem]]:
        """Items at ranks `first` to `first + count - 1` of the list order (from its end when `reverse`),
        and how many there are."""
        last = str(first + count - 1)
        args: builtins.list[scripts.Arg] = [self.keys.prefix, str(first), last, "1" if reverse else ""]
        total, page = self._do(lambda client: scripts.PAGE.run(client, [self.keys.items], args))
        return int(total), [to_item(raw) for raw in page]

    def _select(
        self, query: ItemQuery, *, offset: int, limit: int, reverse: bool = False, count: bool = False, start: str = ""
    ) -> Any:
        """select.lua: the items passing the query's state, queue and domain filters, from their indexes."""
        if query.state is not None and query.now is None:
            raise ValueError("a state filter needs `now`")
        args: builtins.list[scripts.Arg] = [
            self.keys.prefix,
            str(to_micros(query.now)) if query.now is not None else "0",
            query.state.value if query.state is not None else "",
            query.queue or "",
            query.domain.lower() if query.domain is not None else "",
            str(offset),
            str(limit),
            "1" if reverse else "",
            "count" if count else "list",
            start,
            _NEVER,
        ]
        return self._do(lambda client: scripts.SELECT.run(client, [self.keys.items, self.keys.leases], args))

    @staticmethod
    def _by_domain(query: ItemQuery | None) -> ItemQuery | None:
        """A search's `@domain` term as the domain filter (its sorted set, `domain:<d>`), the other terms left to be
        tested on that set's items: `@rare-domain.example` reads its 20 items, not every item."""
        if query is None or not query.search or query.domain is not None or query.id_prefix is not None:
            return query
        found = terms(query.search)
        for term in found:
            if term.domain is not None:
                rest = " ".join(other.text for other in found if other != term)
                return replace(query, domain=term.domain, search=rest or None)
        return query

    @staticmethod
    def _indexed(query: ItemQuery) -> bool:
        """Every filter of the query is an index's: no search, no id prefix."""
        return not query.search and query.id_prefix is None

    def _with_id_prefix(self, id_prefix: str) -> builtins.list[QueueItem]:
        """The items whose id starts with the hex digits, in list order: a range of `ids`, then their hashes."""
        low, high = b"[" + id_prefix.encode(), b"[" + id_prefix.encode() + b"\xff"

        def work(client: SyncClient[bytes]) -> builtins.list[Any]:
            found = client.execute_command("ZRANGEBYLEX", self.keys.ids, low, high)
            pipe = client.pipeline(transaction=False)
            for hex_id in found:
                pipe.execute_command("HGETALL", self.keys.item(uuid.UUID(hex=text(hex_id))))  # type: ignore[no-untyped-call]
            return pipe.execute() if found else []

        raws = [raw for raw in self._do(work) if raw]
        raws.sort(key=lambda raw: (int(fields(raw)["next"]), fields(raw)["member"]))
        return [to_item(raw) for raw in raws]

    def list(
        self,
        query: ItemQuery | None = None,
        *,
        offset: int = 0,
        limit: int = 100,
        order: ItemOrder = ItemOrder.NEXT_ATTEMPT,
    ) -> builtins.list[QueueItem]:
        check_order(self, order)
        if limit <= 0:
            return []
        query = self._by_domain(query)
        offset = max(offset, 0)
        reverse = order is ItemOrder.NEXT_ATTEMPT_DESC
        if query is None or query.unfiltered:
            return self._page(offset, limit, reverse=reverse)[1]
        if self._indexed(query):
            return [to_item(raw) for raw in self._select(query, offset=offset, limit=limit, reverse=reverse)[1]]
        if query.id_prefix is not None:
            listed = [item for item in self._with_id_prefix(query.id_prefix) if matches(item, query)]
            return (listed[::-1] if reverse else listed)[offset : offset + limit]
        found: builtins.list[QueueItem] = []
        for page in self._candidates(query, reverse=reverse):  # the items before `offset` are counted, not kept
            for item in page:
                if not matches(item, query):
                    continue
                if offset:
                    offset -= 1
                    continue
                found.append(item)
                if len(found) == limit:
                    return found
        return found

    def count(self, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        query = self._by_domain(query)
        if query is None or query.unfiltered:
            total = int(self._do(lambda client: client.execute_command("ZCARD", self.keys.items)))
            return total if limit is None else min(total, limit)
        if self._indexed(query):
            return int(self._select(query, offset=0, limit=limit if limit is not None else 2**62, count=True))
        if query.id_prefix is not None:
            passing = sum(1 for item in self._with_id_prefix(query.id_prefix) if matches(item, query))
            return passing if limit is None else min(passing, limit)
        found = 0
        for page in self._candidates(query):  # stops once `limit` items passed
            for item in page:
                if matches(item, query):
                    found += 1
                    if found == limit:
                        return found
        return found

    def iter_items(self, query: ItemQuery | None = None, *, batch: int = 500) -> Iterator[QueueItem]:
        """One pass over the list order, filtered here: `list` with a query scans from the first rank each call."""
        query = self._by_domain(query)
        if query is None or query.unfiltered:
            for page in self._pages(batch):
                yield from page
            return
        if query.id_prefix is not None:
            yield from (item for item in self._with_id_prefix(query.id_prefix) if matches(item, query))
            return
        for page in self._candidates(query, batch):
            yield from (item for item in page if matches(item, query))

    def queues(self, *, limit: int = OVERVIEW_QUEUES) -> builtins.list[str]:
        """The names ever added (`queue_names`) whose queue set holds items."""

        def work(client: SyncClient[bytes]) -> builtins.list[str]:
            names = sorted(text(name) for name in client.execute_command("SMEMBERS", self.keys.queue_names))
            pipe = client.pipeline(transaction=False)
            for name in names:
                pipe.execute_command("EXISTS", self.keys.queue(name))  # type: ignore[no-untyped-call]
            return [name for name, held in zip(names, pipe.execute(), strict=True) if held][:limit]

        return self._do(work)

    def _state_counts(self, now: datetime, names: Sequence[str]) -> builtins.list[dict[ItemState, int]]:
        """overview.lua: every state's count of the whole queue, then of each queue named, in one step (the
        leases read once, every other count `ZCARD`/`ZCOUNT` of the sets the scripts keep)."""
        args: builtins.list[scripts.Arg] = [self.keys.prefix, str(to_micros(now)), _NEVER, *names]
        keys = [self.keys.items, self.keys.leases, self.keys.tried]
        scopes = self._do(lambda client: scripts.OVERVIEW.run(client, keys, args))
        return [{state: int(n) for state, n in zip(_STATE_ORDER, counts, strict=True)} for counts in scopes]

    def count_by_state(self, query: ItemQuery, *, limit: int) -> dict[ItemState, int]:
        """One overview.lua call for the whole queue or one queue (a page of the admin's list: 5 totals); the
        default's count per state where a domain, a search or an id prefix narrows it."""
        if query.domain is not None or query.search or query.id_prefix is not None:
            return super().count_by_state(query, limit=limit)  # each a `count`: a `@domain` term its set's
        if query.now is None:
            raise ValueError("a state count needs `now`")
        counts = self._state_counts(query.now, [] if query.queue is None else [query.queue])[-1]
        return {state: min(n, limit) for state, n in counts.items()}

    def _overview_counts(self, summary: QueueSummary, *, now: datetime, bound: int) -> None:
        """overview.lua: every state's count, of the queue and of each queue, in one step (the leases read once)."""
        names = self.queues()
        scopes = self._state_counts(now, names)

        def bounded(counts: dict[ItemState, int]) -> Counter[str]:
            return Counter({state.value: min(n, bound + 1) for state, n in counts.items()})

        summary.by_state = bounded(scopes[0])
        summary.total = min(sum(scopes[0].values()), bound + 1)
        summary.by_queue = {name: bounded(counts) for name, counts in zip(names, scopes[1:], strict=True)}

    def _candidates(
        self, query: ItemQuery, size: int | None = None, *, reverse: bool = False
    ) -> Iterator[builtins.list[QueueItem]]:
        """Pages of the items passing the query's indexed filters, in list order, for a search or an id prefix
        to be tested on: every item when it has no such filter."""
        if not (query.state or query.queue is not None or query.domain is not None):
            yield from self._pages(size, reverse=reverse)
            return
        size = size or SCAN_PAGE
        start = ""
        while True:
            rank, page = self._select(query, offset=0, limit=size, reverse=reverse, start=start)
            yield [to_item(raw) for raw in page]
            if int(rank) < 0 or len(page) < size:
                return
            start = str(int(rank))

    def _pages(self, size: int | None = None, *, reverse: bool = False) -> Iterator[builtins.list[QueueItem]]:
        """Every item, `size` (`SCAN_PAGE`) at a time, in list order."""
        size = size or SCAN_PAGE
        first = 0
        while True:
            total, page = self._page(first, size, reverse=reverse)
            yield page
            first += size
            if first >= total:
                return

"""The Redis store's reads for the admin and the commands: list, count and walk, filtered from the indexes the
scripts keep (select.lua, docs/redis.md "The keys"); which items are present; the queues' names."""

from __future__ import annotations

import abc
import builtins
import itertools
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from ..core.clock import to_micros
from ..core.items import NEVER, ItemOrder, ItemQuery, ItemState, QueueItem, matches
from ..core.search import Term, terms
from ..core.status import QueueSummary
from . import redis_scripts as scripts
from .base import OVERVIEW_QUEUES, QueueStore
from .inputs import check_order
from .redis_claiming import ROUNDS
from .redis_clients import SyncClient
from .redis_layout import SEARCH_LAYOUT, Keys, addresses, fields, text, to_item, words

_R = TypeVar("_R")

#: Items `list` and `count` read per script call when a search or an id prefix is tested on them.
SCAN_PAGE = 500
#: A search term whose index lists more items than this (a common word, a short address start) is tested on the
#: items read in the list's order instead: matches that common fill a page early.
SEARCH_BOUND = 20_000
#: The score of the items kept failed (select.lua's ARGV[11]).
_NEVER = str(to_micros(NEVER))
#: The order of overview.lua's counts in each scope.
_STATE_ORDER = (ItemState.DUE, ItemState.SCHEDULED, ItemState.DEFERRED, ItemState.LEASED, ItemState.FAILED)


class RedisReading(QueueStore):
    """The reading methods of `RedisStore`: an unfiltered page by rank, the state, queue and domain
    filters from their sorted sets (select.lua) — a search's `@domain` term as the domain filter —, an id prefix
    from `ids`, a search's other terms tested on what those give."""

    keys: Keys
    key_prefix: str
    #: `<prefix>search_layout` was seen at `SEARCH_LAYOUT`: `words` and `addrs` hold every item (docs/admin.md)
    _search_indexed: bool = False

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
        and how many there are: the ranks read, then their items (a page read item by item is no script, whose
        keys would be the items found)."""
        order = ("REV",) if reverse else ()

        def work(client: SyncClient[bytes]) -> tuple[int, builtins.list[Any]]:
            ranks = client.pipeline(transaction=False)
            ranks.execute_command("ZCARD", self.keys.items)  # type: ignore[no-untyped-call]
            ranks.execute_command("ZRANGE", self.keys.items, first, first + count - 1, *order)  # type: ignore[no-untyped-call]
            total, members = ranks.execute()
            if not members:
                return int(total), []
            hashes = client.pipeline(transaction=False)
            for member in members:
                hashes.execute_command("HGETALL", self.keys.item(text(member)[17:]))  # type: ignore[no-untyped-call]
            return int(total), hashes.execute()

        total, raws = self._do(work)
        return total, [to_item(raw) for raw in raws if raw]

    def _select(
        self, query: ItemQuery, *, offset: int, limit: int, reverse: bool = False, count: bool = False, start: str = ""
    ) -> Any:
        """select.lua: the items passing the query's state, queue and domain filters, from their indexes. It reads the
        items whose keys it is given: the first call none, then those it asked for (`_Selecting`)."""
        if query.state is not None and query.now is None:
            raise ValueError("a state filter needs `now`")
        scope = [self.keys.items, self.keys.leases, self.keys.tried]
        if query.domain is not None:
            scope += [self.keys.domain(query.domain.lower()), self.keys.tried_domain(query.domain.lower())]
        elif query.queue is not None:
            scope += [self.keys.queue(query.queue), self.keys.tried_queue(query.queue)]
        walk = _Selecting(offset, limit, start)
        while True:
            args: builtins.list[scripts.Arg] = [
                self.keys.prefix,
                str(to_micros(query.now)) if query.now is not None else "0",
                query.state.value if query.state is not None else "",
                query.queue or "",
                query.domain.lower() if query.domain is not None else "",
                str(walk.offset),
                str(walk.limit),
                "1" if reverse else "",
                "count" if count else "list",
                walk.start,
                _NEVER,
                walk.member,
                "1" if walk.last_round else "",
            ]
            keys = [*scope, *(self.keys.item(text(member)[17:]) for member in walk.asked)]
            reply = self._do(_script(scripts.SELECT, keys, args))
            if not _asks(reply):
                return walk.ended(reply, count=count)
            walk.went_on(reply)

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

    def _search_ready(self) -> bool:
        """Whether the search's indexes hold every item (`<prefix>search_layout`, asked until it says so)."""
        if not self._search_indexed:
            found = self._do(lambda client: client.execute_command("GET", self.keys.search_layout))
            self._search_indexed = found is not None and text(found) == SEARCH_LAYOUT
        return self._search_indexed

    def _term_members(self, query: ItemQuery) -> builtins.list[bytes] | None:
        """The members of the items the search's address and word terms find in their indexes (each term's, up to
        `SEARCH_BOUND`, intersected), in the list's order; None when no term's index serves (a `@domain` term is
        the scope: `_by_domain`), or the indexes are not built yet: the items are then read and tested."""
        if not query.search or query.id_prefix is not None or not self._search_ready():
            return None
        found: dict[bytes, float] | None = None
        for term in terms(query.search):
            if term.domain is None and (matched := self._term_scores(term)) is not None:
                found = matched if found is None else {m: s for m, s in found.items() if m in matched}
        if found is None:
            return None
        if query.state is not None and found:
            found = self._in_state(found, query.state, query.now)
        return [member for member, _ in sorted(found.items(), key=lambda entry: (entry[1], entry[0]))]

    def _in_state(self, found: dict[bytes, float], state: ItemState, now: datetime | None) -> dict[bytes, float]:
        """Of the search's items, those a state filter may pass, from their next attempts and one `ZMSCORE` of
        `leases` or `tried` (a word in every subject and the items deferred: not each item read); `matches` decides."""
        if now is None:
            raise ValueError("a state filter needs `now`")
        now_us, never = to_micros(now), float(_NEVER)
        if state is ItemState.FAILED:
            return {m: s for m, s in found.items() if s >= never}
        members = builtins.list(found)
        key = self.keys.leases if state is ItemState.LEASED else self.keys.tried
        scores = self._do(lambda client: client.execute_command("ZMSCORE", key, *members))
        held = {m for m, score in zip(members, scores, strict=True) if score is not None}
        if state is ItemState.LEASED:
            return {m: s for m, s in found.items() if m in held}
        if state is ItemState.DEFERRED:
            return {m: s for m, s in found.items() if m in held and s < never}
        if state is ItemState.DUE:
            return {m: s for m, s in found.items() if m not in held and s <= now_us}
        return {m: s for m, s in found.items() if m not in held and now_us < s < never}

    def _term_scores(self, term: Term) -> dict[bytes, float] | None:
        """The members (and next attempts) of the items a term finds: recipients' addresses starting with it
        (a `ZRANGEBYLEX` of `addrs`), and for a word the items whose subject has it (one of `words`: its entries
        `<word>\\0<member>`), scored from `items`; None past the bound, which each range's entry after the bound
        tells first (a common word's 20,000 entries are not sent to be counted)."""
        low = b"[" + term.text.encode()
        ranges = [(self.keys.addrs, low, low + b"\xff")]
        if term.word:
            ranges.append((self.keys.words, low + b"\0", low + b"\0\xff"))

        def read(first: int, count: int) -> Callable[[SyncClient[bytes]], builtins.list[Any]]:
            def work(client: SyncClient[bytes]) -> builtins.list[Any]:
                pipe = client.pipeline(transaction=False)
                for key, start, end in ranges:
                    pipe.execute_command("ZRANGEBYLEX", key, start, end, "LIMIT", first, count)  # type: ignore[no-untyped-call]
                return pipe.execute()

            return work

        if any(self._do(read(SEARCH_BOUND, 1))):
            return None
        replies = self._do(read(0, SEARCH_BOUND + 1))
        if any(len(listed) > SEARCH_BOUND for listed in replies):
            return None
        members = builtins.list(dict.fromkeys(entry.partition(b"\0")[2] for listed in replies for entry in listed))
        if not members:
            return {}
        scores = self._do(lambda client: client.execute_command("ZMSCORE", self.keys.items, *members))
        return {m: float(s) for m, s in zip(members, scores, strict=True) if s is not None}

    def _walk(self, members: Sequence[bytes], query: ItemQuery, *, need: int | None) -> Iterator[QueueItem]:
        """The items of `members`, in that order, that pass `query`: read a batch of hashes at a time, the first
        batches no bigger than `need` (the page's end) asks."""
        start = 0
        while start < len(members):
            size = SCAN_PAGE if need is None else max(min(need, SCAN_PAGE), 10)
            batch = members[start : start + size]
            start += size

            def work(client: SyncClient[bytes], batch: Sequence[bytes] = batch) -> builtins.list[Any]:
                pipe = client.pipeline(transaction=False)
                for member in batch:
                    pipe.execute_command("HGETALL", self.keys.item(uuid.UUID(text(member)[17:])))  # type: ignore[no-untyped-call]
                return pipe.execute()

            for raw in self._do(work):
                if raw and matches(item := to_item(raw), query):
                    yield item
                    if need is not None:
                        need -= 1

    def _ids_after(self, after: bytes, batch: int) -> Callable[[SyncClient[bytes]], Any]:
        """A read of the next `batch` ids of `ids` after `after` (a ZRANGEBYLEX bound)."""
        return lambda client: client.execute_command("ZRANGEBYLEX", self.keys.ids, after, b"+", "LIMIT", 0, batch)

    def build_search_index(self, *, batch: int = 500) -> int:
        """Put the items queued before the search had its present indexes into them (`words`, `addrs`;
        reindex.lua, which deletes the `word:<w>` sets of the layout before), then mark them whole
        (`<prefix>search_layout`, and the mark before deleted); until then a search reads and tests the items.
        Walks `ids` (items that move keep their place there; items added meanwhile are indexed by add.lua).
        Returns how many items it indexed. `manage.py mailqueue_search_index` runs it."""
        done, after = 0, b"-"
        while True:
            found: builtins.list[bytes] = self._do(self._ids_after(after, batch))
            if not found:
                break
            after = b"(" + found[-1]

            def work(client: SyncClient[bytes], found: Sequence[bytes] = found) -> int:
                pipe = client.pipeline(transaction=False)
                for hex_id in found:
                    pipe.execute_command(
                        "HMGET", self.keys.item(uuid.UUID(hex=text(hex_id))), "subject", "rcpts", "words"
                    )  # type: ignore[no-untyped-call]
                args: builtins.list[scripts.Arg] = [self.keys.prefix, "0"]
                keys = [self.keys.items, self.keys.words, self.keys.addrs]
                for hex_id, (subject, rcpts, held) in zip(found, pipe.execute(), strict=True):
                    if rcpts is None:
                        continue  # gone meanwhile
                    item_id = uuid.UUID(hex=text(hex_id))
                    listed = (entry[0] for entry in json.loads(rcpts))
                    old = text(held or b"")
                    args += [str(item_id), words(text(subject or b"")), addresses(listed), old]
                    keys += [self.keys.item(item_id), *(self.keys.word(word) for word in old.split())]
                args[1] = str((len(args) - 2) // 4)
                return int(scripts.REINDEX.run(client, builtins.list(dict.fromkeys(keys)), args))

            done += self._do(work)
        self._do(lambda client: client.execute_command("SET", self.keys.search_layout, SEARCH_LAYOUT))
        self._do(lambda client: client.execute_command("DEL", self.keys.search_index))
        self._search_indexed = True
        return done

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
        members = self._term_members(query)
        if members is not None:
            walk = self._walk(members[::-1] if reverse else members, query, need=offset + limit)
            return builtins.list(itertools.islice(walk, offset, offset + limit))
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
        members = self._term_members(query)
        if members is not None:
            return sum(1 for _ in itertools.islice(self._walk(members, query, need=limit), limit))
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
        members = self._term_members(query)
        if members is not None:
            yield from self._walk(members, query, need=None)
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
        leases read once, every other count `ZCARD`/`ZCOUNT` of the sets the scripts keep). The script reads the
        leases' items whose keys it is given: the first call none, then those it asked for, at most `ROUNDS`."""
        keys = [self.keys.items, self.keys.leases, self.keys.tried]
        keys += [key for name in names for key in (self.keys.queue(name), self.keys.tried_queue(name))]
        for round_ in range(ROUNDS):
            args: builtins.list[scripts.Arg] = [
                self.keys.prefix,
                str(to_micros(now)),
                _NEVER,
                "1" if round_ == ROUNDS - 1 else "",
                *names,
            ]
            scopes = self._do(_script(scripts.OVERVIEW, keys, args))
            if not _asks(scopes):
                break
            keys = [*keys, *(self.keys.item(text(member)[17:]) for member in scopes[1:])]
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


def _script(script: scripts.LuaScript, keys: Sequence[str], args: Sequence[scripts.Arg]) -> Callable[[Any], Any]:
    return lambda client: script.run(client, keys, args)


def _asks(reply: Any) -> bool:
    """Whether a reply of select.lua or overview.lua is `{'again', …}`: it met items whose keys were not declared."""
    return isinstance(reply, list) and bool(reply) and reply[0] in (b"again", "again")


class _Selecting:
    """Where select.lua's calls are: what is left to pass over and to find, where to go on from, the items found
    so far, and the members whose items the next call declares (those the last one asked for)."""

    def __init__(self, offset: int, limit: int, start: str) -> None:
        self.offset, self.limit, self.start = offset, limit, start
        self.member: str | bytes = ""
        self.asked: builtins.list[bytes] = []
        self.found: builtins.list[Any] = []
        self.counted = 0
        #: calls in a row that asked again at the same place (each an item that came there since the last)
        self.stuck = 0

    @property
    def last_round(self) -> bool:
        return self.stuck >= ROUNDS - 1

    def went_on(self, reply: Any) -> None:
        """After `{'again', rank, member, passed, found, hashes, asked}`: from there, the asked declared."""
        _, rank, member, passed, found, hashes, asked = reply
        progress = int(passed) + int(found)
        if int(rank) == -2:  # a lease not declared: from the start again, every lease asked for declared
            self.asked = [*self.asked, *asked]
            self.stuck += 1
            return
        self.stuck = 0 if progress or member != self.member else self.stuck + 1
        self.offset -= int(passed)
        self.limit -= int(found)
        self.counted += int(found)
        self.found += hashes
        self.start, self.member, self.asked = str(int(rank)), member, builtins.list(asked)

    def ended(self, reply: Any, *, count: bool) -> Any:
        if count:
            return self.counted + int(reply)
        return [reply[0], self.found + builtins.list(reply[1])]

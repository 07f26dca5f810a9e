"""`PartitionedRedisStore`: one queue split into hash-tagged partitions on a Redis Cluster, a `RedisStore` each;
adds spread over them, claims take from them in turn, reads merge them (docs/redis.md, "Partitions")."""

from __future__ import annotations

import asyncio
import builtins
import functools
import heapq
import itertools
import logging
import random
import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..core.errors import Code, QueueError
from ..core.items import (
    CompleteRequest,
    Completion,
    ItemOrder,
    ItemQuery,
    ItemState,
    NewItem,
    QueueItem,
    Suppression,
)
from ..core.status import QueueSummary
from .base import OVERVIEW_QUEUES, AlsoWrite
from .claimed_batch import ClaimedBatch, acompose
from .inputs import check_aware, check_completion, check_order, check_owner, check_suppressions
from .redis import RedisStore
from .redis_clients import AsyncClient
from .redis_quota import atransfer, share_spec, transfer

logger = logging.getLogger("django_mailqueue.stores.redis")

#: The oldest time a suppression entry may have (for reading every entry of some addresses).
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def listed_order(item: QueueItem) -> tuple[datetime, datetime, str]:
    """How the partitions' items are merged: by next attempt, then the oldest (each partition numbers its own)."""
    return item.next_attempt, item.created, str(item.id)


class PartitionedRedisStore(RedisStore):
    """`partitions` parts of one queue (`OPTIONS["partitions"]` > 1 with `cluster`), each under a hash tag of its
    own and so in a slot of its own: `parts[p]` is a `RedisStore` on partition p's keys. An add goes whole to one
    part (the parts in turn); a claim takes from the parts in turn, starting at the next one each call; the
    reads merge the parts. The store itself is partition 0 for what is not an item's: traffic shaping, the wake-up
    subscription (to every part's channel), the suppression entries put by hand (`suppress`)."""

    #: the add order holds within a partition; claims take from the partitions in turn, `list` breaks ties by id
    in_add_order = False
    #: the items whose partition the store remembers (found by asking every part when forgotten)
    REMEMBERED = 100_000

    def __init__(
        self, options: Mapping[str, Any] | None = None, *, max_items: int | None = None, partition: int | None = None
    ) -> None:
        super().__init__(options, max_items=max_items, partition=0)
        count = int(self.options["partitions"])
        self.parts = [RedisStore(self.options, max_items=max_items, partition=p) for p in range(count)]
        for part in self.parts:
            part.on_commit = False  # the store waits for the commit itself: an add may move shares first
            part._clients.share_finder(self._clients)
        self._clients.channels = [part.keys.wakeup for part in self.parts]
        self._where: dict[uuid.UUID, int] = {}
        self._where_lock = threading.Lock()
        start = random.randrange(count)
        self._adds = itertools.count(start)
        self._claims = itertools.count(start)

    def __repr__(self) -> str:
        return f"<RedisStore {self.place} prefix={self.key_prefix!r} partitions={len(self.parts)}>"

    # --- which partition holds an item ---------------------------------------------------

    def _note(self, partition: int, items: Iterable[QueueItem | uuid.UUID]) -> None:
        with self._where_lock:
            for item in items:
                if len(self._where) >= self.REMEMBERED:
                    self._where.clear()
                self._where[item if isinstance(item, uuid.UUID) else item.id] = partition

    def _known(self, item_id: uuid.UUID) -> RedisStore | None:
        found = self._where.get(item_id)
        return None if found is None else self.parts[found]

    def part_of(self, item_id: uuid.UUID) -> RedisStore | None:
        """The part that holds the item (remembered, else asked of each part); None when none does."""
        known = self._known(item_id)
        if known is not None:
            return known
        for part in self.parts:
            if part.present([item_id]):
                self._note(part.partition, [item_id])
                return part
        return None

    async def _apart_of(self, item_id: uuid.UUID) -> RedisStore | None:
        known = self._known(item_id)
        if known is not None:
            return known
        for part in self.parts:
            if await _aread(part, "EXISTS", part.keys.item(item_id)):
                self._note(part.partition, [item_id])
                return part
        return None

    def _by_part(self, item_ids: Sequence[uuid.UUID]) -> dict[int, builtins.list[int]]:
        """The indexes of `item_ids` by the partition holding each; those held by none are left out."""
        groups: dict[int, builtins.list[int]] = {}
        for index, item_id in enumerate(item_ids):
            part = self.part_of(item_id)
            if part is not None:
                groups.setdefault(part.partition, []).append(index)
        return groups

    async def _aby_part(self, item_ids: Sequence[uuid.UUID]) -> dict[int, builtins.list[int]]:
        groups: dict[int, builtins.list[int]] = {}
        where = self._where
        for index, item_id in enumerate(item_ids):
            partition = where.get(item_id)  # remembered: no coroutine an item (each of the worker's batches)
            if partition is None:
                part = await self._apart_of(item_id)
                if part is None:
                    continue
                partition = part.partition
            groups.setdefault(partition, []).append(index)
        return groups

    # --- max_items: each partition's share of it (redis_quota.py) ----------------------------------------

    def _share(self, partition: int) -> str | None:
        """What bounds an add or DSNs in `partition`: its share of `max_items` (`M:N:p`), or None."""
        return None if self.max_items is None else share_spec(self.max_items, len(self.parts), partition)

    def _full(self, n: int) -> QueueError:
        return QueueError(Code.FULL, f"no room for {n} more items in any partition; MAX_ITEMS is {self.max_items}")

    # --- adding -------------------------------------------------------------------------------

    def _next_part(self) -> RedisStore:
        return self.parts[next(self._adds) % len(self.parts)]

    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        part = self._next_part()
        if self.on_commit:
            from django.db import transaction

            if transaction.get_connection().in_atomic_block:
                added = part._plan_add(items, now, None).added
                if added:
                    transaction.on_commit(functools.partial(self._add_committed_to, part, items, now), robust=True)
                return builtins.list(added)
        return self._add_to(part, items, now)

    def _add_to(self, part: RedisStore, items: Sequence[NewItem], now: datetime) -> builtins.list[QueueItem]:
        """The add in `part`; when its share is short, shares moved from the others and the add tried again."""
        while True:
            try:
                added = part._add_many(items, now, self._share(part.partition))
                break
            except QueueError as exc:
                if exc.code is not Code.FULL or self.max_items is None:
                    raise
                if not transfer(self.parts, part.partition, len(items), self.max_items):
                    raise self._full(len(items)) from None
        self._note(part.partition, added)
        return added

    def _add_committed_to(self, part: RedisStore, items: Sequence[NewItem], now: datetime) -> None:
        try:
            self._add_to(part, items, now)
        except QueueError as exc:
            logger.error(
                "%d item(s) were not queued after their transaction committed (%s): %s",
                len(items),
                ", ".join(str(item.id) for item in items),
                exc,
            )

    async def aadd_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        part = self._next_part()
        while True:
            try:
                added = await part._aadd_many(items, now, self._share(part.partition))
                break
            except QueueError as exc:
                if exc.code is not Code.FULL or self.max_items is None:
                    raise
                if not await atransfer(self.parts, part.partition, len(items), self.max_items):
                    raise self._full(len(items)) from None
        self._note(part.partition, added)
        return added

    # --- claiming, renewing -----------------------------------------------------------------------

    def _claim_plan(self, owner: str, queues: Sequence[str] | None, limit: int) -> tuple[list[Any], list[RedisStore]]:
        """The lanes (each queue in its order, or all merged) and the parts in the order this claim asks them."""
        check_owner(owner)
        if limit < 1 or (queues is not None and not queues):
            return [], []
        start = next(self._claims) % len(self.parts)
        lanes: builtins.list[Any] = [[queue] for queue in dict.fromkeys(queues)] if queues is not None else [None]
        return lanes, [*self.parts[start:], *self.parts[:start]]

    def claim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        lanes, order = self._claim_plan(owner, queues, limit)
        claimed: builtins.list[QueueItem] = []
        for lane in lanes:
            taken: builtins.list[QueueItem] = []
            for part in order:
                want = limit - len(claimed) - len(taken)
                if want <= 0:
                    break
                got = part.claim(owner=owner, now=now, lease_expires=lease_expires, queues=lane, limit=want)
                self._note(part.partition, got)
                taken += got
            claimed += sorted(taken, key=listed_order)
        return claimed

    async def aclaim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        lanes, order = self._claim_plan(owner, queues, limit)
        claimed: builtins.list[QueueItem] = []
        for lane in lanes:
            taken: builtins.list[QueueItem] = []
            for part in order:
                want = limit - len(claimed) - len(taken)
                if want <= 0:
                    break
                got = await part.aclaim(owner=owner, now=now, lease_expires=lease_expires, queues=lane, limit=want)
                self._note(part.partition, got)
                taken += got
            claimed += sorted(taken, key=listed_order)
        return claimed

    async def aclaim_batch(
        self,
        *,
        owner: str,
        now: datetime,
        lease_expires: datetime,
        queues: Sequence[str] | None = None,
        limit: int = 1,
        suppressed_since: datetime | None = None,
        read_up_to: int = 0,
    ) -> ClaimedBatch:
        """The claim, the look-up and the read one after the other (`claimed_batch.acompose`), not a part's one
        pipeline: the suppression list is every part's (a look-up asks them all), each part its own slot."""
        return await acompose(
            self, owner=owner, now=now, lease_expires=lease_expires, queues=queues, limit=limit,
            suppressed_since=suppressed_since, read_up_to=read_up_to,
        )  # fmt: skip

    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> builtins.list[uuid.UUID]:
        check_owner(owner)
        held: set[uuid.UUID] = set()
        for partition, indexes in self._by_part(ids).items():
            group = [ids[i] for i in indexes]
            held.update(self.parts[partition].renew(group, owner=owner, lease_expires=lease_expires))
        return [item_id for item_id in ids if item_id in held]

    async def arenew(
        self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime
    ) -> builtins.list[uuid.UUID]:
        check_owner(owner)
        held: set[uuid.UUID] = set()
        for partition, indexes in (await self._aby_part(ids)).items():
            group = [ids[i] for i in indexes]
            held.update(await self.parts[partition].arenew(group, owner=owner, lease_expires=lease_expires))
        return [item_id for item_id in ids if item_id in held]

    # --- completing, rescheduling, cancelling ---------------------------------------------------------

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        check_owner(owner)
        check_completion(completion)
        part = self.part_of(item_id)
        if part is None:
            return None
        while True:
            try:
                return part._complete(item_id, owner, revision, completion, self._dsn_bound(part, completion))
            except QueueError as exc:
                if not self._may_transfer(exc, completion):
                    raise
                if not transfer(self.parts, part.partition, len(completion.dsns), self.max_items or 0):
                    raise

    def _dsn_bound(self, part: RedisStore, completion: Completion) -> str | None:
        return self._share(part.partition) if completion.dsns else None

    def _may_transfer(self, exc: QueueError, completion: Completion) -> bool:
        """Whether a refused completion's DSNs may fit once shares are moved to their partition."""
        return exc.code is Code.FULL and self.max_items is not None and bool(completion.dsns)

    async def acomplete(
        self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion
    ) -> QueueItem | None:
        check_owner(owner)
        check_completion(completion)
        part = await self._apart_of(item_id)
        if part is None:
            return None
        while True:
            try:
                return await part._acomplete(item_id, owner, revision, completion, self._dsn_bound(part, completion))
            except QueueError as exc:
                if not self._may_transfer(exc, completion):
                    raise
                if not await atransfer(self.parts, part.partition, len(completion.dsns), self.max_items or 0):
                    raise

    async def acomplete_many(
        self, requests: Sequence[CompleteRequest], *, also: AlsoWrite | None = None
    ) -> builtins.list[QueueItem | None | QueueError]:
        """Each partition's requests in one `acomplete_many` of its part (two round trips each), the partitions at
        once: their primaries answer together, and the loop wakes once for them. A request whose DSNs found the
        share short is done again alone, as `acomplete` (shares moved first)."""
        self._refuse_also(also)
        for request in requests:
            check_owner(request.owner)
            check_completion(request.completion)
        answers: builtins.list[QueueItem | None | QueueError] = [None for _ in requests]
        groups = await self._aby_part([request.item_id for request in requests])

        async def complete(partition: int, indexes: builtins.list[int]) -> None:
            group = [requests[i] for i in indexes]
            bound = self._share(partition) if any(request.completion.dsns for request in group) else None
            for index, answer in zip(
                indexes, await self.parts[partition]._acomplete_checked(group, bound), strict=True
            ):
                answers[index] = answer

        if len(groups) == 1:
            await complete(*next(iter(groups.items())))
        else:
            await asyncio.gather(*(complete(partition, indexes) for partition, indexes in groups.items()))
        for index, (request, answer) in enumerate(zip(requests, answers, strict=True)):
            if isinstance(answer, QueueError) and self._may_transfer(answer, request.completion):
                try:
                    answers[index] = await self.acomplete(
                        request.item_id, owner=request.owner, revision=request.revision, completion=request.completion
                    )
                except QueueError as exc:
                    answers[index] = exc
        return answers

    def reschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        if owner is not None:
            check_owner(owner)
        part = self.part_of(item_id)
        return part is not None and part.reschedule(item_id, at=at, owner=owner)

    async def areschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        if owner is not None:
            check_owner(owner)
        part = await self._apart_of(item_id)
        return part is not None and await part.areschedule(item_id, at=at, owner=owner)

    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        part = self.part_of(item_id)
        return None if part is None else part.cancel(item_id)

    async def acancel(self, item_id: uuid.UUID) -> QueueItem | None:
        part = await self._apart_of(item_id)
        return None if part is None else await part.acancel(item_id)

    def send_again(self, item_ids: Sequence[uuid.UUID], *, now: datetime) -> builtins.list[QueueItem | None]:
        check_aware(now, "now")
        answers: builtins.list[QueueItem | None] = [None for _ in item_ids]
        for partition, indexes in self._by_part(item_ids).items():
            again = self.parts[partition].send_again([item_ids[i] for i in indexes], now=now)
            for index, item in zip(indexes, again, strict=True):
                answers[index] = item
        return answers

    def prune_failed(self, *, before: datetime) -> int:
        return sum(part.prune_failed(before=before) for part in self.parts)

    def defer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        return sum(part.defer_destination(domains, until=until, now=now) for part in self.parts)

    async def adefer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        moved = 0
        for part in self.parts:
            moved += await part.adefer_destination(domains, until=until, now=now)
        return moved

    # --- reading one item ---------------------------------------------------------------------------

    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        part = self.part_of(item_id)
        return None if part is None else part.get(item_id)

    async def aget(self, item_id: uuid.UUID) -> QueueItem | None:
        part = await self._apart_of(item_id)
        return None if part is None else await part.aget(item_id)

    def present(self, item_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        found: set[uuid.UUID] = set()
        for part in self.parts:
            held = part.present(item_ids)
            self._note(part.partition, held)
            found |= held
        return found

    def read_message(self, item_id: uuid.UUID) -> bytes | None:
        part = self.part_of(item_id)
        return None if part is None else part.read_message(item_id)

    async def aread_message(self, item_id: uuid.UUID) -> bytes | None:
        part = await self._apart_of(item_id)
        return None if part is None else await part.aread_message(item_id)

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        found: dict[uuid.UUID, bytes] = {}
        for partition, indexes in self._by_part(item_ids).items():
            found.update(self.parts[partition].read_messages([item_ids[i] for i in indexes]))
        return found

    async def aread_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        found: dict[uuid.UUID, bytes] = {}
        for partition, indexes in (await self._aby_part(item_ids)).items():
            found.update(await self.parts[partition].aread_messages([item_ids[i] for i in indexes]))
        return found

    # --- reading many: the partitions merged ------------------------------------------------------------

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
        offset = max(offset, 0)
        pages = [part.list(query, offset=0, limit=offset + limit, order=order) for part in self.parts]
        for part, page in zip(self.parts, pages, strict=True):
            self._note(part.partition, page)
        merged = heapq.merge(*pages, key=listed_order, reverse=order is ItemOrder.NEXT_ATTEMPT_DESC)
        return builtins.list(itertools.islice(merged, offset, offset + limit))

    def count(self, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        total = sum(part.count(query, limit=limit) for part in self.parts)
        return total if limit is None else min(total, limit)

    def count_by_state(self, query: ItemQuery, *, limit: int) -> dict[ItemState, int]:
        total: Counter[ItemState] = Counter()
        for part in self.parts:
            total.update(part.count_by_state(query, limit=limit))
        return {state: min(total[state], limit) for state in ItemState}

    def iter_items(self, query: ItemQuery | None = None, *, batch: int = 500) -> Iterator[QueueItem]:
        yield from heapq.merge(*(part.iter_items(query, batch=batch) for part in self.parts), key=listed_order)

    def queues(self, *, limit: int = OVERVIEW_QUEUES) -> builtins.list[str]:
        names: set[str] = set()
        for part in self.parts:
            names.update(part.queues(limit=limit))
        return sorted(names)[:limit]

    def summary(self, *, now: datetime) -> QueueSummary:
        return merged_summary([part.summary(now=now) for part in self.parts], now=now, bound=None)

    def overview(self, *, now: datetime, bound: int) -> QueueSummary:
        return merged_summary([part.overview(now=now, bound=bound) for part in self.parts], now=now, bound=bound)

    def build_search_index(self, *, batch: int = 500) -> int:
        return sum(part.build_search_index(batch=batch) for part in self.parts)

    # --- the suppression list: entries put by completions are in their item's partition -------------------

    def suppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        return newest([part.suppressed(addresses, since=since) for part in self.parts])

    async def asuppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        found = await asyncio.gather(*(part.asuppressed(addresses, since=since) for part in self.parts))
        return newest(found)

    def list_suppressed(
        self, *, since: datetime, search: str | None = None, offset: int = 0, limit: int = 100
    ) -> builtins.list[Suppression]:
        if limit <= 0:
            return []
        offset = max(offset, 0)
        pages = [part.list_suppressed(since=since, search=search, limit=offset + limit) for part in self.parts]
        entries = newest([{entry.address: entry for entry in page} for page in pages]).values()
        ordered = sorted(entries, key=lambda entry: (-entry.since.timestamp(), entry.address))
        return ordered[offset : offset + limit]

    def count_suppressed(self, *, since: datetime, search: str | None = None) -> int:
        return sum(part.count_suppressed(since=since, search=search) for part in self.parts)

    def suppress(self, entries: Sequence[Suppression]) -> None:
        check_suppressions(entries)
        if not entries:
            return
        addresses = [entry.address for entry in entries]
        for part in self.parts[1:]:
            part.unsuppress(addresses)  # replaced: partition 0 holds the new entries
        self.parts[0].suppress(entries)

    def unsuppress(self, addresses: Sequence[str]) -> int:
        if not addresses:
            return 0
        listed = self.suppressed(addresses, since=_EPOCH)
        for part in self.parts:
            part.unsuppress(addresses)
        return len(listed)

    def prune_suppressed(self, *, before: datetime) -> int:
        return sum(part.prune_suppressed(before=before) for part in self.parts)

    # --- connections ------------------------------------------------------------------------------------

    def close(self) -> None:
        super().close()
        for part in self.parts:
            part.close()

    async def aclose(self) -> None:
        await super().aclose()
        for part in self.parts:
            await part.aclose()


async def _aread(part: RedisStore, *command: str) -> Any:
    """One command of a part's, on its asyncio client."""

    async def work(client: AsyncClient[bytes]) -> Any:
        return await client.execute_command(*command)  # type: ignore[no-untyped-call]

    return await part._ado(work)


def newest(found: Iterable[dict[str, Suppression]]) -> dict[str, Suppression]:
    """The entries of several partitions by address, the newest of an address's."""
    merged: dict[str, Suppression] = {}
    for entries in found:
        for address, entry in entries.items():
            held = merged.get(address)
            if held is None or entry.since > held.since:
                merged[address] = entry
    return merged


def merged_summary(parts: Sequence[QueueSummary], *, now: datetime, bound: int | None) -> QueueSummary:
    """The partitions' summaries as one: counts added (each at most `bound` + 1), the oldest due of them all."""
    summary = QueueSummary(now=now, bound=bound)
    for part in parts:
        summary.total += part.total
        summary.by_state.update(part.by_state)
        for queue, counts in part.by_queue.items():
            summary.by_queue.setdefault(queue, Counter()).update(counts)
        summary.deferred_by_domain.update(part.deferred_by_domain)
        if part.domain_sample is not None:
            summary.domain_sample = (summary.domain_sample or 0) + part.domain_sample
        best, found = summary.oldest_due, part.oldest_due
        if found is not None and (
            best is None or (found.next_attempt, found.created) < (best.next_attempt, best.created)
        ):
            summary.oldest_due = found
    summary.by_queue = {queue: summary.by_queue[queue] for queue in sorted(summary.by_queue)[:OVERVIEW_QUEUES]}
    if bound is not None:
        most = bound + 1
        summary.total = min(summary.total, most)
        summary.by_state = Counter({state: min(n, most) for state, n in summary.by_state.items()})
        summary.by_queue = {q: Counter({s: min(n, most) for s, n in c.items()}) for q, c in summary.by_queue.items()}
    return summary


__all__ = ["PartitionedRedisStore", "merged_summary", "newest"]

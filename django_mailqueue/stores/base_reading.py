"""The reading side of the store contract: items, their messages, pages and counts, and the queue's summary and
overview (the admin's reads, and the worker's messages)."""

from __future__ import annotations

import abc
import builtins
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import datetime

from ..core.items import ItemOrder, ItemQuery, ItemState, QueueItem, RecipientState
from ..core.status import QueueSummary

#: The overview names at most this many queues.
OVERVIEW_QUEUES = 50
#: The overview's deferred recipients by domain are those of at most this many deferred items.
OVERVIEW_DOMAIN_SAMPLE = 1_000


class ReadingContract(abc.ABC):
    """What a store answers about the items it holds, without changing them: an item, its message, a page, a
    count, a walk, the summary and the overview. A base of `QueueStore`; the async twins are `QueueStore`'s."""

    @abc.abstractmethod
    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        """The item, or None."""

    def present(self, item_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of the items are in the store (the history's links to queued items).

        The default calls `get` for each; a store answers in one round trip where it can.
        """
        return {item_id for item_id in item_ids if self.get(item_id) is not None}

    @abc.abstractmethod
    def read_message(self, item_id: uuid.UUID) -> bytes | None:
        """The message bytes exactly as added; None when the item is gone, or
        when the store holds the item but lost its message (never raises for that)."""

    def read_messages(self, item_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, bytes]:
        """The messages of several items, by id; an item gone or whose message is lost is left out.

        The default calls `read_message` for each.
        """
        found: dict[uuid.UUID, bytes] = {}
        for item_id in item_ids:
            message = self.read_message(item_id)
            if message is not None:
                found[item_id] = message
        return found

    @abc.abstractmethod
    def list(
        self,
        query: ItemQuery | None = None,
        *,
        offset: int = 0,
        limit: int = 100,
        order: ItemOrder = ItemOrder.NEXT_ATTEMPT,
    ) -> builtins.list[QueueItem]:
        """A page of items passing `query`, in `order` (by default `next_attempt` then
        oldest): stable paging, the same order every call while nothing changes. An
        order not in `orders` is `INVALID`."""

    @abc.abstractmethod
    def count(self, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        """How many items pass `query` (all items when None).

        With `limit`, counting stops there: the answer is at most `limit`, and
        the store reads no more than it must to find that many.
        """

    def count_by_state(self, query: ItemQuery, *, limit: int) -> dict[ItemState, int]:
        """How many items pass `query` in each state (its own `state` ignored; `query.now` decides), each at most
        `limit`: the admin's totals beside its state filter. The default is a `count` per state; a store may
        read them in one step (Redis: overview.lua, the leases read once)."""
        return {state: self.count(replace(query, state=state), limit=limit) for state in ItemState}

    def iter_items(self, query: ItemQuery | None = None, *, batch: int = 500) -> Iterator[QueueItem]:
        """Every item passing `query`, in `list` order, read `batch` at a time: for walking a whole queue.

        Holds one batch in memory. Not a snapshot: an item that moves or leaves
        while the walk runs may be given twice or not at all. The default pages
        through `list`; a store overrides it where a walk can resume cheaper
        than an offset (the ORM store: from the last key; Redis: one pass).
        """
        offset = 0
        while page := self.list(query, offset=offset, limit=batch):
            yield from page
            if len(page) < batch:
                return
            offset += len(page)

    def summary(self, *, now: datetime) -> QueueSummary:
        """Counts by state and queue, deferred recipients by domain, the oldest due item.

        The default reads every item a page at a time; a store may answer with
        aggregate queries instead.
        """
        summary = QueueSummary(now=now)
        offset = 0
        while page := self.list(offset=offset, limit=1000):
            for item in page:
                summary.count(item)
            offset += len(page)
        return summary

    def queues(self, *, limit: int = OVERVIEW_QUEUES) -> builtins.list[str]:
        """The names of the queues that hold items, sorted, at most `limit`.

        The default walks the items; a store answers from an index where it has one.
        """
        names: set[str] = set()
        for item in self.iter_items():
            names.add(item.queue)
        return sorted(names)[:limit]

    def overview(self, *, now: datetime, bound: int) -> QueueSummary:
        """The summary from bounded reads, whatever the queue's size (the admin's overview).

        Each count stops past `bound` (`summary.bound`: above it means "more than"); the queues are the
        first `OVERVIEW_QUEUES`; the deferred recipients by domain are those of the first
        `OVERVIEW_DOMAIN_SAMPLE` deferred items in the list's order (`summary.domain_sample` when there
        are more). Reads the counts through `_overview_counts` (by default `count` and `queues`), the rest through
        `list`: as cheap as their indexes.
        """
        summary = QueueSummary(now=now, bound=bound)
        self._overview_counts(summary, now=now, bound=bound)
        deferred = self.list(ItemQuery(state=ItemState.DEFERRED, now=now), limit=OVERVIEW_DOMAIN_SAMPLE + 1)
        if len(deferred) > OVERVIEW_DOMAIN_SAMPLE:
            summary.domain_sample = OVERVIEW_DOMAIN_SAMPLE
        for item in deferred[:OVERVIEW_DOMAIN_SAMPLE]:
            summary.deferred_by_domain.update(r.domain for r in item.recipients if r.state is RecipientState.PENDING)
        firsts = [
            *self.list(ItemQuery(state=ItemState.DUE, now=now), limit=1),
            *(item for item in deferred[:1] if item.next_attempt <= now),
        ]
        summary.oldest_due = min(firsts, key=lambda item: (item.next_attempt, item.created), default=None)
        return summary

    def _overview_counts(self, summary: QueueSummary, *, now: datetime, bound: int) -> None:
        """`overview`'s counts into `summary` (`total`, `by_state`, `by_queue` of the first `OVERVIEW_QUEUES`),
        each at most `bound + 1`: a bounded `count` each (21 with 4 queues); a store may read them in one step."""
        summary.total = self.count(limit=bound + 1)
        for state in ItemState:
            summary.by_state[state.value] = self.count(ItemQuery(state=state, now=now), limit=bound + 1)
        for queue in self.queues():
            summary.by_queue[queue] = Counter(
                {s.value: self.count(ItemQuery(queue=queue, state=s, now=now), limit=bound + 1) for s in ItemState}
            )

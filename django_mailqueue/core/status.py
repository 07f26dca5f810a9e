"""The queue at a glance: counts by state and queue, the oldest due item, deferred mail by domain."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .items import ItemState, QueueItem, RecipientState


@dataclass
class QueueSummary:
    """What `mailqueue_status` prints and the admin's overview shows."""

    now: datetime
    total: int = 0
    by_state: Counter[str] = field(default_factory=Counter)
    by_queue: dict[str, Counter[str]] = field(default_factory=dict)
    #: pending recipients of deferred items, by recipient domain
    deferred_by_domain: Counter[str] = field(default_factory=Counter)
    oldest_due: QueueItem | None = None
    #: counted only this far (`QueueStore.overview`): a count above it means "more than `bound`"; None: exact
    bound: int | None = None
    #: `deferred_by_domain` is of the first this many deferred items only, in the list's order; None: of all
    domain_sample: int | None = None

    def count(self, item: QueueItem) -> None:
        state = item.state_at(self.now).value
        self.total += 1
        self.by_state[state] += 1
        self.by_queue.setdefault(item.queue, Counter())[state] += 1
        if state == ItemState.DEFERRED.value:
            for r in item.recipients:
                if r.state is RecipientState.PENDING:
                    self.deferred_by_domain[r.domain] += 1
        if state in (ItemState.DUE.value, ItemState.DEFERRED.value) and item.next_attempt <= self.now:
            best = self.oldest_due
            if best is None or (item.next_attempt, item.created) < (best.next_attempt, best.created):
                self.oldest_due = item

    def as_dict(self) -> dict[str, Any]:
        oldest = self.oldest_due
        return {
            "now": self.now.isoformat(),
            "total": self.total,
            "by_state": {s.value: self.by_state.get(s.value, 0) for s in ItemState},
            "by_queue": {q: {s.value: c.get(s.value, 0) for s in ItemState} for q, c in sorted(self.by_queue.items())},
            "deferred_by_domain": dict(self.deferred_by_domain.most_common()),
            "oldest_due": None
            if oldest is None
            else {
                "id": str(oldest.id),
                "queue": oldest.queue,
                "created": oldest.created.isoformat(),
                "next_attempt": oldest.next_attempt.isoformat(),
                "sender": oldest.sender,
            },
        }

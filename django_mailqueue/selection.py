"""Items chosen by id or by filter, and the bulk actions on them: what mailqueue_list, mailqueue_cancel,
mailqueue_retry and mailqueue_flush share."""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .core.items import ItemQuery, ItemState, QueueItem, matches
from .stores.base import QueueStore

#: items read from the store at a time while walking a filter
BATCH = 500
#: a bulk action walks its filter again while the last walk found items it had not seen (a busy queue
#: moves items under a walk); it stops after this many walks whatever the queue does
MAX_WALKS = 5

_AGE_PART = re.compile(r"(\d+)([smhdw])")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(value: str) -> timedelta:
    """A duration as operators write it — `90s`, `30m`, `2h`, `1d`, `1w`, or parts together, `1d12h` —
    as a timedelta. Raises ValueError, saying what is accepted, for anything else."""
    text = value.strip().lower()
    parts = _AGE_PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{value!r} is not a duration: write e.g. 90s, 30m, 2h, 1d, 1w or 1d12h")
    return timedelta(seconds=sum(int(n) * _AGE_UNITS[u] for n, u in parts))


def domain_filter(value: str) -> str:
    """A recipient domain as the stores keep it (lowercase, IDNA A-label); "" for an empty value.

    Takes what an operator may type: `Example.ORG`, `@example.org`, `user@example.org`, `bücher.example`.
    """
    domain = value.strip().lower().lstrip("@")
    if "@" in domain:
        domain = domain.rpartition("@")[2]
    try:
        return domain.encode("idna").decode("ascii")[:255] if domain else ""
    except UnicodeError:
        return domain[:255]


@dataclass(frozen=True)
class Selection:
    """Which items: the ids given (none: any), passing every filter given."""

    ids: tuple[uuid.UUID, ...] = ()
    #: any of these states (none: any state)
    states: tuple[ItemState, ...] = ()
    queue: str | None = None
    #: recipients at this domain, as `domain_filter` gives it
    domain: str | None = None
    #: `ItemQuery.search`: terms, each a recipient's `@domain`, an address start or a subject word (`core.search`)
    search: str | None = None
    #: queued at least this long ago
    older_than: timedelta | None = None

    @property
    def narrowed(self) -> bool:
        """Ids or a filter were given: not every item in the queue."""
        return bool(self.ids or self.states or self.queue or self.domain or self.search or self.older_than)

    def queries(self, now: datetime) -> list[ItemQuery]:
        """The store queries that find these items (one a state); `older_than` and `ids` are checked apart."""
        base = ItemQuery(queue=self.queue, domain=self.domain, search=self.search, now=now)
        if not self.states:
            return [base]
        return [
            ItemQuery(state=s, queue=self.queue, domain=self.domain, search=self.search, now=now)
            for s in dict.fromkeys(self.states)
        ]

    def passes(self, item: QueueItem, now: datetime) -> bool:
        """Whether `item` is one of these items at `now` (what a store's filter and the rest decide together)."""
        if self.ids and item.id not in self.ids:
            return False
        if self.older_than is not None and item.created > now - self.older_than:
            return False
        if self.states and item.state_at(now) not in self.states:
            return False
        return matches(item, ItemQuery(queue=self.queue, domain=self.domain, search=self.search))

    def as_dict(self) -> dict[str, object]:
        return {
            "ids": [str(i) for i in self.ids],
            "states": [s.value for s in self.states],
            "queue": self.queue,
            "domain": self.domain,
            "search": self.search,
            "older_than_seconds": None if self.older_than is None else int(self.older_than.total_seconds()),
        }


def walk(store: QueueStore, selection: Selection, *, now: datetime, batch: int | None = None) -> Iterator[QueueItem]:
    """The selected items, in the store's list order (one state after the other), one batch in memory.

    By id: each id read on its own, in the order given; an id not in the queue is left out.
    """
    if selection.ids:
        for item_id in dict.fromkeys(selection.ids):
            item = store.get(item_id)
            if item is not None and selection.passes(item, now):
                yield item
        return
    for query in selection.queries(now):
        for item in store.iter_items(query, batch=batch or BATCH):
            if selection.older_than is None or item.created <= now - selection.older_than:
                yield item


# --- bulk actions ------------------------------------------------------------------------


class Outcome(enum.StrEnum):
    """What a bulk action did to one item (or, in a dry run, would do)."""

    CANCELLED = "cancelled"
    #: its next attempt moved to now
    MADE_DUE = "made_due"
    #: due already: nothing to change
    ALREADY_DUE = "already_due"
    #: kept failed (`KEEP_FAILED`): sent again — its failed recipients pending, due now, a new lifetime
    SENT_AGAIN = "sent_again"
    #: a worker holds it and is delivering it now: left alone
    LEASED = "leased"
    #: an id given that is not in the queue (never was, or left it before the action reached it)
    MISSING = "missing"
    #: an id given whose item does not pass the filters given with it: left alone
    FILTERED_OUT = "filtered_out"


class Action(enum.StrEnum):
    CANCEL = "cancel"
    #: send now: due at once; a failed item kept (KEEP_FAILED) is sent again
    RETRY = "retry"


def decide(action: Action, item: QueueItem, now: datetime) -> Outcome:
    """What `action` does to `item` as it stands at `now` (the rule; `apply` does it)."""
    if action is Action.CANCEL:
        return Outcome.CANCELLED
    if item.kept:
        return Outcome.SENT_AGAIN
    if item.leased_at(now):
        return Outcome.LEASED
    if item.next_attempt <= now:
        return Outcome.ALREADY_DUE
    return Outcome.MADE_DUE


@dataclass
class BulkReport:
    """What a bulk action did, item by item (ids only: an action over a large queue keeps no items)."""

    action: Action
    dry_run: bool
    now: datetime
    selection: Selection
    ids: dict[Outcome, list[uuid.UUID]] = field(default_factory=dict)

    def add(self, item_id: uuid.UUID, outcome: Outcome) -> None:
        self.ids.setdefault(outcome, []).append(item_id)

    def count(self, outcome: Outcome) -> int:
        return len(self.ids.get(outcome, ()))

    def as_dict(self) -> dict[str, object]:
        return {
            "action": self.action.value,
            "dry_run": self.dry_run,
            "now": self.now.isoformat(),
            "selection": self.selection.as_dict(),
            "counts": {o.value: len(ids) for o, ids in self.ids.items()},
            "items": {o.value: [str(i) for i in ids] for o, ids in self.ids.items()},
        }


def run_action(
    store: QueueStore,
    action: Action,
    selection: Selection,
    *,
    now: datetime,
    dry_run: bool = False,
    on_item: Callable[[uuid.UUID, Outcome], None] | None = None,
    batch: int | None = None,
) -> BulkReport:
    """Do `action` to every selected item, each once, telling `on_item` as each is done.

    Items added after `now` are not selected, so an action on a filter ends while mail keeps coming.
    A filter's ids (only) are read first and acted on after — acting while walking would move the walk —
    and the filter is walked again while the last walk found new ones, at most `MAX_WALKS` times.
    """
    report = BulkReport(action, dry_run, now, selection)

    def record(item_id: uuid.UUID, outcome: Outcome) -> None:
        report.add(item_id, outcome)
        if on_item is not None:
            on_item(item_id, outcome)

    def carry_out(item_id: uuid.UUID, outcome: Outcome) -> None:
        if not dry_run and outcome is Outcome.CANCELLED and store.cancel(item_id) is None:
            outcome = Outcome.MISSING  # it left the queue since it was read
        elif not dry_run and outcome is Outcome.MADE_DUE and not store.reschedule(item_id, at=now):
            outcome = Outcome.MISSING
        elif not dry_run and outcome is Outcome.SENT_AGAIN and store.send_again([item_id], now=now) == [None]:
            outcome = Outcome.MISSING
        record(item_id, outcome)

    if selection.ids:
        for item_id in dict.fromkeys(selection.ids):
            item = store.get(item_id)
            if item is None:
                record(item_id, Outcome.MISSING)
            elif not selection.passes(item, now):
                record(item_id, Outcome.FILTERED_OUT)
            else:
                carry_out(item_id, decide(action, item, now))
        return report
    seen: set[uuid.UUID] = set()
    for _ in range(1 if dry_run else MAX_WALKS):
        chosen = [
            (item.id, decide(action, item, now))
            for item in walk(store, selection, now=now, batch=batch)
            if item.id not in seen and item.created <= now
        ]
        if not chosen:
            break
        for item_id, outcome in chosen:
            seen.add(item_id)
            carry_out(item_id, outcome)
    return report

"""`MemoryStore`: the contract in one process's memory, for tests and one-process use."""

from __future__ import annotations

import asyncio
import builtins
import itertools
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..core.clock import to_micros
from ..core.errors import Code, QueueError
from ..core.items import (
    Completion,
    ItemOrder,
    ItemQuery,
    NewItem,
    QueueItem,
    Reply,
    Suppression,
    apply_completion,
    as_added,
    matches,
    sent_again,
)
from ..core.shaping import Suspension, Times, Window, forgotten, next_suspension, take_from_bucket, window_take
from .base import OVERVIEW_QUEUES, QueueStore
from .inputs import (
    check_aware,
    check_completion,
    check_defer,
    check_key,
    check_new_item,
    check_order,
    check_owner,
    check_probe,
    check_suppressions,
    check_suspend,
    check_take,
)


class MemoryStore(QueueStore):
    """Items in a dict behind a lock: gone when the process exits.

    Every operation holds one lock, so claims are atomic between threads of the
    process. Not shared between processes.
    """

    supports_wakeup = True

    def __init__(self, options: Mapping[str, Any] | None = None, *, max_items: int | None = None) -> None:
        super().__init__(options, max_items=max_items)
        self._lock = threading.Lock()
        self._items: dict[uuid.UUID, tuple[int, QueueItem]] = {}
        self._messages: dict[uuid.UUID, bytes] = {}
        self._seq = itertools.count(1)
        self._generation = 0
        #: token buckets: key -> (tokens, when last taken, in microseconds)
        self._buckets: dict[str, tuple[float, int]] = {}
        self._windows: dict[str, tuple[Times, Times]] = {}
        self._suspensions: dict[str, Suspension] = {}
        #: probes: destination -> (until, holder)
        self._probes: dict[str, tuple[datetime, str]] = {}
        self._suppressed: dict[str, Suppression] = {}

    # --- writing ------------------------------------------------------------------

    def add_many(self, items: Sequence[NewItem], *, now: datetime) -> builtins.list[QueueItem]:
        for new in items:
            check_new_item(new)
        with self._lock:
            self._check_room(items)
            added = [self._insert(new, now) for new in items]
            self._generation += 1
        return added

    def _check_room(self, adding: Sequence[NewItem]) -> None:
        """Refuse `adding` whole (under the lock): past `max_items` (FULL), or an id queued already (INVALID)."""
        if self.max_items is not None and len(self._items) + len(adding) > self.max_items:
            raise QueueError(Code.FULL, f"the queue holds {len(self._items)} items; MAX_ITEMS is {self.max_items}")
        if any(new.id in self._items for new in adding):
            raise QueueError(Code.INVALID, "an item with that id is queued already")

    def _insert(self, new: NewItem, now: datetime) -> QueueItem:
        """Keep one checked item (under the lock), its id known to be free."""
        item = as_added(new, now, to_micros(now))
        self._items[item.id] = (next(self._seq), item)
        self._messages[item.id] = bytes(new.message)
        return item

    def claim(
        self, *, owner: str, now: datetime, lease_expires: datetime, queues: Sequence[str] | None = None, limit: int = 1
    ) -> builtins.list[QueueItem]:
        check_owner(owner)
        with self._lock:
            due = [
                (seq, item)
                for seq, item in self._items.values()
                if item.next_attempt <= now
                and not item.leased_at(now)
                and not item.kept
                and (queues is None or item.queue in queues)
            ]
            lane = {name: i for i, name in enumerate(queues or ())}
            due.sort(key=lambda pair: (lane.get(pair[1].queue, 0), pair[1].next_attempt, pair[0]))
            claimed = []
            for seq, item in due[:limit]:
                taken = replace(
                    item,
                    owner=owner,
                    lease_expires=lease_expires,
                    revision=item.revision + 1,
                    reclaims=item.reclaims + (1 if item.owner is not None else 0),
                )
                self._items[item.id] = (seq, taken)
                claimed.append(taken)
            return claimed

    def renew(self, ids: Sequence[uuid.UUID], *, owner: str, lease_expires: datetime) -> builtins.list[uuid.UUID]:
        check_owner(owner)
        held = []
        with self._lock:
            for item_id in ids:
                entry = self._items.get(item_id)
                if entry is not None and entry[1].owner == owner:
                    self._items[item_id] = (entry[0], replace(entry[1], lease_expires=lease_expires))
                    held.append(item_id)
        return held

    def complete(self, item_id: uuid.UUID, *, owner: str, revision: int, completion: Completion) -> QueueItem | None:
        check_owner(owner)
        check_completion(completion)
        with self._lock:
            entry = self._items.get(item_id)
            if entry is None:
                return None
            seq, item = entry
            if item.owner != owner or item.revision != revision:
                raise QueueError(
                    Code.LEASE_LOST, f"the lease on {item_id} is no longer held by {owner}", item_id=item_id
                )
            self._check_room(completion.dsns)
            recorded = apply_completion(item, completion)
            if recorded.done and not recorded.kept:
                del self._items[item_id]
                self._messages.pop(item_id, None)
            else:
                self._items[item_id] = (seq, recorded)
            if completion.dsns:
                assert completion.now is not None  # check_completion
                for dsn in completion.dsns:
                    self._insert(dsn, completion.now)
                self._generation += 1
            self._suppressed.update((entry.address, entry) for entry in completion.suppress)
            return recorded

    def reschedule(self, item_id: uuid.UUID, *, at: datetime, owner: str | None = None) -> bool:
        if owner is not None:
            check_owner(owner)
        with self._lock:
            entry = self._items.get(item_id)
            if entry is None:
                return False
            seq, item = entry
            if item.kept:
                return False
            if owner is not None:
                if item.owner != owner:
                    return False
                item = replace(item, owner=None, lease_expires=None)
            self._items[item_id] = (seq, replace(item, next_attempt=at))
            self._generation += 1
            return True

    def send_again(self, item_ids: Sequence[uuid.UUID], *, now: datetime) -> builtins.list[QueueItem | None]:
        check_aware(now, "now")
        answers: builtins.list[QueueItem | None] = []
        with self._lock:
            for item_id in item_ids:
                entry = self._items.get(item_id)
                if entry is None or not entry[1].kept:
                    answers.append(None)
                    continue
                again = sent_again(entry[1], now)
                self._items[item_id] = (entry[0], again)
                answers.append(again)
            self._generation += 1
        return answers

    def prune_failed(self, *, before: datetime) -> int:
        check_aware(before, "before")
        with self._lock:
            old = [i for i, (_, item) in self._items.items() if item.failed_at is not None and item.failed_at < before]
            for item_id in old:
                del self._items[item_id]
                self._messages.pop(item_id, None)
            return len(old)

    def cancel(self, item_id: uuid.UUID) -> QueueItem | None:
        with self._lock:
            entry = self._items.pop(item_id, None)
            self._messages.pop(item_id, None)
            return entry[1] if entry else None

    # --- traffic shaping ------------------------------------------------------------

    def take_tokens(
        self,
        key: str,
        *,
        rate: float,
        burst: int,
        want: int,
        now: datetime,
        window: Window | None = None,
        done: int = 0,
        ended: float = 0.0,
    ) -> int:
        check_take(key, rate, burst, want, now, window, done, ended)
        with self._lock:
            if window is not None:  # the window on this process's monotonic clock: the store's own
                clock = round(time.monotonic() * 1e6)
                flying, finished = self._windows.get(key) or ([], [])
                room, flying, finished = window_take(
                    flying, finished, window=window, report=done, ended=round(ended * 1e6), now=clock
                )
                want = min(want, room)
            left, updated = self._buckets.get(key) or (0.0, None)
            taken, left, updated = take_from_bucket(
                left, updated, rate=rate, burst=burst, want=want, now=to_micros(now)
            )
            self._buckets[key] = (left, updated)
            if window is not None:
                self._windows[key] = (flying + [(clock, taken)] if taken else flying, finished)
            return taken

    def suspend(self, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
        check_suspend(destination, until, reply, now)
        with self._lock:
            # Records forgotten are dropped here, by the write that would meet them.
            for stale in [d for d, s in self._suspensions.items() if forgotten(s.until, now)]:
                del self._suspensions[stale]
            kept = next_suspension(self._suspensions.get(destination), destination, until=until, reply=reply, now=now)
            self._suspensions[destination] = kept
            self._probes.pop(destination, None)
            return kept

    def suspensions(self, *, now: datetime, destinations: Sequence[str] | None = None) -> builtins.list[Suspension]:
        check_aware(now, "now")
        with self._lock:
            found = [s for s in self._suspensions.values() if s.until > now]
        if destinations is not None:
            wanted = set(destinations)
            found = [s for s in found if s.destination in wanted]
        return sorted(found, key=lambda s: s.destination)

    def clear_suspension(self, destination: str) -> bool:
        check_key(destination, "a destination")
        with self._lock:
            return self._suspensions.pop(destination, None) is not None

    def take_probe(
        self, destination: str, *, holder: str, until: datetime, now: datetime
    ) -> Suspension | datetime | None:
        check_probe(destination, holder, until, now)
        with self._lock:
            suspension = self._suspensions.get(destination)
            if suspension is not None and suspension.until > now:
                return suspension
            probe = self._probes.get(destination)
            if probe is not None and probe[0] > now and probe[1] != holder:
                return probe[0]
            if len(self._probes) >= 1024:  # probes that ended without `end_probe` (their holder died)
                for stale in [d for d, (ends, _) in self._probes.items() if ends <= now]:
                    del self._probes[stale]
            self._probes[destination] = (until, holder)
            return None

    def end_probe(self, destination: str, *, holder: str) -> bool:
        check_key(destination, "a destination")
        with self._lock:
            probe = self._probes.get(destination)
            if probe is None or probe[1] != holder:
                return False
            del self._probes[destination]
            return True

    def defer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        check_defer(domains, until, now)
        wanted = {d.lower() for d in domains}
        moved = 0
        with self._lock:  # the memory store has no domain index: it looks at every item
            for item_id, (seq, item) in self._items.items():
                pending = item.pending
                if (
                    pending
                    and item.next_attempt < until
                    and not item.leased_at(now)
                    and all(r.domain in wanted for r in pending)
                ):
                    self._items[item_id] = (seq, replace(item, next_attempt=until, revision=item.revision + 1))
                    moved += 1
        return moved

    # --- reading ------------------------------------------------------------------

    def get(self, item_id: uuid.UUID) -> QueueItem | None:
        with self._lock:
            entry = self._items.get(item_id)
            return entry[1] if entry else None

    def read_message(self, item_id: uuid.UUID) -> bytes | None:
        with self._lock:
            return self._messages.get(item_id)

    def list(
        self,
        query: ItemQuery | None = None,
        *,
        offset: int = 0,
        limit: int = 100,
        order: ItemOrder = ItemOrder.NEXT_ATTEMPT,
    ) -> builtins.list[QueueItem]:
        check_order(self, order)
        with self._lock:
            entries = builtins.list(self._items.values())
        if order in (ItemOrder.NEXT_ATTEMPT, ItemOrder.NEXT_ATTEMPT_DESC):
            entries.sort(key=lambda pair: (pair[1].next_attempt, pair[0]), reverse=order is ItemOrder.NEXT_ATTEMPT_DESC)
        else:
            entries.sort(key=lambda pair: pair[0], reverse=order is ItemOrder.NEWEST)
        found = [item for _, item in entries if query is None or matches(item, query)]
        return found[offset : offset + limit]

    def count(self, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        with self._lock:
            items = [item for _, item in self._items.values()]
        found = sum(1 for item in items if query is None or matches(item, query))
        return found if limit is None else min(found, limit)

    def queues(self, *, limit: int = OVERVIEW_QUEUES) -> builtins.list[str]:
        with self._lock:
            return sorted({item.queue for _, item in self._items.values()})[:limit]

    # --- the suppression list -------------------------------------------------------

    def suppressed(self, addresses: Sequence[str], *, since: datetime) -> dict[str, Suppression]:
        with self._lock:
            found = (self._suppressed.get(address) for address in addresses)
            return {entry.address: entry for entry in found if entry is not None and entry.since >= since}

    def _listed(self, since: datetime, search: str | None) -> builtins.list[Suppression]:
        needle = (search or "").lower()
        with self._lock:
            entries = builtins.list(self._suppressed.values())
        return [e for e in entries if e.since >= since and needle in e.address.lower()]

    def list_suppressed(
        self, *, since: datetime, search: str | None = None, offset: int = 0, limit: int = 100
    ) -> builtins.list[Suppression]:
        entries = sorted(self._listed(since, search), key=lambda e: e.address)
        entries.sort(key=lambda e: e.since, reverse=True)
        return entries[max(offset, 0) : max(offset, 0) + max(limit, 0)]

    def count_suppressed(self, *, since: datetime, search: str | None = None) -> int:
        return len(self._listed(since, search))

    def suppress(self, entries: Sequence[Suppression]) -> None:
        check_suppressions(entries)
        with self._lock:
            self._suppressed.update((entry.address, entry) for entry in entries)

    def unsuppress(self, addresses: Sequence[str]) -> int:
        with self._lock:
            return sum(1 for address in set(addresses) if self._suppressed.pop(address, None) is not None)

    def prune_suppressed(self, *, before: datetime) -> int:
        with self._lock:
            old = [address for address, entry in self._suppressed.items() if entry.since < before]
            for address in old:
                del self._suppressed[address]
            return len(old)

    # --- waking ---------------------------------------------------------------------

    async def await_added(self, timeout: float) -> bool:
        # Adds come from any thread; looking every 10 ms keeps this cancellable
        # and cheap, without holding an executor thread while idle.
        with self._lock:
            start = self._generation
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if self._generation != start:
                return True
            await asyncio.sleep(min(0.01, max(0.0, deadline - loop.time())))
        return self._generation != start

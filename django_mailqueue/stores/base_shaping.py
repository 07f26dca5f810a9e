"""Traffic shaping's part of the store contract: rates shared by every worker, suspended destinations, probes."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime

from ..core.items import Reply
from ..core.shaping import Suspension, Window


class ShapingContract(abc.ABC):
    """What a store keeps for traffic shaping, shared by every worker of the store (docs/shaping.md): token
    buckets, suspended destinations, slow start's probes, and the deferral of a suspended destination's items.
    A base of `QueueStore`; the async twins are `QueueStore`'s."""

    @abc.abstractmethod
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
        """Take up to `want` whole tokens from the bucket `key`; how many were taken (0 when it is empty).

        The bucket refills `rate` tokens a second up to `burst` and starts full; it is shared by every
        worker of the store, and a take is atomic: takers together never get more than the bucket
        allows (`core.shaping.take_from_bucket` is the rule). A `now` behind the bucket's last take
        refills nothing. With a `window`, the take first reports `done` tokens of the key's over, the last
        of them `ended` seconds before the call, then gets no more than the window's room, counted on the
        store's own clock (`core.shaping.window_take` is the rule; `want` 0 only reports). Raises `INVALID`
        for a bad key or figures.
        """

    @abc.abstractmethod
    def suspend(self, destination: str, *, until: datetime, reply: Reply, now: datetime) -> Suspension:
        """Record that no worker opens a new connection to `destination` before `until`; the record kept.

        Atomic (`core.shaping.next_suspension` is the rule): with a record (even one whose `until` has
        passed, until it is forgotten), `strikes` is its strikes + 1 — its strikes unchanged while it is in
        force (`until > now`: the same episode) — `until` the later of the two and `since` kept; else
        `strikes` is 1 and `since` is `now`. The reply is the one given.
        """

    @abc.abstractmethod
    def suspensions(self, *, now: datetime, destinations: Sequence[str] | None = None) -> list[Suspension]:
        """The suspensions in force at `now` (`until > now`), of every destination or only of `destinations`,
        by destination; one round trip."""

    @abc.abstractmethod
    def clear_suspension(self, destination: str) -> bool:
        """Forget `destination`'s record (a success, or an operator's "resume now"); True when there was one.
        Its next suspension has 1 strike."""

    @abc.abstractmethod
    def take_probe(
        self, destination: str, *, holder: str, until: datetime, now: datetime
    ) -> Suspension | datetime | None:
        """Take `destination`'s probe for `holder` until `until` — the right to open the one connection to a
        destination not yet found healthy (docs/shaping.md, "Slow start") — unless a suspension or another
        holder's probe is in force at `now`. None when taken (or renewed: `holder` held it); else the
        suspension in force, or the end of the probe in force. Atomic: of concurrent takers one gets it.
        A `suspend` of the destination ends its probe in the same write."""

    @abc.abstractmethod
    def end_probe(self, destination: str, *, holder: str) -> bool:
        """End `holder`'s probe of `destination` (its server greeted: everybody may connect); True when
        `holder` held it — False when it had ended (expired, taken since by another, or a suspension)."""

    @abc.abstractmethod
    def defer_destination(self, domains: Sequence[str], *, until: datetime, now: datetime) -> int:
        """Move every item not leased at `now`, whose pending recipients are all at `domains` and whose next
        attempt is before `until`, to `next_attempt = until`; how many moved.

        No attempt is counted, the recipients' replies are kept, the revision is bumped. The store's work is
        in proportion to the items at those domains (its recipient-domain index), not to the queue.
        """

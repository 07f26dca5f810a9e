"""A worker process's tokens of its destinations' RATEs: taken from the store's buckets right before MAIL FROM.

A token is taken when its message's session is ready to send it (a cached
connection, or a new one once accepted), not when the item is admitted: the
store's bucket then spaces the messages' arrivals at the server, not the
starts of their attempts (docs/shaping.md, "Limits"). Admission only bounds
how many attempts of a destination get ready before their tokens (`admits`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import Counter
from collections.abc import Callable

from ..core.clock import Clock
from ..core.errors import QueueError
from ..shaping import DestinationPolicy, Rate
from ..stores.base import QueueStore

logger = logging.getLogger("django_mailqueue")

#: The weight of the newest attempt in a destination's average time from admission to `MAIL FROM`.
SETUP_WEIGHT = 0.2


def next_ask(per_second: float) -> float:
    """Seconds after a take that got fewer tokens than it asked for (or failed) before the bucket is asked again,
    counted from when the take was sent.

    Such a take left less than one whole token in the bucket, so one is whole again within `1 / rate` of it:
    asking then takes it before the bucket can fill to its size (`burst` >= 1 more than that fraction) and
    let the rate's tokens go unused while the worker sleeps. Asking sooner would cost round trips for
    nothing; later, with a bucket of one or two tokens, loses tokens (the rate unmet)."""
    return min(60.0, 1.0 / per_second)


def ready_limit(rate: Rate, setup: float) -> int:
    """How many attempts of a destination may be admitted and not have taken their token yet: a batch, and as many
    as the rate could carry while one gets ready (`setup`: seconds from its admission to its `MAIL FROM`)."""
    return rate.batch + math.ceil(rate.per_second * setup)


class Tokens:
    """The tokens one worker process takes from the store's buckets, a batch a round trip, and its attempts that
    were admitted and wait for theirs."""

    def __init__(self, store: QueueStore, clock: Clock, wake: Callable[[], None]) -> None:
        self.store = store
        self.clock = clock
        self.wake = wake
        #: tokens taken from the store's buckets and not used yet
        self._stock: Counter[str] = Counter()
        self._refills: dict[str, asyncio.Task[None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        #: loop time before which a bucket is not asked again (it was empty)
        self._empty_until: dict[str, float] = {}
        #: attempts admitted for a destination that have not taken their token yet
        self._readying: Counter[str] = Counter()
        #: a destination's average seconds from an attempt's admission to its `MAIL FROM`
        self._setup: dict[str, float] = {}

    def admits(self, policy: DestinationPolicy) -> bool:
        """Whether one more attempt of the destination may get ready for its token (`ready_limit`)."""
        rate = policy.limits.rate
        assert rate is not None
        return self._readying[policy.key] < ready_limit(rate, self._setup.get(policy.key, 0.0))

    def admitted(self, key: str) -> None:
        self._readying[key] += 1

    def released(self, key: str) -> None:
        """An admitted attempt ended without taking its token (nothing was sent to the destination)."""
        self._readying[key] -= 1
        self.wake()

    async def before_mail(self, policy: DestinationPolicy, *, admitted: float | None) -> None:
        """Wait for a token of the destination's rate and take it: its message's session is ready to send it.
        `admitted`: the loop time the attempt was admitted for the destination (None: it was not, its destination
        known only after its MX lookup); the next attempt may then get ready."""
        loop = asyncio.get_running_loop()
        if admitted is not None:
            seconds = loop.time() - admitted
            average = self._setup.get(policy.key)
            self._setup[policy.key] = seconds if average is None else average + SETUP_WEIGHT * (seconds - average)
        try:
            await self.take(policy)
        finally:
            if admitted is not None:
                self.released(policy.key)

    async def until_due(self, policy: DestinationPolicy) -> None:
        """Before a session: wait while the destination's bucket was found empty and none of its tokens is in stock
        (no connection waits open for a slow rate's next token), without taking it."""
        loop = asyncio.get_running_loop()
        due = self._empty_until.get(policy.key, 0.0)
        if self._stock[policy.key] < 1 and loop.time() < due:
            await asyncio.sleep(due - loop.time())

    async def take(self, policy: DestinationPolicy) -> None:
        """Wait for a token of `policy`'s rate and take it."""
        key = policy.key
        loop = asyncio.get_running_loop()
        while self._stock[key] < 1:
            self._refill(policy)
            task = self._refills.get(key)
            if task is not None and not task.done():  # awaiting a finished task would not yield to the loop
                await asyncio.shield(task)
            else:
                await asyncio.sleep(max(0.005, self._empty_until.get(key, 0.0) - loop.time()))
        self._stock[key] -= 1

    def _refill(self, policy: DestinationPolicy) -> None:
        """Ask the store for the next few tokens, in the background (one request per bucket at a time)."""
        key = policy.key
        asking = self._refills.get(key)
        if asking is not None and not asking.done():  # a finished one whose callback has not run yet is over
            return
        loop = asyncio.get_running_loop()
        due = self._empty_until.get(key, 0.0)
        if loop.time() < due:
            if key not in self._timers:  # the wake-up at `due` (a timer may fire a hair early: ask again then)
                self._timers[key] = loop.call_at(due + 0.001, self._due, key)
            return
        task = loop.create_task(self._take(policy), name=f"mailqueue-tokens-{key}")
        self._refills[key] = task
        task.add_done_callback(lambda done: self._refills.pop(key) if self._refills.get(key) is done else None)

    def _due(self, key: str) -> None:
        self._timers.pop(key, None)
        self.wake()

    async def _take(self, policy: DestinationPolicy) -> None:
        rate = policy.limits.rate
        assert rate is not None
        want = rate.batch
        loop = asyncio.get_running_loop()
        asked = loop.time()
        try:
            got = await self._take_tokens(policy.key, rate=rate.per_second, burst=rate.burst, want=want)
        except QueueError as exc:
            logger.warning("tokens for %s could not be taken from the store: %s", policy.key, exc)
            got = 0
        self._stock[policy.key] += got
        if got < want:
            self._empty_until[policy.key] = asked + next_ask(rate.per_second)
        self.wake()

    async def _take_tokens(self, key: str, *, rate: float, burst: int, want: int) -> int:
        return await self.store.atake_tokens(key, rate=rate, burst=burst, want=want, now=self.clock.now())

    async def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        tasks = list(self._refills.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["SETUP_WEIGHT", "Tokens", "next_ask", "ready_limit"]

"""A worker process's tokens of the store's rate buckets: taken a few at a time, and reported done with the next take.

Each take carries the rate's window (`Rate.window`): the store grants a token only while the tokens in flight and
those reported done within the last period leave room under the window's cap, so the server never sees more than
the cap in a period however late a worker's message reaches it. A message's token is reported done when its SMTP
transaction ends (`done`), on the next take of that key, or after `REPORT_AFTER` of a period alone when no take
comes while the rate binds, with how long before the report the last of them ended (docs/shaping.md, "The window").
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

from ..core.clock import Clock
from ..core.errors import QueueError
from ..shaping import DestinationPolicy, Rate
from ..stores.base import QueueStore

logger = logging.getLogger("django_mailqueue")

#: The share of a RATE the workers' bucket refills at: 97%, so a one-second window at the relay has room for a few
#: tokens' time of delays between a token's take and its message's arrival (docs/shaping.md, "Limits").
RATE_TARGET = 0.97
#: The share of a rate's period after which tokens done are reported by themselves when no take carried them.
REPORT_AFTER = 0.05


def next_ask(per_second: float) -> float:
    """Seconds after a take that got fewer tokens than it asked for (or failed) before the bucket is asked again,
    counted from when the take was sent.

    Such a take left less than one whole token in the bucket, so one is whole again within `1 / rate` of it:
    asking then takes it before the bucket can fill to its size (`burst` >= 1 more than that fraction) and
    let the rate's tokens go unused while the worker sleeps. Asking sooner would cost round trips for
    nothing; later, with a bucket of one or two tokens, loses tokens (the rate unmet). A take the window
    refused is asked again as soon: the reports it waits for come with the takes."""
    return min(60.0, 1.0 / per_second)


class Tokens:
    """The tokens one worker process holds of each rate key, the takes under way, and the tokens done not reported
    yet. `wake` is called when a take ended (tokens may have come)."""

    def __init__(self, store: QueueStore, clock: Clock, *, lease: float, wake: Callable[[], None]) -> None:
        self.store = store
        self.clock = clock
        self.lease = lease
        self.wake = wake
        #: tokens taken from the store's buckets and not used yet
        self.stock: Counter[str] = Counter()
        #: tokens whose message's transaction ended, not reported to the store yet
        self.unreported: Counter[str] = Counter()
        #: loop time the last of them ended: the report says how long before it was sent (the store dates them so)
        self._ended: dict[str, float] = {}
        self._refills: dict[str, asyncio.Task[None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._reports: dict[str, asyncio.TimerHandle] = {}
        #: loop time before which a bucket is not asked again (it was empty)
        self._empty_until: dict[str, float] = {}
        #: keys whose last take got fewer than it asked for: only their tokens done are reported alone
        self._short: set[str] = set()

    def ask(self, policy: DestinationPolicy) -> None:
        """Ask the store for the next few tokens, in the background (one request per bucket at a time)."""
        self._start(policy, want=None)

    def _start(self, policy: DestinationPolicy, want: int | None) -> None:
        key = policy.key
        asking = self._refills.get(key)
        if asking is not None and not asking.done():  # a finished one whose callback has not run yet is over
            return
        loop = asyncio.get_running_loop()
        due = self._empty_until.get(key, 0.0)
        if want is None and loop.time() < due:
            if key not in self._timers:  # the wake-up at `due` (a timer may fire a hair early: ask again then)
                self._timers[key] = loop.call_at(due + 0.001, self._due, key)
            return
        task = loop.create_task(self._take(policy, want), name=f"mailqueue-tokens-{key}")
        self._refills[key] = task
        task.add_done_callback(lambda done: self._refills.pop(key) if self._refills.get(key) is done else None)

    def _due(self, key: str) -> None:
        self._timers.pop(key, None)
        self.wake()

    async def _take(self, policy: DestinationPolicy, want: int | None) -> None:
        """A take of the rate's batch (`want` None), or of `want` tokens (0: a report alone)."""
        rate = policy.limits.rate
        assert rate is not None
        key = policy.key
        wanted = rate.batch if want is None else want
        done, self.unreported[key] = self.unreported[key], 0
        loop = asyncio.get_running_loop()
        asked = loop.time()
        ended = max(0.0, asked - self._ended.get(key, asked)) if done else 0.0
        try:
            got = await self.store.atake_tokens(
                key,
                rate=rate.per_second * RATE_TARGET,
                burst=rate.burst,
                want=wanted,
                now=self.clock.now(),
                window=rate.window(self.lease),
                done=done,
                ended=ended,
            )
        except QueueError as exc:
            logger.warning("tokens for %s could not be taken from the store: %s", key, exc)
            self.unreported[key] += done
            got = 0
        self.stock[key] += got
        if got < wanted:
            self._empty_until[key] = asked + next_ask(rate.per_second * RATE_TARGET)
        if want is None:
            (self._short.add if got < wanted else self._short.discard)(key)
        self.wake()

    async def token(self, policy: DestinationPolicy) -> None:
        """Wait for a token of `policy`'s rate and take it (for a destination the worker could not admit
        by name: an MX domain whose rollup was unknown until its lookup)."""
        key = policy.key
        loop = asyncio.get_running_loop()
        while self.stock[key] < 1:
            self.ask(policy)
            task = self._refills.get(key)
            if task is not None and not task.done():  # awaiting a finished task would not yield to the loop
                await asyncio.shield(task)
            else:
                await asyncio.sleep(max(0.005, self._empty_until.get(key, 0.0) - loop.time()))
        self.stock[key] -= 1

    def done(self, policy: DestinationPolicy, rate: Rate) -> None:
        """A token's message is over at the server (accepted, refused, or its session broken): reported with the
        next take of its key, or alone `REPORT_AFTER` of a period from now while the key's takes come back short
        (a rate that does not bind costs no report of its own)."""
        key = policy.key
        self.unreported[key] += 1
        self._ended[key] = asyncio.get_running_loop().time()
        if key in self._short and key not in self._reports:
            loop = asyncio.get_running_loop()
            self._reports[key] = loop.call_later(rate.period * REPORT_AFTER, self._report, policy, rate)

    def _report(self, policy: DestinationPolicy, rate: Rate) -> None:
        key = policy.key
        self._reports.pop(key, None)
        if not self.unreported[key]:
            return
        asking = self._refills.get(key)
        if asking is not None and not asking.done():  # a take under way: the next one carries them
            self._reports[key] = asyncio.get_running_loop().call_later(
                rate.period * REPORT_AFTER, self._report, policy, rate
            )
            return
        self._start(policy, want=0)

    async def aclose(self) -> None:
        for timer in [*self._timers.values(), *self._reports.values()]:
            timer.cancel()
        self._timers.clear()
        self._reports.clear()
        tasks = list(self._refills.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


__all__ = ["RATE_TARGET", "REPORT_AFTER", "Tokens", "next_ask"]

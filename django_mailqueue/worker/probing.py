"""Slow start: the decisions before a new connection to a destination, and one worker process's probes.

A destination this worker has not seen accept a session recently is *cold*: before a new connection to
it, one attempt of the worker (the leader) takes the store's probe for it, shared by every worker of the
store (`QueueStore.take_probe`), and opens the one connection; the worker's other attempts for it wait
for the leader, the other workers for the store's probe. A session accepted ends the probe: the
destination is healthy for `HEALTHY_FOR` seconds, everybody goes. A `421` turns the probe into the
suspension. docs/shaping.md, "Slow start", says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

#: Seconds a destination stays healthy to a worker after a session of its was accepted (each one accepted
#: starts them again): its new connections go without a probe meanwhile.
HEALTHY_FOR = 300.0
#: Seconds before the store's probe of a destination is asked again while another worker holds it: the first
#: wait, doubled each time up to `PROBE_RECHECK_MAX`.
PROBE_RECHECK = 0.02
PROBE_RECHECK_MAX = 0.5


class Step(Enum):
    """What an attempt does right before a new connection to a destination."""

    #: it is healthy (or this attempt is its probe): connect, after the usual read of the suspensions
    GO = "go"
    #: another attempt of this worker leads its probe: wait for it
    WAIT = "wait"
    #: cold, nobody of this worker leads: lead, and take the store's probe
    ASK = "ask"


def next_step(*, healthy_until: float | None, leader: str | None, holder: str, now: float) -> Step:
    """The step before a new connection by `holder` (an attempt's token for one destination), from this worker's
    view: the destination healthy until `healthy_until` (loop time, None: never seen), its probe led by
    `leader` (None: nobody)."""
    if leader == holder:
        return Step.ASK  # its own probe: renewed before each new connection (the next MX host)
    if healthy_until is not None and now < healthy_until:
        return Step.GO
    return Step.WAIT if leader is not None else Step.ASK


def recheck_after(asked: int) -> float:
    """Seconds before the store's probe is asked again, after `asked` asks found another worker's in force: soon
    at first (a healthy server greets within milliseconds), then less often (one that hangs)."""
    return min(PROBE_RECHECK_MAX, PROBE_RECHECK * 2.0 ** max(0, asked - 1))


def probe_hold(needed: float, lease: float) -> tuple[float, float | None]:
    """How long the store's probe is taken for, and every how many seconds it is renewed while its session is
    still being accepted (None: never): the `needed` seconds (connect and greeting timeouts), but no longer
    than a lease — a worker that died holding it keeps its destination waiting no longer than its items."""
    if needed <= lease:
        return needed, None
    return lease, max(0.05, lease / 2)


@dataclass
class Lead:
    """This worker's attempt leading a destination's probe, and what its waiters wait on."""

    holder: str
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: it holds the store's probe (taken, not ended)
    taken: bool = False


class Probes:
    """One worker's slow-start state: which destinations are healthy, which probes it leads. No I/O."""

    def __init__(self) -> None:
        #: shaping key -> loop time it stays healthy until
        self._healthy: dict[str, float] = {}
        self._leads: dict[str, Lead] = {}

    def step(self, key: str, holder: str, now: float) -> Step:
        lead = self._leads.get(key)
        return next_step(
            healthy_until=self._healthy.get(key), leader=None if lead is None else lead.holder, holder=holder, now=now
        )

    @property
    def led(self) -> Mapping[str, Lead]:
        """The destinations (shaping keys) whose probe an attempt of this worker leads."""
        return self._leads

    def cold(self, key: str, now: float) -> bool:
        """A probe of the destination is under way (led here): new attempts for it wait, holding no slot."""
        return key in self._leads and not self.healthy(key, now)

    def healthy(self, key: str, now: float) -> bool:
        until = self._healthy.get(key)
        return until is not None and now < until

    def lead(self, key: str, holder: str) -> Lead:
        lead = self._leads.get(key)
        if lead is None or lead.holder != holder:
            lead = self._leads[key] = Lead(holder)
        return lead

    def waiting_on(self, key: str) -> asyncio.Event | None:
        lead = self._leads.get(key)
        return None if lead is None else lead.done

    def accepted(self, key: str, holder: str, now: float) -> bool:
        """A session of `holder`'s to the destination was accepted: healthy; its probe (if it led it) ends. True
        when `holder` held the store's probe (the caller ends it there)."""
        if len(self._healthy) >= 100_000:
            self._healthy = {k: t for k, t in self._healthy.items() if t > now}
        self._healthy[key] = now + HEALTHY_FOR
        return self.end(key, holder)

    def end(self, key: str, holder: str) -> bool:
        """`holder`'s lead of the destination ends (its waiters go on); True when it held the store's probe."""
        lead = self._leads.get(key)
        if lead is None or lead.holder != holder:
            return False
        del self._leads[key]
        lead.done.set()
        return lead.taken

    def suspended(self, key: str) -> None:
        """A suspension of the destination: healthy no more (after it, the first connection is a probe again)."""
        self._healthy.pop(key, None)

    def leads(self, holder: str) -> list[str]:
        return [key for key, lead in self._leads.items() if lead.holder == holder]

    def close(self) -> None:
        for lead in self._leads.values():
            lead.done.set()
        self._leads.clear()


__all__ = [
    "HEALTHY_FOR",
    "PROBE_RECHECK",
    "PROBE_RECHECK_MAX",
    "Lead",
    "Probes",
    "Step",
    "next_step",
    "probe_hold",
    "recheck_after",
]

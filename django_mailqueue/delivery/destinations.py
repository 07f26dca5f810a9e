"""What an attempt tells about each destination it tried (for traffic shaping), and what it asks of the shaper."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..core.items import Reply
from ..core.shaping import Suspension
from ..shaping import DestinationPolicy
from . import replies


@dataclass(frozen=True)
class DestinationReport:
    """One destination of an attempt: the replies its servers gave, and whether any took mail or answered."""

    policy: DestinationPolicy
    #: the recipient domain (MX routes) or the relay's host
    name: str
    #: the servers' replies and the queue's own about them (a skipped host's, each recipient's), in order
    replies: tuple[Reply, ...] = ()
    #: a recipient of it was delivered
    delivered: bool = False
    #: servers were tried and none answered at all (refused, timed out, no greeting)
    unreachable: bool = False
    #: not tried: it is suspended (its recipients wait for the end)
    suspended: Suspension | None = None
    #: the attempt's token before its new connections to it (slow start: the store's probe it may hold)
    holder: str = ""


def unreachable(skipped: Sequence[bool]) -> bool:
    """Whether the hosts an attempt skipped (each: it could not be reached, `SessionReport.unreachable`) say no
    server could be reached at all: refused, connect timeout, no greeting — never a server's reply, a TLS
    handshake failure, a DNS problem or anything after a greeting."""
    return bool(skipped) and all(skipped)


def suspended_reply(suspension: Suspension) -> Reply:
    """The reply of a recipient not tried because its destination is suspended."""
    return replies.own_reply(
        replies.SUSPENDED,
        f"{suspension.destination} is suspended until {suspension.until:%Y-%m-%d %H:%M:%S} UTC after: "
        f"{suspension.reply}",
    )


class DestinationGate(Protocol):
    """What the `Deliverer` asks of the worker's traffic shaping (`worker.shaper.Shaper`)."""

    def learn(self, domain: str, policy: DestinationPolicy) -> None:
        """The destination `domain` belongs to, now its MX hosts are known (MX rollup)."""
        ...

    def suspended(self, key: str) -> Suspension | None:
        """The suspension in force for a shaping key, as this worker knows it (no I/O)."""
        ...

    def ready(self, policy: DestinationPolicy) -> bool:
        """Whether `enter` would answer at once (no read of the store, no token to wait for): then `suspended` is
        its answer (no I/O)."""
        ...

    async def enter(self, policy: DestinationPolicy) -> Suspension | None:
        """Before the destination's sessions: its suspension, else None once its rate allows one more message."""
        ...

    async def current(self, key: str) -> Suspension | None:
        """Right before a new connection to the destination: its suspension as the store has it now (a read
        begun after this call, which the worker's other callers share), else None."""
        ...

    async def connect(self, key: str, holder: str, *, seconds: float, deadline: float) -> Suspension | None:
        """Right before `holder` opens a new connection to the destination: its suspension, else None once it may
        connect — at once when it is healthy, else once `holder` holds its probe (slow start; `seconds`: how long
        the probe holds if `holder` never ends it)."""
        ...

    def accepted(self, key: str, holder: str) -> None:
        """A session `holder` opened to the destination was accepted: it is healthy, a probe of `holder`'s ends."""
        ...

    def left(self, holder: str) -> None:
        """`holder`'s sessions are over, however they ended (the attempt's report follows to `observe`)."""
        ...


__all__ = ["DestinationGate", "DestinationReport", "suspended_reply", "unreachable"]

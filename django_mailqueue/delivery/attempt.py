"""What one delivery attempt carries: its result, the destinations it splits into, each one's progress, the message."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ..conf import Route
from ..core.errors import QueueError
from ..core.items import RecipientOutcome, RecipientState
from .addresses import EnvelopeAddress
from .destinations import DestinationReport


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt decided: one outcome per recipient given, in the same order."""

    outcomes: tuple[RecipientOutcome, ...]
    #: recipients whose reply after the final "." was lost: deferred, but perhaps delivered
    possibly_delivered: frozenset[str] = frozenset()
    #: things for the operator (a misconfigured route, a relay without TLS, ...): the `error` signal
    errors: tuple[QueueError, ...] = ()
    started: datetime | None = None
    finished: datetime | None = None
    #: what each destination's servers said, for traffic shaping
    destinations: tuple[DestinationReport, ...] = ()

    @property
    def held_until(self) -> datetime | None:
        """Nothing was tried, every destination being suspended: when the first suspension ends (else None)."""
        ends = [d.suspended.until for d in self.destinations if d.suspended is not None]
        if not ends or len(ends) < len(self.destinations) or any(o.state.final for o in self.outcomes):
            return None
        return min(ends)

    def by_state(self, state: RecipientState) -> tuple[RecipientOutcome, ...]:
        return tuple(o for o in self.outcomes if o.state is state)


@dataclass
class Destination:
    """Recipients that share a route and a next hop (a domain's MX hosts, or a relay)."""

    route: Route
    #: the recipient domain (MX routes) or the relay's host (relay routes)
    name: str
    recipients: list[EnvelopeAddress] = field(default_factory=list)
    #: the address when `name` is one (a relay's HOST, a recipient's address literal): no lookup
    literal: str | None = None

    @property
    def wire_recipients(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.wire for r in self.recipients))


@dataclass
class Progress:
    """One destination's outcomes so far, and what its servers said."""

    outcomes: dict[str, RecipientOutcome] = field(default_factory=dict)
    possibly_delivered: set[str] = field(default_factory=set)
    errors: list[QueueError] = field(default_factory=list)
    #: the destination's task raised (a bug): what it left undecided is deferred as an internal error
    failed: bool = False
    #: what its servers said, for traffic shaping
    report: DestinationReport | None = None

    def add_error(self, error: QueueError) -> None:
        if all(str(e) != str(error) for e in self.errors):
            self.errors.append(error)


@dataclass(frozen=True)
class PreparedMessage:
    """The message as it goes on the wire: normalised (and signed), and what its bytes need from a server."""

    data: bytes
    size: int
    utf8_headers: bool
    eightbit: bool

"""The `Transport` protocol: one SMTP session to one server address, and what it reports.

The `Deliverer` decides where to go (routes, MX hosts, the order of
addresses); a `Transport` talks to one of them and says, per recipient,
what happened. The default one (`SmtpTransport`) speaks SMTP with
aiosmtplib; a test double can stand in so a worker runs without a network.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ..conf import Timeouts
from ..core.errors import Code, QueueError
from ..core.items import RecipientOutcome, RecipientState, Reply
from ..core.masking import NO_SECRETS, SecretMask

#: How a session uses TLS: `opportunistic` (MX routes: STARTTLS when offered,
#: unverified, plain text when it fails), `starttls` / `implicit` (relay
#: routes: required and verified), `verify` (MX hosts under an MTA-STS policy:
#: STARTTLS required, verified against the MX name; a failure skips the host
#: and the `Deliverer` reports it), `none` (plain text), `never` (the plain
#: text retry of an opportunistic session whose handshake failed).
TlsPolicy = Literal["opportunistic", "starttls", "verify", "implicit", "none", "never"]


class DestinationError(QueueError):
    """A `QueueError` about one destination (a relay route's host, a recipient domain), which `destination`
    names: the worker logs one WARNING per destination, problem and minute, not one per message."""

    def __init__(self, code: Code, message: str, *, destination: str) -> None:
        super().__init__(code, message)
        self.destination = destination


@dataclass(frozen=True)
class Target:
    """One server address to open a session with, and how."""

    #: the host's name: SNI, certificate matching (relays), and the outcomes' `remote_mta`
    host: str
    #: the IP address to connect to
    address: str
    port: int
    tls: TlsPolicy
    #: the context for STARTTLS / implicit TLS (None for `none` / `never`)
    tls_context: ssl.SSLContext | None
    #: the EHLO name
    helo_name: str
    timeouts: Timeouts
    #: the attempt's deadline, in `loop.time()` seconds: the session ends by then whatever happens
    deadline: float
    #: relay credentials: AUTH is sent only over TLS, or when the route says TLS "none"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    #: the destination's shaping key, and its limits in this process (None: none)
    destination: str = ""
    connections: int | None = None
    messages_per_connection: int | None = None
    #: asked right before a new connection is opened (never for a cached one): a reply (the destination is
    #: suspended) means none is opened and the session reports it as `withheld`
    before_connect: Callable[[], Awaitable[Reply | None]] | None = field(default=None, compare=False, repr=False)
    #: called once a new connection's session was accepted (greeting, EHLO, STARTTLS, AUTH): slow start's
    #: word that the destination is healthy
    accepted: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        """`host[address]:port`, as log lines and the queue's own replies name a server."""
        return f"{self.host}[{self.address}]:{self.port}"

    @property
    def mask(self) -> SecretMask:
        return SecretMask(self.password, self.username) if self.password else NO_SECRETS


@dataclass(frozen=True)
class Envelope:
    """One destination's share of an attempt: what MAIL FROM, RCPT TO and DATA carry."""

    #: the sender as on the wire ("" for the null sender)
    sender: str
    #: the recipients as on the wire, without duplicates
    recipients: tuple[str, ...]
    #: the message as DATA carries it (CRLF, dot-stuffed), without the final ".\r\n" the session adds
    data: bytes
    #: the message size for SIZE (the CRLF-normalised message)
    size: int
    #: the header section holds non-ASCII (so SMTPUTF8 is needed, whatever the addresses)
    utf8_headers: bool
    #: the message holds 8-bit bytes (BODY=8BITMIME when offered)
    eightbit: bool
    #: the most recipients in one transaction; more make several transactions in the session
    rcpt_limit: int = 100


@dataclass
class SessionReport:
    """What one session decided. Filled as the session goes, so a cut-off session still tells.

    `outcomes` is keyed by wire recipient. `next_host` set means the session
    failed before any transaction began (connection refused, a 4xx/5xx
    greeting, a TLS or AUTH failure): the caller tries the next address, and
    if none is left every recipient gets that (temporary) reply.
    """

    host: str
    outcomes: dict[str, RecipientOutcome] = field(default_factory=dict)
    next_host: Reply | None = None
    #: wire recipients whose reply after the final "." was lost: deferred, but maybe delivered
    possibly_delivered: set[str] = field(default_factory=set)
    #: things for the operator (the worker sends them on the `error` signal)
    errors: list[QueueError] = field(default_factory=list)
    #: recipients the final "." was sent for, their reply not read yet
    awaiting_reply: set[str] = field(default_factory=set)
    #: the session ended (a 421, a dropped connection): no more transactions in it
    ended: bool = False
    #: a cached connection was found closed before anything was said: the caller tries a new one
    stale_connection: bool = False
    #: no connection was opened: `Target.before_connect` answered `next_host` (nothing was tried)
    withheld: bool = False
    #: `next_host` says the server could not be reached: the connection was refused or timed out, or no
    #: greeting came (a dead destination's sign; never a TLS failure, a reply, or anything after the greeting)
    unreachable: bool = False

    def decide(self, recipient: str, reply: Reply, state: RecipientState) -> None:
        self.outcomes[recipient] = RecipientOutcome(recipient, state, reply, self.host)

    def decide_rest(self, recipients: tuple[str, ...] | list[str], reply: Reply, state: RecipientState) -> None:
        """Give `reply` to each of `recipients` not decided yet."""
        for recipient in recipients:
            if recipient not in self.outcomes:
                self.decide(recipient, reply, state)


class Transport(Protocol):
    """Delivers one envelope through one server address. Never raises for a network or SMTP problem."""

    async def send(self, target: Target, envelope: Envelope) -> SessionReport: ...

    async def aclose(self) -> None: ...


__all__ = ["DestinationError", "Envelope", "SessionReport", "Target", "TlsPolicy", "Transport"]

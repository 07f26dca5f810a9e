"""The `Deliverer`: one delivery attempt of one item — routes, destinations, sessions, one outcome per recipient."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
import ssl
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ..conf import MxRoute, QueueSettings, RelayRoute, Route, Timeouts
from ..core.clock import Clock, SystemClock
from ..core.errors import Code, QueueError
from ..core.items import RecipientOutcome, RecipientState, Reply
from ..core.masking import SecretMask
from ..core.observer import Observer
from ..core.shaping import Suspension
from ..shaping import DestinationPolicy, probe_seconds
from . import replies
from .addresses import EnvelopeAddress, parse_address, parse_sender
from .attempt import AttemptResult, Destination, PreparedMessage, Progress
from .destinations import DestinationGate, DestinationReport, suspended_reply, unreachable
from .mta_sts import StsPolicies, StsPolicy
from .resolver import DnsResolver, MailHost, MxResolver, Resolution
from .routing import DestinationKey, Routing, sender_address
from .smtp import SmtpTransport
from .tls import RelayContextFactory, RouteContexts, mx_verified_context, relay_context
from .transport import DestinationError, Envelope, SessionReport, Target, Transport
from .wire import dot_stuff, has_8bit, headers_need_smtputf8, normalize_line_endings

if TYPE_CHECKING:
    from ..dkim import DkimSigner
    from .signing import SigningThread

logger = logging.getLogger("django_mailqueue.delivery")

#: Seconds past the attempt's deadline a session (a custom transport) may take to wind up before it is cancelled.
DEADLINE_GRACE = 1.0
#: Messages larger than this are normalised (and signed) in a thread, off the event loop.
_THREAD_THRESHOLD = 1024 * 1024
#: DKIM algorithms whose private-key operation runs in the signing thread: RSA (~0.25 ms for 2048 bits);
#: Ed25519's (~0.04 ms) costs less than handing it over
_SIGNED_IN_THREAD = frozenset({b"rsa-sha256"})


def _signed(signer: DkimSigner | None, normalized: bytes) -> bytes:
    return normalized if signer is None else signer.sign(normalized)


def _signer_of(settings: QueueSettings) -> DkimSigner | None:
    if not settings.dkim:
        return None  # the signer's modules are imported only where DKIM is set (docs/performance.md)
    from ..dkim import DkimSigner

    return DkimSigner.from_settings(settings.dkim)


def _signing_thread(signer: DkimSigner) -> SigningThread:
    from .signing import SigningThread

    return SigningThread(signer)


class Deliverer:
    """Delivers an item's message to its recipients, once, and says what happened to each.

    `deliver` never raises for a network, DNS or SMTP problem: everything
    becomes a recipient outcome. Sessions to different destinations run
    concurrently (at most `max_sessions` at once); the whole attempt —
    DNS included — ends by `settings.timeouts.session`. Each destination's
    limits (`settings.shaping`, a relay's own) go to the transport with its
    `Target`; with a `gate` (the worker's `Shaper`), a suspended destination
    is not tried and a rate is kept.
    """

    def __init__(
        self,
        settings: QueueSettings,
        *,
        clock: Clock | None = None,
        transport: Transport | None = None,
        resolver: MxResolver | None = None,
        relay_tls_context: RelayContextFactory | None = None,
        max_sessions: int = 20,
        signer: DkimSigner | None = None,
        mta_sts: StsPolicies | None = None,
        observer: Observer | None = None,
        gate: DestinationGate | None = None,
        concurrency: int | None = None,
    ) -> None:
        self.settings = settings
        self.gate = gate
        #: the worker's slots, for the default CONNECTIONS of a destination
        self._concurrency = concurrency or settings.concurrency
        #: each destination's shaping policy, by its route (relays) or its domain and MX hosts
        self._policies: dict[DestinationKey, DestinationPolicy] = {}
        self.clock = clock or SystemClock()
        self.transport: Transport = transport or SmtpTransport()
        self.resolver: MxResolver = resolver or DnsResolver(settings.dns)
        #: each route's TLS context, made once
        self._contexts = RouteContexts(relay_tls_context or relay_context)
        self._max_sessions = max_sessions
        self.observer = observer
        #: DKIM keys are read here, once per worker: a bad one stops the worker before it claims anything
        self._signer = signer or _signer_of(settings)
        #: the thread RSA signatures' private-key operations run in, handed over in batches
        self._signing = None if self._signer is None else _signing_thread(self._signer)
        # MTA-STS looks names up through MAILQUEUE["DNS"]: not behind the back of an injected resolver
        self._sts = mta_sts or (StsPolicies(settings.dns) if settings.mta_sts and resolver is None else None)
        self._sts_context: ssl.SSLContext | None = None
        #: the tokens of this worker's attempts before their new connections (slow start's probe holders)
        self._holders_prefix = f"{uuid.uuid4().hex[:16]}-"
        self._holders = itertools.count(1)
        #: each recipient domain's destination key and route, an address's hosts: worked out once
        self._routing = Routing(settings)

    async def aclose(self) -> None:
        """Close the transport's cached connections (each gets its QUIT), and end the DKIM signing thread."""
        await self.transport.aclose()
        if self._signing is not None:
            self._signing.close()

    async def deliver(self, sender: str, recipients: Sequence[str], message: bytes) -> AttemptResult:
        started = self.clock.now()
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + self.settings.timeouts.session
        given = list(recipients)
        envelope_sender = sender_address(sender) if type(sender) is str else parse_sender(sender, domainless=True)
        if envelope_sender is None:
            reply = replies.own_reply(replies.BAD_SENDER, f"sender address {sender!r} cannot be carried by SMTP")
            refused = tuple(RecipientOutcome(str(r), RecipientState.FAILED, reply) for r in given)
            logger.info("sender %r refused: every recipient failed (%s)", sender, reply)
            return AttemptResult(refused, started=started, finished=self.clock.now())

        decided: dict[str, RecipientOutcome] = {}
        #: each recipient that goes to a destination, and that destination's key
        parsed: dict[str, tuple[EnvelopeAddress, DestinationKey]] = {}
        destinations: dict[DestinationKey, Destination] = {}
        for address in given:
            if address in decided or address in parsed:
                continue
            admitted = self._admit(address, envelope_sender)
            if isinstance(admitted, Reply):
                decided[address] = RecipientOutcome(str(address), RecipientState.FAILED, admitted)
                continue
            recipient, key, route = admitted
            parsed[address] = (recipient, key)
            dest = destinations.get(key)
            if dest is None:
                dest = destinations[key] = self._routing.destination(route, recipient)
            dest.recipients.append(recipient)

        progress: dict[DestinationKey, Progress] = {key: Progress() for key in destinations}
        if destinations:
            wire = await self._message(message)
            # one destination (most messages) is one session: nothing to bound
            semaphore = asyncio.Semaphore(self._max_sessions) if len(destinations) > 1 else None
            sessions = [
                self._deliver_to(dest, envelope_sender.wire, wire, deadline, progress[key], semaphore)
                for key, dest in destinations.items()
            ]
            # Past the deadline (and its grace) the sessions still running are cancelled; their
            # recipients stay without an outcome and are deferred below.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout_at(deadline + DEADLINE_GRACE):
                    if len(sessions) == 1:
                        await sessions[0]  # most messages: one session, in this task
                    else:
                        await asyncio.gather(*sessions)
        outcomes: list[RecipientOutcome] = []
        possibly: set[str] = set()
        errors: list[QueueError] = []
        for key in destinations:
            for error in progress[key].errors:
                if all(str(e) != str(error) for e in errors):
                    errors.append(error)
        for address in given:
            if address in decided:
                outcomes.append(decided[address])
                continue
            recipient, key = parsed[address]
            done = progress[key]
            found = done.outcomes.get(recipient.wire)
            if found is None:
                found = RecipientOutcome(recipient.wire, RecipientState.PENDING, self._unfinished(done))
            # reported under the address as given: the session's own outcome when that is its wire form
            if found.address != address:
                found = RecipientOutcome(address, found.state, found.reply, found.remote_mta)
            outcomes.append(found)
            if done.possibly_delivered and recipient.wire in done.possibly_delivered:
                possibly.add(address)
        if self.observer is not None:
            self.observer.attempt(loop.time() - began)
        reports = tuple(p.report for p in progress.values() if p.report is not None)
        return AttemptResult(
            tuple(outcomes),
            frozenset(possibly),
            tuple(errors),
            started=started,
            finished=self.clock.now(),
            destinations=reports,
        )

    def _unfinished(self, progress: Progress) -> Reply:
        """The reply for a recipient its session left without an outcome."""
        if progress.failed:
            return replies.own_reply(replies.INTERNAL, "internal error during delivery (see the log)")
        return replies.own_reply(replies.NO_ANSWER, f"attempt deadline of {self.settings.timeouts.session:g} s passed")

    # --- grouping -------------------------------------------------------------------

    def _admit(self, address: str, sender: EnvelopeAddress) -> tuple[EnvelopeAddress, DestinationKey, Route] | Reply:
        """The recipient with its destination's key and route, or the reply that fails it unsent. An address
        without a domain goes to a relay only."""
        recipient = parse_address(address, domainless=True)
        if recipient is None:
            return replies.own_reply(replies.BAD_RECIPIENT, f"recipient address {address!r} cannot be carried by SMTP")
        key, route = self._routing.of(recipient.domain)
        if isinstance(route, RelayRoute):
            return recipient, key, route
        if not recipient.domain:
            return replies.own_reply(
                replies.BAD_RECIPIENT,
                f"recipient address {address!r} has no domain, and only a relay route can take one",
            )
        if sender.wire and not sender.domain:
            return replies.own_reply(
                replies.BAD_SENDER,
                f"sender address {sender.given!r} has no domain, and {recipient.domain} is routed to its MX hosts",
            )
        return recipient, key, route

    async def _message(self, message: bytes) -> PreparedMessage:
        signer = self._signer

        def build(normalized: bytes) -> PreparedMessage:
            eightbit = has_8bit(normalized)  # an ASCII message has ASCII headers: no second look
            return PreparedMessage(
                dot_stuff(normalized), len(normalized), eightbit and headers_need_smtputf8(normalized), eightbit
            )

        if len(message) > _THREAD_THRESHOLD:
            return await asyncio.to_thread(lambda: build(_signed(signer, normalize_line_endings(message))))
        normalized = normalize_line_endings(message)
        if signer is not None:  # over exactly what goes on the wire, before dot-stuffing
            pending = signer.prepare(normalized)
            if isinstance(pending, bytes):
                normalized = pending + normalized
            elif pending.algorithm in _SIGNED_IN_THREAD and self._signing is not None:
                # OpenSSL's RSA (~0.25 ms) with the GIL released: on another core while this loop runs sessions
                normalized = await self._signing.sign(pending) + normalized
            else:
                normalized = signer.finish(pending, pending.private_key_operation) + normalized
        return build(normalized)

    # --- one destination --------------------------------------------------------------

    async def _resolve(self, dest: Destination, deadline: float) -> Resolution:
        if dest.literal is not None:
            return self._routing.literal(dest.name, dest.literal)
        try:
            async with asyncio.timeout_at(deadline):
                if isinstance(dest.route, RelayRoute):
                    return await self.resolver.resolve_host(dest.route.host)
                return await self.resolver.resolve_domain(dest.name)
        except TimeoutError:
            return Resolution(
                failure=replies.own_reply(
                    replies.DNS_TEMPORARY, f"DNS lookup of {dest.name} did not finish before the attempt deadline"
                )
            )
        except Exception as exc:
            logger.error("resolver bug looking up %s: %s", dest.name, type(exc).__name__)
            return Resolution(failure=replies.own_reply(replies.DNS_TEMPORARY, f"DNS lookup of {dest.name} failed"))

    async def _deliver_to(
        self,
        dest: Destination,
        sender: str,
        message: PreparedMessage,
        deadline: float,
        progress: Progress,
        semaphore: asyncio.Semaphore | None,
    ) -> None:
        """One destination's sessions (at most `semaphore`'s at once); a bug in them defers its recipients (never
        raises)."""
        holder = f"{self._holders_prefix}{next(self._holders)}"
        try:
            if semaphore is None:
                await self._deliver_to_destination(dest, sender, message, deadline, progress, holder)
            else:
                async with semaphore:
                    await self._deliver_to_destination(dest, sender, message, deadline, progress, holder)
        except Exception as exc:
            logger.error("delivery bug delivering to %s: %s", dest.name, type(exc).__name__)
            progress.failed = True
        finally:
            if self.gate is not None:
                self.gate.left(holder)

    async def _deliver_to_destination(
        self,
        dest: Destination,
        sender: str,
        message: PreparedMessage,
        deadline: float,
        progress: Progress,
        holder: str,
    ) -> None:
        loop = asyncio.get_running_loop()
        route = dest.route
        recipients = dest.wire_recipients

        def decide_all(reply: Reply, state: RecipientState, remote_mta: str = "") -> None:
            for recipient in recipients:
                if recipient not in progress.outcomes:
                    progress.outcomes[recipient] = RecipientOutcome(recipient, state, reply, remote_mta)

        if dest.literal is not None:  # no coroutine a message for what needs no lookup
            resolution = self._routing.literal(dest.name, dest.literal)
        else:
            resolution = await self._resolve(dest, deadline)
        if resolution.failure is not None:
            decide_all(resolution.failure, replies.state_of(resolution.failure))
            if resolution.failure.status == replies.MISCONFIGURED:
                text = f"route for {dest.name}: {resolution.failure.text}"
                progress.add_error(DestinationError(Code.INVALID_OPTION, text, destination=dest.name))
            logger.info("%s: %s", dest.name, resolution.failure)
            return
        if isinstance(route, RelayRoute):
            port, username, password = route.port, route.username, route.password
        else:
            port, username, password = self.settings.mx_port, None, None
        try:
            policy, context = self._contexts.known(route) or await self._contexts.of(route)
        except Exception as exc:
            text = f"TLS for {dest.name} cannot be set up: {type(exc).__name__}: {exc}"
            if isinstance(route, RelayRoute):
                text = SecretMask(route.password, route.username)(text)
            progress.add_error(DestinationError(Code.INVALID_OPTION, text, destination=dest.name))
            decide_all(replies.own_reply(replies.MISCONFIGURED, text), RecipientState.PENDING)
            return

        envelope = Envelope(
            sender=sender,
            recipients=recipients,
            data=message.data,
            size=message.size,
            utf8_headers=message.utf8_headers,
            eightbit=message.eightbit,
            rcpt_limit=self.settings.rcpt_limit,
        )
        hosts = resolution.hosts
        # no coroutine a message when MTA-STS cannot apply (off, a relay, an address literal)
        sts = await self._sts_policy(dest, deadline) if self._sts_applies(dest) else None
        if sts is not None:
            hosts = self._sts_hosts(sts, dest, hosts, progress)
            if not hosts:
                reply = replies.own_reply(replies.TLS_FAILED, f"{sts.describe()} lists none of the MX hosts")
                decide_all(reply, RecipientState.PENDING)
                return
        shaped = self._policy(dest, hosts)
        gate = self.gate
        if gate is None or gate.ready(shaped):  # most messages: the gate answers at once, no coroutine, no deadline
            held = None if gate is None else gate.suspended(shaped.key)
        else:
            held = await self._enter(shaped, deadline)
        if held is not None:
            decide_all(suspended_reply(held), RecipientState.PENDING)
            progress.report = DestinationReport(shaped, dest.name, suspended=held)
            return
        last: Reply | None = None
        last_host = ""
        seen: list[Reply] = []
        #: per skipped host: it could not be reached (SessionReport.unreachable)
        dead: list[bool] = []
        timeouts = self.settings.timeouts_for(route)
        before_connect = self._before_connect(shaped.key, holder, timeouts, deadline)
        accepted = self._accepted(shaped.key, holder)
        for host, address in _addresses(hosts, self.settings.mx_address_limit):
            if loop.time() >= deadline:
                break
            held = self.gate.suspended(shaped.key) if self.gate is not None else None
            if held is not None and not seen:  # suspended meanwhile, nothing tried: a wait, not an attempt
                decide_all(suspended_reply(held), RecipientState.PENDING)
                progress.report = DestinationReport(shaped, dest.name, suspended=held, holder=holder)
                return
            if held is not None:  # another attempt was told to slow down meanwhile: no new session
                last = suspended_reply(held)
                break
            target = Target(
                host=host,
                address=address,
                port=port,
                tls=policy,
                tls_context=context,
                helo_name=self.settings.hostname,
                timeouts=timeouts,
                deadline=deadline,
                username=username,
                password=password,
                destination=shaped.key,
                connections=shaped.limits.connections,
                messages_per_connection=shaped.limits.messages_per_connection,
                before_connect=before_connect,
                accepted=accepted,
            )
            began = loop.time()
            if sts is None:
                report = await self._send(target, envelope)
            else:
                report = await self._send_under_policy(sts, dest, target, envelope, progress)
            if self.observer is not None:
                self.observer.session(dest.recipients[0].domain, loop.time() - began)
            for error in report.errors:
                progress.add_error(error)
            if report.withheld:  # suspended, found right before a new connection: no session was begun
                held = self.gate.suspended(shaped.key) if self.gate is not None else None
                if held is not None and not seen:  # nothing tried: a wait, not an attempt
                    decide_all(suspended_reply(held), RecipientState.PENDING)
                    progress.report = DestinationReport(shaped, dest.name, suspended=held, holder=holder)
                    return
                last = report.next_host
                break
            if report.next_host is not None and not report.outcomes:
                last, last_host = report.next_host, host
                seen.append(report.next_host)
                dead.append(report.unreachable)
                continue
            for recipient, outcome in report.outcomes.items():
                progress.outcomes.setdefault(recipient, outcome)
            progress.possibly_delivered.update(report.possibly_delivered)
            if any(r not in progress.outcomes for r in recipients):  # the reply is made only when needed
                missing = report.next_host or replies.own_reply(
                    replies.INTERNAL, f"the session with {target.label} left the recipient undecided"
                )
                decide_all(missing, RecipientState.PENDING, host)
            _log_destination(dest.name, target.label, recipients, progress)
            decided = [progress.outcomes[r] for r in recipients if r in progress.outcomes]
            seen.extend(o.reply for o in decided)
            delivered = any(o.state is RecipientState.DELIVERED for o in decided)
            progress.report = DestinationReport(shaped, dest.name, tuple(seen), delivered=delivered, holder=holder)
            return
        if last is None:
            last = replies.own_reply(replies.NO_ANSWER, f"attempt deadline passed before {dest.name} was tried")
        decide_all(last, replies.state_of(last) if last.status.startswith("5") else RecipientState.PENDING, last_host)
        progress.report = DestinationReport(
            shaped, dest.name, tuple(seen), unreachable=unreachable(dead), holder=holder
        )
        logger.info("%s: no server took the mail: %s", dest.name, last)

    def _policy(self, dest: Destination, hosts: tuple[MailHost, ...]) -> DestinationPolicy:
        """The destination's shaping policy: a relay's own limits, or SHAPING's for the domain and its MX hosts."""
        route, shaping = dest.route, self.settings.shaping
        key: DestinationKey
        if isinstance(route, RelayRoute):
            key = self._routing.of(dest.recipients[0].domain)[0]  # ("relay", n): no hash of the route a message
        else:
            key = (dest.name, *(h.name for h in hosts))
        policy = self._policies.get(key)
        if policy is None:
            if len(self._policies) >= 10_000:
                self._policies.clear()
            if isinstance(route, RelayRoute):
                policy = shaping.relay_policy(route.host, route.port, route.limits)
            else:
                policy = shaping.mx_policy(dest.name, [h.name for h in hosts], concurrency=self._concurrency)
            self._policies[key] = policy
        if self.gate is not None:
            self.gate.learn(dest.recipients[0].domain, policy)
        return policy

    def _before_connect(
        self, key: str, holder: str, timeouts: Timeouts, deadline: float
    ) -> Callable[[], Awaitable[Reply | None]] | None:
        """What the transport asks right before it opens a new connection to the destination `key` (a connection,
        not a message: a cached connection is used without it): the store's word on its suspension (a read
        shared by the worker's callers), so no connection is opened to a destination another worker suspended
        before that read; and, to a destination not found healthy yet, the store's probe (slow start)."""
        gate = self.gate
        if gate is None:
            return None

        async def check() -> Reply | None:  # made each attempt, called only before a new connection
            seconds = probe_seconds(timeouts.connect, timeouts.greeting)
            held = await gate.connect(key, holder, seconds=seconds, deadline=deadline)
            return None if held is None else suspended_reply(held)

        return check

    def _accepted(self, key: str, holder: str) -> Callable[[], None] | None:
        gate = self.gate
        return None if gate is None else functools.partial(gate.accepted, key, holder)

    async def _enter(self, policy: DestinationPolicy, deadline: float) -> Suspension | None:
        """The destination's suspension, else None once its rate allows the message (within the deadline)."""
        if self.gate is None:
            return None
        try:
            async with asyncio.timeout_at(deadline):
                return await self.gate.enter(policy)
        except TimeoutError:
            return None  # the sessions find the deadline passed

    async def _send(self, target: Target, envelope: Envelope) -> SessionReport:
        try:
            return await self.transport.send(target, envelope)
        except Exception as exc:  # a transport must not raise; one that does defers, never bounces
            logger.error("transport bug with %s: %s", target.label, type(exc).__name__)
            return SessionReport(
                host=target.host,
                next_host=replies.own_reply(replies.INTERNAL, f"internal error delivering to {target.label}"),
            )

    # --- MTA-STS (RFC 8461) ------------------------------------------------------------

    def _sts_applies(self, dest: Destination) -> bool:
        return self._sts is not None and isinstance(dest.route, MxRoute) and dest.literal is None

    async def _sts_policy(self, dest: Destination, deadline: float) -> StsPolicy | None:
        """The MTA-STS policy that applies to an MX destination (enforce or testing), else None."""
        if self._sts is None or not self._sts_applies(dest):
            return None
        try:
            async with asyncio.timeout_at(deadline):
                policy = await self._sts.policy_for(dest.name)
        except TimeoutError:
            return None
        return policy if policy is not None and policy.mode != "none" else None

    def _sts_hosts(
        self, sts: StsPolicy, dest: Destination, hosts: tuple[MailHost, ...], progress: Progress
    ) -> tuple[MailHost, ...]:
        """The MX hosts to try: under enforce only those the policy lists; testing reports the others."""
        unlisted = [host.name for host in hosts if not sts.matches(host.name)]
        if not unlisted:
            return hosts
        if sts.mode == "testing":
            text = f"{sts.describe()} does not list the MX hosts {', '.join(unlisted)} (sent as before: testing)"
        else:
            text = f"{sts.describe()} does not list the MX hosts {', '.join(unlisted)}: they are not used"
        progress.add_error(DestinationError(Code.TLS_POLICY, text, destination=dest.name))
        return hosts if sts.mode == "testing" else tuple(host for host in hosts if sts.matches(host.name))

    async def _send_under_policy(
        self, sts: StsPolicy, dest: Destination, target: Target, envelope: Envelope, progress: Progress
    ) -> SessionReport:
        """A session with TLS required and verified for the MX host; a TLS failure names the policy.

        Under enforce the host is skipped with 4.7.5; under testing it is reported and the host tried
        again as without the policy (nothing was sent in the failed session: it ends before MAIL FROM).
        """
        if self._sts_context is None:
            self._sts_context = mx_verified_context()
        report = await self._send(dataclasses.replace(target, tls="verify", tls_context=self._sts_context), envelope)
        failure = report.next_host
        if report.outcomes or failure is None or failure.status not in (replies.TLS_NOT_OFFERED, replies.TLS_FAILED):
            return report
        if sts.mode == "testing":
            text = f"{sts.describe()}: {failure.text} (sent as before: testing)"
            progress.add_error(DestinationError(Code.TLS_POLICY, text, destination=dest.name))
            return await self._send(target, envelope)
        text = f"{sts.describe()}: {failure.text}"
        progress.add_error(DestinationError(Code.TLS_POLICY, text, destination=dest.name))
        report.next_host = replies.own_reply(replies.TLS_FAILED, text)
        return report


def _addresses(hosts: tuple[MailHost, ...], limit: int) -> list[tuple[str, str]]:
    """(host name, address) pairs in the order to try, at most `limit` (Postfix's smtp_mx_address_limit)."""
    pairs = [(host.name, address) for host in hosts for address in host.addresses]
    return pairs[: max(1, limit)]


def _log_destination(name: str, label: str, recipients: tuple[str, ...], progress: Progress) -> None:
    if not logger.isEnabledFor(logging.INFO):
        return
    counts = dict.fromkeys(RecipientState, 0)
    for recipient in recipients:
        outcome = progress.outcomes.get(recipient)
        if outcome is not None:
            counts[outcome.state] += 1
    logger.info(
        "%s via %s: %d delivered, %d failed, %d pending",
        name,
        label,
        counts[RecipientState.DELIVERED],
        counts[RecipientState.FAILED],
        counts[RecipientState.PENDING],
    )


__all__ = ["AttemptResult", "Deliverer"]

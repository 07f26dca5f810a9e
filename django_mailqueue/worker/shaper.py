"""Traffic shaping at run time: a worker's connection slots, its tokens from the store, its view of suspensions.

The decisions are `shaping.py`'s; this module holds the state one worker
process keeps to apply them cheaply — no store round trip per message:
tokens come from the store's bucket a few at a time, suspensions from a
local view refreshed at most every `VIEW_TTL` seconds (and at once by this
worker's own suspensions). docs/shaping.md says how it behaves.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..conf import QueueSettings, RelayRoute
from ..core.clock import Clock
from ..core.errors import QueueError
from ..core.items import QueueItem, Reply
from ..core.shaping import Suspension
from ..delivery.destinations import DestinationReport
from ..shaping import DestinationPolicy, is_dead, relay_key, suspends, suspension_seconds
from ..stores.base import QueueStore
from .probing import Probes, Step, probe_hold, recheck_after
from .tokens import Tokens

logger = logging.getLogger("django_mailqueue")

#: Seconds the local view of the store's suspensions is trusted before it is read again: how long another
#: worker may go on opening sessions to a destination one worker has suspended.
VIEW_TTL = 0.25
#: Seconds an item may wait in a worker for its destination's turn; one that would wait longer (past the
#: prefetch) goes back to the store, due when its turn comes.
GIVE_BACK_AFTER = 2.0
#: Seconds between two looks at the items waiting past the prefetch, while nothing else wakes the worker.
BLOCKED_RECHECK = 0.5
#: Domains remembered (for MX rollup and `defer_destination`) before the memory starts again.
MAX_DOMAINS = 100_000
#: The most domains one `defer_destination` names (a relay's busiest first); the rest are held as they come.
MAX_DEFER_DOMAINS = 1000


@dataclass(frozen=True)
class Ticket:
    """An attempt's admission: the destinations it holds a connection slot of, each with a token taken."""

    policies: tuple[DestinationPolicy, ...] = ()
    #: loop time of the admission
    began: float = 0.0
    #: destinations whose token the deliverer took after the admission (`enter`): reported done with the others
    later: list[DestinationPolicy] = field(default_factory=list, compare=False)


@dataclass(frozen=True)
class Hold:
    """Every destination of the item is suspended: it waits for `suspension`'s end, no attempt made."""

    suspension: Suspension


@dataclass(frozen=True)
class Wait:
    """A destination of the item is at its connection limit, or out of tokens: it waits, holding no slot."""

    policy: DestinationPolicy


#: The admission of the attempt this task runs (set by the worker, read by the deliverer through `enter`).
TICKET: ContextVar[Ticket | None] = ContextVar("mailqueue_ticket", default=None)


def _shared_relays(settings: QueueSettings) -> frozenset[str]:
    """The relays (shaping keys) that some routes reach with a RATE or a CONNECTIONS and others without."""
    bound: dict[str, set[bool]] = {}
    for route in settings.routes.values():
        if isinstance(route, RelayRoute):
            limits = route.limits
            bound.setdefault(relay_key(route.host, route.port), set()).add(
                limits.rate is not None or limits.connections is not None
            )
    return frozenset(key for key, kinds in bound.items() if len(kinds) > 1)


class Shaper:
    """One worker process's traffic shaping; also the `Deliverer`'s `DestinationGate`.

    `admit` (no I/O) says whether an item may start now: its destinations' connection slots and tokens,
    or that they are all suspended. `observe` acts on what an attempt's servers said: it suspends a
    destination (in the store, for every worker) and moves its waiting items, or clears its strikes.
    `wake` is called when a refill or a suspension's end may let a waiting item start.
    """

    def __init__(
        self,
        settings: QueueSettings,
        store: QueueStore,
        *,
        clock: Clock,
        concurrency: int | None = None,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.concurrency = concurrency or settings.concurrency
        self.wake: Callable[[], None] = wake or (lambda: None)
        #: recipient domain -> its destination's policy, once known (at once, or from its MX hosts)
        self._policies: dict[str, DestinationPolicy] = {}
        #: shaping key -> the domains seen going to it
        self._domains: dict[str, set[str]] = {}
        self._busy: Counter[str] = Counter()
        #: loop times the attempts under way to each destination began, and how long its attempts take
        self._began: dict[str, list[float]] = {}
        self._seconds: dict[str, float] = {}
        #: the tokens of the store's buckets (tokens.py)
        self.tokens = Tokens(store, clock, lease=settings.lease, wake=lambda: self.wake())
        self._view: dict[str, Suspension] = {}
        self._view_at: float | None = None
        self._refreshing: asyncio.Task[bool] | None = None
        #: reads of the suspensions begun so far (each numbered), and the number of the newest the view holds: an
        #: older read ending later does not replace it
        self._begun = 0
        self._applied = 0
        #: keys whose suspension is being written: a refresh keeps them
        self._writing: set[str] = set()
        #: strikes of the destinations known to have a record (a success clears it)
        self._strikes: dict[str, int] = {}
        self._unreachable: Counter[str] = Counter()
        #: slow start: healthy destinations, the probes this worker leads, and the store's probes it holds
        self.probes = Probes()
        self._taken: dict[str, str] = {}
        self._ending: set[asyncio.Task[None]] = set()
        #: holder -> the task renewing its store's probe while its session is being accepted
        self._renewing: dict[str, asyncio.Task[None]] = {}
        #: holder -> its renewal's store call under way (not cancelled: an end of the probe waits for it)
        self._renewal_calls: dict[str, asyncio.Future[Suspension | datetime | None]] = {}
        #: relays some routes through which set a RATE or CONNECTIONS and some not: every route's attempts count
        #: against those limits, so none of them is admitted without its slot counted (`unbound`)
        self._shared_relays = _shared_relays(settings)

    # --- which destination --------------------------------------------------------------

    def learn(self, domain: str, policy: DestinationPolicy) -> None:
        if self._policies.get(domain) is policy:
            return  # known already (the deliverer tells it each message)
        if len(self._policies) >= MAX_DOMAINS:
            self._policies.clear()
            self._domains.clear()
        self._policies[domain] = policy
        self._domains.setdefault(policy.key, set()).add(domain)

    def _known(self, domain: str) -> DestinationPolicy | None:
        """The domain's destination as known before its MX lookup: None when only its MX hosts can tell."""
        policy = self._policies.get(domain)
        if policy is not None:
            return policy
        route = self.settings.route_for(domain)
        if isinstance(route, RelayRoute):
            policy = self.settings.shaping.relay_policy(route.host, route.port, route.limits)
        elif self.settings.shaping.known_key(domain) is not None:
            policy = self.settings.shaping.mx_policy(domain, (), concurrency=self.concurrency)
        else:
            return None
        self.learn(domain, policy)
        return policy

    # --- admission (the worker, no I/O) ----------------------------------------------------

    def admit(self, item: QueueItem) -> Ticket | Hold | Wait:
        """A `Ticket` when the item may start now (its slots and tokens taken), a `Hold` when all its
        destinations are suspended, a `Wait` when one is at its connection limit or out of tokens."""
        policies: dict[str, DestinationPolicy] = {}
        unknown = False
        for recipient in item.pending:
            policy = self._known(recipient.domain)
            if policy is None:
                unknown = True
            else:
                policies[policy.key] = policy
        if not policies or self.unbound(policies):
            return Ticket()  # nothing to count, nothing to wait for: a ticket of no slot, released for free
        now = self.clock.now() if self._view else None
        free: list[DestinationPolicy] = []
        held: list[Suspension] = []
        for policy in policies.values():
            suspension = self._view.get(policy.key) if now is not None else None
            if suspension is not None and now is not None and suspension.until > now:
                held.append(suspension)
            else:
                free.append(policy)
        if not free:
            return Ticket() if unknown else Hold(min(held, key=lambda s: s.until))
        loop_now = asyncio.get_running_loop().time()
        for policy in free:
            limits = policy.limits
            if self.probes.cold(policy.key, loop_now):  # its probe is under way: wait for it, holding no slot
                return Wait(policy)
            if limits.connections is not None and self._busy[policy.key] >= limits.connections:
                return Wait(policy)
            if limits.rate is not None and self.tokens.stock[policy.key] < 1:
                self.tokens.ask(policy)
                return Wait(policy)
        began = loop_now
        for policy in free:
            self._busy[policy.key] += 1
            self._began.setdefault(policy.key, []).append(began)
            if policy.limits.rate is not None:
                self.tokens.stock[policy.key] -= 1
        return Ticket(tuple(free), began)

    def unbound(self, policies: dict[str, DestinationPolicy]) -> bool:
        """Whether an attempt to these destinations (by shaping key) has nothing to count and nothing to wait for:
        none has a RATE or a CONNECTIONS (nor shares its relay with a route that has one), is in the view of
        suspensions, or has a probe of this worker's under way. Such an attempt is admitted with an empty `Ticket`:
        no slot counted, no token, nothing to release — what slots would count is read only against a limit. A
        suspension and slow start still apply to it: before each new connection (`connect`), in `enter`, and in
        `observe` after the attempt (docs/shaping.md, "What shaping costs a message")."""
        view, led, shared = self._view, self.probes.led, self._shared_relays
        for key, policy in policies.items():
            limits = policy.limits
            if limits.rate is not None or limits.connections is not None:
                return False
            if key in view or key in led or key in shared:
                return False
        return True

    def release(self, ticket: Ticket) -> None:
        """The attempt's SMTP part is over: its connection slots are free, its tokens done."""
        if not ticket.policies and not ticket.later:
            return  # admitted `unbound` (or to destinations not known yet, and no token taken since)
        for policy in (*ticket.policies, *ticket.later):
            if policy.limits.rate is not None:
                self.tokens.done(policy, policy.limits.rate)
        if not ticket.policies:
            return
        seconds = asyncio.get_running_loop().time() - ticket.began
        for policy in ticket.policies:
            self._busy[policy.key] -= 1
            self._began[policy.key].remove(ticket.began)
            average = self._seconds.get(policy.key)
            self._seconds[policy.key] = seconds if average is None else 0.8 * average + 0.2 * seconds
        self.wake()

    def wait_estimate(self, policy: DestinationPolicy, place: int) -> float:
        """Seconds until the `place`-th item waiting in this worker for `policy`'s destination may start: by its
        rate; or by its connections and how long its attempts take — until one has ended, as long as the oldest
        one under way has taken (a destination that never greets completes none)."""
        limits = policy.limits
        if limits.rate is not None:
            return min(300.0, place / limits.rate.per_second)
        if limits.connections is None:
            return 0.0
        began = self._began.get(policy.key)
        oldest = asyncio.get_running_loop().time() - min(began) if began else 0.0
        per_attempt = self._seconds.get(policy.key, oldest)
        return min(300.0, place * per_attempt / limits.connections)

    # --- the deliverer's gate ----------------------------------------------------------------

    def suspended(self, key: str) -> Suspension | None:
        suspension = self._view.get(key)
        if suspension is None or suspension.until <= self.clock.now():
            return None
        return suspension

    def ready(self, policy: DestinationPolicy) -> bool:
        """Whether `enter` would answer without a wait, so that `suspended` is its answer: the view of the
        suspensions is fresh (read within `VIEW_TTL`) and there is no token to take (no RATE, or the attempt's
        admission took it). Most messages: no coroutine, no deadline scope."""
        if self.stale:
            return False
        if policy.limits.rate is None:
            return True
        ticket = TICKET.get()
        return ticket is not None and any(p.key == policy.key for p in ticket.policies)

    async def enter(self, policy: DestinationPolicy) -> Suspension | None:
        if self.stale:  # no session on a view older than VIEW_TTL, however busy the worker's loop is
            self.refresh_soon()
            if self._refreshing is not None:
                await asyncio.shield(self._refreshing)
        held = self.suspended(policy.key)
        if held is not None:
            return held
        ticket = TICKET.get()
        admitted = ticket is not None and any(p.key == policy.key for p in ticket.policies)
        if policy.limits.rate is not None and not admitted:
            await self.tokens.token(policy)
            if ticket is not None:
                ticket.later.append(policy)
        return None

    # --- slow start (probing.py) ---------------------------------------------------------------

    async def connect(self, key: str, holder: str, *, seconds: float, deadline: float) -> Suspension | None:
        """Right before `holder` (an attempt, for one destination) opens a new connection to `key`: its suspension,
        else None once it may connect — at once to a healthy destination (after `current`'s read); to a cold one
        when it holds the store's probe (taken for `seconds`), after this worker's probe of it if another attempt
        leads one, after another worker's if one holds the store's. Past `deadline`: None (the session finds the
        deadline passed). When the store cannot be asked: the view."""
        loop = asyncio.get_running_loop()
        asked = 0
        hold, renew = probe_hold(seconds, self.settings.lease)
        while True:
            step = self.probes.step(key, holder, loop.time())
            if step is Step.GO:
                return await self.current(key)
            if step is Step.WAIT:
                done = self.probes.waiting_on(key)
                if done is not None:
                    try:
                        async with asyncio.timeout_at(deadline):
                            await done.wait()
                    except TimeoutError:
                        return None
                continue
            held = self.suspended(key)
            if held is not None:
                self._end_lead(key, holder)
                return held
            lead = self.probes.lead(key, holder)
            now = self.clock.now()
            try:
                found = await self.store.atake_probe(key, holder=holder, until=now + timedelta(seconds=hold), now=now)
            except QueueError as exc:
                logger.warning("the probe of %s could not be taken from the store: %s", key, exc)
                self._end_lead(key, holder)
                return self.suspended(key)
            if found is None:
                lead.taken = True
                self._taken[holder] = key
                if renew is not None and holder not in self._renewing:
                    task = loop.create_task(self._renew(key, holder, hold, renew), name=f"mailqueue-probe-{key}")
                    self._renewing[holder] = task
                return None
            if isinstance(found, Suspension):
                self._adopt(found)
                self._end_lead(key, holder)
                return found
            asked += 1  # another worker's probe: ask again soon, or at its end
            delay = min(recheck_after(asked), max(0.0, (found - now).total_seconds()) + 0.001)
            if loop.time() + delay >= deadline:
                self._end_lead(key, holder)
                return None
            await asyncio.sleep(delay)

    def accepted(self, key: str, holder: str) -> None:
        """A session `holder` opened to `key` was accepted (greeting, EHLO, TLS, AUTH): the destination is healthy;
        a probe `holder` held ends (in the store in the background): everybody goes."""
        self.probes.accepted(key, holder, asyncio.get_running_loop().time())
        self.wake()
        self._stop_renewing(holder)
        if self._taken.pop(holder, None) is not None:
            task = asyncio.get_running_loop().create_task(self._end_probe(key, holder), name=f"mailqueue-probe-{key}")
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)

    def left(self, holder: str) -> None:
        """`holder`'s sessions are over, however they ended: this worker's waiters for its probe go on (to the
        store's probe, which it keeps until `observe` ends it or records the suspension, renewed no more)."""
        self._stop_renewing(holder)
        for key in self.probes.leads(holder):
            self._end_lead(key, holder)

    async def _renew(self, key: str, holder: str, hold: float, every: float) -> None:
        """Keep `holder`'s probe of `key` while its session is being accepted (`probe_hold`); stop when it is
        not `holder`'s any more (a suspension, or it expired and another took it)."""
        while True:
            await asyncio.sleep(every)
            now = self.clock.now()
            until = now + timedelta(seconds=hold)
            call = asyncio.ensure_future(self.store.atake_probe(key, holder=holder, until=until, now=now))
            self._renewal_calls[holder] = call
            try:
                found = await asyncio.shield(call)
            except QueueError as exc:
                logger.warning("the probe of %s could not be renewed in the store: %s", key, exc)
                continue
            finally:
                if call.done():
                    self._renewal_calls.pop(holder, None)
            if found is not None:
                return

    def _stop_renewing(self, holder: str) -> None:
        task = self._renewing.pop(holder, None)
        if task is not None:
            task.cancel()

    def _end_lead(self, key: str, holder: str) -> None:
        self.probes.end(key, holder)
        self.wake()

    async def _end_probe(self, key: str, holder: str) -> None:
        call = self._renewal_calls.pop(holder, None)
        if call is not None:  # a renewal under way would take the probe again after this end
            await asyncio.wait([call])
        try:
            await self.store.aend_probe(key, holder=holder)
        except QueueError as exc:
            logger.warning("the probe of %s could not be ended in the store: %s", key, exc)

    def _adopt(self, suspension: Suspension) -> None:
        """A suspension the store answered with: into the view, with its strikes."""
        key = suspension.destination
        self._view[key] = suspension
        self._strikes[key] = max(suspension.strikes, self._strikes.get(key, 0))
        self.probes.suspended(key)

    # --- the view of suspensions -----------------------------------------------------------------

    @property
    def suspending(self) -> bool:
        """Whether the view holds a suspension (in force or ended, not read again since)."""
        return bool(self._view)

    @property
    def stale(self) -> bool:
        return self._view_at is None or asyncio.get_running_loop().time() - self._view_at >= VIEW_TTL

    def refresh_soon(self) -> None:
        """Read the store's suspensions in the background when the view is stale (one read at a time)."""
        if self.stale and (self._refreshing is None or self._refreshing.done()):
            self._start_refresh()

    def _start_refresh(self) -> asyncio.Task[bool]:
        self._refreshing = asyncio.get_running_loop().create_task(
            self._read(self._number()), name="mailqueue-suspensions"
        )
        return self._refreshing

    def _number(self) -> int:
        self._begun += 1
        return self._begun

    async def current(self, key: str) -> Suspension | None:
        """The destination's suspension as the store has it now — from a read begun after this call, so one
        another worker recorded before it is seen — else None. Asked before each new connection (not each
        message): the callers of one moment share a read, and a read under way when they ask (it may have begun
        before the record was written) is followed by another. When the store cannot be read: the view."""
        asked = self._begun
        while self._applied <= asked:
            task = self._refreshing
            if task is None or task.done():
                task = self._start_refresh()
            if not await asyncio.shield(task):
                break
        return self.suspended(key)

    async def refresh(self) -> None:
        """Read the suspensions in force from the store (one round trip); they replace the view."""
        await self._read(self._number())

    async def _read(self, number: int) -> bool:
        """Read number `number`; False when the store could not be read."""
        now = self.clock.now()
        try:
            found = await self.store.asuspensions(now=now)
        except QueueError as exc:
            logger.warning("suspended destinations could not be read from the store: %s", exc)
            self._view_at = asyncio.get_running_loop().time()
            return False
        if number < self._applied:  # a read begun after this one was applied already: it is newer
            return True
        self._applied = number
        view = {s.destination: s for s in found}
        for key in self._writing:
            if key in self._view:
                view.setdefault(key, self._view[key])
        ended = [k for k, s in self._view.items() if k not in view and s.until > now]
        self._view = view
        for suspension in found:
            self._strikes[suspension.destination] = max(
                suspension.strikes, self._strikes.get(suspension.destination, 0)
            )
            self.probes.suspended(suspension.destination)
        self._view_at = asyncio.get_running_loop().time()
        if ended:  # resumed by an operator: its items may go
            self.wake()
        return True

    # --- after an attempt ---------------------------------------------------------------------

    async def observe(self, reports: Sequence[DestinationReport]) -> list[Suspension]:
        """Act on what each destination's servers said: suspend it (a throttling reply, or dead), or clear
        its strikes after a success. The suspensions this call recorded, to tell."""
        made: list[Suspension] = []
        for report in reports:
            if report.holder:
                self._stop_renewing(report.holder)
            probed = self._taken.pop(report.holder, None) if report.holder else None
            if report.suspended is not None:
                if probed is not None:
                    await self._end_probe(probed, report.holder)
                continue
            policy, key = report.policy, report.policy.key
            throttle: tuple[Reply, float] | None = None
            for reply in report.replies:
                first = suspends(reply, policy)
                if first is not None:
                    throttle = (reply, first)
                    break
            suspension: Suspension | None = None
            if throttle is not None:
                self._unreachable[key] = 0
                suspension = await self._suspend(policy, throttle[0], throttle[1])
            elif report.unreachable:
                self._unreachable[key] += 1
                # a probe that reached no server is a whole cohort (slow start's cohort is one connection)
                if probed is not None or is_dead(self._unreachable[key], policy):
                    self._unreachable[key] = 0
                    suspension = await self._suspend(policy, report.replies[-1], policy.suspend)
            else:
                self._unreachable[key] = 0
                if report.delivered and key in self._strikes:  # no record of it known: nothing to clear
                    await self._succeeded(key)
            if suspension is not None:
                made.append(suspension)  # its write ended the probe
            elif probed is not None:  # no suspension of ours: the store's probe ends with the attempt
                await self._end_probe(probed, report.holder)
        if len(self._taken) >= 10_000:  # holders whose attempt never reported (cancelled): their probes expire
            self._taken.clear()
        return made

    async def _suspend(self, policy: DestinationPolicy, reply: Reply, first: float) -> Suspension | None:
        key = policy.key
        now = self.clock.now()
        if self.suspended(key) is not None:
            return None  # suspended already (by another attempt of this run): one suspension, one strike
        strikes = self._strikes.get(key, 0) + 1
        until = now + timedelta(seconds=suspension_seconds(first, strikes, policy.suspend_max))
        suspension = Suspension(key, until, reply, since=now, strikes=strikes)
        self._view[key] = suspension  # at once: no new session to it from this worker
        self.probes.suspended(key)
        self._applied = self._number()  # a read begun before this moment would not know it: none replaces it
        self._writing.add(key)
        try:
            # Another worker may have met it first: adopt its suspension rather than count a second strike.
            recorded = await self.store.asuspensions(now=now, destinations=[key])
            if recorded:
                self._view[key] = recorded[0]
                self._strikes[key] = recorded[0].strikes
                return None
            suspension = await self.store.asuspend(key, until=until, reply=reply, now=now)
            self._view[key] = suspension
            domains = sorted(self._domains.get(key, ()))[:MAX_DEFER_DOMAINS]
            if domains:
                moved = await self.store.adefer_destination(domains, until=suspension.until, now=now)
                logger.info("%d items for %s moved to the end of its suspension", moved, key)
        except QueueError as exc:
            logger.warning("the suspension of %s could not be recorded in the store: %s", key, exc)
        finally:
            self._writing.discard(key)
        self._strikes[key] = suspension.strikes
        loop = asyncio.get_running_loop()
        loop.call_later(max(0.0, (suspension.until - self.clock.now()).total_seconds()) + 0.01, self.wake)
        return suspension

    async def _succeeded(self, key: str) -> None:
        """A success: the destination's strikes start again — unless a suspension is in force (a session
        begun before it does not lift it)."""
        if key not in self._strikes or self.suspended(key) is not None:
            return
        del self._strikes[key]
        self._view.pop(key, None)
        try:
            await self.store.aclear_suspension(key)
        except QueueError as exc:
            logger.warning("the strikes of %s could not be cleared in the store: %s", key, exc)

    async def aclose(self) -> None:
        await self.tokens.aclose()
        self.probes.close()
        for holder in list(self._renewing):
            self._stop_renewing(holder)
        if self._ending:  # probes ended after a session was accepted: let them reach the store
            await asyncio.gather(*self._ending, return_exceptions=True)
        tasks = [self._refreshing] if self._refreshing is not None else []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


__all__ = [
    "BLOCKED_RECHECK",
    "GIVE_BACK_AFTER",
    "TICKET",
    "VIEW_TTL",
    "Hold",
    "Shaper",
    "Ticket",
    "Wait",
]

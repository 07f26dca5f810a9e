"""A destination with no RATE and no CONNECTIONS costs its messages next to nothing in traffic shaping — and loses
none of what applies to every destination: suspensions, throttling rules, slow start, dead destinations."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from django_mailqueue.conf import load_settings
from django_mailqueue.core.clock import FakeClock, SystemClock
from django_mailqueue.core.items import NewItem, QueueItem, RecipientState, Reply
from django_mailqueue.delivery import Deliverer
from django_mailqueue.delivery.destinations import DestinationReport
from django_mailqueue.delivery.smtp import SmtpTransport
from django_mailqueue.shaping import DestinationPolicy, ThrottleRule, relay_key
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.worker import Worker
from django_mailqueue.worker import shaper as shaper_module
from django_mailqueue.worker.shaper import Hold, Shaper, Ticket, Wait
from tests.support.shaping_server import CountingSmtpServer
from tests.support.smtp_server import free_port

RELAY = {"HOST": "127.0.0.2", "PORT": 2525, "TLS": "none"}
DELIVERED = Reply(250, "2.0.0", "OK")
THROTTLED = Reply(421, "4.7.0", "Try again later, closing connection.")
RATE_LIMITED = Reply(451, "4.7.650", "The mail server [192.0.2.1] has been temporarily rate limited")
MESSAGE = b"From: s@origin.test\r\nTo: u@a.test\r\nSubject: x\r\n\r\nbody\r\n"


def shaper(store: MemoryStore, clock: FakeClock | SystemClock, **mailqueue: Any) -> Shaper:
    return Shaper(load_settings({"ROUTES": {"*": RELAY}, "CONCURRENCY": 20, **mailqueue}), store, clock=clock)


def item(store: MemoryStore, clock: FakeClock | SystemClock, *recipients: str) -> QueueItem:
    return store.add(NewItem("s@origin.test", tuple(recipients), MESSAGE), now=clock.now())


def relay_policy(s: Shaper, domain: str = "a.test") -> DestinationPolicy:
    policy = s._known(domain)
    assert policy is not None
    return policy


@pytest.fixture
def matched(monkeypatch: pytest.MonkeyPatch) -> list[Reply]:
    """The replies a throttling rule was asked about (one entry a rule asked)."""
    asked: list[Reply] = []
    matches = ThrottleRule.matches

    def counted(self: ThrottleRule, reply: Reply) -> bool:
        asked.append(reply)
        return matches(self, reply)

    monkeypatch.setattr(ThrottleRule, "matches", counted)
    return asked


@pytest.fixture
def entered(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The shaping keys `Shaper.enter` (the gate's coroutine, run under the attempt's deadline) was awaited for."""
    keys: list[str] = []
    enter = Shaper.enter

    async def counted(self: Shaper, policy: DestinationPolicy) -> Any:
        keys.append(policy.key)
        return await enter(self, policy)

    monkeypatch.setattr(Shaper, "enter", counted)
    return keys


# --- admission ----------------------------------------------------------------------------------


async def test_an_unbound_relay_admits_with_an_empty_ticket_and_counts_no_slot() -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock)
    tickets = [s.admit(item(store, clock, f"u{n}@a.test", f"v{n}@b.test")) for n in range(30)]
    assert all(isinstance(t, Ticket) and t.policies == () for t in tickets)  # main: the relay's slot, each
    assert sum(s._busy.values()) == 0 and not s._began
    for ticket in tickets:
        assert isinstance(ticket, Ticket)
        s.release(ticket)
    assert not s._seconds


@pytest.mark.parametrize(
    "route",
    [{**RELAY, "CONNECTIONS": 5}, {**RELAY, "RATE": "100000/s"}, "mx"],
    ids=["connections", "rate", "mx-default-connections"],
)
async def test_a_limit_is_counted_as_before(route: Any) -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock, ROUTES={"*": route, "a.test": route}, SHAPING={"a.test": {}})
    s.tokens.stock[relay_key("127.0.0.2", 2525)] = 10  # a rate's tokens in hand, as after a take
    ticket = s.admit(item(store, clock, "u@a.test"))
    assert isinstance(ticket, Ticket) and len(ticket.policies) == 1
    assert sum(s._busy.values()) == 1


async def test_a_relay_shared_with_a_limited_route_counts_every_routes_sessions() -> None:
    """Two routes through one relay share its limits: the unlimited route's attempts still take the slots the other
    route's CONNECTIONS counts."""
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock, ROUTES={"*": RELAY, "b.test": {**RELAY, "CONNECTIONS": 1}})
    first = s.admit(item(store, clock, "u@a.test"))
    assert isinstance(first, Ticket) and len(first.policies) == 1
    assert isinstance(s.admit(item(store, clock, "u@b.test")), Wait)
    s.release(first)
    assert isinstance(s.admit(item(store, clock, "u@b.test")), Ticket)


async def test_an_unbound_relay_s_suspension_holds_its_items() -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock)
    key = relay_key("127.0.0.2", 2525)
    until = clock.now() + timedelta(seconds=60)
    store.suspend(key, until=until, reply=THROTTLED, now=clock.now())
    await s.refresh()
    held = s.admit(item(store, clock, "u@a.test"))
    assert isinstance(held, Hold) and held.suspension.until == until
    clock.advance(61)  # ended: the view still lists it until the next read, and the item goes
    ticket = s.admit(item(store, clock, "u@a.test"))
    assert isinstance(ticket, Ticket)


async def test_an_unbound_relay_s_probe_under_way_makes_its_items_wait() -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock)
    key = relay_key("127.0.0.2", 2525)
    s.probes.lead(key, "leader")
    waiting = s.admit(item(store, clock, "u@a.test"))
    assert isinstance(waiting, Wait) and waiting.policy.key == key
    s.probes.accepted(key, "leader", asyncio.get_running_loop().time())
    assert isinstance(s.admit(item(store, clock, "u@a.test")), Ticket)


# --- after the attempt --------------------------------------------------------------------------


async def test_a_delivery_asks_no_throttling_rule(matched: list[Reply]) -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock)
    policy = relay_policy(s)
    for _ in range(5):
        assert await s.observe([DestinationReport(policy, "127.0.0.2", (DELIVERED,), delivered=True)]) == []
    assert matched == []  # main: every rule, each reply


@pytest.mark.parametrize(("reply", "seconds"), [(THROTTLED, 60), (RATE_LIMITED, 900)], ids=["421", "4.7.650"])
async def test_an_unbound_relay_is_suspended_by_a_421_and_by_a_throttling_rule(
    reply: Reply, seconds: int, matched: list[Reply]
) -> None:
    store, clock = MemoryStore(), FakeClock()
    s = shaper(store, clock)
    policy = relay_policy(s)
    assert s.admit(item(store, clock, "u@a.test")) == Ticket()
    (made,) = await s.observe([DestinationReport(policy, "127.0.0.2", (DELIVERED, reply))])
    assert made.destination == relay_key("127.0.0.2", 2525)
    assert (made.until - clock.now()).total_seconds() == seconds
    assert matched and set(matched) == {reply}  # the rules were asked about the 4xx reply only
    assert isinstance(s.admit(item(store, clock, "u@a.test")), Hold)


# --- the deliverer's gate -----------------------------------------------------------------------


@pytest.fixture
def relay_server() -> Iterator[CountingSmtpServer]:
    server = CountingSmtpServer(host="127.0.0.2", port=free_port()).start()
    yield server
    server.stop()


def settings_for(server: CountingSmtpServer, **route: Any) -> Any:
    return load_settings(
        {
            "HOSTNAME": "mq.test.example",
            "ROUTES": {"*": {"HOST": server.host, "PORT": server.port, "TLS": "none", **route}},
            "MTA_STS": False,
        }
    )


async def deliver_each(deliverer: Deliverer, count: int) -> list[RecipientState]:
    states = []
    try:
        for n in range(count):
            result = await deliverer.deliver("s@origin.test", [f"u{n}@a.test"], MESSAGE)
            states += [o.state for o in result.outcomes]
    finally:
        await deliverer.aclose()
    return states


async def test_an_unbound_relay_s_messages_pass_the_gate_without_its_coroutine(
    relay_server: CountingSmtpServer, entered: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shaper_module, "VIEW_TTL", 3600.0)  # however slow the machine: a view read once stays fresh
    settings = settings_for(relay_server)
    s = Shaper(settings, MemoryStore(), clock=SystemClock())
    deliverer = Deliverer(settings, transport=SmtpTransport(cache_time=5), gate=s)
    assert await deliver_each(deliverer, 1) == [RecipientState.DELIVERED]
    assert entered == [relay_key("127.0.0.2", relay_server.port)]  # a view never read: `enter` reads it first
    entered.clear()
    deliverer = Deliverer(settings, transport=SmtpTransport(cache_time=5), gate=s)
    assert await deliver_each(deliverer, 6) == [RecipientState.DELIVERED] * 6
    assert entered == []  # main: each message
    assert len(relay_server.accepted) == 7


async def test_a_relay_s_rate_and_a_stale_view_still_go_through_the_gate_s_coroutine(
    relay_server: CountingSmtpServer, entered: list[str]
) -> None:
    settings = settings_for(relay_server, RATE="100000/s")
    s = Shaper(settings, MemoryStore(), clock=SystemClock())
    await s.refresh()
    deliverer = Deliverer(settings, transport=SmtpTransport(cache_time=5), gate=s)
    assert await deliver_each(deliverer, 3) == [RecipientState.DELIVERED] * 3
    assert len(entered) == 3  # no admission took their tokens: the gate takes each
    entered.clear()
    settings = settings_for(relay_server)
    s = Shaper(settings, MemoryStore(), clock=SystemClock())  # its view never read: stale
    assert await deliver_each(Deliverer(settings, transport=SmtpTransport(cache_time=5), gate=s), 1)
    assert len(entered) == 1


async def test_an_unbound_relay_suspended_in_the_view_gets_no_session(relay_server: CountingSmtpServer) -> None:
    settings = settings_for(relay_server)
    store, clock = MemoryStore(), SystemClock()
    s = Shaper(settings, store, clock=clock)
    now = clock.now()
    store.suspend(
        relay_key("127.0.0.2", relay_server.port), until=now + timedelta(seconds=60), reply=THROTTLED, now=now
    )
    await s.refresh()
    deliverer = Deliverer(settings, transport=SmtpTransport(cache_time=5), gate=s)
    assert await deliver_each(deliverer, 2) == [RecipientState.PENDING] * 2
    assert relay_server.sessions == []


# --- a worker -------------------------------------------------------------------------------------


async def test_a_worker_sends_to_an_unbound_relay_with_empty_tickets_and_a_421_still_suspends_it(
    relay_server: CountingSmtpServer, entered: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shaper_module, "VIEW_TTL", 3600.0)  # the view read before the claimed batch stays fresh
    admitted: list[Ticket | Hold | Wait] = []
    admit = Shaper.admit

    def counted(self: Shaper, queued: QueueItem) -> Ticket | Hold | Wait:
        admitted.append(admit(self, queued))
        return admitted[-1]

    monkeypatch.setattr(Shaper, "admit", counted)
    settings = settings_for(relay_server)
    store, clock = MemoryStore(), SystemClock()
    for n in range(10):
        item(store, clock, f"u{n}@a.test")
    stats = await Worker(store=store, settings=settings, clock=clock, once=True).run()
    assert stats.delivered == 10 and len(relay_server.accepted) == 10
    # the first attempt is the relay's probe; the others wait for it (no slot), then go with empty tickets
    assert [a for a in admitted if isinstance(a, Ticket)] == [Ticket()] * 10
    assert entered == []
    relay_server.throttle = b"421 4.7.0 Try again later, closing connection."
    item(store, clock, "late@a.test")
    stats = await Worker(store=store, settings=settings, clock=clock, once=True).run()
    (suspension,) = store.suspensions(now=clock.now())
    assert suspension.destination == relay_key("127.0.0.2", relay_server.port) and suspension.reply.code == 421
    assert stats.suspended == 1

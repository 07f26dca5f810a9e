"""Traffic shaping in one worker against servers on loopback: connections, reuse, rates, suspensions, dead sites."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from django_mailqueue import signals
from django_mailqueue.conf import load_settings
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem, RecipientState, Reply, Suppression
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.worker import Worker
from django_mailqueue.worker import shaper as shaper_module
from tests.support.dns_server import DnsServer
from tests.support.shaping_server import CountingSmtpServer
from tests.support.smtp_server import free_port

THROTTLE = b"421 4.7.0 Try again later, closing connection."


class Servers:
    """Counting servers on loopback addresses sharing one port (MX_PORT), stopped at the end."""

    def __init__(self) -> None:
        self.port = free_port()
        self.started: list[CountingSmtpServer] = []

    def start(self, host: str, **kwargs: Any) -> CountingSmtpServer:
        server = CountingSmtpServer(host=host, port=self.port, **kwargs).start()
        self.started.append(server)
        return server


@pytest.fixture
def servers() -> Iterator[Servers]:
    pool = Servers()
    yield pool
    for server in pool.started:
        server.stop()


@pytest.fixture
def suspended() -> Iterator[list[tuple[float, dict[str, Any]]]]:
    """The `suspended` signals, with the `time.monotonic()` each came at."""
    seen: list[tuple[float, dict[str, Any]]] = []

    def receive(sender: Any, **kwargs: Any) -> None:
        seen.append((time.monotonic(), kwargs))

    signals.suspended.connect(receive, weak=False, dispatch_uid="test-suspended")
    yield seen
    signals.suspended.disconnect(dispatch_uid="test-suspended")


def mailqueue(dns: DnsServer, port: int, **extra: Any) -> dict[str, Any]:
    return {
        "STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
        "HOSTNAME": "mq.test.example",
        "ROUTES": {"*": "mx"},
        "DNS": {"NAMESERVERS": ["127.0.0.1"], "PORT": dns.port, "TIMEOUT": 2},
        "MX_PORT": port,
        "POLL_INTERVAL": 0.1,
        "MTA_STS": False,
        "RETRY_DELAYS": [60],
        "TIMEOUTS": {"CONNECT": 2, "GREETING": 2, "MAIL": 5, "RCPT": 5, "DATA": 5, "DATA_END": 5, "SESSION": 30},
        **extra,
    }


def message(number: int, recipient: str) -> NewItem:
    data = (
        f"From: sender@origin.test\r\nTo: {recipient}\r\nSubject: test {number}\r\n"
        f"Message-ID: <m{number}@origin.test>\r\n\r\nbody {number}\r\n"
    ).encode()
    return NewItem(
        sender="sender@origin.test", recipients=(recipient,), message=data, message_id=f"<m{number}@origin.test>"
    )


def fill(store: MemoryStore, domain: str, count: int, start: int = 0) -> None:
    now = SystemClock().now()
    store.add_many([message(n, f"user{n}@{domain}") for n in range(start, start + count)], now=now)


async def run_until(worker: Worker, done: Callable[[], bool], timeout: float, what: str) -> None:
    """Run `worker` until `done()`, then stop it; fail after `timeout` seconds."""
    task = asyncio.create_task(worker.run())
    try:
        await wait_for(done, timeout, what, task)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


async def wait_for(done: Callable[[], bool], timeout: float, what: str, task: Awaitable[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if isinstance(task, asyncio.Task) and task.done():
            task.result()
            raise AssertionError(f"the worker stopped before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def worker(config: dict[str, Any], store: MemoryStore, **kwargs: Any) -> Worker:
    return Worker(store=store, settings=load_settings(config), **kwargs)


# --- connections -------------------------------------------------------------------------


async def test_a_worker_holds_at_most_connections_sessions_and_a_suffix_shares_them(
    dns_server: DnsServer,
    servers: Servers,
) -> None:
    mx = servers.start("127.0.0.2", delay=0.03)
    for domain in ("a.test", "b.test"):
        dns_server.mx(domain, (10, "mx1.site.test"), (20, "mx2.site.test"))
    dns_server.a("mx1.site.test", "127.0.0.2").a("mx2.site.test", "127.0.0.2")
    store = MemoryStore()
    fill(store, "a.test", 60)
    fill(store, "b.test", 60, start=60)
    config = mailqueue(dns_server, servers.port, CONCURRENCY=20, SHAPING={".site.test": {"CONNECTIONS": 3}})
    stats = await worker(config, store, once=True).run()
    assert stats.delivered == 120 and len(mx.accepted) == 120
    assert mx.most_at_once <= 3  # a.test and b.test share the 3: one site
    assert mx.most_at_once == 3  # and it was busy enough to need them


async def test_without_the_suffix_each_domain_has_its_own_connections(
    dns_server: DnsServer,
    servers: Servers,
) -> None:
    mx = servers.start("127.0.0.2", delay=0.03)
    for domain in ("a.test", "b.test"):
        dns_server.mx(domain, (10, "mx1.site.test"))
    dns_server.a("mx1.site.test", "127.0.0.2")
    store = MemoryStore()
    fill(store, "a.test", 60)
    fill(store, "b.test", 60, start=60)
    config = mailqueue(dns_server, servers.port, CONCURRENCY=20, SHAPING={"*": {"CONNECTIONS": 3}})
    await worker(config, store, once=True).run()
    assert len(mx.accepted) == 120
    assert 3 < mx.most_at_once <= 6


async def test_a_connection_carries_at_most_messages_per_connection(
    dns_server: DnsServer,
    servers: Servers,
) -> None:
    mx = servers.start("127.0.0.2")
    dns_server.mx("a.test", (10, "mx.a.test")).a("mx.a.test", "127.0.0.2")
    store = MemoryStore()
    fill(store, "a.test", 40)
    config = mailqueue(
        dns_server, servers.port, CONCURRENCY=2, SHAPING={"a.test": {"CONNECTIONS": 1, "MESSAGES_PER_CONNECTION": 5}}
    )
    await worker(config, store, once=True).run()
    assert len(mx.accepted) == 40
    assert max(c.messages for c in mx.sessions) == 5
    assert len(mx.sessions) >= 8


async def test_a_relays_connections_and_messages_per_connection_are_its_own(servers: Servers) -> None:
    relay = servers.start("127.0.0.3", delay=0.03)
    store = MemoryStore()
    fill(store, "anywhere.test", 40)
    config = {
        "STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
        "ROUTES": {
            "*": {
                "HOST": "127.0.0.3",
                "PORT": servers.port,
                "TLS": "none",
                "CONNECTIONS": 2,
                "MESSAGES_PER_CONNECTION": 7,
            }
        },
        "CONCURRENCY": 10,
    }
    await worker(config, store, once=True).run()
    assert len(relay.accepted) == 40
    assert relay.most_at_once == 2
    assert max(c.messages for c in relay.sessions) == 7


async def test_items_for_a_destination_at_its_limit_hold_no_slot_another_could_use(
    dns_server: DnsServer,
    servers: Servers,
) -> None:
    slow = servers.start("127.0.0.3", delay=0.2)
    fast = servers.start("127.0.0.2")
    dns_server.mx("slow.test", (10, "mx.slow.test")).a("mx.slow.test", "127.0.0.3")
    dns_server.mx("fast.test", (10, "mx.fast.test")).a("mx.fast.test", "127.0.0.2")
    store = MemoryStore()
    now = SystemClock().now()
    # interleaved, so every claim holds both: without shaping the slow ones would take every slot
    store.add_many([message(n, f"user{n}@slow.test" if n % 2 else f"user{n}@fast.test") for n in range(80)], now=now)
    config = mailqueue(dns_server, servers.port, CONCURRENCY=4, SHAPING={"slow.test": {"CONNECTIONS": 1}})
    await run_until(worker(config, store), lambda: len(fast.accepted) == 40, 60, "the fast destination's 40")
    assert len(slow.accepted) < 20  # the fast 40 went by while the slow ones took their turn
    assert slow.most_at_once == 1


# --- rates ---------------------------------------------------------------------------------


async def test_a_relays_rate_is_kept(servers: Servers) -> None:
    relay = servers.start("127.0.0.3", rate=22)
    store = MemoryStore()
    fill(store, "anywhere.test", 70)
    config = {
        "STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
        "ROUTES": {"*": {"HOST": "127.0.0.3", "PORT": servers.port, "TLS": "none", "RATE": "20/s"}},
        "CONCURRENCY": 10,
        "POLL_INTERVAL": 0.1,
    }
    await worker(config, store, once=True).run()
    assert len(relay.accepted) == 70
    assert relay.throttled == []
    first = relay.accepted[0].at
    assert relay.most_in_a_second(after=first + 1) <= 22  # 20 a second and a tenth: the bucket (1) and the way
    assert relay.most_in_a_second(after=first) <= 22  # the first second too: the bucket starts full, of one


async def test_messages_late_after_their_tokens_never_pass_the_rate_s_window(servers: Servers) -> None:
    """The relay holds every MAIL until 30 sessions wait for it (or 3 s): the messages whose tokens were taken
    meanwhile reach it together. The bucket alone grants 30 in under two seconds and they arrive in one moment; the
    window grants none past 22 (20 and a tenth) in flight or done within the second, however late they arrive."""
    relay = servers.start("127.0.0.3", hold_mail=30, hold_for=3.0)
    store = MemoryStore()
    fill(store, "anywhere.test", 60)
    config = {
        "STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
        "ROUTES": {"*": {"HOST": "127.0.0.3", "PORT": servers.port, "TLS": "none", "RATE": "20/s"}},
        "CONCURRENCY": 40,
        "POLL_INTERVAL": 0.1,
    }
    await worker(config, store, once=True).run()
    assert len(relay.accepted) == 60
    assert relay.most_in_a_second(after=relay.accepted[0].at) <= 22


# --- suspensions ---------------------------------------------------------------------------


async def test_a_421_suspends_the_destination_until_it_ends_and_its_items_wait_without_an_attempt(
    dns_server: DnsServer,
    servers: Servers,
    suspended: list[tuple[float, dict[str, Any]]],
) -> None:
    busy = servers.start("127.0.0.3", throttle=THROTTLE)
    healthy = servers.start("127.0.0.2")
    dns_server.mx("busy.test", (10, "mx.busy.test")).a("mx.busy.test", "127.0.0.3")
    dns_server.mx("ok.test", (10, "mx.ok.test")).a("mx.ok.test", "127.0.0.2")
    store = MemoryStore()
    fill(store, "busy.test", 40)
    fill(store, "ok.test", 40, start=40)
    config = mailqueue(dns_server, servers.port, CONCURRENCY=8, SHAPING={"*": {"SUSPEND": 3, "SUSPEND_MAX": 3}})
    delivered: list[dict[str, Any]] = []

    def on_delivered(sender: Any, **kwargs: Any) -> None:
        delivered.append(kwargs)

    signals.delivered.connect(on_delivered, weak=False, dispatch_uid="test-421-delivered")
    try:
        work = worker(config, store)
        task = asyncio.create_task(work.run())
        await wait_for(lambda: bool(suspended) and len(healthy.accepted) == 40, 30, "a suspension, and ok.test", task)
        told_at, told = suspended[0]
        assert told["destination"] == "busy.test"
        assert told["reply"].code == 421 and told["reply"].status == "4.7.0"
        cohort = len(busy.sessions)
        assert 1 <= cohort <= 4  # the attempts under way when the first 421 came: CONNECTIONS (4 of 8 slots)
        busy.throttle = None  # it recovers; nobody knows before the suspension ends
        await wait_for(lambda: len(busy.accepted) == 40, 30, "busy.test's 40 after the suspension", task)
        work.stop()
        await asyncio.wait_for(task, 30)
    finally:
        signals.delivered.disconnect(dispatch_uid="test-421-delivered")
    ended_after = (told["until"] - SystemClock().now()).total_seconds() + (time.monotonic() - told_at)
    assert len(suspended) == 1
    during = busy.connections_between(told_at, told_at + 2.5)
    assert during == []  # no new connection while it was suspended
    assert all(c.opened >= told_at + 2.5 for c in busy.sessions[cohort:]), ended_after
    # the items of the 421 sessions were attempted once; the others waited without an attempt
    attempts = sorted(d["attempt"] for d in delivered if d["recipient"].endswith("@busy.test"))
    assert attempts.count(2) == cohort and attempts.count(1) == 40 - cohort
    assert work.stats.held + cohort <= 40 and work.stats.suspended == 1


async def test_a_new_connection_reads_the_store_first_and_finds_another_workers_suspension(
    dns_server: DnsServer, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view of suspensions is never read again by age here (VIEW_TTL an hour): only the read before each new
    connection can learn of the suspension another worker recorded; the item then waits, no attempt counted."""
    monkeypatch.setattr(shaper_module, "VIEW_TTL", 3600.0)
    server = servers.start("127.0.0.2")
    dns_server.mx("a.test", (10, "mx.a.test")).a("mx.a.test", "127.0.0.2")
    store = MemoryStore()
    fill(store, "a.test", 1)
    config = mailqueue(dns_server, servers.port, SHAPING={"a.test": {"MESSAGES_PER_CONNECTION": 1}})
    work = worker(config, store)
    task = asyncio.create_task(work.run())
    try:
        await wait_for(lambda: store.count() == 0, 30, "the first message", task)
        now = SystemClock().now()
        other = store.suspend("a.test", until=now + timedelta(seconds=60), reply=Reply(421, "4.7.0", "Busy"), now=now)
        fill(store, "a.test", 1, start=1)
        (waiting,) = store.list()
        await wait_for(lambda: store.get(waiting.id).next_attempt == other.until, 30, "the wait", task)  # type: ignore[union-attr]
    finally:
        work.stop()
        await asyncio.wait_for(task, 30)
    assert len(server.sessions) == 1 and len(server.accepted) == 1  # no second connection was opened
    assert store.get(waiting.id).attempts == 0  # type: ignore[union-attr]


async def test_a_destination_that_never_greets_is_dead_after_one_cohort(
    dns_server: DnsServer,
    servers: Servers,
    suspended: list[tuple[float, dict[str, Any]]],
) -> None:
    hole = servers.start("127.0.0.4", blackhole=True)
    healthy = servers.start("127.0.0.2")
    dns_server.mx("hole.test", (10, "mx.hole.test")).a("mx.hole.test", "127.0.0.4")
    dns_server.mx("ok.test", (10, "mx.ok.test")).a("mx.ok.test", "127.0.0.2")
    store = MemoryStore()
    fill(store, "hole.test", 30)
    fill(store, "ok.test", 60, start=30)
    config = mailqueue(
        dns_server,
        servers.port,
        CONCURRENCY=10,
        SHAPING={"*": {"CONNECTIONS": 3, "DEAD_AFTER": 3, "SUSPEND": 60}},
        TIMEOUTS={"CONNECT": 2, "GREETING": 1, "SESSION": 30},
    )
    work = worker(config, store)
    await run_until(
        work, lambda: bool(suspended) and len(healthy.accepted) == 60 and store.count() == 30, 30, "hole.test dead"
    )
    assert suspended[0][1]["destination"] == "hole.test" and suspended[0][1]["reply"].code is None
    assert "no greeting" in suspended[0][1]["reply"].text
    assert len(hole.sessions) == 1  # one cohort — slow start's: the probe — not one timeout each
    waiting = store.list()
    assert all(item.next_attempt >= suspended[0][1]["until"] for item in waiting)
    assert sum(item.attempts for item in waiting) == len(hole.sessions)  # the rest waited without an attempt


async def test_a_hanging_destination_s_backlog_does_not_keep_others_from_being_claimed(
    dns_server: DnsServer, servers: Servers
) -> None:
    hole = servers.start("127.0.0.4", blackhole=True)
    healthy = servers.start("127.0.0.2")
    dns_server.mx("hole.test", (10, "mx.hole.test")).a("mx.hole.test", "127.0.0.4")
    dns_server.mx("ok.test", (10, "mx.ok.test")).a("mx.ok.test", "127.0.0.2")
    store = MemoryStore()
    fill(store, "hole.test", 150)  # claimed first: more than the worker holds
    fill(store, "ok.test", 100, start=150)
    config = mailqueue(
        dns_server,
        servers.port,
        CONCURRENCY=4,
        SHAPING={"*": {"CONNECTIONS": 2}},
        TIMEOUTS={"CONNECT": 2, "GREETING": 8, "SESSION": 30},
    )
    work = worker(config, store)
    await run_until(work, lambda: len(healthy.accepted) == 100, 30, "ok.test's 100")
    # delivered while the hole's first sessions still hung: its backlog went back to the store meanwhile
    assert hole.sessions and all(c.closed is None or c.closed > healthy.accepted[-1].at for c in hole.sessions[:2])
    assert work.stats.given_back > 0


async def test_a_suspended_items_listed_recipient_fails_and_the_others_wait_without_a_session(
    servers: Servers,
) -> None:
    relay = servers.start("127.0.0.3")
    store = MemoryStore()
    now = SystemClock().now()
    until = now + timedelta(seconds=60)
    store.suspend(f"relay:127.0.0.3:{servers.port}", until=until, reply=Reply(421, "4.7.0", "later"), now=now)
    store.suppress([Suppression("gone@anywhere.test", Reply(550, "5.1.1", "no such user"), now)])
    mixed = store.add(
        NewItem("sender@origin.test", ("gone@anywhere.test", "here@anywhere.test"), b"Subject: x\r\n\r\nx\r\n"), now=now
    )
    plain = store.add(NewItem("sender@origin.test", ("other@anywhere.test",), b"Subject: y\r\n\r\ny\r\n"), now=now)
    config = {
        "STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
        "ROUTES": {"*": {"HOST": "127.0.0.3", "PORT": servers.port, "TLS": "none"}},
        "POLL_INTERVAL": 0.1,
        "DSN": False,
    }
    await worker(config, store, once=True).run()
    assert relay.sessions == []
    left, waiting = store.get(mixed.id), store.get(plain.id)
    assert left is not None and waiting is not None
    states = {r.address: r.state for r in left.recipients}
    assert states == {"gone@anywhere.test": RecipientState.FAILED, "here@anywhere.test": RecipientState.PENDING}
    assert left.next_attempt == until and left.attempts == 0  # the others wait for the end, no attempt counted
    assert waiting.next_attempt == until and waiting.attempts == 0

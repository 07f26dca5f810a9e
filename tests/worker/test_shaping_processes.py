"""Traffic shaping across four real `mailqueue_work` processes on PostgreSQL and Redis: a shared rate, a 421."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem
from django_mailqueue.stores import QueueStore
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.stores.redis import RedisStore
from tests.support.databases import DATABASES
from tests.support.dns_server import DnsServer
from tests.support.shaping_server import CountingSmtpServer
from tests.support.smtp_server import free_port
from tests.support.workers import WorkerProcess, wait_until

#: `alone`: a relay's rate bound leaves the four processes ~90 ms of slack (docs/shaping.md); beside the rest of the
#: suite on two cores a process is descheduled longer than that, so `make test` runs these after the rest, by itself.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.alone,
    pytest.mark.django_db(transaction=True, databases=DATABASES),
]

PROCESSES = 4
THROTTLE = b"421 4.7.0 Try again later, closing connection."


@pytest.fixture(params=["postgres", "redis"])
def shared_store(request: pytest.FixtureRequest) -> Iterator[tuple[dict[str, Any], QueueStore]]:
    """A store every process reaches: its MAILQUEUE["STORE"] and an instance for the test."""
    if request.param == "redis":
        config: dict[str, Any] = request.getfixturevalue("redis_store_config")
        store: QueueStore = RedisStore(config["OPTIONS"])
    else:
        alias = request.getfixturevalue("pg_alias")
        config = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": alias}}
        store = OrmStore({"database": alias})
    yield config, store
    store.close()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., list[WorkerProcess]]]:
    started: list[WorkerProcess] = []

    def start(mailqueue: dict[str, Any], *args: str) -> list[WorkerProcess]:
        batch = [
            WorkerProcess(mailqueue, *args, tmp_path=tmp_path, name=f"shaping-{len(started) + n}")
            for n in range(PROCESSES)
        ]
        started.extend(batch)
        return batch

    yield start
    for process in started:
        process.close()


def fill(store: QueueStore, domain: str, count: int, start: int = 0) -> None:
    now = SystemClock().now()
    for first in range(start, start + count, 500):
        items = []
        for n in range(first, min(first + 500, start + count)):
            data = (
                f"From: sender@origin.test\r\nTo: user{n}@{domain}\r\nSubject: shaping {n}\r\n"
                f"Message-ID: <s{n}@origin.test>\r\n\r\nbody {n}\r\n"
            ).encode()
            items.append(NewItem("sender@origin.test", (f"user{n}@{domain}",), data, message_id=f"<s{n}@origin.test>"))
        store.add_many(items, now=now)


def monotonic_at(when: datetime) -> float:
    """`when` (the store's wall-clock time) on the servers' `time.monotonic()` scale."""
    return time.monotonic() + (when - SystemClock().now()).total_seconds()


def test_four_processes_share_a_relays_rate(
    shared_store: tuple[dict[str, Any], QueueStore], workers: Callable[..., list[WorkerProcess]]
) -> None:
    """Done-when line 1: RATE "50/s", 3,000 messages; the relay answers 454 past 55 in any sliding second after the
    first second, the line's bound (the first second's sessions are still opening: messages whose tokens were
    taken over more than a second can arrive within one). The average rate is bench/shaping.py's."""
    config, store = shared_store
    relay = CountingSmtpServer(host="127.0.0.3", port=free_port(("127.0.0.3",)), rate=55, rate_grace=1.0).start()
    try:
        fill(store, "anywhere.test", 3000)
        mailqueue = {
            "STORE": config,
            "HOSTNAME": "mq.test.example",
            "ROUTES": {"*": {"HOST": "127.0.0.3", "PORT": relay.port, "TLS": "none", "RATE": "50/s"}},
            "POLL_INTERVAL": 0.2,
        }
        processes = workers(mailqueue, "--once")
        for process in processes:
            assert process.wait(240) == 0, process.stderr
        times = [a.at for a in relay.accepted]
        first, last = times[0], times[-1]
        figures = {
            "delivered": len(times),
            "most_in_a_second_after_the_first": relay.most_in_a_second(after=first + 1),
            "most_in_the_first_second": relay.most_in_a_second(after=first),
            "throttled_at": [round(t - first, 3) for t in relay.throttled],
            "per_second": round((len(times) - 1) / (last - first), 2),
            # when mail is left: what each process did, and any suspension it logged
            "processes": [p.stdout.strip() for p in processes],
            "suspended": [line for p in processes for line in p.stderr.splitlines() if "suspended" in line][:4],
        }
        assert len(times) == 3000 and store.count() == 0, figures
        assert relay.throttled == [], figures
        assert figures["most_in_a_second_after_the_first"] <= 55, figures  # the average: bench/shaping.py
        assert all(" 0 delivered" not in p.stdout for p in processes), [p.stdout for p in processes]
    finally:
        relay.stop()


def test_a_421_keeps_four_processes_off_the_destination_until_its_suspension_ends(
    shared_store: tuple[dict[str, Any], QueueStore],
    workers: Callable[..., list[WorkerProcess]],
    dns_server: DnsServer,
) -> None:
    """Done-when line 3: 500 items for a destination answering 421 to every connection, 500 for a healthy one."""
    config, store = shared_store
    port = free_port(("127.0.0.2", "127.0.0.3"))
    busy = CountingSmtpServer(host="127.0.0.3", port=port, throttle=THROTTLE).start()
    healthy = CountingSmtpServer(host="127.0.0.2", port=port).start()
    try:
        dns_server.mx("busy.test", (10, "mx.busy.test")).a("mx.busy.test", "127.0.0.3")
        dns_server.mx("ok.test", (10, "mx.ok.test")).a("mx.ok.test", "127.0.0.2")
        fill(store, "busy.test", 500)  # first: claimed before the healthy ones
        fill(store, "ok.test", 500, start=500)
        suspend = 60  # the default SUSPEND: a loaded machine delivers the healthy 500 well within it
        mailqueue = {
            "STORE": config,
            "HOSTNAME": "mq.test.example",
            "ROUTES": {"*": "mx"},
            "DNS": {"NAMESERVERS": ["127.0.0.1"], "PORT": dns_server.port, "TIMEOUT": 5},
            "MX_PORT": port,
            "MTA_STS": False,
            "POLL_INTERVAL": 0.2,
            "RETRY_DELAYS": [2],  # a loaded machine's DNS time-out costs the healthy items little
            "SHAPING": {"*": {"SUSPEND": suspend, "SUSPEND_MAX": suspend}},
        }
        processes = workers(mailqueue)
        wait_until(lambda: bool(busy.sessions), 60, "the first connection to busy.test")
        first_421 = busy.sessions[0].opened
        wait_until(lambda: bool(store.suspensions(now=SystemClock().now())), 10, "the suspension in the store")
        recorded = time.monotonic()
        (suspension,) = store.suspensions(now=SystemClock().now())
        assert suspension.destination == "busy.test" and suspension.reply.code == 421
        ends = first_ends = monotonic_at(suspension.until)
        wait_until(lambda: len(healthy.accepted) == 500, 60, "ok.test's 500")
        healthy_done = healthy.accepted[-1].at
        times = sorted(a.at - first_421 for a in healthy.accepted)
        timing = {
            "recorded": recorded - first_421,
            "ends": ends - first_421,
            "healthy": [round(times[n], 2) for n in (0, 100, 200, 300, 400, 499)],
        }
        wait_until(lambda: store.count() == 500, 10, "ok.test's 500 recorded")
        # while it is suspended: one connection was opened (the store's probe), and no waiting item counted an
        # attempt — the one the probe carried did
        assert len(busy.sessions) == 1 and busy.sessions[0].throttled, timing
        items = store.list(limit=1000)
        assert len(items) == 500 and {r.domain for i in items for r in i.recipients} == {"busy.test"}
        assert sum(i.attempts for i in items) == 1, timing
        later = store.suspensions(now=SystemClock().now())
        assert [s.strikes for s in later] == [1], later  # one suspension, one strike, however many met the 421
        ends = max(ends, monotonic_at(later[0].until))
        busy.throttle = None  # it recovers; nobody knows before the suspension ends
        wait_until(lambda: len(busy.accepted) == 500, 150, "busy.test's 500 after the suspension")
        for process in processes:
            process.signal(15)
        for process in processes:
            assert process.wait(60) == 0, process.stderr
    finally:
        busy.stop()
        healthy.stop()
    assert healthy_done < first_ends, (timing, [p.stdout.strip() for p in processes])
    opened = [round(c.opened - first_421, 3) for c in busy.sessions]
    # slow start: of the four processes one held the store's probe and connected; the others waited for it, and
    # it turned into the suspension: exactly one connection before the suspension ended, and that one's 421
    before = [c for c in busy.sessions if c.opened < ends]
    assert before == busy.sessions[:1] and before[0].throttled, (opened, recorded - first_421, ends - first_421)
    assert not any(c.throttled for c in busy.sessions[1:])
    assert len({a.message_id for a in busy.accepted}) == 500 and store.count() == 0

"""Resource bounds: what one message, one recipient list, one MX set or one slow DNS zone can cost.

- a 50 MiB message is refused at enqueue (`TOO_LARGE`) with the default
  `MAX_MESSAGE_SIZE`, nothing stored;
- 10,000 recipients go out in transactions of at most `RCPT_LIMIT`
  recipients (counted at the server: one MAIL per transaction);
- a domain with 100 MX hosts costs at most `MX_ADDRESS_LIMIT` connections
  per attempt;
- a DNS server that never answers for one domain does not hold up
  deliveries to other domains: the worker delivers them while the lookup
  waits.

Worker memory while delivering large messages is measured by the benchmark
(`bench/measure_memory.py`, `make bench`), not here: a timed or sized
figure is a benchmark's job (see docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.mail import EmailMessage

from django_mailqueue.backends import QueueEmailBackend
from django_mailqueue.conf import MxRoute, QueueSettings, Timeouts, get_settings
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem, RecipientState
from django_mailqueue.delivery import Deliverer
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.worker import Worker
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ScriptedSmtpServer, free_port

FAST = Timeouts(connect=2, greeting=3, mail=3, rcpt=3, data=3, data_block=3, data_end=3, session=60)
MESSAGE = b"From: a@origin.test\r\nTo: list@big.test\r\nSubject: bounds\r\n\r\nhello\r\n"


@pytest.fixture
def dns() -> Iterator[DnsServer]:
    with DnsServer() as server:
        yield server


def queue_settings(dns: DnsServer, port: int, *, dns_timeout: float = 2.0, **extra: Any) -> QueueSettings:
    return QueueSettings(
        hostname="client.test.example",
        routes={"*": MxRoute()},
        dns=dns.settings(timeout=dns_timeout),
        mx_port=port,
        timeouts=FAST,
        **extra,
    )


def test_a_50_mib_message_is_refused_at_enqueue_with_the_default_settings(settings: Any) -> None:
    settings.MAILQUEUE = {}
    get_settings.cache_clear()
    assert get_settings().max_message_size == 25 * 1024 * 1024  # the default
    store = MemoryStore()
    message = EmailMessage("big", "x" * (50 * 1024 * 1024), "a@origin.test", ["b@dest.test"])

    with pytest.raises(QueueError) as refused:
        QueueEmailBackend(store=store).send_messages([message])

    assert refused.value.code == "TOO_LARGE"
    assert "MAX_MESSAGE_SIZE" in refused.value.message
    assert store.count() == 0


def test_10000_recipients_go_out_in_transactions_of_at_most_rcpt_limit(dns: DnsServer) -> None:
    dns.mx("big.test", (10, "mx.big.test"))
    dns.a("mx.big.test", "127.0.0.2")
    recipients = [f"r{n}@big.test" for n in range(10_000)]
    with ScriptedSmtpServer("127.0.0.2") as server:
        settings = queue_settings(dns, server.port)

        result = asyncio.run(Deliverer(settings).deliver("a@origin.test", recipients, MESSAGE))

        commands = list(server.commands)
    assert all(o.state is RecipientState.DELIVERED for o in result.outcomes)
    assert len(result.outcomes) == 10_000
    transactions: list[int] = []
    for verb in commands:
        if verb == "MAIL":
            transactions.append(0)
        elif verb == "RCPT":
            transactions[-1] += 1
    assert commands.count("MAIL") == 10_000 // settings.rcpt_limit == len(transactions)
    assert max(transactions) <= settings.rcpt_limit
    assert sum(transactions) == 10_000
    assert commands.count("EHLO") == 1  # one session


@pytest.mark.parametrize("limit", [5, 2])
def test_100_mx_hosts_are_capped_at_mx_address_limit(dns: DnsServer, limit: int) -> None:
    dns.mx("many.test", *[(10, f"mx{n}.many.test") for n in range(100)])
    for n in range(100):
        dns.a(f"mx{n}.many.test", "127.0.0.2")
    with ScriptedSmtpServer("127.0.0.2", greeting=b"421 4.3.2 busy, try another\r\n") as server:
        settings = queue_settings(dns, server.port, mx_address_limit=limit)

        result = asyncio.run(Deliverer(settings).deliver("a@origin.test", ["r@many.test"], MESSAGE))

        connections = server.connections
    assert result.outcomes[0].state is RecipientState.PENDING
    assert connections == limit


def test_a_slow_dns_zone_does_not_starve_other_domains(dns: DnsServer) -> None:
    dns.slow("slow.test", delay=None)  # never answers: each lookup waits out the DNS timeout
    for n in range(4):
        dns.mx(f"fast{n}.test", (10, f"mx.fast{n}.test"))
        dns.a(f"mx.fast{n}.test", "127.0.0.2")
    dns_timeout = 8.0
    with ScriptedSmtpServer("127.0.0.2") as server:
        settings = queue_settings(
            dns,
            server.port,
            dns_timeout=dns_timeout,
            concurrency=10,
            poll_interval=0.1,
            history_days=0,
            retry_delays=(60,),
        )
        store = MemoryStore()
        now = SystemClock().now()
        slow = [store.add(NewItem("a@origin.test", (f"s{n}@slow.test",), MESSAGE), now=now) for n in range(3)]
        fast = [store.add(NewItem("a@origin.test", (f"f{n}@fast{n % 4}.test",), MESSAGE), now=now) for n in range(40)]

        async def run() -> tuple[float, int]:
            worker = Worker(store=store, settings=settings)
            task = asyncio.create_task(worker.run())
            started = time.monotonic()
            while any(store.get(item.id) is not None for item in fast) and time.monotonic() - started < 30:
                await asyncio.sleep(0.05)
            took = time.monotonic() - started
            waiting = sum(1 for item in slow if (kept := store.get(item.id)) is not None and kept.attempts == 0)
            worker.stop()
            await asyncio.wait_for(task, 30)
            return took, waiting

        took, slow_still_waiting = asyncio.run(run())
        delivered = len(server.data)
    assert delivered >= 40
    assert took < dns_timeout, f"the other domains waited {took:.1f} s: as long as the slow lookup"
    assert slow_still_waiting == 3  # the slow lookups were still under way meanwhile
    assert dns.asked("slow.test") >= 1


def test_free_port_is_usable() -> None:
    assert free_port(("127.0.0.2",)) > 0

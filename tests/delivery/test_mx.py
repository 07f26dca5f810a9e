"""MX resolution end to end: preference order, equal preferences shuffled, implicit MX, null MX, DNS failures."""

from __future__ import annotations

import time
from collections import Counter

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ServerPool


async def test_preferred_mx_refusing_connections_delivers_through_the_second(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    dns_server.mx("example.test", (10, "mx1.example.test"), (20, "mx2.example.test"))
    dns_server.a("mx1.example.test", "127.0.0.4")  # nothing listens there: connection refused
    dns_server.a("mx2.example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.DELIVERED
    assert outcome.remote_mta == "mx2.example.test"
    assert outcome.reply.code == 250
    assert [m.rcpt_tos for m in server.messages] == [["rcpt@example.test"]]
    assert server.messages[0].helo == "client.test.example"


async def test_equal_preferences_are_tried_in_varying_order(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2", "127.0.0.3")
    first, second = smtp_servers.smtp("127.0.0.2"), smtp_servers.smtp("127.0.0.3")
    deliverer = Deliverer(make_settings())

    hosts: Counter[str] = Counter()
    for _ in range(20):
        result = await deliverer.deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)
        assert result.outcomes[0].state is RecipientState.DELIVERED
        hosts[result.outcomes[0].remote_mta] += 1

    assert set(hosts) == {"mx1.example.test", "mx2.example.test"}
    assert len(first.messages) + len(second.messages) == 20
    assert first.messages and second.messages


async def test_mx_hosts_without_address_do_not_fall_back_to_the_domains_a_record(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    dns_server.mx("example.test", (10, "nowhere.example.test"))
    dns_server.a("example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.4.4"
    assert dns_server.asked("example.test", "A") == 0
    assert server.connections == 0


async def test_no_mx_record_delivers_to_the_a_address(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    dns_server.a("implicit.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@implicit.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.DELIVERED
    assert outcome.remote_mta == "implicit.test"
    assert [m.rcpt_tos for m in server.messages] == [["rcpt@implicit.test"]]
    assert dns_server.asked("implicit.test", "MX") == 1


async def test_null_mx_fails_5_1_10_without_connecting(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    dns_server.null_mx("nomail.test")
    dns_server.a("nomail.test", "127.0.0.2")  # must not be used as an implicit MX
    server = smtp_servers.smtp("127.0.0.2")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@nomail.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.FAILED
    assert outcome.reply.status == "5.1.10"
    assert outcome.reply.code is None
    assert server.connections == 0
    assert dns_server.asked("nomail.test", "A") == 0


async def test_nxdomain_fails_5_1_2(dns_server: DnsServer, make_settings: MakeSettings) -> None:
    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@gone.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.FAILED
    assert outcome.reply.status == "5.1.2"
    assert outcome.reply.code is None
    assert outcome.remote_mta == ""


async def test_no_mx_a_or_aaaa_fails_5_1_2(dns_server: DnsServer, make_settings: MakeSettings) -> None:
    dns_server.exists("empty.test")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@empty.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.FAILED
    assert result.outcomes[0].reply.status == "5.1.2"


async def test_servfail_defers_4_4_3(dns_server: DnsServer, make_settings: MakeSettings) -> None:
    dns_server.servfail("broken.test")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@broken.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.4.3"
    assert outcome.reply.code is None


async def test_servfail_on_the_implicit_a_lookup_defers_never_bounces(
    dns_server: DnsServer, make_settings: MakeSettings
) -> None:
    dns_server.exists("half.test")  # MX: NODATA
    dns_server.servfail("half.test", "A")  # AAAA: NODATA, A: SERVFAIL

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@half.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.4.3"


async def test_servfail_on_the_mx_hosts_address_defers(dns_server: DnsServer, make_settings: MakeSettings) -> None:
    dns_server.mx("example.test", (10, "mx1.example.test"))
    dns_server.servfail("mx1.example.test")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.PENDING
    assert result.outcomes[0].reply.status == "4.4.3"


async def test_dns_timeout_defers_4_4_3_within_the_dns_timeout(
    dns_server: DnsServer, make_settings: MakeSettings
) -> None:
    dns_server.slow("slow.test", delay=None)
    started = time.monotonic()

    result = await Deliverer(make_settings(dns_timeout=0.5)).deliver("sender@origin.test", ["rcpt@slow.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.4.3"
    assert time.monotonic() - started < 3


async def test_at_most_mx_address_limit_addresses_are_tried(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    dns_server.mx("example.test", *[(10 * n, f"mx{n}.example.test") for n in range(1, 5)])
    for n in range(1, 4):
        dns_server.a(f"mx{n}.example.test", "127.0.0.4")  # refused
    dns_server.a("mx4.example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2")

    result = await Deliverer(make_settings(mx_address_limit=3)).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    assert result.outcomes[0].state is RecipientState.PENDING
    assert result.outcomes[0].reply.status == "4.4.1"
    assert server.connections == 0


async def test_idn_domain_is_resolved_in_a_label_form(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "xn--bcher-kva.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", smtputf8=False)

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["Reader@Bücher.test"], MESSAGE)

    assert result.outcomes[0].address == "Reader@Bücher.test"
    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert server.messages[0].rcpt_tos == ["Reader@xn--bcher-kva.test"]

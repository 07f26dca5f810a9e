"""The connection cache: messages to one server reuse a connection; a stale one is replaced."""

from __future__ import annotations

import asyncio

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from django_mailqueue.delivery.smtp import SmtpTransport
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ServerPool


async def test_messages_to_one_server_share_a_connection(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    mx_domain(dns_server, "example.test", "127.0.0.2")
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=5))
    try:
        for n in range(5):
            result = await deliverer.deliver("sender@origin.test", [f"r{n}@example.test"], MESSAGE)
            assert result.outcomes[0].state is RecipientState.DELIVERED
    finally:
        await deliverer.aclose()
    assert len(server.messages) == 5
    assert server.connections == 1
    assert server.commands.count("EHLO") == 1
    assert server.commands.count("MAIL") == 5 and server.commands[-1] == "QUIT"


async def test_concurrent_messages_open_parallel_connections_then_reuse_them(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    mx_domain(dns_server, "example.test", "127.0.0.2")
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=5, destination_concurrency=3))
    try:
        for _ in range(3):
            results = await asyncio.gather(
                *(deliverer.deliver("s@origin.test", [f"r{n}@example.test"], MESSAGE) for n in range(6))
            )
            assert all(r.outcomes[0].state is RecipientState.DELIVERED for r in results)
    finally:
        await deliverer.aclose()
    assert len(server.messages) == 18
    assert server.connections <= 3  # the per-destination cap, and the connections reused across rounds


async def test_a_connection_idle_past_the_cache_time_is_not_reused(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    mx_domain(dns_server, "example.test", "127.0.0.2")
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=0.2))
    try:
        await deliverer.deliver("s@origin.test", ["a@example.test"], MESSAGE)
        await asyncio.sleep(0.5)
        await deliverer.deliver("s@origin.test", ["b@example.test"], MESSAGE)
    finally:
        await deliverer.aclose()
    assert len(server.messages) == 2 and server.connections == 2


async def test_a_connection_kept_again_and_again_is_closed_once_idle_past_the_cache_time(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    mx_domain(dns_server, "example.test", "127.0.0.2")
    transport = SmtpTransport(cache_time=0.3)
    deliverer = Deliverer(make_settings(), transport=transport)
    try:
        for n in range(6):  # kept six times, past the cache time of its first keep
            await deliverer.deliver("s@origin.test", [f"r{n}@example.test"], MESSAGE)
            await asyncio.sleep(0.1)
        (pool,) = transport._idle.values()
        (idle,) = pool
        assert idle.smtp.is_connected and len(transport._expiry) == 1  # one timer for the server, not one a keep
        await asyncio.sleep(0.6)
        assert pool == [] and not idle.smtp.is_connected and transport._expiry == {}
    finally:
        await deliverer.aclose()
    assert len(server.messages) == 6 and server.connections == 1


async def test_a_cached_connection_the_server_closed_is_replaced(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    mx_domain(dns_server, "example.test", "127.0.0.2")
    transport = SmtpTransport(cache_time=30)
    deliverer = Deliverer(make_settings(), transport=transport)
    try:
        await deliverer.deliver("s@origin.test", ["a@example.test"], MESSAGE)
        server.stop()  # the server goes away and comes back: the cached connection is dead
        smtp_servers._servers.remove(server)
        server = smtp_servers.smtp("127.0.0.2")
        result = await deliverer.deliver("s@origin.test", ["b@example.test"], MESSAGE)
    finally:
        await deliverer.aclose()
    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert [m.rcpt_tos for m in server.messages] == [["b@example.test"]]


async def test_without_a_cache_every_session_says_quit(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    mx_domain(dns_server, "example.test", "127.0.0.2")
    deliverer = Deliverer(make_settings())
    for n in range(2):
        await deliverer.deliver("s@origin.test", [f"r{n}@example.test"], MESSAGE)
    assert server.connections == 2 and server.commands.count("QUIT") == 2

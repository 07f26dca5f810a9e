"""How a session ends: QUIT before every close that is not a broken connection (RFC 5321 §4.1.1.10) —
after the message, at idle expiry, when the cache retires a connection, when the worker stops —; and a
session that collected errors (no recipient accepted, a 421) is closed, not kept for the next message."""

from __future__ import annotations

import asyncio
import time

import pytest

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from django_mailqueue.delivery.session import QUIT_TIMEOUT
from django_mailqueue.delivery.smtp import SmtpTransport
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import SILENT, ServerPool, Trickle


async def _closed(server_lines: list[bytes], expected: int) -> None:
    """Wait (briefly) for the background QUITs to reach the server."""
    for _ in range(100):
        if server_lines.count(b"QUIT") >= expected:
            return
        await asyncio.sleep(0.02)


async def test_a_connection_idle_past_the_cache_time_says_quit(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.scripted("127.0.0.2")
    mx_domain(dns_server, "example.test", "127.0.0.2")
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=0.2))
    try:
        await deliverer.deliver("s@origin.test", ["a@example.test"], MESSAGE)
        assert b"QUIT" not in server.lines  # kept for the next message
        await asyncio.sleep(0.5)
        await _closed(server.lines, 1)
        assert server.lines[-1] == b"QUIT"  # the expiry said it, before any aclose
    finally:
        await deliverer.aclose()
    assert server.lines.count(b"QUIT") == 1 and server.connections == 1


async def test_a_connection_past_the_reuse_time_says_quit_when_the_cache_retires_it(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.scripted("127.0.0.2")
    mx_domain(dns_server, "example.test", "127.0.0.2")
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=5, reuse_time=0.2))
    try:
        await deliverer.deliver("s@origin.test", ["a@example.test"], MESSAGE)
        await asyncio.sleep(0.3)
        await deliverer.deliver("s@origin.test", ["b@example.test"], MESSAGE)  # a new connection
        await _closed(server.lines, 1)
        assert server.lines.count(b"QUIT") == 1 and server.connections == 2
    finally:
        await deliverer.aclose()
    assert server.lines.count(b"QUIT") == 2


async def test_stopping_says_quit_to_every_cached_connection_at_once_within_the_bound(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    # never answers QUIT; MAIL answered slowly, so the three sessions overlap and open three connections
    slow_mail = Trickle(b"250 2.1.0 Ok\r\n", interval=0.03, forever=False)
    server = smtp_servers.scripted("127.0.0.2", replies={"QUIT": SILENT, "MAIL": slow_mail})
    mx_domain(dns_server, "example.test", "127.0.0.2")
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=30))
    messages = [deliverer.deliver("s@origin.test", [f"r{n}@example.test"], MESSAGE) for n in range(3)]
    results = await asyncio.gather(*messages)
    assert all(r.outcomes[0].state is RecipientState.DELIVERED for r in results)
    assert server.connections == 3
    started = time.monotonic()

    await deliverer.aclose()

    assert server.lines.count(b"QUIT") == 3
    assert time.monotonic() - started < 2 * QUIT_TIMEOUT  # bounded once, not once a connection


@pytest.mark.parametrize("refusing", ["MAIL", "RCPT"])
async def test_a_session_whose_last_transaction_accepted_no_recipient_says_quit_and_is_not_kept(
    refusing: str, make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    refusal = {"MAIL": {"mail_reply": "553 5.7.1 sender rejected"}, "RCPT": {"rcpt_replies": {
        "unknown@example.test": "550 5.1.1 no such user"}}}[refusing]  # fmt: skip
    server = smtp_servers.smtp("127.0.0.2", **refusal)  # type: ignore[arg-type]
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=30))
    try:
        refused = await deliverer.deliver("s@origin.test", ["unknown@example.test"], MESSAGE)
        assert refused.outcomes[0].state is RecipientState.FAILED
        assert server.commands[-2:] == ["RSET", "QUIT"]
        await deliverer.deliver("s@origin.test", ["unknown@example.test"], MESSAGE)
    finally:
        await deliverer.aclose()
    assert server.connections == 2  # the first session was not reused


async def test_a_session_that_accepted_a_recipient_is_kept(
    make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", rcpt_replies={"unknown@example.test": "550 5.1.1 no such user"})
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=30))
    try:
        for _ in range(2):
            await deliverer.deliver("s@origin.test", ["unknown@example.test", "known@example.test"], MESSAGE)
    finally:
        await deliverer.aclose()
    assert server.connections == 1 and server.commands.count("QUIT") == 1


@pytest.mark.parametrize("where", ["MAIL", "RCPT", "DATA", "END"])
async def test_a_421_anywhere_ends_the_session_with_quit_and_it_is_not_kept(
    where: str, make_settings: MakeSettings, dns_server: DnsServer, smtp_servers: ServerPool
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2", replies={where: b"421 4.7.0 too many errors\r\n"})
    deliverer = Deliverer(make_settings(), transport=SmtpTransport(cache_time=30))
    try:
        result = await deliverer.deliver("s@origin.test", ["a@example.test"], MESSAGE)
        (outcome,) = result.outcomes
        assert (outcome.state, outcome.reply.code) == (RecipientState.PENDING, 421)
        assert server.lines[-1] == b"QUIT"
        await deliverer.deliver("s@origin.test", ["b@example.test"], MESSAGE)
    finally:
        await deliverer.aclose()
    assert server.connections == 2

"""The SMTP session: per-recipient replies, one DATA, next host on a bad greeting, 421, drops, timeouts, deadline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import CLOSE, DEFAULT_EHLO, SILENT, DropDuringData, ServerPool, Trickle


async def test_three_recipients_250_550_451_in_one_session_with_one_data(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp(
        "127.0.0.2",
        rcpt_replies={
            "bob@example.test": "550 5.1.1 <bob@example.test>: no such user",
            "carol@example.test": "451 4.3.0 try again later",
        },
    )
    recipients = ["alice@example.test", "bob@example.test", "carol@example.test"]

    result = await Deliverer(make_settings()).deliver("sender@origin.test", recipients, MESSAGE)

    alice, bob, carol = result.outcomes
    assert [o.address for o in result.outcomes] == recipients
    assert (alice.state, alice.reply.code, alice.reply.status) == (RecipientState.DELIVERED, 250, "2.0.0")
    assert alice.reply.text == "OK queued"
    assert (bob.state, bob.reply.code, bob.reply.status) == (RecipientState.FAILED, 550, "5.1.1")
    assert bob.reply.text == "<bob@example.test>: no such user"
    assert (carol.state, carol.reply.code, carol.reply.status) == (RecipientState.PENDING, 451, "4.3.0")
    assert {o.remote_mta for o in result.outcomes} == {"mx1.example.test"}
    assert server.connections == 1
    assert server.commands.count("DATA") == 1
    assert [m.rcpt_tos for m in server.messages] == [["alice@example.test"]]
    assert result.possibly_delivered == frozenset()
    assert result.errors == ()


async def test_recipients_over_rcpt_limit_go_in_several_transactions_of_one_session(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2")
    recipients = [f"r{n}@example.test" for n in range(5)]

    result = await Deliverer(make_settings(rcpt_limit=2)).deliver("sender@origin.test", recipients, MESSAGE)

    assert all(o.state is RecipientState.DELIVERED for o in result.outcomes)
    assert server.connections == 1
    assert [m.rcpt_tos for m in server.messages] == [recipients[0:2], recipients[2:4], recipients[4:5]]


async def test_domains_are_delivered_concurrently_each_in_its_own_session(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "one.test", "127.0.0.2")
    mx_domain(dns_server, "two.test", "127.0.0.3")
    first, second = smtp_servers.smtp("127.0.0.2"), smtp_servers.smtp("127.0.0.3")

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@one.test", "b@two.test", "c@one.test"], MESSAGE
    )

    assert [o.state for o in result.outcomes] == [RecipientState.DELIVERED] * 3
    assert [m.rcpt_tos for m in first.messages] == [["a@one.test", "c@one.test"]]
    assert [m.rcpt_tos for m in second.messages] == [["b@two.test"]]


async def test_5xx_greeting_on_the_first_host_moves_to_the_next(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    dns_server.mx("example.test", (10, "mx1.example.test"), (20, "mx2.example.test"))
    dns_server.a("mx1.example.test", "127.0.0.2")
    dns_server.a("mx2.example.test", "127.0.0.3")
    refusing = smtp_servers.scripted("127.0.0.2", greeting=b"554 5.7.1 no service for you\r\n")
    server = smtp_servers.smtp("127.0.0.3")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert result.outcomes[0].remote_mta == "mx2.example.test"
    assert refusing.connections == 1 and refusing.lines in ([], [b"QUIT"])
    assert len(server.messages) == 1


async def test_5xx_greeting_on_the_last_host_defers_not_bounces(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", greeting=b"554 5.7.1 no service for you\r\n")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert (outcome.reply.code, outcome.reply.status) == (554, "4.7.1")
    assert outcome.reply.text == "no service for you"


async def test_4xx_greeting_moves_to_the_next_host(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    dns_server.mx("example.test", (10, "mx1.example.test"), (20, "mx2.example.test"))
    dns_server.a("mx1.example.test", "127.0.0.2")
    dns_server.a("mx2.example.test", "127.0.0.3")
    smtp_servers.scripted("127.0.0.2", greeting=b"421 4.3.2 too busy\r\n")
    smtp_servers.smtp("127.0.0.3")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert result.outcomes[0].remote_mta == "mx2.example.test"


async def test_421_mid_session_defers_the_rest(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp(
        "127.0.0.2",
        rcpt_replies={
            "b@example.test": "421 4.3.2 shutting down",
            "c@example.test": "550 5.1.1 never asked",
        },
    )

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@example.test", "b@example.test", "c@example.test"], MESSAGE
    )

    for outcome in result.outcomes:
        assert outcome.state is RecipientState.PENDING
        assert (outcome.reply.code, outcome.reply.status, outcome.reply.text) == (421, "4.3.2", "shutting down")
    assert server.commands.count("RCPT") == 2
    assert "DATA" not in server.commands
    assert server.messages == []


def _more_than_socket_buffers() -> int:
    """More bytes than a loopback connection takes in while its receiver reads nothing: Linux grows the
    send buffer up to tcp_wmem's maximum (4 MiB here, ~4.2 MB taken in measured), the receiver's buffer
    holds far less."""
    try:
        largest = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    except (OSError, ValueError, IndexError):
        largest = 4 * 1024 * 1024
    return 2 * largest + 2 * 1024 * 1024


async def test_connection_dropped_during_data_defers_4_4_2(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    # The server drops 0.1 s late, as a loaded machine's server thread may: the message is larger than
    # the socket buffers hold, so the client is still writing it then (a 4 MB one fitted: flaky).
    server = smtp_servers.scripted(
        "127.0.0.2",
        replies={
            "EHLO": DEFAULT_EHLO.replace(b"SIZE 10000000", b"SIZE 0"),
            "DATA": DropDuringData(after=100, delay=0.1),
        },
    )
    big = MESSAGE + b"x" * 70 + b"\r\n" * 1 + (b"y" * 998 + b"\r\n") * (_more_than_socket_buffers() // 1000)

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], big)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.4.2"
    assert outcome.reply.code is None
    assert result.possibly_delivered == frozenset()  # lost while writing: the message cannot have gone
    assert server.data == []


async def test_server_silent_after_rcpt_defers_within_the_data_timeout(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", replies={"DATA": SILENT})
    started = time.monotonic()

    result = await Deliverer(make_settings(data=1.0)).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    elapsed = time.monotonic() - started
    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.4.1"
    assert "DATA" in outcome.reply.text
    assert 0.9 < elapsed < 3
    assert result.possibly_delivered == frozenset()


async def test_reply_lost_after_the_final_dot_is_deferred_and_possibly_delivered(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2", replies={"END": SILENT})

    result = await Deliverer(make_settings(data_end=1.0)).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.4.1"
    assert result.possibly_delivered == frozenset({"rcpt@example.test"})
    assert len(server.data) == 1


async def test_connection_closed_after_the_final_dot_is_possibly_delivered(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", replies={"END": CLOSE})

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.PENDING
    assert result.outcomes[0].reply.status == "4.4.2"
    assert result.possibly_delivered == frozenset({"rcpt@example.test"})


async def test_trickling_server_is_cut_by_the_attempt_deadline(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", greeting=Trickle(b"220-still talking\r\n", interval=0.3))
    started = time.monotonic()

    result = await Deliverer(make_settings(greeting=60.0, session=2.0)).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    elapsed = time.monotonic() - started
    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.4.1"
    assert "deadline" in outcome.reply.text
    assert 1.9 < elapsed < 3.5


async def test_deadline_during_the_reply_to_the_final_dot_is_possibly_delivered(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", replies={"END": Trickle(b"250-ok\r\n", interval=0.2)})

    result = await Deliverer(make_settings(data_end=60.0, session=1.5)).deliver(
        "sender@origin.test", ["rcpt@example.test"], MESSAGE
    )

    assert result.outcomes[0].state is RecipientState.PENDING
    assert result.possibly_delivered == frozenset({"rcpt@example.test"})


async def test_mail_from_refused_applies_to_every_recipient_and_sends_no_data(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", mail_reply="553 5.7.1 sender rejected")

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@example.test", "b@example.test"], MESSAGE
    )

    assert [(o.state, o.reply.status) for o in result.outcomes] == [(RecipientState.FAILED, "5.7.1")] * 2
    assert "RCPT" not in server.commands and "DATA" not in server.commands


@pytest.mark.parametrize("pipelining", [False, True], ids=["one at a time", "pipelined"])
async def test_data_reply_applies_to_the_accepted_recipients(
    pipelining: bool, dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.smtp(
        "127.0.0.2",
        data_reply="554 5.7.1 spam detected",
        pipelining=pipelining,
        rcpt_replies={"b@example.test": "452 4.2.2 mailbox full"},
    )

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@example.test", "b@example.test"], MESSAGE
    )

    a, b = result.outcomes
    assert (a.state, a.reply.status, a.reply.text) == (RecipientState.FAILED, "5.7.1", "spam detected")
    assert (b.state, b.reply.status) == (RecipientState.PENDING, "4.2.2")


async def test_no_accepted_recipient_means_no_data(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", rcpt_replies={"a@example.test": "550 5.1.1 unknown"})

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["a@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.FAILED
    assert "DATA" not in server.commands
    assert server.commands[-2:] == ["RSET", "QUIT"]


async def test_helo_fallback_when_ehlo_is_refused(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2", replies={"EHLO": b"502 5.5.2 what?\r\n"})

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert server.commands[:3] == ["EHLO", "HELO", "MAIL"]
    assert server.lines[1] == b"HELO client.test.example"


async def test_invalid_sender_fails_every_recipient_5_1_7_without_a_session(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2")

    result = await Deliverer(make_settings()).deliver(
        "evil@origin.test>\r\nRCPT TO:<x@y.test", ["a@example.test", "b@example.test"], MESSAGE
    )

    assert [(o.state, o.reply.status) for o in result.outcomes] == [(RecipientState.FAILED, "5.1.7")] * 2
    assert server.connections == 0
    assert dns_server.queries == []


async def test_invalid_recipient_fails_5_1_3_alone(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2")

    result = await Deliverer(make_settings()).deliver(
        "", ["ok@example.test", "bad\r\n@example.test", "no-domain"], MESSAGE
    )

    ok, bad, no_domain = result.outcomes
    assert ok.state is RecipientState.DELIVERED
    assert (bad.state, bad.reply.status) == (RecipientState.FAILED, "5.1.3")
    assert (no_domain.state, no_domain.reply.status) == (RecipientState.FAILED, "5.1.3")
    assert server.messages[0].mail_from == "<>" or server.messages[0].mail_from == ""
    assert server.messages[0].rcpt_tos == ["ok@example.test"]


@pytest.mark.parametrize(
    ("greeting", "script", "unreachable"),
    [
        (SILENT, {}, True),  # no greeting
        (CLOSE, {}, True),  # closed before its greeting
        (b"554 5.7.1 no service for you\r\n", {}, False),  # a reply: the server is there
        (b"220 hello\r\n", {"EHLO": SILENT, "HELO": SILENT}, False),  # after the greeting
        (b"220 hello\r\n", {"EHLO": CLOSE}, False),
    ],
)
async def test_only_a_host_that_could_not_be_reached_is_reported_unreachable(
    dns_server: DnsServer,
    smtp_servers: ServerPool,
    make_settings: MakeSettings,
    greeting: Any,
    script: dict[str, Any],
    unreachable: bool,
) -> None:
    """A dead destination's sign (docs/shaping.md, "Dead destinations"): refused, timed out, no greeting."""
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", greeting=greeting, replies=script)

    result = await Deliverer(make_settings(greeting=0.5)).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.PENDING
    (report,) = result.destinations
    assert report.unreachable is unreachable, result.outcomes[0].reply


async def test_a_refused_connection_is_reported_unreachable(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")  # nobody listens on the pool's port there

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (report,) = result.destinations
    assert report.unreachable and "connect to" in result.outcomes[0].reply.text

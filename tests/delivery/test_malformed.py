"""Replies that are not proper SMTP — malformed, overlong, not UTF-8 — are temporary, and their text is kept clean."""

from __future__ import annotations

import pytest

from django_mailqueue.core.items import RecipientState, Reply
from django_mailqueue.core.text import MAX_REPLY_TEXT
from django_mailqueue.delivery import Deliverer
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ServerPool


def assert_clean(reply: Reply) -> None:
    assert "\x00" not in reply.text and "\r" not in reply.text and "\n" not in reply.text
    assert not any("\ud800" <= ch <= "\udfff" for ch in reply.text)
    reply.text.encode("utf-8")  # storable anywhere
    assert len(reply.text) <= MAX_REPLY_TEXT


BAD_RCPT_REPLIES = {
    "garbage": b"this is not smtp\r\n",
    "short code": b"55 no\r\n",
    "code out of range": b"650 5.1.1 what\r\n",
    "overlong line": b"550 5.1.1 " + b"x" * 9000 + b"\r\n",
    "endless continuation": b"".join(b"550-5.1.1 " + b"y" * 500 + b"\r\n" for _ in range(100)) + b"550 end\r\n",
    "not utf-8": b"550 5.1.1 \xff\xfe\xfd no such user \xc3\x28\r\n",
    "not utf-8 with nul": b"550 5.1.1 \x00\xff bad\r\n",
}


@pytest.mark.parametrize("raw", BAD_RCPT_REPLIES.values(), ids=BAD_RCPT_REPLIES.keys())
async def test_malformed_rcpt_reply_is_temporary_and_clean(
    raw: bytes, dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", replies={"RCPT": raw})

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status.startswith("4.")
    assert not outcome.reply.permanent
    assert_clean(outcome.reply)


async def test_non_utf8_reply_to_the_final_dot_is_temporary_and_possibly_delivered(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", replies={"END": b"250 2.0.0 queued \xff\xfe\r\n"})

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.PENDING
    assert outcome.reply.status == "4.5.0"
    assert_clean(outcome.reply)
    assert result.possibly_delivered == frozenset({"rcpt@example.test"})


async def test_malformed_greeting_moves_on_and_defers(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", greeting=b"hello? \xff\r\n")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.PENDING
    assert result.outcomes[0].reply.status.startswith("4.")
    assert_clean(result.outcomes[0].reply)


async def test_long_but_readable_reply_keeps_its_code_and_bounded_text(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", replies={"RCPT": b"550 5.1.1 " + b"w" * 3000 + b"\x07\r\n"})

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert (outcome.state, outcome.reply.code, outcome.reply.status) == (RecipientState.FAILED, 550, "5.1.1")
    assert_clean(outcome.reply)
    assert len(outcome.reply.text) == MAX_REPLY_TEXT


async def test_multiline_reply_is_joined_without_repeated_status(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted(
        "127.0.0.2",
        replies={
            "RCPT": b"550-5.1.1 The email account that you tried to reach does not exist.\r\n"
            b"550 5.1.1 Please try double-checking the address.\r\n"
        },
    )

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    reply = result.outcomes[0].reply
    assert (reply.code, reply.status) == (550, "5.1.1")
    assert reply.text == (
        "The email account that you tried to reach does not exist. Please try double-checking the address."
    )

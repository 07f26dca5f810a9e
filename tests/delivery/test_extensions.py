"""ESMTP extensions: SIZE checked before MAIL, SMTPUTF8 used when needed (5.6.7 without it), 8BITMIME."""

from __future__ import annotations

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ServerPool


async def test_message_over_the_servers_size_fails_5_3_4_before_data(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", size_limit=1000)
    message = MESSAGE + b"z" * 5000 + b"\r\n"

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], message)

    (outcome,) = result.outcomes
    assert outcome.state is RecipientState.FAILED
    assert (outcome.reply.code, outcome.reply.status) == (None, "5.3.4")
    assert "1000" in outcome.reply.text
    assert outcome.remote_mta == "mx1.example.test"
    assert "MAIL" not in server.commands and "DATA" not in server.commands


async def test_size_is_declared_on_mail_from(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    mail = next(line for line in server.lines if line.startswith(b"MAIL"))
    assert mail == b"MAIL FROM:<sender@origin.test> SIZE=%d" % len(MESSAGE)


async def test_utf8_address_to_a_server_without_smtputf8_fails_5_6_7(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", smtputf8=False)

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["josé@example.test", "plain@example.test"], MESSAGE
    )

    jose, plain = result.outcomes
    assert (jose.state, jose.reply.status, jose.reply.code) == (RecipientState.FAILED, "5.6.7", None)
    # the transaction as a whole needs SMTPUTF8: the ASCII recipient in it fails alike
    assert (plain.state, plain.reply.status) == (RecipientState.FAILED, "5.6.7")
    assert "MAIL" not in server.commands


async def test_utf8_address_to_a_server_with_smtputf8_is_delivered(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", smtputf8=True)

    result = await Deliverer(make_settings()).deliver("sénder@origin.test", ["josé@example.test"], MESSAGE)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    (message,) = server.messages
    assert message.smtp_utf8 is True
    assert message.mail_from == "sénder@origin.test"
    assert message.rcpt_tos == ["josé@example.test"]


async def test_utf8_headers_need_smtputf8(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.smtp("127.0.0.2", smtputf8=False)
    message = "From: josé@origin.test\r\nSubject: ¡hola!\r\n\r\nbody\r\n".encode()

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], message)

    assert result.outcomes[0].reply.status == "5.6.7"


async def test_8bit_body_is_sent_with_body_8bitmime(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", smtputf8=False)
    message = b"From: a@origin.test\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" + "café\r\n".encode()

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["rcpt@example.test"], message)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert "BODY=8BITMIME" in server.messages[0].mail_options
    assert server.messages[0].data.endswith("café\r\n".encode())

"""A server's recipient limit (RFC 5321 §4.5.3.1.10): a 452 after some recipients were accepted sends the
rest in another transaction of the same session, at once — until the server accepts none."""

from __future__ import annotations

import pytest

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from django_mailqueue.delivery.replies import too_many_recipients
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ServerPool


@pytest.mark.parametrize("pipelining", [False, True], ids=["one-by-one", "pipelined"])
async def test_15_recipients_to_a_server_taking_10_are_all_delivered_in_one_attempt(
    pipelining: bool, dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", rcpt_limit=10, pipelining=pipelining)
    recipients = [f"r{n}@example.test" for n in range(15)]

    result = await Deliverer(make_settings()).deliver("sender@origin.test", recipients, MESSAGE)

    assert [o.state for o in result.outcomes] == [RecipientState.DELIVERED] * 15
    assert [m.rcpt_tos for m in server.messages] == [recipients[:10], recipients[10:]]
    assert server.connections == 1
    assert server.commands.count("QUIT") == 1


async def test_the_rest_goes_again_until_the_server_accepts_none(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    full = b"452 4.5.3 Error: too many recipients\r\n"
    server = smtp_servers.scripted("127.0.0.2", rcpt_replies={"b@example.test": full, "c@example.test": full})

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@example.test", "b@example.test", "c@example.test"], MESSAGE
    )

    a, b, c = result.outcomes
    assert a.state is RecipientState.DELIVERED
    assert [(o.state, o.reply.code, o.reply.status) for o in (b, c)] == [(RecipientState.PENDING, 452, "4.5.3")] * 2
    # the first transaction took a; the second took none of b and c, so no third
    assert server.commands == ["EHLO", "MAIL", "RCPT", "RCPT", "RCPT", "DATA", "MAIL", "RCPT", "RCPT", "RSET",
                               "QUIT"]  # fmt: skip
    assert len(server.data) == 1


async def test_a_452_before_any_recipient_was_accepted_only_defers(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", rcpt_replies={"a@example.test": "452 4.2.2 mailbox full"})

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@example.test", "b@example.test"], MESSAGE
    )

    a, b = result.outcomes
    assert (a.state, a.reply.status) == (RecipientState.PENDING, "4.2.2")
    assert b.state is RecipientState.DELIVERED
    assert server.commands.count("MAIL") == 1


def test_too_many_recipients_is_a_452_after_an_accepted_one() -> None:
    assert too_many_recipients(452, accepted=1)
    assert not too_many_recipients(452, accepted=0)
    assert not too_many_recipients(451, accepted=3)
    assert not too_many_recipients(552, accepted=3)

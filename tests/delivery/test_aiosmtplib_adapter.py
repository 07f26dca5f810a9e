"""The adapter to aiosmtplib's private parts: its check of the installed aiosmtplib, and delivery through
aiosmtplib's public API (no PIPELINING) when the check fails — the same session tests, through the fallback."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

import pytest
from aiosmtplib.protocol import SMTPProtocol

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer, aiosmtplib_adapter
from django_mailqueue.delivery.aiosmtplib_adapter import (
    ACCESS,
    PrivateAccess,
    PublicAccess,
    access_for,
    missing_parts,
)
from tests.delivery import test_connection_cache, test_malformed, test_pipelining, test_session, test_smuggling
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.delivery.test_pipelining import GroupAnsweringServer
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ServerPool


class OldProtocol(SMTPProtocol):
    """aiosmtplib's protocol as 5.1.2 has it: no `_response_pending` (added in 5.1.3)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        vars(self).pop("_response_pending", None)


def test_the_installed_aiosmtplib_is_checked_at_import() -> None:
    installed = tuple(int(part) for part in version("aiosmtplib").split(".")[:3])
    missing = missing_parts()
    if installed >= (5, 1, 3):
        assert missing == ()
    else:
        assert "_response_pending" in missing
    assert isinstance(ACCESS, PublicAccess if missing else PrivateAccess)
    assert ACCESS.pipelining is not missing


def test_a_protocol_lacking_a_part_gets_the_public_api_announced_once(caplog: pytest.LogCaptureFixture) -> None:
    access = access_for(OldProtocol)
    assert isinstance(access, PublicAccess) and not access.pipelining
    assert access.missing == ("_response_pending",)
    with caplog.at_level(logging.WARNING, logger="django_mailqueue.delivery"):
        access.announce()
        access.announce()
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "_response_pending" in record.getMessage() and "without PIPELINING" in record.getMessage()


@pytest.fixture
def public_api(monkeypatch: pytest.MonkeyPatch) -> PublicAccess:
    """Sessions made from here on use aiosmtplib's public API, as with an aiosmtplib the check refuses."""
    access = access_for(OldProtocol)
    assert isinstance(access, PublicAccess)
    monkeypatch.setattr(aiosmtplib_adapter, "ACCESS", access)
    return access


async def test_through_the_public_api_nothing_is_pipelined(
    public_api: PublicAccess, dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.3")
    # This server answers MAIL only once DATA has come: one command at a time never gets an answer.
    async with GroupAnsweringServer("127.0.0.3", smtp_servers.port) as server:
        result = await Deliverer(make_settings(mail=0.5)).deliver("s@origin.test", ["a@example.test"], MESSAGE)
    (outcome,) = result.outcomes
    assert (outcome.state, outcome.reply.status) == (RecipientState.PENDING, "4.4.1")
    assert "MAIL" in outcome.reply.text
    assert [line.split(b" ")[0] for line in server.lines] == [b"EHLO", b"MAIL"]


async def test_a_pipelining_server_gets_one_command_at_a_time_and_the_mail(
    public_api: PublicAccess, dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", pipelining=True, rcpt_replies={"b@example.test": "550 5.1.1 unknown"})

    result = await Deliverer(make_settings()).deliver("s@origin.test", ["a@example.test", "b@example.test"], MESSAGE)

    assert [o.state for o in result.outcomes] == [RecipientState.DELIVERED, RecipientState.FAILED]
    assert server.commands == ["EHLO", "MAIL", "RCPT", "RCPT", "DATA", "QUIT"]
    assert [m.rcpt_tos for m in server.messages] == [["a@example.test"]]


SessionTest = Callable[..., Awaitable[None]]
#: Session tests that hold whichever way aiosmtplib is used: run again through the public API.
SAME_EITHER_WAY: list[SessionTest] = [
    test_session.test_three_recipients_250_550_451_in_one_session_with_one_data,
    test_session.test_recipients_over_rcpt_limit_go_in_several_transactions_of_one_session,
    test_session.test_421_mid_session_defers_the_rest,
    test_session.test_connection_dropped_during_data_defers_4_4_2,
    test_session.test_server_silent_after_rcpt_defers_within_the_data_timeout,
    test_session.test_reply_lost_after_the_final_dot_is_deferred_and_possibly_delivered,
    test_session.test_connection_closed_after_the_final_dot_is_possibly_delivered,
    test_session.test_deadline_during_the_reply_to_the_final_dot_is_possibly_delivered,
    test_session.test_mail_from_refused_applies_to_every_recipient_and_sends_no_data,
    test_session.test_no_accepted_recipient_means_no_data,
    test_malformed.test_non_utf8_reply_to_the_final_dot_is_temporary_and_possibly_delivered,
    test_pipelining.test_replies_in_separate_writes_each_decide_their_recipient,
    test_pipelining.test_421_inside_the_group_ends_the_session_and_defers_the_rest,
    test_connection_cache.test_messages_to_one_server_share_a_connection,
    test_connection_cache.test_a_cached_connection_the_server_closed_is_replaced,
]


@pytest.mark.parametrize("case", SAME_EITHER_WAY, ids=lambda case: case.__name__.removeprefix("test_"))
async def test_the_session_holds_through_the_public_api(
    case: SessionTest,
    public_api: PublicAccess,
    dns_server: DnsServer,
    smtp_servers: ServerPool,
    make_settings: MakeSettings,
) -> None:
    await case(dns_server=dns_server, smtp_servers=smtp_servers, make_settings=make_settings)


@pytest.mark.parametrize("size", [2_000, 200_000, 3_000_000])
async def test_a_large_message_is_drained_and_delivered_through_the_public_api(
    size: int,
    public_api: PublicAccess,
    dns_server: DnsServer,
    smtp_servers: ServerPool,
    make_settings: MakeSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await test_smuggling.test_the_end_of_data_mark_travels_with_the_last_block(
        size=size,
        dns_server=dns_server,
        smtp_servers=smtp_servers,
        make_settings=make_settings,
        monkeypatch=monkeypatch,
    )

"""PIPELINING (RFC 2920): MAIL, RCPT and DATA go in one write to a server that offers it; every reply is read,
in order, and decides as it would one command at a time."""

from __future__ import annotations

import asyncio

import pytest
from aiosmtplib.protocol import SMTPProtocol

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from django_mailqueue.delivery.aiosmtplib_adapter import ACCESS, PrivateAccess
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import CLOSE, PIPELINING_EHLO, SILENT, ServerPool

#: For tests of pipelining itself; the rest hold through aiosmtplib's public API too (test_aiosmtplib_adapter.py).
needs_pipelining = pytest.mark.skipif(
    not ACCESS.pipelining, reason="the installed aiosmtplib lacks what pipelining needs: the public API fallback"
)


class GroupAnsweringServer:
    """Answers MAIL and RCPT only once DATA has come, all replies in one write: a client that waits
    for each reply before the next command never gets one."""

    def __init__(self, host: str, port: int, *, rcpt: bytes = b"250 2.1.5 Ok\r\n") -> None:
        self.host, self.port, self.rcpt = host, port, rcpt
        self.lines: list[bytes] = []
        #: the commands each write of replies answered
        self.groups: list[list[str]] = []
        self.messages: list[bytes] = []
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> GroupAnsweringServer:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"220 group.test ESMTP\r\n")
        held: list[tuple[str, bytes]] = []
        try:
            while line := await reader.readline():
                self.lines.append(line.rstrip(b"\r\n"))
                verb = line[:4].decode().upper()
                if verb == "EHLO":
                    writer.write(PIPELINING_EHLO)
                elif verb in ("MAIL", "RCPT"):
                    held.append((verb, b"250 2.1.0 Ok\r\n" if verb == "MAIL" else self.rcpt))
                elif verb == "DATA":
                    self.groups.append([verb for verb, _ in held] + ["DATA"])
                    writer.write(b"".join(reply for _, reply in held) + b"354 go ahead\r\n")
                    held.clear()
                    message = bytearray()
                    while not message.endswith(b"\r\n.\r\n"):
                        message.extend(await reader.readline())
                    self.messages.append(bytes(message))
                    writer.write(b"250 2.0.0 Ok: queued\r\n")
                elif verb == "QUIT":
                    writer.write(b"221 2.0.0 Bye\r\n")
                    break
                else:
                    writer.write(b"250 2.0.0 Ok\r\n")
                await writer.drain()
        finally:
            writer.close()


@needs_pipelining
async def test_mail_rcpt_and_data_go_in_one_group(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.3")
    async with GroupAnsweringServer("127.0.0.3", smtp_servers.port) as server:
        result = await Deliverer(make_settings()).deliver(
            "sender@origin.test", ["a@example.test", "b@example.test"], MESSAGE
        )

    assert [o.state for o in result.outcomes] == [RecipientState.DELIVERED] * 2
    assert server.groups == [["MAIL", "RCPT", "RCPT", "DATA"]]
    assert len(server.messages) == 1


async def test_replies_in_separate_writes_each_decide_their_recipient(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted(
        "127.0.0.2",
        replies={"EHLO": PIPELINING_EHLO},
        rcpt_replies={
            "b@example.test": b"550 5.1.1 <b@example.test>: no such user\r\n",
            "c@example.test": b"451 4.3.0 try again later\r\n",
        },
    )
    recipients = ["a@example.test", "b@example.test", "c@example.test", "d@example.test"]

    result = await Deliverer(make_settings()).deliver("sender@origin.test", recipients, MESSAGE)

    a, b, c, d = result.outcomes
    assert (a.state, d.state) == (RecipientState.DELIVERED, RecipientState.DELIVERED)
    assert (b.state, b.reply.status) == (RecipientState.FAILED, "5.1.1")
    assert (c.state, c.reply.status) == (RecipientState.PENDING, "4.3.0")
    assert server.commands == ["EHLO", "MAIL", "RCPT", "RCPT", "RCPT", "RCPT", "DATA", "QUIT"]
    assert len(server.data) == 1


@needs_pipelining
async def test_a_refused_mail_from_fails_everyone_and_an_accepted_data_gets_a_lone_dot(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    # A careless server: it refuses the sender, yet accepts the RCPTs and DATA that came with it.
    server = smtp_servers.scripted(
        "127.0.0.2", replies={"EHLO": PIPELINING_EHLO, "MAIL": b"553 5.7.1 sender rejected\r\n"}
    )

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@example.test", "b@example.test"], MESSAGE
    )

    assert [(o.state, o.reply.status) for o in result.outcomes] == [(RecipientState.FAILED, "5.7.1")] * 2
    assert server.data == [b".\r\n"]  # the empty message RFC 2920 asks for: nothing of ours went
    assert server.commands[-2:] == ["RSET", "QUIT"]


@needs_pipelining
async def test_no_accepted_recipient_and_a_refused_data_means_rset(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2", pipelining=True, rcpt_replies={"a@example.test": "550 5.1.1 unknown"})

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["a@example.test"], MESSAGE)

    assert (result.outcomes[0].state, result.outcomes[0].reply.status) == (RecipientState.FAILED, "5.1.1")
    assert server.commands == ["EHLO", "MAIL", "RCPT", "DATA", "RSET", "QUIT"]
    assert server.messages == []


async def test_421_inside_the_group_ends_the_session_and_defers_the_rest(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted(
        "127.0.0.2",
        replies={"EHLO": PIPELINING_EHLO},
        rcpt_replies={
            "a@example.test": b"550 5.1.1 unknown\r\n",
            "b@example.test": b"421 4.3.2 shutting down\r\n",
        },
    )

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@example.test", "b@example.test", "c@example.test"], MESSAGE
    )

    a, b, c = result.outcomes
    assert (a.state, a.reply.status) == (RecipientState.FAILED, "5.1.1")  # decided before the 421
    assert [(o.state, o.reply.code) for o in (b, c)] == [(RecipientState.PENDING, 421)] * 2
    assert server.data == []


@pytest.mark.parametrize("rcpt_reply", [b"this is not smtp\r\n", CLOSE], ids=["malformed", "closed"])
async def test_a_broken_reply_inside_the_group_defers_everyone(
    rcpt_reply: bytes | object, dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2", replies={"EHLO": PIPELINING_EHLO, "RCPT": rcpt_reply})

    result = await Deliverer(make_settings()).deliver(
        "sender@origin.test", ["a@example.test", "b@example.test"], MESSAGE
    )

    assert all(o.state is RecipientState.PENDING and o.reply.status.startswith("4.") for o in result.outcomes)
    assert server.data == []
    assert result.possibly_delivered == frozenset()


async def test_a_silent_server_is_cut_by_the_timeout_of_the_reply_awaited(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    smtp_servers.scripted("127.0.0.2", replies={"EHLO": PIPELINING_EHLO, "RCPT": SILENT})

    result = await Deliverer(make_settings(rcpt=0.5)).deliver("sender@origin.test", ["a@example.test"], MESSAGE)

    (outcome,) = result.outcomes
    assert (outcome.state, outcome.reply.status) == (RecipientState.PENDING, "4.4.1")
    assert "RCPT" in outcome.reply.text


@needs_pipelining
async def test_a_reply_arriving_before_the_last_is_picked_up_is_kept() -> None:
    """aiosmtplib drops bytes that come while a parsed reply waits to be read; in a group they are kept."""
    loop = asyncio.get_running_loop()
    protocol = SMTPProtocol(loop=loop)

    class Transport(asyncio.Transport):
        def is_closing(self) -> bool:
            return False

        def get_extra_info(self, name: str, default: object = None) -> object:
            return default

        def write(self, data: bytes | bytearray | memoryview) -> None:
            pass

    protocol.connection_made(Transport())
    access = PrivateAccess()
    access.send_group(protocol, b"MAIL FROM:<a@b.test>\r\nRCPT TO:<c@d.test>\r\nDATA\r\n")
    protocol.data_received(b"250 2.1.0 sender ok\r\n")
    protocol.data_received(b"250 2.1.5 rcpt ok\r\n354 go")  # before anyone read the first reply
    protocol.data_received(b" ahead\r\n")

    first = await access.read_reply(protocol, timeout=1)
    access.group_reply_read(protocol, more=True)
    second = access.buffered_reply(protocol)
    third = access.buffered_reply(protocol)
    assert [(r.code, r.message) for r in (first, second, third) if r is not None] == [
        (250, "2.1.0 sender ok"),
        (250, "2.1.5 rcpt ok"),
        (354, "go ahead"),
    ]

"""Bytes on the wire: CRLF only, dot-stuffed once — a strict receiver sees exactly one message (CVE-2023-51764)."""

from __future__ import annotations

import re

import pytest

from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from django_mailqueue.delivery.wire import normalize_line_endings, to_wire
from tests.delivery.conftest import MakeSettings, mx_domain
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ServerPool

HEAD = b"From: a@origin.test\r\nTo: b@example.test\r\nSubject: smuggling\r\n\r\n"
SMUGGLED = b"MAIL FROM:<ceo@victim.test>\r\nRCPT TO:<target@example.test>\r\nDATA\r\nFrom: ceo\r\n\r\nPay now\r\n"
BARE = re.compile(rb"\r(?!\n)|(?<!\r)\n")

MESSAGES = {
    "bare LF": HEAD + b"one\ntwo\nthree",
    "bare CR": HEAD + b"one\rtwo\rthree\r\n",
    "LF.LF": HEAD + b"before\n.\n" + SMUGGLED + b"after\r\n",
    "CR.CR": HEAD + b"before\r.\r" + SMUGGLED + b"after\r\n",
    "LF.CRLF": HEAD + b"before\n.\r\n" + SMUGGLED + b"after\r\n",
    "CRLF.LF": HEAD + b"before\r\n.\n" + SMUGGLED + b"after\r\n",
    "CRLF.CR": HEAD + b"before\r\n.\r" + SMUGGLED,
    "dot lines": HEAD + b".\r\n..\r\n.leading dot\r\n",
    "ends without newline": HEAD + b"last line.",
}


@pytest.mark.parametrize("message", MESSAGES.values(), ids=MESSAGES.keys())
async def test_a_strict_receiver_sees_one_crlf_only_message(
    message: bytes, dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2")

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["b@example.test"], message)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    (wire,) = server.data  # everything through the first CRLF.CRLF
    assert not BARE.search(wire)
    assert wire.endswith(b"\r\n.\r\n")
    assert wire.count(b"\r\n.\r\n") == 1
    # after the message, the client said only QUIT: nothing smuggled became a command
    assert server.commands == ["EHLO", "MAIL", "RCPT", "DATA", "QUIT"]
    unstuffed = re.sub(rb"(?m)^\.", b"", wire[: -len(b".\r\n")])
    assert unstuffed == normalize_line_endings(message)


async def test_aiosmtpd_receives_the_message_once_with_dots_restored(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.smtp("127.0.0.2")
    message = MESSAGES["LF.LF"]

    await Deliverer(make_settings()).deliver("sender@origin.test", ["b@example.test"], message)

    (received,) = server.messages
    assert received.data == normalize_line_endings(message)
    assert received.rcpt_tos == ["b@example.test"]


@pytest.mark.parametrize(
    ("raw", "wire"),
    [
        (b"a\nb", b"a\r\nb\r\n.\r\n"),
        (b"a\rb\r\n", b"a\r\nb\r\n.\r\n"),
        (b"a\r\r\nb", b"a\r\n\r\nb\r\n.\r\n"),
        (b"x\n.\ny", b"x\r\n..\r\ny\r\n.\r\n"),
        (b"x\r.\ry", b"x\r\n..\r\ny\r\n.\r\n"),
        (b"x\n.\r\ny", b"x\r\n..\r\ny\r\n.\r\n"),
        (b".start\r\n", b"..start\r\n.\r\n"),
        (b"..two\r\n", b"...two\r\n.\r\n"),
        (b"", b".\r\n"),
    ],
)
def test_to_wire(raw: bytes, wire: bytes) -> None:
    assert to_wire(raw) == wire


def test_to_wire_is_stuffed_once() -> None:
    once = to_wire(b"a\r\n.b\r\n")
    assert once == b"a\r\n..b\r\n.\r\n"
    assert once.count(b"..") == 1


@pytest.mark.parametrize("size", [2_000, 64 * 1024 - 10, 64 * 1024, 200_000])
async def test_the_end_of_data_mark_travels_with_the_last_block(
    size: int,
    dns_server: DnsServer,
    smtp_servers: ServerPool,
    make_settings: MakeSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Written on its own, ".\r\n" reaches a server as a second small segment, which some
    # servers (Postfix's smtp-sink) answer only after their delayed ACK: ~40 ms a message.
    import asyncio.selector_events
    import threading

    mx_domain(dns_server, "example.test", "127.0.0.2")
    server = smtp_servers.scripted("127.0.0.2")
    client_thread = threading.get_ident()
    writes: list[bytes] = []
    transport = asyncio.selector_events._SelectorSocketTransport  # type: ignore[attr-defined]
    original_write = transport.write

    def write(self: object, data: bytes) -> None:
        if threading.get_ident() == client_thread:
            writes.append(bytes(data))
        original_write(self, data)

    monkeypatch.setattr(transport, "write", write)
    body = (b"y" * 76 + b"\r\n") * (size // 78 + 1)
    message = HEAD + body[: size - len(HEAD) - 2] + b"\r\n"

    result = await Deliverer(make_settings()).deliver("sender@origin.test", ["b@example.test"], message)

    assert result.outcomes[0].state is RecipientState.DELIVERED
    assert b".\r\n" not in writes
    (last,) = [w for w in writes if w.endswith(b"\r\n.\r\n")]
    assert len(last) > len(b"\r\n.\r\n")
    (wire,) = server.data
    assert wire == to_wire(message)

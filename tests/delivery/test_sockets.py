"""Every session closes its socket, however it ends: nothing is left for the garbage collector to close."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings
from typing import Any

from django_mailqueue.delivery import Deliverer
from tests.delivery.conftest import MESSAGE, MakeSettings, mx_domain
from tests.delivery.test_tls import EHLO_WITH_STARTTLS
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import BROKEN_TLS, CLOSE, SILENT, DropDuringData, ServerPool

ENDINGS: dict[str, dict[str, Any]] = {
    "delivered": {},
    "550 at RCPT": {"RCPT": "550 5.1.1 no such user"},
    "421 at MAIL": {"MAIL": "421 4.3.2 closing"},
    "dropped during DATA": {"DATA": DropDuringData(after=100)},
    "closed after the final dot": {"END": CLOSE},
    "silent after DATA": {"DATA": SILENT},
    "failed STARTTLS handshake": {"EHLO": EHLO_WITH_STARTTLS, "STARTTLS": BROKEN_TLS},
}


async def test_every_ending_closes_the_connection(
    dns_server: DnsServer, smtp_servers: ServerPool, make_settings: MakeSettings
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc.collect()  # what earlier tests left is not this test's
    big = MESSAGE + (b"y" * 998 + b"\r\n") * 200
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for number, (name, replies) in enumerate(ENDINGS.items(), start=2):
            address = f"127.0.0.{number}"
            mx_domain(dns_server, f"d{number}.test", address)
            smtp_servers.scripted(address, replies=replies)
            result = await Deliverer(make_settings(data=0.5)).deliver(
                "sender@origin.test", [f"rcpt@d{number}.test"], big
            )
            assert result.outcomes, name
        gc.collect()
        for _ in range(5):
            await asyncio.sleep(0)  # let transports that are closing finish
        still_open = _client_sockets(asyncio.get_running_loop())
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
    assert still_open == []


def _client_sockets(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Connections the loop still watches: an unclosed transport stays registered until the loop closes."""
    selector = getattr(loop, "_selector", None)
    assert selector is not None, "a selector event loop"
    found = []
    for key in list(selector.get_map().values()):
        fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
        try:
            with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:  # a duplicate, to look at
                peer = sock.getpeername()
                if isinstance(peer, tuple):  # TCP, not the loop's own AF_UNIX pipe
                    found.append(f"{sock.getsockname()} -> {peer}")
        except OSError:  # the loop's own pipe, a UDP socket, …
            continue
    return found

"""Fixtures for the interoperability tests: one strict Postfix as every test domain's MX, DNS for it, a worker run."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from tests.interop.postfix import PostfixServer, unavailable
from tests.support.certs import certificate_authority
from tests.support.dns_server import DnsServer
from tests.support.services import skip_or_fail
from tests.worker.conftest import SignalRecorder, received  # noqa: F401  (fixture)

#: The name the MX records point at, the Postfix's own name, and the name its certificate holds.
MX_HOST = "mx.test.example"
#: The worker's EHLO name (a strict MX wants a fully-qualified one).
WORKER_HOSTNAME = "mq.test.example"
SENDER = "sender@origin.test"
#: user@bücher.test's domain as the envelope carries it.
IDN_DOMAIN = "xn--bcher-kva.test"

MAILBOXES = (
    SENDER,
    "user@example.test",
    "bytes@example.test",
    "jösé@example.test",
    f"user@{IDN_DOMAIN}",
    *(f"many{n:02}@example.test" for n in range(1, 16)),
    "bulk1@example.test",
    "bulk2@example.test",
    "bulk3@example.test",
)


@pytest.fixture(scope="session")
def postfix_server() -> Iterator[PostfixServer]:
    """The strict Postfix (see tests/interop/postfix.py), started once for the session; skips where it cannot run."""
    reason = unavailable()
    if reason:
        skip_or_fail(reason)
    with PostfixServer(MAILBOXES, certificate_authority(), hostname=MX_HOST) as server:
        yield server


@pytest.fixture(scope="session")
def mx_dns(postfix_server: PostfixServer) -> Iterator[DnsServer]:
    """Loopback DNS: every domain the Postfix serves has it as its MX."""
    with DnsServer() as dns:
        dns.a(MX_HOST, postfix_server.host)
        for domain in postfix_server.domains:
            dns.mx(domain, (10, MX_HOST))
        yield dns


class Interop:
    """One test's view of the Postfix: its mailboxes emptied and its log marked at the start."""

    def __init__(self, server: PostfixServer, dns: DnsServer) -> None:
        self.server = server
        self.dns = dns
        server.clear_mailboxes()
        self.mark = server.log_mark()

    def mailqueue(self, **extra: Any) -> dict[str, Any]:
        """MAILQUEUE for a worker that routes every domain to its MX, which the DNS says is the Postfix."""
        return {
            "HOSTNAME": WORKER_HOSTNAME,
            "ROUTES": {"*": "mx"},
            "DNS": {"NAMESERVERS": [self.dns.host], "PORT": self.dns.port, "TIMEOUT": 2},
            "MX_PORT": self.server.port,
            "POLL_INTERVAL": 0.2,
            "TIMEOUTS": {"CONNECT": 5, "GREETING": 10, "MAIL": 10, "RCPT": 10, "DATA": 10, "DATA_END": 20},
            **extra,
        }

    def log(self) -> list[str]:
        return self.server.log_since(self.mark)

    def sessions(self) -> list[str]:
        """smtpd's `disconnect from` line of every session since the test began, once all have ended."""
        return self.server.sessions_since(self.mark)


@pytest.fixture
def interop(postfix_server: PostfixServer, mx_dns: DnsServer) -> Iterator[Interop]:
    world = Interop(postfix_server, mx_dns)
    with override_settings(MAILQUEUE=world.mailqueue()):
        yield world


def work_once(*args: str) -> str:
    """`mailqueue_work --once` in this process; its summary line."""
    out = StringIO()
    call_command("mailqueue_work", "--once", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


__all__ = ["Interop", "SignalRecorder", "work_once"]

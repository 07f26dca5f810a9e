"""Fixtures for the delivery tests: the loopback DNS and SMTP servers, the test CA, and settings pointing at them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_mailqueue.conf import MxRoute, QueueSettings, Route, Timeouts
from tests.support.certs import test_ca  # noqa: F401  (fixture)
from tests.support.dns_server import DnsServer, dns_server  # noqa: F401  (fixture)
from tests.support.smtp_server import ServerPool, smtp_servers  # noqa: F401  (fixture)

MESSAGE = (
    b"From: Sender <sender@origin.test>\r\n"
    b"To: someone@example.test\r\n"
    b"Subject: hello\r\n"
    b"Message-ID: <1@origin.test>\r\n"
    b"\r\n"
    b"Hello there.\r\n"
)

#: Short timeouts: every test that waits for one finishes in seconds.
FAST = {
    "connect": 2.0,
    "greeting": 3.0,
    "mail": 3.0,
    "rcpt": 3.0,
    "data": 3.0,
    "data_block": 3.0,
    "data_end": 3.0,
    "session": 15.0,
}

MakeSettings = Callable[..., QueueSettings]


def mx_domain(dns: DnsServer, domain: str, *hosts: str, preference: int = 10) -> None:
    """`domain` with one MX host per address in `hosts` (mx1.<domain> -> hosts[0], ...), equal preference."""
    records = []
    for number, address in enumerate(hosts, start=1):
        name = f"mx{number}.{domain}"
        records.append((preference, name))
        dns.a(name, address)
    dns.mx(domain, *records)


@pytest.fixture
def make_settings(dns_server: DnsServer, smtp_servers: ServerPool) -> MakeSettings:  # noqa: F811
    """`make_settings(routes=..., rcpt_limit=..., **timeouts)`: QueueSettings on the test DNS and SMTP port."""

    def make(
        *,
        routes: dict[str, Route] | None = None,
        dns_timeout: float = 1.0,
        rcpt_limit: int = 100,
        mx_address_limit: int = 5,
        **timeouts: Any,
    ) -> QueueSettings:
        return QueueSettings(
            hostname="client.test.example",
            routes=routes or {"*": MxRoute()},
            dns=dns_server.settings(timeout=dns_timeout),
            mx_port=smtp_servers.port,
            timeouts=Timeouts(**{**FAST, **timeouts}),
            rcpt_limit=rcpt_limit,
            mx_address_limit=mx_address_limit,
        )

    return make

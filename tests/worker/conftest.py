"""Fixtures for the worker tests: stores to run on, loopback DNS and SMTP, a signal recorder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from django_mailqueue import signals
from django_mailqueue.stores.base import QueueStore
from tests.support.certs import test_ca  # noqa: F401  (fixture)
from tests.support.dns_server import DnsServer, dns_server  # noqa: F401  (fixture)
from tests.support.redis_server import delete_prefix, unique_prefix
from tests.support.smtp_server import ServerPool, SmtpServer, smtp_servers  # noqa: F401  (fixture)

SIGNALS = ("delivered", "deferred", "failed", "dsn", "error")


def only_kept_failed(store: QueueStore) -> bool:
    """Nothing waits to be sent: every item the store holds (there may be none) is kept failed (`KEEP_FAILED`)."""
    return all(item.kept for item in store.iter_items())


class SignalRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def of(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for n, kwargs in self.events if n == name]


@pytest.fixture
def received() -> Iterator[SignalRecorder]:
    recorder = SignalRecorder()
    for name in SIGNALS:

        def receive(sender: Any, _name: str = name, **kwargs: Any) -> None:
            recorder.events.append((_name, kwargs))

        getattr(signals, name).connect(receive, weak=False, dispatch_uid=f"test-received-{name}")
    yield recorder
    for name in SIGNALS:
        getattr(signals, name).disconnect(dispatch_uid=f"test-received-{name}")


@dataclass
class MailWorld:
    """A loopback mail world: DNS for dest.test and origin.test, one recording MX for both."""

    dns: DnsServer
    mx: SmtpServer
    port: int

    def mailqueue(self, store: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {
            "STORE": store,
            "HOSTNAME": "mq.test.example",
            "ROUTES": {"*": "mx"},
            # Generous: no test of this world waits for one of these to expire (a test that does sets its own),
            # and a loaded machine (load 20, two pytest-xdist workers) once missed 2 s of DNS and 5 s of SMTP.
            "DNS": {"NAMESERVERS": ["127.0.0.1"], "PORT": self.dns.port, "TIMEOUT": 30},
            "MX_PORT": self.port,
            "POLL_INTERVAL": 0.2,
            "TIMEOUTS": {
                "CONNECT": 30,
                "GREETING": 60,
                "MAIL": 60,
                "RCPT": 60,
                "DATA": 60,
                "DATA_BLOCK": 60,
                "DATA_END": 60,
                "SESSION": 300,
            },
            **extra,
        }


@pytest.fixture
def mail_world(dns_server: DnsServer, smtp_servers: ServerPool) -> MailWorld:  # noqa: F811
    mx = smtp_servers.smtp(
        "127.0.0.2",
        rcpt_replies={
            "rejected@dest.test": "550 5.1.1 No such user here",
            "greylisted@dest.test": "451 4.7.1 Greylisted",
        },
    )
    for domain in ("dest.test", "origin.test"):
        dns_server.mx(domain, (10, f"mx.{domain}"))
        dns_server.a(f"mx.{domain}", "127.0.0.2")
    return MailWorld(dns=dns_server, mx=mx, port=smtp_servers.port)


STORES = {
    "memory": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
    "sqlite": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "default"}},
    "postgres": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "pg"}},
    "redis": {"BACKEND": "django_mailqueue.stores.redis.RedisStore"},
}


@pytest.fixture
def redis_cluster_store_config(redis_cluster: Any) -> dict[str, Any]:
    """A Redis store on the session's three-primary Redis Cluster, of the test's own key prefix."""
    options = redis_cluster.options(key_prefix=unique_prefix("worker"))
    return {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": options}


@pytest.fixture
def redis_store_config(redis_url: str) -> Iterator[dict[str, Any]]:
    """A Redis store of the test's own key prefix, deleted afterwards."""
    prefix = unique_prefix("worker")
    yield {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {"url": redis_url, "key_prefix": prefix}}
    delete_prefix(redis_url, prefix)


@pytest.fixture(params=list(STORES))
def store_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "postgres":
        request.getfixturevalue("pg_alias")
    if request.param == "redis":
        config: dict[str, Any] = request.getfixturevalue("redis_store_config")
        return config
    return STORES[request.param]

"""MTA-STS (RFC 8461) through the worker: a loopback HTTPS policy server (test CA), the loopback DNS, aiosmtpd MX hosts.

The policy of sts.test is found by its `_mta-sts` TXT record and fetched
from mta-sts.sts.test, which the queue's own resolver (MAILQUEUE["DNS"])
points at the policy server; the test CA is the "system trust store".
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from django.core.cache import cache

from django_mailqueue.conf import load_settings
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem
from django_mailqueue.delivery import Deliverer, mta_sts
from django_mailqueue.delivery.mta_sts import StsPolicies, StsPolicy, parse_policy, parse_txt
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.worker import Worker
from django_mailqueue.worker.engine import WorkerStats
from tests.support.certs import CertificateAuthority
from tests.support.dns_server import DnsServer
from tests.support.policy_server import PolicyServer
from tests.support.smtp_server import ServerPool
from tests.worker.conftest import MailWorld, SignalRecorder

ENFORCE = "version: STSv1\nmode: enforce\nmx: mx1.test.example\nmx: *.sts.test\nmax_age: 86400\n"


@pytest.fixture
def trust_test_ca(monkeypatch: pytest.MonkeyPatch, test_ca: CertificateAuthority) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(test_ca.ca_file))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@pytest.fixture
def policy_server(test_ca: CertificateAuthority, dns_server: DnsServer, trust_test_ca: None) -> Iterator[PolicyServer]:
    cache.clear()
    dns_server.add("_mta-sts.sts.test", "TXT", '"v=STSv1; id=20261201T1"')
    dns_server.a("mta-sts.sts.test", "127.0.0.5")
    with PolicyServer(test_ca, "127.0.0.5", ["mta-sts.sts.test"]) as server:
        server.policies["mta-sts.sts.test"] = ENFORCE
        yield server
    cache.clear()


def mx(dns: DnsServer, *hosts: tuple[int, str, str]) -> None:
    dns.mx("sts.test", *((pref, name) for pref, name, _ in hosts))
    for _, name, address in hosts:
        dns.a(name, address)


def deliver(
    world: MailWorld, server: PolicyServer, count: int = 1, **extra: Any
) -> tuple[WorkerStats, MemoryStore, Deliverer]:
    settings = load_settings(world.mailqueue({"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}, **extra))
    store = MemoryStore()
    for i in range(count):
        message = f"From: <a@origin.test>\r\nTo: <b@sts.test>\r\nSubject: {i}\r\n\r\nbody\r\n".encode()
        store.add(NewItem("a@origin.test", ("b@sts.test",), message), now=SystemClock().now())
    deliverer = Deliverer(settings, mta_sts=StsPolicies(settings.dns, https_port=server.port))
    worker = Worker(store=store, settings=settings, deliverer=deliverer, once=True)
    return asyncio.run(worker.run()), store, deliverer


def sts_errors(received: SignalRecorder) -> list[str]:
    return [str(e["error"]) for e in received.of("error") if e["error"].code == "TLS_POLICY"]


def test_enforce_with_a_listed_mx_and_a_valid_certificate_delivers_over_tls(
    mail_world: MailWorld, smtp_servers: ServerPool, policy_server: PolicyServer, received: SignalRecorder
) -> None:
    host = smtp_servers.smtp("127.0.0.3", starttls=True)
    mx(mail_world.dns, (10, "mx1.test.example", "127.0.0.3"))
    stats, _, _ = deliver(mail_world, policy_server)
    assert stats.delivered == 1
    (message,) = host.messages
    assert message.tls and message.rcpt_tos == ["b@sts.test"]
    assert policy_server.requests == ["mta-sts.sts.test"]
    assert sts_errors(received) == []


def test_an_mx_the_policy_does_not_list_is_not_used(
    mail_world: MailWorld, smtp_servers: ServerPool, policy_server: PolicyServer, received: SignalRecorder
) -> None:
    unlisted = smtp_servers.smtp("127.0.0.3", starttls=True)
    listed = smtp_servers.smtp("127.0.0.4", starttls=True)
    mx(mail_world.dns, (10, "mx.test.example", "127.0.0.3"), (20, "mx1.test.example", "127.0.0.4"))
    stats, _, _ = deliver(mail_world, policy_server)
    assert stats.delivered == 1
    assert unlisted.connections == 0 and len(listed.messages) == 1
    (error,) = sts_errors(received)
    assert "does not list the MX hosts mx.test.example" in error


@pytest.mark.parametrize("problem", ["no STARTTLS", "untrusted certificate"])
def test_enforce_defers_4_7_5_naming_the_policy(
    problem: str,
    mail_world: MailWorld,
    smtp_servers: ServerPool,
    policy_server: PolicyServer,
    received: SignalRecorder,
) -> None:
    if problem == "no STARTTLS":
        host = smtp_servers.smtp("127.0.0.3")
    else:
        host = smtp_servers.smtp("127.0.0.3", starttls=True, ca=other_ca())
    mx(mail_world.dns, (10, "mx1.test.example", "127.0.0.3"))
    stats, store, _ = deliver(mail_world, policy_server)
    assert (stats.delivered, stats.deferred) == (0, 1)
    assert host.messages == []
    (item,) = store.list()
    reply = item.recipients[0].reply
    assert reply is not None and reply.status == "4.7.5"
    assert "MTA-STS policy of sts.test (id 20261201T1, mode enforce)" in reply.text
    (error,) = sts_errors(received)
    assert "mx1.test.example" in error and "enforce" in error


def test_testing_delivers_as_before_and_reports(
    mail_world: MailWorld, smtp_servers: ServerPool, policy_server: PolicyServer, received: SignalRecorder
) -> None:
    policy_server.policies["mta-sts.sts.test"] = ENFORCE.replace("enforce", "testing")
    host = smtp_servers.smtp("127.0.0.3")  # no STARTTLS
    mx(mail_world.dns, (10, "mx1.test.example", "127.0.0.3"))
    stats, _, _ = deliver(mail_world, policy_server)
    assert stats.delivered == 1 and len(host.messages) == 1
    (error,) = sts_errors(received)
    assert "mode testing" in error and "sent as before" in error


def test_the_policy_is_fetched_once_for_many_messages_and_workers(
    mail_world: MailWorld, smtp_servers: ServerPool, policy_server: PolicyServer
) -> None:
    host = smtp_servers.smtp("127.0.0.3", starttls=True)
    mx(mail_world.dns, (10, "mx1.test.example", "127.0.0.3"))
    stats, _, first = deliver(mail_world, policy_server, count=30)
    assert stats.delivered == 30
    second_stats, _, second = deliver(mail_world, policy_server, count=5)  # a second worker: the shared cache
    assert second_stats.delivered == 5 and len(host.messages) == 35
    assert policy_server.requests == ["mta-sts.sts.test"]
    assert first._sts is not None and second._sts is not None
    assert (first._sts.fetches, second._sts.fetches) == (1, 0)


def test_a_workers_table_of_policies_is_bounded_and_a_policy_goes_at_its_max_age(
    mail_world: MailWorld, policy_server: PolicyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mta_sts, "MAX_KNOWN", 3)
    now = [1_000_000.0]
    settings = load_settings(mail_world.mailqueue({"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}))
    policies = StsPolicies(settings.dns, https_port=policy_server.port, clock=lambda: now[0])

    def policy(domain: str) -> StsPolicy | None:
        return asyncio.run(policies.policy_for(domain))

    for domain in ("none1.test", "none2.test"):  # no TXT record: no policy, an answer kept all the same
        assert policy(domain) is None
    now[0] += mta_sts.RECHECK / 2
    enforce = policy("sts.test")
    assert enforce is not None and enforce.mode == "enforce" and policies.known == 3
    now[0] += mta_sts.RECHECK / 2 + 1  # none1 and none2 are past rechecking, sts.test not: they go first
    assert policy("none3.test") is None and policies.known == 2
    assert policy("none4.test") is None and policies.known == 3
    assert policy("none5.test") is None and policies.known == 3  # full: the oldest (sts.test) went
    assert policy("sts.test") == enforce and policies.fetches == 1  # again from the shared cache, not fetched

    # a policy whose max_age is shorter than RECHECK goes at its max_age, in memory as in the shared cache
    policy_server.policies["mta-sts.sts.test"] = ENFORCE.replace("max_age: 86400", "max_age: 60")
    mail_world.dns.nxdomain("_mta-sts.sts.test").add("_mta-sts.sts.test", "TXT", '"v=STSv1; id=20261201T2"')
    now[0] += mta_sts.RECHECK + 1
    short = policy("sts.test")
    assert short is not None and (short.id, short.max_age, policies.fetches) == ("20261201T2", 60, 2)
    now[0] += 30
    assert policy("sts.test") == short and policies.fetches == 2
    policy_server.policies["mta-sts.sts.test"] = ENFORCE
    mail_world.dns.nxdomain("_mta-sts.sts.test").add("_mta-sts.sts.test", "TXT", '"v=STSv1; id=20261201T3"')
    now[0] += 31
    renewed = policy("sts.test")
    assert renewed is not None and (renewed.id, renewed.max_age, policies.fetches) == ("20261201T3", 86400, 3)


@pytest.mark.parametrize("how", ["nothing listens", "a redirect", "no TXT record"])
def test_without_a_policy_mail_goes_as_before(
    how: str, mail_world: MailWorld, smtp_servers: ServerPool, policy_server: PolicyServer, received: SignalRecorder
) -> None:
    if how == "nothing listens":
        mail_world.dns.nxdomain("mta-sts.sts.test").a("mta-sts.sts.test", "127.0.0.9")
    elif how == "a redirect":
        policy_server.redirects["mta-sts.sts.test"] = "https://127.0.0.5/elsewhere"
    else:
        mail_world.dns.nxdomain("_mta-sts.sts.test")
    host = smtp_servers.smtp("127.0.0.3")  # no STARTTLS: an enforce policy would defer
    mx(mail_world.dns, (10, "mx1.test.example", "127.0.0.3"))
    stats, _, _ = deliver(mail_world, policy_server)
    assert stats.delivered == 1 and len(host.messages) == 1
    assert sts_errors(received) == []


def test_mta_sts_false_looks_nothing_up(mail_world: MailWorld, smtp_servers: ServerPool) -> None:
    smtp_servers.smtp("127.0.0.3")
    mx(mail_world.dns, (10, "mx1.test.example", "127.0.0.3"))
    settings = load_settings(mail_world.mailqueue({"BACKEND": "x.y"}, MTA_STS=False) | {"STORE": {}})
    assert Deliverer(settings)._sts is None
    settings = load_settings(mail_world.mailqueue({"BACKEND": "x.y"}) | {"STORE": {}})
    assert Deliverer(settings)._sts is not None


def other_ca() -> CertificateAuthority:
    ca = trustme.CA()
    directory = Path(tempfile.mkdtemp(prefix="mailqueue-untrusted-ca-"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    authority = CertificateAuthority(ca=ca, server=ca.issue_cert("mx1.test.example"), ca_file=directory / "ca.pem")
    shutil.rmtree(directory, ignore_errors=True)
    return authority


@pytest.mark.parametrize(
    ("text", "mode", "mx_hosts"),
    [
        (ENFORCE, "enforce", ("mx1.test.example", "*.sts.test")),
        ("version: STSv1\r\nmode: none\r\nmax_age: 0\r\n", "none", ()),
    ],
)
def test_policy_files_are_read(text: str, mode: str, mx_hosts: tuple[str, ...]) -> None:
    policy = parse_policy("sts.test", "1", text)
    assert (policy.mode, policy.mx) == (mode, mx_hosts)


def test_patterns_match_one_leftmost_label_and_bad_records_are_no_policy() -> None:
    policy = parse_policy("sts.test", "1", ENFORCE)
    assert policy.matches("MX1.test.example.") and policy.matches("a.sts.test")
    assert not policy.matches("a.b.sts.test") and not policy.matches("sts.test")
    assert parse_txt(["v=STSv1; id=abc123"]) == "abc123"
    assert parse_txt(["v=STSv1; ", "id=abc"]) == "abc"
    assert parse_txt(["v=spf1 -all"]) is None and parse_txt(["v=STSv1; id=not-alnum!"]) is None

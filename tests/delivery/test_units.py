"""Pure pieces of delivery: reply classification, envelope addresses, and a Deliverer driven without a network."""

from __future__ import annotations

import asyncio

import pytest

from django_mailqueue.conf import MxRoute, QueueSettings, RelayRoute, Timeouts
from django_mailqueue.core.clock import FakeClock
from django_mailqueue.core.items import RecipientState, Reply
from django_mailqueue.delivery import (
    Deliverer,
    Envelope,
    MailHost,
    Resolution,
    SessionReport,
    Target,
)
from django_mailqueue.delivery import replies as r
from django_mailqueue.delivery.addresses import parse_address, parse_sender


@pytest.mark.parametrize(
    ("code", "text", "status", "clean", "state"),
    [
        (250, "2.1.5 Ok", "2.1.5", "Ok", RecipientState.DELIVERED),
        (250, "Ok", "2.0.0", "Ok", RecipientState.DELIVERED),
        (550, "5.1.1 <x@y>: no such user", "5.1.1", "<x@y>: no such user", RecipientState.FAILED),
        (550, "no such user", "5.0.0", "no such user", RecipientState.FAILED),
        (451, "4.7.1 greylisted", "4.7.1", "greylisted", RecipientState.PENDING),
        (452, "too many", "4.0.0", "too many", RecipientState.PENDING),
        (550, "4.7.1 mismatched class", "5.0.0", "4.7.1 mismatched class", RecipientState.FAILED),
        (550, "5.1.10 null", "5.1.10", "null", RecipientState.FAILED),
        (354, "go ahead", "4.0.0", "go ahead", RecipientState.PENDING),
    ],
)
def test_server_reply_classification(code: int, text: str, status: str, clean: str, state: RecipientState) -> None:
    reply = r.server_reply(code, text)
    assert (reply.code, reply.status, reply.text) == (code, status, clean)
    assert r.state_of(reply) is state


def test_well_formed() -> None:
    assert r.is_well_formed(250, "ok")
    assert not r.is_well_formed(-1, "Malformed")
    assert not r.is_well_formed(650, "x")
    assert not r.is_well_formed(250, "bytes \udcff here")


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("  Ok: queued as 4Bc  ", "Ok: queued as 4Bc"),  # plain ASCII: only the ends trimmed
        ("a  b", "a  b"),
        ("x" * 1200, "x" * 999 + "\u2026"),
        ("tab\there\r\nnext", "tab here next"),
        ("caf\u00e9 \x00 \udc80", "caf\u00e9 \ufffd \ufffd"),
        (b"bytes \xff", "bytes \ufffd"),
    ],
)
def test_reply_text_is_cleaned(raw: str | bytes, clean: str) -> None:
    from django_mailqueue.core.text import clean_reply_text

    assert clean_reply_text(raw) == clean


@pytest.mark.parametrize(
    "domain",
    [
        "example.test",
        "EXAMPLE.Test",
        "xn--bcher-kva.test",
        "a" * 63 + ".test",
        "a" * 64 + ".test",
        "under_score.test",
        "-bad.test",
        "ok-1.test",
        "b\u00fccher.test",
        "x.y.z.w",
        ".".join(["a" * 60] * 5),
    ],
)
def test_ascii_domains_come_out_as_the_idna_codec_makes_them(domain: str) -> None:
    from django_mailqueue.delivery.addresses import _LABEL, domain_to_ascii

    try:
        expected: str | None = domain.lower().encode("idna").decode("ascii")
    except UnicodeError:
        expected = None
    if expected is not None and (len(expected) > 253 or not all(_LABEL.match(label) for label in expected.split("."))):
        expected = None
    assert domain_to_ascii(domain) == expected


def test_8bit_is_any_byte_above_127() -> None:
    from django_mailqueue.delivery.wire import has_8bit

    assert not has_8bit(b"Subject: plain\r\n\r\n" + bytes(range(128)))
    assert has_8bit(b"caf\xc3\xa9")
    assert has_8bit(b"\x80")


def test_temporary_keeps_code_and_downgrades_status() -> None:
    assert r.temporary(Reply(554, "5.7.1", "go away")) == Reply(554, "4.7.1", "go away")
    assert r.temporary(Reply(421, "4.3.2", "busy")) == Reply(421, "4.3.2", "busy")


def test_own_reply_is_clean_and_has_no_code() -> None:
    reply = r.own_reply(r.NO_ANSWER, "bad\x00 text\r\nhere", mask=lambda t: t.replace("bad", "***"))
    assert reply.code is None and reply.status == "4.4.1"
    assert reply.text == "***\ufffd text here"


@pytest.mark.parametrize(
    "address",
    [
        "user@example.test",
        "first.last+tag@sub.example.test",
        '"john doe"@example.test',
        "josé@example.test",
        "user@[192.0.2.1]",
        "user@[IPv6:2001:db8::1]",
        "user@Bücher.Test",
        "o'brien@example.test",
    ],
)
def test_addresses_smtp_carries(address: str) -> None:
    parsed = parse_address(address)
    assert parsed is not None and parsed.given == address


@pytest.mark.parametrize(
    "address",
    [
        "",
        "no-at-sign",
        "@example.test",
        "user@",
        "user@exa mple.test",
        "us er@example.test",
        "user@example..test",
        "a\r\nb@example.test",
        "a@example.test\r\nRCPT TO:<b@c.test>",
        "a@example.test>",
        "<a@example.test>",
        "nul\x00@example.test",
        "user@[300.1.1.1]",
        "user@-bad-.test",
        "lone\udc80@example.test",
        "user@example.test.",
        "x" * 300 + "@example.test",
    ],
)
def test_addresses_smtp_refuses(address: str) -> None:
    assert parse_address(address) is None


def test_idn_and_case() -> None:
    parsed = parse_address("Reader@Bücher.TEST")
    assert parsed is not None
    assert parsed.domain == "xn--bcher-kva.test"
    assert parsed.wire == "Reader@xn--bcher-kva.test"
    assert not parsed.needs_smtputf8
    assert parse_sender("") is not None and parse_sender("").wire == ""  # type: ignore[union-attr]


class FakeResolver:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def resolve_domain(self, domain: str) -> Resolution:
        self.asked.append(domain)
        if domain == "gone.test":
            return Resolution(failure=r.own_reply(r.NO_SUCH_DOMAIN, "not found"))
        return Resolution(hosts=(MailHost(f"mx.{domain}", 10, ("192.0.2.10", "192.0.2.11")),))

    async def resolve_host(self, host: str) -> Resolution:
        return Resolution(failure=r.own_reply(r.MISCONFIGURED, f"relay host {host} not found"))


class FakeTransport:
    """Refuses the first address; on the second, takes every recipient whose local part is not 'bounce'."""

    def __init__(self) -> None:
        self.targets: list[Target] = []
        self.envelopes: list[Envelope] = []

    async def send(self, target: Target, envelope: Envelope) -> SessionReport:
        self.targets.append(target)
        self.envelopes.append(envelope)
        report = SessionReport(host=target.host)
        if target.address == "192.0.2.10":
            report.next_host = r.own_reply(r.NO_ANSWER, "connection refused")
            return report
        for rcpt in envelope.recipients:
            if rcpt.startswith("bounce@"):
                report.decide(rcpt, r.server_reply(550, "5.1.1 unknown"), RecipientState.FAILED)
            else:
                report.decide(rcpt, r.server_reply(250, "2.0.0 ok"), RecipientState.DELIVERED)
        return report

    async def aclose(self) -> None:
        pass


async def test_deliverer_runs_on_an_injected_transport_resolver_and_clock() -> None:
    clock = FakeClock()
    transport, resolver = FakeTransport(), FakeResolver()
    settings = QueueSettings(
        hostname="client.test",
        routes={
            "*": MxRoute(),
            "relayed.test": RelayRoute(host="smarthost.invalid", port=587, username="u", password="p"),
        },
    )
    deliverer = Deliverer(settings, clock=clock, transport=transport, resolver=resolver)

    result = await deliverer.deliver(
        "s@origin.test",
        [
            "a@one.test",
            "bounce@one.test",
            "b@gone.test",
            "c@relayed.test",
            "a@one.test",
            "bad address",
        ],
        b"Subject: x\n\nhi\n",
    )
    await deliverer.aclose()

    states = [(o.address, o.state, o.reply.status, o.remote_mta) for o in result.outcomes]
    assert states == [
        ("a@one.test", RecipientState.DELIVERED, "2.0.0", "mx.one.test"),
        ("bounce@one.test", RecipientState.FAILED, "5.1.1", "mx.one.test"),
        ("b@gone.test", RecipientState.FAILED, "5.1.2", ""),
        ("c@relayed.test", RecipientState.PENDING, "4.3.5", ""),
        ("a@one.test", RecipientState.DELIVERED, "2.0.0", "mx.one.test"),
        ("bad address", RecipientState.FAILED, "5.1.3", ""),
    ]
    assert [t.address for t in transport.targets] == ["192.0.2.10", "192.0.2.11"]
    assert transport.envelopes[-1].recipients == ("a@one.test", "bounce@one.test")
    assert transport.envelopes[-1].data == b"Subject: x\r\n\r\nhi\r\n"
    assert [e.code for e in result.errors] == ["INVALID_OPTION"]
    assert result.started == result.finished == clock.now()
    assert sorted(resolver.asked) == ["gone.test", "one.test"]


class BrokenTransport(FakeTransport):
    async def send(self, target: Target, envelope: Envelope) -> SessionReport:
        raise RuntimeError("a bug")


class HangingTransport(FakeTransport):
    async def send(self, target: Target, envelope: Envelope) -> SessionReport:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "recipients", [["a@one.test"], ["a@one.test", "b@two.test"]], ids=["one destination", "two destinations"]
)
@pytest.mark.parametrize(("transport", "status"), [(BrokenTransport(), "4.3.0"), (HangingTransport(), "4.4.1")])
async def test_a_misbehaving_transport_defers_and_never_raises(
    transport: FakeTransport, status: str, recipients: list[str]
) -> None:
    settings = QueueSettings(hostname="client.test", routes={"*": MxRoute()}, timeouts=Timeouts(session=0.3))
    deliverer = Deliverer(settings, transport=transport, resolver=FakeResolver())

    result = await deliverer.deliver("s@origin.test", recipients, b"x")

    assert [o.address for o in result.outcomes] == recipients
    assert {(o.state, o.reply.status) for o in result.outcomes} == {(RecipientState.PENDING, status)}


def test_a_worker_that_only_relays_never_loads_dnspython() -> None:
    """dnspython is imported at the first MX lookup (~65 ms of a worker's start otherwise)."""
    import subprocess
    import sys

    script = (
        "import os, sys, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'tests.settings'; django.setup()\n"
        "import django_mailqueue.management.commands.mailqueue_work, django_mailqueue.worker.engine\n"
        "from django_mailqueue.delivery.resolver import DnsResolver, MxResolver\n"
        "print(sorted(name for name in sys.modules if name == 'dns' or name.startswith('dns.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout

"""Bad input, property-based: the backend and every store queue it exactly or refuse it clearly; no smuggling.

Hypothesis runs with the `reliability` profile (conftest.py): derandomised
(a fixed seed, the same examples every run), `MAILQUEUE_REL_EXAMPLES`
examples per property (60 by default), no deadline.

- At the backend: `QueueEmailBackend.send_messages` with arbitrary headers,
  addresses, bodies, sizes and recipient counts either queues one item
  whose bytes are exactly what Django's SMTP backend sends (`tests/support/django_mail.py`)
  and whose envelope is `from_email` / `to + cc + bcc` as Django's SMTP
  backend would send them — or raises `QueueError` (`INVALID`,
  `TOO_LARGE`) with a message, storing nothing. Never another exception.
- At the store (SQLite, PostgreSQL, memory, Redis): any `NewItem` text —
  NUL, lone surrogates, CR, LF, long, non-ASCII — is stored and read back
  exactly, or refused as `INVALID` with nothing stored.
- On the wire: a message made of smuggling fragments (`\\n.\\n`, `\\r.\\r`,
  `\\n.\\r\\n`, bare CR/LF) goes through the real delivery layer to a raw
  server that sees exactly one message, CRLF only.
- CR/LF in an envelope is refused at the backend, at the store and at delivery.
"""

from __future__ import annotations

import asyncio
import email.header
import email.utils
import re
import uuid
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from email.headerregistry import Address

import pytest
from django.core.mail import EmailMessage
from django.core.mail.message import sanitize_address
from django.test import override_settings
from hypothesis import event, given
from hypothesis import strategies as st

from django_mailqueue.backends import QueueEmailBackend
from django_mailqueue.conf import MxRoute, QueueSettings, Timeouts
from django_mailqueue.core.items import NewItem, RecipientState
from django_mailqueue.delivery import Deliverer
from django_mailqueue.delivery.wire import normalize_line_endings
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores import QueueStore
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.stores.orm import OrmStore
from tests.reliability.conftest import RELIABILITY
from tests.support.databases import DATABASES
from tests.support.django_mail import smtp_backend_bytes
from tests.support.dns_server import DnsServer
from tests.support.redis_server import delete_prefix, unique_prefix
from tests.support.smtp_server import ScriptedSmtpServer

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BARE = re.compile(rb"\r(?!\n)|(?<!\r)\n")

# --- strategies ---------------------------------------------------------------------------------

#: Characters that break things: NUL, CR, LF, lone surrogates, controls, non-ASCII, angle brackets, quotes.
NASTY = st.sampled_from(
    [
        "\x00",
        "\r",
        "\n",
        "\r\n",
        "\ud800",
        "\udfff",
        "\x7f",
        "\x1b",
        "é",
        "𝔘",
        "<",
        ">",
        '"',
        "\t",
        " ",
        ",",
        ";",
        ":",
        "@",
        ".",
        "\u2028",
        "\ufeff",
    ]
)
TEXT = st.lists(st.one_of(st.text(max_size=20), NASTY), max_size=8).map("".join)
ADDRESS = st.one_of(
    st.emails(),
    st.builds(lambda name, mail: f"{name} <{mail}>", TEXT, st.emails()),
    st.builds(lambda mail, junk: mail + junk, st.emails(), NASTY),
    st.builds(
        lambda local, domain: f"{local}@{domain}",
        TEXT,
        st.sampled_from(["dest.test", "bücher.test", "xn--bcher-kva.test", ""]),
    ),
    st.sampled_from(
        [
            "",
            "@",
            "a@",
            "@b.test",
            "a@b.test\r\nRCPT TO:<evil@x.test>",
            "a@b.test\nBcc: x@y.test",
            "Jörg <jörg@bücher.test>",
            '"odd, name" <o@dest.test>',
            "a@[127.0.0.1]",
        ]
    ),
    TEXT,
)
#: Text and addresses a site sends every day: printable, maybe non-ASCII, never a control character.
CLEAN_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)
CLEAN_ADDRESS = st.one_of(
    st.emails(),
    st.builds(lambda name, mail: f"{name} <{mail}>", CLEAN_TEXT, st.emails()),
    st.sampled_from(["Jörg <jörg@bücher.test>", '"odd, name" <o@dest.test>', "ok@xn--bcher-kva.test"]),
)
HEADER_NAME = st.one_of(
    st.sampled_from(
        [
            "X-Tag",
            "Reply-To",
            "X-Mailer",
            "Precedence",
            "X-Ünïcode",
            "Bcc",
            "X-Bad\r\nInjected",
            "Subject",
            "From",
            "To",
        ]
    ),
    TEXT,
)


@st.composite
def email_messages(draw: st.DrawFn) -> EmailMessage:
    clean = draw(st.booleans())  # half the messages are ordinary ones, so the "queued exactly" branch is run
    text, address = (CLEAN_TEXT, CLEAN_ADDRESS) if clean else (TEXT, ADDRESS)
    headers = draw(
        st.dictionaries(st.sampled_from(["X-Tag", "Reply-To", "X-Ünïcode"]) if clean else HEADER_NAME, text, max_size=3)
    )
    # Fixed Date and Message-ID: Django makes them afresh on each message() call otherwise.
    headers["Date"] = "Thu, 01 Jan 2026 00:00:00 -0000"
    headers["Message-ID"] = f"<{uuid.uuid4().hex}@origin.test>"
    size = draw(st.sampled_from([0, 10, 1000, 30_000, 70_000]))
    body = draw(text) + "x" * size + draw(text)
    return EmailMessage(
        subject=draw(text),
        body=body,
        from_email=draw(address),
        to=draw(st.lists(address, max_size=4)),
        cc=draw(st.lists(address, max_size=2)),
        bcc=draw(st.lists(address, max_size=2)),
        headers=headers,
    )


def expected_address(raw: str, encoding: str = "utf-8") -> str:
    """What MAIL FROM: / RCPT TO: carry for `raw`: the address Django's SMTP backend takes from it, with
    a non-ASCII local part as written (RFC 6531) rather than as the encoded word Django makes for a header."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sanitize_address is deprecated from Django 6.0
        sanitized = sanitize_address(raw, encoding)
    address = email.utils.parseaddr(sanitized)[1] or sanitized
    local, at, domain = address.rpartition("@")
    if at and local.startswith("=?"):
        local = str(email.header.make_header(email.header.decode_header(local)))
        return Address(username=local, domain=domain).addr_spec
    return address


# --- stores -------------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def any_store(request: pytest.FixtureRequest) -> Iterator[QueueStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "redis":
        from django_mailqueue.stores.redis import RedisStore

        url = request.getfixturevalue("redis_url")
        prefix = unique_prefix("rel-input")
        store: QueueStore = RedisStore({"url": url, "key_prefix": prefix})
        yield store
        store.close()
        delete_prefix(url, prefix)
        return
    # The ORM stores run inside pytest-django's transaction, rolled back after the test.
    alias = request.getfixturevalue("pg_alias") if request.param == "postgres" else "default"
    yield OrmStore({"database": alias})


# --- the backend --------------------------------------------------------------------------------


@RELIABILITY
@given(message=email_messages(), limit=st.sampled_from([25 * 1024 * 1024, 50_000]))
def test_the_backend_queues_exactly_or_refuses_clearly(message: EmailMessage, limit: int) -> None:
    # override_settings, not pytest-django's `settings`: that nests one more layer each example, and a
    # shrinking run of hundreds of examples then ends in a RecursionError reading any setting.
    with override_settings(MAILQUEUE={"HOSTNAME": "mx.test.example", "MAX_MESSAGE_SIZE": limit}):
        backend_queues_exactly_or_refuses_clearly(message, limit)


def backend_queues_exactly_or_refuses_clearly(message: EmailMessage, limit: int) -> None:
    store = MemoryStore()
    backend = QueueEmailBackend(store=store)
    try:
        sent = backend.send_messages([message])
    except QueueError as exc:
        event(f"refused {exc.code}")
        assert exc.code in ("INVALID", "TOO_LARGE"), exc
        assert exc.message and len(exc.message) < 2000
        assert store.count() == 0, "a refused message left something behind"
        return
    # any other exception fails the test: hypothesis reports the input
    if not message.recipients():
        assert sent == 0 and store.count() == 0
        return
    assert sent == 1
    event("queued")
    (item,) = store.list()
    expected = smtp_backend_bytes(message)
    assert store.read_message(item.id) == expected
    assert not BARE.search(expected)
    assert len(expected) <= limit
    assert item.sender == (expected_address(message.from_email) if message.from_email else "")
    wanted = list(dict.fromkeys(expected_address(r) for r in message.recipients()))
    assert [r.address for r in item.recipients] == wanted
    for address in (item.sender, *wanted):
        assert "\r" not in address and "\n" not in address and "\x00" not in address


# --- the stores ---------------------------------------------------------------------------------

STORE_TEXT = st.one_of(TEXT, st.text(min_size=250, max_size=1100))


@st.composite
def new_items(draw: st.DrawFn) -> NewItem:
    def address() -> str:
        return draw(st.one_of(st.emails(), st.builds(lambda a, b: f"{a}@{b}", TEXT, TEXT), TEXT))

    recipients = tuple(dict.fromkeys(address() for _ in range(draw(st.integers(1, 4)))))
    return NewItem(
        sender=draw(st.one_of(st.just(""), st.emails(), TEXT)),
        recipients=recipients,
        message=draw(st.one_of(st.binary(max_size=3000), st.just(b"\x00\r\n.\r\n\xff\xfe" * 100))),
        queue=draw(st.one_of(st.just("default"), TEXT)),
        message_id=draw(STORE_TEXT),
        subject=draw(STORE_TEXT),
    )


@pytest.mark.django_db(databases=DATABASES)
@RELIABILITY
@given(new=new_items())
def test_a_store_keeps_text_exactly_or_refuses_it(any_store: QueueStore, new: NewItem) -> None:
    store = any_store
    before = store.count()
    try:
        added = store.add(new, now=NOW)
    except QueueError as exc:
        event("refused")
        assert exc.code == "INVALID", exc
        assert exc.message
        assert store.count() == before, "a refused item left something behind"
        return
    event("stored")
    try:
        got = store.get(added.id)
        assert got is not None
        assert got.sender == new.sender
        assert [r.address for r in got.recipients] == list(new.recipients)
        assert got.queue == new.queue
        assert store.read_message(added.id) == bytes(new.message)
        # The admin shows Message-ID and Subject; a store may shorten them (to 998 / 255 characters), only so.
        assert new.message_id.startswith(got.message_id) and len(got.message_id) >= min(len(new.message_id), 998)
        assert new.subject.startswith(got.subject) and len(got.subject) >= min(len(new.subject), 255)
    finally:
        store.cancel(added.id)


# --- the wire -----------------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [
        b"\r",
        b"\n",
        b"\r\n",
        b".",
        b"..",
        b"\n.\n",
        b"\r.\r",
        b"\n.\r\n",
        b"\r\n.\r\n",
        b"\r\n.\n",
        b"\r\n.\r",
        b"a",
        b"text ",
        b"MAIL FROM:<ceo@victim.test>",
        b"RCPT TO:<x@example.test>",
        b"DATA",
        b"QUIT",
        b"\x00",
        b"\xff",
        b"\t",
    ]
)
HEAD = b"From: a@origin.test\r\nTo: b@example.test\r\nSubject: smuggling\r\n\r\n"


@pytest.fixture
def raw_mx() -> Iterator[tuple[QueueSettings, ScriptedSmtpServer]]:
    with DnsServer() as dns:
        dns.mx("example.test", (10, "mx.example.test"))
        dns.a("mx.example.test", "127.0.0.2")
        server = ScriptedSmtpServer("127.0.0.2").start()
        settings = QueueSettings(
            hostname="client.test.example",
            routes={"*": MxRoute()},
            dns=dns.settings(timeout=2.0),
            mx_port=server.port,
            timeouts=Timeouts(connect=2, greeting=3, mail=3, rcpt=3, data=3, data_block=3, data_end=3, session=15),
        )
        try:
            yield settings, server
        finally:
            server.stop()


@RELIABILITY
@given(body=st.lists(FRAGMENTS, min_size=1, max_size=40).map(b"".join))
def test_smuggling_sequences_never_reach_the_wire(
    raw_mx: tuple[QueueSettings, ScriptedSmtpServer], body: bytes
) -> None:
    settings, server = raw_mx
    server.data.clear()
    server.lines.clear()
    message = HEAD + body

    result = asyncio.run(Deliverer(settings).deliver("sender@origin.test", ["b@example.test"], message))

    assert result.outcomes[0].state is RecipientState.DELIVERED, result
    (wire,) = server.data  # the server read exactly one message, up to the first CRLF.CRLF
    assert not BARE.search(wire)
    assert wire.endswith(b"\r\n.\r\n") and wire.count(b"\r\n.\r\n") == 1
    assert re.sub(rb"(?m)^\.", b"", wire[: -len(b".\r\n")]) == normalize_line_endings(message)
    assert [c for c in server.commands if c not in ("EHLO", "QUIT")] == ["MAIL", "RCPT", "DATA"]


# --- CR/LF in envelopes -------------------------------------------------------------------------

INJECTED = ["a@dest.test\r\nRCPT TO:<evil@x.test>", "a@dest.test\n", "\ra@dest.test", "a@dest.test\r\n.\r\n"]


@pytest.mark.parametrize("address", INJECTED)
def test_cr_lf_in_an_envelope_is_refused_at_the_backend(address: str) -> None:
    store = MemoryStore()
    backend = QueueEmailBackend(store=store)
    for message in (
        EmailMessage("s", "b", address, ["ok@dest.test"]),
        EmailMessage("s", "b", "a@origin.test", [address]),
    ):
        with pytest.raises(QueueError) as refused:
            backend.send_messages([message])
        assert refused.value.code == "INVALID"
    assert store.count() == 0


@pytest.mark.django_db(databases=DATABASES)
@pytest.mark.parametrize("address", INJECTED)
def test_cr_lf_in_an_envelope_is_refused_at_the_store(any_store: QueueStore, address: str) -> None:
    for new in (NewItem(address, ("ok@dest.test",), b"x\r\n"), NewItem("a@origin.test", (address,), b"x\r\n")):
        with pytest.raises(QueueError) as refused:
            any_store.add(new, now=NOW)
        assert refused.value.code == "INVALID"
    assert any_store.count() == 0


@pytest.mark.parametrize("address", INJECTED)
def test_cr_lf_in_an_envelope_never_reaches_the_wire(
    raw_mx: tuple[QueueSettings, ScriptedSmtpServer], address: str
) -> None:
    settings, server = raw_mx
    result = asyncio.run(Deliverer(settings).deliver("a@origin.test", [address], HEAD + b"hi\r\n"))
    assert result.outcomes[0].state is RecipientState.FAILED and result.outcomes[0].reply.status == "5.1.3"
    result = asyncio.run(Deliverer(settings).deliver(address, ["b@example.test"], HEAD + b"hi\r\n"))
    assert result.outcomes[0].state is RecipientState.FAILED and result.outcomes[0].reply.status == "5.1.7"
    assert server.lines == []

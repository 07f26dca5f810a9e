"""QueueEmailBackend: what send_mail() stores, in whose transaction, and what it refuses."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import django
import pytest
from aiosmtpd.controller import Controller
from django.core import mail
from django.core.mail import EmailMessage, EmailMultiAlternatives, get_connection, send_mail, send_mass_mail
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend
from django.db import transaction
from django.test import override_settings

from django_mailqueue.exceptions import QueueError
from django_mailqueue.models import QueuedItem, QueuedMessage, QueuedRecipient
from django_mailqueue.stores import get_store
from tests.support.databases import DATABASES

pytestmark = pytest.mark.django_db(transaction=True)


class _Capture:
    def __init__(self) -> None:
        self.envelopes: list[tuple[str, list[str], bytes]] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server, session, envelope):  # type: ignore[no-untyped-def]
        with self.lock:
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content))
        return "250 OK"


@pytest.fixture
def smtp_capture() -> Iterator[tuple[int, _Capture]]:
    handler = _Capture()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(handler, hostname="127.0.0.1", port=port, ready_timeout=60)
    controller.start()
    try:
        yield port, handler
    finally:
        controller.stop()


def _normalise(data: bytes) -> bytes:
    """Blank what Django makes afresh on each call: Date, Message-ID, MIME boundaries."""
    data = re.sub(rb"(?m)^Date: .*\r\n", b"Date: X\r\n", data)
    data = re.sub(rb"(?m)^Message-ID: .*\r\n", b"Message-ID: X\r\n", data)
    boundaries = re.findall(rb'boundary="([^"]+)"', data)
    for i, boundary in enumerate(boundaries):
        data = data.replace(boundary, b"BOUNDARY%d" % i)
    return data


def _messages() -> list[EmailMessage]:
    plain = EmailMessage("Hello", "Plain body.\nSecond line.\n", "from@example.com", ["to@example.org"])
    html = EmailMultiAlternatives(
        "HTML", "text part", "from@example.com", ["to@example.org"], cc=["cc@example.net"], bcc=["hidden@example.net"]
    )
    html.attach_alternative("<p>html <b>part</b></p>", "text/html")
    attached = EmailMessage("Files", "see attached", "from@example.com", ["to@example.org"])
    attached.attach("notes.txt", "some notes\n", "text/plain")
    attached.attach("data.bin", bytes(range(256)), "application/octet-stream")
    utf8 = EmailMessage(
        "Grüße aus Köln — ünïcödé",
        "Tschüß\n",
        "Jörg Müller <joerg@example.com>",
        ["Zoë Ñandú <zoe@example.org>"],
        headers={"Message-ID": "<fixed-1@example.com>"},
    )
    idn = EmailMessage("IDN", "body", "from@example.com", ["user@bücher.example"])
    long_headers = EmailMessage(
        "A subject " + "that goes on and on " * 12,
        "body",
        "from@example.com",
        [f"person{i}@example.org" for i in range(30)],
        headers={"X-Long": "value " * 60, "Reply-To": "reply@example.com"},
    )
    messages = [plain, html, attached, utf8, idn, long_headers]
    if django.VERSION[:2] >= (6, 0):  # Django 6 attaches an `email.message.MIMEPart` as it is
        from email.message import MIMEPart

        part = MIMEPart()
        part.set_content(b"\x00\x01binary", "application", "octet-stream", filename="part.bin")
        with_part = EmailMessage("Part", "see the part", "from@example.com", ["to@example.org"])
        with_part.attach(part)  # type: ignore[arg-type]  # 6.0's signature
        messages.append(with_part)
    return messages


def test_stored_bytes_equal_what_the_smtp_backend_sends(smtp_capture: tuple[int, _Capture]) -> None:
    port, capture = smtp_capture
    messages = _messages()
    smtp = SmtpBackend(host="127.0.0.1", port=port, use_tls=False, timeout=10)
    assert smtp.send_messages(messages) == len(messages)
    assert get_connection().send_messages(messages) == len(messages)
    stored = get_store().list(limit=100)
    assert len(stored) == len(messages) == len(capture.envelopes)
    for item, (mail_from, rcpt_tos, wire) in zip(stored, capture.envelopes, strict=True):
        data = get_store().read_message(item.id)
        assert data is not None
        assert _normalise(data) == _normalise(wire)
        assert item.sender == mail_from
        assert [r.address for r in item.recipients] == rcpt_tos
        assert b"\n" not in data.replace(b"\r\n", b"")


def test_envelope_from_from_email_and_every_recipient() -> None:
    message = EmailMessage(
        "s", "b", "Sender <sender@example.com>", ["a@example.org"], cc=["b@example.org"], bcc=["c@example.org"]
    )
    assert message.send() == 1
    (item,) = get_store().list()
    assert item.sender == "sender@example.com"
    assert [r.address for r in item.recipients] == ["a@example.org", "b@example.org", "c@example.org"]
    data = get_store().read_message(item.id)
    assert data is not None and b"c@example.org" not in data  # Bcc is not in the headers


def test_idn_domains_in_a_label_form() -> None:
    send_mail("s", "b", "from@exämple.com", ["user@bücher.example"])
    (item,) = get_store().list()
    assert item.sender == "from@xn--exmple-cua.com"
    assert item.recipients[0].address == "user@xn--bcher-kva.example"


def test_queue_and_send_at_per_message() -> None:
    later = datetime(2031, 5, 1, 8, 30, tzinfo=UTC)
    message = EmailMessage("s", "b", "from@example.com", ["to@example.org"])
    message.queue = "bulk"  # type: ignore[attr-defined]
    message.send_at = later  # type: ignore[attr-defined]
    stamp = EmailMessage("s", "b", "from@example.com", ["to@example.org"])
    stamp.send_at = later.timestamp() + 60  # type: ignore[attr-defined]
    get_connection().send_messages([message, stamp])
    first, second = get_store().list()
    assert first.queue == "bulk" and first.next_attempt == later
    assert second.queue == "default" and second.next_attempt == later + timedelta(seconds=60)


def test_ids_sort_in_the_order_they_were_queued_and_differ_in_their_first_digits() -> None:
    # The index locality the ids are made for, and the 8 digits the admin shows and searches an id by.
    send_mass_mail([("s", "b", "from@example.com", [f"to{i}@example.org"]) for i in range(200)])
    rows = list(QueuedItem.objects.order_by("seq").values_list("id", flat=True))
    assert len(rows) == 200
    assert {row.version for row in rows} == {8}
    assert len({row.hex[:8] for row in rows}) == 200
    assert sum(a < b for a, b in zip(rows, rows[1:], strict=False)) >= 198  # one wrap of the counter at most


def test_a_rolled_back_transaction_queues_nothing() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        send_mail("s", "b", "from@example.com", ["to@example.org"])
        assert QueuedItem.objects.count() == 1
        raise RuntimeError("roll back")
    assert QueuedItem.objects.count() == 0
    assert QueuedMessage.objects.count() == 0
    assert QueuedRecipient.objects.count() == 0
    with transaction.atomic():
        send_mail("s", "b", "from@example.com", ["to@example.org"])
    assert QueuedItem.objects.count() == 1
    assert QueuedMessage.objects.count() == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, databases=DATABASES)
def test_a_rolled_back_transaction_queues_nothing_on_postgres(pg_alias: str) -> None:
    with override_settings(
        MAILQUEUE={"STORE": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": pg_alias}}}
    ):
        with pytest.raises(RuntimeError), transaction.atomic(using=pg_alias):
            send_mail("s", "b", "from@example.com", ["to@example.org"])
            raise RuntimeError("roll back")
        assert QueuedItem.objects.using(pg_alias).count() == 0
        assert QueuedMessage.objects.using(pg_alias).count() == 0
        with transaction.atomic(using=pg_alias):
            send_mail("s", "b", "from@example.com", ["to@example.org"])
        assert QueuedItem.objects.using(pg_alias).count() == 1


def test_a_hundred_messages_cost_a_constant_number_of_queries(django_assert_max_num_queries) -> None:  # type: ignore[no-untyped-def]
    messages = [
        EmailMessage(f"s{i}", "b", "from@example.com", [f"to{i}@example.org", "x@example.net"]) for i in range(100)
    ]
    with django_assert_max_num_queries(8):
        assert get_connection().send_messages(messages) == 100
    assert QueuedItem.objects.count() == 100
    assert QueuedRecipient.objects.count() == 200
    datatuple = [(f"s{i}", "b", "from@example.com", [f"t{i}@example.org"]) for i in range(100)]
    with django_assert_max_num_queries(8):
        assert send_mass_mail(datatuple) == 100


def test_fail_silently_skips_what_cannot_be_queued() -> None:
    good = EmailMessage("s", "b", "from@example.com", ["to@example.org"])
    bad = EmailMessage("s", "b", "from@example.com", ["to@example.org\r\nRCPT TO:<evil@example.net>"])
    assert get_connection(fail_silently=True).send_messages([good, bad]) == 1
    assert QueuedItem.objects.count() == 1


def test_a_message_without_recipients_is_not_counted() -> None:
    assert get_connection().send_messages([EmailMessage("s", "b", "from@example.com", [])]) == 0
    assert QueuedItem.objects.count() == 0


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"to": ["to@example.org\r\nRCPT TO:<evil@example.net>"]}, "INVALID"),
        ({"to": ["to@example.org\n"]}, "INVALID"),
        ({"from_email": "from@example.com\rX"}, "INVALID"),
        ({"to": ["not an address"]}, "INVALID"),
        ({"to": ["a@b@c"]}, "INVALID"),
        ({"to": ["nul\x00@example.org"]}, "INVALID"),
        ({"to": ["lone\ud800@example.org"]}, "INVALID"),
        ({"body": "a NUL \x00 in the body"}, "INVALID"),
        ({"subject": "lone \udc80 surrogate"}, "INVALID"),
        ({"headers": {"X-Bad": "one\r\nBcc: evil@example.net"}}, "INVALID"),
    ],
)
def test_bad_input_is_refused_and_nothing_stored(fields: dict[str, object], code: str) -> None:
    base: dict[str, object] = {"subject": "s", "body": "b", "from_email": "from@example.com", "to": ["to@example.org"]}
    base.update(fields)
    good = EmailMessage("s", "b", "from@example.com", ["ok@example.org"])
    bad = EmailMessage(**base)  # type: ignore[arg-type]
    with pytest.raises(QueueError) as refused:
        get_connection().send_messages([good, bad])
    assert refused.value.code == code
    assert str(refused.value)
    assert QueuedItem.objects.count() == 0
    assert QueuedMessage.objects.count() == 0


@override_settings(MAILQUEUE={"MAX_MESSAGE_SIZE": 10_000})
def test_a_message_over_max_message_size_is_too_large() -> None:
    big = EmailMessage("s", "x" * 20_000, "from@example.com", ["to@example.org"])
    with pytest.raises(QueueError) as refused:
        big.send()
    assert refused.value.code == "TOO_LARGE"
    assert "MAX_MESSAGE_SIZE" in str(refused.value)
    assert QueuedItem.objects.count() == 0


@override_settings(MAILQUEUE={"MAX_ITEMS": 3})
def test_a_full_queue_refuses_with_full() -> None:
    for _ in range(3):
        send_mail("s", "b", "from@example.com", ["to@example.org"])
    with pytest.raises(QueueError) as refused:
        send_mail("s", "b", "from@example.com", ["to@example.org"])
    assert refused.value.code == "FULL"
    assert QueuedItem.objects.count() == 3
    assert send_mail("s", "b", "from@example.com", ["to@example.org"], fail_silently=True) == 0


def test_the_locmem_outbox_is_not_used() -> None:
    # pytest-django swaps EMAIL_BACKEND for locmem; the suite sets it back (see conftest)
    send_mail("s", "b", "from@example.com", ["to@example.org"])
    assert getattr(mail, "outbox", []) == []
    assert QueuedItem.objects.count() == 1

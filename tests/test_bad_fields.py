"""Bad fields of a message: refused as `INVALID` naming the field, the error behind it kept, nothing stored.

Each example of issue 24 ("Bad input and the admin preview") is a test of its
own; the parametrized tests after them try every line break in every field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django
import pytest
from django.core.mail import EmailMessage, EmailMultiAlternatives, get_connection, send_mail

from django_mailqueue.backends import QueueEmailBackend
from django_mailqueue.core.text import LINE_BREAKS
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores.memory import MemoryStore

SENDER = "sender@origin.test"
RECIPIENT = "someone@dest.test"


@pytest.fixture
def store(settings: Any) -> MemoryStore:
    """The store `send_mail()` and `EmailMessage.send()` go to: a memory store of the test's own."""
    settings.MAILQUEUE = {"STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}}
    from django_mailqueue.stores import get_store

    store = get_store()
    assert isinstance(store, MemoryStore)
    return store


def refused(store: MemoryStore, send: Callable[[], object], *named: str) -> QueueError:
    """`send()` raises `QueueError("INVALID")` whose message names each of `named`, and stores nothing."""
    with pytest.raises(QueueError) as caught:
        send()
    assert caught.value.code == "INVALID", caught.value
    for name in named:
        assert name in caught.value.message, caught.value.message
    assert store.count() == 0
    return caught.value


def message(**fields: Any) -> EmailMultiAlternatives:
    base: dict[str, Any] = {"subject": "Hello", "body": "Body.\n", "from_email": SENDER, "to": [RECIPIENT]}
    return EmailMultiAlternatives(**{**base, **fields})


# --- 1. line breaks other than CR and LF ------------------------------------------------------


def test_a_file_separator_in_the_subject_is_refused(store: MemoryStore) -> None:
    # was queued as "Subject: H\r\ninjected line", From, To, Date and Message-ID pushed into the body
    refused(store, lambda: send_mail("H\x1cinjected line", "Body.\n", SENDER, [RECIPIENT]), "the subject", "U+001C")


def test_a_vertical_tab_in_an_attachment_filename_is_refused(store: MemoryStore) -> None:
    # was queued as filename="a\r\nb.txt", ending the part's headers
    mail = message()
    mail.attach("a\x0bb.txt", "content", "text/plain")
    refused(store, mail.send, "attachment filename", "U+000B")


def test_a_group_separator_in_an_idn_address_is_refused(store: MemoryStore) -> None:
    # was queued with the address split across two lines of the To header
    refused(store, lambda: send_mail("Hello", "Body.\n", SENDER, ["u@例\x1dえ.test"]), "to address", "U+001D")


# --- 2. exceptions outside the contract -------------------------------------------------------


def test_an_empty_angle_address_is_invalid_not_a_type_error(store: MemoryStore) -> None:
    # Django 5.2's sanitize_address raised TypeError here; the envelope's own parse reports the defect
    error = refused(store, lambda: send_mail("Hello", "Body.\n", SENDER, ["<>"]), "recipient '<>'")
    assert "is not a valid address: null addr-spec" in error.message


def test_a_form_feed_before_bcc_in_a_display_name_is_invalid_not_a_header_parse_error(store: MemoryStore) -> None:
    mail = message(to=['"Ann\x0cBcc: x" <b@dest.test>'])
    refused(store, mail.send, "to address", "U+000C")


def test_a_form_feed_before_bcc_in_the_subject_is_invalid_not_a_header_parse_error(store: MemoryStore) -> None:
    refused(store, lambda: send_mail("s\x0cBcc: x@y.test", "Body.\n", SENDER, [RECIPIENT]), "the subject", "U+000C")


def test_an_escape_in_a_recipient_is_invalid_not_an_attribute_error(store: MemoryStore) -> None:
    recipient = ".\x1b.Ann <o'hara@fuzz.test>"
    # Django 5.2's sanitize_address raised AttributeError here; the control character is refused first
    error = refused(store, lambda: send_mail("Hello", "Body.\n", SENDER, [recipient]), f"recipient {recipient!r}")
    assert "holds a control character (U+001B)" in error.message


def test_cr_lf_in_an_attachment_mime_type_is_invalid_not_a_header_parse_error(store: MemoryStore) -> None:
    mail = message()
    mail.attach("a.bin", b"\x00\x01", "application/x\r\nBcc: y")
    refused(store, mail.send, "MIME type of attachment 'a.bin'", "U+000D")


def test_cr_lf_in_an_attachment_filename_is_invalid_not_a_header_parse_error(store: MemoryStore) -> None:
    mail = message()
    mail.attach("a\r\nBcc: x", b"\x00\x01", "application/octet-stream")
    refused(store, mail.send, "attachment filename", "U+000D")


def test_a_header_named_none_is_invalid_not_an_attribute_error(store: MemoryStore) -> None:
    mail = message(headers={None: "v"})
    refused(store, mail.send, "header name None")


# --- every line break, every field -------------------------------------------------------------


def _attachment(filename: str = "a.txt", mimetype: str = "text/plain") -> EmailMultiAlternatives:
    mail = message()
    mail.attach(filename, "content", mimetype)
    return mail


def _alternative(mimetype: str) -> EmailMultiAlternatives:
    mail = message()
    mail.attach_alternative("<p>Hello</p>", mimetype)
    return mail


FIELDS: dict[str, tuple[Callable[[str], EmailMessage], str]] = {
    "subject": (lambda bad: message(subject=f"Hello{bad}there"), "the subject"),
    "from_email": (lambda bad: message(from_email=f"sen{bad}der@origin.test"), "from_email address"),
    "sender display name": (lambda bad: message(from_email=f'"Ann{bad}Lee" <a@origin.test>'), "from_email address"),
    "to": (lambda bad: message(to=[f"some{bad}one@dest.test"]), "to address"),
    "to display name": (lambda bad: message(to=[f"Bob{bad}Smith <b@dest.test>"]), "to address"),
    "cc": (lambda bad: message(cc=[f"c@de{bad}st.test"]), "cc address"),
    "bcc": (lambda bad: message(bcc=[f"Éva{bad} <e@dest.test>"]), "bcc address"),
    "reply_to": (lambda bad: message(reply_to=[f"Reply{bad}Desk <r@origin.test>"]), "reply_to address"),
    "header value": (lambda bad: message(headers={"X-Tag": f"a{bad}b"}), "header 'X-Tag'"),
    "header name": (lambda bad: message(headers={f"X-{bad}Tag": "v"}), "header name"),
    "attachment filename": (lambda bad: _attachment(filename=f"re{bad}port.txt"), "attachment filename"),
    "attachment MIME type": (lambda bad: _attachment(mimetype=f"text/pl{bad}ain"), "MIME type of attachment"),
    "alternative MIME type": (lambda bad: _alternative(f"text/ht{bad}ml"), "alternative's MIME type"),
}


@pytest.mark.parametrize("field", list(FIELDS))
@pytest.mark.parametrize("line_break", list(LINE_BREAKS), ids=lambda c: f"U+{ord(c):04X}")
def test_every_line_break_in_every_field_is_refused_naming_the_field(
    store: MemoryStore, field: str, line_break: str
) -> None:
    make, named = FIELDS[field]
    mail = make(line_break)
    refused(store, mail.send, named)
    refused(store, lambda: QueueEmailBackend(store=store).send_messages([message(), mail]), named)


def test_the_splitlines_separators_are_exactly_what_is_refused() -> None:
    every = "".join(chr(c) for c in range(0x3000))
    assert set(LINE_BREAKS) == {c for c in every if len(f"a{c}b".splitlines()) > 1}


def test_a_mime_base_attachment_with_a_line_break_in_its_own_header_is_refused(store: MemoryStore) -> None:
    from email.mime.base import MIMEBase

    part = MIMEBase("application", "octet-stream")
    part.set_payload(b"data")
    part["Content-Description"] = "quarterly\x1dreport"
    mail = message()
    if django.VERSION[:2] >= (6, 0):
        with pytest.warns(PendingDeprecationWarning, match="MIMEBase attachments are deprecated"):
            mail.attach(part)
    else:
        mail.attach(part)
    refused(store, mail.send, "header 'Content-Description'", "U+001D")


@pytest.mark.skipif(django.VERSION[:2] < (6, 0), reason="Django attaches a MIMEPart from 6.0")
def test_a_mime_part_attachment_with_a_line_break_in_its_own_header_is_refused(store: MemoryStore) -> None:
    from email.message import MIMEPart
    from email.policy import compat32

    part = MIMEPart(policy=compat32)  # the default policy would refuse the header itself
    part.set_payload(b"data")
    part["Content-Type"] = "application/octet-stream"
    part["Content-Description"] = "quarterly\x1dreport"
    mail = message()
    mail.attach(part)  # type: ignore[arg-type]  # 6.0's signature
    refused(store, mail.send, "header 'Content-Description'", "U+001D")


def test_an_attached_email_message_with_a_line_break_in_its_subject_is_refused(store: MemoryStore) -> None:
    mail = message()
    mail.attach("fwd.eml", message(subject="forwarded\u2028Subject"), "message/rfc822")
    refused(store, mail.send, "attached message 'fwd.eml'", "the subject", "U+2028")


def test_an_attached_parsed_message_with_a_line_break_in_its_subject_is_refused(store: MemoryStore) -> None:
    mail = message()
    mail.attach("fwd.eml", "Subject: forwarded\x1cSubject\r\nFrom: a@origin.test\r\n\r\nbody\r\n", "message/rfc822")
    refused(store, mail.send, "header 'Subject' of a text/plain part", "U+001C")


def test_an_attached_message_with_long_folded_headers_is_queued(store: MemoryStore) -> None:
    inner = message(subject="Ünïcode " * 30, headers={"X-Long": "word " * 40})
    mail = message()
    mail.attach("fwd.eml", inner.message(), "message/rfc822")
    assert mail.send() == 1 and store.count() == 1


@pytest.mark.parametrize(
    ("mutate", "named", "cause"),
    [
        pytest.param(lambda m: setattr(m, "attachments", [("a.txt", "x")]), "a field", ValueError, id="not a triple"),
        pytest.param(lambda m: setattr(m, "encoding", 8), "encoding must be a string", None, id="encoding an int"),
        pytest.param(lambda m: setattr(m, "to", "a@dest.test"), "the recipients", TypeError, id="to not a list"),
        pytest.param(lambda m: setattr(m, "send_at", 1e20), "message.send_at", OverflowError, id="send_at too far"),
        pytest.param(
            lambda m: m.attachments.append(("a.bin", b"x", "no-slash")), "not type/subtype", None, id="no slash"
        ),
        pytest.param(lambda m: setattr(m, "encoding", "no-such-charset"), "written", LookupError, id="unknown charset"),
    ],
)
def test_a_message_django_cannot_write_is_invalid_with_its_cause(
    store: MemoryStore, mutate: Any, named: str, cause: type[Exception] | None
) -> None:
    mail = message(body="Ünïcode body.\n")
    mutate(mail)
    # through the connection: EmailMessage.send() reads the recipients itself before it calls the backend
    error = refused(store, lambda: get_connection().send_messages([mail]), named)
    if cause is None:
        assert error.__cause__ is None
    else:
        assert isinstance(error.__cause__, cause), repr(error.__cause__)


@pytest.mark.parametrize("control", [chr(c) for c in range(1, 0x20) if chr(c) not in LINE_BREAKS] + ["\x7f"])
def test_a_control_character_in_an_envelope_address_is_refused_not_bounced_later(
    store: MemoryStore, control: str
) -> None:
    # Django's sanitize_address keeps it; no SMTP server takes it (the worker would fail it as 5.1.3)
    refused(store, lambda: send_mail("Hello", "Body.\n", SENDER, [f"some{control}one@dest.test"]), "recipient")

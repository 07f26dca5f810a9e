"""Turning a Django `EmailMessage` into a queue item: its envelope and its bytes on the wire."""

from __future__ import annotations

import email.policy
import functools
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, time
from email.errors import NonASCIILocalPartDefect
from email.message import Message
from typing import Any

from django.core.mail import EmailMessage
from django.utils.encoding import force_str

from .conf import get_settings
from .core.errors import Code, QueueError
from .core.items import DEFAULT_QUEUE, NewItem
from .core.text import fits_a_header, refuse_controls, refuse_in_header, refuse_unkeepable
from .mime import django_message, plain_message_bytes, wire_bytes
from .routes import MxRoute, Route

#: The `EmailMessage` attribute naming the item's queue (lane); "default" when unset.
QUEUE_ATTRIBUTE = "queue"
#: The attribute holding the not-before time, as django-anymail reads it: a
#: datetime (naive is taken in the current time zone), a date (midnight UTC), or
#: a Unix timestamp.
SEND_AT_ATTRIBUTE = "send_at"


def message_to_item(
    message: EmailMessage, *, max_message_size: int, route_for: Callable[[str], Route] | None = None
) -> NewItem:
    """The item Django's SMTP backend would send for `message`, or `QueueError(INVALID | TOO_LARGE)`.

    The bytes are exactly those `django.core.mail.backends.smtp.EmailBackend`
    writes after DATA (CRLF line endings); the envelope sender is `from_email`
    and the recipients `to + cc + bcc`, each the addr-spec of the address: the
    local part as written (UTF-8 when not ASCII: delivery then asks for
    SMTPUTF8), the domain in A-label form. An address without a domain
    ("webmaster") is taken only where `route_for` (by default the settings')
    sends it through a relay, as Django's SMTP backend would hand it over.
    Whatever keeps the message from becoming an item is an `INVALID` naming
    the field, the error behind it as its `__cause__`.
    """
    recipients_raw = recipients_of(message)
    if not recipients_raw:
        raise QueueError(Code.INVALID, "the message has no recipients")
    try:
        _check_fields(message)
    except QueueError:
        raise
    except Exception as exc:  # a field of a type Django does not take either (an attachment not a triple, ...)
        raise QueueError(Code.INVALID, f"a field of the message cannot be read: {type(exc).__name__}: {exc}") from exc
    sender = _envelope_address(message.from_email, "the sender")
    domainless = bool(sender) and "@" not in sender
    recipients: list[str] = []
    for raw in recipients_raw:
        address = _envelope_address(raw, f"recipient {raw!r}")
        if not address:
            raise QueueError(Code.INVALID, f"recipient {raw!r} is empty")
        if address not in recipients:
            recipients.append(address)
            domainless = domainless or "@" not in address
    if domainless:
        _refuse_domainless_to_mx(sender, recipients, route_for or get_settings().route_for)
    try:
        written = plain_message_bytes(message)
        if written is not None:
            data, message_id = written
        else:
            mime = django_message(message)
            if _has_foreign_parts(message):
                _check_headers(mime)
            data = wire_bytes(mime)
            message_id = str(mime.get("Message-ID", "") or "")
    except QueueError:
        raise
    except Exception as exc:  # Django and `email` raise many kinds for a message they cannot write
        raise QueueError(Code.INVALID, f"the message cannot be written: {type(exc).__name__}: {exc}") from exc
    if len(data) > max_message_size:
        raise QueueError(Code.TOO_LARGE, f"the message is {len(data)} bytes; MAX_MESSAGE_SIZE is {max_message_size}")
    subject = str(message.subject or "")
    return NewItem(
        sender=sender,
        recipients=tuple(recipients),
        message=data,
        queue=_queue_of(message),
        not_before=_send_at_of(message),
        message_id=" ".join(message_id.split()),
        subject=" ".join(subject.split())[:255],
    )


def recipients_of(message: EmailMessage) -> list[Any]:
    """`message.recipients()` (`to + cc + bcc`, the empty ones left out), or `INVALID` when they are not lists."""
    try:
        return list(message.recipients())
    except Exception as exc:  # to, cc or bcc replaced by something that is not a list
        raise QueueError(Code.INVALID, f"the recipients cannot be read: {type(exc).__name__}: {exc}") from exc


#: A header name as RFC 5322 has it: printable ASCII but the colon.
_HEADER_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]+")


def _check_fields(message: EmailMessage) -> None:
    """Refuse, naming the field, what Django would write into a header with a line break in it, or not at all.

    One regex search a field; the field's name is only made for the error.
    """
    for field, values in (
        ("from_email", (message.from_email,)),
        ("to", message.to),
        ("cc", message.cc),
        ("bcc", message.bcc),
        ("reply_to", message.reply_to),
    ):
        for raw in values:
            if isinstance(raw, str):
                if not fits_a_header(raw):
                    refuse_in_header(raw, f"{field} address {raw!r}")
            elif isinstance(raw, tuple | list):  # Django also takes (display name, address)
                for part in raw:
                    if isinstance(part, str) and not fits_a_header(part):
                        refuse_in_header(part, f"{field} address {raw!r}")
    for name, value in message.extra_headers.items() if message.extra_headers else ():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise QueueError(Code.INVALID, f"header name {name!r} is not printable ASCII without a colon")
        value = str(value)
        if not fits_a_header(value):
            refuse_in_header(value, f"header {name!r}")
    subject = str(message.subject)
    if not fits_a_header(subject):
        refuse_in_header(subject, "the subject")
    _check_text_part(message.body, "the body")
    for what, value in (
        ("encoding", message.encoding),
        ("content_subtype", message.content_subtype),
        ("mixed_subtype", getattr(message, "mixed_subtype", None)),
        ("alternative_subtype", getattr(message, "alternative_subtype", None)),
    ):
        if value is not None and not (isinstance(value, str) and fits_a_header(value)):
            refuse_in_header(_text(value, what), what)
    for alternative in getattr(message, "alternatives", None) or ():
        content, mimetype = alternative
        _check_mime_type(mimetype, "an alternative's MIME type")
        _check_text_part(content, f"the {mimetype} alternative")
    for attachment in message.attachments:
        if isinstance(attachment, Message):  # a MIMEBase, or (Django 6) a MIMEPart
            continue  # its own headers are checked in the message Django makes (`_check_headers`)
        filename, content, mimetype = attachment
        if filename is not None and not (isinstance(filename, str) and fits_a_header(filename)):
            refuse_in_header(_text(filename, "an attachment's filename"), f"attachment filename {filename!r}")
        if mimetype is not None:
            _check_mime_type(mimetype, f"the MIME type of attachment {filename!r}")
        _check_text_part(content, f"attachment {filename!r}")
        if isinstance(content, EmailMessage):  # Django writes it with its headers encoded: check them first
            try:
                _check_fields(content)
            except QueueError as exc:
                raise QueueError(Code.INVALID, f"attached message {filename!r}: {exc.message}") from exc


def _has_foreign_parts(message: EmailMessage) -> bool:
    """Whether Django will attach parts whose headers it did not write: a `MIMEBase` or `MIMEPart`, an attached
    message."""
    return any(
        isinstance(a, Message) or (isinstance(a[2], str) and a[2].startswith("message/")) for a in message.attachments
    )


def _check_mime_type(mimetype: Any, what: str) -> None:
    if not (isinstance(mimetype, str) and fits_a_header(mimetype)):
        refuse_in_header(_text(mimetype, what), what)
    if "/" not in mimetype:
        raise QueueError(Code.INVALID, f"{what} {mimetype!r} is not type/subtype")


def _check_text_part(value: Any, what: str) -> None:
    if isinstance(value, str):  # a text part may hold line breaks, not what no store can keep
        refuse_unkeepable(value, what)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise QueueError(Code.INVALID, f"{what} must be a string, not {type(value).__name__}")
    return value


#: A line break that folds a header: the next line goes on with a space or a tab.
_FOLD = re.compile(r"\r?\n(?=[ \t])")


def _check_headers(mime: Message) -> None:
    """Every header of every part of `mime` (attached messages too) has a name and no line break but folds."""
    for part in mime.walk():
        for name, value in part.raw_items():
            if not _HEADER_NAME.fullmatch(name):
                raise QueueError(Code.INVALID, f"header name {name!r} of a part is not printable ASCII without a colon")
            text = _FOLD.sub("", str(value))
            if not fits_a_header(text):
                refuse_in_header(text, f"header {name!r} of a {part.get_content_type()} part")


#: A bare ASCII addr-spec of RFC 5322 atoms: its own envelope address, taken as it is without running
#: the email header parser (the costliest step of an enqueue).
_PLAIN_ADDRESS = re.compile(
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
)
#: The defect the header parser reports for an address without a domain, which Django lets through (#15042).
_NO_DOMAIN = "addr-spec local part with no domain"


def _envelope_address(raw: Any, what: str) -> str:
    if type(raw) is str and _PLAIN_ADDRESS.fullmatch(raw):
        return raw  # most addresses: nothing more to do
    if isinstance(raw, tuple | list) and len(raw) == 2:  # (display name, address), as Django also takes one
        raw = raw[1]
    if raw is None:
        return ""
    try:
        text = force_str(raw)  # a lazy string too (Django ticket #24416)
    except Exception as exc:
        raise QueueError(Code.INVALID, f"{what} is not a valid address: {type(exc).__name__}: {exc}") from exc
    if _PLAIN_ADDRESS.fullmatch(text) or text == "":
        return text
    refuse_in_header(text, what)
    refuse_controls(text, what)
    return envelope_address(text, what)


@functools.lru_cache(maxsize=1024)  # the same few senders ("Site <noreply@site>") again and again
def envelope_address(text: str, what: str = "the address") -> str:
    """The envelope address for an address as written in a header (`"Jösé <jösé@bücher.example>"`):
    its addr-spec with the local part as written and a non-ASCII domain in A-label form
    (`jösé@xn--bcher-kva.example`); a bare local part ("webmaster") as it is.

    Refused (`QueueError(INVALID)`) as Django's SMTP backend (6.0's `prep_address`, Unicode kept)
    refuses it — a parse defect, not exactly one mailbox — and when SMTP cannot carry it.
    """
    from .delivery.addresses import parse_address  # not at import: delivery brings aiosmtplib

    try:
        header = email.policy.default.header_factory("To", text)
        mailboxes = [address for group in header.groups for address in group.addresses]
    except Exception as exc:  # the header parser raises IndexError, ValueError, ... for some junk
        raise QueueError(Code.INVALID, f"{what} is not a valid address: {type(exc).__name__}: {exc}") from exc
    defects = [str(d) for d in header.defects if not isinstance(d, NonASCIILocalPartDefect) and str(d) != _NO_DOMAIN]
    if defects or len(mailboxes) != 1:
        reason = "; ".join(defects) if defects else "it must be a single address"
        raise QueueError(Code.INVALID, f"{what} is not a valid address: {reason}")
    mailbox = mailboxes[0]
    parsed = parse_address(mailbox.addr_spec, domainless=True)
    if parsed is None:
        raise QueueError(Code.INVALID, f"{what} is not an address SMTP can carry")
    return mailbox.addr_spec if mailbox.domain.isascii() else parsed.wire  # an ASCII domain as written, as Django


def _refuse_domainless_to_mx(sender: str, recipients: list[str], route_for: Callable[[str], Route]) -> None:
    """An address without a domain goes to a relay only: an MX route has no domain to look up."""

    def to_mx(address: str) -> bool:
        return isinstance(route_for(address.rpartition("@")[2] if "@" in address else ""), MxRoute)

    for recipient in recipients:
        if "@" not in recipient and to_mx(recipient):
            raise QueueError(
                Code.INVALID,
                f"recipient {recipient!r} has no domain, and MAILQUEUE['ROUTES'] sends it "
                "to MX hosts: only a relay route can take an address without a domain",
            )
    by_mx = next((r for r in recipients if to_mx(r)), None) if sender and "@" not in sender else None
    if by_mx is not None:
        raise QueueError(
            Code.INVALID,
            f"the sender {sender!r} has no domain, and mail to {by_mx!r} goes to MX hosts: "
            "only a relay route can take an address without a domain",
        )


def _queue_of(message: EmailMessage) -> str:
    queue = getattr(message, QUEUE_ATTRIBUTE, None)
    if queue is None or queue == "":
        return DEFAULT_QUEUE
    if not isinstance(queue, str) or len(queue) > 100:
        raise QueueError(Code.INVALID, "message.queue must be a string of at most 100 characters")
    refuse_in_header(queue, "the queue name")
    return queue


def _send_at_of(message: EmailMessage) -> datetime | None:
    send_at = getattr(message, SEND_AT_ATTRIBUTE, None)
    if send_at is None:
        return None
    try:
        return _as_utc(send_at)
    except QueueError:
        raise
    except Exception as exc:  # out of range, a NaN, a time zone that cannot say its offset
        raise QueueError(
            Code.INVALID, f"message.send_at {send_at!r} is not a time: {type(exc).__name__}: {exc}"
        ) from exc


def _as_utc(send_at: object) -> datetime:
    if isinstance(send_at, datetime):
        if send_at.tzinfo is None:
            from django.utils import timezone

            send_at = timezone.make_aware(send_at, timezone.get_current_timezone())
        return send_at.astimezone(UTC)
    if isinstance(send_at, date):
        return datetime.combine(send_at, time(), tzinfo=UTC)
    if isinstance(send_at, int | float) and not isinstance(send_at, bool):
        return datetime.fromtimestamp(send_at, UTC)
    raise QueueError(Code.INVALID, "message.send_at must be a datetime, a date or a Unix timestamp")

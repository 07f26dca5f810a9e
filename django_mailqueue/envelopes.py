"""Turning a Django `EmailMessage` into a queue item: its envelope and its bytes on the wire."""

from __future__ import annotations

import email.utils
import re
from datetime import UTC, date, datetime, time
from typing import Any

from django.conf import settings as django_settings
from django.core.mail import EmailMessage
from django.core.mail.message import sanitize_address

from .exceptions import QueueError
from .items import DEFAULT_QUEUE, NewItem
from .mime import plain_message_bytes
from .text import refuse_line_breaks, refuse_unkeepable

#: The `EmailMessage` attribute naming the item's queue (lane); "default" when unset.
QUEUE_ATTRIBUTE = "queue"
#: The attribute holding the not-before time, as django-anymail reads it: a
#: datetime (naive is taken in the current time zone), a date (midnight UTC), or
#: a Unix timestamp.
SEND_AT_ATTRIBUTE = "send_at"


def message_to_item(message: EmailMessage, *, max_message_size: int) -> NewItem:
    """The item Django's SMTP backend would send for `message`, or `QueueError(INVALID | TOO_LARGE)`.

    The bytes are exactly those `django.core.mail.backends.smtp.EmailBackend`
    writes after DATA (CRLF line endings); the envelope sender is `from_email`
    and the recipients `to + cc + bcc`, each as Django's `sanitize_address`
    makes it (IDN domains in A-label form).
    """
    recipients_raw = message.recipients()
    if not recipients_raw:
        raise QueueError("INVALID", "the message has no recipients")
    encoding = message.encoding or django_settings.DEFAULT_CHARSET
    for raw in (message.from_email, *recipients_raw):
        if isinstance(raw, str):
            _refuse_bad_text(raw, f"address {raw!r}")
    sender = _envelope_address(message.from_email, encoding, "the sender")
    recipients: list[str] = []
    for raw in recipients_raw:
        address = _envelope_address(raw, encoding, "a recipient")
        if not address:
            raise QueueError("INVALID", f"recipient {raw!r} is empty")
        if address not in recipients:
            recipients.append(address)
    for name, value in (message.extra_headers or {}).items():
        _refuse_bad_text(str(name), f"header name {name!r}")
        _refuse_bad_text(str(value), f"header {name!r}")
    _refuse_bad_text(str(message.subject), "the subject")
    if isinstance(message.body, str):
        refuse_unkeepable(message.body.replace("\x00", ""), "the body")
        if "\x00" in message.body:
            raise QueueError("INVALID", "the body holds a NUL character")
    try:
        written = plain_message_bytes(message)
        if written is not None:
            data, message_id = written
        else:
            mime = message.message()
            data = mime.as_bytes(linesep="\r\n")  # type: ignore[call-arg]  # Django's SafeMIME takes linesep
            if not data.endswith(b"\r\n"):
                data += b"\r\n"  # as smtplib's data() ends every message
            message_id = str(mime.get("Message-ID", "") or "")
    except (ValueError, UnicodeError) as exc:
        raise QueueError("INVALID", f"the message cannot be written: {exc}") from None
    if len(data) > max_message_size:
        raise QueueError("TOO_LARGE", f"the message is {len(data)} bytes; MAX_MESSAGE_SIZE is {max_message_size}")
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


def _refuse_bad_text(value: str, what: str) -> None:
    refuse_unkeepable(value, what)
    refuse_line_breaks(value, what)


#: A bare ASCII addr-spec of RFC 5322 atoms: `sanitize_address` returns it unchanged, so it is
#: taken as it is without running the email header parser (the costliest step of an enqueue).
_PLAIN_ADDRESS = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
                            r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*")


def _envelope_address(raw: Any, encoding: str, what: str) -> str:
    if raw is None or raw == "":
        return ""
    if isinstance(raw, str) and _PLAIN_ADDRESS.fullmatch(raw):
        return raw
    try:
        sanitized = sanitize_address(raw, encoding)
    except (ValueError, IndexError, UnicodeError) as exc:
        raise QueueError("INVALID", f"{what} {raw!r} is not a valid address: {exc}") from None
    # What smtplib.sendmail puts after MAIL FROM: / RCPT TO: for that string.
    address = email.utils.parseaddr(sanitized)[1] or sanitized
    _refuse_bad_text(address, what)
    if address and ("@" not in address or any(c in address for c in " <>")):
        raise QueueError("INVALID", f"{what} {raw!r} is not a valid address")
    return address


def _queue_of(message: EmailMessage) -> str:
    queue = getattr(message, QUEUE_ATTRIBUTE, None)
    if queue is None or queue == "":
        return DEFAULT_QUEUE
    if not isinstance(queue, str) or len(queue) > 100:
        raise QueueError("INVALID", "message.queue must be a string of at most 100 characters")
    _refuse_bad_text(queue, "the queue name")
    return queue


def _send_at_of(message: EmailMessage) -> datetime | None:
    send_at = getattr(message, SEND_AT_ATTRIBUTE, None)
    if send_at is None:
        return None
    if isinstance(send_at, datetime):
        if send_at.tzinfo is None:
            from django.utils import timezone

            send_at = timezone.make_aware(send_at, timezone.get_current_timezone())
        return send_at.astimezone(UTC)
    if isinstance(send_at, date):
        return datetime.combine(send_at, time(), tzinfo=UTC)
    if isinstance(send_at, int | float) and not isinstance(send_at, bool):
        return datetime.fromtimestamp(send_at, UTC)
    raise QueueError("INVALID", "message.send_at must be a datetime, a date or a Unix timestamp")

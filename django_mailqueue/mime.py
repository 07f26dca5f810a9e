"""A message's bytes as Django's SMTP backend sends them; plain-text ones written without the `email` package."""

from __future__ import annotations

import email.policy
import re
import time
from collections.abc import Sequence
from email.message import Message
from email.utils import formatdate, make_msgid

import django
from django.conf import settings as django_settings
from django.core.mail import EmailMessage, EmailMultiAlternatives
from django.core.mail.utils import DNS_NAME

#: Django's own SMTP line length limit (RFC 5322): a longer body line makes Django quote the body.
_BODY_LINE_LIMIT = 998
#: Where the compat32 policy of Django's generator starts folding a header line.
_HEADER_LINE_LIMIT = 76
_LINE_END = re.compile(r"\r\n|\r|\n")
#: Header text the `email` package writes unchanged: printable ASCII, single spaces, no space at
#: either end (runs of spaces and edge spaces may be rewritten when it re-flows a header).
_PLAIN_HEADER = re.compile(r"[\x21-\x7e]+(?: [\x21-\x7e]+)*")
#: `Header.encode` splits a value at these even when it fits; values holding them go the long way.
_HEADER_SPLIT = re.compile(r"[;,\t]\S|=\?")
#: Django 6.0 writes messages with the modern `email` API, and its SMTP backend with the SMTP policy.
MODERN_EMAIL = django.VERSION[:2] >= (6, 0)
#: Django's message() from 4.2 to 5.2: the one the fast path writes.
SUPPORTED = not MODERN_EMAIL


def django_message(message: EmailMessage) -> Message:
    """The `email` message Django's SMTP backend makes of `message` (its headers, its parts)."""
    if MODERN_EMAIL:
        return message.message(policy=email.policy.SMTP)
    return message.message()


def wire_bytes(written: Message) -> bytes:
    """`written` (from `django_message`) as Django's SMTP backend hands it to smtplib: CRLF line
    endings, ending in CRLF (smtplib adds one when missing)."""
    if MODERN_EMAIL:
        data = written.as_bytes()  # the SMTP policy's line ending is CRLF
    else:
        data = written.as_bytes(linesep="\r\n")  # type: ignore[call-arg]  # Django's SafeMIME takes linesep
    return data if data.endswith(b"\r\n") else data + b"\r\n"


def plain_message_bytes(message: EmailMessage) -> tuple[bytes, str] | None:
    """The bytes and Message-ID Django would write for `message` (CRLF line ends, ending in CRLF), or
    None when the message is not one this fast path writes exactly — Django's own code then does.

    Covered: an `EmailMessage` (or an `EmailMultiAlternatives` without alternatives, as `send_mail()`
    makes one; not other subclasses) with a plain-text body in UTF-8 whose lines
    fit in 998 bytes, no attachments and no extra headers, and whose header lines are printable
    ASCII that fits on one line. `tests/test_mime.py` compares the two byte for byte.
    """
    if not SUPPORTED or type(message) not in (EmailMessage, EmailMultiAlternatives):
        return None
    if getattr(message, "alternatives", None):  # send_mail() makes an EmailMultiAlternatives, mostly without
        return None
    if message.attachments or message.extra_headers or message.content_subtype != "plain":
        return None
    if (message.encoding or django_settings.DEFAULT_CHARSET) != "utf-8":
        return None
    body = message.body
    if not isinstance(body, str):
        return None
    encoded = body.encode("utf-8")
    # A line of `splitlines()` lies inside a run between two b"\n": when no run is longer than the limit,
    # no line is (the exact test, Django's, runs only when one is).
    if (
        len(encoded) > _BODY_LINE_LIMIT
        and max(map(len, encoded.split(b"\n"))) > _BODY_LINE_LIMIT
        and any(len(line.encode()) > _BODY_LINE_LIMIT for line in body.splitlines())
    ):
        return None
    subject = message.subject
    if not isinstance(subject, str):
        return None
    message_id = make_msgid(domain=DNS_NAME)  # as Django's message() does
    headers: list[tuple[str, str]] = [("Subject", subject), ("From", str(message.from_email))]
    for name, values in (("To", message.to), ("Cc", message.cc), ("Reply-To", message.reply_to)):
        if values:
            headers.append((name, _joined(values)))
    headers.append(("Date", _date_now(bool(django_settings.EMAIL_USE_LOCALTIME))))
    headers.append(("Message-ID", message_id))
    header_lines = []
    for name, value in headers:
        if (
            len(name) + 2 + len(value) > _HEADER_LINE_LIMIT
            or not _PLAIN_HEADER.fullmatch(value)
            or _HEADER_SPLIT.search(value)
        ):
            return None
        header_lines.append(f"{name}: {value}\r\n")
    transfer = "7bit" if len(encoded) == len(body) else "8bit"
    text = _LINE_END.sub("\r\n", body).encode("utf-8") if "\r" in body else encoded.replace(b"\n", b"\r\n")
    data = (
        "".join(
            [
                'Content-Type: text/plain; charset="utf-8"\r\nMIME-Version: 1.0\r\n',
                f"Content-Transfer-Encoding: {transfer}\r\n",
                *header_lines,
                "\r\n",
            ]
        ).encode("ascii")
        + text
    )
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    return data, message_id


#: The Date header last written, for each `localtime`: (the whole second and the local zone, its text).
_dates: dict[bool, tuple[object, str]] = {}


def _date_now(localtime: bool) -> str:
    """`formatdate(localtime=localtime)` as Django writes it — whole seconds — made once a second (and again
    when the local time zone changes, as `override_settings(TIME_ZONE=…)` changes it)."""
    second = int(time.time())
    key = (second, time.tzname, time.timezone, time.altzone) if localtime else second
    kept = _dates.get(localtime)
    if kept is None or kept[0] != key:
        kept = (key, formatdate(second, localtime=localtime))
        _dates[localtime] = kept
    return kept[1]


def _joined(values: Sequence[object]) -> str:
    return ", ".join(str(v) for v in values)

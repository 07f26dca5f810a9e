"""Delivery status notifications: RFC 3464 reports in RFC 6522 `multipart/report` messages."""

from __future__ import annotations

import email.utils
import quopri
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from email.parser import BytesHeaderParser
from typing import Literal

from ..core.items import NewItem, QueueItem, Recipient

DsnKind = Literal["failed", "delayed"]
_WIDTH = 76


@dataclass(frozen=True)
class DsnReport:
    """What a DSN says: about which item, which recipients, and how it went."""

    kind: DsnKind
    item: QueueItem
    recipients: Sequence[Recipient]
    reporting_mta: str
    last_attempt: datetime
    #: only for "delayed": when the queue gives up
    retry_until: datetime | None = None
    #: the original's header block, or None when the message was lost
    original_headers: bytes | None = None


def original_header_block(message: bytes) -> bytes:
    """The header section of a message (up to the first empty line), CRLF line endings."""
    end = message.find(b"\r\n\r\n")
    if end == -1:
        end = message.find(b"\n\n")
        head = message if end == -1 else message[:end]
        return head.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n") + b"\r\n"
    return message[: end + 2]


def build_dsn(report: DsnReport, *, now: datetime) -> NewItem:
    """The DSN as an item from the null sender to the original envelope sender."""
    host = report.reporting_mta
    boundary = f"=_mailqueue_{uuid.uuid4().hex}"
    message_id = f"<{uuid.uuid4().hex}.dsn@{host}>"
    original_id = report.item.message_id
    if report.kind == "failed":
        subject = "Undelivered Mail Returned to Sender"
    else:
        subject = "Delayed Mail (still being retried)"
    head = [
        f"From: Mail Delivery System <MAILER-DAEMON@{host}>",
        f"To: {_header_address(report.item.sender)}",
        f"Subject: {subject}",
        f"Date: {email.utils.format_datetime(now)}",
        f"Message-ID: {message_id}",
        "Auto-Submitted: auto-replied",
    ]
    if original_id:
        head += [f"In-Reply-To: {original_id}", f"References: {original_id}"]
    head += [
        "MIME-Version: 1.0",
        f'Content-Type: multipart/report; report-type=delivery-status; boundary="{boundary}"',
    ]
    parts = [
        _part(
            [
                "Content-Type: text/plain; charset=utf-8",
                "Content-Transfer-Encoding: quoted-printable",
                "Content-Description: Notification",
            ],
            _quoted_printable(_human_text(report)),
        ),
        _part(
            ["Content-Type: message/delivery-status", "Content-Description: Delivery report"], _status_fields(report)
        ),
    ]
    if report.original_headers is not None:
        parts.append(
            _part(
                ["Content-Type: text/rfc822-headers", "Content-Description: Undelivered Message Headers"],
                report.original_headers,
            )
        )
    lines = [_fold(h) for h in head]
    body = (
        b"".join(b"--" + boundary.encode() + b"\r\n" + part for part in parts) + b"--" + boundary.encode() + b"--\r\n"
    )
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + b"This is a MIME-encapsulated message.\r\n\r\n" + body
    return NewItem(
        sender="",
        recipients=(report.item.sender,),
        message=data,
        queue=report.item.queue,
        message_id=message_id,
        subject=subject,
    )


def _part(headers: list[str], content: bytes) -> bytes:
    return ("\r\n".join(headers) + "\r\n\r\n").encode("ascii") + content + b"\r\n"


def _human_text(report: DsnReport) -> str:
    item = report.item
    host = report.reporting_mta
    if report.kind == "failed":
        lines = [
            f"This is the mail system at host {host}.",
            "",
            "I'm sorry to have to inform you that your message could not",
            "be delivered to one or more recipients.",
            "",
        ]
    else:
        until = email.utils.format_datetime(report.retry_until) if report.retry_until else "later"
        lines = [
            f"This is the mail system at host {host}.",
            "",
            "####################################################################",
            "# THIS IS A WARNING ONLY.  YOU DO NOT NEED TO RESEND YOUR MESSAGE. #",
            "####################################################################",
            "",
            "Your message could not be delivered yet to the recipients below.",
            f"The mail system will keep trying until {until}.",
            "",
        ]
    if report.original_headers is None:
        lines += ["The message itself could not be read from the queue, so it is", "not returned with this report.", ""]
    for recipient in report.recipients:
        reply = recipient.reply
        lines.append(f"<{recipient.address}>: {reply if reply else 'no reply'}")
        if recipient.remote_mta:
            lines.append(f"    (host {recipient.remote_mta})")
    lines += ["", f"Queue item: {item.id}"]
    if item.subject:
        lines.append(f"Subject: {item.subject}")
    return "\n".join(lines) + "\n"


def _quoted_printable(text: str) -> bytes:
    encoded = quopri.encodestring(text.encode("utf-8"))
    return encoded.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def _status_fields(report: DsnReport) -> bytes:
    item = report.item
    per_message = [
        f"Reporting-MTA: dns; {report.reporting_mta}",
        f"X-Mailqueue-Queue-ID: {item.id}",
        f"Arrival-Date: {email.utils.format_datetime(item.created)}",
    ]
    blocks = ["\r\n".join(_fold(f) for f in per_message)]
    for recipient in report.recipients:
        reply = recipient.reply
        status = reply.status if reply and reply.status else ("5.0.0" if report.kind == "failed" else "4.0.0")
        fields = [
            f"Final-Recipient: {_address_type(recipient.address)}",
            f"Action: {report.kind}",
            f"Status: {status}",
        ]
        if recipient.remote_mta:
            fields.append(f"Remote-MTA: dns; {_ascii(recipient.remote_mta)}")
        if reply is not None:
            diagnostic = str(reply) if reply.code is not None else reply.text
            kind = "smtp" if reply.code is not None else "X-Mailqueue"
            fields.append(f"Diagnostic-Code: {kind}; {_ascii(diagnostic)}")
        fields.append(f"Last-Attempt-Date: {email.utils.format_datetime(report.last_attempt)}")
        if report.kind == "delayed" and report.retry_until is not None:
            fields.append(f"Will-Retry-Until: {email.utils.format_datetime(report.retry_until)}")
        blocks.append("\r\n".join(_fold(f) for f in fields))
    return ("\r\n\r\n".join(blocks) + "\r\n").encode("ascii")


def _address_type(address: str) -> str:
    """`rfc822; addr`, or RFC 6533's `utf-8; addr` with non-ASCII as `\\x{HEX}`."""
    try:
        address.encode("ascii")
    except UnicodeEncodeError:
        return f"utf-8; {_ascii(address)}"
    return f"rfc822; {address}"


def _ascii(text: str) -> str:
    """Non-ASCII characters and backslashes written as RFC 6533 `\\x{HEX}` escapes."""
    return "".join(c if 32 <= ord(c) < 127 and c != "\\" else f"\\x{{{ord(c):X}}}" for c in text)


def _header_address(address: str) -> str:
    return f"<{_ascii(address)}>"


def _fold(field: str) -> str:
    """Fold a header field at spaces so lines stay near 76 characters (never split a word)."""
    if len(field) <= _WIDTH:
        return field
    words = field.split(" ")
    lines: list[str] = []
    current = words[0]
    for word in words[1:]:
        if len(current) + 1 + len(word) > _WIDTH and current.strip():
            lines.append(current)
            current = " " + word
        else:
            current += " " + word
    lines.append(current)
    return "\r\n".join(lines)


def parse_headers(message: bytes) -> dict[str, str]:
    """The header fields of a message, for tests and previews."""
    parsed = BytesHeaderParser().parsebytes(message)
    return {k: str(v) for k, v in parsed.items()}

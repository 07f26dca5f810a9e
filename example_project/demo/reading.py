"""Reading a received message for display: its headers, attachments, text, and what a DSN reports."""

from __future__ import annotations

import email
import email.policy
import functools
import re
from dataclasses import dataclass, field
from email.message import EmailMessage, Message
from email.parser import BytesHeaderParser


@dataclass(frozen=True)
class DsnRecipient:
    """One per-recipient block of a `message/delivery-status` part (RFC 3464)."""

    final_recipient: str
    action: str
    status: str
    diagnostic: str


@dataclass(frozen=True)
class DsnSummary:
    """What a DSN says, and which message it is about."""

    reporting_mta: str
    original_message_id: str
    recipients: list[DsnRecipient] = field(default_factory=list)


@dataclass(frozen=True)
class MessageSummary:
    """The parts of a received message the mailbox shows."""

    subject: str
    from_header: str
    to_header: str
    message_id: str
    content_type: str
    text: str
    attachments: list[str]
    dsn: DsnSummary | None


def header_fields(data: bytes) -> dict[str, str]:
    """Subject, From, To and Message-ID of a message, decoded ("" when absent or unreadable)."""
    headers = BytesHeaderParser(policy=email.policy.default).parsebytes(data)
    found = {}
    for name in ("Subject", "From", "To", "Message-ID"):
        try:
            found[name] = " ".join(str(headers.get(name, "") or "").split())
        except (ValueError, TypeError, IndexError):
            found[name] = ""
    return found


def dkim_verdict(data: bytes) -> str:
    """What a receiving MX concludes about the message's DKIM signature, checked with dkimpy.

    The demo's domains are not in any DNS, so the public keys are those the demo would publish: the
    records of its own `MAILQUEUE["DKIM"]` keys. "pass d=… s=…", "fail d=… s=…: why" or "none".
    """
    head = data.split(b"\r\n\r\n", 1)[0]
    found = re.search(rb"(?im)^DKIM-Signature:([^\r\n]*(?:\r\n[ \t][^\r\n]*)*)", head)
    if found is None:
        return "none"
    tags = {
        k.strip(): v.strip()
        for k, _, v in (t.partition("=") for t in re.sub(rb"\s", b"", found[1]).decode().split(";"))
    }
    who = f"d={tags.get('d', '?')} s={tags.get('s', '?')}"
    try:
        import dkim
    except ImportError:
        return f"unchecked {who}: dkimpy is not installed"
    records = _published_records()

    def dns_txt(name: bytes, timeout: int = 5) -> bytes:
        return records.get(name.decode("ascii", "replace").rstrip(".").lower(), "").encode()

    verifier = dkim.DKIM(data)
    try:
        ok = verifier.verify(dnsfunc=dns_txt)
    except dkim.DKIMException as exc:
        return f"fail {who}: {exc}"[:200]
    return f"pass {who}" if ok else f"fail {who}: the signature does not verify"


@functools.cache
def _published_records() -> dict[str, str]:
    """`<selector>._domainkey.<domain>` -> the TXT record of each DKIM key the demo signs with."""
    from django_mailqueue.conf import get_settings
    from django_mailqueue.dkim import load_key

    return {entry.record_name: load_key(entry).record for entry in get_settings().dkim.values()}


def summarise(data: bytes) -> MessageSummary:
    """Parse `data` (a whole message) into what the mailbox shows."""
    message = email.message_from_bytes(data, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    headers = header_fields(data)
    text = ""
    attachments: list[str] = []
    for part in message.walk():
        if part.is_multipart():
            continue
        filename = part.get_filename()
        if filename or part.get_content_disposition() == "attachment":
            attachments.append(filename or "(unnamed)")
        elif part.get_content_type() == "text/plain" and not text:
            try:
                text = str(part.get_content())
            except (LookupError, ValueError):
                text = part.get_payload(decode=True).decode("utf-8", "replace")
    return MessageSummary(
        subject=headers["Subject"],
        from_header=headers["From"],
        to_header=headers["To"],
        message_id=headers["Message-ID"],
        content_type=message.get_content_type(),
        text=text,
        attachments=attachments,
        dsn=read_dsn(message),
    )


def read_dsn(message: Message) -> DsnSummary | None:
    """The report of a `multipart/report; report-type=delivery-status` message, else None."""
    if message.get_content_type() != "multipart/report" or message.get_param("report-type") != "delivery-status":
        return None
    reporting_mta = ""
    original_id = ""
    recipients: list[DsnRecipient] = []
    for part in message.walk():
        kind = part.get_content_type()
        if kind == "message/delivery-status":
            blocks = part.get_payload()
            if not isinstance(blocks, list) or not blocks:
                continue
            reporting_mta = str(blocks[0].get("Reporting-MTA", "")).partition(";")[2].strip()
            for block in blocks[1:]:
                recipients.append(
                    DsnRecipient(
                        final_recipient=str(block.get("Final-Recipient", "")).partition(";")[2].strip(),
                        action=str(block.get("Action", "")).strip(),
                        status=str(block.get("Status", "")).strip(),
                        diagnostic=" ".join(str(block.get("Diagnostic-Code", "")).split()),
                    )
                )
        elif kind == "text/rfc822-headers":
            raw = part.get_payload(decode=True) or b""
            original = BytesHeaderParser(policy=email.policy.default).parsebytes(raw)
            original_id = " ".join(str(original.get("Message-ID", "") or "").split())
    return DsnSummary(reporting_mta=reporting_mta, original_message_id=original_id, recipients=recipients)

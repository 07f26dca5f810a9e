"""The local SMTP sink: an aiosmtpd server on loopback that plays the recipients' MX and files what it accepts.

Answers RCPT TO as `policy.MxPolicy` says (accept, greylist, reject), and
stores every accepted message once per accepted recipient in that
recipient's mailbox (`ReceivedMessage`), with its DKIM verdict, so the
mailbox page can show it.
"""

from __future__ import annotations

import logging

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from asgiref.sync import sync_to_async

from .models import ReceivedMessage, SmtpEvent
from .policy import MxPolicy
from .reading import dkim_verdict, header_fields

logger = logging.getLogger("demo.sink")

#: the name the sink gives in its greeting
SINK_HOSTNAME = "mx.example.net"


class DemoMx:
    """The aiosmtpd handler: RCPT replies from the policy, DATA filed into mailboxes."""

    def __init__(self, policy: MxPolicy | None = None) -> None:
        self.policy = policy or MxPolicy()

    async def handle_RCPT(  # noqa: N802 - aiosmtpd's hook name
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        sender = envelope_sender(envelope)
        reply = self.policy.rcpt_reply(sender, address)
        if reply.startswith("2"):
            envelope.rcpt_tos.append(address)
        logger.info("RCPT <%s> from <%s>: %s", address, sender, reply)
        await sync_to_async(SmtpEvent.objects.create)(envelope_from=sender, recipient=address, reply=reply)
        return reply

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        data = envelope.original_content or b""
        sender = envelope_sender(envelope)
        await sync_to_async(file_message)(sender, list(envelope.rcpt_tos), data)
        logger.info(
            "accepted %d bytes from <%s> for %s", len(data), sender, ", ".join(f"<{r}>" for r in envelope.rcpt_tos)
        )
        return "250 2.0.0 OK: filed in the demo mailboxes"


def envelope_sender(envelope: Envelope) -> str:
    """MAIL FROM's address; "" for the null sender (aiosmtpd keeps it as "<>")."""
    sender = envelope.mail_from or ""
    return "" if sender == "<>" else sender


def file_message(envelope_from: str, recipients: list[str], data: bytes) -> list[ReceivedMessage]:
    """Store `data` in each recipient's mailbox."""
    headers = header_fields(data)
    dkim = dkim_verdict(data)
    return ReceivedMessage.objects.bulk_create(
        ReceivedMessage(
            mailbox=recipient.lower(),
            envelope_from=envelope_from,
            envelope_to=", ".join(recipients),
            from_header=headers["From"],
            to_header=headers["To"],
            subject=headers["Subject"],
            message_id=headers["Message-ID"][:998],
            data=data,
            dkim=dkim,
        )
        for recipient in recipients
    )


def sink_controller(port: int, policy: MxPolicy | None = None) -> Controller:
    """An aiosmtpd controller for the sink on 127.0.0.1:`port` (not started)."""
    return Controller(
        DemoMx(policy),
        hostname="127.0.0.1",
        port=port,
        server_hostname=SINK_HOSTNAME,
        enable_SMTPUTF8=True,
        ready_timeout=10,
    )

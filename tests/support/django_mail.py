"""What Django's own SMTP backend sends for a message, written as each Django version's backend writes it."""

from __future__ import annotations

import email.policy

import django
from django.core.mail import EmailMessage


def smtp_backend_bytes(message: EmailMessage) -> bytes:
    """The bytes `django.core.mail.backends.smtp.EmailBackend` hands to smtplib for `message`, with the
    final CRLF smtplib adds when it is missing: 6.0 writes with the `email` package's SMTP policy, 4.2
    to 5.2 with `as_bytes(linesep="\\r\\n")`."""
    if django.VERSION[:2] >= (6, 0):
        data = message.message(policy=email.policy.SMTP).as_bytes()
    else:
        data = message.message().as_bytes(linesep="\r\n")  # type: ignore[call-arg]
    return data if data.endswith(b"\r\n") else data + b"\r\n"

"""Delivery: one attempt of one item — routes, MX resolution, SMTP sessions — as one outcome per recipient."""

from __future__ import annotations

from .deliverer import AttemptResult, Deliverer
from .resolver import DnsResolver, MailHost, MxResolver, Resolution
from .smtp import SmtpTransport
from .transport import Envelope, SessionReport, Target, TlsPolicy, Transport
from .wire import to_wire

__all__ = [
    "AttemptResult",
    "Deliverer",
    "DnsResolver",
    "Envelope",
    "MailHost",
    "MxResolver",
    "Resolution",
    "SessionReport",
    "SmtpTransport",
    "Target",
    "TlsPolicy",
    "Transport",
    "to_wire",
]

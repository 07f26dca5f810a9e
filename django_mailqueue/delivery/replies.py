"""Reply classification: an SMTP reply, or the queue's own decision, as a recipient state and a `Reply`.

Every rule that turns a reply code into `delivered` / `failed` / `pending`,
and every enhanced status code (RFC 3463) the queue makes up itself, lives
here and nowhere else.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ..core.items import RecipientState, Reply
from ..core.text import clean_reply_text

# --- the queue's own enhanced status codes -------------------------------------------

#: The internal error class: a bug, not the network (retried).
INTERNAL = "4.3.0"
#: A route that cannot work as configured (an unresolvable relay HOST, ...).
MISCONFIGURED = "4.3.5"
#: No answer: connection refused, connect/greeting/command timeout.
NO_ANSWER = "4.4.1"
#: The connection was dropped.
CONNECTION_DROPPED = "4.4.2"
#: DNS temporary failure (SERVFAIL, timeout) — never a bounce.
DNS_TEMPORARY = "4.4.3"
#: No MX host of the domain has an address (deferred, not bounced).
UNROUTABLE = "4.4.4"
#: Not tried: the destination is suspended (traffic shaping: it said "slow down", or is dead).
SUSPENDED = "4.4.5"
#: The server said something that is not an SMTP reply.
MALFORMED = "4.5.0"
#: AUTH could not be done on a relay (no mechanism offered, credentials refused).
AUTH_FAILED = "4.7.0"
#: TLS is required but the server does not offer STARTTLS.
TLS_NOT_OFFERED = "4.7.4"
#: TLS handshake (or certificate verification) failed.
TLS_FAILED = "4.7.5"
#: The recipient domain does not exist (NXDOMAIN, or no MX/A/AAAA).
NO_SUCH_DOMAIN = "5.1.2"
#: A recipient address SMTP cannot carry.
BAD_RECIPIENT = "5.1.3"
#: A sender address SMTP cannot carry.
BAD_SENDER = "5.1.7"
#: The domain publishes a null MX (RFC 7505): it accepts no mail.
NULL_MX = "5.1.10"
#: The message is larger than the server's SIZE.
TOO_BIG = "5.3.4"
#: The message needs SMTPUTF8 and the server lacks it.
NEEDS_SMTPUTF8 = "5.6.7"

_ENHANCED = re.compile(r"^([245])\.(\d{1,3})\.(\d{1,3})(?=\s|$)")
#: A byte that was not UTF-8, as aiosmtplib decodes it (`surrogateescape`).
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_CODE_CLASS_STATUS = {2: "2.0.0", 4: "4.0.0", 5: "5.0.0"}


def own_reply(status: str, text: str, *, mask: Callable[[str], str] | None = None) -> Reply:
    """A reply the queue makes itself (no server answered): `code` is None."""
    if mask is not None:
        text = mask(text)
    return Reply(code=None, status=status, text=clean_reply_text(text))


def server_reply(code: int, text: str, *, mask: Callable[[str], str] | None = None) -> Reply:
    """A server's reply: the enhanced status read from its text, else derived from the code.

    The status prefix is taken off every line of a multi-line reply, the lines
    joined with spaces, the text cleaned (no NUL, no lone surrogate, bounded).
    A status whose class differs from the code's is ignored (RFC 3463 §2).
    """
    if "\n" not in text:  # one line (most replies): no list, no join
        line = text.strip()
        match = _ENHANCED.match(line)
        if match is not None and match.group(1) == str(code)[:1]:
            status, line = match.group(0), line[match.end() :].strip()
        else:
            status = _CODE_CLASS_STATUS.get(code // 100, "4.0.0")
        return Reply(code=code, status=status, text=clean_reply_text(mask(line) if mask is not None else line))
    status = ""
    lines = []
    for line in text.split("\n"):
        line = line.strip()
        match = _ENHANCED.match(line)
        if match and match.group(1) == str(code)[:1]:
            status = status or match.group(0)
            line = line[match.end() :].strip()
        lines.append(line)
    if not status:
        status = _CODE_CLASS_STATUS.get(code // 100, "4.0.0")
    joined = " ".join(part for part in lines if part)
    if mask is not None:
        joined = mask(joined)
    return Reply(code=code, status=status, text=clean_reply_text(joined))


def state_of(reply: Reply) -> RecipientState:
    """The recipient state a reply decides: 2.x.x delivered, 5.x.x failed, anything else pending."""
    if reply.status.startswith("2"):
        return RecipientState.DELIVERED
    if reply.status.startswith("5"):
        return RecipientState.FAILED
    return RecipientState.PENDING


def is_well_formed(code: int, text: str) -> bool:
    """Whether `code`/`text` form a reply the queue may act on.

    The code must be 2xx-5xx, and the text valid UTF-8: aiosmtplib decodes
    with `surrogateescape`, so bytes that are not UTF-8 show up as lone
    surrogates. Anything else is a protocol error, and a protocol error is
    never taken as a permanent answer.
    """
    if not 200 <= code <= 599:
        return False
    return text.isascii() or _ESCAPED_BYTE.search(text) is None


def too_many_recipients(code: int, accepted: int) -> bool:
    """Whether a RCPT reply means the transaction holds all the recipients the server takes (RFC 5321
    §4.5.3.1.10): a 452 after `accepted` > 0 recipients of the same transaction were accepted. The client
    then sends the rest in another transaction at once; a 452 with none accepted only defers."""
    return code == 452 and accepted > 0


def temporary(reply: Reply) -> Reply:
    """The same reply with a temporary status: for a 5xx that only skips a host.

    A 5xx greeting, a refused EHLO/HELO or refused relay credentials say
    nothing about a recipient; like Postfix, the queue defers rather than
    bounces (the code stays the server's, the status becomes 4.x.x).
    """
    if reply.status.startswith("5"):
        return Reply(code=reply.code, status="4" + reply.status[1:], text=reply.text)
    return reply


__all__ = [
    "AUTH_FAILED",
    "BAD_RECIPIENT",
    "BAD_SENDER",
    "CONNECTION_DROPPED",
    "DNS_TEMPORARY",
    "INTERNAL",
    "MALFORMED",
    "MISCONFIGURED",
    "NEEDS_SMTPUTF8",
    "NO_ANSWER",
    "NO_SUCH_DOMAIN",
    "NULL_MX",
    "SUSPENDED",
    "TLS_FAILED",
    "TLS_NOT_OFFERED",
    "TOO_BIG",
    "UNROUTABLE",
    "is_well_formed",
    "own_reply",
    "server_reply",
    "state_of",
    "temporary",
    "too_many_recipients",
]

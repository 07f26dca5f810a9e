"""The message as DATA carries it: CRLF line endings only, dot-stuffed once (no SMTP smuggling).

aiosmtplib's own `data()` normalises line endings and dot-stuffs too, but
the queue does not call it (it needs its own timeouts for the DATA command,
each block and the final "."): the bytes `to_wire` returns go to the socket
as they are, so they are stuffed exactly once, here.
"""

from __future__ import annotations

import re

#: The end-of-data line that follows the message.
END_OF_DATA = b".\r\n"

# CRLF first, so "\r\n" stays one line break; then any lone CR or LF.
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
# After normalisation every line starts at the beginning or right after "\n".
_LEADING_DOT = re.compile(rb"(?m)^\.")


def normalize_line_endings(message: bytes) -> bytes:
    """Every line break (CRLF, a bare CR, a bare LF) as CRLF, and a CRLF at the end.

    So `\\n.\\n`, `\\r.\\r` and `\\n.\\r\\n` each become `\\r\\n.\\r\\n`, which
    dot-stuffing then makes a line holding "..": the receiver reads one
    message with a "." line in it, never the end of the message.
    """
    crlf = message.count(b"\r\n")
    if crlf == message.count(b"\n") == message.count(b"\r") and (not message or message.endswith(b"\r\n")):
        return message  # already CRLF only (what the backend stores): no copy
    text = _LINE_BREAK.sub(b"\r\n", message)
    if text and not text.endswith(b"\r\n"):
        text += b"\r\n"
    return text


def dot_stuff(normalized: bytes) -> bytes:
    """Double the dot that starts a line (RFC 5321 §4.5.2); the input must be CRLF-normalised."""
    if not normalized.startswith(b".") and b"\n." not in normalized:
        return normalized  # nothing to stuff: no copy
    return _LEADING_DOT.sub(b"..", normalized)


def to_wire(message: bytes) -> bytes:
    """The bytes that follow the server's 354: normalised, dot-stuffed, ending with `.\\r\\n`."""
    return dot_stuff(normalize_line_endings(message)) + END_OF_DATA


def header_section(normalized: bytes) -> bytes:
    """The header fields of a CRLF-normalised message (everything before the first empty line)."""
    if normalized.startswith(b"\r\n"):
        return b""
    end = normalized.find(b"\r\n\r\n")
    return normalized if end < 0 else normalized[: end + 2]


def has_8bit(message: bytes) -> bool:
    """Whether the message holds a byte above 127 (so BODY=8BITMIME applies)."""
    return not message.isascii()


def headers_need_smtputf8(normalized: bytes) -> bool:
    """Whether the header section holds non-ASCII bytes (RFC 6532 headers need SMTPUTF8)."""
    return has_8bit(header_section(normalized))


__all__ = [
    "END_OF_DATA",
    "dot_stuff",
    "has_8bit",
    "header_section",
    "headers_need_smtputf8",
    "normalize_line_endings",
    "to_wire",
]

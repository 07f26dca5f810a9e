"""Rules for text the queue keeps: no NUL, no lone surrogate, no CR or LF in an envelope."""

from __future__ import annotations

import re

from .exceptions import QueueError

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

#: The longest reply text kept for a recipient, in characters.
MAX_REPLY_TEXT = 1000


def refuse_unkeepable(value: str, what: str) -> str:
    """Return `value`, or raise `INVALID` if it holds a NUL or a lone surrogate.

    PostgreSQL cannot keep either, Redis would change a lone surrogate, so no
    store is ever given one.
    """
    if "\x00" in value:
        raise QueueError("INVALID", f"{what} holds a NUL character")
    if _LONE_SURROGATE.search(value):
        raise QueueError("INVALID", f"{what} holds a lone surrogate")
    return value


def refuse_line_breaks(value: str, what: str) -> str:
    """Return `value`, or raise `INVALID` if it holds CR or LF (header or SMTP injection)."""
    if "\r" in value or "\n" in value:
        raise QueueError("INVALID", f"{what} holds a CR or LF character")
    return value


def clean_reply_text(raw: str | bytes, limit: int = MAX_REPLY_TEXT) -> str:
    """Make a server's reply text safe to keep and show.

    Bytes are decoded as UTF-8 with replacement; NUL, lone surrogates and
    other control characters become U+FFFD or a space; line breaks become
    spaces; the result is at most `limit` characters.
    """
    if isinstance(raw, str) and raw.isascii() and raw.isprintable():  # most replies: nothing to clean
        text = raw.strip()
        return text if len(text) <= limit else text[: limit - 1] + "\u2026"
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    text = _LONE_SURROGATE.sub("\ufffd", text)
    text = text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ").replace("\t", " ")
    text = _CONTROL.sub("\ufffd", text)
    text = " ".join(text.split(" ")).strip()
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    return text

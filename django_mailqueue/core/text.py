"""Rules for text the queue keeps: no NUL, no lone surrogate, no line break in an envelope or a header."""

from __future__ import annotations

import re

from .errors import Code, QueueError

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: Every character `str.splitlines()` ends a line at. Python's `email` package (compat32, which Django
#: uses) folds a header value at each of them, so each one goes out as a CRLF.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK = re.compile(f"[{LINE_BREAKS}]")
#: What text bound for a header may not hold: a line break, a NUL, a lone surrogate — one search.
_NOT_IN_A_HEADER = re.compile(f"[\x00{LINE_BREAKS}\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_C0_OR_DEL = re.compile("[\x00-\x1f\x7f]")

#: The longest reply text kept for a recipient, in characters.
MAX_REPLY_TEXT = 1000


def refuse_unkeepable(value: str, what: str) -> str:
    """Return `value`, or raise `INVALID` if it holds a NUL or a lone surrogate.

    PostgreSQL cannot keep either, Redis would change a lone surrogate, so no
    store is ever given one.
    """
    if "\x00" in value:
        raise QueueError(Code.INVALID, f"{what} holds a NUL character")
    if not value.isascii() and _LONE_SURROGATE.search(value):  # isascii() reads a flag: no scan
        raise QueueError(Code.INVALID, f"{what} holds a lone surrogate")
    return value


def refuse_line_breaks(value: str, what: str) -> str:
    """Return `value`, or raise `INVALID` if it holds any of `LINE_BREAKS` (header or SMTP injection)."""
    return _refuse(_LINE_BREAK, value, what, "a line break")


def fits_a_header(value: str) -> bool:
    """Whether `value` may go into a header: no line break, no NUL, no lone surrogate (one regex search)."""
    return _NOT_IN_A_HEADER.search(value) is None


def refuse_in_header(value: str, what: str) -> str:
    """Return `value`, or raise `INVALID` if it holds a line break, a NUL or a lone surrogate."""
    if _NOT_IN_A_HEADER.search(value):
        refuse_unkeepable(value, what)
        refuse_line_breaks(value, what)
    return value


def refuse_controls(value: str, what: str) -> str:
    """Return `value`, or raise `INVALID` if it holds a C0 control or DEL (no SMTP command may carry one)."""
    return _refuse(_C0_OR_DEL, value, what, "a control character")


def _refuse(pattern: re.Pattern[str], value: str, what: str, kind: str) -> str:
    found = pattern.search(value)
    if found:
        raise QueueError(Code.INVALID, f"{what} holds {kind} (U+{ord(found.group()):04X})")
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

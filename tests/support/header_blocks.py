"""A strict receiver's check of a message's header blocks: every line a header or a continuation, no line breaks.

`header_block_problems(data)` reads a message as it came after DATA (CRLF line
endings) and says what is wrong with its header block and with that of every
MIME part, attached messages included: a line that is neither `Name: value`
(RFC 5322 field name: printable ASCII but the colon) nor a continuation (it
starts with a space or a tab); a bare CR or LF; a header value that, unfolded
and decoded (RFC 2047 words, RFC 2231 parameters), holds a line break — any
character `str.splitlines()` ends a line at. An empty list: nothing wrong.
"""

from __future__ import annotations

import email
import email.policy
import email.utils
import re
from email.message import Message

from django_mailqueue.core.text import LINE_BREAKS

_FIELD = re.compile(rb"[\x21-\x39\x3b-\x7e]+:")
_BARE = re.compile(rb"\r(?!\n)|(?<!\r)\n")
_FOLD = re.compile(r"\r?\n(?=[ \t])")
#: Attached messages and multiparts nest; a message deeper than this is a problem of its own.
MAX_DEPTH = 20


def header_block_problems(data: bytes) -> list[str]:
    """What is wrong with the header blocks of `data`; [] when every one is sound."""
    problems: list[str] = []
    if _BARE.search(data):
        problems.append("a bare CR or LF in the message")
    _entity(data, "the message", problems, 0)
    return problems


def _entity(data: bytes, where: str, problems: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        problems.append(f"{where}: nested deeper than {MAX_DEPTH}")
        return
    if data.startswith(b"\r\n"):  # a part may have no header at all
        head, body = b"", data[2:]
    else:
        head, _, body = data.partition(b"\r\n\r\n")
    for number, line in enumerate(head.split(b"\r\n") if head else [], start=1):
        if _FIELD.match(line) or (number > 1 and line[:1] in (b" ", b"\t")):
            continue
        problems.append(f"{where}: header line {number} is neither a header nor a continuation: {line[:100]!r}")
    headers = email.message_from_bytes(head + b"\r\n\r\n", policy=email.policy.default)
    for name, value in headers.items():
        _no_line_break(f"{where}: header {name}", _decoded(headers, name, value), problems)
    for name in ("Content-Type", "Content-Disposition"):
        for param, value in headers.get_params(header=name, failobj=[]):
            _no_line_break(f"{where}: {name} parameter {param}", email.utils.collapse_rfc2231_value(value), problems)
    content_type = headers.get_content_type()
    if content_type.startswith("multipart/"):
        boundary = headers.get_boundary()
        if not boundary:
            problems.append(f"{where}: {content_type} without a boundary")
            return
        for index, part in enumerate(_parts(body, boundary.encode("utf-8", "surrogateescape")), start=1):
            _entity(part, f"{where}, part {index}", problems, depth + 1)
    elif content_type == "message/rfc822":
        _entity(body, f"{where}, the attached message", problems, depth + 1)


def _decoded(headers: Message, name: str, value: object) -> str:
    try:
        return str(value)
    except Exception:  # a header the modern policy cannot parse: its raw text, unfolded
        return _FOLD.sub("", str(dict(headers.raw_items()).get(name, "")))


def _no_line_break(what: str, text: str, problems: list[str]) -> None:
    found = [c for c in text if c in LINE_BREAKS]
    if found:
        problems.append(f"{what} holds a line break (U+{ord(found[0]):04X}): {text[:100]!r}")


def _parts(body: bytes, boundary: bytes) -> list[bytes]:
    """The parts between the boundary lines of a multipart body (RFC 2046 §5.1.1), preamble and epilogue left out."""
    delimiter = re.compile(rb"(?:^|\r\n)--" + re.escape(boundary) + rb"(--)?[ \t]*(?:\r\n|$)")
    parts: list[bytes] = []
    start: int | None = None
    for match in delimiter.finditer(body):
        if start is not None:
            parts.append(body[start : match.start()])
        if match.group(1):
            return parts
        start = match.end()
    if start is not None:
        parts.append(body[start:])
    return parts

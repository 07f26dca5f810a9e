"""The one module that uses dkimpy's internals (its header parser, folding and canonicalisation functions) to
write the very signature `dkim.sign` writes, with the private-key operation done by `cryptography` (OpenSSL).

Byte for byte dkimpy's (tests/delivery/test_dkim_signer.py, edge cases included), at a small part of its cost:
dkimpy alone takes ~8 ms a message for RSA-2048. Exact shortcuts spare its Python loops and regular
expressions where they cannot change anything: the header section is read by one regular expression as its
parser reads it (`parse`; its parser reads what that one would read otherwise); a body or header value with
no tab, no two spaces in a row and no space before a line end is its own relaxed form (but for a body's empty
lines at the end, which dkimpy's own functions strip); the header fields are picked and hashed as
`dkim.hash_headers` does, from an index; the DKIM-Signature field as hashed needs no folding where its
folding would break lines only at spaces (unfolded, it is the text again), so only the finished field is
folded. A signature is made in two steps: `prepare` (canonicalise and hash: Python, holding the
GIL) and `PendingSignature.private_key_operation` (OpenSSL; cryptography 50 releases the GIL while it signs),
so a worker can run the second off its event loop. `missing()` says when an installed dkimpy lacks what this
module needs; `DkimSigner` then signs through `dkim.sign` itself.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: What of the `dkim` module this one calls besides its public `sign` (all in dkimpy 1.1.x).
_NEEDED = ("rfc822_parse", "fold", "RE_BTAG")
#: ... and of `dkim.canonicalization`
_NEEDED_CANONICALIZATION = ("Relaxed", "strip_trailing_lines", "correct_empty_body")
_NAME = b"DKIM-Signature"
_CANONICALIZATION = b"relaxed/relaxed"
_WSP_RUN = re.compile(b"[\t ]+")
#: b= as dkim.sign writes it before signing (60 characters, so filling it moves no other tag)
_B_PLACEHOLDER = b"b=" + b"0" * 60
#: one header field, as `dkim.rfc822_parse` reads CRLF lines: its name (the shortest run of printable
#: characters before a colon) and its value (continuation lines included, without the CRLF that ends it)
_FIELD = re.compile(rb"([\x21-\x7e]+?):(.*(?:\r\n[ \t].*)*)\r\n")
#: printable ASCII words, one space between them
_SINGLE_SPACED = re.compile(rb"[!-~]+(?: [!-~]+)*")
#: `dkim.fold`'s line lengths: the first line's, after the field's name, and the others'
_FIRST_LINE = 72 - len(_NAME)
_LINE = 71


def missing() -> str | None:
    """Why this module cannot sign with the installed dkimpy (what it lacks), or None when it can."""
    try:
        import dkim
        from dkim import canonicalization
    except ImportError as exc:
        return f"dkimpy cannot be imported ({exc.name})"
    lacking = [name for name in _NEEDED if not hasattr(dkim, name)]
    lacking += [f"canonicalization.{name}" for name in _NEEDED_CANONICALIZATION if not hasattr(canonicalization, name)]
    return f"dkimpy lacks {', '.join(lacking)}" if lacking else None


@dataclass(frozen=True)
class PendingSignature:
    """A signature with everything but its private-key operation done: the digest to sign and the field's tags."""

    algorithm: bytes
    #: SHA-256 of the canonicalised header fields (RFC 6376 §3.7)
    digest: bytes
    #: the field's tags in order, unfolded, ending with an empty `b=`
    unsigned: bytes
    private_key: Any = field(repr=False)
    #: what signs, as a log line may name it (`DkimEntry.describe()`)
    signer: str = ""

    def private_key_operation(self) -> bytes:
        """RSASSA-PKCS1-v1_5 over the SHA-256 digest (RFC 6376 §3.3.1), or Ed25519 over the digest itself
        (RFC 8463); OpenSSL's work, during which cryptography releases the GIL: it may run in a thread."""
        if self.algorithm == b"rsa-sha256":
            return bytes(self.private_key.sign(self.digest, *_rsa_sha256()))
        return bytes(self.private_key.sign(self.digest))

    def field(self, signature: bytes) -> bytes:
        """The DKIM-Signature field (from its name to its CRLF) with `signature` in `b=`."""
        import dkim

        value = dkim.fold(self.unsigned + base64.b64encode(signature) + b"\r\n", namelen=len(_NAME), linesep=b"\r\n")
        return _NAME + b": " + bytes(value)


@functools.cache
def _rsa_sha256() -> tuple[Any, Any]:
    """RSASSA-PKCS1-v1_5 over a SHA-256 digest: cryptography's padding and algorithm arguments, made once."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, utils

    return padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())


class ParsedMessage(NamedTuple):
    """A CRLF message's header fields as `dkim.rfc822_parse` reads them (`parse`), and where its body starts."""

    #: the fields' names, lowercase (dkimpy's parser takes a name as the shortest run of printable characters
    #: before a colon: none has white space, so lowercase is the relaxed form)
    names: list[bytes]
    #: the fields' values, from after the colon to the CRLF that ends the field (continuation lines included)
    values: list[bytes]
    body_start: int


def parse(message: bytes) -> ParsedMessage | None:
    """A message's header fields as dkimpy's parser reads them, in one regular expression's pass; None where that
    parser would read it any other way (a bare LF, an mbox `From ` line, a line it refuses, a header section
    without its final CRLF): `prepare` then runs that parser itself."""
    if message.count(b"\n") != message.count(b"\r\n"):
        return None
    if message.startswith(b"\r\n"):  # no header
        head, body_start = b"", 2
    else:
        end = message.find(b"\r\n\r\n")
        head, body_start = (message, len(message)) if end < 0 else (message[: end + 2], end + 4)
    fields: list[tuple[bytes, bytes]] = _FIELD.findall(head)
    if not fields:
        return ParsedMessage([], [], body_start) if not head else None
    names, values = zip(*fields, strict=True)
    all_names = b"\n".join(names)
    # the matches cover the section (so each starts a line, and every line is a field's or a continuation)
    if len(all_names) + 2 * len(fields) + sum(map(len, values)) + 1 != len(head):
        return None
    return ParsedMessage(all_names.lower().split(b"\n"), list(values), body_start)


def prepare(
    message: bytes,
    *,
    selector: bytes,
    domain: bytes,
    algorithm: bytes,
    include_headers: Sequence[bytes],
    private_key: Any,
    now: int,
    signer: str = "",
    parsed: ParsedMessage | None = None,
) -> PendingSignature:
    """Canonicalise and hash a message (CRLF-normalised by the worker: `wire.normalize_line_endings`), relaxed/relaxed,
    as `dkim.sign(..., canonicalize=(b"relaxed", b"relaxed"), linesep=b"\\r\\n")` does at time `now`;
    `private_key` is cryptography's RSA or Ed25519 key; `parsed`: `parse(message)`, when the caller has it.
    Raises what dkimpy's parser raises for a bad message."""
    if parsed is None:
        parsed = parse(message)
    include = tuple(include_headers)
    if parsed is not None:
        body_hash = _body_hash(message, parsed.body_start)
    else:
        headers, body = _parse(message)
        body_hash = base64.b64encode(hashlib.sha256(_relaxed_body(body)).digest())
    # the tags as dkim.sign writes them, b= last, with its value left out: all but t= and bh= the same for every
    # message with this key and these signed fields (`_tags`)
    before_t, before_bh, as_hashed = _tags(algorithm, domain, selector, include)
    unsigned = before_t + str(now).encode("ascii") + before_bh + body_hash + b"; b="
    # dkim.hash_headers: the fields `include` names, each from the bottom up, then this field without its CRLF
    if parsed is not None:
        names, values = parsed.names, _relaxed_values(parsed.values)
        picked = [names[i] + b":" + values[i] for i in _select_once(tuple(names), include)]
    else:
        canonical = [_relaxed_header(name, value) for name, value in headers]
        names, values = [name for name, _ in canonical], [value[:-2] for _, value in canonical]
        picked = [names[i] + b":" + values[i] for i in _select(names, include)]
    picked.append(b"dkim-signature:" + (unsigned if as_hashed else _refolded(unsigned)))
    digest = hashlib.sha256(b"\r\n".join(picked)).digest()
    return PendingSignature(algorithm, digest, unsigned, private_key, signer)


@functools.lru_cache(maxsize=256)
def _tags(algorithm: bytes, domain: bytes, selector: bytes, include: tuple[bytes, ...]) -> tuple[bytes, bytes, bool]:
    """The field's tags before t='s value, those between it and bh='s value, and whether the field as hashed is
    the unsigned text itself (`_signed_field_value`) for every t= and bh= value: worked out once a key and list
    of signed fields. It is: t= is digits and bh= 44 base64 characters, so neither holds a space, a semicolon or
    a run longer than `_FIRST_LINE` ("t=" + 11 digits + ";", "bh=" + 44 + ";"), and neither can start or end
    a match of `dkim.RE_BTAG` (it needs a semicolon or white space before "b", and "=" right after it, white
    space aside); so they change none of the conditions `_signed_field_value` checks."""
    before_t = b"; ".join(
        (b"v=1", b"a=" + algorithm, b"c=" + _CANONICALIZATION, b"d=" + domain, b"i=@" + domain, b"q=dns/txt")
    )
    before_t += b"; s=" + selector + b"; t="
    before_bh = b"; h=" + b" : ".join(include) + b"; bh="
    sample = before_t + b"9" * 11 + before_bh + b"A" * 43 + b"=; b="
    return before_t, before_bh, _unfolds_to_itself(sample)


@functools.lru_cache(maxsize=256)
def _select_once(names: tuple[bytes, ...], include: tuple[bytes, ...]) -> tuple[int, ...]:
    """`_select`, remembered: a worker's messages come with a few lists of header fields."""
    return tuple(_select(list(names), include))


def _signed_field_value(unsigned: bytes) -> bytes:
    """The relaxed form of the field as dkim.sign hashes it: folded with b= as it writes it before signing (60
    characters), b='s value taken out again (dkim.RE_BTAG), unfolded, white space compressed, stripped.

    Where `dkim.fold` breaks lines only at spaces (every space-free run but the last shorter than its first
    line, the last no longer than a line) and the text has single spaces only, unfolding gives back that very text:
    it is the value with b= empty."""
    return unsigned if _unfolds_to_itself(unsigned) else _refolded(unsigned)


def _refolded(unsigned: bytes) -> bytes:
    """`_signed_field_value` the long way: dkimpy's folding, b= taken out, the relaxed form."""
    import dkim

    folded = dkim.fold(unsigned + _B_PLACEHOLDER[2:], namelen=len(_NAME), linesep=b"\r\n")
    name, value = _relaxed_header(_NAME, b" " + dkim.RE_BTAG.sub(b"\\1", folded))
    return value.rstrip()


def _unfolds_to_itself(unsigned: bytes) -> bool:
    """Whether `_signed_field_value(unsigned)` is `unsigned` by the rule its docstring gives."""
    import dkim

    runs = unsigned.split(b" ")
    return bool(
        _SINGLE_SPACED.fullmatch(unsigned)
        and max(map(len, runs[:-1]), default=0) < _FIRST_LINE
        and len(runs[-1]) + len(_B_PLACEHOLDER) - 2 <= _LINE
        and dkim.RE_BTAG.sub(b"\\1", unsigned) == unsigned
    )


def _parse(message: bytes) -> tuple[list[list[bytes]], bytes]:
    """`dkim.rfc822_parse(message)`, for what `parse` leaves to it."""
    import dkim

    headers, body = dkim.rfc822_parse(message)
    return headers, bytes(body)


def _select(names: list[bytes], include: Sequence[bytes]) -> list[int]:
    """`dkim.select_headers` over lowercase field names: for each name in `include`, the index of the last field
    of that name not taken yet, if any."""
    index = dict(zip(names, range(len(names)), strict=True))
    if len(index) == len(names):  # each name once: taken where `include` first names it
        return [index[name] for name in dict.fromkeys(include) if name in index]
    positions: dict[bytes, list[int]] = {}
    for i, name in enumerate(names):
        positions.setdefault(name, []).append(i)
    return [positions[name].pop() for name in include if positions.get(name)]


def _relaxed_body(body: bytes) -> bytes:
    """RFC 6376 §3.4.4, as dkimpy's `Relaxed.canonicalize_body`."""
    from dkim import canonicalization as c

    if b"\t" in body or b"  " in body or b" \r\n" in body:
        return bytes(c.Relaxed.canonicalize_body(body))
    # no run of WSP to compress and no WSP before a line end: only the empty lines at the end change
    return bytes(c.correct_empty_body(c.strip_trailing_lines(body)))


def _body_hash(message: bytes, start: int) -> bytes:
    """bh=: the base64 SHA-256 of the relaxed form of the body that starts at `start` (CRLF lines only)."""
    if message.find(b"\t", start) >= 0 or message.find(b"  ", start) >= 0 or message.find(b" \r\n", start) >= 0:
        body: bytes | memoryview = _relaxed_body(message[start:])
    elif message.endswith(b"\r\n", start) and not message.endswith(b"\r\n\r\n", start) and len(message) - start > 2:
        body = memoryview(message)[start:]  # one line end at its end, not an empty line: its own relaxed form
    else:  # only the empty lines at the end change
        from dkim import canonicalization as c

        body = bytes(c.correct_empty_body(c.strip_trailing_lines(message[start:])))
    return base64.b64encode(hashlib.sha256(body).digest())


def _relaxed_values(values: list[bytes]) -> list[bytes]:
    """Field values (each without its final CRLF, no bare LF) relaxed as `Relaxed.canonicalize_headers` does
    (without the CRLF it adds): unfolded, runs of white space made one space, stripped; all in one pass where
    no value ends with a CR (the LF between them would make it a line end to unfold)."""
    unfolded = b"\n".join(values).replace(b"\r\n", b"")
    if unfolded.count(b"\n") != len(values) - 1:
        return [_relaxed_header(b"", value + b"\r\n")[1][:-2] for value in values]
    if b"\t" in unfolded or b"  " in unfolded:
        unfolded = _WSP_RUN.sub(b" ", unfolded)
    return [value.strip() for value in unfolded.split(b"\n")]


def _relaxed_header(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """RFC 6376 §3.4.2, as dkimpy's `Relaxed.canonicalize_headers` for one field (whose value holds CRLFs only)."""
    unfolded = value.replace(b"\r\n", b"")
    if b"\n" in unfolded:  # a bare LF (not from the worker): dkimpy's unfolding
        unfolded = re.sub(b"\r?\n", b"", value)
    if b"\t" in unfolded or b"  " in unfolded:
        unfolded = _WSP_RUN.sub(b" ", unfolded)
    return name.lower().rstrip(), unfolded.strip() + b"\r\n"

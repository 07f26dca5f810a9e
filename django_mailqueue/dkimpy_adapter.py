"""The one module that uses dkimpy's internals (its header parser, folding and canonicalisation functions) to
write the very signature `dkim.sign` writes, with the private-key operation done by `cryptography` (OpenSSL).

Byte for byte dkimpy's (tests/delivery/test_dkim_signer.py, edge cases included), at a small part of its cost:
dkimpy alone takes ~8 ms a message for RSA-2048. Exact shortcuts spare its regular expressions where they
cannot change anything: a body or header value with no tab, no two spaces in a row and no space before a line
end is its own relaxed form (but for a body's empty lines at the end, which dkimpy's own functions strip);
the parser runs over the header section only; the header fields are picked and hashed as `dkim.hash_headers`
does, from an index. A signature is made in two steps: `prepare` (canonicalise and hash: Python, holding the
GIL) and `PendingSignature.private_key_operation` (OpenSSL; cryptography 50 releases the GIL while it signs),
so a worker can run the second off its event loop. `missing()` says when an installed dkimpy lacks what this
module needs; `DkimSigner` then signs through `dkim.sign` itself.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: What of the `dkim` module this one calls besides its public `sign` (all in dkimpy 1.1.x).
_NEEDED = ("rfc822_parse", "fold", "RE_BTAG")
#: ... and of `dkim.canonicalization`
_NEEDED_CANONICALIZATION = ("Relaxed", "strip_trailing_lines", "correct_empty_body")
_NAME = b"DKIM-Signature"
_CANONICALIZATION = b"relaxed/relaxed"
_WSP_RUN = re.compile(b"[\t ]+")
#: b= as `prepare` writes it before signing (as dkimpy: 60 characters, so filling it moves no other tag)
_B_PLACEHOLDER = b"b=" + b"0" * 60
#: what comes right before a b= tag (dkim.RE_BTAG's `[;\s]`)
_BEFORE_B = frozenset(bytes([c]) for c in b"; \t\r\n\x0b\x0c")


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
    #: the tags in order, `b=` last (a placeholder)
    tags: tuple[tuple[bytes, bytes], ...]
    private_key: Any = field(repr=False)
    #: what signs, as a log line may name it (`DkimEntry.describe()`)
    signer: str = ""

    def private_key_operation(self) -> bytes:
        """RSASSA-PKCS1-v1_5 over the SHA-256 digest (RFC 6376 §3.3.1), or Ed25519 over the digest itself
        (RFC 8463); OpenSSL's work, during which cryptography releases the GIL: it may run in a thread."""
        if self.algorithm == b"rsa-sha256":
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.asymmetric import padding, utils

            return bytes(self.private_key.sign(self.digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())))
        return bytes(self.private_key.sign(self.digest))

    def field(self, signature: bytes) -> bytes:
        """The DKIM-Signature field (from its name to its CRLF) with `signature` in `b=`."""
        import dkim

        tags = (*self.tags[:-1], (b"b", base64.b64encode(signature)))
        value = dkim.fold(b"; ".join(b"=".join(t) for t in tags) + b"\r\n", namelen=len(_NAME), linesep=b"\r\n")
        return _NAME + b": " + bytes(value)


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
) -> PendingSignature:
    """Canonicalise and hash a message (CRLF-normalised by the worker: `wire.normalize_line_endings`), relaxed/relaxed,
    as `dkim.sign(..., canonicalize=(b"relaxed", b"relaxed"), linesep=b"\\r\\n")` does at time `now`;
    `private_key` is cryptography's RSA or Ed25519 key. Raises what dkimpy's parser raises for a bad message."""
    import dkim

    headers, body = _parse(message)
    body_hash = base64.b64encode(hashlib.sha256(_relaxed_body(body)).digest())
    include = tuple(include_headers)
    tags = (
        (b"v", b"1"),
        (b"a", algorithm),
        (b"c", _CANONICALIZATION),
        (b"d", domain),
        (b"i", b"@" + domain),
        (b"q", b"dns/txt"),
        (b"s", selector),
        (b"t", str(now).encode("ascii")),
        (b"h", b" : ".join(include)),
        (b"bh", body_hash),
        (b"b", _B_PLACEHOLDER[2:]),
    )
    folded = dkim.fold(b"; ".join(b"=".join(t) for t in tags), namelen=len(_NAME), linesep=b"\r\n")
    # what dkim.RE_BTAG leaves of it: b= emptied (the placeholder, whole at the end: fold breaks only at spaces)
    if folded.endswith(_B_PLACEHOLDER) and folded[-len(_B_PLACEHOLDER) - 1 :][:1] in _BEFORE_B:
        unsigned = folded[: -len(_B_PLACEHOLDER) + 2]
    else:
        unsigned = dkim.RE_BTAG.sub(b"\\1", folded)
    # dkim.hash_headers: the fields `include` names, each from the bottom up, then this field without its CRLF
    signed = _select([_relaxed_header(name, value) for name, value in headers], include)
    name, value = _relaxed_header(_NAME, b" " + unsigned)
    signed.append((name, value.rstrip()))
    digest = hashlib.sha256(b"".join(name + b":" + value for name, value in signed)).digest()
    return PendingSignature(algorithm, digest, tags, private_key, signer)


def _parse(message: bytes) -> tuple[list[list[bytes]], bytes]:
    """`dkim.rfc822_parse(message)`; for a message without a bare LF (the worker's), its parser run over the
    header section only (its line split over such a body gives the body back unchanged)."""
    import dkim

    if message.count(b"\n") != message.count(b"\r\n"):  # a bare LF: dkimpy's parser, over it all
        headers, body = dkim.rfc822_parse(message)
        return headers, bytes(body)
    end = 0 if message.startswith(b"\r\n") else message.find(b"\r\n\r\n")
    if end < 0:  # no empty line: all header, no body
        return dkim.rfc822_parse(message)[0], b""
    head_end = end + 2 if end else 0
    headers = dkim.rfc822_parse(message[:head_end] + b"\r\n")[0] if head_end else []
    return headers, message[head_end + 2 :]


def _select(headers: list[tuple[bytes, bytes]], include: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
    """`dkim.select_headers` over canonical (lowercase-named) fields: for each name in `include`, the last field
    of that name not taken yet, if any."""
    positions: dict[bytes, list[int]] = {}
    for i, (name, _) in enumerate(headers):
        positions.setdefault(name, []).append(i)
    return [headers[positions[name].pop()] for name in include if positions.get(name)]


def _relaxed_body(body: bytes) -> bytes:
    """RFC 6376 §3.4.4, as dkimpy's `Relaxed.canonicalize_body`."""
    from dkim import canonicalization as c

    if b"\t" in body or b"  " in body or b" \r\n" in body:
        return bytes(c.Relaxed.canonicalize_body(body))
    # no run of WSP to compress and no WSP before a line end: only the empty lines at the end change
    return bytes(c.correct_empty_body(c.strip_trailing_lines(body)))


def _relaxed_header(name: bytes, value: bytes) -> tuple[bytes, bytes]:
    """RFC 6376 §3.4.2, as dkimpy's `Relaxed.canonicalize_headers` for one field (whose value holds CRLFs only)."""
    unfolded = value.replace(b"\r\n", b"")
    if b"\n" in unfolded:  # a bare LF (not from the worker): dkimpy's unfolding
        unfolded = re.sub(b"\r?\n", b"", value)
    if b"\t" in unfolded or b"  " in unfolded:
        unfolded = _WSP_RUN.sub(b" ", unfolded)
    return name.lower().rstrip(), unfolded.strip() + b"\r\n"

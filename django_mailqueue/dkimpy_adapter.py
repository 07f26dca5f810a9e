"""The one module that uses dkimpy's internals: its parser, canonicalisation, header hashing and folding, around a
private-key operation done by `cryptography` (OpenSSL) instead of dkimpy's pure-Python RSA.

The signature is `dkim.sign`'s, byte for byte (tests/test_dkim_adapter.py), at a small part of its cost: RSA-2048
through dkimpy is ~8 ms a message, through OpenSSL well under one (docs/performance.md, "DKIM"). `missing()` says
when an installed dkimpy lacks what this module needs; `DkimSigner` then signs through `dkim.sign` itself.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any

#: What of the `dkim` module this one calls besides its public `sign` (all in dkimpy 1.1.x).
_NEEDED = ("rfc822_parse", "fold", "hash_headers", "RE_BTAG")
_NAME = b"DKIM-Signature"
_CANONICALIZATION = b"relaxed/relaxed"


def missing() -> str | None:
    """Why this module cannot sign with the installed dkimpy (what it lacks), or None when it can."""
    try:
        import dkim
        from dkim.canonicalization import CanonicalizationPolicy
    except ImportError as exc:
        return f"dkimpy cannot be imported ({exc.name})"
    lacking = [name for name in _NEEDED if not hasattr(dkim, name)]
    if not hasattr(CanonicalizationPolicy, "from_c_value"):
        lacking.append("canonicalization.CanonicalizationPolicy.from_c_value")
    return f"dkimpy lacks {', '.join(lacking)}" if lacking else None


def sign(
    message: bytes,
    *,
    selector: bytes,
    domain: bytes,
    algorithm: bytes,
    include_headers: Sequence[bytes],
    private_key: Any,
    now: int,
) -> bytes:
    """The DKIM-Signature field (from its name to its CRLF) of a CRLF message, relaxed/relaxed, as
    `dkim.sign(..., canonicalize=(b"relaxed", b"relaxed"), linesep=b"\\r\\n")` writes it at time `now`;
    `private_key` is cryptography's RSA or Ed25519 key. Raises what dkimpy's parser raises for a bad message."""
    import dkim
    from dkim.canonicalization import CanonicalizationPolicy

    policy = CanonicalizationPolicy.from_c_value(_CANONICALIZATION)
    headers, body = dkim.rfc822_parse(message)
    body_hash = base64.b64encode(hashlib.sha256(policy.canonicalize_body(body)).digest())
    include = tuple(include_headers)
    fields = [
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
        (b"b", b"0" * 60),  # as dkimpy does: b= folds onto lines of its own, so filling it moves no other tag
    ]
    unsigned = dkim.fold(b"; ".join(b"=".join(f) for f in fields), namelen=len(_NAME), linesep=b"\r\n")
    unsigned = dkim.RE_BTAG.sub(b"\\1", unsigned)
    hasher = hashlib.sha256()
    signature_field = (_NAME, b" " + unsigned)
    dkim.hash_headers(hasher, policy, policy.canonicalize_headers(headers), include, signature_field, dict(fields))
    fields[-1] = (b"b", base64.b64encode(_private_key_operation(private_key, algorithm, hasher.digest())))
    value = dkim.fold(b"; ".join(b"=".join(f) for f in fields) + b"\r\n", namelen=len(_NAME), linesep=b"\r\n")
    return _NAME + b": " + bytes(value)


def _private_key_operation(private_key: Any, algorithm: bytes, digest: bytes) -> bytes:
    """RSASSA-PKCS1-v1_5 over the SHA-256 `digest` (RFC 6376 §3.3.1), or Ed25519 over the digest itself (RFC 8463)."""
    if algorithm == b"rsa-sha256":
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding, utils

        return bytes(private_key.sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())))
    return bytes(private_key.sign(digest))

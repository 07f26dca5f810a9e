"""DKIM (RFC 6376; Ed25519, RFC 8463): the `MAILQUEUE["DKIM"]` entries, their keys, and the signature a worker adds.

The signature is dkimpy's (`django-mailqueue[dkim]`), its private-key operation
`cryptography`'s (`dkimpy_adapter.py`); keys are read and checked with
`cryptography`, once per worker. No key material ever goes into an error, a log
line or a repr.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import dkimpy_adapter
from .core.errors import QueueSettingsError
from .dkimpy_adapter import PendingSignature
from .validation import InvalidValueError

logger = logging.getLogger("django_mailqueue.dkim")

ALGORITHMS = ("rsa-sha256", "ed25519-sha256")

#: The header fields signed when present (RFC 6376 §5.4.1's list, narrowed to what a queue's mail carries).
DEFAULT_HEADERS = (
    "from",
    "sender",
    "reply-to",
    "to",
    "cc",
    "subject",
    "date",
    "message-id",
    "in-reply-to",
    "references",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "content-id",
    "content-description",
    "content-disposition",
    "list-id",
    "list-unsubscribe",
    "list-unsubscribe-post",
)
#: Fields receivers add or remove, never signed (dkimpy's `DKIM.SHOULD_NOT`, from RFC 6376 §5.4).
_NOT_SIGNED = {"dkim-signature", "return-path", "received", "bcc", "resent-bcc", "comments", "keywords"}
_ENTRY_KEYS = {"SELECTOR", "PRIVATE_KEY", "ALGORITHM", "HEADERS", "DOMAIN"}
_SELECTOR = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9_-]{0,62}))*$")
_FIELD_NAME = re.compile(r"^[!-9;-~]+$")
#: a header line's name (group 1), at the start of the block or after a CRLF that is not a continuation
_FIELD = re.compile(rb"^([!-9;-~]+)[ \t]*:", re.MULTILINE)
#: SHA-256 of each PEM text whose RSA key cryptography has validated in this process (~50 ms for 2048 bits): a
#: worker's command runs the system checks, which load every key, and then loads them again to sign
_CHECKED_RSA_KEYS: set[bytes] = set()
#: From field values whose domain a signer remembers (then it starts over)
_FROM_CACHE_SIZE = 1024


class DkimKeyError(QueueSettingsError):
    """A DKIM key cannot be used; the message names the domain, the selector and the key's source, never the key."""

    def __init__(self, message: str) -> None:
        super().__init__(message, check_id="mailqueue.E023")


@dataclass(frozen=True)
class DkimEntry:
    """One `MAILQUEUE["DKIM"]` entry: what signs mail whose From domain is `from_domain`."""

    #: the From header's domain it is for (lowercase A-label), or "*"
    from_domain: str
    #: the signing domain, `d=`
    domain: str
    selector: str
    #: a PEM file's path or the PEM text; never shown (`repr=False`)
    private_key: str = field(repr=False)
    algorithm: str = "rsa-sha256"
    #: the header fields to sign when present; None: `DEFAULT_HEADERS`
    headers: tuple[str, ...] | None = None

    @property
    def record_name(self) -> str:
        """Where the public key is published: `<selector>._domainkey.<domain>`."""
        return f"{self.selector}._domainkey.{self.domain}"

    @property
    def source(self) -> str:
        """The key's source as an error may name it: the file's path, or "the PEM text"."""
        return "the PEM text" if _is_pem_text(self.private_key) else f"the file {self.private_key}"

    def describe(self) -> str:
        return f"MAILQUEUE['DKIM'][{self.from_domain!r}] (selector {self.selector!r}, {self.source})"


def _is_pem_text(value: str) -> bool:
    return "-----BEGIN" in value


# --- the setting --------------------------------------------------------------------


def parse_dkim(value: Any) -> Mapping[str, DkimEntry]:
    """Validate `MAILQUEUE["DKIM"]` (without reading any key); raise `InvalidValueError` naming the bad part."""
    from .delivery.addresses import domain_to_ascii  # here: conf imports this module, and delivery imports conf

    if not isinstance(value, Mapping):
        raise InvalidValueError("must be a dict: From domain (or '*') -> {SELECTOR, PRIVATE_KEY, ...}")
    entries: dict[str, DkimEntry] = {}
    for name, options in value.items():
        where = f"[{name!r}]"
        if not isinstance(name, str) or not name:
            raise InvalidValueError(f"{where}: the keys are From domains or '*'")
        from_domain = "*" if name == "*" else domain_to_ascii(name)
        if from_domain is None:
            raise InvalidValueError(f"{where}: {name!r} is not a domain")
        if not isinstance(options, Mapping):
            raise InvalidValueError(f"{where} must be a dict with SELECTOR and PRIVATE_KEY")
        unknown = set(options) - _ENTRY_KEYS
        if unknown:
            raise InvalidValueError(
                f"{where} has unknown keys {sorted(map(str, unknown))}; it takes {sorted(_ENTRY_KEYS)}"
            )
        selector = options.get("SELECTOR")
        if not isinstance(selector, str) or not _SELECTOR.match(selector):
            raise InvalidValueError(f"{where}['SELECTOR'] must be a DNS label (letters, digits, '-', '_'), as 'mq1'")
        key = options.get("PRIVATE_KEY")
        if not isinstance(key, str | Path) or not str(key).strip():
            raise InvalidValueError(f"{where}['PRIVATE_KEY'] must be a PEM file's path or the PEM text")
        algorithm = options.get("ALGORITHM", "rsa-sha256")
        if algorithm not in ALGORITHMS:
            raise InvalidValueError(f"{where}['ALGORITHM'] must be one of {list(ALGORITHMS)}, not {algorithm!r}")
        signing_domain = options.get("DOMAIN", None if name == "*" else from_domain)
        if signing_domain is None:
            raise InvalidValueError("['*'] needs DOMAIN: the domain that signs mail of every other From domain")
        ascii_domain = domain_to_ascii(signing_domain) if isinstance(signing_domain, str) else None
        if ascii_domain is None:
            raise InvalidValueError(f"{where}['DOMAIN'] must be a domain")
        headers = options.get("HEADERS")
        if headers is not None:
            if isinstance(headers, str) or not isinstance(headers, list | tuple) or not headers:
                raise InvalidValueError(f"{where}['HEADERS'] must be a non-empty list of header field names")
            for header in headers:
                if not isinstance(header, str) or not _FIELD_NAME.match(header):
                    raise InvalidValueError(f"{where}['HEADERS']: {header!r} is not a header field name")
            lowered = [h.lower() for h in headers]
            refused = sorted(set(lowered) & _NOT_SIGNED)
            if refused:
                raise InvalidValueError(f"{where}['HEADERS'] must not name {refused}: receivers add or remove them")
            headers = tuple(dict.fromkeys(["from", *lowered]))
        entries[from_domain] = DkimEntry(from_domain, ascii_domain, selector, str(key), algorithm, headers)
    return entries


# --- keys ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SigningKey:
    """An entry with its key read and checked: cryptography's key, the form dkimpy signs with, and the DNS
    record to publish."""

    entry: DkimEntry
    #: RSA: PKCS#1 PEM; Ed25519: the base64 seed (RFC 8463's form, as dkimpy takes it)
    dkimpy_key: bytes = field(repr=False)
    #: the TXT record's text: `v=DKIM1; k=rsa; p=...`
    record: str
    #: cryptography's `RSAPrivateKey` or `Ed25519PrivateKey`
    private_key: Any = field(default=None, repr=False)


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise DkimKeyError("DKIM signing needs dkimpy and cryptography: install django-mailqueue[dkim]") from None
    return serialization


def require_dkimpy() -> None:
    """Raise `DkimKeyError` unless dkimpy (and PyNaCl, for Ed25519) can be imported."""
    try:
        import dkim  # noqa: F401
        import nacl.signing  # noqa: F401
    except ImportError:
        raise DkimKeyError("DKIM signing needs dkimpy and PyNaCl: install django-mailqueue[dkim]") from None


def load_key(entry: DkimEntry) -> SigningKey:
    """Read and check `entry`'s private key; `DkimKeyError` (naming the entry, never the key) if it cannot sign."""
    require_dkimpy()
    serialization = _crypto()
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

    if _is_pem_text(entry.private_key):
        pem = entry.private_key.encode("utf-8", "replace")
    else:
        try:
            pem = Path(entry.private_key).read_bytes()
        except OSError as exc:
            raise DkimKeyError(
                f"{entry.describe()}: the key cannot be read: {exc.strerror or type(exc).__name__}"
            ) from None
    digest = hashlib.sha256(pem).digest()
    try:
        key = serialization.load_pem_private_key(
            pem, password=None, unsafe_skip_rsa_key_validation=digest in _CHECKED_RSA_KEYS
        )
    except Exception:  # cryptography's errors may quote the input: none is passed on
        key = None
    if key is None:
        raise DkimKeyError(f"{entry.describe()}: not an unencrypted PEM private key") from None
    if entry.algorithm == "rsa-sha256":
        if not isinstance(key, rsa.RSAPrivateKey):
            raise DkimKeyError(f"{entry.describe()}: ALGORITHM is rsa-sha256 but the key is not an RSA key")
        if key.key_size < 1024:
            raise DkimKeyError(f"{entry.describe()}: an RSA key of {key.key_size} bits; RFC 8301 needs 1024 or more")
        dkimpy_key = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
        )
        public = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        record = f"v=DKIM1; k=rsa; p={base64.b64encode(public).decode('ascii')}"
        _CHECKED_RSA_KEYS.add(digest)
    else:
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise DkimKeyError(f"{entry.describe()}: ALGORITHM is ed25519-sha256 but the key is not an Ed25519 key")
        raw = serialization.Encoding.Raw
        seed = key.private_bytes(raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
        dkimpy_key = base64.b64encode(seed)
        public = key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)
        record = f"v=DKIM1; k=ed25519; p={base64.b64encode(public).decode('ascii')}"
    return SigningKey(entry, dkimpy_key, record, key)


def txt_record_strings(record: str, width: int = 255) -> list[str]:
    """A TXT record's text cut into the strings of at most 255 characters a zone file and DNS carry."""
    return [record[i : i + width] for i in range(0, len(record), width)] or [""]


def zone_line(key: SigningKey) -> str:
    """The record as a zone-file line: `<selector>._domainkey.<domain>. IN TXT ( "..." "..." )`."""
    strings = " ".join(f'"{s}"' for s in txt_record_strings(key.record))
    return f"{key.entry.record_name}. IN TXT ( {strings} )"


# --- signing -------------------------------------------------------------------------


def from_domain(normalized: bytes) -> str | None:
    """The domain of the (first) From address of a CRLF-normalised message, lowercase A-label; None if none."""
    from .delivery.wire import header_section

    value = _field_value(header_section(normalized), b"from")
    return None if value is None else _address_domain(value)


def _address_domain(value: bytes) -> str | None:
    """The domain of the first address in a From field's value, lowercase A-label; None if none."""
    from .delivery.addresses import domain_to_ascii

    text = re.sub(r"\r\n[ \t]", " ", value.decode("utf-8", "surrogateescape"))
    for _name, address in email.utils.getaddresses([text]):
        if "@" in address:
            return domain_to_ascii(address.rpartition("@")[2].strip())
    return None


def _field_value(headers: bytes, name: bytes) -> bytes | None:
    for match in _FIELD.finditer(headers):
        if match.group(1).lower() == name:
            start = match.end()
            end = headers.find(b"\r\n", start)
            while end >= 0 and headers[end + 2 : end + 3] in (b" ", b"\t"):
                end = headers.find(b"\r\n", end + 2)
            return headers[start : end if end >= 0 else len(headers)]
    return None


def _present_fields(headers: bytes) -> list[bytes]:
    return [match.group(1).lower() for match in _FIELD.finditer(headers)]


class DkimSigner:
    """Signs messages with the key of their From domain (else the `"*"` entry's), keys loaded once.

    `sign` never raises: a message it cannot sign (no From, no key for its
    domain, a dkimpy error) goes as it is, and a failure is logged. The private-key
    operation is cryptography's (`dkimpy_adapter`) unless the installed dkimpy lacks
    what that needs, or `fast=False`: then dkimpy signs alone (~8 ms a message with RSA-2048).
    """

    def __init__(self, keys: Mapping[str, SigningKey], *, fast: bool = True) -> None:
        import dkim

        self._sign = dkim.sign
        self.keys = dict(keys)
        lacking = dkimpy_adapter.missing() if fast else "fast=False"
        if fast and lacking is not None:
            logger.warning("DKIM: %s: dkimpy signs alone, its RSA in pure Python (~8 ms a message)", lacking)
        #: the private-key operation through cryptography (dkimpy_adapter)
        self.fast = lacking is None
        self._from_domains: dict[bytes, str | None] = {}
        #: each key's `_constants`, by the key's id (with the key: an id is only unique while its object lives)
        self._per_key: dict[int, tuple[SigningKey, tuple[frozenset[bytes], bytes, bytes, bytes, str]]] = {}

    @classmethod
    def from_settings(cls, entries: Mapping[str, DkimEntry]) -> DkimSigner | None:
        """A signer with every entry's key loaded, or None when there are none; `DkimKeyError` for a bad key."""
        if not entries:
            return None
        return cls({name: load_key(entry) for name, entry in entries.items()})

    def _domain_of(self, from_value: bytes) -> str | None:
        """`_address_domain`, remembered: a worker's mail comes from a few From fields, and parsing one with
        `email.utils` costs more than the rest of the look-up."""
        try:
            return self._from_domains[from_value]
        except KeyError:
            pass
        if len(self._from_domains) >= _FROM_CACHE_SIZE:
            self._from_domains.clear()
        domain = self._from_domains[from_value] = _address_domain(from_value)
        return domain

    def _constants(self, key: SigningKey) -> tuple[frozenset[bytes], bytes, bytes, bytes, str]:
        """What a key's every signature shares, worked out at its first: the header field names it signs when
        present (lowercase), its selector, domain and algorithm as the field writes them, and its `describe()`."""
        known = self._per_key.get(id(key))
        if known is not None and known[0] is key:
            return known[1]
        entry = key.entry
        wanted = frozenset(name.encode("ascii") for name in entry.headers or DEFAULT_HEADERS)
        selector, domain, algorithm = (
            value.encode("ascii") for value in (entry.selector, entry.domain, entry.algorithm)
        )
        constants = (wanted, selector, domain, algorithm, entry.describe())
        self._per_key[id(key)] = (key, constants)
        return constants

    def key_for(self, domain: str | None) -> SigningKey | None:
        if domain is None:
            return None
        return self.keys.get(domain) or self.keys.get("*")

    def sign(self, normalized: bytes) -> bytes:
        """The CRLF-normalised message with a DKIM-Signature field first, or unchanged when it is not signed."""
        return self.signature(normalized) + normalized

    def signature(self, normalized: bytes) -> bytes:
        """The DKIM-Signature field (from its name to its CRLF) for a CRLF-normalised message; b"" when it is
        not signed."""
        pending = self.prepare(normalized)
        return pending if isinstance(pending, bytes) else self.finish(pending, pending.private_key_operation)

    def prepare(self, normalized: bytes) -> bytes | PendingSignature:
        """The signature's first step (on a worker, on its event loop): a `PendingSignature` whose private-key
        operation is still to do (`finish`), or the whole field when there is no such step to part (dkimpy
        signing alone), or b"" when the message is not signed."""
        # the fast path parses the header once, for the From domain, the fields signed and their hash
        parsed = dkimpy_adapter.parse(normalized) if self.fast else None
        if parsed is not None:
            names = parsed.names
            value = parsed.values[names.index(b"from")] if b"from" in names else None
        else:
            from .delivery.wire import header_section

            headers = header_section(normalized)
            value = _field_value(headers, b"from")
            names = _present_fields(headers)
        key = self.key_for(None if value is None else self._domain_of(value))
        if key is None:
            return b""
        wanted, selector, domain, algorithm, signer = self._constants(key)
        include = [name for name in names if name in wanted]
        include.append(b"from")  # From once more than it occurs: none can be added
        try:
            if self.fast and key.private_key is not None:
                return dkimpy_adapter.prepare(
                    normalized,
                    selector=selector,
                    domain=domain,
                    algorithm=algorithm,
                    include_headers=include,
                    private_key=key.private_key,
                    now=int(time.time()),
                    signer=signer,
                    parsed=parsed,
                )
            signed = self._sign(
                normalized,
                selector,
                domain,
                key.dkimpy_key,
                canonicalize=(b"relaxed", b"relaxed"),
                signature_algorithm=algorithm,
                include_headers=include,
                linesep=b"\r\n",
            )
        except Exception as exc:  # a message dkimpy cannot sign still goes, unsigned
            _unsigned(signer, exc)
            return b""
        return bytes(signed)

    @staticmethod
    def finish(pending: PendingSignature, signature: Callable[[], bytes] | bytes) -> bytes:
        """The field of a `prepare`d signature, given its private-key operation's result (or the operation, to
        run here); b"" (logged) when the operation failed."""
        try:
            return pending.field(signature() if callable(signature) else signature)
        except Exception as exc:  # the message still goes, unsigned
            _unsigned(pending.signer, exc)
            return b""


def _unsigned(signer: str, exc: Exception) -> None:
    logger.warning("DKIM: %s could not sign a message (%s); it goes unsigned", signer, type(exc).__name__)


__all__ = [
    "ALGORITHMS",
    "DEFAULT_HEADERS",
    "DkimEntry",
    "DkimKeyError",
    "DkimSigner",
    "PendingSignature",
    "SigningKey",
    "from_domain",
    "load_key",
    "parse_dkim",
    "txt_record_strings",
    "zone_line",
]

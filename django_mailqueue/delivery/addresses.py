"""Envelope addresses: whether SMTP can carry one, its routing domain (A-label) and its wire form."""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass

_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_QUOTED_LOCAL = re.compile(r'^"(?:[^"\\\x00-\x1f\x7f]|\\[\x20-\x7e])*"$')
# RFC 5321 Atom characters (plus dots anywhere, as real mail uses them) and any non-ASCII (RFC 6531).
_DOT_ATOM_LOCAL = re.compile(r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.\-\u0080-\U0010ffff]+$")
_LABEL = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?$")
_MAX_ADDRESS = 254


@dataclass(frozen=True, slots=True)
class EnvelopeAddress:
    """An address as given, and what delivery makes of it."""

    #: exactly as the caller gave it (outcomes are reported under this)
    given: str
    #: the local part, unchanged
    local: str
    #: the routing domain: lowercase A-label form, an address literal such as "[192.0.2.1]", or ""
    #: for a bare local part (see `parse_address`)
    domain: str
    #: what MAIL FROM / RCPT TO carry between the angle brackets
    wire: str

    @property
    def literal_address(self) -> str | None:
        """The IP address of a domain literal ("[192.0.2.1]", "[IPv6:2001:db8::1]"), else None."""
        if not self.domain.startswith("["):
            return None
        inner = self.domain[1:-1]
        return inner[5:] if inner.lower().startswith("ipv6:") else inner

    @property
    def needs_smtputf8(self) -> bool:
        return not self.wire.isascii()


@functools.lru_cache(maxsize=4096)  # mail goes to the same few domains again and again
def domain_to_ascii(domain: str) -> str | None:
    """A domain in lowercase A-label form ("bücher.example" -> "xn--bcher-kva.example"); None if invalid."""
    domain = domain.lower()
    if not domain or domain.startswith(".") or domain.endswith(".") or ".." in domain:
        return None
    if domain.isascii():  # already A-labels: the codec would only check the labels' lengths, as below
        ascii_domain = domain
    else:
        try:
            ascii_domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    if len(ascii_domain) > 253 or not all(_LABEL.match(label) for label in ascii_domain.split(".")):
        return None
    return ascii_domain


def _literal(domain: str) -> str | None:
    inner = domain[1:-1]
    try:
        if inner.lower().startswith("ipv6:"):
            return f"[IPv6:{ipaddress.IPv6Address(inner[5:]).compressed}]"
        return f"[{ipaddress.IPv4Address(inner)}]"
    except ValueError:
        return None


def parse_address(address: object, *, domainless: bool = False) -> EnvelopeAddress | None:
    """The address, or None when SMTP would refuse it (line breaks, controls, no domain, ...).

    With `domainless`, a bare local part ("webmaster", as Django lets one be
    sent: tickets #15042, #24416) is taken too, with `domain` "": a relay
    completes or refuses it, an MX could not be found for it.
    """
    if not isinstance(address, str) or not address or len(address) > _MAX_ADDRESS * 4:
        return None
    if _CONTROL.search(address) or not address.isprintable():
        return None
    local, at, domain = address.rpartition("@")
    if not at and domainless and _valid_local(address) and len(address.encode("utf-8")) <= _MAX_ADDRESS:
        return EnvelopeAddress(given=address, local=address, domain="", wire=address)
    if not at or not local or not domain or not _valid_local(local):
        return None
    if domain.startswith("[") and domain.endswith("]"):
        routing = _literal(domain)
    else:
        routing = domain_to_ascii(domain)
    if routing is None:
        return None
    wire = f"{local}@{routing}"
    if len(wire.encode("utf-8")) > _MAX_ADDRESS:
        return None
    return EnvelopeAddress(given=address, local=local, domain=routing, wire=wire)


def _valid_local(local: str) -> bool:
    return bool(_QUOTED_LOCAL.match(local) if local.startswith('"') else _DOT_ATOM_LOCAL.match(local))


def parse_sender(address: object, *, domainless: bool = False) -> EnvelopeAddress | None:
    """The envelope sender; "" is the null sender (bounces, DSNs), kept as it is."""
    if address == "":
        return EnvelopeAddress(given="", local="", domain="", wire="")
    return parse_address(address, domainless=domainless)


__all__ = ["EnvelopeAddress", "domain_to_ascii", "parse_address", "parse_sender"]

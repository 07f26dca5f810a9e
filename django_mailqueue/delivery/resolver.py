"""Finding where a domain's mail goes: MX hosts by preference, implicit MX, null MX, and relay addresses.

`MxResolver` is the protocol the `Deliverer` calls; `DnsResolver` is the
default, on dnspython's async resolver (`MAILQUEUE["DNS"]`'s nameservers
and port, else the system's `/etc/resolv.conf`).
"""

from __future__ import annotations

import asyncio
import enum
import functools
import ipaddress
import logging
import random
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import dns.asyncresolver
    import dns.rdatatype
    import dns.resolver

from ..conf import DnsSettings
from ..core.items import Reply
from . import replies

logger = logging.getLogger("django_mailqueue.delivery")


@dataclass(frozen=True, slots=True)
class MailHost:
    """A host to deliver to: its name, MX preference, and addresses (IPv4 first)."""

    name: str
    preference: int
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Resolution:
    """Where mail for a domain (or a relay) goes: hosts in the order to try, or why nowhere.

    With `failure` set there are no hosts: its status says whether the
    recipients fail (5.1.2 NXDOMAIN, 5.1.10 null MX) or wait (4.4.3 a DNS
    temporary failure, 4.4.4 no MX host has an address, 4.3.5 a relay host
    that does not exist).
    """

    hosts: tuple[MailHost, ...] = ()
    failure: Reply | None = None
    #: no MX record: the domain's own A/AAAA records stand in (RFC 5321 §5.1)
    implicit: bool = False


class MxResolver(Protocol):
    """Resolves recipient domains and relay hosts. Never raises for a DNS problem."""

    async def resolve_domain(self, domain: str) -> Resolution:
        """MX hosts of `domain` (lowercase A-label), by preference, equal ones shuffled."""
        ...

    async def resolve_host(self, host: str) -> Resolution:
        """The addresses of a relay host name."""
        ...


class _Kind(enum.Enum):
    ANSWER = "answer"
    NXDOMAIN = "nxdomain"
    NODATA = "nodata"
    TEMPORARY = "temporary"


@dataclass(frozen=True, slots=True)
class _Lookup:
    kind: _Kind
    answer: dns.resolver.Answer | None = None
    reason: str = ""


class DnsResolver:
    """`MxResolver` on dnspython: MX, implicit MX, null MX (RFC 7505), failures never a bounce.

    - MX records by preference; equal preferences in random order.
    - No MX record at all (NOERROR/NODATA): the domain's A/AAAA, implicit MX.
      Any MX record present: no A/AAAA fallback.
    - `MX 0 .` alone (null MX): failed 5.1.10. NXDOMAIN: failed 5.1.2. No MX,
      A or AAAA: failed 5.1.2.
    - SERVFAIL, a timeout, a refused query — on the MX, the implicit A/AAAA or
      the MX hosts' lookups: pending 4.4.3. MX hosts none of which has an
      address: pending 4.4.4.
    - Relay hosts are looked up with the operating system's resolver
      (`getaddrinfo`: `/etc/hosts` applies, as for any client of a
      smarthost); a name that does not exist is a misconfigured route (4.3.5).
    """

    def __init__(self, settings: DnsSettings, *, rng: random.Random | None = None, max_hosts: int = 10) -> None:
        self._settings = settings
        self._rng = rng or random.Random()
        self._max_hosts = max_hosts
        self._resolver: dns.asyncresolver.Resolver | None = None

    def _get_resolver(self) -> dns.asyncresolver.Resolver:
        if self._resolver is None:
            # dnspython on the first MX lookup, not at import: a worker that only relays never loads it
            import dns.asyncresolver

            configure = self._settings.nameservers is None
            resolver = dns.asyncresolver.Resolver(configure=configure)
            if self._settings.nameservers is not None:
                resolver.nameservers = list(self._settings.nameservers)
                resolver.port = self._settings.port
            resolver.lifetime = self._settings.timeout
            resolver.timeout = min(resolver.timeout, self._settings.timeout)
            resolver.cache = None
            self._resolver = resolver
        return self._resolver

    async def _query(self, name: str, rdtype: dns.rdatatype.RdataType) -> _Lookup:
        import dns.exception
        import dns.name
        import dns.rdatatype
        import dns.resolver

        label = dns.rdatatype.to_text(rdtype)
        try:
            qname = dns.name.from_text(name)
            answer = await self._get_resolver().resolve(qname, rdtype, search=False)
        except dns.resolver.NXDOMAIN:
            return _Lookup(_Kind.NXDOMAIN, reason=f"{name} type={label}: host not found")
        except dns.resolver.NoAnswer:
            return _Lookup(_Kind.NODATA, reason=f"{name} type={label}: no data")
        except dns.exception.Timeout:
            return _Lookup(_Kind.TEMPORARY, reason=f"{name} type={label}: timed out")
        except dns.resolver.NoNameservers:
            return _Lookup(_Kind.TEMPORARY, reason=f"{name} type={label}: server failure")
        except Exception as exc:  # every other DNS or socket failure: temporary, never a bounce
            return _Lookup(_Kind.TEMPORARY, reason=f"{name} type={label}: {type(exc).__name__}")
        return _Lookup(_Kind.ANSWER, answer=answer)

    async def _addresses(self, name: str) -> tuple[tuple[str, ...], list[_Lookup]]:
        import dns.rdatatype

        a, aaaa = await asyncio.gather(self._query(name, dns.rdatatype.A), self._query(name, dns.rdatatype.AAAA))
        addresses: list[str] = []
        for lookup in (a, aaaa):
            if lookup.answer is not None:
                addresses.extend(str(rdata.address) for rdata in lookup.answer)
        return tuple(dict.fromkeys(addresses)), [a, aaaa]

    async def resolve_domain(self, domain: str) -> Resolution:
        import dns.name
        import dns.rdatatype

        mx = await self._query(domain, dns.rdatatype.MX)
        if mx.kind is _Kind.NXDOMAIN:
            return Resolution(
                failure=replies.own_reply(replies.NO_SUCH_DOMAIN, f"Host or domain name not found: {mx.reason}")
            )
        if mx.kind is _Kind.TEMPORARY:
            return Resolution(failure=replies.own_reply(replies.DNS_TEMPORARY, f"Temporary DNS failure: {mx.reason}"))
        if mx.kind is _Kind.NODATA:
            return await self._implicit(domain)
        assert mx.answer is not None
        records: list[tuple[int, str]] = []
        null_mx = False
        for rdata in mx.answer:
            exchange: dns.name.Name = rdata.exchange
            if exchange == dns.name.root:
                null_mx = True
                continue
            records.append((int(rdata.preference), exchange.to_text(omit_final_dot=True).lower()))
        if not records:
            if null_mx:
                return Resolution(
                    failure=replies.own_reply(
                        replies.NULL_MX, f"Domain {domain} does not accept mail (null MX, RFC 7505)"
                    )
                )
            return await self._implicit(domain)
        return await self._mx_hosts(domain, records)

    def _ordered(self, records: list[tuple[int, str]]) -> list[tuple[int, str]]:
        by_preference: dict[int, list[str]] = {}
        for preference, name in records:
            names = by_preference.setdefault(preference, [])
            if name not in names:
                names.append(name)
        ordered: list[tuple[int, str]] = []
        for preference in sorted(by_preference):
            names = by_preference[preference]
            self._rng.shuffle(names)
            ordered.extend((preference, name) for name in names)
        return ordered[: self._max_hosts]

    async def _mx_hosts(self, domain: str, records: list[tuple[int, str]]) -> Resolution:
        ordered = self._ordered(records)
        looked_up = await asyncio.gather(*(self._addresses(name) for _, name in ordered))
        hosts: list[MailHost] = []
        temporary: list[str] = []
        for (preference, name), (addresses, lookups) in zip(ordered, looked_up, strict=True):
            if addresses:
                hosts.append(MailHost(name, preference, addresses))
            temporary.extend(lookup.reason for lookup in lookups if lookup.kind is _Kind.TEMPORARY)
            if not addresses:
                logger.info("MX host %s of %s has no address", name, domain)
        if hosts:
            return Resolution(hosts=tuple(hosts))
        if temporary:
            return Resolution(
                failure=replies.own_reply(
                    replies.DNS_TEMPORARY, f"Temporary DNS failure looking up the MX hosts of {domain}: {temporary[0]}"
                )
            )
        return Resolution(failure=replies.own_reply(replies.UNROUTABLE, f"No MX host of {domain} has an address"))

    async def _implicit(self, domain: str) -> Resolution:
        addresses, lookups = await self._addresses(domain)
        if addresses:
            return Resolution(hosts=(MailHost(domain, 0, addresses),), implicit=True)
        temporary = [lookup.reason for lookup in lookups if lookup.kind is _Kind.TEMPORARY]
        if temporary:
            return Resolution(
                failure=replies.own_reply(replies.DNS_TEMPORARY, f"Temporary DNS failure: {temporary[0]}")
            )
        return Resolution(
            failure=replies.own_reply(
                replies.NO_SUCH_DOMAIN, f"Host or domain name not found: {domain} has no MX, A or AAAA record"
            )
        )

    async def resolve_host(self, host: str) -> Resolution:
        literal = ip_literal(host)
        if literal is not None:
            return Resolution(hosts=(MailHost(host, 0, (literal,)),))
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
                return Resolution(
                    failure=replies.own_reply(replies.MISCONFIGURED, f"Relay host {host} not found: {exc.strerror}")
                )
            return Resolution(
                failure=replies.own_reply(
                    replies.DNS_TEMPORARY, f"Temporary failure looking up relay host {host}: {exc.strerror}"
                )
            )
        except OSError as exc:
            return Resolution(
                failure=replies.own_reply(
                    replies.DNS_TEMPORARY, f"Temporary failure looking up relay host {host}: {exc}"
                )
            )
        ipv4 = [str(info[4][0]) for info in infos if info[0] == socket.AF_INET]
        ipv6 = [str(info[4][0]) for info in infos if info[0] == socket.AF_INET6]
        addresses = tuple(dict.fromkeys(ipv4 + ipv6))
        if not addresses:
            return Resolution(failure=replies.own_reply(replies.MISCONFIGURED, f"Relay host {host} has no address"))
        return Resolution(hosts=(MailHost(host, 0, addresses),))


@functools.lru_cache(maxsize=256)  # a relay's HOST is looked at for every message
def ip_literal(host: str) -> str | None:
    """The IP address `host` spells ("192.0.2.1", "[2001:db8::1]", "[IPv6:2001:db8::1]"), else None."""
    inner = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if inner.lower().startswith("ipv6:"):
        inner = inner[5:]
    try:
        return str(ipaddress.ip_address(inner))
    except ValueError:
        return None


__all__ = ["DnsResolver", "MailHost", "MxResolver", "Resolution", "ip_literal"]

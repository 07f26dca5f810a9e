"""MTA-STS (RFC 8461): a recipient domain's policy — found by DNS, fetched over HTTPS, cached — and what it allows.

`StsPolicies.policy_for(domain)` gives the policy the `Deliverer` applies to
an MX destination, or None (no policy: deliver as without MTA-STS). The
`_mta-sts.<domain>` TXT record and the `mta-sts.<domain>` host are looked up
through `MAILQUEUE["DNS"]`; the policy file comes over HTTPS with the
standard library's `http.client`: certificate verified against the system
trust store and `mta-sts.<domain>`, no redirect followed, size and time
bounded. A fetched policy is kept in Django's cache (shared by the workers
when the cache is) for its `max_age`, and in the worker's memory.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import re
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import dns.asyncresolver

from ..conf import DnsSettings

logger = logging.getLogger("django_mailqueue.delivery")

StsMode = Literal["enforce", "testing", "none"]
#: RFC 8461 §3.3: a policy file larger than 64 KiB is refused.
MAX_POLICY_BYTES = 64 * 1024
#: RFC 8461 §3.2: max_age is at most a year.
MAX_AGE_LIMIT = 31557600
#: Seconds a worker keeps a domain's answer (a policy, or none) before it looks at the TXT record again.
RECHECK = 300.0
#: Domains whose answer a worker keeps in memory at most: past it, answers older than RECHECK go, then the
#: oldest (the shared cache still has their policies).
MAX_KNOWN = 10_000
#: Seconds for the whole policy fetch (connecting, TLS, the request, the body).
FETCH_TIMEOUT = 10.0

_TXT_ID = re.compile(r"^[A-Za-z0-9]{1,32}$")


class PolicyError(Exception):
    """A policy cannot be fetched or read; the message says why (never more than the server's status)."""


@dataclass(frozen=True)
class StsPolicy:
    """A domain's MTA-STS policy, as fetched."""

    domain: str
    id: str
    mode: StsMode
    #: the `mx` patterns: host names, or `*.` and a domain (one leftmost label)
    mx: tuple[str, ...]
    max_age: int

    def matches(self, host: str) -> bool:
        """Whether an MX host name is one the policy lists (RFC 8461 §4.1)."""
        name = host.lower().rstrip(".")
        for pattern in self.mx:
            if pattern.startswith("*."):
                head, _, rest = name.partition(".")
                if head and rest == pattern[2:]:
                    return True
            elif name == pattern:
                return True
        return False

    def describe(self) -> str:
        return f"the MTA-STS policy of {self.domain} (id {self.id}, mode {self.mode})"


def parse_txt(strings: Sequence[str]) -> str | None:
    """The policy id of an `_mta-sts` TXT record's text (`v=STSv1; id=...`), or None if it is not one."""
    text = "".join(strings)
    fields = [part.strip() for part in text.split(";") if part.strip()]
    if not fields or fields[0].replace(" ", "") != "v=STSv1":
        return None
    for part in fields[1:]:
        key, _, value = part.partition("=")
        if key.strip() == "id" and _TXT_ID.match(value.strip()):
            return value.strip()
    return None


def parse_policy(domain: str, policy_id: str, text: str) -> StsPolicy:
    """The policy file's fields (RFC 8461 §3.2); `PolicyError` if it is not a valid STSv1 policy."""
    fields: dict[str, list[str]] = {}
    for line in re.split(r"\r?\n", text):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise PolicyError("a line without ':'")
        fields.setdefault(key.strip(), []).append(value.strip())
    if fields.get("version") != ["STSv1"]:
        raise PolicyError("not an STSv1 policy")
    mode = (fields.get("mode") or [""])[0]
    if mode not in ("enforce", "testing", "none"):
        raise PolicyError(f"mode {mode[:20]!r} is not enforce, testing or none")
    try:
        max_age = int((fields.get("max_age") or [""])[0])
    except ValueError:
        raise PolicyError("max_age is not a number") from None
    if not 0 <= max_age <= MAX_AGE_LIMIT:
        raise PolicyError("max_age is out of range")
    mx = tuple(pattern.lower().rstrip(".") for pattern in fields.get("mx", []))
    if mode != "none" and not mx:
        raise PolicyError("no mx pattern")
    return StsPolicy(domain, policy_id, mode, mx, max_age)  # type: ignore[arg-type]


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """`HTTPSConnection` to `host` at addresses found through the queue's resolver, not the system's."""

    def __init__(self, host: str, port: int, addresses: Sequence[str], **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self._addresses = list(addresses)

    def connect(self) -> None:
        last: OSError | None = None
        for address in self._addresses:
            try:
                sock = socket.create_connection((address, self.port), self.timeout)
            except OSError as exc:
                last = exc
                continue
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]
            return
        raise last or OSError("no address")


def fetch_policy_text(domain: str, addresses: Sequence[str], *, port: int = 443, timeout: float = FETCH_TIMEOUT) -> str:
    """GET https://mta-sts.<domain>/.well-known/mta-sts.txt (blocking): the body, or `PolicyError`."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # verified; SSL_CERT_FILE applies
    connection = _PinnedHTTPSConnection(f"mta-sts.{domain}", port, addresses, timeout=timeout, context=context)
    deadline = time.monotonic() + timeout
    try:
        connection.request("GET", "/.well-known/mta-sts.txt", headers={"Accept": "text/plain"})
        response = connection.getresponse()
        if response.status != 200:  # a redirect too: RFC 8461 §3.3 forbids following it
            raise PolicyError(f"HTTP status {response.status}")
        if (response.getheader("Content-Type") or "").split(";")[0].strip().lower() != "text/plain":
            raise PolicyError("the policy is not text/plain")
        body = b""
        while len(body) <= MAX_POLICY_BYTES:
            if time.monotonic() > deadline:
                raise PolicyError(f"the policy took more than {timeout:g} s")
            chunk = response.read(8192)
            if not chunk:
                break
            body += chunk
        if len(body) > MAX_POLICY_BYTES:
            raise PolicyError(f"the policy is larger than {MAX_POLICY_BYTES} bytes")
        return body.decode("utf-8")
    except (OSError, http.client.HTTPException, UnicodeDecodeError) as exc:
        raise PolicyError(f"{type(exc).__name__}: {exc}"[:200]) from None
    finally:
        connection.close()


@dataclass
class _Known:
    policy: StsPolicy | None
    checked: float
    #: when the answer stops holding: RECHECK after it was had, or the policy's max_age if that comes first
    until: float


Fetcher = Callable[[str, Sequence[str]], Awaitable[str]]


class StsPolicies:
    """The MTA-STS policies one worker applies: memory first, then Django's cache, then DNS and HTTPS.

    Never raises: a domain whose policy cannot be had has none (RFC 8461 §5),
    unless a cached one still holds.
    """

    def __init__(
        self,
        dns_settings: DnsSettings,
        *,
        https_port: int = 443,
        cache_alias: str = "default",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dns = dns_settings
        self._https_port = https_port
        self._cache_alias = cache_alias
        self._clock = clock
        self._known: dict[str, _Known] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._resolver: dns.asyncresolver.Resolver | None = None
        #: policy files fetched by this worker (tests count them)
        self.fetches = 0

    async def policy_for(self, domain: str) -> StsPolicy | None:
        """`domain`'s policy in force, or None; at most one lookup at a time per domain in this worker."""
        known = self._known.get(domain)
        if known is not None and self._clock() < known.until:
            return known.policy
        lock = self._locks.setdefault(domain, asyncio.Lock())
        async with lock:
            known = self._known.get(domain)
            if known is not None and self._clock() < known.until:
                return known.policy
            try:
                policy = await self._discover(domain)
            except Exception as exc:  # a bug here must not stop delivery: no policy, said in the log
                logger.error("MTA-STS lookup for %s failed: %s", domain, type(exc).__name__)
                policy = None
            self._remember(domain, policy)
            return policy

    def _remember(self, domain: str, policy: StsPolicy | None) -> None:
        """Keep `domain`'s answer, the table bounded (`MAX_KNOWN`) and in the order answers came."""
        now = self._clock()
        self._known.pop(domain, None)
        if len(self._known) >= MAX_KNOWN:
            for name in [name for name, known in self._known.items() if known.until <= now]:
                del self._known[name]
            while len(self._known) >= MAX_KNOWN:
                del self._known[next(iter(self._known))]
            for name in [name for name, lock in self._locks.items() if name not in self._known and not lock.locked()]:
                del self._locks[name]
        until = now + (RECHECK if policy is None else min(RECHECK, max(1, policy.max_age)))
        self._known[domain] = _Known(policy, now, until)

    @property
    def known(self) -> int:
        """How many domains' answers this worker keeps in memory."""
        return len(self._known)

    async def _discover(self, domain: str) -> StsPolicy | None:
        cached = await self._cached(domain)
        txt = await self._txt(domain)
        if txt is None or (cached is not None and cached.id == txt):
            return cached  # no record (or DNS down): a cached policy holds until it expires
        try:
            addresses = await self._addresses(f"mta-sts.{domain}")
            self.fetches += 1
            async with asyncio.timeout(FETCH_TIMEOUT + 1):
                text = await asyncio.to_thread(fetch_policy_text, domain, addresses, port=self._https_port)
            policy = parse_policy(domain, txt, text)
        except (PolicyError, TimeoutError) as exc:
            logger.info("MTA-STS policy of %s (id %s) not fetched: %s", domain, txt, exc or "timeout")
            return cached
        await self._store(policy)
        logger.info("%s fetched, max_age %d s", policy.describe(), policy.max_age)
        return policy

    # --- the shared cache -------------------------------------------------------------

    def _key(self, domain: str) -> str:
        return f"django_mailqueue:mta-sts:{domain}"

    async def _cached(self, domain: str) -> StsPolicy | None:
        from django.core.cache import caches

        value = await asyncio.to_thread(caches[self._cache_alias].get, self._key(domain))
        if not isinstance(value, dict) or value.get("expires", 0) <= self._clock():
            return None
        try:
            return StsPolicy(value["domain"], value["id"], value["mode"], tuple(value["mx"]), value["max_age"])
        except (KeyError, TypeError):
            return None

    async def _store(self, policy: StsPolicy) -> None:
        from django.core.cache import caches

        value = {**asdict(policy), "mx": list(policy.mx), "expires": self._clock() + policy.max_age}
        cache = caches[self._cache_alias]
        await asyncio.to_thread(cache.set, self._key(policy.domain), value, timeout=max(1, policy.max_age))

    # --- DNS --------------------------------------------------------------------------

    def _get_resolver(self) -> dns.asyncresolver.Resolver:
        if self._resolver is None:
            import dns.asyncresolver

            resolver = dns.asyncresolver.Resolver(configure=self._dns.nameservers is None)
            if self._dns.nameservers is not None:
                resolver.nameservers = list(self._dns.nameservers)
                resolver.port = self._dns.port
            resolver.lifetime = self._dns.timeout
            self._resolver = resolver
        return self._resolver

    async def _txt(self, domain: str) -> str | None:
        """The policy id the `_mta-sts` record gives; None without a (valid) record or when DNS fails."""
        import dns.exception

        try:
            answer = await self._get_resolver().resolve(f"_mta-sts.{domain}", "TXT")
        except dns.exception.DNSException:
            return None
        ids = {parse_txt([s.decode("ascii", "replace") for s in record.strings]) for record in answer}
        ids.discard(None)
        return ids.pop() if len(ids) == 1 else None  # RFC 8461 §3.1: several records, no policy

    async def _addresses(self, host: str) -> list[str]:
        import dns.exception

        found: list[str] = []
        for rdtype in ("A", "AAAA"):
            try:
                answer = await self._get_resolver().resolve(host, rdtype)
            except dns.exception.DNSException:
                continue
            found += [record.address for record in answer]
        if not found:
            raise PolicyError(f"{host} has no address")
        return found


__all__ = [
    "MAX_POLICY_BYTES",
    "PolicyError",
    "StsPolicies",
    "StsPolicy",
    "fetch_policy_text",
    "parse_policy",
    "parse_txt",
]

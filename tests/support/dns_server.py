"""A small authoritative DNS server on loopback for tests: MX, A, AAAA, null MX, NXDOMAIN, SERVFAIL, slow answers.

    with DnsServer() as dns:                      # or the `dns_server` fixture
        dns.mx("example.test", (10, "mx1.example.test"), (20, "mx2.example.test"))
        dns.a("mx1.example.test", "127.0.0.2")
        dns.null_mx("nomail.test")
        dns.servfail("broken.test")
        dns.slow("slow.test", delay=None)         # never answers
        settings = QueueSettings(dns=dns.settings(timeout=1.0), ...)

Names not set up answer NXDOMAIN; a name with records but none of the
asked type answers NOERROR with no data (NODATA). UDP only (the answers are
small; dnspython never needs TCP for them). Each query is served in its
own thread, so a slow answer delays only itself. `queries` lists every
(name, type) asked, in order.
"""

from __future__ import annotations

import socketserver
import threading
import time
from collections.abc import Iterator
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset
import pytest

from django_mailqueue.conf import DnsSettings

_SOA = "ns.test. hostmaster.test. 1 60 60 60 60"


def _key(name: str) -> str:
    return name.lower().rstrip(".")


class DnsServer:
    """The server. Set records at any time, before or while it runs (thread-safe)."""

    def __init__(self, host: str = "127.0.0.1", ttl: int = 60) -> None:
        self.host = host
        self.ttl = ttl
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, list[str]]] = {}
        self._servfail: set[tuple[str, str | None]] = set()
        self._slow: dict[tuple[str, str | None], float | None] = {}
        self.queries: list[tuple[str, str]] = []
        self._server: socketserver.ThreadingUDPServer | None = None
        self._thread: threading.Thread | None = None

    # --- zone data -------------------------------------------------------------------

    def add(self, name: str, rdtype: str, *values: str) -> DnsServer:
        """Add records of any type in zone-file syntax: `add("x.test", "TXT", '"hello"')`."""
        with self._lock:
            self._records.setdefault(_key(name), {}).setdefault(rdtype.upper(), []).extend(values)
        return self

    def mx(self, name: str, *records: tuple[int, str]) -> DnsServer:
        """MX records: (preference, exchange host name)."""
        return self.add(name, "MX", *(f"{pref} {host.rstrip('.')}." for pref, host in records))

    def null_mx(self, name: str) -> DnsServer:
        """RFC 7505's `MX 0 .`: the domain accepts no mail."""
        return self.add(name, "MX", "0 .")

    def a(self, name: str, *addresses: str) -> DnsServer:
        return self.add(name, "A", *addresses)

    def aaaa(self, name: str, *addresses: str) -> DnsServer:
        return self.add(name, "AAAA", *addresses)

    def exists(self, name: str) -> DnsServer:
        """The name exists with no records (every type answers NODATA)."""
        with self._lock:
            self._records.setdefault(_key(name), {})
        return self

    def nxdomain(self, name: str) -> DnsServer:
        """Make `name` not exist (the default for names never set up)."""
        with self._lock:
            self._records.pop(_key(name), None)
        return self

    def servfail(self, name: str, rdtype: str | None = None) -> DnsServer:
        """Answer SERVFAIL for `name` (every type, or just `rdtype`)."""
        with self._lock:
            self._servfail.add((_key(name), rdtype.upper() if rdtype else None))
        return self

    def slow(self, name: str, delay: float | None = None, rdtype: str | None = None) -> DnsServer:
        """Answer `name` after `delay` seconds; None: never answer (a timeout)."""
        with self._lock:
            self._slow[(_key(name), rdtype.upper() if rdtype else None)] = delay
        return self

    def settings(self, timeout: float = 2.0) -> DnsSettings:
        """`DnsSettings` pointing at this server."""
        return DnsSettings(nameservers=(self.host,), port=self.port, timeout=timeout)

    def asked(self, name: str, rdtype: str | None = None) -> int:
        """How many queries for `name` (of `rdtype`, or any type) came in."""
        with self._lock:
            return sum(1 for n, t in self.queries if n == _key(name) and (rdtype is None or t == rdtype.upper()))

    # --- serving ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "the DNS server is not running"
        return int(self._server.server_address[1])

    def answer(self, wire: bytes) -> bytes | None:
        """The response to one query in wire format; None to send nothing."""
        query = dns.message.from_wire(wire)
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        if not query.question:
            response.set_rcode(dns.rcode.FORMERR)
            return response.to_wire()
        question = query.question[0]
        name = _key(question.name.to_text())
        rdtype = dns.rdatatype.to_text(question.rdtype)
        with self._lock:
            self.queries.append((name, rdtype))
            servfail = (name, None) in self._servfail or (name, rdtype) in self._servfail
            slow_key = next((k for k in ((name, rdtype), (name, None)) if k in self._slow), None)
            delay = self._slow[slow_key] if slow_key is not None else 0.0
            records = self._records.get(name)
            values = list(records.get(rdtype, [])) if records is not None else []
        if slow_key is not None:
            if delay is None:
                return None
            time.sleep(delay)
        if servfail:
            response.set_rcode(dns.rcode.SERVFAIL)
            return response.to_wire()
        if records is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
            response.authority.append(dns.rrset.from_text("test.", self.ttl, "IN", "SOA", _SOA))
            return response.to_wire()
        if values:
            response.answer.append(dns.rrset.from_text(question.name, self.ttl, "IN", rdtype, *values))
        else:
            response.authority.append(dns.rrset.from_text("test.", self.ttl, "IN", "SOA", _SOA))
        return response.to_wire()

    def start(self) -> DnsServer:
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data, sock = self.request
                try:
                    reply = server.answer(data)
                except Exception:  # a query the test server cannot parse: no answer
                    return
                if reply is not None:
                    sock.sendto(reply, self.client_address)

        udp = socketserver.ThreadingUDPServer((self.host, 0), Handler)
        udp.daemon_threads = True
        udp.block_on_close = False
        self._server = udp
        self._thread = threading.Thread(target=udp.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> DnsServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@pytest.fixture
def dns_server() -> Iterator[DnsServer]:
    """A running `DnsServer` on 127.0.0.1 (ephemeral port), empty: every name NXDOMAIN until set up."""
    with DnsServer() as server:
        yield server


__all__ = ["DnsServer", "dns_server"]

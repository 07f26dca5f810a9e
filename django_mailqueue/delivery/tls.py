"""TLS contexts: unverified and opportunistic for MX hosts, verified against the system trust store for relays
and for MX hosts under an MTA-STS policy."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

from ..routes import MxRoute, RelayRoute, Route
from .transport import TlsPolicy

#: Makes the context that verifies a relay's certificate; the default is `relay_context`.
RelayContextFactory = Callable[[RelayRoute], ssl.SSLContext]


def mx_context() -> ssl.SSLContext:
    """STARTTLS to MX hosts, as Postfix's `may` level: encrypt, verify nothing.

    An MX host's certificate is rarely valid for the name the MX record
    gives, and refusing it would only send the mail in plain text instead,
    so it is not checked; a failed handshake retries the host in plain text.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def mx_verified_context() -> ssl.SSLContext:
    """STARTTLS to an MX host under an MTA-STS policy: verified against the system trust store and the MX name."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def relay_context(route: RelayRoute) -> ssl.SSLContext:
    """A relay's TLS: the certificate verified against the system's trust store.

    `ssl.create_default_context()` loads OpenSSL's default locations, so
    `SSL_CERT_FILE` / `SSL_CERT_DIR` apply; the relay's `HOST` (a name or an
    IP literal) must match the certificate. The route's `SSL_CERTFILE` (and
    `SSL_KEYFILE`) is the client certificate offered to the relay.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    if route.ssl_certfile:
        context.load_cert_chain(route.ssl_certfile, route.ssl_keyfile)
    return context


class RouteContexts:
    """Each route's TLS policy and context, made once: the MX hosts' one, each relay's (its factory in a thread)."""

    def __init__(self, relay_factory: RelayContextFactory) -> None:
        self._relay_factory = relay_factory
        self._mx: ssl.SSLContext | None = None
        self._relays: dict[RelayRoute, ssl.SSLContext] = {}

    def known(self, route: Route) -> tuple[TlsPolicy, ssl.SSLContext | None] | None:
        """The route's policy and context when nothing has to be made for it (else None: `of`), no coroutine."""
        if isinstance(route, MxRoute):
            if self._mx is None:
                self._mx = mx_context()
            return "opportunistic", self._mx
        if route.tls == "none":
            return "none", None
        context = self._relays.get(route)
        return None if context is None else (route.tls, context)

    async def of(self, route: Route) -> tuple[TlsPolicy, ssl.SSLContext | None]:
        known = self.known(route)
        if known is not None:
            return known
        assert isinstance(route, RelayRoute)
        if route not in self._relays:
            self._relays[route] = await asyncio.to_thread(self._relay_factory, route)
        return route.tls, self._relays[route]


__all__ = ["RelayContextFactory", "RouteContexts", "mx_context", "mx_verified_context", "relay_context"]

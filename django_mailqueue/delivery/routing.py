"""Where a recipient's mail goes, worked out once per domain: its destination's key and route, and an address's hosts.

A worker's mail goes to the same few domains and relays again and again;
what the `Deliverer` would otherwise work out per message (the route of a
domain, a relay route's hash as a dict key, the one host of an address) is
kept here, each map bounded.
"""

from __future__ import annotations

import functools

from ..conf import QueueSettings, RelayRoute, Route
from .addresses import EnvelopeAddress, parse_sender
from .attempt import Destination
from .resolver import MailHost, Resolution, ip_literal

#: The most domains (and addresses) remembered; past it the map starts again.
_MAX_KEPT = 10_000

#: A destination's key: ("relay", the relay route's number) or ("mx", the recipient domain).
DestinationKey = tuple[object, ...]


class Routing:
    """The routes of `settings`, as the `Deliverer` asks for them per recipient."""

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings
        self._domains: dict[str, tuple[DestinationKey, Route]] = {}
        #: each distinct relay route's number: equal routes share a destination, whose key then hashes cheaply
        self._relays: dict[RelayRoute, int] = {}
        self._literals: dict[tuple[str, str], Resolution] = {}

    def of(self, domain: str) -> tuple[DestinationKey, Route]:
        """The key of the destination a recipient domain's mail goes to, and its route: one destination for
        every domain routed to an equal relay, one for each domain routed to its MX hosts."""
        found = self._domains.get(domain)
        if found is None:
            route = self.settings.route_for(domain)
            if isinstance(route, RelayRoute):
                key: DestinationKey = ("relay", self._relays.setdefault(route, len(self._relays)))
            else:
                key = ("mx", domain)
            if len(self._domains) >= _MAX_KEPT:
                self._domains.clear()
            found = self._domains[domain] = (key, route)
        return found

    @staticmethod
    def destination(route: Route, recipient: EnvelopeAddress) -> Destination:
        """A new destination for `recipient`, the first of its key in an attempt."""
        if isinstance(route, RelayRoute):
            return Destination(route, route.host, literal=ip_literal(route.host))
        return Destination(route, recipient.domain, literal=recipient.literal_address)

    def literal(self, name: str, address: str) -> Resolution:
        """The one host of an address (a relay's HOST, a recipient's [literal]): nothing to look up."""
        found = self._literals.get((name, address))
        if found is None:
            if len(self._literals) >= _MAX_KEPT:
                self._literals.clear()
            found = self._literals[(name, address)] = Resolution(hosts=(MailHost(name, 0, (address,)),))
        return found


@functools.lru_cache(maxsize=256)  # a worker's mail comes from a few senders
def sender_address(sender: str) -> EnvelopeAddress | None:
    """`parse_sender(sender, domainless=True)`, once per sender."""
    return parse_sender(sender, domainless=True)


__all__ = ["DestinationKey", "Routing", "sender_address"]

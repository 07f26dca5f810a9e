"""Traffic shaping's limits in force, a row a destination: for `mailqueue_status`, the admin, the metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .conf import QueueSettings
from .routes import MxRoute, RelayRoute
from .shaping import DestinationPolicy, relay_key

#: The key of the row for every MX destination without an entry of its own (each domain its own bucket).
EVERY_OTHER = "*"


@dataclass(frozen=True)
class LimitsInForce:
    """One destination's policy, and the settings that name it."""

    policy: DestinationPolicy
    #: where it comes from: 'ROUTES["corp.example"]', 'SHAPING[".google.com"]', …
    source: str

    @property
    def destination(self) -> str:
        return self.policy.key

    @property
    def rate(self) -> str:
        return "-" if self.policy.limits.rate is None else str(self.policy.limits.rate)

    @property
    def connections(self) -> str:
        return "-" if self.policy.limits.connections is None else str(self.policy.limits.connections)

    @property
    def messages_per_connection(self) -> str:
        per = self.policy.limits.messages_per_connection
        return "-" if per is None else str(per)

    @property
    def suspension(self) -> str:
        """ "60–3600 s": the first suspension and the most its doubling reaches."""
        return f"{self.policy.suspend:g}–{self.policy.suspend_max:g} s"

    def as_dict(self) -> dict[str, Any]:
        """As `mailqueue_status --json` prints it."""
        limits = self.policy.limits
        return {
            "destination": self.policy.key,
            "source": self.source,
            "rate": None if limits.rate is None else str(limits.rate),
            "connections": limits.connections,
            "messages_per_connection": limits.messages_per_connection,
            "suspend": self.policy.suspend,
            "suspend_max": self.policy.suspend_max,
            "dead_after": self.policy.dead_after,
        }


def limits_in_force(settings: QueueSettings) -> list[LimitsInForce]:
    """Each relay's limits (the routes through one relay share them), then, when a route delivers to MX hosts,
    each `SHAPING` entry's and last `"*"`'s: those of every other MX destination, each domain its own."""
    found: list[LimitsInForce] = []
    relays: dict[str, tuple[RelayRoute, list[str]]] = {}
    for name, route in settings.routes.items():
        if isinstance(route, RelayRoute):
            relays.setdefault(relay_key(route.host, route.port), (route, []))[1].append(name)
    for route, names in relays.values():
        policy = settings.shaping.relay_policy(route.host, route.port, route.limits)
        found.append(LimitsInForce(policy, ", ".join(f'ROUTES["{name}"]' for name in names)))
    if any(isinstance(route, MxRoute) for route in settings.routes.values()):
        shaping, slots = settings.shaping, settings.concurrency
        for key in sorted(k for k in shaping.entries if k != EVERY_OTHER):
            found.append(LimitsInForce(shaping.mx_policy(key, [], concurrency=slots), f'SHAPING["{key}"]'))
        source = 'SHAPING["*"]' if EVERY_OTHER in shaping.entries else "the defaults"
        found.append(LimitsInForce(shaping.mx_policy(EVERY_OTHER, [], concurrency=slots), source))
    return found


def named_destinations(settings: QueueSettings) -> list[str]:
    """The destinations the settings name (`"*"` is not one): the metrics' `destination` label values."""
    return sorted({row.destination for row in limits_in_force(settings)} - {EVERY_OTHER})

"""Label values of bounded cardinality: a recipient's route as `ROUTES` names it, a reply's status class, a
shaped destination."""

from __future__ import annotations

from collections.abc import Mapping

from ..core.items import Reply, address_domain

#: The route label of every domain without a route of its own in `ROUTES` (and of addresses without a domain).
DEFAULT_ROUTE = "*"

#: The outcome label of each recipient state, as the signals name them.
OUTCOMES = ("delivered", "deferred", "failed")


def route_label(routes: Mapping[str, object], domain: str) -> str:
    """The `ROUTES` key that routes `domain` ("*" for every domain without its own): never an unconfigured name."""
    domain = domain.lower()
    if not domain.isascii():
        try:
            domain = domain.encode("idna").decode("ascii")
        except UnicodeError:
            return DEFAULT_ROUTE
    return domain if domain != DEFAULT_ROUTE and domain in routes else DEFAULT_ROUTE


def recipient_route(routes: Mapping[str, object], address: str) -> str:
    return route_label(routes, address_domain(address))


def status_class(reply: Reply) -> str:
    """ "2xx", "4xx" or "5xx": the SMTP reply code's class, or when no server answered (DNS, a refused
    connection, the queue's own decision) that of the enhanced status code; "other" for anything else."""
    first = str(reply.code)[:1] if reply.code is not None else reply.status[:1]
    return f"{first}xx" if first in ("2", "4", "5") else "other"


#: The destination label of every suspended destination the settings do not name.
OTHER_DESTINATIONS = "other"


def configured_destinations() -> list[str]:
    """The destinations the settings name (each relay's, each `SHAPING` entry's but `"*"`'s): the
    `destination` label's values besides `OTHER_DESTINATIONS`."""
    from ..conf import get_settings
    from ..shaping_limits import named_destinations

    return named_destinations(get_settings())

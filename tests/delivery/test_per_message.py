"""What a message costs the delivery stack once its destination is known: nothing made again per message."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from django_mailqueue.conf import RelayRoute
from django_mailqueue.core.items import RecipientState
from django_mailqueue.delivery import Deliverer
from django_mailqueue.delivery.smtp import SmtpTransport
from tests.delivery.conftest import MESSAGE, MakeSettings
from tests.support.smtp_server import ServerPool

MESSAGES = 6


@dataclass(frozen=True)
class CountedRelay(RelayRoute):
    """A relay route that counts how often it is hashed (a dict key made of it)."""

    def __hash__(self) -> int:
        HASHES.append(1)
        return super().__hash__()


HASHES: list[int] = []


async def _deliver_each(deliverer: Deliverer, recipients: list[list[str]]) -> None:
    try:
        for batch in recipients:
            result = await deliverer.deliver("sender@origin.test", batch, MESSAGE)
            assert all(o.state is RecipientState.DELIVERED for o in result.outcomes), result
    finally:
        await deliverer.aclose()


async def test_a_relay_route_is_hashed_once_per_domain_not_per_message(
    make_settings: MakeSettings, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    route = CountedRelay(host="127.0.0.2", port=smtp_servers.port, tls="none")
    deliverer = Deliverer(make_settings(routes={"*": route}), transport=SmtpTransport(cache_time=5))
    HASHES.clear()
    await _deliver_each(deliverer, [[f"r{n}@example.test"] for n in range(MESSAGES)])
    assert len(server.messages) == MESSAGES and server.connections == 1
    assert len(HASHES) <= 1  # the route numbered once for its domain (every message hashed it ~8 times)


async def test_domains_routed_to_equal_relays_still_share_one_session(
    make_settings: MakeSettings, smtp_servers: ServerPool
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    one = RelayRoute(host="127.0.0.2", port=smtp_servers.port, tls="none")
    other = RelayRoute(host="127.0.0.2", port=smtp_servers.port, tls="none")
    assert one is not other
    settings = make_settings(routes={"*": one, "b.test": other})
    await _deliver_each(
        Deliverer(settings, transport=SmtpTransport(cache_time=5)), [["x@a.test", "y@b.test"], ["z@b.test"]]
    )
    assert server.commands.count("MAIL") == 2  # one transaction each time: both domains one destination


async def test_a_message_on_a_cached_connection_makes_no_semaphore(
    make_settings: MakeSettings, smtp_servers: ServerPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = smtp_servers.smtp("127.0.0.2")
    route = RelayRoute(host="127.0.0.2", port=smtp_servers.port, tls="none")
    deliverer = Deliverer(make_settings(routes={"*": route}), transport=SmtpTransport(cache_time=5))
    made: list[int] = []
    semaphore = asyncio.Semaphore

    def counted(*args: Any, **kwargs: Any) -> asyncio.Semaphore:
        made.append(1)
        return semaphore(*args, **kwargs)

    monkeypatch.setattr(asyncio, "Semaphore", counted)
    await _deliver_each(deliverer, [[f"r{n}@example.test"] for n in range(MESSAGES)])
    assert len(server.messages) == MESSAGES and server.connections == 1
    assert len(made) == 1  # the server address's limit, made once (two a message were made and dropped)


async def test_a_kept_connection_keeps_its_cache_entry(make_settings: MakeSettings, smtp_servers: ServerPool) -> None:
    smtp_servers.smtp("127.0.0.2")
    route = RelayRoute(host="127.0.0.2", port=smtp_servers.port, tls="none")
    transport = SmtpTransport(cache_time=5)
    deliverer = Deliverer(make_settings(routes={"*": route}), transport=transport)
    entries = []
    try:
        for n in range(MESSAGES):
            result = await deliverer.deliver("sender@origin.test", [f"r{n}@example.test"], MESSAGE)
            assert result.outcomes[0].state is RecipientState.DELIVERED
            ((idle,),) = transport._idle.values()
            entries.append(idle)
            assert idle.messages == n + 1
    finally:
        await deliverer.aclose()
    assert all(entry is entries[0] for entry in entries)  # kept again as it was, not made anew a message

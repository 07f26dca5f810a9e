"""The admin's pages on Redis read a bounded number of commands: twice the items, the same commands a page (counted
by a private redis-server's `INFO commandstats`, the scripts' own commands included)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_mailqueue.admin.queue import QueueAdmin
from django_mailqueue.core.clock import FakeClock
from django_mailqueue.core.items import Completion, RecipientState
from django_mailqueue.stores import get_store
from django_mailqueue.testing.contract import new_item, outcome
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.django_db]

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
LIST = "admin:django_mailqueue_queueditem_changelist"
PAGES = {
    "list": {},
    "state=due": {"state": "due"},
    "state=scheduled": {"state": "scheduled"},
    "state=deferred": {"state": "deferred"},
    "state=leased": {"state": "leased"},
    "queue=bulk": {"queue": "bulk"},
    "queue=bulk&state=due": {"queue": "bulk", "state": "due"},
    "domain": {"domain": "d3.example"},
    "search @domain": {"q": "@D3.example"},  # the domain's sorted set, as the domain filter
    "search address": {"q": "R42@d0"},  # a range of `addrs`
    "search word": {"q": "weekly"},  # a range of `words`
    "search word, deferred": {"q": "weekly", "state": "deferred"},
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path) as private:
        yield private


def fill(n: int, start: int) -> None:
    """`n` items at NOW: a third scheduled, a third in `bulk`; 10 of them claimed and 5 of those deferred."""
    store = get_store()
    for i in range(start, start + n):
        store.add(
            new_item([f"r{i}@d{i % 7}.example"], queue="bulk" if i % 3 == 0 else "default", subject=f"Weekly {i}"),
            now=NOW - timedelta(minutes=1) if i % 3 else NOW + timedelta(hours=1),
        )
    claimed = store.claim(owner="w", now=NOW, lease_expires=NOW + timedelta(minutes=5), limit=10)
    for item in claimed[:5]:
        later = Completion(
            (outcome(item.recipients[0].address, RecipientState.PENDING),), next_attempt=NOW + timedelta(minutes=1)
        )
        store.complete(item.id, owner="w", revision=item.revision, completion=later)


def commands(server: RedisServer, client: Client, url: str, query: dict[str, str]) -> int:
    with server.client() as redis_client:
        redis_client.execute_command("CONFIG", "RESETSTAT")
        assert client.get(url, query).status_code == 200
        stats = redis_client.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items() if name not in ("cmdstat_config", "cmdstat_info"))


def test_each_page_reads_as_many_commands_at_twice_the_items(
    server: RedisServer, settings: Any, admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.MAILQUEUE = {
        "STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {"url": server.url}}
    }
    monkeypatch.setattr(QueueAdmin, "clock", FakeClock(NOW))
    url = reverse(LIST)
    fill(300, 0)
    pages = {**{label: (url, query) for label, query in PAGES.items()}, "overview": (f"{url}overview/", {})}
    before = {label: commands(server, admin_client, *page) for label, page in pages.items()}
    fill(300, 300)  # as many again, and 10 more leases
    after = {label: commands(server, admin_client, *page) for label, page in pages.items()}
    print("\nRedis commands a page (300 items, 600 items):", {k: (before[k], after[k]) for k in before})
    # a page's 51 items and its fixed reads, plus a read or two per lease held (the second fill's 10 more): not a
    # read per item
    for label in pages:
        assert after[label] <= before[label] + 2 * 10, (label, before[label], after[label])
    # the list page's five state totals are one script (overview.lua) reading each lease once, not five
    assert before["list"] < 51 + 10 + 30, before["list"]

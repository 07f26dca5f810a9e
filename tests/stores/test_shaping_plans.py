"""`defer_destination` on the ORM store reads the recipients' domain index and the items by key: never a scan of
the queue (the plans, by `EXPLAIN`, on SQLite and on a 100,000-item queue on PostgreSQL). Times are printed."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_mailqueue.core.clock import to_micros
from django_mailqueue.core.items import NewItem
from django_mailqueue.stores.orm import OrmStore
from tests.support.databases import DATABASES

pytestmark = pytest.mark.django_db(databases=DATABASES)

NOW = datetime(2030, 1, 1, tzinfo=UTC)
#: 500 domains, two recipients an item: a domain pair holds about 0.8% of the items
ITEMS = 100_000
DOMAINS = 500


def fill(alias: str, items: int) -> None:
    """`items` items straight into the tables, each with two pending recipients at neighbouring domains."""
    now = to_micros(NOW)
    with connections[alias].cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO mailqueue_item (id, sender, size, created, next_attempt, attempts, queue, owner,
                                        lease_expires, revision, reclaims, delay_warned, message_id, subject)
            SELECT md5('mq-shaping-' || i)::uuid, 's@origin.test', 10, %(now)s, %(now)s - i, 0, 'default', NULL,
                   NULL, 0, 0, false, '', ''
            FROM generate_series(1::bigint, %(items)s) AS i
            """,
            {"items": items, "now": now},
        )
        cursor.execute(
            """
            INSERT INTO mailqueue_recipient (item_id, position, address, domain, state, reply_code, reply_status,
                                             reply_text, remote_mta)
            SELECT seq, p, 'u' || seq || '@d' || ((seq + p) %% %(domains)s) || '.test',
                   'd' || ((seq + p) %% %(domains)s) || '.test', 'pending', NULL, '', '', ''
            FROM mailqueue_item, generate_series(0, 1) AS p
            """,
            {"domains": DOMAINS},
        )
        cursor.execute("ANALYZE mailqueue_item, mailqueue_recipient")


def plans(alias: str, explain: str, run: Callable[[], Any]) -> list[str]:
    """The plan of each SELECT and UPDATE `run` sends to `alias`."""
    with CaptureQueriesContext(connections[alias]) as captured:
        run()
    found = []
    with connections[alias].cursor() as cursor:
        for query in captured.captured_queries:
            if query["sql"].startswith(("SELECT", "UPDATE")):
                cursor.execute(f"{explain} {query['sql']}")
                found.append("\n".join(str(row[-1]) for row in cursor.fetchall()))
    return found


def defer(store: OrmStore) -> int:
    return store.defer_destination(["d7.test", "d8.test"], until=NOW + timedelta(minutes=5), now=NOW)


@pytest.mark.postgres
def test_deferring_reads_indexes_only_on_postgresql(pg_alias: str) -> None:
    fill(pg_alias, ITEMS)
    store = OrmStore({"database": pg_alias})
    started = time.perf_counter()
    moved = defer(store)
    print(f"\ndefer_destination: {moved} of {ITEMS} items moved in {(time.perf_counter() - started) * 1000:.0f} ms")
    assert moved == 200  # both recipients at d7 or d8: items whose two neighbouring domains are d7, d8
    found = plans(pg_alias, "EXPLAIN", lambda: defer(store))
    assert len(found) >= 2 and "mailqueue_recipient_domain" in found[0]
    for plan in found:
        assert "Seq Scan" not in plan, plan
    assert all("mailqueue_item_pkey" in plan for plan in found[1:])


def test_deferring_reads_indexes_only_on_sqlite() -> None:
    store = OrmStore({"database": "default"})
    found = plans("default", "EXPLAIN QUERY PLAN", lambda: defer(store))
    assert len(found) == 1  # no item there: nothing to update
    assert (
        "USING COVERING INDEX mailqueue_recipient_domain" in found[0]
        or "USING INDEX mailqueue_recipient_domain" in found[0]
    )
    store.add_many(
        [NewItem(sender="", recipients=(f"u{n}@d{n % 9}.test",), message=b"x\r\n") for n in range(20)], now=NOW
    )
    found = plans("default", "EXPLAIN QUERY PLAN", lambda: defer(store))
    update = found[-1]
    assert "SEARCH mailqueue_item USING INTEGER PRIMARY KEY" in update, update
    assert "SCAN" not in update.replace("SCAN CONSTANT ROW", ""), update


@pytest.mark.redis
def test_deferring_on_redis_reads_the_domains_index_only(tmp_path: Path) -> None:
    """Counted by the server's INFO commandstats: on a redis-server of the test's own, which no other test (another
    xdist worker's, another run's) sends an HMGET while it counts."""
    from django_mailqueue.stores.redis import RedisStore
    from tests.support.redis_server import RedisServer

    with RedisServer(tmp_path) as server:
        store = RedisStore({"url": server.url, "key_prefix": "mqtest-defer:"})
        try:
            store.add_many(
                [NewItem(sender="", recipients=(f"u{n}@elsewhere.test",), message=b"x\r\n") for n in range(300)],
                now=NOW,
            )
            held = store.add_many(
                [NewItem(sender="", recipients=(f"u{n}@d7.test",), message=b"x\r\n") for n in range(3)], now=NOW
            )
            with server.client() as admin:
                before = admin.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0)
                assert defer(store) == 3
                read = admin.info("commandstats")["cmdstat_hmget"]["calls"] - before
                # two reads of each item of d7.test — the store's of its queue and domains (the keys the script
                # declares), the script's check of its fields (its search terms stay as they are since the words
                # set: a deferral does not re-score them) — none of the 300 elsewhere
                assert read == 6
            assert all(store.get(i.id).next_attempt == NOW + timedelta(minutes=5) for i in held)  # type: ignore[union-attr]
        finally:
            store.close()

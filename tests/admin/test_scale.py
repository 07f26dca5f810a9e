"""The admin at 1,000,000 items on PostgreSQL: the list page in a bounded number of queries, and every page's
queries — list, filters, search, overview, history and its filters — answered from indexes (`EXPLAIN`).

The page's time is printed (for bench/), never asserted.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_mailqueue.admin.listing import TOTAL_BOUND
from django_mailqueue.admin.queue import QueueAdmin
from django_mailqueue.core.clock import FakeClock, to_micros
from django_mailqueue.core.items import NEVER, ItemQuery, ItemState
from django_mailqueue.stores import get_store
from tests.support.databases import DATABASES

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.django_db(databases=DATABASES)]

#: How many items; MAILQUEUE_ADMIN_SCALE_ITEMS makes a quicker (or bigger) run.
ITEMS = int(os.environ.get("MAILQUEUE_ADMIN_SCALE_ITEMS", "1000000"))
NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
MESSAGE = b"From: sender@origin.test\r\nTo: user@dest.test\r\nSubject: load\r\n\r\nHello.\r\n"


def fill(alias: str, items: int) -> float:
    """`items` items (one recipient each, every tenth deferred, one in a thousand leased, one in a thousand kept
    failed) straight into the tables, keyed 1 to `items` (`seq`, which the addresses are made of: the searches
    below look for `user4242@`) whatever the tests before this one took from the key's sequence — a rollback
    never gives its values back (tests/stores/test_shaping_plans.py's 100,000 items on the same worker's
    database made these start at 100,001)."""
    now = to_micros(NOW)
    # next attempts spread over a day around NOW: half due, half scheduled
    first, step = now - 43_200_000_000, 86_400_000_000 // items
    started = time.perf_counter()
    with connections[alias].cursor() as cursor:
        # A bulk load builds the secondary indexes once, after the rows, as pg_restore does: dropped and
        # created again from their own definitions, inside the test's transaction (rolled back at its end).
        cursor.execute(
            """
            SELECT indexname, indexdef FROM pg_indexes
            WHERE tablename IN ('mailqueue_item', 'mailqueue_recipient', 'mailqueue_history')
              AND indexname NOT IN (SELECT conname FROM pg_constraint)
            """
        )
        indexes = cursor.fetchall()
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute(
            """
            INSERT INTO mailqueue_item (seq, id, sender, size, created, next_attempt, attempts, queue, owner,
                                        lease_expires, revision, reclaims, delay_warned, message_id, subject,
                                        failed_at)
            SELECT i, md5('mq-admin-' || i)::uuid, 'sender' || (i %% 997) || '@origin.test', %(size)s,
                   %(first)s + i - 3600000000,
                   CASE WHEN i %% 1000 = 11 THEN %(never)s ELSE %(first)s + i * %(step)s END,
                   CASE WHEN i %% 10 = 0 OR i %% 1000 = 11 THEN 1 + i %% 3 ELSE 0 END,
                   CASE i %% 4 WHEN 0 THEN 'bulk' WHEN 1 THEN 'transactional' ELSE 'default' END,
                   CASE WHEN i %% 1000 = 7 THEN 'worker-' || (i %% 8) END,
                   CASE WHEN i %% 1000 = 7 THEN %(now)s + 300000000 END,
                   1, 0, false, '<' || i || '@origin.test>', 'Message ' || i,
                   CASE WHEN i %% 1000 = 11 THEN %(first)s + i END
            FROM generate_series(1::bigint, %(items)s) AS i
            """,
            {"items": items, "first": first, "step": step, "now": now, "size": len(MESSAGE), "never": to_micros(NEVER)},
        )
        cursor.execute(
            """
            INSERT INTO mailqueue_recipient (item_id, position, address, domain, state, reply_code, reply_status,
                                             reply_text, remote_mta)
            SELECT seq, 0, 'user' || seq || '@d' || (seq %% 5000) || '.test', 'd' || (seq %% 5000) || '.test',
                   CASE WHEN failed_at IS NULL THEN 'pending' ELSE 'failed' END,
                   CASE WHEN failed_at IS NOT NULL THEN 550 WHEN attempts > 0 THEN 451 END,
                   CASE WHEN failed_at IS NOT NULL THEN '5.1.1' WHEN attempts > 0 THEN '4.7.1' ELSE '' END,
                   CASE WHEN failed_at IS NOT NULL THEN 'No such user' WHEN attempts > 0 THEN 'Greylisted' ELSE '' END,
                   CASE WHEN attempts > 0 THEN 'mx.d' || (seq %% 5000) || '.test' ELSE '' END
            FROM mailqueue_item
            """,
            {},
        )
        cursor.execute("INSERT INTO mailqueue_message (item_id, data) SELECT seq, %s FROM mailqueue_item", [MESSAGE])
        # as many history records, over the last 30 days: one in 20 failed, one in 5,000 possibly delivered
        cursor.execute(
            """
            INSERT INTO mailqueue_history (item_id, message_id, sender, recipient, domain, queue, state, reply_code,
                                           reply_status, reply_text, remote_mta, attempt, possibly_delivered,
                                           recorded, lease_lost)
            SELECT md5('mq-history-' || i)::uuid, '<' || i || '@origin.test>', 'sender@origin.test',
                   'user' || i || '@d' || (i %% 5000) || '.test', 'd' || (i %% 5000) || '.test',
                   CASE i %% 4 WHEN 0 THEN 'bulk' WHEN 1 THEN 'transactional' ELSE 'default' END,
                   CASE WHEN i %% 20 = 0 THEN 'failed' ELSE 'delivered' END, 250, '2.0.0', 'OK', 'mx.test', 1,
                   i %% 5000 = 3, now() - (i * 2592000.0 / %(items)s) * interval '1 second', false
            FROM generate_series(1::bigint, %(items)s) AS i
            """,
            {"items": items},
        )
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # check the foreign keys now, before the index builds
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        for _, definition in indexes:
            cursor.execute(definition)
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute("ANALYZE mailqueue_item, mailqueue_recipient, mailqueue_message, mailqueue_history")
    return time.perf_counter() - started


def scans_a_big_table(plan: str) -> bool:
    """A sequential scan of the items or the recipients not cut short by a `Limit` to half of it or less (the
    search's bounded reads of 10,001 rows may scan where nearly every row matches: they stop early)."""
    limit = None  # the cost of the nearest Limit above
    for line in plan.splitlines():
        bound = re.search(r"Limit  \(cost=[\d.]+\.\.([\d.]+)", line)
        if bound:
            limit = float(bound.group(1))
        scan = re.search(r"Seq Scan on (?:mailqueue_item|mailqueue_recipient)\b.*?cost=[\d.]+\.\.([\d.]+)", line)
        if scan and (limit is None or limit > float(scan.group(1)) / 2):
            return True
    return False


def plans(alias: str, run: Callable[[], Any]) -> list[str]:
    """The EXPLAIN of each query `run` sends to `alias`."""
    with CaptureQueriesContext(connections[alias]) as captured:
        run()
    explained = []
    with connections[alias].cursor() as cursor:
        for query in captured.captured_queries:
            cursor.execute("EXPLAIN " + query["sql"])
            explained.append("\n".join(row[0] for row in cursor.fetchall()))
    return explained


def test_the_list_page_of_a_million_item_queue(
    pg_alias: str,
    settings: Any,
    admin_client: Client,
    django_assert_max_num_queries: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MAILQUEUE = {
        "STORE": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": pg_alias}}
    }
    monkeypatch.setattr(QueueAdmin, "clock", FakeClock(NOW))
    took = fill(pg_alias, ITEMS)
    store = get_store()
    print(f"\nadmin scale: {ITEMS} items inserted and analysed in {took:.1f} s")

    url = reverse("admin:django_mailqueue_queueditem_changelist")
    timings: dict[str, float] = {}
    for label, params in (
        ("default order", {}),
        ("state=due", {"state": "due"}),
        ("state=scheduled", {"state": "scheduled"}),
        ("state=deferred", {"state": "deferred"}),
        ("state=leased", {"state": "leased"}),
        ("state=failed", {"state": "failed"}),
        ("queue=bulk", {"queue": "bulk"}),
        ("domain=d42.test", {"domain": "d42.test"}),
        ("search", {"q": "user4242@"}),
        ("page 200", {"p": "200"}),
    ):
        admin_client.get(url, params)  # warm the caches, as a second visit would
        # the page and its recipients; and the totals, each a count to a bound (the deferred one two: the tried
        # items and those leased now), the list's own total; none for a search: its address index read, the
        # page's keys, the page and its recipients
        with django_assert_max_num_queries(5 if label == "search" else 9, connection=connections[pg_alias]):
            started = time.perf_counter()
            page = admin_client.get(url, params)
            timings[label] = time.perf_counter() - started
        assert page.status_code == 200
        rows = page.content.decode().count("<tr data-item=")
        narrow = ("domain=d42.test", "search", "state=failed")  # one item in 1,000 is kept failed
        assert rows == (QueueAdmin.list_per_page if label not in narrow else rows) and rows > 0
    with django_assert_max_num_queries(8):  # the session, the user and its permissions, on "default"
        admin_client.get(url)
    started = time.perf_counter()
    assert admin_client.get(reverse("admin:django_mailqueue_queueditem_overview")).status_code == 200
    overview = time.perf_counter() - started
    for label, seconds in timings.items():
        print(f"admin scale: list page, {label}: {seconds * 1000:.0f} ms")
    print(f"admin scale: overview page (aggregates over every item): {overview * 1000:.0f} ms")

    # every query the list sends is answered from an index: never a scan of the items
    for label, query in (
        ("default order", ItemQuery(now=NOW)),
        *((f"state={s.value}", ItemQuery(state=s, now=NOW)) for s in ItemState),
        ("queue", ItemQuery(queue="bulk", now=NOW)),
        ("domain", ItemQuery(domain="d42.test", now=NOW)),
    ):
        page_plan, recipients_plan = plans(pg_alias, lambda q=query: store.list(q, offset=0, limit=51))
        assert "Seq Scan on mailqueue_item" not in page_plan, f"{label}:\n{page_plan}"
        assert "Index" in page_plan, f"{label}:\n{page_plan}"
        print(f"admin scale: plan, {label}: " + " / ".join(line.strip() for line in page_plan.splitlines()[:3]))
        assert "Seq Scan" not in recipients_plan, f"{label}:\n{recipients_plan}"
        if label == "domain":
            assert "mailqueue_recipient_domain" in page_plan, page_plan
        if label == "default order":
            assert "mailqueue_item_due" in page_plan, page_plan
        # the total the page shows stops at 10,001 rows: the planner reads an index, or (when matches are
        # plentiful) the table until it has them
        # (deferred: the tried items to the bound from their partial index alone, and those leased now)
        count_plan, *leased_plan = plans(pg_alias, lambda q=query: store.count(q, limit=TOTAL_BOUND + 1))[::-1]
        assert "Limit" in count_plan, f"{label} count:\n{count_plan}"
        if label == "state=deferred":
            # (index-only where the visibility map allows, as on the vacuumed bench seed; here a bitmap of it)
            assert "mailqueue_item_deferred" in count_plan and "Seq Scan" not in count_plan, count_plan
            assert "mailqueue_item_leased" in leased_plan[0] and "Seq Scan" not in leased_plan[0], leased_plan
        print(f"admin scale: count plan, {label}: " + " / ".join(line.strip() for line in count_plan.splitlines()[:4]))
        started = time.perf_counter()
        store.count(query, limit=TOTAL_BOUND + 1)
        print(f"admin scale: total, {label}: {(time.perf_counter() - started) * 1000:.0f} ms")
    assert timedelta(0) < timedelta(seconds=took)

    # the search: an address or a domain from its index's range, a word tested on the first rows the due index
    # gives and, where those hold too few, from the subject's trigram index (docs/admin.md, "Search")
    probe = ITEMS // 2 + 42
    for label, search, index in (
        ("full address", f"user{probe}@d{probe % 5000}.test", "mailqueue_recipient_address_start"),
        ("address prefix", f"user{probe // 100}", "mailqueue_recipient_address_start"),
        ("domain", f"@d{probe % 5000}.test", "mailqueue_recipient_domain"),
        ("subject word", f"Message {probe}", "_trgm"),
        ("common subject word", "message", None),
    ):
        query = ItemQuery(search=search, now=NOW)
        explained = plans(pg_alias, lambda q=query: store.list(q, offset=0, limit=51))
        for plan in explained:
            assert not scans_a_big_table(plan), plan
        shown = f"search {label}:\n" + "\n".join(explained)
        if index is not None:  # the page by key, from what the term's index found
            assert any(index in plan for plan in explained), shown
        else:  # the first rows of the due index, each item's recipients probed by its own index (never hashed
            # whole first), stopped at the page; then the page by key
            probe_plan = explained[0]
            assert "Subquery Scan" in probe_plan and "mailqueue_item_due" in probe_plan, shown
            assert "mailqueue_recipient_position" in probe_plan and "hashed" not in probe_plan, shown
            assert not any("_trgm" in plan for plan in explained), shown
        started = time.perf_counter()
        admin_client.get(url, {"q": search})
        print(f"admin scale: list page, search by {label}: {(time.perf_counter() - started) * 1000:.0f} ms")
    # the overview: bounded counts and a loose scan of the queue index
    for plan in plans(pg_alias, lambda: store.overview(now=NOW, bound=TOTAL_BOUND)):
        # the recipients of the 1,001 sampled items are read by key: below 1,000,000 items the planner may scan
        # for so many keys; the number of rows read stays bounded by the sample either way
        by_key = "Filter: (item_id = ANY (" in plan and ITEMS < 1_000_000
        assert by_key or not scans_a_big_table(plan), plan
    # the history and each of its filters
    history = reverse("admin:django_mailqueue_deliveryrecord_changelist")
    today = datetime.now(UTC).strftime("%Y-%m-%d 00:00:00+00:00")
    for params in (
        {},
        {"state__exact": "failed"},
        {"queue": "transactional"},
        {"domain": "d42.test"},
        {"possibly_delivered__exact": "1"},
        {"recorded__gte": today},
        {"p": "1000"},
    ):
        for plan in plans(pg_alias, lambda p=params: admin_client.get(history, p)):
            assert "Seq Scan on mailqueue_history" not in plan, f"{params}:\n{plan}"
        started = time.perf_counter()
        assert admin_client.get(history, params).status_code == 200
        print(f"admin scale: history, {params}: {(time.perf_counter() - started) * 1000:.0f} ms")

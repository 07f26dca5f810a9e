"""The queue list's totals, sorting, search by subject and id, the end of the list, and actions on a whole filter."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_mailqueue.admin import actions
from django_mailqueue.core.items import ItemOrder, NewItem
from django_mailqueue.stores.base import QueueStore
from tests.admin.queue_data import Queue

pytestmark = pytest.mark.django_db

LIST = "admin:django_mailqueue_queueditem_changelist"
ACTION = "admin:django_mailqueue_queueditem_action"


def rows(html: str) -> list[str]:
    return re.findall(r'<tr data-item="([0-9a-f-]{36})"', html)


def ids(*items: object) -> set[str]:
    return {str(item.id) for item in items}  # type: ignore[attr-defined]


def get(client: Client, query: str = "") -> str:
    page = client.get(reverse(LIST) + query)
    assert page.status_code == 200
    return page.content.decode()


def test_the_list_shows_its_total_and_each_states(operator_client: Client, queue: Queue, store: QueueStore) -> None:
    html = get(operator_client)
    assert 'of <span id="mq-total">10</span>' in html
    if store.bounded_counts:  # per-state totals only where a count reads an index
        for state, count in (("due", 5), ("scheduled", 2), ("deferred", 2), ("leased", 1)):
            assert f'id="mq-state-total-{state}">({count})<' in html
        by_domain = get(operator_client, "?domain=example.org")
        # a domain's total, but none per state (a count of a domain and a state joins items and recipients)
        assert 'of <span id="mq-total">3</span>' in by_domain and "mq-state-total" not in by_domain
        assert 'id="mq-total"' not in get(operator_client, "?domain=example.org&state=due")
    else:
        assert "mq-state-total" not in html and 'id="mq-total"' not in get(operator_client, "?state=due")


def test_a_total_past_the_bound_says_more_than(
    operator_client: Client, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_mailqueue.admin import listing

    monkeypatch.setattr(listing, "TOTAL_BOUND", 6)
    assert 'of <span id="mq-total">more than 6</span>' in get(operator_client)


def test_a_page_past_the_end_says_where_the_end_is(
    operator_client: Client, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_mailqueue.admin.queue import QueueAdmin

    monkeypatch.setattr(QueueAdmin, "list_per_page", 4)
    html = get(operator_client, "?p=99")
    assert "The queue is empty" not in html
    assert 'Page 99 is past the end: 10 items, the last page is <a href="?p=3">3</a>.' in html
    html = get(operator_client, "?p=9&state=due")
    assert "Page 9 is past the end: 5 items match these filters, the last page is" in html


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        ("invoice 2030", lambda q: ids(q.partly_delivered)),
        ("NEWSLETTER", lambda q: ids(q.newsletter)),
        ("lunch", lambda q: ids(q.due[2])),
        ("@EXAMPLE.org", lambda q: ids(q.due[1], q.due[2], q.due[3])),
        ("FRANK@", lambda q: ids(q.due[2])),
        ("origin.test", lambda q: set()),  # never the sender, nor a part inside an address
        ("newslet", lambda q: set()),  # a subject's word is whole
    ],
)
def test_search_reads_subject_words_addresses_and_domains(
    operator_client: Client, queue: Queue, q: str, expected: object
) -> None:
    assert set(rows(get(operator_client, f"?q={q}"))) == expected(queue)  # type: ignore[operator]


def test_search_finds_an_item_by_its_id_or_the_start_the_list_shows(operator_client: Client, queue: Queue) -> None:
    item = queue.deferred
    shown = re.search(rf'title="{item.id}">([0-9a-f]{{8}})…<', get(operator_client))
    assert shown is not None
    for q in (shown.group(1), shown.group(1) + "…", str(item.id), str(item.id).upper(), item.id.hex[:13]):
        found = rows(get(operator_client, "?" + f"q={q}"))
        assert ids(item) <= set(found) and all(f.replace("-", "").startswith(item.id.hex[:8]) for f in found), q


def test_the_null_sender_shows_as_angle_brackets(operator_client: Client, queue: Queue, store: QueueStore) -> None:
    dsn = store.add(
        NewItem(sender="", recipients=("alice@origin.test",), message=b"Subject: x\r\n\r\n.", subject="Undelivered"),
        now=datetime.now(UTC),
    )
    html = get(operator_client, "?q=undelivered")
    assert rows(html) == [str(dsn.id)]
    assert '<td class="field-sender"><span class="quiet" title="the null sender (a DSN)">&lt;&gt;</span></td>' in html


def test_the_next_attempt_column_sorts_both_ways_and_age_where_the_store_can(
    operator_client: Client, queue: Queue, store: QueueStore
) -> None:
    default = rows(get(operator_client))
    html = get(operator_client)
    assert 'href="?o=-next" id="mq-sort-next"' in html
    assert rows(get(operator_client, "?o=-next")) == [str(i.id) for i in store.list(order=ItemOrder.NEXT_ATTEMPT_DESC)]
    assert rows(get(operator_client, "?o=-next")) != default
    if ItemOrder.NEWEST in store.orders:
        assert 'href="?o=age" id="mq-sort-age"' in html
        newest = rows(get(operator_client, "?o=age"))
        assert newest == [str(i.id) for i in store.list(order=ItemOrder.NEWEST)]
        assert rows(get(operator_client, "?o=-age")) == newest[::-1]
        assert 'href="?o=-age" id="mq-sort-age"' in get(operator_client, "?o=age")
    else:
        assert 'id="mq-sort-age"' not in html
        assert rows(get(operator_client, "?o=age")) == default  # an order the store cannot give is ignored
    # a filter keeps the order, and the order keeps the filter
    assert 'href="?state=due&amp;o=-next"' in get(operator_client, "?state=due")


def test_an_action_on_every_item_matching_a_filter_asks_with_the_count_then_runs(
    operator_client: Client, operator: User, queue: Queue, store: QueueStore
) -> None:
    html = get(operator_client, "?state=due")
    assert 'id="action-toggle"' in html and 'name="select_across"' in html
    assert 'name="filters" value="state=due"' in html
    chosen = {"action": "cancel", "select_across": "1", "filters": "state=due&domain=dest.test"}
    confirm = operator_client.post(reverse(ACTION), chosen).content.decode()
    assert '<strong id="mq-across-count">3</strong> items now' in confirm
    assert "Are you sure you want to cancel these 3 queued messages?" in confirm
    assert 'name="select_across" value="1"' in confirm and 'name="item"' not in confirm
    assert store.count() == 10
    operator_client.post(reverse(ACTION), {**chosen, "confirm": "yes"})
    assert ids(*store.list()) == ids(*queue.all) - ids(queue.due[0], queue.due[3], queue.due[4])
    entries = LogEntry.objects.filter(user=operator, action_flag=DELETION)
    assert {e.object_id for e in entries} == ids(queue.due[0], queue.due[3], queue.due[4])


def test_send_now_on_a_whole_filter_asks_first(operator_client: Client, queue: Queue, store: QueueStore) -> None:
    chosen = {"action": "send_now", "select_across": "1", "filters": "state=scheduled"}
    confirm = operator_client.post(reverse(ACTION), chosen).content.decode()
    assert "Send these 2 queued messages now?" in confirm
    assert store.get(queue.scheduled.id) == queue.scheduled
    before = datetime.now(UTC)
    done = operator_client.post(reverse(ACTION), {**chosen, "confirm": "yes"}, follow=True).content.decode()
    assert "2 queued messages due now" in done
    for item in (queue.scheduled, queue.newsletter):
        moved = store.get(item.id)
        assert moved is not None and before <= moved.next_attempt <= datetime.now(UTC)


def test_an_action_on_a_filter_takes_at_most_its_bound(
    operator_client: Client, queue: Queue, store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(actions, "MAX_ITEMS_ACROSS", 3)
    monkeypatch.setattr("django_mailqueue.admin.queue.MAX_ITEMS_ACROSS", 3)
    chosen = {"action": "cancel", "select_across": "1", "filters": "state=due"}
    confirm = operator_client.post(reverse(ACTION), chosen).content.decode()
    assert '<strong id="mq-across-count">more than 3</strong>' in confirm
    assert "The action takes the first 3 in the list's order; run it again" in confirm
    operator_client.post(reverse(ACTION), {**chosen, "confirm": "yes"})
    assert store.count() == 7
    assert {str(i.id) for i in queue.due} - ids(*store.list()) == ids(*queue.due[:3])


def test_reschedule_on_a_whole_filter_warns_past_the_lifetime(
    operator_client: Client, queue: Queue, store: QueueStore
) -> None:
    chosen = {"action": "reschedule", "select_across": "1", "filters": "queue=transactional"}
    form = operator_client.post(reverse(ACTION), chosen).content.decode()
    assert 'name="at_0"' in form and "vDateField" in form and "DateTimeShortcuts.js" in form
    soon = datetime.now(UTC) + timedelta(hours=1)
    fine = {**chosen, "confirm": "yes", "at_0": soon.strftime("%Y-%m-%d"), "at_1": soon.strftime("%H:%M:%S")}
    operator_client.post(reverse(ACTION), fine)
    moved = store.get(queue.deferred.id)
    assert moved is not None and moved.next_attempt == soon.replace(microsecond=0)
    late = {**chosen, "confirm": "yes", "at_0": (datetime.now(UTC) + timedelta(days=9)).strftime("%Y-%m-%d")}
    warned = operator_client.post(reverse(ACTION), {**late, "at_1": "12:00"}).content.decode()
    assert 'id="mq-past-lifetime"' in warned
    assert store.get(queue.deferred.id) == moved

"""The queue pages through Django's test client, on the ORM and the Redis store: list, filters, item, actions."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_mailqueue.admin.listing import TOTAL_BOUND
from django_mailqueue.core.items import ItemQuery, ItemState
from django_mailqueue.stores.base import QueueStore
from tests.admin.queue_data import Queue

pytestmark = pytest.mark.django_db

LIST = "admin:django_mailqueue_queueditem_changelist"
ACTION = "admin:django_mailqueue_queueditem_action"
OVERVIEW = "admin:django_mailqueue_queueditem_overview"


def listed(html: str) -> set[str]:
    return set(re.findall(r'<tr data-item="([0-9a-f-]{36})"', html))


def ids(*items: object) -> set[str]:
    return {str(item.id) for item in items}  # type: ignore[attr-defined]


def test_the_list_shows_every_item_with_its_state(operator_client: Client, queue: Queue) -> None:
    page = operator_client.get(reverse(LIST))
    assert page.status_code == 200
    html = page.content.decode()
    assert listed(html) == {str(i) for i in queue.ids()}
    for state in ItemState:  # a failed item (kept KEEP_FAILED): test_permissions.py, test_browser_failed.py
        if state is not ItemState.FAILED:
            assert f'mq-state mq-state-{state.value}">{state.value}<' in html
    assert "451 4.7.1 Greylisted" in html  # the last reply
    assert "reader1@<wbr>list.test, reader2@<wbr>list.test, reader3@<wbr>list.test" in html and "and 4 more" in html
    assert 'name="action"' in html and "Send now" in html and "Cancel" in html


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"state": "due"}, lambda q: ids(*q.due)),
        ({"state": "scheduled"}, lambda q: ids(q.scheduled, q.newsletter)),
        ({"state": "deferred"}, lambda q: ids(q.deferred, q.partly_delivered)),
        ({"state": "leased"}, lambda q: ids(q.leased)),
        ({"queue": "transactional"}, lambda q: ids(q.deferred, q.leased)),
        ({"queue": "bulk"}, lambda q: ids(q.newsletter)),
        ({"domain": "example.org"}, lambda q: ids(q.due[1], q.due[2], q.due[3])),
        ({"domain": "LIST.test"}, lambda q: ids(q.newsletter)),
        ({"q": "reader"}, lambda q: ids(q.newsletter)),
        ({"q": "GREYLISTED"}, lambda q: ids(q.deferred, q.partly_delivered)),
        ({"state": "due", "domain": "dest.test"}, lambda q: ids(q.due[0], q.due[3], q.due[4])),
    ],
)
def test_filters_and_search(operator_client: Client, queue: Queue, params: dict[str, str], expected: object) -> None:
    page = operator_client.get(reverse(LIST), params)
    assert page.status_code == 200
    assert listed(page.content.decode()) == expected(queue)  # type: ignore[operator]


def test_paging_goes_by_next_links_counting_only_to_a_bound(
    operator_client: Client, queue: Queue, store: QueueStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_mailqueue.admin.queue import QueueAdmin

    monkeypatch.setattr(QueueAdmin, "list_per_page", 4)
    counting = type(store).count

    def bounded(self: QueueStore, query: ItemQuery | None = None, *, limit: int | None = None) -> int:
        assert limit == TOTAL_BOUND + 1, "the list counted the whole queue"
        assert self.bounded_counts or query is None or query.unfiltered, "a filter counted on Redis"
        return counting(self, query, limit=limit)

    monkeypatch.setattr(type(store), "count", bounded)
    seen: list[str] = []
    url = reverse(LIST) + "?state="
    for page_number in (1, 2, 3):
        html = operator_client.get(url).content.decode()
        rows = list(re.findall(r'<tr data-item="([0-9a-f-]{36})"', html))
        seen += rows
        nxt = re.search(r'<a href="([^"]*)" class="mq-next"', html)
        if page_number < 3:
            assert len(rows) == 4 and nxt
            url = reverse(LIST) + nxt.group(1).replace("&amp;", "&")
        else:
            assert len(rows) == 2 and nxt is None
    assert sorted(seen) == sorted(str(i) for i in queue.ids()) and len(seen) == len(set(seen))


def test_the_item_page_shows_envelope_recipients_headers_and_attachments(operator_client: Client, queue: Queue) -> None:
    item = queue.partly_delivered
    page = operator_client.get(reverse("admin:django_mailqueue_queueditem_change", args=[item.id]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "billing@origin.test" in html and "Invoice 2030-17" in html
    assert "accounts@dest.test" in html and "250 2.0.0 Ok: queued as 4F2A1" in html
    assert "mq-rstate-delivered" in html and "mq-rstate-pending" in html
    assert "451 4.7.1 Greylisted, please try again later" in html and "mx.dest.test" in html
    assert "Content-Type" in html and "Message-ID" in html
    assert "invoice-2030-17.pdf" in html and "application/pdf" in html and "2.0\xa0KB" in html
    assert "this is a test message." in html


def test_a_gone_item_redirects_to_the_list_with_a_message(operator_client: Client, queue: Queue) -> None:
    page = operator_client.get(
        reverse("admin:django_mailqueue_queueditem_change", args=["00000000-0000-4000-8000-000000000000"]), follow=True
    )
    assert page.redirect_chain[-1][0] == reverse(LIST)
    assert "no longer in the queue" in page.content.decode()


def test_send_now_moves_the_next_attempt_and_logs_it(
    operator_client: Client, operator: User, queue: Queue, store: QueueStore
) -> None:
    before = datetime.now(UTC)
    page = operator_client.post(
        reverse(ACTION),
        {"action": "send_now", "item": [str(queue.scheduled.id), str(queue.newsletter.id)]},
        follow=True,
    )
    assert page.status_code == 200
    assert "2 queued messages due now" in page.content.decode()
    for item in (queue.scheduled, queue.newsletter):
        moved = store.get(item.id)
        assert moved is not None and before <= moved.next_attempt <= datetime.now(UTC)
    entries = LogEntry.objects.filter(user=operator, action_flag=CHANGE)
    assert {e.object_id for e in entries} == ids(queue.scheduled, queue.newsletter)
    assert all(e.change_message == "Sent now." for e in entries)


def test_send_now_keeps_a_workers_lease(operator_client: Client, queue: Queue, store: QueueStore) -> None:
    page = operator_client.post(reverse(ACTION), {"action": "send_now", "item": str(queue.leased.id)}, follow=True)
    assert "held by a worker right now" in page.content.decode()
    after = store.get(queue.leased.id)
    assert after is not None and after.owner == "worker-b:777" and after.lease_expires == queue.leased.lease_expires


def test_reschedule_asks_for_a_time_then_moves_the_items(
    operator_client: Client, operator: User, queue: Queue, store: QueueStore
) -> None:
    chosen = [str(queue.due[0].id), str(queue.deferred.id)]
    form = operator_client.post(reverse(ACTION), {"action": "reschedule", "item": chosen})
    assert form.status_code == 200
    html = form.content.decode()
    assert 'name="at_0"' in html and 'name="at_1"' in html and 'name="confirm" value="yes"' in html
    assert all(f'name="item" value="{i}"' in html for i in chosen)
    bad = operator_client.post(
        reverse(ACTION), {"action": "reschedule", "item": chosen, "confirm": "yes", "at_0": "soon", "at_1": "4:05"}
    )
    assert bad.status_code == 200 and "Enter a valid date." in bad.content.decode()
    assert store.get(queue.due[0].id).next_attempt == queue.due[0].next_attempt  # type: ignore[union-attr]
    confirmed = {"action": "reschedule", "item": chosen, "confirm": "yes", "at_0": "2031-02-03", "at_1": "04:05"}
    warned = operator_client.post(reverse(ACTION), confirmed).content.decode()
    assert "This time is past the lifetime (MAX_LIFETIME, 5 d from when it was queued) of 2 of these items" in warned
    assert 'name="past_lifetime" value="yes"' in warned and 'value="2031-02-03"' in warned
    assert store.get(queue.due[0].id).next_attempt == queue.due[0].next_attempt  # type: ignore[union-attr]
    done = operator_client.post(reverse(ACTION), {**confirmed, "past_lifetime": "yes"}, follow=True)
    assert "2 queued messages rescheduled to 2031-02-03T04:05:00+00:00" in done.content.decode()
    for item_id in (queue.due[0].id, queue.deferred.id):
        assert store.get(item_id).next_attempt == datetime(2031, 2, 3, 4, 5, tzinfo=UTC)  # type: ignore[union-attr]
    assert LogEntry.objects.filter(user=operator, action_flag=CHANGE).count() == 2


def test_cancel_asks_for_confirmation_then_drops_the_items(
    operator_client: Client, operator: User, queue: Queue, store: QueueStore
) -> None:
    chosen = [str(queue.due[1].id), str(queue.leased.id)]
    confirm = operator_client.post(reverse(ACTION), {"action": "cancel", "item": chosen})
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert "Are you sure you want to cancel these 2 queued messages?" in html
    assert "A worker is delivering some of them right now" in html
    assert store.get(queue.due[1].id) is not None
    done = operator_client.post(reverse(ACTION), {"action": "cancel", "item": chosen, "confirm": "yes"}, follow=True)
    assert "2 queued messages cancelled" in done.content.decode()
    assert store.get(queue.due[1].id) is None and store.get(queue.leased.id) is None
    assert store.read_message(queue.due[1].id) is None
    entries = LogEntry.objects.filter(user=operator, action_flag=DELETION)
    assert {e.object_id for e in entries} == set(chosen)
    again = operator_client.post(reverse(ACTION), {"action": "cancel", "item": chosen, "confirm": "yes"}, follow=True)
    assert "2 no longer in the queue" in again.content.decode()


def test_an_action_without_items_or_with_an_unknown_name_changes_nothing(
    operator_client: Client, queue: Queue, store: QueueStore
) -> None:
    page = operator_client.post(reverse(ACTION), {"action": "send_now"}, follow=True)
    assert "Items must be selected" in page.content.decode()
    page = operator_client.post(reverse(ACTION), {"action": "explode", "item": str(queue.due[0].id)}, follow=True)
    assert "No action selected" in page.content.decode()
    assert operator_client.get(reverse(ACTION)).status_code == 405


def test_next_is_only_followed_to_this_site(operator_client: Client, queue: Queue) -> None:
    item = str(queue.scheduled.id)
    page = operator_client.post(reverse(ACTION), {"action": "send_now", "item": item, "next": "https://evil.test/"})
    assert page["Location"] == reverse(LIST)
    page = operator_client.post(reverse(ACTION), {"action": "send_now", "item": item, "next": reverse(LIST) + "?q=x"})
    assert page["Location"] == reverse(LIST) + "?q=x"


def test_the_overview_counts_the_queue(operator_client: Client, queue: Queue) -> None:
    page = operator_client.get(reverse(OVERVIEW))
    assert page.status_code == 200
    html = page.content.decode()

    def count(name: str) -> int:
        found = re.search(rf'id="mq-count-{name}">(\d+)<', html)
        assert found, name
        return int(found.group(1))

    assert count("due") == 5 and count("scheduled") == 2 and count("deferred") == 2 and count("leased") == 1
    assert re.search(r'id="mq-total">10<', html)
    assert "dest.test" in html  # deferred by domain
    assert str(queue.partly_delivered.id) in html  # the oldest due item
    assert "<svg" in html and "Outcomes per hour" in html


def test_the_overview_counts_only_to_a_bound(
    operator_client: Client, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    import django_mailqueue.admin.queue as queue_admin
    import django_mailqueue.stores.base_reading as store_reading

    monkeypatch.setattr(queue_admin, "TOTAL_BOUND", 3)
    monkeypatch.setattr(store_reading, "OVERVIEW_DOMAIN_SAMPLE", 1)
    html = operator_client.get(reverse(OVERVIEW)).content.decode()
    assert 'id="mq-total">more than 3<' in html and 'id="mq-count-due">more than 3<' in html
    assert 'id="mq-count-scheduled">2<' in html and 'id="mq-count-leased">1<' in html
    assert "Of the first 1 deferred items, by next attempt." in html


def test_the_admin_index_lists_the_queue_and_the_history(operator_client: Client, db: None) -> None:
    html = operator_client.get(reverse("admin:index")).content.decode()
    assert reverse(LIST) in html and reverse("admin:django_mailqueue_deliveryrecord_changelist") in html
    assert "Queued messages" in html and "Delivery records" in html
    # the overview too, through a proxy model whose page leads to it
    entry = reverse("admin:django_mailqueue_queueoverview_changelist")
    assert f'<a href="{entry}">Queue overview</a>' in html
    assert operator_client.get(entry)["Location"] == reverse(OVERVIEW)
    sidebar = operator_client.get(reverse(LIST)).content.decode()
    assert f'<a href="{entry}">Queue overview</a>' in sidebar.split('id="nav-sidebar"')[1]


def test_the_overview_entry_is_only_for_those_who_may_view_the_queue(db: None) -> None:
    from tests.admin.conftest import make_staff

    history_only = Client()
    history_only.force_login(make_staff("history-only", "view_deliveryrecord"))
    html = history_only.get(reverse("admin:index")).content.decode()
    assert "Delivery records" in html and "Queue overview" not in html
    assert history_only.get(reverse("admin:django_mailqueue_queueoverview_changelist")).status_code == 403


def test_reschedule_can_move_an_item_into_the_past(operator_client: Client, queue: Queue, store: QueueStore) -> None:
    when = (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d %H:%M")
    day, time = when.split()
    operator_client.post(
        reverse(ACTION),
        {"action": "reschedule", "item": str(queue.scheduled.id), "confirm": "yes", "at_0": day, "at_1": time},
    )
    moved = store.get(queue.scheduled.id)
    assert moved is not None and moved.next_attempt.strftime("%Y-%m-%d %H:%M") == when

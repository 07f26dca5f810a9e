"""Delivery history: a real worker records delivered, deferred and failed outcomes; the admin lists them; pruning."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.mail import send_mail
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_mailqueue.admin.records import COUNT_AHEAD, DeliveryRecordAdmin
from django_mailqueue.models import DeliveryRecord
from django_mailqueue.stores import get_store
from tests.admin.conftest import ORM_STORE

HISTORY = "admin:django_mailqueue_deliveryrecord_changelist"


def recipients(client: Client, **params: str) -> set[str]:
    """The recipients of the history records a list page shows."""
    html = client.get(reverse(HISTORY), params).content.decode()
    return {cell.replace("<wbr>", "") for cell in re.findall(r'<td class="field-to">(.*?)</td>', html)}


@pytest.mark.django_db(transaction=True)
def test_a_worker_run_leaves_a_record_per_outcome_listed_in_the_admin(mail_world: Any, operator_client: Client) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(ORM_STORE)):
        send_mail(
            "Quarterly report",
            "Body.\n",
            "sender@origin.test",
            ["someone@dest.test", "greylisted@dest.test", "rejected@dest.test"],
        )
        (item,) = get_store().list()
        call_command("mailqueue_work", "--once", stdout=StringIO(), stderr=StringIO())

        records = {r.recipient: r for r in DeliveryRecord.objects.filter(item_id=item.id)}
        assert set(records) == {"someone@dest.test", "greylisted@dest.test", "rejected@dest.test"}
        delivered, deferred, failed = (
            records["someone@dest.test"],
            records["greylisted@dest.test"],
            records["rejected@dest.test"],
        )
        assert (delivered.state, delivered.reply_code) == ("delivered", 250)
        assert (deferred.state, deferred.reply_code, deferred.reply_status) == ("deferred", 451, "4.7.1")
        assert (failed.state, failed.reply_code, failed.reply_status) == ("failed", 550, "5.1.1")
        for record in records.values():
            assert record.message_id == item.message_id and record.sender == "sender@origin.test"
            assert record.attempt == 1 and record.domain == "dest.test" and record.queue == "default"
            assert record.remote_mta and record.recorded <= datetime.now(UTC)
        # the failure DSN went back to the sender: its delivery is recorded too
        dsn = DeliveryRecord.objects.get(recipient="sender@origin.test")
        assert (dsn.sender, dsn.state) == ("", "delivered")

        # the history pages
        everyone = {"someone@dest.test", "greylisted@dest.test", "rejected@dest.test", "sender@origin.test"}
        assert recipients(operator_client) == everyone
        assert recipients(operator_client, state__exact="failed") == {"rejected@dest.test"}
        assert "550 5.1.1 No such user here" in operator_client.get(reverse(HISTORY)).content.decode()
        assert recipients(operator_client, q="greylisted") == {"greylisted@dest.test"}
        assert recipients(operator_client, q=str(item.id)) == everyone - {"sender@origin.test"}
        # the item's id as the rows show it: its first 8 characters, linked to the item while it is queued
        page = operator_client.get(reverse(HISTORY)).content.decode()
        item_url = reverse("admin:django_mailqueue_queueditem_change", args=[item.id])
        assert f'<a href="{item_url}" title="{item.id}" class="mq-item-link">{item.id.hex[:8]}…</a>' in page
        assert recipients(operator_client, q=item.id.hex[:8]) == everyone - {"sender@origin.test"}
        assert recipients(operator_client, q=item.id.hex[:8] + "…") == everyone - {"sender@origin.test"}
        assert re.search(r'class="field-recorded_at[^"]*"><a href="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d</a>', page)
        assert '<span title="the null sender (a DSN)">&lt;&gt;</span>' in page  # the DSN's row
        dsn_item = f'<span title="{dsn.item_id} (no longer queued)">{dsn.item_id.hex[:8]}…</span>'
        assert dsn_item in page  # delivered: no longer queued
        assert recipients(operator_client, q=item.message_id.strip("<>")) == everyone - {"sender@origin.test"}
        assert recipients(operator_client, domain="origin.test") == {"sender@origin.test"}
        assert recipients(operator_client, queue="default") == everyone
        # the date filter's "Today" link, as DateFieldListFilter writes it
        today = str(datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0))
        assert recipients(operator_client, recorded__gte=today) == everyone
        assert recipients(operator_client, recorded__lt=today) == set()
        detail = operator_client.get(reverse("admin:django_mailqueue_deliveryrecord_change", args=[failed.pk]))
        assert detail.status_code == 200 and "No such user here" in detail.content.decode()

        # the item waits on for the greylisted recipient: deferred, with its reply, in the queue's pages
        queue_page = operator_client.get(reverse("admin:django_mailqueue_queueditem_changelist")).content.decode()
        assert "mq-state-deferred" in queue_page and "451 4.7.1" in queue_page
        overview = operator_client.get(reverse("admin:django_mailqueue_queueditem_overview")).content.decode()
        assert 'id="mq-failed-24h">2<' not in overview  # one failure, one DSN delivered
        assert 'id="mq-failed-24h">1<' in overview and 'id="mq-deferred-24h">1<' in overview
        assert 'id="mq-delivered-24h">2<' in overview


def record(recorded: datetime, recipient: str) -> DeliveryRecord:
    return DeliveryRecord.objects.create(
        item_id="6f1c5e5e-0000-4000-8000-000000000000",
        recipient=recipient,
        domain="dest.test",
        queue="default",
        state="delivered",
        attempt=1,
        recorded=recorded,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("batch", ["5000", "1"])
def test_pruning_removes_exactly_the_records_older_than_history_days(settings: Any, batch: str) -> None:
    settings.MAILQUEUE = {"HISTORY_DAYS": 30}
    now = datetime.now(UTC)
    old = [
        record(now - timedelta(days=400), "ancient@dest.test"),
        record(now - timedelta(days=31), "old@dest.test"),
        record(now - timedelta(days=30, minutes=5), "just-too-old@dest.test"),
    ]
    kept = [
        record(now - timedelta(days=30) + timedelta(minutes=5), "just-young-enough@dest.test"),
        record(now - timedelta(days=1), "yesterday@dest.test"),
        record(now, "now@dest.test"),
    ]
    out = StringIO()
    call_command("mailqueue_prune_history", "--batch", batch, stdout=out)
    assert "3 history records older than 30 days deleted" in out.getvalue()
    assert set(DeliveryRecord.objects.values_list("recipient", flat=True)) == {r.recipient for r in kept}
    assert not DeliveryRecord.objects.filter(pk__in=[r.pk for r in old]).exists()


@pytest.mark.django_db
def test_history_days_zero_keeps_none(settings: Any) -> None:
    settings.MAILQUEUE = {"HISTORY_DAYS": 0}
    now = datetime.now(UTC)
    for days in (0, 1, 45):
        record(now - timedelta(days=days, seconds=1), f"r{days}@dest.test")
    call_command("mailqueue_prune_history", stdout=StringIO())
    assert not DeliveryRecord.objects.exists()


@pytest.mark.django_db
def test_a_long_history_is_counted_only_to_a_bound_and_its_filters_list_no_values(admin_client: Client) -> None:
    now = datetime.now(UTC)
    DeliveryRecord.objects.bulk_create(
        DeliveryRecord(
            item_id="6f1c5e5e-0000-4000-8000-000000000000",
            recipient=f"r{n}@{'rare' if n == 7 else 'dest'}.test",
            domain="rare.test" if n == 7 else "dest.test",
            queue="bulk" if n % 2 else "default",
            state="delivered",
            attempt=1,
            recorded=now - timedelta(seconds=n),
        )
        for n in range(COUNT_AHEAD + 250)
    )
    with CaptureQueriesContext(connection) as captured:
        page = admin_client.get(reverse(HISTORY)).content.decode()
    bound = DeliveryRecordAdmin.list_per_page + COUNT_AHEAD
    assert f"more than {bound} delivery records" in page
    history = [q["sql"] for q in captured.captured_queries if "mailqueue_history" in q["sql"]]
    assert history and all("DISTINCT" not in sql for sql in history), history
    counts = [sql for sql in history if "COUNT(" in sql]
    assert counts and all("LIMIT" in sql for sql in counts), counts
    # a page further on counts further
    assert f"more than {bound + 100}" in admin_client.get(reverse(HISTORY), {"p": "2"}).content.decode()
    # a deep page's rows are read by their keys (the page's keys first, from the index alone), in the list's
    # order; a first page's straight from the index
    for params, first, keys_first in (({"p": "12"}, 1100, True), ({"p": "3", "queue": "default"}, 400, False)):
        with CaptureQueriesContext(connection) as captured:
            html = admin_client.get(reverse(HISTORY), params).content.decode()
        shown = [cell.replace("<wbr>", "") for cell in re.findall(r'<td class="field-to">(.*?)</td>', html)]
        step = 2 if "queue" in params else 1
        assert shown == [f"r{n}@{'rare' if n == 7 else 'dest'}.test" for n in range(first, first + 100 * step, step)]
        rows = [q["sql"] for q in captured.captured_queries if '"mailqueue_history"."reply_text"' in q["sql"]]
        assert len(rows) == 1 and ("OFFSET" not in rows[0] and " IN (" in rows[0]) is keys_first, rows
    # the last page, counted whole: the count is exact once the bound is not reached
    last = admin_client.get(reverse(HISTORY), {"p": "13"}).content.decode()
    assert f"{COUNT_AHEAD + 250} delivery records" in last and "more than" not in last
    # the queue and domain filters: a box to type a value in, kept with the others
    filtered = admin_client.get(reverse(HISTORY), {"domain": "rare.test", "state__exact": "delivered"})
    html = filtered.content.decode()
    assert "1 delivery record" in html and 'name="domain" value="rare.test"' in html
    assert '<input type="hidden" name="state__exact" value="delivered">' in html
    assert recipients(admin_client, queue="default", domain="rare.test") == set()
    assert recipients(admin_client, queue="bulk", domain="rare.test") == {"r7@rare.test"}


@pytest.mark.django_db
def test_a_record_whose_lease_was_lost_says_so_beside_its_state(admin_client: Client) -> None:
    now = datetime.now(UTC)
    for n, (possibly, lost) in enumerate([(False, False), (True, False), (False, True), (True, True)]):
        DeliveryRecord.objects.create(
            item_id="6f1c5e5e-0000-4000-8000-000000000001",
            recipient=f"r{n}@dest.test",
            domain="dest.test",
            queue="default",
            state="delivered",
            attempt=1,
            possibly_delivered=possibly,
            lease_lost=lost,
            recorded=now - timedelta(seconds=n),
        )
    html = admin_client.get(reverse(HISTORY)).content.decode()
    states = [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", cell)).strip()
        for cell in re.findall(r'<td class="field-outcome">(.*?)</td>', html, re.S)
    ]
    assert states == [
        "delivered",
        "delivered possibly delivered",
        "delivered lease lost",
        "delivered possibly delivered lease lost",
    ], states

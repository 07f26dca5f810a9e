"""Who may see and do what: view permission for the pages, one permission per action, CSRF on every change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_mailqueue.core.items import Completion, NewItem, QueueItem, RecipientOutcome, RecipientState, Reply
from django_mailqueue.stores.base import QueueStore
from tests.admin.conftest import PASSWORD, make_staff
from tests.admin.queue_data import Queue

pytestmark = pytest.mark.django_db

LIST = "admin:django_mailqueue_queueditem_changelist"
ACTION = "admin:django_mailqueue_queueditem_action"


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def forged_posts(queue: Queue) -> list[dict[str, object]]:
    """Each action, as a POST that would carry it out at once (confirmed, with a valid time)."""
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%d")
    return [
        {"action": "send_now", "item": [str(queue.scheduled.id)]},
        {
            "action": "reschedule",
            "item": [str(queue.scheduled.id)],
            "confirm": "yes",
            "at_0": tomorrow,
            "at_1": "00:00",
        },
        {"action": "reschedule", "item": [str(queue.scheduled.id)]},
        {"action": "cancel", "item": [str(queue.scheduled.id), str(queue.due[0].id)], "confirm": "yes"},
        {"action": "cancel", "item": [str(queue.scheduled.id)]},
        {"action": "cancel", "select_across": "1", "filters": "", "confirm": "yes"},
        {"action": "send_now", "select_across": "1", "filters": "state=scheduled", "confirm": "yes"},
    ]


def unchanged(store: QueueStore, queue: Queue) -> bool:
    return store.get(queue.scheduled.id) == queue.scheduled and store.get(queue.due[0].id) == queue.due[0]


def test_a_view_only_user_sees_the_pages_and_no_action(viewer: User, queue: Queue) -> None:
    client = client_for(viewer)
    listing = client.get(reverse(LIST))
    assert listing.status_code == 200
    html = listing.content.decode()
    assert str(queue.due[0].id) in html
    assert 'name="action"' not in html and 'type="checkbox"' not in html and "Send now" not in html
    item = client.get(reverse("admin:django_mailqueue_queueditem_change", args=[queue.scheduled.id]))
    assert item.status_code == 200
    html = item.content.decode()
    assert "Reminder: renew" in html
    assert 'name="action"' not in html and "Send now" not in html and "Cancel…" not in html
    assert client.get(reverse("admin:django_mailqueue_queueditem_overview")).status_code == 200
    assert client.get(reverse("admin:django_mailqueue_deliveryrecord_changelist")).status_code == 200


def test_a_forged_post_of_each_action_is_refused_without_its_permission(
    viewer: User, queue: Queue, store: QueueStore
) -> None:
    client = client_for(viewer)
    for data in forged_posts(queue):
        response = client.post(reverse(ACTION), data)
        assert response.status_code == 403, data
    assert unchanged(store, queue)
    assert not LogEntry.objects.exists()


@pytest.mark.parametrize(
    ("codename", "allowed"),
    [("send_now_queueditem", "send_now"), ("reschedule_queueditem", "reschedule"), ("cancel_queueditem", "cancel")],
)
def test_each_action_takes_its_own_permission(queue: Queue, store: QueueStore, codename: str, allowed: str) -> None:
    client = client_for(make_staff("one-perm", "view_queueditem", codename))
    html = client.get(reverse(LIST)).content.decode()
    assert f'<option value="{allowed}">' in html
    for other in {"send_now", "reschedule", "cancel"} - {allowed}:
        assert f'<option value="{other}">' not in html
        for data in forged_posts(queue):
            if data["action"] == other:
                assert client.post(reverse(ACTION), data).status_code == 403
    assert unchanged(store, queue)
    allowed_post = next(d for d in forged_posts(queue) if d["action"] == allowed)
    assert client.post(reverse(ACTION), allowed_post).status_code == 302
    assert not unchanged(store, queue)


def test_viewing_needs_the_view_permission(queue: Queue) -> None:
    client = client_for(make_staff("nobody"))
    for name in ("changelist", "overview"):
        assert client.get(reverse(f"admin:django_mailqueue_queueditem_{name}")).status_code == 403
    assert client.get(reverse("admin:django_mailqueue_queueditem_change", args=[queue.due[0].id])).status_code == 403
    # the action permissions alone do not open the queue
    cancel_only = client_for(make_staff("cancel-only", "cancel_queueditem"))
    assert cancel_only.get(reverse(LIST)).status_code == 403
    assert cancel_only.post(reverse(ACTION), forged_posts(queue)[3]).status_code == 403


def test_anonymous_and_non_staff_users_go_to_the_login_page(queue: Queue, store: QueueStore) -> None:
    anonymous = Client()
    for response in (anonymous.get(reverse(LIST)), anonymous.post(reverse(ACTION), forged_posts(queue)[3])):
        assert response.status_code == 302 and reverse("admin:login") in response["Location"]
    member = User.objects.create_user("member", password=PASSWORD)
    member_client = client_for(member)
    assert reverse("admin:login") in member_client.post(reverse(ACTION), forged_posts(queue)[0])["Location"]
    assert unchanged(store, queue)


def test_a_post_without_csrf_token_is_refused(operator: User, queue: Queue, store: QueueStore) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    for data in forged_posts(queue):
        response = client.post(reverse(ACTION), data)
        assert response.status_code == 403, data
        assert b"CSRF" in response.content
    assert unchanged(store, queue)
    # with the token from the page, the same POST goes through
    page = client.get(reverse(LIST))
    token = page.context["csrf_token"]
    response = client.post(reverse(ACTION), {**forged_posts(queue)[0], "csrfmiddlewaretoken": str(token)})
    assert response.status_code == 302
    assert not unchanged(store, queue)


def test_the_history_is_read_only(operator: User, queue: Queue) -> None:
    from django_mailqueue.models import DeliveryRecord

    record = DeliveryRecord.objects.create(
        item_id=queue.due[0].id,
        recipient="bob@dest.test",
        domain="dest.test",
        queue="default",
        state="delivered",
        attempt=1,
        recorded="2030-01-01T00:00:00Z",
    )
    superuser = client_for(make_staff("root", superuser=True))
    assert superuser.get(reverse("admin:django_mailqueue_deliveryrecord_add")).status_code == 403
    change = superuser.post(
        reverse("admin:django_mailqueue_deliveryrecord_change", args=[record.pk]), {"state": "failed"}
    )
    assert change.status_code == 403
    delete = superuser.post(reverse("admin:django_mailqueue_deliveryrecord_delete", args=[record.pk]), {"post": "yes"})
    assert delete.status_code == 403
    page = superuser.get(reverse("admin:django_mailqueue_deliveryrecord_change", args=[record.pk]))
    assert page.status_code == 200 and b'type="submit"' not in page.content.split(b'id="content-main"')[1]
    record.refresh_from_db()
    assert record.state == "delivered"


def kept_failed(store: QueueStore) -> QueueItem:
    """An item a worker failed and kept (`KEEP_FAILED`), as `complete` keeps it."""
    now = datetime.now(UTC)
    added = store.add(
        NewItem("billing@origin.test", ("client@dest.test",), b"Subject: x\r\n\r\nx\r\n"), now=now - timedelta(days=3)
    )
    (item,) = store.claim(owner="w", now=now, lease_expires=now + timedelta(minutes=5))  # the earliest due: it
    assert item.id == added.id
    refused = RecipientOutcome("client@dest.test", RecipientState.FAILED, Reply(550, "5.7.1", "Account expired"))
    completion = Completion((refused,), next_attempt=now, now=now, keep_failed=True)
    kept = store.complete(item.id, owner="w", revision=item.revision, completion=completion)
    assert kept is not None and kept.kept
    return kept


def test_send_again_takes_its_own_permission(queue: Queue, store: QueueStore) -> None:
    kept = kept_failed(store)
    post = {"action": "send_again", "item": [str(kept.id)]}
    # the other actions' permissions do not send a failed item again
    others = client_for(make_staff("others", "view_queueditem", "send_now_queueditem", "reschedule_queueditem"))
    assert '<option value="send_again">' not in others.get(reverse(LIST)).content.decode()
    assert others.post(reverse(ACTION), post).status_code == 403
    assert others.post(reverse(ACTION), {"action": "send_now", "item": [str(kept.id)]}).status_code == 302
    assert store.get(kept.id) == kept  # "send now" leaves a failed item as it is
    client = client_for(make_staff("again", "view_queueditem", "send_again_queueditem"))
    listing = client.get(reverse(LIST), {"state": "failed"}).content.decode()
    assert '<option value="send_again">' in listing and str(kept.id) in listing
    # a ticked item is sent at once; one not failed is left as it is
    response = client.post(reverse(ACTION), {**post, "item": [str(kept.id), str(queue.scheduled.id)]}, follow=True)
    notes = [str(m) for m in response.context["messages"]]
    assert any("1 queued message sent again" in n for n in notes) and any("1 not failed" in n for n in notes)
    again = store.get(kept.id)
    assert again is not None and not again.kept and again.recipients[0].state is RecipientState.PENDING
    assert store.get(queue.scheduled.id) == queue.scheduled
    assert LogEntry.objects.filter(object_id=str(kept.id), change_message="Sent again.").count() == 1

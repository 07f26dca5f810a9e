"""The suppression list's admin pages, on the ORM and Redis stores: list and search, add by hand, remove after a
confirmation page; each with its own permission, CSRF on every change, the admin log."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_mailqueue.core.items import Reply, Suppression
from django_mailqueue.stores.base import QueueStore
from tests.admin.conftest import make_staff

pytestmark = pytest.mark.django_db

LIST = "admin:django_mailqueue_suppressedaddress_changelist"
ADD = "admin:django_mailqueue_suppressedaddress_add"
REMOVE = "admin:django_mailqueue_suppressedaddress_remove"
LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)
ITEM = uuid.uuid4()


def client_for(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


@pytest.fixture
def listed(store: QueueStore) -> list[Suppression]:
    now = datetime.now(UTC)
    entries = [
        Suppression(
            "gone@dest.test", Reply(550, "5.1.1", "No such user <here>"), now - timedelta(hours=2), uuid.uuid4()
        ),
        Suppression("Closed@other.test", Reply(None, "5.2.1", "closed account"), now - timedelta(hours=1)),
        Suppression("old@dest.test", Reply(550, "5.1.1", "No such user"), now - timedelta(days=400), uuid.uuid4()),
    ]
    store.suppress(entries)
    return entries


@pytest.fixture
def keeper(db: None) -> User:
    """Staff who may view, add to and remove from the list."""
    return make_staff(
        "keeper",
        "view_suppressedaddress",
        "add_suppressedaddress",
        "delete_suppressedaddress",
        "view_deliveryrecord",
    )


def test_the_list_shows_the_entries_that_apply_newest_first_and_searches(
    keeper: User, listed: list[Suppression]
) -> None:
    client = client_for(keeper)
    page = client.get(reverse(LIST))
    assert page.status_code == 200
    html = page.content.decode()
    assert html.index("Closed@other.test") < html.index("gone@dest.test")
    assert "old@dest.test" not in html  # listed more than DAYS (365) ago: no longer applies
    assert "550 5.1.1 No such user &lt;here&gt;" in html and "No such user <here>" not in html
    assert "by hand" in html and str(listed[0].item_id)[:8] in html
    assert "5.1.1, 5.1.10, 5.1.2, 5.2.1" in html and "365 days" in html
    assert page["Content-Security-Policy"].startswith("default-src 'none'")
    found = client.get(reverse(LIST), {"q": "OTHER.test"}).content.decode()
    assert "Closed@other.test" in found and "gone@dest.test" not in found
    assert "No listed address matches" in client.get(reverse(LIST), {"q": "zzz"}).content.decode()
    index = client.get(reverse("admin:index")).content.decode()
    assert "Suppression list" in index and reverse(ADD) in index


def test_an_address_is_added_by_hand(keeper: User, store: QueueStore) -> None:
    client = client_for(keeper)
    assert client.get(reverse(ADD)).status_code == 200
    response = client.post(
        reverse(ADD),
        {"addresses": "Someone@Example.ORG\n\nother@example.org\n", "status": "5.2.1", "reason": "ticket 12"},
    )
    assert response.status_code == 302 and response["Location"] == reverse(LIST)
    found = store.suppressed(["Someone@example.org", "other@example.org"], since=LONG_AGO)
    assert found["Someone@example.org"].reply == Reply(None, "5.2.1", "ticket 12")
    assert set(found) == {"Someone@example.org", "other@example.org"}
    logged = LogEntry.objects.filter(action_flag=ADDITION).values_list("object_repr", flat=True)
    assert sorted(logged) == ["Someone@example.org", "other@example.org"]


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"addresses": "good@example.org\nnot an address", "status": "5.1.1"}, "not an address SMTP can carry"),
        ({"addresses": "good@example.org", "status": "4.2.2"}, "not a permanent enhanced status code"),
        ({"addresses": "", "status": "5.1.1"}, "This field is required"),
    ],
)
def test_a_bad_add_lists_nothing_and_says_why(keeper: User, store: QueueStore, data: dict[str, str], said: str) -> None:
    response = client_for(keeper).post(reverse(ADD), data)
    assert response.status_code == 200 and said in response.content.decode()
    assert store.count_suppressed(since=LONG_AGO) == 0


def test_removing_asks_first_then_takes_the_address_off(
    keeper: User, store: QueueStore, listed: list[Suppression]
) -> None:
    client = client_for(keeper)
    asked = client.post(reverse(REMOVE), {"address": ["gone@dest.test"]})
    assert asked.status_code == 200
    assert "Take this address off the suppression list?" in asked.content.decode()
    assert "gone@dest.test" in store.suppressed(["gone@dest.test"], since=LONG_AGO)  # not yet
    done = client.post(reverse(REMOVE), {"address": ["gone@dest.test"], "confirm": "yes"})
    assert done.status_code == 302
    assert store.suppressed(["gone@dest.test", "Closed@other.test"], since=LONG_AGO).keys() == {"Closed@other.test"}
    assert LogEntry.objects.get(action_flag=DELETION).object_repr == "gone@dest.test"
    assert client.get(reverse(REMOVE)).status_code == 405


def test_each_page_takes_its_own_permission(store: QueueStore, listed: list[Suppression]) -> None:
    viewer = client_for(make_staff("viewer", "view_suppressedaddress"))
    html = viewer.get(reverse(LIST)).content.decode()
    assert "gone@dest.test" in html and 'name="address"' not in html and reverse(ADD) not in html
    assert viewer.get(reverse(ADD)).status_code == 403
    assert viewer.post(reverse(ADD), {"addresses": "x@example.org", "status": "5.1.1"}).status_code == 403
    assert viewer.post(reverse(REMOVE), {"address": ["gone@dest.test"], "confirm": "yes"}).status_code == 403
    queue_only = client_for(make_staff("queue", "view_queueditem"))
    assert queue_only.get(reverse(LIST)).status_code == 403
    assert store.count_suppressed(since=LONG_AGO) == 3 and not LogEntry.objects.exists()


def test_a_change_without_the_csrf_token_is_refused(keeper: User, store: QueueStore, listed: list[Suppression]) -> None:
    client = client_for(keeper, csrf=True)
    for url, data in (
        (reverse(ADD), {"addresses": "x@example.org", "status": "5.1.1"}),
        (reverse(REMOVE), {"address": ["gone@dest.test"], "confirm": "yes"}),
    ):
        response = client.post(url, data)
        assert response.status_code == 403 and b"CSRF" in response.content
    assert store.count_suppressed(since=LONG_AGO) == 3
    token = str(client.get(reverse(LIST)).context["csrf_token"])
    data = {"address": ["gone@dest.test"], "confirm": "yes", "csrfmiddlewaretoken": token}
    assert client.post(reverse(REMOVE), data).status_code == 302
    assert store.count_suppressed(since=LONG_AGO) == 2

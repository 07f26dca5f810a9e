"""Suspended destinations on the overview, and "resume now": its own permission, a confirmation, CSRF, the store."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_mailqueue.core.items import Completion, NewItem, QueueItem, RecipientOutcome, RecipientState, Reply
from django_mailqueue.stores.base import QueueStore
from tests.admin.conftest import make_staff

pytestmark = pytest.mark.django_db

OVERVIEW = "admin:django_mailqueue_queueditem_overview"
RESUME = "admin:django_mailqueue_queueditem_resume"
THROTTLED = Reply(421, "4.7.0", "Try again later, closing connection")


def client_for(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


@pytest.fixture
def resumer(db: None) -> User:
    return make_staff("resumer", "view_queueditem", "resume_suspension")


class Held:
    """gmail.example suspended, holding back an item never tried and one tried once; a mixed item, and one
    elsewhere, that it does not hold back; .outlook.example suspended too."""

    def __init__(self, store: QueueStore) -> None:
        self.now = datetime.now(UTC)
        self.until = self.now + timedelta(minutes=30)
        self.store = store
        self.deferred = self.tried_once("f@gmail.example")
        self.held = self.add("a@gmail.example", "b@GMAIL.example")
        self.mixed = self.add("c@gmail.example", "d@other.example")
        self.elsewhere = self.add("e@other.example")
        # an episode that ended, then a new one: two strikes
        store.suspend(
            "gmail.example",
            until=self.now - timedelta(minutes=1),
            reply=THROTTLED,
            now=self.now - timedelta(minutes=10),
        )
        self.suspension = store.suspend("gmail.example", until=self.until, reply=THROTTLED, now=self.now)
        store.suspend(".outlook.example", until=self.until, reply=Reply(451, "4.7.650", "rate limited"), now=self.now)
        assert store.defer_destination(["gmail.example"], until=self.until, now=self.now) == 2

    def add(self, *recipients: str) -> QueueItem:
        item = NewItem(sender="s@site.example", recipients=recipients, message=b"Subject: x\r\n\r\nx\r\n")
        return self.store.add(item, now=self.now)

    def tried_once(self, recipient: str) -> QueueItem:
        self.add(recipient)
        (claimed,) = self.store.claim(owner="w", now=self.now, lease_expires=self.now + timedelta(seconds=60))
        recorded = self.store.complete(
            claimed.id,
            owner="w",
            revision=claimed.revision,
            completion=Completion(
                (RecipientOutcome(recipient, RecipientState.PENDING, THROTTLED),), next_attempt=self.now
            ),
        )
        assert recorded is not None and recorded.attempts == 1
        return recorded


@pytest.fixture
def held(store: QueueStore) -> Held:
    return Held(store)


def test_the_overview_lists_suspended_destinations(resumer: User, held: Held) -> None:
    html = client_for(resumer).get(reverse(OVERVIEW)).content.decode()
    table = html.split('id="mq-suspended"')[1].split("</table>")[0]
    rows = re.findall(r'<tr class="mq-suspension">(.*?)</tr>', table, flags=re.S)
    assert len(rows) == 2
    outlook, gmail = rows  # by destination
    assert ".outlook.example" in outlook and "451 4.7.650 rate limited" in outlook
    assert "gmail.example" in gmail and "421 4.7.0 Try again later, closing connection" in gmail
    assert '<td class="mq-num">2</td>' in gmail  # strikes
    assert held.until.strftime("%Y-%m-%d %H:%M:%S") in gmail
    assert "?domain=gmail.example" in gmail and "?domain=" not in outlook  # a suffix names no one domain
    assert gmail.count("Resume now") == 1 and 'name="csrfmiddlewaretoken"' in gmail


def test_a_viewer_sees_them_and_cannot_resume(held: Held) -> None:
    viewer = client_for(make_staff("viewer", "view_queueditem"))
    html = viewer.get(reverse(OVERVIEW)).content.decode()
    assert "gmail.example" in html.split('id="mq-suspended"')[1] and "Resume now" not in html
    for data in ({"destination": "gmail.example"}, {"destination": "gmail.example", "confirm": "yes"}):
        assert viewer.post(reverse(RESUME), data).status_code == 403
    # the permission alone does not open the queue's pages
    assert client_for(make_staff("resume-only", "resume_suspension")).post(reverse(RESUME), data).status_code == 403
    assert [s.destination for s in held.store.suspensions(now=held.now)] == [".outlook.example", "gmail.example"]
    assert not LogEntry.objects.exists()


def test_resume_asks_first_then_resumes_through_the_store(resumer: User, held: Held) -> None:
    client = client_for(resumer)
    assert client.get(reverse(RESUME)).status_code == 405
    asked = client.post(reverse(RESUME), {"destination": "gmail.example"})
    assert asked.status_code == 200
    question = asked.content.decode()
    assert "Resume <strong>gmail.example</strong> now?" in question and "strike 2" in question
    assert "2 queued messages held back for gmail.example become due now." in question
    assert len(held.store.suspensions(now=held.now)) == 2  # nothing done yet

    done = client.post(reverse(RESUME), {"destination": "gmail.example", "confirm": "yes"})
    assert done.status_code == 302 and done["Location"] == reverse(OVERVIEW)
    assert [s.destination for s in held.store.suspensions(now=held.now)] == [".outlook.example"]
    after = datetime.now(UTC)
    for item, moved in ((held.held, True), (held.deferred, True), (held.mixed, False), (held.elsewhere, False)):
        now = held.store.get(item.id)
        assert now is not None
        assert (now.next_attempt <= after) is (moved or item.next_attempt <= after), item.recipients
        assert now.attempts == item.attempts
    resumed = held.store.get(held.held.id)
    assert resumed is not None and resumed.next_attempt <= after
    (entry,) = LogEntry.objects.all()
    assert entry.object_repr == "gmail.example" and "2 items due now" in entry.change_message
    # the next suspension starts again from one strike
    again = held.store.suspend("gmail.example", until=held.until, reply=THROTTLED, now=held.now)
    assert again.strikes == 1


def test_resuming_a_suffix_clears_it_and_leaves_the_items_to_their_time(resumer: User, held: Held) -> None:
    client = client_for(resumer)
    question = client.post(reverse(RESUME), {"destination": ".outlook.example"}).content.decode()
    assert "stay due at" in question
    assert client.post(reverse(RESUME), {"destination": ".outlook.example", "confirm": "yes"}).status_code == 302
    assert [s.destination for s in held.store.suspensions(now=held.now)] == ["gmail.example"]


def test_resuming_what_is_not_suspended_says_so(resumer: User, held: Held) -> None:
    client = client_for(resumer)
    response = client.post(reverse(RESUME), {"destination": "nowhere.example", "confirm": "yes"}, follow=True)
    assert "&#x27;nowhere.example&#x27; is not suspended (any more)." in response.content.decode()
    assert len(held.store.suspensions(now=held.now)) == 2


def test_resume_needs_the_csrf_token(resumer: User, held: Held) -> None:
    client = client_for(resumer, csrf=True)
    refused = client.post(reverse(RESUME), {"destination": "gmail.example", "confirm": "yes"})
    assert refused.status_code == 403 and b"CSRF" in refused.content
    assert len(held.store.suspensions(now=held.now)) == 2
    token = client.get(reverse(OVERVIEW)).context["csrf_token"]
    data = {"destination": "gmail.example", "confirm": "yes", "csrfmiddlewaretoken": str(token)}
    assert client.post(reverse(RESUME), data).status_code == 302
    assert len(held.store.suspensions(now=held.now)) == 1


def test_the_overview_lists_the_limits_in_force(resumer: User, store: QueueStore, settings: Any) -> None:
    settings.MAILQUEUE = {
        **settings.MAILQUEUE,
        "ROUTES": {"*": "mx", "corp.example": {"HOST": "relay.corp.example", "PORT": 587, "RATE": "14/s"}},
        "SHAPING": {".google.com": {"RATE": "20/s", "CONNECTIONS": 5}},
    }
    html = client_for(resumer).get(reverse(OVERVIEW)).content.decode()
    table = html.split('id="mq-limits"')[1].split("</table>")[0]
    rows = [
        re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in re.findall(r'<tr class="mq-limit">(.*?)</tr>', table)
    ]
    assert rows == [
        ["relay:relay.corp.example:587", "14/s", "-", "-", "60–3600 s", "5", "ROUTES[&quot;corp.example&quot;]"],
        [".google.com", "20/s", "5", "100", "60–3600 s", "5", "SHAPING[&quot;.google.com&quot;]"],
        ["*", "-", "10", "100", "60–3600 s", "5", "the defaults"],
    ]

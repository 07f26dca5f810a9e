"""The operator's commands: mailqueue_status, mailqueue_flush, mailqueue_cancel, mailqueue_prune_history."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import Completion, NewItem, RecipientOutcome, RecipientState, Reply
from django_mailqueue.models import DeliveryRecord
from django_mailqueue.stores import get_store

pytestmark = pytest.mark.django_db(transaction=True)
LATER = Reply(451, "4.7.1", "greylisted")


def add(recipient: str, *, queue: str = "default", later: float = 0) -> uuid.UUID:
    now = SystemClock().now()
    item = NewItem(
        sender="s@example.com",
        recipients=(recipient,),
        message=b"Subject: x\r\n\r\nx\r\n",
        queue=queue,
        not_before=now + timedelta(seconds=later) if later else None,
    )
    return get_store().add(item, now=now).id


def defer(item_id: uuid.UUID) -> None:
    store, now = get_store(), SystemClock().now()
    (item,) = store.claim(owner="w", now=now, lease_expires=now + timedelta(seconds=60), limit=50)
    assert item.id == item_id
    store.complete(
        item.id,
        owner="w",
        revision=item.revision,
        completion=Completion(
            (RecipientOutcome(item.recipients[0].address, RecipientState.PENDING, LATER),),
            next_attempt=now + timedelta(hours=1),
        ),
    )


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_status_counts_by_state_queue_and_domain() -> None:
    deferred = add("c@three.example")
    defer(deferred)
    add("a@one.example")
    add("b@two.example", queue="bulk", later=3600)
    data = json.loads(run("mailqueue_status", "--json"))
    assert data["total"] == 3
    assert data["by_state"] == {"due": 1, "scheduled": 1, "deferred": 1, "leased": 0, "failed": 0}
    assert data["by_queue"]["bulk"]["scheduled"] == 1
    assert data["deferred_by_domain"] == {"three.example": 1}
    assert data["oldest_due"]["queue"] == "default"
    text = run("mailqueue_status")
    assert "3 items" in text and "three.example" in text


def test_status_lists_the_suspended_destinations() -> None:
    store, now = get_store(), SystemClock().now()
    assert json.loads(run("mailqueue_status", "--json"))["suspended"] == []
    assert "suspended destinations: none" in run("mailqueue_status")
    throttled = Reply(421, "4.7.0", "Try again later, closing connection")
    # an episode that ended, then a new one: two strikes
    store.suspend(".google.com", until=now - timedelta(minutes=4), reply=throttled, now=now - timedelta(minutes=9))
    store.suspend(".google.com", until=now + timedelta(minutes=10), reply=throttled, now=now)
    store.suspend("over.example", until=now - timedelta(seconds=1), reply=LATER, now=now - timedelta(minutes=1))
    (suspended,) = json.loads(run("mailqueue_status", "--json"))["suspended"]
    assert suspended == {
        "destination": ".google.com",
        "until": (now + timedelta(minutes=10)).isoformat(),
        "since": (now - timedelta(minutes=9)).isoformat(),
        "strikes": 2,
        "reply": {"code": 421, "status": "4.7.0", "text": "Try again later, closing connection"},
    }
    lines = run("mailqueue_status").split("suspended destinations")[1].split("limits in force")[0].splitlines()
    (line,) = [line for line in lines if line.startswith("  ")]
    destination, _, until, *_ = line.split()
    assert (destination, until) == (".google.com", (now + timedelta(minutes=10)).isoformat(timespec="seconds"))
    assert "strike 2 since" in line and line.endswith(": 421 4.7.0 Try again later, closing connection")
    assert "over.example" not in "".join(lines)


def test_status_lists_the_limits_in_force(settings: Any) -> None:
    settings.MAILQUEUE = {
        "ROUTES": {
            "*": "mx",
            "corp.example": {"HOST": "relay.corp.example", "PORT": 587, "RATE": "14/s", "CONNECTIONS": 3},
        },
        "SHAPING": {".google.com": {"RATE": "20/s", "SUSPEND": 120}, "*": {"CONNECTIONS": 4}},
    }
    limits = {row["destination"]: row for row in json.loads(run("mailqueue_status", "--json"))["limits"]}
    assert list(limits) == ["relay:relay.corp.example:587", ".google.com", "*"]
    relay, google, every_other = limits.values()
    assert (relay["rate"], relay["connections"], relay["source"]) == ("14/s", 3, 'ROUTES["corp.example"]')
    assert (google["rate"], google["connections"], google["suspend"]) == ("20/s", 4, 120.0)  # "*"'s connections
    assert (every_other["rate"], every_other["connections"], every_other["source"]) == (None, 4, 'SHAPING["*"]')
    lines = run("mailqueue_status").split("limits in force")[1].splitlines()[1:]
    assert lines[0].split()[:3] == ["relay:relay.corp.example:587", "rate", "14/s,"]
    assert lines[1].split()[:3] == [".google.com", "rate", "20/s,"] and "suspensions 120–3600 s" in lines[1]
    assert lines[2].split()[:3] == ["*", "rate", "-,"] and lines[2].endswith('(SHAPING["*"])')


def test_flush_makes_deferred_mail_due_now() -> None:
    deferred = add("c@three.example")
    defer(deferred)
    scheduled = add("d@four.example", later=3600)
    assert "1 items due now" in run("mailqueue_flush")
    store, now = get_store(), SystemClock().now()
    item = store.get(deferred)
    assert item is not None and item.next_attempt <= now
    later = store.get(scheduled)
    assert later is not None and later.next_attempt > now
    assert "1 items due now" in run("mailqueue_flush", "--scheduled")


def test_cancel_drops_items_and_reports_unknown_ids() -> None:
    first, second = add("a@one.example"), add("b@two.example")
    assert f"cancelled {first}" in run("mailqueue_cancel", str(first))
    assert get_store().get(first) is None and get_store().get(second) is not None
    with pytest.raises(CommandError, match="no such item"):
        run("mailqueue_cancel", str(uuid.uuid4()))
    with pytest.raises(CommandError):
        run("mailqueue_cancel", "not-a-uuid")


def test_prune_history_removes_exactly_the_old_records() -> None:
    now = SystemClock().now()

    def record(days: float) -> DeliveryRecord:
        return DeliveryRecord.objects.create(
            item_id=uuid.uuid4(),
            recipient="r@x.example",
            domain="x.example",
            queue="default",
            state="delivered",
            attempt=1,
            recorded=now - timedelta(days=days),
        )

    old = [record(31), record(45)]
    kept = [record(29), record(1)]
    assert "2 history records" in run("mailqueue_prune_history", "--batch", "1")
    assert set(DeliveryRecord.objects.values_list("id", flat=True)) == {r.id for r in kept}
    assert all(not DeliveryRecord.objects.filter(id=r.id).exists() for r in old)
    assert "2 history records" in run("mailqueue_prune_history", "--days", "0")

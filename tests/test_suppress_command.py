"""mailqueue_suppress list/add/remove, and mailqueue_prune_history's prune of the list, run as an operator runs
them against every store: the ORM store on SQLite and on PostgreSQL, Redis, memory."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import Reply, Suppression
from django_mailqueue.stores import get_store
from django_mailqueue.stores.base import QueueStore
from tests.support.databases import DATABASES
from tests.test_queue_commands import store  # noqa: F401 (fixture: every store, as get_store() finds it)

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)
EPOCH_ON = SystemClock().now().replace(year=2000)


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("mailqueue_suppress", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_add_list_and_remove(store: QueueStore) -> None:  # noqa: F811
    out, _ = run("add", "Someone@Example.ORG", "other@example.org", "--status", "5.2.1", "--reason", "closed\naccount")
    assert "2 listed: Someone@example.org, other@example.org" in out
    listed = store.suppressed(["Someone@example.org", "other@example.org"], since=EPOCH_ON)
    assert set(listed) == {"Someone@example.org", "other@example.org"}
    entry = listed["other@example.org"]
    assert entry.reply == Reply(None, "5.2.1", "closed account") and entry.item_id is None

    item = uuid.uuid4()
    store.suppress([Suppression("bounced@x.test", Reply(550, "5.1.1", "No such user"), SystemClock().now(), item)])
    data = json.loads(run("list", "--json")[0])
    assert data["count"] == 3 and data["entries"][0] == {
        "address": "bounced@x.test",
        "status": "5.1.1",
        "code": 550,
        "reply": "No such user",
        "since": data["entries"][0]["since"],
        "item_id": str(item),
    }
    assert [e["address"] for e in json.loads(run("list", "--json", "--search", "EXAMPLE")[0])["entries"]] == [
        "Someone@example.org",
        "other@example.org",
    ]
    assert json.loads(run("list", "--json", "--limit", "1")[0])["count"] == 1
    text = run("list")[0]
    assert "bounced@x.test  5.1.1  since" in text and f"item {item}" in text and "550 5.1.1 No such user" in text
    assert "by hand" in text and text.rstrip().endswith("-- 3 addresses")

    out, _ = run("remove", "someone@EXAMPLE.org", "Someone@EXAMPLE.org", "nobody@example.org")
    assert "1 of 3 taken off the list" in out  # the local part keeps its case: someone@ is another address
    assert store.count_suppressed(since=EPOCH_ON) == 2
    assert "no address matches" in run("list", "--search", "nothing-like-it")[0]


def test_a_bad_address_or_status_adds_nothing(store: QueueStore) -> None:  # noqa: F811
    for args in (["good@example.org", "not an address"], ["good@example.org", "--status", "4.2.2"]):
        with pytest.raises(CommandError, match="nothing added"):
            run("add", *args)
    assert store.count_suppressed(since=EPOCH_ON) == 0
    assert "the list is empty" in run("list")[0]


def test_with_suppression_none_the_command_says_the_worker_does_not_read_the_list(
    store: QueueStore,  # noqa: F811
    settings: Any,
) -> None:
    with override_settings(MAILQUEUE={**settings.MAILQUEUE, "SUPPRESSION": None}):
        _, err = run("add", "a@example.org")
        assert "the worker does not read the list" in err
        assert json.loads(run("list", "--json")[0])["count"] == 1


def test_prune_history_drops_the_entries_older_than_days(store: QueueStore, settings: Any) -> None:  # noqa: F811
    settings.MAILQUEUE = {**settings.MAILQUEUE, "SUPPRESSION": {"DAYS": 30}}
    store = get_store()  # a change of MAILQUEUE builds the store again (in memory: an empty one)
    now = SystemClock().now()
    reply = Reply(550, "5.1.1", "No such user")
    store.suppress(
        [
            Suppression("old@x.test", reply, now - timedelta(days=31)),
            Suppression("new@x.test", reply, now - timedelta(days=29)),
        ]
    )
    # the old entry no longer applies, nor shows, even before it is pruned
    assert [e["address"] for e in json.loads(run("list", "--json")[0])["entries"]] == ["new@x.test"]
    out = StringIO()
    call_command("mailqueue_prune_history", stdout=out)
    assert "1 suppression list entries older than 30 days deleted" in out.getvalue()
    assert [e.address for e in store.list_suppressed(since=EPOCH_ON)] == ["new@x.test"]

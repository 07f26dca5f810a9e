"""mailqueue_list, mailqueue_cancel and mailqueue_retry, run as an operator runs them, against every store:
the ORM store on SQLite and on PostgreSQL, Redis, memory. `--json` output is parsed; every filter is checked."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_mailqueue import selection
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import Completion, NewItem, QueueItem, RecipientOutcome, RecipientState, Reply
from django_mailqueue.stores import get_store
from django_mailqueue.stores.base import QueueStore
from tests.support.databases import DATABASES
from tests.support.services import drop_redis_keys

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)

GREYLISTED = Reply(451, "4.7.1", "Greylisted, try again later")
ACCEPTED = Reply(250, "2.0.0", "OK")


@pytest.fixture(params=["orm-sqlite", "orm-postgres", "redis", "memory"])
def store(request: pytest.FixtureRequest, settings: Any) -> Iterator[QueueStore]:
    """The store the commands find through `get_store()`."""
    kind = request.param
    if kind == "orm-sqlite":
        config: dict[str, Any] = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "default"}}
    elif kind == "orm-postgres":
        alias = request.getfixturevalue("pg_alias")
        config = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": alias}}
    elif kind == "redis":
        url = request.getfixturevalue("redis_url")
        prefix = f"mq-commands-test-{uuid.uuid4().hex[:12]}:"
        config = {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {"url": url, "key_prefix": prefix}}
    else:
        config = {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}
    settings.MAILQUEUE = {"STORE": config}
    try:
        yield get_store()
    finally:
        if kind == "redis":
            drop_redis_keys(config["OPTIONS"]["url"], config["OPTIONS"]["key_prefix"])


@dataclass
class Queue:
    """Four items, one in each state, with what tells them apart."""

    due: uuid.UUID  # default queue, ann@alpha.example, queued 3 h ago
    scheduled: uuid.UUID  # bulk, bob@beta.example, queued 10 min ago, due in 1 h
    deferred: uuid.UUID  # default, cat@alpha.example (451) and dan@gamma.example (250), queued 2 days ago
    leased: uuid.UUID  # transactional, from <>, eve@delta.example, queued 30 min ago, held by a worker

    @property
    def all(self) -> set[uuid.UUID]:
        return {self.due, self.scheduled, self.deferred, self.leased}


def new(
    recipients: tuple[str, ...],
    *,
    sender: str = "s@example.com",
    queue: str = "default",
    not_before: datetime | None = None,
) -> NewItem:
    return NewItem(
        sender=sender,
        recipients=recipients,
        message=b"Subject: x\r\n\r\nx\r\n",
        queue=queue,
        not_before=not_before,
        subject="x",
    )


def attempted(store: QueueStore, claimed: QueueItem, *outcomes: RecipientOutcome, next_attempt: datetime) -> None:
    """Record an attempt on an item claimed by "w", as a worker would."""
    completion = Completion(outcomes, next_attempt=next_attempt)
    store.complete(claimed.id, owner="w", revision=claimed.revision, completion=completion)


@pytest.fixture
def queue(store: QueueStore) -> Queue:
    now = SystemClock().now()
    deferred = store.add(new(("cat@alpha.example", "dan@gamma.example")), now=now - timedelta(days=2))
    (claimed,) = store.claim(owner="w", now=now, lease_expires=now + timedelta(minutes=5))
    attempted(
        store,
        claimed,
        RecipientOutcome("cat@alpha.example", RecipientState.PENDING, GREYLISTED),
        RecipientOutcome("dan@gamma.example", RecipientState.DELIVERED, ACCEPTED, "mx.gamma.example"),
        next_attempt=now + timedelta(hours=1),
    )
    leased = store.add(new(("eve@delta.example",), sender="", queue="transactional"), now=now - timedelta(minutes=30))
    (held,) = store.claim(owner="worker-7", now=now, lease_expires=now + timedelta(hours=1))
    assert held.id == leased.id
    due = store.add(new(("ann@alpha.example",)), now=now - timedelta(hours=3))
    scheduled = store.add(
        new(("bob@beta.example",), queue="bulk", not_before=now + timedelta(hours=1)), now=now - timedelta(minutes=10)
    )
    return Queue(due=due.id, scheduled=scheduled.id, deferred=deferred.id, leased=leased.id)


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def listed(*args: str) -> dict[str, Any]:
    return json.loads(run("mailqueue_list", "--json", *args))  # type: ignore[no-any-return]


def listed_ids(*args: str) -> list[uuid.UUID]:
    return [uuid.UUID(item["id"]) for item in listed(*args)["items"]]


def stable(items: list[dict[str, Any]]) -> dict[uuid.UUID, dict[str, Any]]:
    """Listed items by id, without what changes as time passes."""
    return {uuid.UUID(i["id"]): {k: v for k, v in i.items() if k != "age_seconds"} for i in items}


def acted(command: str, *args: str) -> dict[str, set[uuid.UUID]]:
    report = json.loads(run(command, "--json", *args))
    assert report["counts"] == {k: len(v) for k, v in report["items"].items()}
    return {outcome: {uuid.UUID(i) for i in ids} for outcome, ids in report["items"].items()}


# --- mailqueue_list ------------------------------------------------------------------------


def test_list_json_gives_every_item_with_its_recipients(queue: Queue) -> None:
    data = listed()
    items = {uuid.UUID(item["id"]): item for item in data["items"]}
    assert set(items) == queue.all
    assert data["count"] == 4 and data["more"] is False
    assert data["bytes"] == sum(item["size"] for item in data["items"]) > 0
    assert {i: items[i]["state"] for i in items} == {
        queue.due: "due",
        queue.scheduled: "scheduled",
        queue.deferred: "deferred",
        queue.leased: "leased",
    }
    deferred = items[queue.deferred]
    assert deferred["attempts"] == 1 and deferred["queue"] == "default" and deferred["sender"] == "s@example.com"
    assert 2 * 86400 - 60 < deferred["age_seconds"] < 2 * 86400 + 60
    assert deferred["recipients"] == [
        {
            "address": "cat@alpha.example",
            "state": "pending",
            "remote_mta": "",
            "reply": {"code": 451, "status": "4.7.1", "text": "Greylisted, try again later"},
        },
        {
            "address": "dan@gamma.example",
            "state": "delivered",
            "remote_mta": "mx.gamma.example",
            "reply": {"code": 250, "status": "2.0.0", "text": "OK"},
        },
    ]
    leased = items[queue.leased]
    assert leased["sender"] == "" and leased["owner"] == "worker-7" and leased["lease_expires"]
    assert items[queue.due]["owner"] is None and items[queue.due]["recipients"][0]["reply"] is None
    # the store's list order: the earliest next attempt first
    assert listed_ids() == [queue.due, queue.leased, queue.deferred, queue.scheduled]


def test_list_text_is_a_mailq(queue: Queue) -> None:
    text = run("mailqueue_list")
    lines = text.splitlines()
    assert lines[0].startswith("-Queue ID-")
    assert lines[-1].startswith("-- 4 items, ")
    (leased_line,) = [line for line in lines if line.startswith(str(queue.leased))]
    assert " <> " in leased_line and "leased" in leased_line and "held by worker-7" in leased_line
    (deferred_line,) = [line for line in lines if line.startswith(str(queue.deferred))]
    assert "<s@example.com>" in deferred_line and "deferred" in deferred_line and "2d00h" in deferred_line
    assert "next in 59m" in deferred_line or "next in 1h00m" in deferred_line
    at = lines.index(deferred_line)
    assert lines[at + 1].split() == [
        "pending",
        "cat@alpha.example",
        "(451",
        "4.7.1",
        "Greylisted,",
        "try",
        "again",
        "later)",
    ]
    assert lines[at + 2].split() == ["delivered", "dan@gamma.example", "(250", "2.0.0", "OK)"]
    (due_line,) = [line for line in lines if line.startswith(str(queue.due))]
    assert "3h00m" in due_line and "due now" in due_line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--state", "deferred"], {"deferred"}),
        (["--state", "due,scheduled"], {"due", "scheduled"}),
        (["--state", "leased"], {"leased"}),
        (["--queue", "bulk"], {"scheduled"}),
        (["--queue", "transactional"], {"leased"}),
        (["--domain", "ALPHA.example"], {"due", "deferred"}),
        (["--domain", "someone@gamma.example"], {"deferred"}),
        (["--domain", "nowhere.example"], set()),
        (["--search", "BOB"], {"scheduled"}),
        (["--search", "@ALPHA.example"], {"due", "deferred"}),
        (["--search", "s@example.com"], set()),  # never the sender
        (["--older-than", "1h"], {"due", "deferred"}),
        (["--older-than", "1d"], {"deferred"}),
        (["--older-than", "20m"], {"due", "deferred", "leased"}),
        (["--older-than", "1d", "--domain", "alpha.example", "--state", "deferred"], {"deferred"}),
        (["--older-than", "1h", "--queue", "bulk"], set()),
    ],
)
def test_list_filters(queue: Queue, args: list[str], expected: set[str]) -> None:
    assert set(listed_ids(*args)) == {getattr(queue, name) for name in expected}
    text = run("mailqueue_list", *args)
    assert {line.split()[0] for line in text.splitlines()[1:-1] if not line.startswith(" ")} == {
        str(getattr(queue, name)) for name in expected
    } or (not expected and text.strip() == "mailqueue: no items match")


def test_list_by_id_limit_and_an_empty_queue(store: QueueStore, queue: Queue) -> None:
    assert listed_ids(str(queue.deferred), str(uuid.uuid4())) == [queue.deferred]
    assert listed_ids(str(queue.deferred), "--queue", "bulk") == []
    first_two = listed("--limit", "2")
    assert [uuid.UUID(i["id"]) for i in first_two["items"]] == [queue.due, queue.leased]
    assert first_two["count"] == 2 and first_two["more"] is True
    assert "(--limit 2; more match)" in run("mailqueue_list", "--limit", "2")
    assert listed("--limit", "4")["more"] is False
    for item_id in queue.all:
        store.cancel(item_id)
    assert run("mailqueue_list").strip() == "mailqueue: the queue is empty"
    empty = listed()
    assert empty == {"now": empty["now"], "items": [], "count": 0, "bytes": 0, "more": False}


def test_list_walks_a_queue_larger_than_a_batch(store: QueueStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selection, "BATCH", 3)
    now = SystemClock().now()
    added = store.add_many([new((f"r{i}@{'odd' if i % 2 else 'even'}.example",)) for i in range(11)], now=now)
    assert listed_ids() == [item.id for item in added]
    assert listed_ids("--domain", "odd.example") == [item.id for item in added[1::2]]
    assert listed("--limit", "7")["count"] == 7
    cancelled = acted("mailqueue_cancel", "--domain", "even.example")
    assert cancelled == {"cancelled": {item.id for item in added[0::2]}}
    assert listed_ids() == [item.id for item in added[1::2]]


def test_list_refuses_a_bad_filter(queue: Queue) -> None:
    for args in (
        ["--older-than", "5x"],
        ["--older-than", ""],
        ["--state", "bogus"],
        ["--limit", "0"],
        ["--domain", "@"],
        ["not-a-uuid"],
    ):
        with pytest.raises(CommandError):
            run("mailqueue_list", *args)


def test_list_escapes_control_characters_in_a_reply(store: QueueStore) -> None:
    now = SystemClock().now()
    store.add(new(("x@evil.example",)), now=now)
    (claimed,) = store.claim(owner="w", now=now, lease_expires=now + timedelta(minutes=5))
    escape = Reply(451, "4.0.0", "busy \x1b[2J now")
    attempted(store, claimed, RecipientOutcome("x@evil.example", RecipientState.PENDING, escape), next_attempt=now)
    text = run("mailqueue_list")
    assert "\x1b" not in text and "busy \\x1b[2J now" in text
    assert listed()["items"][0]["recipients"][0]["reply"]["text"] == "busy \x1b[2J now"


# --- mailqueue_cancel and mailqueue_retry ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["mailqueue_cancel", "mailqueue_retry"])
def test_an_action_needs_ids_a_filter_or_all(store: QueueStore, queue: Queue, command: str) -> None:
    before = stable(listed()["items"])
    with pytest.raises(CommandError, match="--all for every item"):
        run(command)
    with pytest.raises(CommandError, match="--all for every item"):
        run(command, "--json", "--dry-run")
    assert stable(listed()["items"]) == before


@pytest.mark.parametrize(
    ("args", "cancel", "retry"),
    [
        # (filters, what cancel selects, what retry does: made due / already due / leased)
        (["--state", "deferred"], {"deferred"}, ({"deferred"}, set(), set())),
        (["--state", "due,leased"], {"due", "leased"}, (set(), {"due"}, {"leased"})),
        (["--queue", "bulk"], {"scheduled"}, ({"scheduled"}, set(), set())),
        (["--domain", "Alpha.Example"], {"due", "deferred"}, ({"deferred"}, {"due"}, set())),
        (["--search", "eve@"], {"leased"}, (set(), set(), {"leased"})),
        (["--search", "BOB"], {"scheduled"}, ({"scheduled"}, set(), set())),
        (["--older-than", "1d"], {"deferred"}, ({"deferred"}, set(), set())),
        (["--older-than", "15m"], {"due", "deferred", "leased"}, ({"deferred"}, {"due"}, {"leased"})),
        (["--all"], {"due", "scheduled", "deferred", "leased"}, ({"deferred", "scheduled"}, {"due"}, {"leased"})),
        (["--domain", "alpha.example", "--older-than", "1d"], {"deferred"}, ({"deferred"}, set(), set())),
    ],
)
def test_each_filter_selects_for_cancel_and_retry(
    queue: Queue, args: list[str], cancel: set[str], retry: tuple[set[str], set[str], set[str]]
) -> None:
    def ids(names: set[str]) -> set[uuid.UUID]:
        return {getattr(queue, name) for name in names}

    before = stable(listed()["items"])
    assert acted("mailqueue_cancel", "--dry-run", *args) == ({"cancelled": ids(cancel)} if cancel else {})
    made_due, already_due, leased = retry
    expected = {"made_due": ids(made_due), "already_due": ids(already_due), "leased": ids(leased)}
    assert acted("mailqueue_retry", "--dry-run", *args) == {k: v for k, v in expected.items() if v}
    assert stable(listed()["items"]) == before  # a dry run changes nothing

    assert acted("mailqueue_retry", *args) == {k: v for k, v in expected.items() if v}
    now = SystemClock().now()
    after = stable(listed()["items"])
    for item_id in ids(made_due):
        assert datetime.fromisoformat(after[item_id]["next_attempt"]) <= now
        assert {**after[item_id], "next_attempt": None, "state": None} == {
            **before[item_id],
            "next_attempt": None,
            "state": None,
        }
    untouched = queue.all - ids(made_due)
    assert {i: after[i] for i in untouched} == {i: before[i] for i in untouched}

    assert acted("mailqueue_cancel", *args) == ({"cancelled": ids(cancel)} if cancel else {})
    assert set(listed_ids()) == queue.all - ids(cancel)


def test_cancel_by_id_with_a_filter_and_a_missing_id(store: QueueStore, queue: Queue) -> None:
    ghost = uuid.uuid4()
    text_out = StringIO()
    with pytest.raises(CommandError, match=f"no such item: {ghost}"):
        call_command(
            "mailqueue_cancel", str(queue.due), str(ghost), str(queue.scheduled), "--queue", "default", stdout=text_out
        )
    lines = text_out.getvalue().splitlines()
    assert f"mailqueue: cancelled {queue.due}" in lines
    assert f"mailqueue: not in the queue {ghost}" in lines
    assert f"mailqueue: does not pass the filters, left alone {queue.scheduled}" in lines
    assert (
        lines[-1] == "mailqueue: 3 items selected: 1 cancelled, 1 not in the queue, "
        "1 does not pass the filters, left alone"
    )
    assert store.get(queue.due) is None and store.get(queue.scheduled) is not None
    with pytest.raises(CommandError, match="no such item"):
        run("mailqueue_cancel", "--json", str(queue.due))


def test_cancel_takes_a_leased_item_and_retry_leaves_it(store: QueueStore, queue: Queue) -> None:
    held = store.get(queue.leased)
    assert held is not None
    assert acted("mailqueue_retry", str(queue.leased)) == {"leased": {queue.leased}}
    assert store.get(queue.leased) == held
    assert "being delivered (leased), left to its worker" in run("mailqueue_retry", str(queue.leased))
    assert acted("mailqueue_cancel", str(queue.leased)) == {"cancelled": {queue.leased}}
    assert store.get(queue.leased) is None


def test_retry_text_output_and_quiet(store: QueueStore, queue: Queue) -> None:
    text = run("mailqueue_retry", "--dry-run", "--queue", "bulk")
    assert text.splitlines() == [
        f"mailqueue: would make due now {queue.scheduled}",
        "mailqueue: dry run, nothing changed: 1 item selected: 1 would make due now",
    ]
    assert run("mailqueue_retry", "--queue", "bulk", "--verbosity", "0").splitlines() == [
        "mailqueue: 1 item selected: 1 due now"
    ]
    item = store.get(queue.scheduled)
    assert item is not None and item.next_attempt <= SystemClock().now()


def test_an_action_leaves_items_added_after_it_began(store: QueueStore) -> None:
    now = SystemClock().now()
    early = store.add(new(("a@one.example",)), now=now - timedelta(minutes=1))
    late = store.add(new(("b@one.example",)), now=now + timedelta(seconds=1))
    report = selection.run_action(store, selection.Action.CANCEL, selection.Selection(domain="one.example"), now=now)
    assert report.ids == {selection.Outcome.CANCELLED: [early.id]}
    assert store.get(late.id) is not None


def test_parse_age() -> None:
    assert selection.parse_age("90s") == timedelta(seconds=90)
    assert selection.parse_age("30m") == timedelta(minutes=30)
    assert selection.parse_age(" 2H ") == timedelta(hours=2)
    assert selection.parse_age("1d12h") == timedelta(days=1, hours=12)
    assert selection.parse_age("1w") == timedelta(weeks=1)
    for bad in ("", "1", "h", "1x", "1h 2m", "-1h", "1.5h"):
        with pytest.raises(ValueError, match="is not a duration"):
            selection.parse_age(bad)


def test_flush_reaches_deferred_items_behind_a_full_batch_of_due_ones(store: QueueStore) -> None:
    """mailqueue_flush used to read only the first 500 deferred items and stop when none of them was in
    the future: 501 deferred items already due hid the one deferred to later."""
    now = SystemClock().now()
    store.add_many([new((f"r{i}@busy.example",)) for i in range(502)], now=now - timedelta(hours=1))
    claimed = store.claim(owner="w", now=now, lease_expires=now + timedelta(minutes=5), limit=502)
    assert len(claimed) == 502
    later = claimed[-1].id
    for item in claimed:
        outcome = RecipientOutcome(item.recipients[0].address, RecipientState.PENDING, GREYLISTED)
        next_attempt = now + timedelta(hours=1) if item.id == later else now - timedelta(minutes=1)
        attempted(store, item, outcome, next_attempt=next_attempt)
    assert "1 items due now" in run("mailqueue_flush")
    moved = store.get(later)
    assert moved is not None and moved.next_attempt <= SystemClock().now()

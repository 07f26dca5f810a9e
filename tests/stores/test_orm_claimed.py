"""The ORM store decides a completion from the rows its own claim returned when nothing changed since: no item or
recipient row is read again (docs/performance.md, helper `deliver`); a change since is seen in the locked rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_mailqueue.core.errors import Code, QueueError
from django_mailqueue.core.items import (
    CompleteRequest,
    Completion,
    NewItem,
    QueueItem,
    RecipientOutcome,
    RecipientState,
    Reply,
)
from django_mailqueue.stores.orm import OrmStore
from tests.support.databases import DATABASES

pytestmark = pytest.mark.django_db(databases=DATABASES, transaction=True)

OK = Reply(250, "2.0.0", "ok")
LATER = Reply(451, "4.3.0", "later")


def outcome(item: QueueItem, reply: Reply, state: RecipientState) -> CompleteRequest:
    now = timezone.now()
    outcomes = tuple(RecipientOutcome(r.address, state, reply, "mx.example.org") for r in item.recipients)
    return CompleteRequest(item.id, str(item.owner), item.revision, Completion(outcomes, next_attempt=now))


def claimed(store: OrmStore, count: int, owner: str = "w1") -> list[QueueItem]:
    now = timezone.now()
    store.add_many(
        [NewItem("from@example.com", (f"a{i}@example.org", f"b{i}@example.net"), b"x") for i in range(count)], now=now
    )
    return store.claim(owner=owner, now=now, lease_expires=now + timedelta(seconds=60), limit=count)


@pytest.fixture(params=["default", pytest.param("pg", marks=pytest.mark.postgres)])
def alias(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("pg_alias") if request.param == "pg" else "default")


def test_a_claimed_items_completion_reads_no_row_again(alias: str) -> None:
    store = OrmStore({"database": alias})
    items = claimed(store, 3)
    requests = [outcome(items[0], OK, RecipientState.DELIVERED)]
    requests += [outcome(item, LATER, RecipientState.PENDING) for item in items[1:]]
    with CaptureQueriesContext(connections[alias]) as captured:
        answers = store.complete_many(requests)
    statements = [q["sql"].lstrip() for q in captured.captured_queries]
    assert [sql for sql in statements if sql.upper().startswith("SELECT") and "FOR UPDATE" not in sql] == []
    assert answers[0].done and not answers[1].done  # type: ignore[union-attr]
    again = store.get(items[1].id)
    assert again is not None and again.attempts == 1 and again.owner is None
    assert [r.reply for r in again.recipients] == [LATER, LATER]


def test_a_completion_after_another_claim_reads_the_rows_as_they_are(alias: str) -> None:
    """The lease ran out and another worker claimed and deferred the item: the first worker's completion finds
    the owner and revision moved and records nothing."""
    store, other = OrmStore({"database": alias}), OrmStore({"database": alias})
    (item,) = claimed(store, 1)
    later = timezone.now() + timedelta(seconds=120)
    (theirs,) = other.claim(owner="w2", now=later, lease_expires=later + timedelta(seconds=60), limit=1)
    assert theirs.id == item.id and theirs.revision == item.revision + 1
    other.complete_many([outcome(theirs, LATER, RecipientState.PENDING)])
    (answer,) = store.complete_many([outcome(item, OK, RecipientState.DELIVERED)])
    assert isinstance(answer, QueueError) and answer.code == Code.LEASE_LOST
    kept = store.get(item.id)
    assert kept is not None and [r.state for r in kept.recipients] == [RecipientState.PENDING] * 2
    assert kept.revision == item.revision + 2


def test_a_store_that_did_not_claim_the_item_reads_its_rows(alias: str) -> None:
    store, other = OrmStore({"database": alias}), OrmStore({"database": alias})
    (item,) = claimed(store, 1)
    (answer,) = other.complete_many([outcome(item, OK, RecipientState.DELIVERED)])
    assert isinstance(answer, QueueItem) and answer.done
    assert store.get(item.id) is None

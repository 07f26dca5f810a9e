"""The SQLite dialect's add: `sqlite3`'s own cursor in Django's wrapper, and no item made when none is read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.mail import send_mass_mail
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_mailqueue.core.errors import QueueError
from django_mailqueue.core.items import NewItem
from django_mailqueue.models import QueuedItem, QueuedMessage, QueuedRecipient
from django_mailqueue.stores import get_store
from django_mailqueue.stores.orm import sqlite

pytestmark = pytest.mark.django_db(transaction=True)

TABLES = (QueuedItem._meta.db_table, QueuedRecipient._meta.db_table, QueuedMessage._meta.db_table)


def batch(count: int) -> list[tuple[str, str, str, list[str]]]:
    return [(f"s{i}", "b", "from@example.com", [f"to{i}@example.org"]) for i in range(count)]


def adds(statements: list[str]) -> list[str]:
    return [sql for sql in statements if sql.startswith("INSERT INTO") and sql.split()[2] in TABLES]


def test_the_backend_makes_no_queue_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """`send_mass_mail()` reads nothing back, so the add makes no `QueueItem` (docs/performance.md)."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a QueueItem was made for the backend")

    monkeypatch.setattr(sqlite, "as_added", refuse)
    assert send_mass_mail(batch(3)) == 3
    assert QueuedItem.objects.count() == 3
    monkeypatch.undo()
    added = get_store().add_many([NewItem("from@example.com", ("a@example.org",), b"x")], now=timezone.now())
    assert [item.recipients[0].address for item in added] == ["a@example.org"]


def test_the_statements_reach_sqlite_as_written_through_execute_wrappers() -> None:
    """`?` statements on `sqlite3`'s cursor, with no `%s` rewrite; a site's `execute_wrapper` still sees them."""
    seen: list[str] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper), transaction.atomic():
        assert send_mass_mail(batch(3)) == 3
    assert len(adds(seen)) == 3
    assert all("?" in sql and "%s" not in sql for sql in adds(seen))


def test_the_query_log_formats_the_statements_with_their_values() -> None:
    """With the query log on (`DEBUG`, a test's capture) the add goes through Django's own cursor."""
    with CaptureQueriesContext(connection) as captured:
        assert send_mass_mail(batch(2)) == 2
    logged = adds([query["sql"] for query in captured.captured_queries])
    assert len(logged) == 3
    assert "'to1@example.org'" in logged[1]
    assert QueuedRecipient.objects.count() == 2


def test_a_failed_add_leaves_the_callers_transaction_usable() -> None:
    """A statement failing in the add (an id already stored) rolls back the add alone, as Django's error."""
    store = get_store()
    first = NewItem("from@example.com", ("a@example.org",), b"x")
    store.put_many([first], now=timezone.now())
    with transaction.atomic():
        QueuedItem.objects.filter(id=first.id).update(subject="kept")
        again = [NewItem("from@example.com", ("b@example.org",), b"y"), first]
        with pytest.raises(QueueError) as failed:
            store.put_many(again, now=timezone.now())
        assert "UNIQUE" in str(failed.value.__cause__)
        assert QueuedItem.objects.count() == 1
    assert QueuedItem.objects.get().subject == "kept"
    assert QueuedRecipient.objects.count() == QueuedMessage.objects.count() == 1


def test_a_batch_reads_no_row_back_from_its_insert() -> None:
    """A batch's items are one INSERT without RETURNING: their seqs are read as the table's largest after it
    (`add_last.sql`), one value, not a row an item (docs/performance.md, "The bulk enqueue floor")."""
    seen: list[str] = []
    connection.ensure_connection()
    connection.connection.set_trace_callback(seen.append)
    try:
        with transaction.atomic():
            assert send_mass_mail(batch(3)) == 3
    finally:
        connection.connection.set_trace_callback(None)
    assert len(adds(seen)) == 3
    assert not [sql for sql in seen if "RETURNING" in sql.upper()]
    assert len([sql for sql in seen if sql.lstrip().upper().startswith("SELECT")]) == 1  # the largest seq alone
    by_subject = {item.subject: item for item in QueuedItem.objects.all()}
    for i in range(3):
        item = by_subject[f"s{i}"]
        assert list(QueuedRecipient.objects.filter(item_id=item.seq).values_list("address", flat=True)) == [
            f"to{i}@example.org"
        ]
        assert f"\r\nSubject: s{i}\r\n".encode() in QueuedMessage.objects.get(item_id=item.seq).data


def test_rowids_past_the_largest_are_read_back_by_id() -> None:
    """Once the table holds rowid 2**63-1, SQLite picks new rowids at random: a batch's items then still get
    their own recipients and bytes (their seqs read back by id, not counted back from the last)."""
    largest = 2**63 - 1
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLES[0]} (seq, id, sender, size, created, next_attempt, attempts, queue, owner,"
            " lease_expires, revision, reclaims, delay_warned, message_id, subject, failed_at)"
            " VALUES (%s, %s, '', 1, 0, 0, 0, 'default', NULL, NULL, 0, 0, 0, '', 'top', NULL)",
            [largest, "f" * 32],
        )
    with transaction.atomic():
        assert send_mass_mail(batch(5)) == 5
    items = {item.subject: item for item in QueuedItem.objects.exclude(seq=largest)}
    assert len(items) == 5
    for i in range(5):
        seq = items[f"s{i}"].seq
        assert list(QueuedRecipient.objects.filter(item_id=seq).values_list("address", flat=True)) == [
            f"to{i}@example.org"
        ]
        assert f"\r\nSubject: s{i}\r\n".encode() in QueuedMessage.objects.get(item_id=seq).data

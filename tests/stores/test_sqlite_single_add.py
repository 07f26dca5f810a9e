"""The SQLite add outside `atomic()`: its own `BEGIN … COMMIT` on `sqlite3`'s connection, Django's state kept."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import django
import pytest
from django.core.mail import EmailMessage, send_mail, send_mass_mail
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from django_mailqueue.core.errors import QueueError
from django_mailqueue.core.items import NewItem
from django_mailqueue.models import QueuedItem, QueuedMessage, QueuedRecipient
from django_mailqueue.stores import get_store

pytestmark = pytest.mark.django_db(transaction=True)

TABLES = (QueuedItem._meta.db_table, QueuedRecipient._meta.db_table, QueuedMessage._meta.db_table)


@pytest.fixture
def traced() -> Iterator[list[str]]:
    """The statements `sqlite3` runs on the default connection (its trace callback), while the test runs."""
    seen: list[str] = []
    connection.ensure_connection()
    raw = connection.connection
    raw.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        raw.set_trace_callback(None)


@pytest.fixture
def atomics(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The aliases of the `atomic()` blocks entered while the test runs."""
    entered: list[str | None] = []
    enter = transaction.Atomic.__enter__

    def counted(self: transaction.Atomic) -> None:
        entered.append(self.using)
        enter(self)

    monkeypatch.setattr(transaction.Atomic, "__enter__", counted)
    return entered


def kinds(statements: list[str]) -> list[str]:
    """Each statement's kind: its first word, and an INSERT's table."""
    named = []
    for sql in statements:
        words = sql.split()
        named.append(f"INSERT {words[2].strip(chr(34))}" if words[0].upper() == "INSERT" else words[0].upper())
    return named


def assert_outside_any_transaction() -> None:
    assert not connection.in_atomic_block
    assert not connection.needs_rollback
    assert connection.get_autocommit()
    assert not connection.connection.in_transaction


def test_one_send_mail_is_begin_three_inserts_and_commit(traced: list[str], atomics: list[str | None]) -> None:
    assert send_mail("s", "b", "from@example.com", ["to@example.org"]) == 1
    assert kinds(traced) == [
        "PRAGMA",  # the busy timeout read, set for a try (`wait_for_lock`)
        "PRAGMA",
        "BEGIN",
        *(f"INSERT {table}" for table in TABLES),
        "COMMIT",
        "PRAGMA",  # and put back
    ]
    assert all(sql.startswith("PRAGMA busy_timeout") for sql in traced if sql.startswith("PRAGMA"))
    assert not [sql for sql in traced if "RETURNING" in sql.upper()]
    assert atomics == []
    assert_outside_any_transaction()
    item = QueuedItem.objects.get()
    assert [r.address for r in QueuedRecipient.objects.filter(item=item)] == ["to@example.org"]
    assert b"Subject: s" in bytes(QueuedMessage.objects.get(item=item).data)


def test_an_execute_wrapper_still_sees_the_transaction_and_its_statements() -> None:
    """An `execute_wrapper` watches Django's cursor: the add takes Django's path, where it sees every statement."""
    seen: list[str] = []

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        assert send_mail("s", "b", "from@example.com", ["to@example.org"]) == 1
    assert [kind for kind in kinds(seen) if kind == "BEGIN" or kind.startswith("INSERT")] == [
        "BEGIN",
        *(f"INSERT {table}" for table in TABLES),
    ]
    assert_outside_any_transaction()
    assert QueuedItem.objects.count() == QueuedRecipient.objects.count() == QueuedMessage.objects.count() == 1


def test_an_id_already_stored_fails_alone_and_leaves_the_connection_usable() -> None:
    store = get_store()
    first = NewItem("from@example.com", ("a@example.org",), b"x")
    store.put_many([first], now=timezone.now())
    with pytest.raises(QueueError) as failed:
        store.put_many([NewItem("from@example.com", ("b@example.org",), b"y", id=first.id)], now=timezone.now())
    assert isinstance(failed.value.__cause__, IntegrityError)
    assert_outside_any_transaction()
    assert not connection.errors_occurred  # an IntegrityError leaves the connection healthy, as Django's cursor does
    assert QueuedItem.objects.count() == QueuedRecipient.objects.count() == QueuedMessage.objects.count() == 1
    assert send_mail("s", "b", "from@example.com", ["c@example.org"]) == 1
    assert QueuedItem.objects.count() == 2


@pytest.fixture
def refused_recipients() -> Iterator[None]:
    """A trigger that fails every insert of a recipient: a constraint failing after the item's insert."""
    table = QueuedRecipient._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'CREATE TRIGGER mailqueue_test_refuse BEFORE INSERT ON "{table}" BEGIN SELECT RAISE(ABORT, "refused"); END'
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER mailqueue_test_refuse")


@pytest.mark.parametrize("count", [1, 3])
def test_a_failure_after_the_item_insert_stores_nothing(refused_recipients: None, count: int) -> None:
    items = [NewItem("from@example.com", (f"a{i}@example.org",), b"x") for i in range(count)]
    with pytest.raises(QueueError) as failed:
        get_store().put_many(items, now=timezone.now())
    assert isinstance(failed.value.__cause__, IntegrityError)
    assert "refused" in str(failed.value.__cause__)
    assert_outside_any_transaction()
    assert QueuedItem.objects.count() == QueuedRecipient.objects.count() == QueuedMessage.objects.count() == 0


@pytest.fixture
def immediate() -> Iterator[None]:
    """The default connection reopened with Django's `transaction_mode` IMMEDIATE (Django 5.1+)."""
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    options["transaction_mode"] = "IMMEDIATE"
    try:
        yield
    finally:
        del options["transaction_mode"]
        connection.close()


@pytest.mark.skipif(django.VERSION < (5, 1), reason="Django passes transaction_mode to SQLite from 5.1 on")
def test_djangos_transaction_mode_begins_the_add(immediate: None, atomics: list[str | None]) -> None:
    connection.ensure_connection()
    seen: list[str] = []
    connection.connection.set_trace_callback(seen.append)
    assert send_mail("s", "b", "from@example.com", ["to@example.org"]) == 1
    connection.connection.set_trace_callback(None)
    assert [sql for sql in seen if sql.upper().startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
    assert atomics == []
    assert QueuedItem.objects.count() == 1


def test_a_mass_mail_outside_atomic_stores_every_item_with_its_recipients_and_bytes(atomics: list[str | None]) -> None:
    """Past one statement's 500 items: the seqs of every chunk, the last of one item (its seq from `lastrowid`)."""
    count = 501
    messages = [
        EmailMessage(f"s{i}", f"body {i}", "from@example.com", [f"to{i}@example.org", f"cc{i}@example.net"])
        for i in range(count)
    ]
    sent = send_mass_mail([(m.subject, m.body, m.from_email, m.to) for m in messages])
    assert sent == count
    assert atomics == []
    assert_outside_any_transaction()
    items = {item.seq: item for item in QueuedItem.objects.all()}
    assert sorted(item.subject for item in items.values()) == sorted(f"s{i}" for i in range(count))
    recipients: dict[int, list[str]] = {}
    for recipient in QueuedRecipient.objects.order_by("item_id", "position"):
        recipients.setdefault(recipient.item_id, []).append(recipient.address)
    data = {message.item_id: bytes(message.data) for message in QueuedMessage.objects.all()}
    assert set(recipients) == set(data) == set(items)
    for seq, item in items.items():
        i = item.subject[1:]
        assert recipients[seq] == [f"to{i}@example.org", f"cc{i}@example.net"]
        assert f"body {i}".encode() in data[seq]
        assert item.size == len(data[seq])


@pytest.mark.parametrize("count", [1, 3])
def test_one_message_is_one_row_of_each_table_its_recipients_in_order(traced: list[str], count: int) -> None:
    """A `send_mail()` of one or several recipients (`sqlite._insert_one`): three `INSERT`s whatever the count,
    the recipients by position with their domains lowercase, a `send_at` kept as the item's first due time."""
    to = [f"To{i}@Example.ORG" for i in range(count)]
    message = EmailMessage("s", "b", "from@example.com", to)
    message.send_at = timezone.now() + timezone.timedelta(hours=1)  # type: ignore[attr-defined]
    assert message.send() == 1
    assert [kind for kind in kinds(traced) if kind.startswith("INSERT")] == [f"INSERT {table}" for table in TABLES]
    item = QueuedItem.objects.get()
    assert item.next_attempt - item.created > 3599 * 10**6
    assert [
        (r.position, r.address, r.domain) for r in QueuedRecipient.objects.filter(item=item).order_by("position")
    ] == [(i, address, "example.org") for i, address in enumerate(to)]
    data = bytes(QueuedMessage.objects.get(item=item).data)
    assert item.size == len(data) and b"\r\nSubject: s\r\n" in data

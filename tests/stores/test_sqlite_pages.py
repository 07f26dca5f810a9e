"""The b-trees a lone `send_mail()` changes on SQLite, from the file's pages before and after its commit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from django.core.mail import send_mail
from django.db import connection

from django_mailqueue.models import QueuedRecipient

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = 4096


def pages(path: Path, size: int) -> list[bytes]:
    data = path.read_bytes()
    return [data[at : at + size] for at in range(0, len(data), size)]


def btrees() -> dict[int, str]:
    """Each page's b-tree (SQLite's `dbstat`), by page number; page 1 is the header and the schema's root."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pageno, name FROM dbstat")
        return dict(cursor.fetchall())


def test_a_lone_send_mail_changes_the_pages_of_eight_btrees_and_the_header() -> None:
    with connection.cursor() as cursor:
        try:
            cursor.execute("SELECT count(*) FROM dbstat")
        except Exception:  # noqa: BLE001
            pytest.skip("this SQLite has no dbstat")
        cursor.execute("PRAGMA page_size")
        size = cursor.fetchone()[0]
    if sqlite3.sqlite_version_info < (3, 31):
        pytest.skip("SQLite before 3.31 keeps Django's recipient table (migration 0022)")
    path = Path(connection.settings_dict["NAME"])
    for i in range(30):  # past the tables' first pages
        send_mail(f"warm {i}", "body", "from@example.com", [f"to{i}@example.org"])
    changed: set[str] = set()
    for i in range(5):
        before = pages(path, size)
        send_mail(f"subject {i}", "body", "from@example.com", [f"rcpt{i}@example.org"])
        after, owner = pages(path, size), btrees()
        changed |= {owner[n + 1] for n, page in enumerate(after[: len(before)]) if page != before[n]}
    assert changed == {
        "sqlite_schema",  # page 1: the file's header (its change counter)
        "mailqueue_item",
        "sqlite_autoindex_mailqueue_item_1",  # the item's id
        "mailqueue_item_due",
        "mailqueue_item_queue_due",
        "mailqueue_item_queue_untried",
        "mailqueue_recipient",  # keyed by (item_id, position): no unique index of its own
        "mailqueue_recipient_domain",
        "mailqueue_message",
    }
    # the recipients' rows by their item, as the ORM reads them
    assert [r.address for r in QueuedRecipient.objects.filter(item__subject="subject 4")] == ["rcpt4@example.org"]


def test_the_recipient_table_is_keyed_by_item_and_position() -> None:
    if sqlite3.sqlite_version_info < (3, 31):
        pytest.skip("SQLite before 3.31 keeps Django's recipient table (migration 0022)")
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'mailqueue_recipient' AND rootpage > 0")
        assert sorted(name for (name,) in cursor.fetchall()) == ["mailqueue_recipient", "mailqueue_recipient_domain"]
        cursor.execute("PRAGMA index_xinfo('mailqueue_recipient_domain')")
        # the domain index's entries hold the table's key (item_id, position) after the domain
        assert [row[2] for row in cursor.fetchall()] == ["domain", "item_id", "position"]
    send_mail("two", "body", "from@example.com", ["a@example.org", "b@example.net"])
    rows = QueuedRecipient.objects.order_by("position")
    seq = rows[0].item_id
    assert [(r.id, r.position, r.address) for r in rows] == [
        (seq * 2**20, 0, "a@example.org"),
        (seq * 2**20 + 1, 1, "b@example.net"),
    ]

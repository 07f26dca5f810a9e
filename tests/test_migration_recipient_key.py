"""Migration 0022_sqlite_recipient_key with rows in the tables: forward, the store on the keyed table, and back,
on a SQLite database of its own (a child process, as tests/test_migrations.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.test_migrations import run_child

#: Migrate to 0021, queue mail and record an attempt, migrate forward, use the store, migrate back.
SCRIPT = r"""
import json
import django
django.setup()
from datetime import timedelta
from django.core.mail import send_mail
from django.core.management import call_command
from django.db import connection
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import Completion, RecipientOutcome, RecipientState, Reply
from django_mailqueue.stores.orm import OrmStore

def layout():
    with connection.cursor() as cursor:
        cursor.execute("SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'mailqueue_recipient' ORDER BY 1, 2")
        return [list(row) for row in cursor.fetchall()]

def recipients():
    with connection.cursor() as cursor:
        cursor.execute("SELECT item_id, position, address, domain, state, reply_code, reply_status, reply_text,"
                       " remote_mta, id FROM mailqueue_recipient ORDER BY item_id, position")
        return [list(row) for row in cursor.fetchall()]

def attempt(store, subject):
    # the item's first recipient delivered, the others deferred: its recipients' rows written back
    now = SystemClock().now()
    claimed = store.claim(owner="w", now=now, lease_expires=now + timedelta(seconds=60), limit=10)
    item = next(i for i in claimed if i.subject == subject)
    ok, later = Reply(250, "2.0.0", "ok"), Reply(451, "4.3.0", "later")
    outcomes = tuple(
        RecipientOutcome(r.address, RecipientState.DELIVERED, ok) if n == 0
        else RecipientOutcome(r.address, RecipientState.PENDING, later)
        for n, r in enumerate(item.recipients)
    )
    store.complete(item.id, owner="w", revision=item.revision,
                   completion=Completion(outcomes=outcomes, next_attempt=now + timedelta(hours=1)))
    for other in claimed:
        if other.id != item.id:
            store.reschedule(other.id, at=now, owner="w")

out = {}
call_command("migrate", "django_mailqueue", "0021", verbosity=0)
out["before"] = layout()
send_mail("one", "body one", "a@example.com", ["x@example.org", "y@example.net", "z@example.com"])
send_mail("two", "body two", "a@example.com", ["w@example.org"])
store = OrmStore()
attempt(store, "one")
store.close()
out["rows_before"] = recipients()
call_command("migrate", "django_mailqueue", "0022", verbosity=0)
out["after"] = layout()
out["rows_after"] = recipients()
store = OrmStore()
send_mail("three", "body three", "a@example.com", ["v@example.org", "u@example.net"])
attempt(store, "three")
out["items"] = sorted(
    [i.subject, [[r.address, r.state.value, r.reply.code if r.reply else None] for r in i.recipients]]
    for i in store.list()
)
store.close()
out["rows_keyed"] = recipients()
call_command("migrate", "django_mailqueue", "0021", verbosity=0)
out["back"] = layout()
out["rows_back"] = recipients()
print(json.dumps(out))
"""


@pytest.mark.skipif(sqlite3.sqlite_version_info < (3, 31), reason="SQLite before 3.31: 0022 changes nothing")
def test_the_keyed_recipient_table_keeps_every_row_forward_and_back(tmp_path: Path) -> None:
    seen = run_child(tmp_path, SCRIPT)
    tables = {when: {name: sql for kind, name, sql in seen[when] if kind == "table"} for when in ("before", "after")}
    assert "WITHOUT ROWID" not in tables["before"]["mailqueue_recipient"]
    assert tables["after"]["mailqueue_recipient"].endswith('PRIMARY KEY ("item_id", "position")) WITHOUT ROWID')
    assert [name for kind, name, _ in seen["after"] if kind == "index"] == ["mailqueue_recipient_domain"]
    # every row and column kept but the id, which the key now makes
    assert [row[:-1] for row in seen["rows_after"]] == [row[:-1] for row in seen["rows_before"]]
    assert [row[-1] for row in seen["rows_after"]] == [row[0] * 2**20 + row[1] for row in seen["rows_after"]]
    assert seen["rows_before"][0][4:7] == ["delivered", 250, "2.0.0"]
    # the store on the keyed table: added, claimed, its recipients' outcomes written by their key
    assert seen["items"] == [
        [
            "one",
            [["x@example.org", "delivered", 250], ["y@example.net", "pending", 451], ["z@example.com", "pending", 451]],
        ],
        ["three", [["v@example.org", "delivered", 250], ["u@example.net", "pending", 451]]],
        ["two", [["w@example.org", "pending", None]]],
    ]
    # back: Django's layout, every row with its id
    assert seen["back"] == seen["before"]
    assert seen["rows_back"] == seen["rows_keyed"]

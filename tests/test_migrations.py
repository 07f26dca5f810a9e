"""The migrations with rows in the tables: the queue's items, recipients and messages kept through
0013_sqlite_lean_keys forward and back, on a SQLite database of its own (a child process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Run in a child with the tests' settings, on a SQLite file of its own: migrate to the release before,
#: queue mail and deliver some, migrate forward, use the store, migrate back. Prints what it saw.
SCRIPT = r"""
import json, os, sqlite3, uuid
import django
from django.conf import settings
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
        cursor.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE tbl_name IN "
            "('mailqueue_item', 'mailqueue_recipient', 'mailqueue_message') ORDER BY type, name"
        )
        return [list(row) for row in cursor.fetchall()]

def rows():
    with connection.cursor() as cursor:
        found = []
        for table in ("mailqueue_item", "mailqueue_recipient", "mailqueue_message"):
            cursor.execute(f"SELECT * FROM {table} ORDER BY 1, 2")
            found.append([[bytes(v).hex() if isinstance(v, (bytes, memoryview)) else v for v in row]
                          for row in cursor.fetchall()])
        return found

def deliver_newest(store):
    now = SystemClock().now()
    claimed = store.claim(owner="w", now=now, lease_expires=now + timedelta(seconds=60), limit=10)
    item = max(claimed, key=lambda i: i.id.int)
    ok = Reply(250, "2.0.0", "ok")
    outcomes = tuple(RecipientOutcome(r.address, RecipientState.DELIVERED, ok) for r in item.recipients)
    done = Completion(outcomes=outcomes, next_attempt=now)
    store.complete(item.id, owner="w", revision=item.revision, completion=done)
    for other in claimed:
        if other.id != item.id:
            store.reschedule(other.id, at=now, owner="w")
    return item.id

out = {}
call_command("migrate", "django_mailqueue", "0012", verbosity=0)
out["before"] = layout()
send_mail("one", "body one", "a@example.com", ["x@example.org", "y@example.net"])
send_mail("two", "body two", "a@example.com", ["z@example.org"])
send_mail("three", "body three", "a@example.com", ["w@example.org"])
store = OrmStore()
out["delivered_before"] = str(deliver_newest(store))
store.close()
out["rows_before"] = rows()
call_command("migrate", "django_mailqueue", "0013", verbosity=0)  # this test's migration, not the later ones
out["after"] = layout()
out["rows_after"] = rows()
store = OrmStore()
out["subjects"] = sorted(i.subject for i in store.list())
send_mail("four", "body four", "a@example.com", ["v@example.org", "u@example.org"])
out["delivered_after"] = str(deliver_newest(store))
send_mail("five", "body five", "a@example.com", ["t@example.org"])
items = store.list()
out["items"] = sorted([i.subject, [r.address for r in i.recipients]] for i in items)
out["messages"] = sorted(store.read_messages([i.id for i in items]).values())[0].decode()[:30]
out["seqs"] = rows()[0]
store.close()
call_command("migrate", "django_mailqueue", "0012", verbosity=0)
out["back"] = layout()
out["rows_back_count"] = [len(t) for t in rows()]
print(json.dumps(out))
"""


def run_child(tmp_path: Path, script: str = SCRIPT) -> dict[str, Any]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "MAILQUEUE_TEST_SQLITE": str(tmp_path / "unused.sqlite3"),
    }
    # The tests' settings name ":memory:" outside the test runner: one database for the child's one connection.
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_lean_sqlite_keys_keep_every_row_forward_and_back(tmp_path: Path) -> None:
    seen = run_child(tmp_path)
    before, after, back = seen["before"], seen["after"], seen["back"]
    assert isinstance(before, list) and isinstance(after, list)
    tables_before = {name: sql for kind, name, sql in before if kind == "table"}
    tables_after = {name: sql for kind, name, sql in after if kind == "table"}
    # Django's layout before: AUTOINCREMENT keys, the message's key a bigint with a unique index of its own
    assert "AUTOINCREMENT" in tables_before["mailqueue_item"]
    assert "AUTOINCREMENT" in tables_before["mailqueue_recipient"]
    assert '"item_id" bigint NOT NULL PRIMARY KEY' in tables_before["mailqueue_message"]
    # after: no AUTOINCREMENT, the message keyed by its rowid (no index of its own), every other index kept
    assert all("AUTOINCREMENT" not in sql for sql in tables_after.values())
    assert '"item_id" integer NOT NULL PRIMARY KEY' in tables_after["mailqueue_message"]
    indexes_before = {name: sql for kind, name, sql in before if kind == "index"}
    indexes_after = {name: sql for kind, name, sql in after if kind == "index"}
    assert set(indexes_before) - set(indexes_after) == {"sqlite_autoindex_mailqueue_message_1"}
    assert {n: s for n, s in indexes_before.items() if n in indexes_after} == indexes_after
    # the rows, byte for byte
    assert seen["rows_after"] == seen["rows_before"]
    assert seen["subjects"] == ["one", "two"]
    # the store on the lean layout: added, delivered, read
    assert seen["items"] == [
        ["five", ["t@example.org"]],
        ["one", ["x@example.org", "y@example.net"]],
        ["two", ["z@example.org"]],
    ]
    assert str(seen["messages"]).startswith("Content-Type: text/plain")
    # back: Django's layout again, with the rows
    assert sorted(map(str, back)) == sorted(map(str, before))  # type: ignore[call-overload]
    assert seen["rows_back_count"] == [3, 4, 3]

"""The bulk enqueue's parts, timed one by one per message on SQLite: where the time goes, and the floor.

    BENCH_LIB=ours BENCH_DB=sqlite BENCH_SQLITE_PATH=/tmp/parts.sqlite3 \
        DJANGO_SETTINGS_MODULE=bench.projects.ours_settings python -m bench.enqueue_parts

Each part runs on batches of 100 of the bench's message (bench/driver.py) and is
timed as the best of `--repeats` rounds (the least disturbed one), in µs a
message. Not timed in `make bench`; docs/performance.md ("The bulk enqueue
floor") explains the parts and quotes a run.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import sqlite3
import time
import uuid
from collections.abc import Callable

import django

BATCH = 100


def best(fn: Callable[[], object], repeats: int, rounds: int) -> float:
    """µs a message: the fastest of `repeats` timings of `rounds` calls of `fn`, each call one batch."""
    fn()  # warm: caches, lazy imports
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        times.append(time.perf_counter() - started)
    return 1e6 * min(times) / (rounds * BATCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=20, help="batches of 100 per timing")
    parser.add_argument("--size", type=int, default=2000)
    args = parser.parse_args()
    django.setup()
    from django.core.mail import EmailMessage
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from bench import driver
    from django_mailqueue.conf import get_settings
    from django_mailqueue.core.items import NewItem
    from django_mailqueue.envelopes import _check_fields, _envelope_address, message_to_item
    from django_mailqueue.mime import plain_message_bytes
    from django_mailqueue.stores import get_store
    from django_mailqueue.stores.base import check_new_item

    call_command("migrate", verbosity=0, interactive=False)
    settings = get_settings()
    fields = [driver.make(i, args.size) for i in range(BATCH)]
    messages = [EmailMessage(m.subject, m.body, m.sender, [m.to]) for m in fields]
    items = [message_to_item(m, max_message_size=settings.max_message_size) for m in messages]
    size = len(items[0].message)
    store = get_store()
    r, n = args.repeats, args.rounds
    out: dict[str, float] = {}

    # what every library pays: Django's API makes the EmailMessage objects
    out["django_emailmessage"] = best(lambda: [EmailMessage(m.subject, m.body, m.sender, [m.to]) for m in fields], r, n)
    # ours, per part of message_to_item
    out["ours_message_to_item"] = best(
        lambda: [message_to_item(m, max_message_size=settings.max_message_size) for m in messages], r, n
    )
    out["ours_check_fields"] = best(lambda: [_check_fields(m) for m in messages], r, n)
    out["ours_envelope_addresses"] = best(
        lambda: [(_envelope_address(m.from_email, "s"), _envelope_address(m.to[0], "r")) for m in messages], r, n
    )
    out["ours_plain_message_bytes"] = best(lambda: [plain_message_bytes(m) for m in messages], r, n)
    out["ours_new_item"] = best(
        lambda: [NewItem(sender=i.sender, recipients=i.recipients, message=i.message) for i in items], r, n
    )
    out["uuid4"] = best(lambda: [uuid.uuid4() for _ in items], r, n)
    out["ours_check_new_item"] = best(lambda: [check_new_item(i) for i in items], r, n)
    # references: Django's own writer, and what django-mailer does with a message (base64 of its pickle)
    out["django_message_as_bytes"] = best(lambda: [m.message().as_bytes() for m in messages], r, max(1, n // 4))
    out["mailer_pickle_base64"] = best(
        lambda: [base64.b64encode(pickle.dumps(m)).decode("ascii") for m in messages], r, n
    )

    # the store's write: 100 items in one transaction, rolled back (the statements), and committed
    def add_rolled_back() -> None:
        fresh = [NewItem(sender=i.sender, recipients=i.recipients, message=i.message) for i in items]
        with transaction.atomic():
            store.add_many(fresh, now=timezone.now())
            transaction.set_rollback(True)

    def add_committed() -> None:
        fresh = [NewItem(sender=i.sender, recipients=i.recipients, message=i.message) for i in items]
        with transaction.atomic():
            store.add_many(fresh, now=timezone.now())

    out["ours_add_many_statements"] = best(add_rolled_back, r, n) - out["ours_new_item"]
    out["ours_add_many_committed"] = best(add_committed, r, n) - out["ours_new_item"]
    connection.close()

    # floors straight through sqlite3 (autocommit off: one transaction a batch), same file settings as Django's
    path = os.environ["BENCH_SQLITE_PATH"]
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("CREATE TABLE IF NOT EXISTS floor_bulk (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
    blobs = [i.message for i in items]

    def one_table() -> None:
        raw.execute("BEGIN")
        raw.executemany("INSERT INTO floor_bulk (data) VALUES (?)", [(b,) for b in blobs])
        raw.execute("COMMIT")

    out["floor_one_row_committed"] = best(one_table, r, n)
    raw.close()
    out["message_bytes"] = size
    print(json.dumps({k: round(v, 1) for k, v in out.items()}, indent=1))


if __name__ == "__main__":
    main()

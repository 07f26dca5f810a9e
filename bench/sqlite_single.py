"""One `send_mail()` a commit on SQLite against its floors, in one process, on one disk, interleaved rounds.

    BENCH_LIB=ours BENCH_DB=sqlite BENCH_SQLITE_PATH=/var/tmp/single.sqlite3 \
        DJANGO_SETTINGS_MODULE=bench.projects.ours_settings python -m bench.sqlite_single --count 1000 --rounds 5

Each round makes every file anew (Django's settings: rollback journal, `synchronous=FULL`) and times `--count`
messages of the bench's 2,000 bytes, one commit each:

- `floor`: `bench/commit_floor.py`'s table (a key and the bytes), one autocommitted `INSERT` a message;
- `one_row`: what a queue that keeps its promises must write at least — the item's row holding its recipient
  and its bytes, found by its id and claimable in due order by queue (the indexes of migrations 0001–0014 a
  new item enters: id, due, queue and due, the queue's untried), through `sqlite3` alone;
- `our_sql`: our own three `INSERT`s (items, recipients, messages) in a transaction, on the migrated schema,
  through `sqlite3` alone: our layout without Django or our Python;
- `ours`: `django.core.mail.send_mail()` through the queue's backend.

Prints, per line, the median of the rounds: µs a message (wall), the process's CPU µs a message, and the
bytes and write calls a message (`/proc/self/io`, which the load does not change). docs/performance.md quotes it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import django
from django.core.mail import EmailMessage

from bench.commit_floor import payload

ONE_ROW = (
    "CREATE TABLE item (seq INTEGER PRIMARY KEY, id char(32) NOT NULL UNIQUE, sender varchar(320) NOT NULL,"
    " recipient varchar(320) NOT NULL, domain varchar(255) NOT NULL, size bigint NOT NULL, created bigint NOT NULL,"
    " next_attempt bigint NOT NULL, attempts integer NOT NULL, queue varchar(100) NOT NULL, owner varchar(200),"
    " lease_expires bigint, revision integer NOT NULL, message_id varchar(998) NOT NULL,"
    " subject varchar(255) NOT NULL, data BLOB NOT NULL)",
    "CREATE INDEX item_due ON item (next_attempt, seq)",
    "CREATE INDEX item_queue_due ON item (queue, next_attempt, seq)",
    "CREATE INDEX item_queue_untried ON item (queue, next_attempt, seq) WHERE attempts = 0",
)
#: One `ONE_ROW` item: id, sender, recipient, domain, size, created, next attempt, queue, Message-ID, subject, bytes.
ONE_ROW_INSERT = (
    "INSERT INTO item (id, sender, recipient, domain, size, created, next_attempt, attempts, queue, owner,"
    " lease_expires, revision, message_id, subject, data) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, NULL, NULL, 0, ?, ?, ?)"
)
OUR_SQL = (
    "INSERT INTO mailqueue_item (id, sender, size, created, next_attempt, attempts, queue, owner, lease_expires,"
    " revision, reclaims, delay_warned, message_id, subject) VALUES (?, ?, ?, ?, ?, 0, ?, NULL, NULL, 0, 0, 0, ?, ?)"
    " RETURNING seq",
    "INSERT INTO mailqueue_recipient (item_id, position, address, domain, state, reply_status, reply_text,"
    " remote_mta) VALUES (?, 0, ?, ?, 'pending', '', '', '')",
    "INSERT INTO mailqueue_message (item_id, data) VALUES (?, ?)",
)


def io() -> tuple[int, int]:
    """(bytes written, write calls) of this process so far."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["wchar"]), int(fields["syscw"])


def timed(send: Callable[[int], object], count: int) -> dict[str, float]:
    for i in range(10):
        send(-i - 1)  # warm: the connection, the schema, lazy imports
    gc.collect()  # as bench/driver.py before its clock
    io0, cpu0, wall0 = io(), time.process_time(), time.perf_counter()
    for i in range(count):
        send(i)
    wall, cpu, io1 = time.perf_counter() - wall0, time.process_time() - cpu0, io()
    return {
        "us": 1e6 * wall / count,
        "cpu_us": 1e6 * cpu / count,
        "bytes": (io1[0] - io0[0]) / count,
        "writes": (io1[1] - io0[1]) / count,
    }


def fresh(path: Path, template: Path | None = None) -> None:
    for suffix in ("", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    if template is not None:
        shutil.copyfile(template, path)


def floor(path: Path, count: int, size: int) -> dict[str, float]:
    fresh(path)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE floor_message (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
    out = timed(lambda i: db.execute("INSERT INTO floor_message (data) VALUES (?)", (payload(i, size),)), count)
    db.close()
    return out


def one_row(path: Path, count: int, size: int) -> dict[str, float]:
    fresh(path)
    db = sqlite3.connect(path, isolation_level=None)
    for sql in ONE_ROW:
        db.execute(sql)

    def send(i: int) -> None:
        now = time.time_ns() // 1000
        data = payload(i, size)
        row = (new_id(), "sender@bench.example", f"rcpt{i:05d}@bench.example", "bench.example", len(data), now, now)
        db.execute(ONE_ROW_INSERT, (*row, "", f"<{i}@bench.example>", f"bench {i:05d}", data))

    out = timed(send, count)
    db.close()
    return out


def our_sql(path: Path, template: Path, count: int, size: int) -> dict[str, float]:
    fresh(path, template)
    db = sqlite3.connect(path, isolation_level=None)

    def send(i: int) -> None:
        now = time.time_ns() // 1000
        data = payload(i, size)
        db.execute("BEGIN")
        (seq,) = db.execute(
            OUR_SQL[0],
            (new_id(), "sender@bench.example", len(data), now, now, "", f"<{i}@bench.example>", f"bench {i:05d}"),
        ).fetchone()
        db.execute(OUR_SQL[1], (seq, f"rcpt{i:05d}@bench.example", "bench.example"))
        db.execute(OUR_SQL[2], (seq, data))
        db.execute("COMMIT")

    out = timed(send, count)
    db.close()
    return out


def ours(path: Path, template: Path, count: int, size: int) -> dict[str, float]:
    from django.core.mail import send_mail
    from django.db import connection

    from bench import driver

    connection.close()
    fresh(path, template)
    messages = {i: driver.make(i % 100000, size) for i in range(-10, count)}
    out = timed(lambda i: send_mail(messages[i].subject, messages[i].body, messages[i].sender, [messages[i].to]), count)
    connection.close()
    return out


class PromisedBackend:
    """A backend doing only what `send_mail()` promises when it returns: `message_to_item` (exact bytes, envelope,
    bad input refused, size limit, id), the store contract's `check_new_item`, and one `ONE_ROW` row, autocommitted,
    straight through sqlite3 (set `db` before use)."""

    db: sqlite3.Connection

    def __init__(self, fail_silently: bool = False, **kwargs: object) -> None:
        from django_mailqueue.conf import get_settings

        self.settings = get_settings()

    def send_messages(self, messages: list[EmailMessage]) -> int:
        from django_mailqueue.envelopes import message_to_item
        from django_mailqueue.stores.inputs import check_new_item

        settings = self.settings
        for message in messages:
            item = message_to_item(message, max_message_size=settings.max_message_size, route_for=settings.route_for)
            check_new_item(item)
            rcpt = item.recipients[0]
            now = time.time_ns() // 1000
            row = (item.id.hex, item.sender, rcpt, rcpt.rpartition("@")[2], len(item.message), now, now, item.queue)
            self.db.execute(ONE_ROW_INSERT, (*row, item.message_id, item.subject, item.message))
        return len(messages)


def promised(path: Path, count: int, size: int) -> dict[str, float]:
    from django.core.mail import get_connection, send_mail
    from django.utils.module_loading import import_string

    from bench import driver

    fresh(path)
    db = sqlite3.connect(path, isolation_level=None)
    for sql in ONE_ROW:
        db.execute(sql)
    import_string("bench.sqlite_single.PromisedBackend").db = db  # the class get_connection() finds (not __main__'s)
    messages = {i: driver.make(i % 100000, size) for i in range(-10, count)}

    def send(i: int) -> None:
        m = messages[i]
        # send_mail() as Django runs it: get_connection() of the site's backend, an EmailMessage, send_messages()
        send_mail(m.subject, m.body, m.sender, [m.to], connection=get_connection("bench.sqlite_single.PromisedBackend"))

    out = timed(send, count)
    db.close()
    return out


def new_id() -> str:
    """An id in time order, as the queue makes them, as SQLite keeps a UUID (32 hex digits)."""
    from django_mailqueue.core.items import new_item_id

    return new_item_id().hex


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--only", default="floor,one_row,our_sql,ours")
    args = parser.parse_args()
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    path = Path(os.environ["BENCH_SQLITE_PATH"])
    template = path.with_name(path.name + ".template")
    fresh(path)
    call_command("migrate", verbosity=0, interactive=False)
    connection.close()
    shutil.copyfile(path, template)
    other = path.with_name(path.name + ".raw")
    lines: dict[str, Callable[[], dict[str, float]]] = {
        "floor": lambda: floor(other, args.count, args.size),
        "one_row": lambda: one_row(other, args.count, args.size),
        "promised": lambda: promised(other, args.count, args.size),
        "our_sql": lambda: our_sql(other, template, args.count, args.size),
        "ours": lambda: ours(path, template, args.count, args.size),
    }
    chosen = args.only.split(",")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    for r in range(args.rounds):
        for name in chosen if r % 2 == 0 else chosen[::-1]:
            runs[name].append(lines[name]())
    for name, found in runs.items():
        medians = {key: round(statistics.median(run[key] for run in found), 1) for key in found[0]}
        spread = [round(run["us"]) for run in found]
        print(json.dumps({"line": name, **medians, "us_rounds": spread}))
    for leftover in (path, template, other):
        fresh(leftover)


if __name__ == "__main__":
    main()

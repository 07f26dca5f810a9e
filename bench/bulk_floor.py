"""The bulk enqueue floor on SQLite: what a `send_mass_mail()` batch must cost for the queue's promises, timed.

    BENCH_DB=sqlite DJANGO_SETTINGS_MODULE=bench.projects.ours_settings \
        python -m bench.bulk_floor --sqlite /path/to/file.sqlite3 --count 2000 --size 2000

Batches of 100 of the bench's messages (bench/driver.py, made before the clock, as for every library), each
batch one transaction, as `bench.driver --mode batch` times the libraries. Per message it does only what the
queue promises a caller when the call returns (docs/performance.md, "The bulk enqueue floor"):

- Django's `EmailMessage`, which `send_mass_mail()` makes for every library;
- the exact bytes Django's SMTP backend would send, the envelope, the refusal of bad input in the call, the
  size limit and the item's id: our `message_to_item`, as the backend calls it, and the store contract's
  `check_new_item` (every store refuses the same input, whoever calls `add_many`);
- the least a claimable item writes, through `sqlite3` alone with Django's file settings (rollback journal,
  `synchronous=FULL`), in the faster of two layouts: `one_row` (`bench.sqlite_single.ONE_ROW`: the item with
  its recipient and its bytes, found by id and claimable in due order by queue — the four indexes a new item
  enters) and `split` (the same item row without the bytes, the bytes in a table of their own keyed by the
  item's rowid: in a batch, the item pages stay dense, which can write fewer pages than `one_row`).

Our layout writes three tables and Django's ORM sits between; this does neither, so no design that keeps the
promises enqueues faster on the same machine. The two layouts run one after the other, each on a new file;
prints one JSON object: seconds (the faster layout's), count, and each layout's seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import sqlite3
import sys
import time
from pathlib import Path

import django

from bench.sqlite_single import ONE_ROW, ONE_ROW_INSERT, fresh

BATCH = 100


#: `split`: the bytes in a table of their own, keyed by the item's rowid (no index of their own)
SPLIT = (
    *(sql.replace(", data BLOB NOT NULL", "") for sql in ONE_ROW),
    "CREATE TABLE message (item INTEGER PRIMARY KEY, data BLOB NOT NULL)",
)
SPLIT_INSERT = (
    "INSERT INTO item (seq, id, sender, recipient, domain, size, created, next_attempt, attempts, queue, owner,"
    " lease_expires, revision, message_id, subject) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, NULL, NULL, 0, ?, ?)"
)


def on_sqlite(path: Path, layout: str, count: int, size: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of `count` messages in `layout`."""
    from django.core.mail import EmailMessage

    from bench import driver
    from django_mailqueue.conf import get_settings
    from django_mailqueue.envelopes import message_to_item
    from django_mailqueue.stores.inputs import check_new_item

    settings = get_settings()
    fresh(path)
    db = sqlite3.connect(path, isolation_level=None)  # BEGIN and COMMIT as written
    for sql in ONE_ROW if layout == "one_row" else SPLIT:
        db.execute(sql)

    next_seq = [1]

    def batch(msgs: list[driver.Msg]) -> None:
        rows = []
        now = time.time_ns() // 1000
        for m in msgs:
            item = message_to_item(
                EmailMessage(m.subject, m.body, m.sender, [m.to]),
                max_message_size=settings.max_message_size,
                route_for=settings.route_for,
            )
            check_new_item(item)
            rcpt = item.recipients[0]
            domain = rcpt.rpartition("@")[2]
            rows.append(
                (item.id.hex, item.sender, rcpt, domain, len(item.message), now, now, item.queue)
                + (item.message_id, item.subject, item.message)
            )
        db.execute("BEGIN")
        if layout == "one_row":
            db.executemany(ONE_ROW_INSERT, rows)
        else:  # the rowids given, as a writer holding the lock knows them: two `executemany`, no round trip a row
            first = next_seq[0]
            next_seq[0] += len(rows)
            db.executemany(SPLIT_INSERT, [(first + n, *row[:-1]) for n, row in enumerate(rows)])
            db.executemany(
                "INSERT INTO message (item, data) VALUES (?, ?)", [(first + n, row[-1]) for n, row in enumerate(rows)]
            )
        db.execute("COMMIT")

    batch([driver.make(100000 + j, size) for j in range(BATCH)])  # warm: lazy imports, the schema
    batches = [[driver.make(i + j, size) for j in range(min(BATCH, count - i))] for i in range(0, count, BATCH)]
    gc.collect()  # as bench/driver.py before its clock
    started, cpu = time.perf_counter(), time.process_time()
    for msgs in batches:
        batch(msgs)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    (stored,) = db.execute("SELECT count(*) FROM item").fetchone()
    db.close()
    if stored != count + BATCH:
        raise SystemExit(f"stored {stored} rows, expected {count + BATCH}")
    return elapsed, cpu


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sqlite", required=True, type=Path, help="a SQLite file to make")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=2000)
    args = p.parse_args(argv)
    django.setup()
    timings = {layout: on_sqlite(args.sqlite, layout, args.count, args.size) for layout in ("one_row", "split")}
    fresh(args.sqlite)
    best = min(timings, key=lambda layout: timings[layout][0])
    layouts = {layout: wall for layout, (wall, _) in timings.items()}
    out = {"seconds": timings[best][0], "cpu_seconds": timings[best][1], "count": args.count, "layouts": layouts}
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()

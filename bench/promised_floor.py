"""The one-a-call floor on SQLite for a design that keeps the queue's promises, timed: `make bench`'s line.

    BENCH_DB=sqlite DJANGO_SETTINGS_MODULE=bench.projects.ours_settings \
        python -m bench.promised_floor --sqlite /path/to/file.sqlite3 --count 2000 --size 2000

Django's `send_mail()` into `bench.sqlite_single.PromisedBackend`: per call the `EmailMessage` and
`get_connection()` every library's `send_mail()` makes, our `message_to_item` (the exact bytes, the envelope, bad
input refused, the size limit, the id), the store contract's `check_new_item`, and one `ONE_ROW` row (the item
with its recipient and its bytes, claimable: the four indexes a new item enters) autocommitted through sqlite3
with Django's file settings. The single-call analogue of bench/bulk_floor.py (docs/performance.md, "The
promised floor"). Prints one JSON object: seconds, cpu_seconds, count.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import django


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sqlite", required=True, type=Path, help="a SQLite file to make")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=2000)
    args = p.parse_args(argv)
    django.setup()
    from bench.sqlite_single import fresh, promised

    out = promised(args.sqlite, args.count, args.size)
    fresh(args.sqlite)
    seconds, cpu = out["us"] * args.count / 1e6, out["cpu_us"] * args.count / 1e6
    sys.stdout.write(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "count": args.count}) + "\n")


if __name__ == "__main__":
    main()

"""What traffic shaping costs in the store: one `take_tokens` and one `suspensions` call, per store.

    python -m bench.shaping_store [--n 2000] [--postgres URL] [--redis URL]

A worker shaping a destination takes tokens a batch at a time (`take_tokens`, a store round trip per batch)
and reads the suspensions in force; this times each call alone, one after another from one thread (sync)
and from one event loop (the async twin), on the memory store, the ORM store on SQLite (a file) and on
PostgreSQL (its dialect and the portable one), and Redis. PostgreSQL and Redis are the servers the URLs name
(the test suite's by default); a database `bench_shaping_store` is made and dropped, and the Redis keys live
under a prefix of their own, deleted after. Prints a table: microseconds per call, median of the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

DB_NAME = "bench_shaping_store"
RUNS = 5


def configure(postgres: str) -> None:
    import django
    from django.conf import settings

    parts = urlsplit(postgres)
    pg = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DB_NAME,
        "USER": parts.username or "postgres",
        "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
    }
    sqlite = os.path.join(tempfile.mkdtemp(prefix="bench-shaping-"), "db.sqlite3")
    settings.configure(
        DATABASES={
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": sqlite, "OPTIONS": {"timeout": 20}},
            "pg": pg,
        },
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_mailqueue"],
        USE_TZ=True,
    )
    django.setup()


def make_database(postgres: str) -> None:
    import psycopg

    admin = urlsplit(postgres)._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')
        conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def drop_database(postgres: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    admin = urlsplit(postgres)._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}"')


def per_call(n: int, call: Callable[[int], Any]) -> float:
    """Microseconds per call of `call(i)` for i in range(n), median of `RUNS` runs."""
    runs = []
    for _ in range(RUNS):
        started = time.perf_counter()
        for i in range(n):
            call(i)
        runs.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(runs)


def per_async_call(n: int, call: Callable[[int], Any]) -> float:
    async def run() -> float:
        runs = []
        for _ in range(RUNS):
            started = time.perf_counter()
            for i in range(n):
                await call(i)
            runs.append((time.perf_counter() - started) / n * 1e6)
        return statistics.median(runs)

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="calls per run")
    parser.add_argument(
        "--postgres", default=os.environ.get("MAILQUEUE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    )
    parser.add_argument("--redis", default=os.environ.get("MAILQUEUE_TEST_REDIS", "redis://127.0.0.1:6379/9"))
    args = parser.parse_args()
    make_database(args.postgres)
    configure(args.postgres)
    from django.core.management import call_command

    from django_mailqueue.core.items import Reply
    from django_mailqueue.stores.base import QueueStore
    from django_mailqueue.stores.memory import MemoryStore
    from django_mailqueue.stores.orm import OrmStore
    from django_mailqueue.stores.orm.portable import PortableDialect
    from django_mailqueue.stores.redis import RedisStore

    class PortableOrmStore(OrmStore):
        dialect_class = PortableDialect

    for alias in ("default", "pg"):
        call_command("migrate", database=alias, verbosity=0)
    prefix = f"bench-shaping-{uuid.uuid4().hex[:8]}:"
    stores: list[tuple[str, QueueStore]] = [
        ("memory", MemoryStore()),
        ("ORM, SQLite", OrmStore({"database": "default"})),
        ("ORM, PostgreSQL", OrmStore({"database": "pg"})),
        ("ORM, PostgreSQL, portable dialect", PortableOrmStore({"database": "pg"})),
        ("Redis", RedisStore({"url": args.redis, "key_prefix": prefix})),
    ]
    now = datetime.now(UTC)
    throttled = Reply(421, "4.7.0", "Try again later")
    rows = []
    try:
        for name, store in stores:
            store.suspend(".google.com", until=now, reply=throttled, now=now)  # connected, tables warm

            def take(i: int, store: QueueStore = store) -> int:
                return store.take_tokens("relay:smtp.example.net:587", rate=1e6, burst=10**6, want=5, now=now)

            def atake(i: int, store: QueueStore = store) -> Any:
                return store.atake_tokens("relay:smtp.example.net:587", rate=1e6, burst=10**6, want=5, now=now)

            def read(i: int, store: QueueStore = store) -> Any:
                return store.suspensions(now=now, destinations=[".google.com", "example.org"])

            rows.append((name, per_call(args.n, take), per_async_call(args.n, atake), per_call(args.n, read)))
            store.close()
    finally:
        import redis

        client = redis.Redis.from_url(args.redis)
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
        drop_database(args.postgres)
    load = os.getloadavg()
    print(f"\nshaping store calls, µs per call (median of {RUNS} runs of {args.n}; load {load[0]:.2f})\n")
    print("| store | take_tokens | atake_tokens | suspensions (2 destinations) |")
    print("| --- | ---: | ---: | ---: |")
    for name, take_us, atake_us, read_us in rows:
        print(f"| {name} | {take_us:.0f} | {atake_us:.0f} | {read_us:.0f} |")


if __name__ == "__main__":
    main()

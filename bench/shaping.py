"""Traffic shaping's figures (issue 20): a shared rate, a blackholed destination, limits that do not bind.

    .venv/bin/python -m bench.shaping                      # all three, 3 runs each
    .venv/bin/python -m bench.shaping --only rate --repeats 1

- `rate`: RATE "50/s" on a relay route, 4 `mailqueue_work --once` processes,
  3,000 messages, on PostgreSQL and on Redis, to a server that answers 454
  past 55 in a second: the most messages in any one-second window after the
  first second, the average rate, the throttling replies (Done-when line 1);
  after a throttling reply the relay is suspended and the `--once` workers
  stop, and the row says how many items were left in the store.
- `blackhole`: one process, 3,000 items for a healthy MX (Postfix's
  smtp-sink) with and without 300 items for one that accepts TCP and never
  greets (GREETING 30 s) claimed first: the healthy destination's rate in
  each, their ratio, the blackhole's connections (line 4).
- `nonbinding`: one process, 5,000 messages through a relay to smtp-sink,
  without limits and with RATE/CONNECTIONS/MESSAGES_PER_CONNECTION set far
  above what it reaches, runs alternating: the median rates (line 5).

Needs PostgreSQL (MAILQUEUE_TEST_POSTGRES, default postgresql://postgres@127.0.0.1:5432;
a database `bench_shaping` is made and dropped), Redis (MAILQUEUE_TEST_REDIS; keys under a
prefix of their own, deleted) and /usr/sbin/smtp-sink. Prints the figures and the load
average beside each; docs/performance.md keeps them. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .servers import SmtpSink

REPO = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("MAILQUEUE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres").rsplit("/", 1)[0]
REDIS_URL = os.environ.get("MAILQUEUE_TEST_REDIS", "redis://127.0.0.1:6379/3")
DB_NAME = os.environ.get("BENCH_SHAPING_DB", "bench_shaping")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def setup_django() -> None:
    os.environ["BENCH_SHAPING_PG"] = f"{PG_URL}/{DB_NAME}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.projects.shaping_settings"
    import psycopg

    with psycopg.connect(f"{PG_URL}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")
        conn.execute(f"CREATE DATABASE {DB_NAME}")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def drop_database() -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(f"{PG_URL}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME}")


def store_config(kind: str, prefix: str) -> dict[str, Any]:
    if kind == "redis":
        return {
            "BACKEND": "django_mailqueue.stores.redis.RedisStore",
            "OPTIONS": {"url": REDIS_URL, "key_prefix": prefix},
        }
    return {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {}}


def make_store(config: dict[str, Any]) -> Any:
    from django.utils.module_loading import import_string

    return import_string(config["BACKEND"])(config["OPTIONS"])


def fill(store: Any, domain: str, count: int, start: int = 0) -> None:
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.core.items import NewItem

    now = SystemClock().now()
    body = "x" * 1500
    for first in range(start, start + count, 500):
        items = []
        for n in range(first, min(first + 500, start + count)):
            data = (
                f"From: sender@bench.example\r\nTo: user{n}@{domain}\r\nSubject: shaping {n}\r\n"
                f"Message-ID: <s{n}@bench.example>\r\n\r\n{body}\r\n"
            ).encode()
            items.append(
                NewItem("sender@bench.example", (f"user{n}@{domain}",), data, message_id=f"<s{n}@bench.example>")
            )
        store.add_many(items, now=now)


def workers(mailqueue: dict[str, Any], count: int) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, BENCH_SHAPING_MAILQUEUE=json.dumps(mailqueue), PYTHONPATH=str(REPO))
    return [
        subprocess.Popen(
            [sys.executable, "-m", "django", "mailqueue_work", "--once", "--owner", f"bench-{i}"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for i in range(count)
    ]


def wait_all(processes: list[subprocess.Popen[bytes]], timeout: float = 600) -> None:
    for process in processes:
        _, err = process.communicate(timeout=timeout)
        if process.returncode != 0:
            raise RuntimeError(f"a worker exited {process.returncode}:\n{err.decode()[-3000:]}")


def left_over(store: Any) -> dict[str, int]:
    """The items of the run still in the store, by state — with `KEEP_FAILED` a failed item stays in the store
    (state failed), so an empty store is not the test. The failed ones are dropped, so the next run starts empty."""
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.core.items import ItemQuery, ItemState

    now = SystemClock().now()
    left = {state.value: store.count(ItemQuery(state=state, now=now)) for state in ItemState}
    if left[ItemState.FAILED.value]:
        store.prune_failed(before=now)
    return {state: n for state, n in left.items() if n}


def check_all_delivered(store: Any, count: int) -> None:
    """Every item of the run was delivered: none left waiting, and none failed."""
    left = left_over(store)
    assert not left, f"of {count} items left: {left}"


def delete_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)


# --- line 1: a shared rate ------------------------------------------------------------------


def measure_rate(repeats: int) -> list[dict[str, Any]]:
    from tests.support.shaping_server import CountingSmtpServer
    from tests.support.smtp_server import free_port

    rows = []
    for kind in ("postgres", "redis"):
        for _ in range(repeats):
            prefix = f"bench-shaping-{uuid.uuid4().hex[:8]}:"
            config = store_config(kind, prefix)
            store = make_store(config)
            port = free_port(("127.0.0.3",))
            relay = CountingSmtpServer(host="127.0.0.3", port=port, rate=55, rate_grace=1.0).start()
            try:
                fill(store, "anywhere.example", 3000)
                mailqueue = {
                    "STORE": config,
                    "HOSTNAME": "bench.example",
                    "ROUTES": {"*": {"HOST": "127.0.0.3", "PORT": port, "TLS": "none", "RATE": "50/s"}},
                    "POLL_INTERVAL": 0.2,
                }
                before = load()
                wait_all(workers(mailqueue, 4))
                # a throttling reply suspends the relay and the `--once` workers stop: the row says so
                left = left_over(store)
                times = [a.at for a in relay.accepted]
                first, last = times[0], times[-1]
                rows.append(
                    {
                        "store": kind,
                        "delivered": len(times),
                        "most_in_a_second_after_the_first": relay.most_in_a_second(after=first + 1),
                        "most_in_the_first_second": relay.most_in_a_second(after=first) if times else 0,
                        "average_per_second": round((len(times) - 1) / (last - first), 2),
                        "throttling_replies": len(relay.throttled),
                        "left_in_the_store": left,
                        "load_before": before,
                        "load_after": load(),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
            finally:
                relay.stop()
                if kind == "redis":
                    delete_prefix(prefix)
                else:
                    from django.db import connection

                    with connection.cursor() as cursor:
                        for table in ("mailqueue_message", "mailqueue_recipient", "mailqueue_item"):
                            cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - the bench's own names
                        cursor.execute("DELETE FROM mailqueue_suspension")
                        cursor.execute("DELETE FROM mailqueue_bucket")
    return rows


# --- line 4: a blackholed destination --------------------------------------------------------


def measure_blackhole(repeats: int) -> list[dict[str, Any]]:
    from tests.support.dns_server import DnsServer
    from tests.support.shaping_server import CountingSmtpServer
    from tests.support.smtp_server import free_port

    rows = []
    with tempfile.TemporaryDirectory() as root:
        port = free_port(("127.0.0.1", "127.0.0.4"))
        sink = SmtpSink(Path(root), port)
        sink.start()
        dns = DnsServer().start()
        dns.mx("ok.example", (10, "mx.ok.example")).a("mx.ok.example", "127.0.0.1")
        dns.mx("hole.example", (10, "mx.hole.example")).a("mx.hole.example", "127.0.0.4")
        hole = CountingSmtpServer(host="127.0.0.4", port=port, blackhole=True).start()
        try:
            for _ in range(repeats):
                for with_hole in (False, True):
                    config = store_config("redis", f"bench-shaping-{uuid.uuid4().hex[:8]}:")
                    store = make_store(config)
                    if with_hole:
                        fill(store, "hole.example", 300)
                    fill(store, "ok.example", 3000, start=1000)
                    mailqueue = {
                        "STORE": config,
                        "HOSTNAME": "bench.example",
                        "ROUTES": {"*": "mx"},
                        "DNS": {"NAMESERVERS": ["127.0.0.1"], "PORT": dns.port, "TIMEOUT": 5},
                        "MX_PORT": port,
                        "MTA_STS": False,
                        "TIMEOUTS": {"GREETING": 30},
                        "POLL_INTERVAL": 0.2,
                    }
                    connections = len(hole.sessions)
                    base = sink.messages()
                    before = load()
                    started = time.monotonic()
                    processes = workers(mailqueue, 1)
                    first = done = 0.0
                    while sink.messages() - base < 3000:
                        if not first and sink.messages() > base:
                            first = time.monotonic()
                        if processes[0].poll() is not None:
                            break
                        time.sleep(0.02)
                    done = time.monotonic()
                    wait_all(processes)
                    rows.append(
                        {
                            "blackhole": with_hole,
                            "healthy_per_second": round(2999 / (done - first), 1),
                            "healthy_seconds": round(done - started, 2),
                            "blackhole_connections": len(hole.sessions) - connections,
                            "blackhole_items_attempted": sum(i.attempts for i in store.list(limit=1000)),
                            "load_before": before,
                            "load_after": load(),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
                    delete_prefix(config["OPTIONS"]["key_prefix"])
        finally:
            hole.stop()
            dns.stop()
            sink.stop()
    return rows


# --- line 5: limits that do not bind ---------------------------------------------------------


def measure_nonbinding(repeats: int, n: int) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as root:
        sink = SmtpSink(Path(root))
        sink.start()
        try:
            for _ in range(repeats):
                for shaped in (False, True):
                    config = store_config("postgres", "")
                    store = make_store(config)
                    fill(store, "anywhere.example", n)
                    relay: dict[str, Any] = {"HOST": "127.0.0.1", "PORT": sink.port, "TLS": "none"}
                    if shaped:
                        relay |= {"RATE": "100000/s", "CONNECTIONS": 100, "MESSAGES_PER_CONNECTION": 100000}
                    mailqueue = {"STORE": config, "HOSTNAME": "bench.example", "ROUTES": {"*": relay}}
                    before = load()
                    started = time.monotonic()
                    wait_all(workers(mailqueue, 1))
                    wall = time.monotonic() - started
                    check_all_delivered(store, n)
                    rows.append(
                        {
                            "shaped": shaped,
                            "per_second": round(n / wall, 1),
                            "load_before": before,
                            "load_after": load(),
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            sink.stop()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.shaping", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="rate,blackhole,nonbinding")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=5000, help="messages per nonbinding run")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    setup_django()
    results: dict[str, Any] = {"load_at_start": load()}
    try:
        only = args.only.split(",")
        if "rate" in only:
            results["rate"] = measure_rate(args.repeats)
        if "blackhole" in only:
            results["blackhole"] = measure_blackhole(args.repeats)
        if "nonbinding" in only:
            results["nonbinding"] = measure_nonbinding(args.repeats, args.n)
    finally:
        drop_database()
    if "nonbinding" in results:
        plain = statistics.median(r["per_second"] for r in results["nonbinding"] if not r["shaped"])
        shaped = statistics.median(r["per_second"] for r in results["nonbinding"] if r["shaped"])
        results["nonbinding_ratio"] = round(shaped / plain, 3)
    if "blackhole" in results:
        plain = statistics.median(r["healthy_per_second"] for r in results["blackhole"] if not r["blackhole"])
        holed = statistics.median(r["healthy_per_second"] for r in results["blackhole"] if r["blackhole"])
        results["blackhole_ratio"] = round(holed / plain, 3)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""The store's part of one-process delivery, without SMTP: `python -m bench.store_cycle` (not in `make bench`).

What the worker asks of its store for each batch of messages, in one thread, in its order: a claim of `--batch`
items with the suppression look-up of their recipients and their messages' read (`claim_batch`, or with `--calls
split` the three calls the worker made before it), and one `complete_many` of their delivered outcomes with the
history's rows in its transaction (the ORM store) or written before it (Redis). The CPU time (or, under
`--callgrind`, the instructions) of `--n` messages, less a run of `--warm` first, ÷ (n − warm): the store's own
cost a message, steady under load where the whole worker's is not. `--twins`: the same through the async twins
in an event loop, as the worker calls them (the ORM store's hand-offs to its database thread, Redis's asyncio
client), the CPU of every thread counted.

    PYTHONPATH=$PWD .venv/bin/python -m bench.store_cycle --store sqlite --n 3000
    BENCH_STORE=redis BENCH_REDIS_URL=redis://127.0.0.1:6379/3 ... --store redis
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.store_cycle", description=__doc__.splitlines()[0])
    p.add_argument("--store", default="sqlite", choices=["sqlite", "postgres", "redis"])
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--warm", type=int, default=600)
    p.add_argument("--batch", type=int, default=30)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--path", default="", help="the SQLite file (default: a temporary one)")
    p.add_argument("--profile", default="", help="write a cProfile of the measured part here")
    p.add_argument(
        "--pause", type=float, default=0.0, help="print the pid and sleep this long before the measured part"
    )
    p.add_argument("--calls", default="batch", choices=["batch", "split"], help="claim_batch, or its three calls")
    p.add_argument("--twins", action="store_true", help="through the async twins, in an event loop")
    p.add_argument("--journal", default="", help="SQLite: PRAGMA journal_mode on every connection (default: Django's)")
    args = p.parse_args(argv)

    tmp = tempfile.mkdtemp(prefix="store-cycle-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.projects.ours_settings")
    os.environ["BENCH_DB"] = "postgres" if args.store == "postgres" else "sqlite"
    os.environ.setdefault("BENCH_SQLITE_PATH", args.path or str(Path(tmp) / "cycle.sqlite3"))
    os.environ["BENCH_STORE"] = "redis" if args.store == "redis" else "orm"
    import django

    django.setup()
    if args.journal:
        from django.db.backends.signals import connection_created

        def journal(sender: object, connection: object, **kwargs: object) -> None:
            connection.connection.execute(f"PRAGMA journal_mode = {args.journal}")  # type: ignore[attr-defined]

        connection_created.connect(journal)
    from django.core.mail import EmailMessage
    from django.core.management import call_command

    from django_mailqueue.conf import get_settings
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.core.items import CompleteRequest, RecipientOutcome, RecipientState, Reply
    from django_mailqueue.history import History, history_alias
    from django_mailqueue.stores import get_store
    from django_mailqueue.suppression import suppression_key
    from django_mailqueue.worker.attempt import PREFETCH_SIZE
    from django_mailqueue.worker.record import AttemptOutcome, decide

    call_command("migrate", verbosity=0)
    settings = get_settings()
    store = get_store()
    if args.store == "redis":
        import redis

        url = os.environ.get("BENCH_REDIS_URL", "")
        if not url or url.rstrip("/").endswith("/0") or "/" not in url.split("//", 1)[-1]:
            raise SystemExit("--store redis empties BENCH_REDIS_URL's database: name one other than 0")
        redis.Redis.from_url(url).flushdb()
    clock = SystemClock()
    body = "x" * args.size
    messages = [
        EmailMessage(f"subject {i}", body, "sender@bench.example", [f"rcpt{i}@example.org"]) for i in range(args.n)
    ]
    from django_mailqueue.backends import QueueEmailBackend

    backend = QueueEmailBackend()
    for start in range(0, len(messages), 100):
        backend.send_messages(messages[start : start + 100])
    history = History(history_alias(store))
    rows_with_outcome = getattr(store, "alias", None) == history.alias
    rng = random.Random(1)
    reply = Reply(250, "2.0.0", "Ok: queued as 1")
    rule = settings.suppression
    owner = "cycle:1"

    def delivered(claimed: list[Any]) -> tuple[list[Any], list[Any]]:
        requests, rows = [], []
        for item in claimed:
            outcomes = tuple(
                RecipientOutcome(r.address, RecipientState.DELIVERED, reply, "127.0.0.1") for r in item.pending
            )
            record = decide(item, AttemptOutcome(outcomes), settings, now=clock.now(), rng=rng)
            requests.append(CompleteRequest(item.id, owner, item.revision, record.completion))
            rows += record.history()
        return requests, rows

    def claim_split(now: datetime) -> list[Any]:
        claimed = store.claim(owner=owner, now=now, lease_expires=now + settings_lease, limit=args.batch)
        if not claimed:
            return claimed
        if rule is not None:
            keys = sorted({suppression_key(r.address) for item in claimed for r in item.pending})
            store.suppressed(keys, since=rule.cut_off(now))
        store.read_messages([item.id for item in claimed if item.size <= PREFETCH_SIZE])
        return claimed

    async def aclaim_split(now: datetime) -> list[Any]:
        claimed = await store.aclaim(owner=owner, now=now, lease_expires=now + settings_lease, limit=args.batch)
        if not claimed:
            return claimed
        if rule is not None:
            keys = sorted({suppression_key(r.address) for item in claimed for r in item.pending})
            await store.asuppressed(keys, since=rule.cut_off(now))
        await store.aread_messages([item.id for item in claimed if item.size <= PREFETCH_SIZE])
        return claimed

    def asks(now: datetime) -> dict[str, Any]:
        since = rule.cut_off(now) if rule is not None else None
        return {
            "owner": owner, "now": now, "lease_expires": now + settings_lease, "limit": args.batch,
            "suppressed_since": since, "read_up_to": PREFETCH_SIZE,
        }  # fmt: skip

    def cycle(count: int) -> int:
        done = 0
        while done < count:
            now = clock.now()
            claimed = claim_split(now) if args.calls == "split" else store.claim_batch(**asks(now)).items
            if not claimed:
                break
            requests, rows = delivered(claimed)
            if rows_with_outcome:
                store.complete_many(requests, also=lambda answers, rows=rows: history.record(rows))
            else:
                history.record(rows)
                store.complete_many(requests)
            done += len(claimed)
        return done

    async def acycle(count: int) -> int:
        done = 0
        while done < count:
            now = clock.now()
            if args.calls == "split":
                claimed = await aclaim_split(now)
            else:
                claimed = (await store.aclaim_batch(**asks(now))).items
            if not claimed:
                break
            requests, rows = delivered(claimed)
            if rows_with_outcome:
                await store.acomplete_many(requests, also=lambda answers, rows=rows: history.record(rows))
            else:
                await history.arecord(rows)
                await store.acomplete_many(requests)
            done += len(claimed)
        return done

    if args.twins:
        import asyncio

        loop = asyncio.new_event_loop()

        def run_cycle(count: int) -> int:
            return loop.run_until_complete(acycle(count))
    else:
        run_cycle = cycle

    from datetime import timedelta

    settings_lease = timedelta(seconds=settings.lease)
    run_cycle(args.warm)
    if args.pause:
        print(f"pid {os.getpid()}", flush=True)
        time.sleep(args.pause)
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    cpu, wall = time.process_time(), time.perf_counter()
    done = run_cycle(args.n - args.warm)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    print(
        f"{args.store}: {done} messages, {1000 * cpu / done:.4f} ms CPU a message, {1000 * wall / done:.4f} ms wall"
        f" (batch {args.batch}, calls {args.calls}{', async twins' if args.twins else ''})",
        flush=True,
    )
    if args.twins:
        loop.run_until_complete(store.aclose())
        loop.close()
    else:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

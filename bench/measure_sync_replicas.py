"""What `sync_replicas` costs a message on the Redis store: a primary and a replica of its own on loopback.

    .venv/bin/python -m bench.measure_sync_replicas [--messages 2000] [--repeats 3]

Per message, with `sync_replicas` 0 and 1 (and 1 through Sentinel's failover markers, `failover_timeout`):
an add of one message (`store.add`, as `send_mail()` does), and the worker's side of one delivery —
claimed in batches of 50 (`aclaim`) and recorded in batches (`acomplete_many`, the item dropped) — in
microseconds of wall time, the best and the median of the repeats (on a loaded machine the best is the
nearer to the cost itself), with the load average at the start and the end. Not part
of `make bench`; the numbers are in docs/redis.md ("Acknowledged means replicated").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis

from bench.servers import free_port

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


def _server(directory: Path, *options: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    directory.mkdir(parents=True)
    command = [shutil.which("redis-server") or "/usr/bin/redis-server", "--port", str(port), "--bind", "127.0.0.1"]
    command += ["--save", "", "--appendonly", "no", "--dir", str(directory), "--repl-diskless-sync-delay", "0"]
    process = subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            with redis.Redis(port=port) as probe:
                probe.ping()
                return process, port
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _items(count: int) -> list[Any]:
    from django_mailqueue.core.items import NewItem

    body = b"From: a@origin.test\r\nTo: b@d.test\r\nSubject: bench\r\n\r\n" + b"x" * 2000 + b"\r\n"
    return [NewItem("a@origin.test", ("b@d.test",), body, subject="bench") for _ in range(count)]


def measure(url: str, options: dict[str, Any], messages: int) -> tuple[float, float]:
    """(µs per add, µs per delivery's claim and record) for one store configuration."""
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.core.items import CompleteRequest, Completion, RecipientOutcome, RecipientState, Reply
    from django_mailqueue.stores.redis import RedisStore

    store = RedisStore({"url": url, "key_prefix": f"bench-{uuid.uuid4().hex[:8]}:", **options})
    clock = SystemClock()
    items = _items(messages)
    store.add(_items(1)[0], now=clock.now())  # connected, the scripts cached
    began = time.perf_counter()
    for item in items:
        store.add(item, now=clock.now())
    add_us = (time.perf_counter() - began) / messages * 1e6
    ok = Reply(250, "2.0.0", "ok")

    async def deliver_all() -> float:
        try:
            began = time.perf_counter()
            while True:
                now = clock.now()
                claimed = await store.aclaim(owner="bench", now=now, lease_expires=now + timedelta(minutes=5), limit=50)
                if not claimed:
                    break
                done = Completion((RecipientOutcome("b@d.test", RecipientState.DELIVERED, ok, "mx"),), now)
                await store.acomplete_many([CompleteRequest(i.id, "bench", i.revision, done) for i in claimed])
            return (time.perf_counter() - began) / (messages + 1) * 1e6
        finally:
            await store.aclose()

    deliver_us = asyncio.run(deliver_all())
    store.close()
    return add_us, deliver_us


def main() -> None:
    import django

    django.setup()
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mq-bench-sync-"))
    load = os.getloadavg()
    primary, port = _server(root / "primary")
    replica, _ = _server(root / "replica", "--replicaof", "127.0.0.1", str(port))
    try:
        with redis.Redis(port=port) as probe:  # until the replica acknowledges writes
            while probe.set("probe", 1) and probe.execute_command("WAIT", 1, 100) < 1:
                pass
        url = f"redis://127.0.0.1:{port}/0"
        configurations = {
            "sync_replicas 0": {},
            "sync_replicas 0, replay markers (failover_timeout 30)": {"failover_timeout": 30},
            "sync_replicas 1": {"sync_replicas": 1},
            "sync_replicas 1, replay markers": {"sync_replicas": 1, "failover_timeout": 30},
        }
        print(f"load average at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} cores")
        print(f"{args.messages} messages, {args.repeats} repeats; one replica on loopback\n")
        print("| configuration | add, µs a message: best (median) | claim + record, µs a message: best (median) |")
        print("| --- | ---: | ---: |")
        for name, options in configurations.items():
            runs = [measure(url, options, args.messages) for _ in range(args.repeats)]
            add = min(r[0] for r in runs), statistics.median(r[0] for r in runs)
            deliver = min(r[1] for r in runs), statistics.median(r[1] for r in runs)
            print(f"| {name} | {add[0]:.0f} ({add[1]:.0f}) | {deliver[0]:.0f} ({deliver[1]:.0f}) |", flush=True)
        load = os.getloadavg()
        print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    finally:
        for process in (replica, primary):
            process.kill()
            process.wait(10)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

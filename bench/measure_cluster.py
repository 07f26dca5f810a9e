"""What a Redis Cluster costs the worker's side of a delivery, against one Redis: servers of its own on loopback.

    .venv/bin/python -m bench.measure_cluster [--messages 4000] [--repeats 5]

Per message: claimed in batches of 50 (`aclaim`), the messages read (`aread_messages`), recorded in batches
(`acomplete_many`, the item dropped) — what one worker process asks of the store, without SMTP — on one Redis and
on three primaries (`cluster`), the queue in one slot and in three partitions (`partitions`), the three
alternating in each repeat so each meets the same machine. Microseconds of wall time and of this process's CPU a
message, the best and the median of the repeats, each Cluster's ratio to one Redis, and the load average at the
start and the end. Not part of `make bench` (whose `deliver.1` line on a Cluster delivers over SMTP too); the
numbers are in docs/redis.md ("Redis Cluster").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.servers import Redis, RedisCluster

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


def measure(options: dict[str, Any], messages: int) -> tuple[float, float]:
    """(wall, CPU) µs per message of draining `messages` items through the store's async calls."""
    from django_mailqueue.core.items import (
        CompleteRequest,
        Completion,
        NewItem,
        RecipientOutcome,
        RecipientState,
        Reply,
    )
    from django_mailqueue.stores.redis import RedisStore

    store = RedisStore({**options, "key_prefix": f"bench{uuid.uuid4().hex[:8]}:"})
    body = b"From: a@origin.test\r\nTo: b@d.test\r\nSubject: bench\r\n\r\n" + b"x" * 2000 + b"\r\n"
    now = datetime.now(UTC)
    later = now + timedelta(hours=1)
    for first in range(0, messages, 50):  # batches of 50: a partitioned queue's go to its partitions in turn
        batch = [NewItem("a@origin.test", ("b@d.test",), body) for _ in range(min(50, messages - first))]
        store.add_many(batch, now=now)
    ok = Reply(250, "2.0.0", "ok")

    async def drain() -> tuple[int, float, float]:
        wall, cpu, done = time.perf_counter(), time.process_time(), 0
        while items := await store.aclaim(owner="bench", now=now, lease_expires=later, limit=50):
            await store.aread_messages([item.id for item in items])
            outcome = (RecipientOutcome("b@d.test", RecipientState.DELIVERED, ok, remote_mta="mx.d.test"),)
            requests = [CompleteRequest(i.id, "bench", i.revision, Completion(outcome, now)) for i in items]
            await store.acomplete_many(requests)
            done += len(items)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        await store.aclose()
        return done, wall, cpu

    done, wall, cpu = asyncio.run(drain())
    store.close()
    if done != messages:
        raise RuntimeError(f"drained {done} of {messages}")
    return 1e6 * wall / messages, 1e6 * cpu / messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import django

    django.setup()
    with tempfile.TemporaryDirectory(prefix="mq-cluster-bench-") as root:
        single, cluster = Redis(Path(root) / "single"), RedisCluster(Path(root))
        single.start()
        cluster.start()
        try:
            print(f"load average at the start: {os.getloadavg()}")
            runs: dict[str, list[tuple[float, float]]] = {"one Redis": [], "Cluster": [], "Cluster, 3 parts": []}
            for _ in range(args.repeats):
                runs["one Redis"].append(measure({"url": single.url}, args.messages))
                runs["Cluster"].append(measure({"url": cluster.url, "cluster": True}, args.messages))
                parted = {"url": cluster.url, "cluster": True, "partitions": 3}
                runs["Cluster, 3 parts"].append(measure(parted, args.messages))
                cluster.flush()
                single.flush()
            for name, values in runs.items():
                walls, cpus = [w for w, _ in values], [c for _, c in values]
                print(
                    f"{name:10} wall µs/msg best {min(walls):.0f} median {statistics.median(walls):.0f}; "
                    f"CPU µs/msg best {min(cpus):.0f} median {statistics.median(cpus):.0f}"
                )
            for name in ("Cluster", "Cluster, 3 parts"):
                pairs = [c[0] / s[0] for s, c in zip(runs["one Redis"], runs[name], strict=True)]
                cpu_pairs = [c[1] / s[1] for s, c in zip(runs["one Redis"], runs[name], strict=True)]
                print(
                    f"{name} ÷ one Redis, per run: wall {' '.join(f'{p:.2f}' for p in pairs)} (median "
                    f"{statistics.median(pairs):.2f}); CPU {' '.join(f'{p:.2f}' for p in cpu_pairs)} (median "
                    f"{statistics.median(cpu_pairs):.2f})"
                )
            print(f"load average at the end: {os.getloadavg()}")
        finally:
            cluster.stop()
            single.stop()


if __name__ == "__main__":
    main()

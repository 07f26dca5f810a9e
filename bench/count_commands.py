"""Redis commands and worker CPU a delivered message: one `mailqueue_work --once` over SMTP, servers of its own.

    .venv/bin/python -m bench.count_commands [--messages 2000] [--partitions 3]

One Redis, then a three-primary Cluster with the queue in `--partitions` parts: the queue filled by `send_mail`
(a message a call, as `make bench` fills it), each server's `INFO commandstats` reset, one worker process
(the bench project's settings: CONCURRENCY 20, the suppression list on) drains it to smtp-sink, and the calls
per command summed over the primaries are divided by the messages. The worker's CPU (user + system of the child)
a message beside it; the load average at the start and the end (docs/redis.md, "Partitions").
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.servers import Redis, RedisCluster, SmtpSink

REPO = Path(__file__).resolve().parent.parent

FILL = """
import django; django.setup()
from django.core.mail import send_mail
for i in range({n}):
    send_mail("bench", "x" * 1900, "sender@bench.example", [f"r{{i}}@d.example"])
"""


def run(url: str, cluster: bool, partitions: int, sink: SmtpSink, n: int, nodes: list[Redis]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BENCH_", "DJANGO_"))}
    env.update(
        PYTHONPATH=str(REPO),
        DJANGO_SETTINGS_MODULE="bench.projects.ours_settings",
        BENCH_STORE="redis-cluster" if cluster else "redis",
        BENCH_REDIS_URL=url,
        BENCH_REDIS_PARTITIONS=str(partitions),
        BENCH_SINK_PORT=str(sink.port),
        BENCH_WORKDIR=tempfile.gettempdir(),
        BENCH_DB="sqlite",
        BENCH_SQLITE_PATH=str(sink.root / f"history-{cluster}.sqlite3"),
    )
    manage = [sys.executable, "-m", "django"]
    profile = os.environ.get("COUNT_PROFILE")  # a file: the worker run under cProfile
    worker = (
        [sys.executable, "-m", "cProfile", "-o", f"{profile}.{int(cluster)}", "-m", "django"] if profile else manage
    )
    subprocess.run([*manage, "migrate", "-v", "0"], env=env, check=True, cwd=REPO)
    subprocess.run([sys.executable, "-c", FILL.format(n=n)], env=env, check=True, cwd=REPO)
    for node in nodes:
        node.reset_stats()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([*worker, "mailqueue_work", "--once"], env=env, check=True, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    calls: Counter[str] = Counter()
    for node in nodes:
        calls.update(node.command_calls())
    for name in ("cluster|slots", "cluster|shards", "cluster|nodes", "info", "config|resetstat", "command|docs"):
        calls.pop(name, None)
    total = sum(calls.values())
    name = f"Cluster, {partitions} part{'s' if partitions > 1 else ''}" if cluster else "one Redis"
    print(f"{name}: {1000 * cpu / n:.2f} ms CPU/msg, {total / n:.2f} commands/msg")
    for command, count in calls.most_common():
        print(f"    {command:24} {count / n:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mq-count-") as root:
        single, cluster, sink = Redis(Path(root) / "single"), RedisCluster(Path(root)), SmtpSink(Path(root))
        single.start()
        cluster.start()
        sink.start()
        try:
            print(f"load average at the start: {os.getloadavg()}")
            run(single.url, False, 1, sink, args.messages, [single])
            run(cluster.url, True, args.partitions, sink, args.messages, cluster.nodes)
            print(f"messages the sink received: {sink.messages()} of {2 * args.messages}")
            print(f"load average at the end: {os.getloadavg()}")
        finally:
            sink.stop()
            cluster.stop()
            single.stop()


if __name__ == "__main__":
    main()

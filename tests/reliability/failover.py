"""A Sentinel failover under load: the primary SIGKILLed while a sender enqueues and workers deliver.

`run_failover(FailoverConfig(...))` does it all and returns a `FailoverReport`:

1. a `SentinelSetup` (a primary, two replicas, three sentinels; down after 1.5 s)
   and an aiosmtpd sink on loopback that accepts every recipient, as the relay of
   every message;
2. `config.workers` `mailqueue_work` processes on the store through the sentinels
   (`sync_replicas` as configured), and a sender thread in this process adding the
   fault run's messages (`tests.reliability.plan`) one at a time, noting which adds
   returned and which raised;
3. once `config.kill_after` messages were accepted by the sink and a third of the
   adds tried: SIGKILL of the primary; the sender goes on until `config.messages`
   adds were tried;
4. when the store is empty and the sink quiet: SIGTERM, exit 0 expected.

What it counts: the adds that returned and were never delivered (lost), the
(message, recipient) pairs accepted more than once (duplicates), adds that raised
(and of those, the ones delivered all the same), what is left in the store.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.errors import QueueError
from django_mailqueue.stores.redis import RedisStore
from tests.reliability import plan
from tests.reliability.runs import ROOT, RelWorker, run_command
from tests.support.faulty_smtp import message_id_of
from tests.support.redis_sentinel import SentinelSetup
from tests.support.smtp_server import SmtpServer

SENTINEL_PASSWORD = "rel-Sentinel-s3cret-4b7e"  # noqa: S105 - the run's own; checked absent from the output
REDIS_PASSWORD = "rel-Redis-s3cret-0c2d"  # noqa: S105


@dataclass
class FailoverConfig:
    sync_replicas: int
    messages: int = 1500
    workers: int = 3
    concurrency: int = 10
    lease: float = 15.0
    #: messages accepted by the sink, and adds tried, before the primary is killed
    kill_after: int = 200
    #: seconds between two adds of the sender
    pace: float = 0.005
    deadline: float = 240.0
    directory: Path | None = None


@dataclass
class FailoverReport:
    sync_replicas: int
    tried: int = 0
    returned: int = 0
    raised: int = 0
    #: adds that raised and were delivered all the same (a write the primary had done)
    raised_delivered: int = 0
    delivered_messages: int = 0
    #: adds that returned, with a recipient never accepted by the sink
    lost: list[str] = field(default_factory=list)
    duplicated_pairs: int = 0
    #: messages accepted that no add was tried for (must be none)
    unknown: int = 0
    #: adds tried when the primary was killed
    killed_at_add: int = 0
    failover_seconds: float = 0.0
    sender_stalled_seconds: float = 0.0
    left_in_store: int = 0
    worker_exit_codes: list[int] = field(default_factory=list)
    secrets_shown: list[str] = field(default_factory=list)
    errors_seen: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{k}: {v}" for k, v in asdict(self).items() if k not in ("lost", "problems")]
        lines.append(f"lost: {len(self.lost)} {self.lost[:5]}")
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)


class _Sender(threading.Thread):
    """Adds messages 0..count-1 one at a time through its own store, noting what returned and what raised."""

    def __init__(self, options: dict[str, Any], count: int, pace: float) -> None:
        super().__init__(daemon=True)
        self.store = RedisStore(options)
        self.count = count
        self.pace = pace
        self.returned: list[int] = []
        self.raised: dict[int, str] = {}
        self.longest_add = 0.0

    def tried(self) -> int:
        return len(self.returned) + len(self.raised)

    def run(self) -> None:
        clock = SystemClock()
        for n in range(self.count):
            began = time.monotonic()
            try:
                self.store.add(plan.new_item(n), now=clock.now())
                self.returned.append(n)
            except QueueError as exc:
                self.raised[n] = str(exc)
            self.longest_add = max(self.longest_add, time.monotonic() - began)
            time.sleep(self.pace)
        self.store.close()


def run_failover(config: FailoverConfig) -> FailoverReport:
    directory = config.directory or Path(tempfile.mkdtemp(prefix=f"mq-failover-{config.sync_replicas}-"))
    directory.mkdir(parents=True, exist_ok=True)
    report = FailoverReport(sync_replicas=config.sync_replicas)
    began = time.monotonic()
    sink = SmtpServer("127.0.0.1").start()
    setup = SentinelSetup(
        directory / "redis", replicas=2, password=REDIS_PASSWORD, sentinel_password=SENTINEL_PASSWORD
    ).start()
    workers: list[RelWorker] = []
    try:
        options = setup.options(
            key_prefix="rel-failover:", sync_replicas=config.sync_replicas, sync_timeout=2, failover_timeout=30
        )
        mailqueue = {
            "STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": options},
            "ROUTES": {"*": {"HOST": "127.0.0.1", "PORT": sink.port, "TLS": "none"}},
            "POLL_INTERVAL": 0.5,
            "LEASE": config.lease,
            "RETRY_DELAYS": [1, 2],
            "DELAY_WARNING": None,
            "HISTORY_DAYS": 0,
            "KEEP_FAILED": 0,  # the run waits for an empty store: a failed item leaves at once
            "CONCURRENCY": config.concurrency,
        }
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
            "PYTHONPATH": str(ROOT),
            "MAILQUEUE_TEST_WORKER": "1",
            "MAILQUEUE_TEST_SQLITE": str(directory / "default.sqlite3"),
            "MAILQUEUE_TEST_MAILQUEUE": json.dumps(mailqueue),
        }
        for name in ("MAILQUEUE_REL_SIGNAL_LOG", "MAILQUEUE_REL_PG_URL", "MAILQUEUE_REL_DEFAULT_URL"):
            env.pop(name, None)
        run_command([sys.executable, "-m", "django", "migrate", "-v", "0"], env, 300)
        workers = [RelWorker(f"w{n}", mailqueue, env, directory) for n in range(config.workers)]
        sender = _Sender(options, config.messages, config.pace)
        sender.start()
        deadline = began + config.deadline
        while time.monotonic() < deadline and (
            len(sink.messages) < config.kill_after or sender.tried() < config.messages // 3
        ):
            time.sleep(0.05)
        report.killed_at_add = sender.tried()
        killed = time.monotonic()
        setup.kill_primary()
        setup.wait_for_failover()
        report.failover_seconds = time.monotonic() - killed
        sender.join(max(deadline - time.monotonic(), 1))
        report.sender_stalled_seconds = sender.longest_add
        watcher = RedisStore(options)
        try:
            last_count = -1
            quiet_since = time.monotonic()
            while time.monotonic() < deadline:
                count = len(sink.messages)
                if count != last_count:
                    last_count, quiet_since = count, time.monotonic()
                if watcher.count() == 0 and time.monotonic() - quiet_since > 2.0:
                    break
                time.sleep(0.25)
            report.left_in_store = watcher.count()
        finally:
            watcher.close()
        for worker in workers:
            if not worker.running():
                report.problems.append(f"worker {worker.name} exited on its own: {worker.stderr[-2000:]}")
            worker.send(signal.SIGTERM)
        for worker in workers:
            report.worker_exit_codes.append(worker.process.wait(60))
        report.seconds = time.monotonic() - began
        _check(report, sender, sink, workers)
        return report
    finally:
        for worker in workers:
            if worker.running():
                worker.kill()
        setup.stop()
        sink.stop()


def _check(report: FailoverReport, sender: _Sender, sink: SmtpServer, workers: list[RelWorker]) -> None:
    report.tried = len(sender.returned) + len(sender.raised)
    report.returned = len(sender.returned)
    report.raised = len(sender.raised)
    for text in sender.raised.values():
        report.errors_seen[text.split(":", 2)[1].strip()[:40] if ":" in text else text[:40]] += 1
    number = {plan.message_id(n): n for n in range(report.tried)}
    pairs: Counter[tuple[int, str]] = Counter()
    for message in sink.messages:
        n = number.get(message_id_of(message.data))
        if n is None:
            report.unknown += 1
            continue
        for recipient in message.rcpt_tos:
            pairs[(n, recipient)] += 1
    delivered = {n for n, _ in pairs}
    report.delivered_messages = len(delivered)
    report.duplicated_pairs = sum(1 for copies in pairs.values() if copies > 1)
    report.raised_delivered = len(delivered & set(sender.raised))
    for n in sender.returned:
        if any(pairs[(n, recipient)] == 0 for recipient in plan.recipients(n)):
            report.lost.append(str(plan.item_id(n)))
    for worker in workers:
        output = worker.stderr + worker.stdout
        report.secrets_shown += [f"{worker.name}: {s[:8]}…" for s in (SENTINEL_PASSWORD, REDIS_PASSWORD) if s in output]
    if report.secrets_shown:
        report.problems.append(f"a password in a worker's output: {report.secrets_shown}")
    if report.unknown:
        report.problems.append(f"{report.unknown} messages accepted that were never added")
    if report.left_in_store:
        report.problems.append(f"{report.left_in_store} items left in the store")
    if report.worker_exit_codes != [0] * len(workers):
        report.problems.append(f"workers exited with {report.worker_exit_codes} after SIGTERM")

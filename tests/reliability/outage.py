"""The store's server down for longer than the lease under load: every item delivered again must be told LEASE_LOST.

`run_outage(OutageConfig(store=...))` does it all and returns an `OutageReport`:

1. the fault run's servers (`tests/reliability/harness.py`): a loopback DNS
   server, a private PostgreSQL cluster or Redis of the run's own (never the
   shared ones), and a `FaultySmtpServer` that injects no fault but trickles
   every reply after the final "." (a third of a second), so that about
   CONCURRENCY × workers transactions are under way at any moment;
2. `config.messages` messages of `tests.reliability.plan` (2–3 recipients,
   one in 25 with a recipient refused 550, so DSNs are queued too) and
   `config.workers` `mailqueue_work` processes, `LEASE` `config.lease`;
3. once `config.crash_after` recipients are accepted, the store's server is
   crashed and kept down for 2 × LEASE + 1 s — every outcome then being
   recorded outlives its lease — and started again on the same files;
4. when the store is empty and the server quiet: SIGTERM, exit 0 expected.

The checks (`OutageReport.problems`): some (message, recipient) was accepted
twice (else the run proved nothing); for each, the worker that sent the first
copy told `LEASE_LOST` on the `error` signal for that item (docs/reliability.md,
"How each duplicate shows"); each worker's summary line counts as many leases
lost as it told; nothing is left in the store.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.reliability import plan
from tests.reliability.runs import RelWorker, RunStore, StoreKind, run_command, run_settings
from tests.support.dns_server import DnsServer
from tests.support.faulty_smtp import FaultRates, FaultySmtpServer
from tests.support.smtp_server import free_port

_SUMMARY = re.compile(r"mailqueue: .* (\d+) leases lost")


@dataclass
class OutageConfig:
    store: StoreKind
    messages: int = 800
    workers: int = 2
    concurrency: int = 20
    lease: float = 2.0
    #: recipients accepted before the store's server is crashed
    crash_after: int = 300
    deadline: float = 240.0
    directory: Path | None = None


@dataclass
class OutageReport:
    store: str
    accepted: int = 0
    #: (message, recipient) pairs accepted more than once, and the items they belong to
    duplicated_pairs: int = 0
    duplicated_items: int = 0
    #: duplicated pairs whose first copy's worker told no LEASE_LOST for the item
    untold: list[str] = field(default_factory=list)
    #: per worker: LEASE_LOST signals told, and the leases lost its summary line counts
    lease_lost_signals: dict[str, int] = field(default_factory=dict)
    summary_leases_lost: dict[str, int | None] = field(default_factory=dict)
    store_unavailable_signals: int = 0
    left_in_store: int = 0
    worker_exit_codes: list[int] = field(default_factory=list)
    down_seconds: float = 0.0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def run_outage(config: OutageConfig) -> OutageReport:
    directory = config.directory or Path(tempfile.mkdtemp(prefix=f"mq-outage-{config.store}-"))
    directory.mkdir(parents=True, exist_ok=True)
    report = OutageReport(store=config.store)
    dns = DnsServer().start()
    mx_port = free_port(("127.0.0.2",))
    server = FaultySmtpServer("127.0.0.2", mx_port, FaultRates(trickle=1.0), trickle_interval=0.015).start()
    for domain in (*plan.DOMAINS, "origin.test"):
        dns.mx(domain, (10, f"mx.{domain}"))
        dns.a(f"mx.{domain}", "127.0.0.2")
    store = RunStore(config.store, directory)
    workers: list[RelWorker] = []
    began = time.monotonic()
    try:
        mailqueue = {**run_settings(store.config, dns, mx_port, config.lease), "CONCURRENCY": config.concurrency}
        env = {
            **os.environ,
            **store.env,
            "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
            "MAILQUEUE_TEST_WORKER": "1",
            "MAILQUEUE_TEST_SQLITE": str(directory / "unused.sqlite3"),
            "MAILQUEUE_TEST_MAILQUEUE": json.dumps(mailqueue),
        }
        env.pop("MAILQUEUE_REL_SIGNAL_LOG", None)
        migrate = [sys.executable, "-m", "django", "migrate", "--database", store.migrate_alias, "-v", "0"]
        run_command(migrate, env, 300)
        run_command([sys.executable, "-m", "tests.reliability.enqueue", "0", str(config.messages)], env, 300)
        workers = [RelWorker(f"w{n}", mailqueue, env, directory) for n in range(config.workers)]
        deadline = began + config.deadline
        while len(server.accepted) < config.crash_after and time.monotonic() < deadline:
            time.sleep(0.05)
        down = 2 * config.lease + 1
        crashed = time.monotonic()
        store.restart(down=down)
        report.down_seconds = time.monotonic() - crashed
        while time.monotonic() < deadline:
            items, _ = store.counts(full=True)
            if items == 0 and time.time() - server.last_activity() > 2.0:
                break
            time.sleep(0.25)
        for worker in workers:
            worker.send(signal.SIGTERM)
        for worker in workers:
            report.worker_exit_codes.append(worker.process.wait(60))
        report.left_in_store, _ = store.counts(full=True)
        report.seconds = time.monotonic() - began
        _check(report, server, workers)
        return report
    finally:
        for worker in workers:
            if worker.running():
                worker.kill()
        server.stop()
        dns.stop()
        store.close()


def _check(report: OutageReport, server: FaultySmtpServer, workers: list[RelWorker]) -> None:
    accepted = [a for a in server.snapshot() if a.sender != ""]
    report.accepted = len(accepted)
    told: dict[str, set[str]] = defaultdict(set)  # worker -> items it told LEASE_LOST for
    for worker in workers:
        signals = worker.signals()
        lost = [event for event in signals if event["code"] == "LEASE_LOST"]
        report.lease_lost_signals[worker.name] = len(lost)
        report.store_unavailable_signals += sum(1 for event in signals if event["code"] == "STORE_UNAVAILABLE")
        told[worker.name] = {str(event["item_id"]) for event in lost}
        found = _SUMMARY.search(worker.stdout)
        report.summary_leases_lost[worker.name] = int(found.group(1)) if found else None
    item_of = {plan.message_id(n): str(plan.item_id(n)) for n in range(100_000)}
    copies: dict[tuple[str, str], list[str]] = defaultdict(list)
    for acceptance in sorted(accepted, key=lambda a: a.at):
        copies[(acceptance.message_id, acceptance.recipient)].append(acceptance.helo.removesuffix(".rel.test"))
    duplicated = {key: helos for key, helos in copies.items() if len(helos) > 1}
    report.duplicated_pairs = len(duplicated)
    report.duplicated_items = len({key[0] for key in duplicated})
    for (message_id, recipient), helos in sorted(duplicated.items()):
        item = item_of.get(message_id, "?")
        if item not in told.get(helos[0], set()):
            report.untold.append(f"{item} <{recipient}>: first copy by {helos[0]}, copies by {helos}")
    if not duplicated:
        report.problems.append("no message was delivered twice: the outage cost no lease, so the run proves nothing")
    if report.untold:
        report.problems.append(
            f"{len(report.untold)} duplicated pairs without LEASE_LOST from the worker of the "
            f"first copy, e.g. {report.untold[:3]}"
        )
    for worker in workers:
        counted = report.summary_leases_lost[worker.name]
        if counted != report.lease_lost_signals[worker.name]:
            report.problems.append(
                f"{worker.name}'s summary counts {counted} leases lost, it told "
                f"{report.lease_lost_signals[worker.name]} LEASE_LOST"
            )
    if report.left_in_store:
        report.problems.append(f"{report.left_in_store} items left in the store")
    if report.worker_exit_codes != [0] * len(workers):
        report.problems.append(f"workers exited with {report.worker_exit_codes} after SIGTERM")

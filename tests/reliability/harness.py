"""The fault run: real worker processes deliver a queue while the harness kills, stops and restarts things.

`run_fault_run(config)` does it all and returns a `FaultRunReport`:

1. a loopback DNS server (MX for d0..d3.test and origin.test) and a
   `FaultySmtpServer` injecting faults at `config.fault_rate` each;
2. the store: a private PostgreSQL cluster (password auth) or a private
   Redis (password, AOF `appendfsync always`), migrated / empty; the
   messages of `tests.reliability.plan` added by a process of their own;
3. `config.workers` `mailqueue_work` processes, each with its own HOSTNAME
   (its EHLO name, so the server knows who delivered each copy), stderr and
   `error`-signal log;
4. chaos while they work: a random worker SIGKILLed every
   `kill_interval` seconds and replaced, one SIGSTOPped past its lease and
   resumed, the store's sessions terminated (`pg_terminate_backend`) and
   the store server crashed and restarted;
5. when the store is empty and the server quiet: SIGTERM, exit 0 expected;
6. the checks (`FaultRunReport.problems`): every (message, recipient)
   accepted by the server, or — the 550 set — failed with a DSN and never
   accepted; every copy beyond the first explained by a window (a reply
   lost after ".", a worker killed before it recorded, a lease lost, the
   store failing at the record) and visible (history `possibly_delivered`,
   an `error` signal / log line, or the kill itself); nothing left in the
   store; no secret in any worker's output.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability import plan
from tests.reliability.runs import ROOT, SECRETS, RelWorker, RunStore, StoreKind, run_command, run_settings
from tests.support.dns_server import DnsServer
from tests.support.faulty_smtp import FAULT_KINDS, FaultRates, FaultySmtpServer
from tests.support.smtp_server import free_port

_LINE = re.compile(r"^(delivered|failed|deferred|error) item=(\S+)(?: to=<([^>]*)>)?(?: (\w+):)?")

#: A duplicate whose first copy's worker could not record because the store was unreachable (STORE_UNAVAILABLE)
#: for longer than the lease: the lease expired under it, as under a stalled worker; told LEASE_LOST (since
#: tests/reliability/test_store_restart_leases.py; STORE_UNAVAILABLE alone before). Before 0a19479 the
#: worker gave up at the first error (test_known_bugs.py::test_an_outcome_is_recorded_after_a_store_blip).
STORE_ERROR_WINDOW = "lease expired while the store was unreachable"
#: Losses the fault run counts without failing, and the test that covers each.
KNOWN_BUGS: dict[str, str] = {}


@dataclass
class FaultRunConfig:
    store: StoreKind
    messages: int = 5000
    workers: int = 4
    concurrency: int = 20
    #: each fault's rate (see `tests.support.faulty_smtp.FAULT_KINDS`)
    fault_rate: float = 0.03
    #: seconds between two SIGKILLs
    kill_interval: float = 2.0
    #: at least this many SIGKILLs (more while work remains, in a long run)
    kills: int = 10
    #: keep killing every `kill_interval` until the queue is empty (the soak)
    kill_until_done: bool = False
    #: seconds after the start of the first SIGSTOP (below 0: none), and between two (0: only one)
    stop_at: float = 5.0
    stop_every: float = 0.0
    #: seconds after the start of the first store restart (below 0: none), and between two (0: only one)
    restart_at: float = 11.0
    restart_every: float = 0.0
    lease: float = 3.0
    #: the whole run must be done by then
    deadline: float = 600.0
    seed: int = 20240601
    #: where the run's files go (a new temporary directory when None)
    directory: Path | None = None
    #: print progress lines (the soak)
    verbose: bool = False
    #: seconds between two looks at the store
    poll: float = 0.25


@dataclass
class FaultRunReport:
    store: str
    messages: int
    pairs: int
    workers: int
    duration: float = 0.0
    enqueue_seconds: float = 0.0
    kills: int = 0
    kills_busy: int = 0
    stops: int = 0
    restarts: int = 0
    backends_terminated: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    connections: int = 0
    #: connections the server offered PIPELINING on
    pipelining_offered: int = 0
    accepted: int = 0
    delivered_pairs: int = 0
    bounced_pairs: int = 0
    dsns: int = 0
    missing: int = 0
    duplicates: int = 0
    duplicates_by_window: dict[str, int] = field(default_factory=dict)
    unexplained: list[str] = field(default_factory=list)
    invisible: list[str] = field(default_factory=list)
    #: history writes the database refused (told STORE_UNAVAILABLE, tried again), and 550 failures missing from
    #: the history (each a problem: a recorded outcome always has its rows)
    history_write_failures: int = 0
    history_lost: int = 0
    #: INTERNAL errors (a store outage reported as a bug: KNOWN_BUGS)
    internal_errors: int = 0
    left_in_store: int = 0
    leased_in_store: int = 0
    lease_lost_lines: int = 0
    reply_lost_signals: int = 0
    store_errors: int = 0
    history_rows: int = 0
    worker_exit_codes: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{k}: {v}" for k, v in asdict(self).items() if k not in ("unexplained", "invisible", "problems")]
        lines += [f"unexplained[:5]: {self.unexplained[:5]}", f"invisible[:5]: {self.invisible[:5]}"]
        lines += [f"problem: {p}" for p in self.problems]
        return "\n".join(lines)


def run_fault_run(config: FaultRunConfig) -> FaultRunReport:
    directory = config.directory or Path(tempfile.mkdtemp(prefix=f"mq-rel-{config.store}-"))
    directory.mkdir(parents=True, exist_ok=True)
    say: Callable[[str], None] = (
        (lambda text: print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True))
        if config.verbose
        else (lambda text: None)
    )
    rng = random.Random(config.seed)
    dns = DnsServer().start()
    mx_port = free_port(("127.0.0.2",))
    server = FaultySmtpServer(
        "127.0.0.2", mx_port, FaultRates.every(config.fault_rate), seed=config.seed, stall_seconds=10.0
    ).start()
    for domain in (*plan.DOMAINS, "origin.test"):
        dns.mx(domain, (10, f"mx.{domain}"))
        dns.a(f"mx.{domain}", "127.0.0.2")
    store = RunStore(config.store, directory)
    workers: list[RelWorker] = []
    report = FaultRunReport(
        store=config.store,
        messages=config.messages,
        pairs=sum(len(plan.recipients(n)) for n in range(config.messages)),
        workers=config.workers,
    )
    try:
        mailqueue = run_settings(store.config, dns, mx_port, config.lease)
        env = {
            **os.environ,
            **store.env,
            "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
            "PYTHONPATH": str(ROOT),
            "MAILQUEUE_TEST_WORKER": "1",
            "MAILQUEUE_TEST_SQLITE": str(directory / "unused.sqlite3"),
            "MAILQUEUE_TEST_MAILQUEUE": json.dumps(mailqueue),
        }
        env.pop("MAILQUEUE_REL_SIGNAL_LOG", None)
        run_command([sys.executable, "-m", "django", "migrate", "--database", store.migrate_alias, "-v", "0"], env, 300)
        started = time.monotonic()
        chunk = max(1, -(-config.messages // 4))
        adders = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.reliability.enqueue",
                    str(first),
                    str(min(chunk, config.messages - first)),
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for first in range(0, config.messages, chunk)
        ]
        for adder in adders:
            _, err = adder.communicate(timeout=config.deadline)
            if adder.returncode != 0:
                raise RuntimeError(f"enqueue failed:\n{err.decode(errors='replace')[-3000:]}")
        report.enqueue_seconds = time.monotonic() - started
        queued, _ = store.counts()
        if queued != config.messages:
            report.problems.append(f"{queued} items in the store after adding {config.messages}")
        say(f"{config.messages} messages queued in {report.enqueue_seconds:.1f} s on {config.store}")

        def start_worker() -> RelWorker:
            worker = RelWorker(f"w{len(workers)}", mailqueue, env, directory)
            workers.append(worker)
            return worker

        live = [start_worker() for _ in range(config.workers)]
        began = time.monotonic()
        while not server.accepted and time.monotonic() < began + 60:
            time.sleep(0.1)  # the chaos begins once the workers deliver
        say(f"workers delivering after {time.monotonic() - began:.1f} s")
        began = time.monotonic()
        next_kill = began + config.kill_interval
        next_stop = began + config.stop_at if config.stop_at >= 0 else float("inf")
        next_restart = began + config.restart_at if config.restart_at >= 0 else float("inf")
        stopped: tuple[RelWorker, float] | None = None
        deadline = began + config.deadline
        last_progress = 0.0
        while True:
            now = time.monotonic()
            if now > deadline:
                report.problems.append(f"the run did not finish within {config.deadline:.0f} s")
                break
            if stopped is not None and now >= stopped[1]:
                stopped[0].send(signal.SIGCONT)
                say(f"SIGCONT {stopped[0].name}")
                stopped = None
            items, leased = store.counts()
            wants_kill = report.kills < config.kills or (config.kill_until_done and items > 0)
            if now >= next_kill and wants_kill:
                candidates = [w for w in live if stopped is None or w is not stopped[0]]
                victim = rng.choice(candidates)
                victim.kill()
                report.kills += 1
                report.kills_busy += items > 0
                live.remove(victim)
                live.append(start_worker())
                next_kill = now + config.kill_interval
                say(f"SIGKILL {victim.name} ({items} items, {leased} leased, {len(server.accepted)} accepted)")
            if now >= next_stop and stopped is None and (report.stops == 0 or config.stop_every):
                victim = rng.choice(live)
                victim.send(signal.SIGSTOP)
                stopped = (victim, now + config.lease * 2 + 1)
                report.stops += 1
                next_stop = now + config.stop_every if config.stop_every else float("inf")
                say(f"SIGSTOP {victim.name} for {config.lease * 2 + 1:.0f} s")
            if now >= next_restart and (report.restarts == 0 or config.restart_every):
                report.backends_terminated += store.restart()
                report.restarts += 1
                next_restart = now + config.restart_every if config.restart_every else float("inf")
                say(f"store restarted ({report.backends_terminated} sessions terminated so far)")
            chaos_done = (
                report.kills >= config.kills
                and stopped is None
                and report.stops >= (config.stop_at >= 0)
                and report.restarts >= (config.restart_at >= 0)
            )
            if items == 0 and chaos_done and time.time() - server.last_activity() > 2.0:
                items, leased = store.counts(full=True)
                if items == 0:
                    break
            for worker in live:
                if not worker.running() and worker is not (stopped[0] if stopped else None):
                    report.problems.append(f"worker {worker.name} exited on its own: {worker.stderr[-2000:]}")
                    live.remove(worker)
                    live.append(start_worker())
                    break
            if config.verbose and now - last_progress > 15:
                last_progress = now
                say(
                    f"{items} items left ({leased} leased), {len(server.accepted)} accepted, "
                    f"faults {sum(server.faults.values())}"
                )
            time.sleep(config.poll)
        report.duration = time.monotonic() - began
        for worker in live:
            worker.send(signal.SIGCONT)
        # One started just before the end may still be loading Django (20 s and more on a loaded machine): a
        # SIGTERM then ends a process that has no worker yet, by the signal, which says nothing of a stop.
        up_by = time.monotonic() + 120
        while time.monotonic() < up_by and not all(w.started or not w.running() for w in live):
            time.sleep(0.5)
        for worker in live:
            worker.send(signal.SIGTERM)
        for worker in live:
            try:
                report.worker_exit_codes.append(worker.process.wait(60))
            except subprocess.TimeoutExpired:
                worker.kill()
                report.worker_exit_codes.append(-9)
        report.left_in_store, report.leased_in_store = store.counts(full=True)
        _check(report, server, store, workers)
        say("done:\n" + report.summary())
        return report
    finally:
        for worker in workers:
            if worker.running():
                worker.send(signal.SIGCONT)
                worker.kill()
        server.stop()
        dns.stop()
        store.close()


def _check(report: FaultRunReport, server: FaultySmtpServer, store: RunStore, workers: list[RelWorker]) -> None:
    accepted = server.snapshot()
    report.faults = {kind: server.faults.get(kind, 0) for kind in FAULT_KINDS}
    report.connections = server.connections
    report.pipelining_offered = server.pipelining_offered
    report.accepted = len(accepted)
    helo_to_worker = {f"{w.name}.rel.test": w for w in workers}
    number_of = {plan.message_id(n): n for n in range(report.messages)}

    # What each worker said: its log lines and its `error` signals, by item.
    said: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for worker in workers:
        for line in worker.stderr.splitlines():
            match = _LINE.match(line)
            if match is None:
                continue
            kind, item, to, code = match.groups()
            said[worker.name][item].add(f"{kind}:{to}" if to else f"{kind}:{code}")
            if kind == "error" and code == "LEASE_LOST":
                report.lease_lost_lines += 1
            if kind == "error" and code == "STORE_UNAVAILABLE":
                report.store_errors += 1
            if kind == "error" and code == "INTERNAL":
                report.internal_errors += 1
        for event in worker.signals():
            said[worker.name][str(event["item_id"])].add(f"signal:{event['code']}")
            report.reply_lost_signals += event["code"] == "REPLY_LOST"
        for secret in SECRETS:
            for text in (
                worker.stderr,
                worker.stdout,
                worker.signal_path.read_text() if worker.signal_path.exists() else "",
            ):
                if secret in text:
                    report.problems.append(f"the secret {secret[:6]}… appears in the output of {worker.name}")

    report.history_write_failures = sum(w.stderr.count("delivery history could not be written") for w in workers)
    history = store.history()
    report.history_rows = len(history)
    possibly = {(item, rcpt) for item, rcpt, _, flag, _ in history if flag}
    failed_550 = {(item, rcpt) for item, rcpt, state, _, code in history if state == "failed" and code == 550}

    # Messages: every pair accepted, the 550 set never, and failed with a DSN.
    counts: Counter[tuple[str, str]] = Counter()
    dsn_reported: set[str] = set()
    copies: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for acceptance in accepted:
        if acceptance.sender == "":
            report.dsns += 1
            continue
        key = (acceptance.message_id, acceptance.recipient)
        counts[key] += 1
        copies[key].append(acceptance)
    for data in server.dsn_data:
        dsn_reported.update(re.findall(r"Final-Recipient: rfc822; ?(\S+)", data.decode("utf-8", "replace")))
    missing: list[str] = []
    for n in range(report.messages):
        item = str(plan.item_id(n))
        for rcpt in plan.recipients(n):
            key = (plan.message_id(n), rcpt)
            if plan.is_bounce(rcpt):
                report.bounced_pairs += 1
                if counts[key]:
                    report.problems.append(f"{key} was refused with 550 yet accepted")
                # The DSN is written with the outcome, the history record committed before it: a worker
                # killed at any moment leaves both, or the attempt to be made again (and both then).
                if rcpt not in dsn_reported:
                    report.problems.append(f"no DSN reported the 550 for {rcpt}")
                if (item, rcpt) not in failed_550:
                    report.history_lost += 1
                    report.problems.append(f"no history record of the 550 failure of {rcpt}")
            elif counts[key] == 0:
                missing.append(f"{key}")
            else:
                report.delivered_pairs += 1
    report.missing = len(missing)
    if missing:
        report.problems.append(f"{len(missing)} pairs never delivered, e.g. {missing[:5]}")
    strangers = [key for key in counts if key[0] not in number_of]
    if strangers:
        report.problems.append(f"the server accepted messages the run never queued: {strangers[:5]}")

    # Duplicates: of a pair's copies, at most one may be "clean" (sent and recorded with nothing amiss);
    # every other copy must be in a window — a reply lost, a lease lost, a kill, a store failure — and visible.
    windows: Counter[str] = Counter()
    for key, seen in copies.items():
        if len(seen) < 2 or key[0] not in number_of:
            continue
        item = str(plan.item_id(number_of[key[0]]))
        rcpt = key[1]
        report.duplicates += len(seen) - 1
        clean: list[str] = []
        in_window: list[str] = []
        for copy in sorted(seen, key=lambda a: a.at):
            worker = helo_to_worker.get(copy.helo)
            words = said[worker.name][item] if worker is not None else set()
            # a killed worker's last bytes may reach the server just after the kill: any copy it sent counts
            killed = worker is not None and worker.killed_at is not None
            recorded = f"delivered:{rcpt}" in words
            if copy.reply_lost or "signal:REPLY_LOST" in words:
                window = "reply lost after the final '.'"
                visible = (
                    (item, rcpt) in possibly
                    or "signal:REPLY_LOST" in words
                    or killed
                    or bool(words & {"error:LEASE_LOST", "error:STORE_UNAVAILABLE", "error:INTERNAL"})
                )
                if not visible:
                    report.invisible.append(f"{key} copy by {copy.helo} ({window})")
            elif words & {"error:LEASE_LOST", "signal:LEASE_LOST"} and words & {
                "error:STORE_UNAVAILABLE",
                "signal:STORE_UNAVAILABLE",
            }:
                window = STORE_ERROR_WINDOW  # the store out of reach until the lease ran out: LEASE_LOST
            elif "error:LEASE_LOST" in words or "signal:LEASE_LOST" in words:
                window = "lease lost (stopped or late worker)"
            elif killed and not recorded:
                window = "worker killed before it recorded"
            elif words & {"error:STORE_UNAVAILABLE", "signal:STORE_UNAVAILABLE", "error:INTERNAL"}:
                window = STORE_ERROR_WINDOW  # logged: STORE_UNAVAILABLE
            else:
                clean.append(f"{key} copy by {copy.helo} at {copy.at:.3f}; it said {sorted(words)}")
                continue
            in_window.append(window)
        if len(clean) > 1:
            report.unexplained += clean
            windows["unexplained"] += len(clean) - 1
        # the duplicates are the copies beyond one: charge them to the windows, earliest first
        for window in in_window[: len(seen) - 1 - max(0, len(clean) - 1)]:
            windows[window] += 1
    report.duplicates_by_window = dict(windows)
    if report.unexplained:
        report.problems.append(f"{len(report.unexplained)} duplicates outside every window: {report.unexplained[:3]}")
    if report.invisible:
        report.problems.append(
            f"{len(report.invisible)} duplicates in a window but visible nowhere: {report.invisible[:3]}"
        )
    if report.left_in_store:
        report.problems.append(f"{report.left_in_store} items left in the store ({report.leased_in_store} leased)")
    if any(code != 0 for code in report.worker_exit_codes):
        report.problems.append(f"workers exited with {report.worker_exit_codes} after SIGTERM")
    unexpected = {
        word.split(":", 1)[1]
        for by_item in said.values()
        for words in by_item.values()
        for word in words
        if word.startswith(("error:", "signal:"))
    } - {"LEASE_LOST", "STORE_UNAVAILABLE", "REPLY_LOST", "DSN_FAILED", "INTERNAL"}
    if unexpected:
        report.problems.append(f"unexpected error codes from the workers: {sorted(unexpected)}")
    internal = [
        line
        for w in workers
        for line in w.stderr.splitlines()
        if " INTERNAL: " in line and "failed: QueueError" not in line
    ]
    if internal:
        report.problems.append(f"INTERNAL errors other than a store outage: {internal[:3]}")

"""The SQLite contention run: two workers deliver while processes × threads call `send_mail()` at once.

`run_sqlite_load(config)` does it all, on Django's default SQLite settings
(`tests.reliability.sqlite_settings`: no `timeout` option, the rollback
journal), and returns a `SqliteLoadReport`:

1. a recording SMTP sink on loopback (`FaultySmtpServer`, no faults) as the
   relay of every domain; a new SQLite file, migrated;
2. `config.workers` `mailqueue_work` processes, history on (the default);
3. `config.processes` adder processes of `config.threads` threads each,
   released together, each thread calling `send_mail()` to one new
   recipient per message until `config.messages` are sent in all;
4. the checks (`SqliteLoadReport.problems`): no `send_mail()` raised; every
   message delivered once; no `error` signal from a worker; every worker
   exits 0 on SIGTERM.

`python -m tests.reliability.sqlite_load [RUNS]` runs it RUNS times and
prints each report; `python -m tests.reliability.sqlite_load add …` is an
adder process (the harness starts those).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.faulty_smtp import FaultySmtpServer

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SqliteLoadConfig:
    messages: int = 1600
    processes: int = 4
    threads: int = 8
    workers: int = 2
    #: the whole run (adding and delivering) must be done by then
    deadline: float = 240.0
    directory: Path | None = None
    #: more environment for every process (`bench/sqlite_locks.py` puts its probe there)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class SqliteLoadReport:
    messages: int
    #: the database file's, as the run found it (Django's default: "delete", the rollback journal)
    journal_mode: str = ""
    calls: int = 0
    #: `repr()` of each exception a `send_mail()` raised
    raised: list[str] = field(default_factory=list)
    #: the slowest `send_mail()` calls, in seconds, slowest first
    slowest: list[float] = field(default_factory=list)
    median: float = 0.0
    p99: float = 0.0
    #: calls that took more than a second
    over_1s: int = 0
    adding_seconds: float = 0.0
    delivered: int = 0
    duplicates: int = 0
    #: `error` signals from the workers, by code
    worker_errors: dict[str, int] = field(default_factory=dict)
    worker_exit_codes: list[int] = field(default_factory=list)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.calls} send_mail() calls in {self.adding_seconds:.1f} s, {len(self.raised)} raised "
            f"{self.raised[:3]}; median {self.median * 1000:.0f} ms, p99 {self.p99 * 1000:.0f} ms, "
            f"{self.over_1s} over 1 s, slowest "
            f"{', '.join(f'{s:.2f}' for s in self.slowest[:5])} s; {self.delivered} delivered, "
            f"{self.duplicates} duplicates; worker errors {self.worker_errors}; exit codes "
            f"{self.worker_exit_codes}; journal {self.journal_mode}; {self.seconds:.1f} s in all; "
            f"problems: {self.problems}"
        )


def run_sqlite_load(config: SqliteLoadConfig) -> SqliteLoadReport:
    directory = config.directory or Path(tempfile.mkdtemp(prefix="mq-sqlite-load-"))
    directory.mkdir(parents=True, exist_ok=True)
    report = SqliteLoadReport(messages=config.messages)
    sink = FaultySmtpServer("127.0.0.1").start()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.reliability.sqlite_settings",
        "PYTHONPATH": str(ROOT),
        "MAILQUEUE_LOAD_SQLITE": str(directory / "queue.sqlite3"),
        "MAILQUEUE_LOAD_MAILQUEUE": json.dumps(
            {
                "HOSTNAME": "load.test.example",
                "ROUTES": {"*": {"HOST": "127.0.0.1", "PORT": sink.port, "TLS": "none"}},
            }
        ),
        **config.env,
    }
    workers: list[subprocess.Popen[bytes]] = []
    adders: list[subprocess.Popen[bytes]] = []
    began = time.monotonic()
    try:
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "-v", "0"],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=120,
            capture_output=True,
        )
        with contextlib.closing(sqlite3.connect(env["MAILQUEUE_LOAD_SQLITE"])) as probe:
            report.journal_mode = probe.execute("PRAGMA journal_mode").fetchone()[0]
        for n in range(config.workers):
            log = directory / f"worker{n}"
            with log.with_suffix(".out").open("wb") as out, log.with_suffix(".err").open("wb") as err:
                workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "django", "mailqueue_work", "--owner", f"w{n}"],
                        cwd=ROOT,
                        env={**env, "MAILQUEUE_REL_SIGNAL_LOG": str(log.with_suffix(".signals"))},
                        stdout=out,
                        stderr=err,
                    )
                )
        per_process = -(-config.messages // config.processes)
        for n in range(config.processes):
            first, count = n * per_process, min(per_process, config.messages - n * per_process)
            adders.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tests.reliability.sqlite_load",
                        "add",
                        str(config.threads),
                        str(first),
                        str(count),
                        str(directory / f"adder{n}.json"),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        for adder in adders:  # each says "ready" once Django is set up; then all go at once
            assert adder.stdout is not None
            if adder.stdout.readline().strip() != b"ready":
                raise RuntimeError(f"an adder did not start: {adder.communicate(timeout=30)[1].decode()[-3000:]}")
        started = time.monotonic()
        for adder in adders:
            assert adder.stdin is not None
            adder.stdin.write(b"go\n")
            adder.stdin.flush()
        latencies: list[float] = []
        for n, adder in enumerate(adders):
            _, err = adder.communicate(timeout=config.deadline)
            if adder.returncode != 0:
                raise RuntimeError(f"adder {n} failed ({adder.returncode}):\n{err.decode(errors='replace')[-3000:]}")
            result = json.loads((directory / f"adder{n}.json").read_text())
            latencies += result["latencies"]
            report.raised += result["raised"]
        report.adding_seconds = time.monotonic() - started
        report.calls = len(latencies)
        latencies.sort(reverse=True)
        report.slowest = latencies[:10]
        report.median = latencies[len(latencies) // 2] if latencies else 0.0
        report.p99 = latencies[len(latencies) // 100] if latencies else 0.0
        report.over_1s = sum(1 for latency in latencies if latency > 1.0)
        expected = config.messages - len(report.raised)
        deadline = began + config.deadline
        while len({a.recipient for a in sink.snapshot()}) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)  # an extra copy would come now
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                report.worker_exit_codes.append(worker.wait(60))
            except subprocess.TimeoutExpired:
                worker.kill()
                report.worker_exit_codes.append(-9)
        accepted = sink.snapshot()
        report.delivered = len({a.recipient for a in accepted})
        report.duplicates = len(accepted) - report.delivered
        for n in range(config.workers):
            log = directory / f"worker{n}.signals"
            for line in log.read_text().splitlines() if log.exists() else []:
                code = json.loads(line)["code"]
                report.worker_errors[code] = report.worker_errors.get(code, 0) + 1
        report.seconds = time.monotonic() - began
    finally:
        for process in (*adders, *workers):
            if process.poll() is None:
                process.kill()
                process.wait(10)
        sink.stop()
    if report.raised:
        report.problems.append(f"{len(report.raised)} send_mail() calls raised, e.g. {report.raised[:3]}")
    if report.calls != config.messages:
        report.problems.append(f"{report.calls} send_mail() calls made of {config.messages}")
    if report.delivered != config.messages:
        report.problems.append(f"{report.delivered} of {config.messages} messages delivered")
    if report.duplicates:
        report.problems.append(f"{report.duplicates} messages delivered twice")
    if report.worker_errors:
        report.problems.append(f"the workers signalled errors: {report.worker_errors}")
    if report.worker_exit_codes != [0] * config.workers:
        report.problems.append(f"workers exited with {report.worker_exit_codes} after SIGTERM")
    return report


def add(threads: int, first: int, count: int, out: str) -> int:
    """An adder process: set up Django, say "ready", wait for "go", then `count` send_mail() calls from
    `threads` threads; their latencies and exceptions go to `out` as JSON."""
    import django

    django.setup()
    from django.core.mail import send_mail
    from django.db import connection

    latencies: list[float] = []
    raised: list[str] = []
    lock = threading.Lock()
    numbers = iter(range(first, first + count))

    def send() -> None:
        try:
            while True:
                with lock:
                    n = next(numbers, None)
                if n is None:
                    return
                begin = time.perf_counter()
                try:
                    send_mail(f"load {n}", f"message {n}\n", "sender@origin.test", [f"r{n}@dest.test"])
                except Exception as exc:  # noqa: BLE001 - counted, the run goes on
                    with lock:
                        raised.append(repr(exc))
                with lock:
                    latencies.append(time.perf_counter() - begin)
        finally:
            connection.close()

    print("ready", flush=True)
    sys.stdin.readline()
    pool = [threading.Thread(target=send) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    Path(out).write_text(json.dumps({"latencies": latencies, "raised": raised}))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["add"]:
        return add(int(argv[1]), int(argv[2]), int(argv[3]), argv[4])
    runs = int(argv[0]) if argv else 1
    failed = 0
    for run in range(runs):
        report = run_sqlite_load(SqliteLoadConfig())
        failed += bool(report.problems)
        print(f"run {run + 1}: {'FAILED' if report.problems else 'passed'}: {report.summary()}", flush=True)
    print(f"{runs - failed} of {runs} runs passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

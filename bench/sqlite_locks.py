"""How long each kind of SQLite write transaction holds the write lock, under the contention run.

    python -m bench.sqlite_locks [--runs 1] [--json out.json]

Runs `tests/reliability/sqlite_load.py` (two workers delivering while 4
processes × 8 threads call `send_mail()`, 1,600 messages, Django's default
SQLite settings) with a probe in every process (`bench/lock_probe/`): for each
write transaction, from the end of its first writing statement (the lock is
taken by then) to the end of its COMMIT — the time every other writer waits
for — by kind: `add`, `claim`, `complete` (an outcome batch), `history`,
`renew`, `other`. Also how long each first write statement took (mostly
waiting for the lock) and each COMMIT. Prints a table (ms: p50, p95, p99,
max, and the total).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_KINDS = (
    ("INSERT INTO mailqueue_item", "add"),
    ("UPDATE mailqueue_item SET owner", "claim"),
    ("UPDATE mailqueue_item SET revision = revision", "complete"),
    ('INSERT INTO "mailqueue_history"', "history"),
    ('UPDATE "mailqueue_item" SET "lease_expires"', "renew"),
    ('INSERT INTO "django_migrations"', "migrate"),
    ('INSERT INTO "new__', "migrate"),
)
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _kind(sql: str) -> str:
    for prefix, kind in _KINDS:
        if sql.startswith(prefix):
            return kind
    return "other: " + sql[:50]


def install_probe(folder: str) -> None:
    """Time every write transaction of this process's SQLite connections; write them to `folder` at exit."""
    from django.db.backends.signals import connection_created

    #: kind, hold, first statement, commit, statements, time in the later statements
    samples: list[tuple[str, float, float, float, int, float]] = []
    lock = threading.Lock()
    patched: set[type] = set()

    def on_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
        if connection.vendor != "sqlite":
            return
        state: dict[str, Any] = {"kind": None}

        def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            begin = time.perf_counter()
            result = execute(sql, params, many, context)
            end = time.perf_counter()
            if state["kind"] is None and sql.lstrip().upper().startswith(_WRITES) and connection.in_atomic_block:
                state.update(kind=_kind(sql.lstrip()), acquired=end, first=end - begin, statements=0, inside=0.0)
            elif state["kind"] is not None:
                state["inside"] += end - begin
            if state["kind"] is not None:
                state["statements"] += 1
                state["last"] = end
            return result

        connection.execute_wrappers.append(wrapper)
        connection._mailqueue_probe = state
        cls = type(connection)
        if cls in patched:
            return
        patched.add(cls)
        original_commit, original_rollback = cls._commit, cls._rollback

        def ended(self: Any, original: Any) -> Any:
            result = original(self)
            probe = getattr(self, "_mailqueue_probe", None)
            if probe is not None and probe["kind"] is not None:
                now = time.perf_counter()
                with lock:
                    samples.append(
                        (
                            probe["kind"],
                            now - probe["acquired"],
                            probe["first"],
                            now - probe["last"],
                            probe["statements"],
                            probe["inside"],
                        )
                    )
                probe["kind"] = None
            return result

        cls._commit = lambda self: ended(self, original_commit)
        cls._rollback = lambda self: ended(self, original_rollback)

    connection_created.connect(on_connection, weak=False)

    def dump() -> None:
        with lock:
            rows = list(samples)
        Path(folder, f"{os.getpid()}.json").write_text(json.dumps({"argv": sys.argv, "samples": rows}))

    atexit.register(dump)


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def collect(folder: Path) -> dict[str, dict[str, float]]:
    """Per kind: count, and hold / first-statement / commit times in ms (p50, p95, p99, max, total)."""
    by_kind: dict[str, list[tuple[float, float, float, int, float]]] = {}
    for path in folder.glob("*.json"):
        for kind, hold, first, commit, statements, inside in json.loads(path.read_text())["samples"]:
            if kind != "migrate":
                by_kind.setdefault(kind, []).append((hold, first, commit, statements, inside))
    table: dict[str, dict[str, float]] = {}
    for kind, rows in sorted(by_kind.items()):
        holds = [r[0] * 1000 for r in rows]
        firsts = [r[1] * 1000 for r in rows]
        commits = [r[2] * 1000 for r in rows]
        table[kind] = {
            "count": len(rows),
            "statements": sum(r[3] for r in rows) / len(rows),
            "hold_p50": _percentile(holds, 0.5),
            "hold_p95": _percentile(holds, 0.95),
            "hold_p99": _percentile(holds, 0.99),
            "hold_max": max(holds),
            "hold_total": sum(holds),
            "first_p50": _percentile(firsts, 0.5),
            "first_max": max(firsts),
            "commit_p50": _percentile(commits, 0.5),
            "commit_max": max(commits),
            # between the first statement and the COMMIT: in statements, and in Python between them
            "statements_total": sum(r[4] for r in rows) * 1000,
            "python_total": sum(r[0] - r[2] - r[4] for r in rows) * 1000,
            "commit_total": sum(commits),
        }
    return table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.reliability.sqlite_load import SqliteLoadConfig, run_sqlite_load

    results = []
    for run in range(args.runs):
        folder = Path(tempfile.mkdtemp(prefix="mq-lock-probe-"))
        env = {"MAILQUEUE_LOCK_PROBE": str(folder), "PYTHONPATH": f"{ROOT / 'bench' / 'lock_probe'}:{ROOT}"}
        report = run_sqlite_load(SqliteLoadConfig(env=env))
        table = collect(folder)
        results.append({"report": report.summary(), "locks": table})
        print(f"run {run + 1}: {report.summary()}")
        print(
            f"{'kind':<12}{'n':>6}{'stmts':>7}  hold ms: {'p50':>7}{'p95':>8}{'p99':>8}{'max':>8}{'total':>9}"
            f"   first stmt p50/max   commit p50/max   total: stmts / python / commit"
        )
        for kind, row in table.items():
            print(
                f"{kind[:30]:<12}{row['count']:>6.0f}{row['statements']:>7.1f}  {'':9}{row['hold_p50']:>7.1f}"
                f"{row['hold_p95']:>8.1f}{row['hold_p99']:>8.1f}{row['hold_max']:>8.1f}{row['hold_total']:>9.0f}"
                f"   {row['first_p50']:>6.1f} / {row['first_max']:<8.0f} {row['commit_p50']:>5.1f} / "
                f"{row['commit_max']:<8.1f} {row['statements_total']:>6.0f} / {row['python_total']:.0f} / "
                f"{row['commit_total']:.0f}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

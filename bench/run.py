"""`make bench`: start the servers, run every measurement, write bench/results.json and bench/RESULTS.md.

    .venv/bin/python -m bench.run --n 5000 --repeats 5
    .venv/bin/python -m bench.run --n 500 --repeats 3 --only enqueue,delivery

Runs under this project's virtual environment; the peers run from
bench/.venv-peers (made by `make bench`). Every server it needs is started
here on loopback and stopped at the end, on failure too.
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import json
import os
import subprocess
import sys
import time
from typing import Any

from . import (
    machine,
    measure_delivery,
    measure_enqueue,
    measure_latency,
    measure_memory,
    measure_raw,
    profile_delivery,
    report,
)
from .context import BENCH, MAILER_SQLITE, OURS_SQLITE, PEERS_PY, PO_SQLITE, REPO, Context
from .servers import Servers, SmtpSink, port_25_listening

STEPS = {
    "raw": measure_raw.run,
    "enqueue": measure_enqueue.run,
    "delivery": measure_delivery.run,
    "latency": measure_latency.run,
    "memory": measure_memory.run,
    "profile": profile_delivery.run,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=5000, help="messages per enqueue and delivery run (default 5000)")
    p.add_argument("--repeats", type=int, default=5, help="runs of every measurement (default 5; at least 3)")
    p.add_argument("--size", type=int, default=2000, help="bytes per message on the wire (default 2000)")
    p.add_argument("--latency-count", type=int, default=200)
    p.add_argument("--latency-interval", type=float, default=0.05, help="seconds between two adds")
    p.add_argument("--big-count", type=int, default=50, help="big messages for the memory run")
    p.add_argument("--big-mib", type=int, default=10, help="MiB per big message")
    p.add_argument("--big-concurrency", type=int, default=20, help="CONCURRENCY for the memory run")
    p.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps of {', '.join(STEPS)}")
    p.add_argument("--profile-rate", type=int, default=200, help="py-spy samples per second")
    p.add_argument(
        "--libs",
        default="",
        help="a development aid: only these of ours,mailer,postoffice (comma-separated); the report then lacks "
        "the others' rows, so a full run never uses it",
    )
    p.add_argument(
        "--measures",
        default="",
        help="the delivery step's measures to run (comma-separated, e.g. deliver.1,deliver.1.dkim-rsa); with "
        "--merge the others keep the previous run's numbers",
    )
    p.add_argument("--keep", action="store_true", help="keep the servers' data directory")
    p.add_argument("--note", default=os.environ.get("BENCH_NOTE", ""), help="a line for RESULTS.md")
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the previous results.json's measurements that this run's steps do not redo (its date, load "
        "and disturbance stay those of the previous run)",
    )
    args = p.parse_args(argv)
    if args.repeats < 3:
        p.error("--repeats must be at least 3")
    unknown = set(args.only.split(",")) - set(STEPS)
    if unknown:
        p.error(f"unknown steps {sorted(unknown)}")
    return args


def git_state() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "django_mailqueue"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"
    return f"commit {head}" + (" with uncommitted engine changes" if dirty else "")


def _short(text: str, prefix: str) -> str:
    """'postgres (PostgreSQL) 15.20 (Debian …)' -> 'PostgreSQL 15.20'; 'Redis server v=7.0.15 …' -> 'Redis 7.0.15'."""
    import re

    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    return f"{prefix} {m.group(1)}" if m else text


def versions(ctx: Context) -> tuple[dict[str, Any], dict[str, Any]]:
    ours = ctx.driver(OURS_SQLITE, ctx.template(OURS_SQLITE), "info")
    mailer = ctx.driver(MAILER_SQLITE, ctx.template(MAILER_SQLITE), "info")
    po = ctx.driver(PO_SQLITE, ctx.template(PO_SQLITE), "info")
    out = {
        "python": ours["python"],
        "python_peers": mailer["python"],
        "django_ours": ours["django"],
        "django_peers": mailer["django"],
        "ours": ours.get("version"),
        "git": git_state(),
        "mailer": mailer.get("version"),
        "postoffice": po.get("version"),
        "aiosmtplib": mailer.get("aiosmtplib"),
        "aiosmtplib_ours": ours.get("aiosmtplib"),
        "psycopg": ours.get("psycopg"),
        "redis_py": ours.get("redis"),
        "hiredis": ours.get("hiredis"),
        "postgres": _short(ctx.servers.postgres.version(), "PostgreSQL"),
        "redis": _short(ctx.servers.redis.version(), "Redis"),
        "postfix": SmtpSink.version(),
    }
    return out, {"byte_budget": ours.get("byte_budget"), "byte_budget_key": ours.get("byte_budget_key")}


def verdict(load_before: tuple[float, float, float], dist: dict[str, float]) -> str:
    # Judged by what other processes took while the run lasted: the load average before it is
    # a lagging figure that counts the bench's own set-up (make, pip) just before it.
    share = dist.get("others_share_of_machine", 0.0)
    if share < 0.05:
        return f"The machine was otherwise quiet: undisturbed run (other processes took {100 * share:.1f}% of the CPU)."
    return (
        f"The machine was otherwise busy: DISTURBED run (other processes took {100 * share:.0f}% of the CPU; "
        f"1-minute load {load_before[0]:.2f} before). Treat the timings as indicative."
    )


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The previous run's results, with this (partial) run's measurements and diagnostics laid over them."""
    redone = {(s["measure"], s["config"]) for s in new["series"]}
    merged = dict(old)
    merged["series"] = [s for s in old.get("series", []) if (s["measure"], s["config"]) not in redone] + new["series"]
    merged["diagnostics"] = {**old.get("diagnostics", {}), **new.get("diagnostics", {})}
    merged["steps"] = sorted(set(old.get("steps", [])) | set(new["steps"]))
    merged["merged"] = [
        *old.get("merged", []),
        {"date": new["date"], "steps": new["steps"], "verdict": new["verdict"], "git": git_state()},
    ]

    return merged


def compile_ours() -> None:
    """Bytecode for our package and the bench's modules, before any timed process starts.

    The peers come from PyPI: pip wrote their bytecode when it installed them. Ours is
    installed editable, from the checkout, so its modules have bytecode only once some
    process writes it — and never where PYTHONDONTWRITEBYTECODE is set (as on the machines
    this runs on): every worker would compile ~50 modules at its start (~60 ms) and the
    peers' would not. compileall writes it whatever that variable says."""
    for tree in (REPO / "django_mailqueue", BENCH):
        compileall.compile_dir(tree, quiet=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not PEERS_PY.exists():
        print(f"{PEERS_PY} is missing: run `make bench`, which makes it", file=sys.stderr)
        return 2
    if port_25_listening():
        print("warning: something listens on port 25 (Postfix's daemon?); the benchmark never uses it", file=sys.stderr)
    steps = [s for s in STEPS if s in args.only.split(",")]
    compile_ours()
    started = time.time()
    load_before = machine.loadavg()
    data: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "args": vars(args),
        "steps": steps,
        "machine": machine.describe(),
        "note": args.note,
    }
    dist = machine.Disturbance()
    complete = False
    ctx: Context | None = None
    try:
        with Servers(keep=args.keep) as servers:
            pid_file = servers.postgres.data / "postmaster.pid"
            dist.roots = [int(pid_file.read_text().split()[0])] if pid_file.exists() else []
            dist.start()
            ctx = Context(args, servers)
            ctx.log(
                f"servers up in {servers.root}: PostgreSQL :{servers.postgres.port}, Redis :{servers.redis.port}, "
                f"smtp-sink :{servers.sink.port}, recording sink :{servers.recorder.port}"
            )
            data["versions"], budget = versions(ctx)
            data.update(budget)
            data["postgres_settings"] = servers.postgres.settings()
            ctx.check_redis_store()
            data["redis_store"] = list(ctx.redis_status)
            for step in steps:
                ctx.log(f"== {step}")
                t0 = time.time()
                STEPS[step](ctx)
                ctx.log(f"== {step} done in {time.time() - t0:.0f} s")
            dist.stop()
            complete = True
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", file=sys.stderr)
    finally:
        if not complete and hasattr(dist, "_t0"):
            dist.stop()
        data["disturbance"] = dist.as_dict()
        data["load"] = {"before": load_before, "after": machine.loadavg()}
        data["verdict"] = verdict(load_before, data["disturbance"])
        if not complete:
            data["verdict"] += " INCOMPLETE: the run was cut short."
        data["elapsed_seconds"] = round(time.time() - started)
        data["port_25_listening_after"] = port_25_listening()
        data.setdefault("versions", {})
        data["series"] = [s.summary() for s in ctx.series.values()] if ctx else []
        data["diagnostics"] = ctx.diagnostics if ctx else {}
        out = BENCH / "results.json"
        if args.merge and out.exists():
            data = merge(json.loads(out.read_text()), data)
        out.write_text(json.dumps(data, indent=1) + "\n")
        report.main([str(out)])
        print(f"wrote {BENCH / 'RESULTS.md'} and {out} ({data['elapsed_seconds']} s)")
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())

"""Delivery rate of N queued messages to smtp-sink: one worker process for everybody, 2 and 4 for us.

Ours: `manage.py mailqueue_work --once` (K of them started together);
django-mailer: `manage.py send_mail`; post-office: `manage.py send_queued_mail`
(`--processes 1` and `--processes 2`). `deliver.1.dkim-rsa` and
`deliver.1.dkim-ed25519`: ours, one process, the same mail DKIM-signed
(RSA-2048, Ed25519) by the worker. `deliver.1.shaped`: ours, one process,
the relay route with traffic-shaping limits that do not bind (RATE, CONNECTIONS,
MESSAGES_PER_CONNECTION far above what one process reaches), run right after
each `deliver.1` of the same store: issue 20 wants it within 5% of it. The queue is filled before the clock
starts (a copy of a filled template database). The rate is N / wall time from
starting the processes until the last one exits, process start-up included
(reported apart as `startup`). A run counts only if smtp-sink received all N
messages and the queue is empty afterwards.
"""

from __future__ import annotations

import json
import re
import statistics

from . import procs
from .context import (
    ALL,
    LOGS,
    MAILER_PG,
    MAILER_SQLITE,
    OURS,
    OURS_REDIS_CLUSTER,
    PO_PG,
    PO_SQLITE,
    TUNED,
    Config,
    Context,
)
from .measure_raw import aiosmtplib_rate

MIB = 1024 * 1024
#: measure -> the DKIM algorithm ours signs with in it
DKIM_MEASURES = {"deliver.1.dkim-rsa": "rsa-sha256", "deliver.1.dkim-ed25519": "ed25519-sha256"}
#: ours, one process, with traffic-shaping limits that do not bind (bench/projects/ours_settings.py: BENCH_SHAPED)
SHAPED = "deliver.1.shaped"


def commands(ctx: Context, cfg: Config, processes: int) -> list[list[str]]:
    if cfg.lib == "ours":
        return [ctx.manage(cfg, "mailqueue_work", "--once") for _ in range(processes)]
    if cfg.lib == "mailer":
        return [ctx.manage(cfg, "send_mail")]
    lock = str(ctx.runs / "post_office")
    return [ctx.manage(cfg, "send_queued_mail", "--processes", str(processes), "--lockfile", lock)]


def plans(ctx: Context) -> list[tuple[str, Config, int]]:
    """One repeat's runs, in order: each of our stores' shaped and DKIM runs right after its plain one-process run,
    so each pair is measured minutes apart at most, the machine's speed alike."""
    out: list[tuple[str, Config, int]] = []
    for cfg in ctx.available([*ALL, *TUNED]):
        out.append(("deliver.1", cfg, 1))
        if cfg.lib == "ours" and not cfg.tuned:  # right after its unshaped twin: the pair meets the same machine
            out.append((SHAPED, cfg, 1))
        if cfg in OURS:
            out += [(measure, cfg, 1) for measure in DKIM_MEASURES]
    out += [("deliver.1", cfg, 1) for cfg in ctx.available([OURS_REDIS_CLUSTER])]  # 3 partitions
    for cfg in ctx.available(OURS):
        out.append(("deliver.2", cfg, 2))
        out.append(("deliver.4", cfg, 4))
    out += [("deliver.2", cfg, 2) for cfg in ctx.available([PO_SQLITE, PO_PG])]
    wanted = getattr(ctx.args, "measures", "")
    return [plan for plan in out if not wanted or plan[0] in wanted.split(",")]


def dkim_env(ctx: Context, measure: str) -> dict[str, str]:
    """BENCH_DKIM_*: a key of the measure's algorithm, written once under the bench's work directory."""
    if measure not in DKIM_MEASURES:
        return {}
    from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem

    algorithm = DKIM_MEASURES[measure]
    path = ctx.runs / f"dkim-{algorithm}.pem"
    if not path.exists():
        path.write_bytes(generate_pem(algorithm))
    return {"BENCH_DKIM_KEY": str(path), "BENCH_DKIM_ALGORITHM": algorithm}


def startup(ctx: Context) -> None:
    """Seconds for a bare `django.setup()` in each project: part of every delivery's wall time."""
    for cfg in (OURS[0], MAILER_SQLITE, PO_SQLITE):
        env = ctx.env(cfg, ctx.template(cfg))
        times = []
        for i in range(3):
            group = procs.measure(
                [[str(cfg.python), "-m", "bench.driver", "noop"]], env=env, logdir=LOGS, name=f"startup-{cfg.lib}-{i}"
            )
            times.append(group.wall)
        ctx.record("startup", cfg.lib, "s", statistics.median(times))


def deliver_once(
    ctx: Context,
    measure: str,
    cfg: Config,
    processes: int,
    *,
    count: int,
    size: int,
    rep: int,
    concurrency: int | None = None,
) -> dict[str, float] | None:
    unit = "msg/s"
    name = f"{measure}-{cfg.key}-r{rep + 1}"
    extra = {"BENCH_CONCURRENCY": str(concurrency)} if concurrency else {}
    extra.update(dkim_env(ctx, measure))
    if measure == SHAPED:
        extra["BENCH_SHAPED"] = "1"
    with ctx.fresh(cfg, "filled", count=count, size=size) as db:
        spread = ""
        if cfg.store == "redis-cluster" and ctx.servers.redis_cluster is not None:
            spread = str(ctx.servers.redis_cluster.keys_per_node())  # the filled queue's keys, by primary
        before = ctx.servers.sink.counters()
        group = procs.measure(
            commands(ctx, cfg, processes), env=ctx.env(cfg, db, **extra), logdir=LOGS, name=name, timeout=3600
        )
        for r in group.results:
            r.check(f"{cfg.key} delivery")
        after = ctx.servers.sink.counters()
        delivered = after["mesg"] - before["mesg"]
        queued = ctx.driver(cfg, db, "count")["queued"]
    if delivered < count or queued != 0:
        raise RuntimeError(f"the sink got {delivered} of {count} messages and {queued} are still queued (see {LOGS})")
    cpu = sum(r.cpu for r in group.results)
    stats = {
        "user_cpu_seconds": sum(r.utime for r in group.results),
        "system_cpu_seconds": sum(r.stime for r in group.results),
        "smtp_sessions_per_msg": (after["sess"] - before["sess"]) / count,
        "rate": count / group.wall,
        "wall": group.wall,
        "cpu_seconds": cpu,
        "cpu_ms_per_msg": 1000 * cpu / count,
        "worker_cpu_share": cpu / group.wall,
        "machine_busy_share": group.machine_busy,
        "maxrss_mib": max(r.maxrss_kib for r in group.results) / 1024,
        "delivered_at_sink": delivered,
    }
    if spread:
        stats["keys_per_node"] = spread  # type: ignore[assignment]
    if cfg.lib == "ours":
        summary = re.findall(r"mailqueue: (\d+) attempts, (\d+) delivered", "".join(r.stdout for r in group.results))
        stats["worker_delivered"] = sum(int(d) for _, d in summary)
    ctx.record(measure, cfg.key, unit, stats["rate"], **{k: v for k, v in stats.items() if k != "rate"})
    return stats


def run(ctx: Context) -> None:
    n, size = ctx.args.n, ctx.args.size
    for measure in ("deliver.1", SHAPED, "deliver.2", "deliver.4", "rss.deliver", *DKIM_MEASURES):
        ctx.mark_redis(measure, "MiB" if measure.startswith("rss") else "msg/s")
    for cfg in (MAILER_SQLITE, MAILER_PG):
        for measure in ("deliver.2", "deliver.4"):
            ctx.mark(measure, cfg.key, "msg/s", "n/a", "n/a (one sender at a time: lock file)")
    for cfg in (PO_SQLITE, PO_PG):
        ctx.mark("deliver.4", cfg.key, "msg/s", "n/a", "not measured")
    startup(ctx)
    for rep in range(ctx.args.repeats):
        for measure, cfg, processes in plans(ctx):
            if measure == "deliver.1" and cfg.lib == "ours" and not cfg.tuned:
                paired_raw(ctx, cfg, rep)
            try:
                stats = deliver_once(ctx, measure, cfg, processes, count=n, size=size, rep=rep)
                assert stats is not None
                if measure == "deliver.1":
                    ctx.record("rss.deliver", cfg.key, "MiB", stats["maxrss_mib"])
                ctx.log(
                    f"{measure} {cfg.key} run {rep + 1}: {stats['rate']:,.0f} msg/s, "
                    f"CPU {stats['cpu_ms_per_msg']:.2f} ms/msg, RSS {stats['maxrss_mib']:.0f} MiB"
                )
            except Exception as exc:  # noqa: BLE001 - one configuration's failure must not stop the run
                ctx.mark(measure, cfg.key, "msg/s", "error", f"{type(exc).__name__}: {exc}")
                ctx.log(f"{measure} {cfg.key} run {rep + 1}: ERROR {exc}")


def paired_raw(ctx: Context, cfg: Config, rep: int) -> None:
    """The raw aiosmtplib client with reuse, run right before each of our one-process runs: the
    "60% of raw" target compares the two at the same moment (a virtual machine's speed can move
    by a third within one run, and the raw step runs only at its start)."""
    try:
        out = aiosmtplib_rate(ctx, "reuse")
        ctx.record("raw.reuse.paired", cfg.key, "msg/s", out["rate"], seconds=out["seconds"])
        ctx.log(f"raw.reuse before {cfg.key} run {rep + 1}: {out['rate']:,.0f} msg/s")
    except Exception as exc:  # noqa: BLE001 - the raw step's own measurement stands in
        ctx.mark("raw.reuse.paired", cfg.key, "msg/s", "error", f"{type(exc).__name__}: {exc}")
        ctx.log(f"raw.reuse before {cfg.key} run {rep + 1}: ERROR {exc}")


def diagnose(ctx: Context) -> None:
    """Work per delivered message, one process each (not timed): SQL statements by verb, PostgreSQL
    commits, Redis commands, SMTP sessions, CPU. Statements are counted by an execute wrapper the
    bench settings install (BENCH_COUNT_QUERIES); this run is not one of the timed ones."""
    n, size = ctx.args.n, ctx.args.size
    for cfg in ctx.available(ALL):
        try:
            counts = ctx.runs / f"queries-{cfg.key}.json"
            counts.unlink(missing_ok=True)
            with ctx.fresh(cfg, "filled", count=n, size=size) as db:
                if cfg.store == "redis":
                    ctx.servers.redis.reset_stats()
                before = ctx.servers.sink.counters()
                commits0 = ctx.servers.postgres.commits(db.name) if db.kind == "postgres" else None
                group = procs.measure(
                    commands(ctx, cfg, 1), env=ctx.env(cfg, db, BENCH_COUNT_QUERIES=str(counts)), logdir=LOGS,
                    name=f"diagnose-{cfg.key}",
                )  # fmt: skip
                group.results[0].check(f"{cfg.key} delivery")
                after = ctx.servers.sink.counters()
                commits = ctx.servers.postgres.commits(db.name) - commits0 if commits0 is not None else None
                redis_calls = ctx.servers.redis.command_calls() if cfg.store == "redis" else {}
            got = after["mesg"] - before["mesg"]
            if got < n:
                raise RuntimeError(f"the sink got {got} of {n}")
            queries = json.loads(counts.read_text()) if counts.exists() else {}
            r = group.results[0]
            # the same command on an empty queue: what a run costs before the first message
            with ctx.fresh(cfg) as empty_db:
                if cfg.store == "redis":
                    ctx.servers.redis.flush()
                empty = procs.measure(
                    commands(ctx, cfg, 1), env=ctx.env(cfg, empty_db), logdir=LOGS, name=f"diagnose-empty-{cfg.key}"
                )
            e = empty.results[0].check(f"{cfg.key} empty run")
            ctx.diagnostics[cfg.key] = {
                "messages": n,
                "sql_per_msg": round(sum(queries.values()) / n, 2),
                "sql_by_verb_per_msg": {k: round(v / n, 2) for k, v in sorted(queries.items(), key=lambda kv: -kv[1])},
                "pg_commits_per_msg": round(commits / n, 2) if commits is not None else None,
                "redis_calls_per_msg": round(sum(redis_calls.values()) / n, 2) if redis_calls else None,
                "redis_by_command_per_msg": {k: round(v / n, 2) for k, v in redis_calls.items()},
                "smtp_sessions_per_msg": round((after["sess"] - before["sess"]) / n, 3),
                "user_cpu_ms_per_msg": round(1000 * r.utime / n, 3),
                "system_cpu_ms_per_msg": round(1000 * r.stime / n, 3),
                "wall_ms_per_msg": round(1000 * group.wall / n, 3),
                "empty_run_cpu_seconds": round(e.cpu, 3),
                "empty_run_wall_seconds": round(empty.wall, 3),
                "marginal_cpu_ms_per_msg": round(1000 * (r.cpu - e.cpu) / n, 3),
                "marginal_wall_ms_per_msg": round(1000 * (group.wall - empty.wall) / n, 3),
            }
            ctx.diagnostics[cfg.key].update(enqueue_work(ctx, cfg))
            ctx.log(f"diagnose {cfg.key}: {ctx.diagnostics[cfg.key]}")
        except Exception as exc:  # noqa: BLE001
            ctx.diagnostics[cfg.key] = {"error": f"{type(exc).__name__}: {exc}"}
            ctx.log(f"diagnose {cfg.key}: ERROR {exc}")


def enqueue_work(ctx: Context, cfg: Config, count: int = 200) -> dict[str, object]:
    """SQL statements (by verb) and PostgreSQL commits per enqueued message, one call a message and in batches."""
    out: dict[str, object] = {}
    for mode in ("single", "batch"):
        counts = ctx.runs / f"queries-enqueue-{mode}-{cfg.key}.json"
        counts.unlink(missing_ok=True)
        with ctx.fresh(cfg) as db:
            commits0 = ctx.servers.postgres.commits(db.name) if db.kind == "postgres" else None
            ctx.driver(
                cfg, db, "enqueue", "--mode", mode, "--count", count, "--warmup", 0, BENCH_COUNT_QUERIES=str(counts)
            )
            commits = ctx.servers.postgres.commits(db.name) - commits0 if commits0 is not None else None
        queries = json.loads(counts.read_text()) if counts.exists() else {}
        out[f"enqueue_{mode}_sql_per_msg"] = round(sum(queries.values()) / count, 2)
        out[f"enqueue_{mode}_sql_by_verb_per_msg"] = {
            k: round(v / count, 2) for k, v in sorted(queries.items(), key=lambda kv: -kv[1])
        }
        if cfg.store != "redis":
            out[f"enqueue_{mode}_pg_commits_per_msg"] = round(commits / count, 2) if commits is not None else None
    return out

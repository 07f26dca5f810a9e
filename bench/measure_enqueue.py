"""Enqueue rate through Django's mail API: one `send_mail()` a call, and `send_mass_mail()` in batches of 100, every
library on SQLite and PostgreSQL (ours: Redis), PostgreSQL with Django's default and with tuned `OPTIONS`;
post-office's own `send_many`; the floors, each right after ours' run it judges: the commit floor on each database
(bench/commit_floor.py), the promised floor (bench/promised_floor.py) and the bulk floor (bench/bulk_floor.py)
on SQLite."""

from __future__ import annotations

import contextlib
import json

from . import procs
from .context import ALL, BENCH, OURS_PY, PO_PG, PO_SQLITE, REPO, TUNED, Config, Context
from .measure_raw import plain_env

MEASURES = {"single": "enqueue.single", "batch": "enqueue.batch", "sendmany": "enqueue.sendmany"}
FLOOR = "enqueue.floor"
BULK_FLOOR = "enqueue.bulk_floor"
PROMISED_FLOOR = "enqueue.promised_floor"


def run(ctx: Context) -> None:
    n, size = ctx.args.n, ctx.args.size
    configs = {
        "single": ctx.available([*ALL, *TUNED]),
        "batch": ctx.available([*ALL, *TUNED]),
        "sendmany": ctx.available([PO_SQLITE, PO_PG]),  # post-office's own bulk call: a second line
    }
    for measure in ("enqueue.single", "enqueue.batch"):
        ctx.mark_redis(measure, "msg/s")
    for rep in range(ctx.args.repeats):
        for mode, measure in MEASURES.items():
            for cfg in configs[mode]:
                try:
                    with ctx.fresh(cfg) as db:
                        res = ctx.driver(cfg, db, "enqueue", "--mode", mode, "--count", n, "--size", size)
                    if not res["ok"]:
                        raise RuntimeError(f"queued {res['queued']}, expected {res['expected']}")
                    rate = res["count"] / res["seconds"]
                    extra = {"cpu_seconds": res["cpu_seconds"]} if "cpu_seconds" in res else {}
                    ctx.record(
                        measure, cfg.key, "msg/s", rate, seconds=res["seconds"], count=res["count"], rep=rep, **extra
                    )
                    ctx.log(f"{measure} {cfg.key} run {rep + 1}: {rate:,.0f} msg/s")
                except Exception as exc:  # noqa: BLE001 - one configuration's failure must not stop the run
                    ctx.mark(measure, cfg.key, "msg/s", "error", f"{type(exc).__name__}: {exc}")
                    ctx.log(f"{measure} {cfg.key} run {rep + 1}: ERROR {exc}")
                paired_floors(ctx, cfg, mode, rep)


def paired_floors(ctx: Context, cfg: Config, mode: str, rep: int) -> None:
    """The floors that judge ours, each right after ours' run they judge: the VM's speed drifts by tens of per
    cent within minutes, so a floor measured next to ours is what the ratio of the two can be read against."""
    if cfg.lib != "ours" or cfg.tuned or cfg.store != "orm":
        return
    if mode == "single":
        floor(ctx, cfg.db, rep)
        if cfg.db == "sqlite":
            promised_floor(ctx, rep)
    elif mode == "batch" and cfg.db == "sqlite":
        bulk_floor(ctx, rep)


def floor(ctx: Context, db: str, rep: int) -> None:
    """One run of the commit floor on a blank database (a new SQLite file; a new PostgreSQL database)."""
    n, size = ctx.args.n, ctx.args.size
    name = f"floor_{db}_{rep + 1}"
    path = ctx.runs / f"{name}.sqlite3"
    cmd = [str(OURS_PY), str(BENCH / "commit_floor.py"), "--count", str(n), "--size", str(size)]
    try:
        if db == "sqlite":
            path.unlink(missing_ok=True)
            cmd += ["--sqlite", str(path)]
        else:
            ctx.servers.postgres.create_db(name)
            cmd += ["--pg-port", str(ctx.servers.postgres.port), "--pg-name", name]
        res = procs.run(cmd, env=plain_env(), timeout=1800).check("the commit floor")
        out = json.loads(res.stdout.strip().splitlines()[-1])
        rate = out["count"] / out["seconds"]
        ctx.record(FLOOR, db, "msg/s", rate, seconds=out["seconds"], count=out["count"], rep=rep)
        ctx.log(f"{FLOOR} {db} run {rep + 1}: {rate:,.0f} msg/s")
    except Exception as exc:  # noqa: BLE001 - the floor is context; its failure must not stop the run
        ctx.mark(FLOOR, db, "msg/s", "error", f"{type(exc).__name__}: {exc}")
        ctx.log(f"{FLOOR} {db} run {rep + 1}: ERROR {exc}")
    finally:
        if db == "sqlite":
            for suffix in ("", "-journal"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
        else:
            with contextlib.suppress(Exception):
                ctx.servers.postgres.drop_db(name)


def bulk_floor(ctx: Context, rep: int) -> None:
    """One run of the bulk floor (batches of 100, one row a message) on a new SQLite file."""
    sqlite_floor(ctx, rep, BULK_FLOOR, "bulk_floor", "the bulk floor")


def promised_floor(ctx: Context, rep: int) -> None:
    """One run of the promised floor (Django's `send_mail()`, one row a message, a commit each) on a new SQLite file."""
    sqlite_floor(ctx, rep, PROMISED_FLOOR, "promised_floor", "the promised floor")


def sqlite_floor(ctx: Context, rep: int, measure: str, module: str, what: str) -> None:
    """One run of `bench.<module>` on a new SQLite file, recorded as `measure` with its repeat and CPU seconds."""
    path = ctx.runs / f"{module}_{rep + 1}.sqlite3"
    cmd = [str(OURS_PY), "-m", f"bench.{module}", "--sqlite", str(path), "--count", str(ctx.args.n)]
    env = {**plain_env(), "BENCH_DB": "sqlite", "DJANGO_SETTINGS_MODULE": "bench.projects.ours_settings"}
    try:
        res = procs.run([*cmd, "--size", str(ctx.args.size)], env=env, cwd=REPO, timeout=1800).check(what)
        out = json.loads(res.stdout.strip().splitlines()[-1])
        count = out.pop("count")
        rate = count / out["seconds"]
        ctx.record(measure, "sqlite", "msg/s", rate, count=count, rep=rep, **out)
        ctx.log(f"{measure} sqlite run {rep + 1}: {rate:,.0f} msg/s")
    except Exception as exc:  # noqa: BLE001 - the floor is context; its failure must not stop the run
        ctx.mark(measure, "sqlite", "msg/s", "error", f"{type(exc).__name__}: {exc}")
        ctx.log(f"{measure} sqlite run {rep + 1}: ERROR {exc}")
    finally:
        for suffix in ("", "-journal"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)

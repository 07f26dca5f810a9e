"""Enqueue rate: one `send_mail()` a call, and batches of 100, every library on SQLite and PostgreSQL (ours: Redis)."""

from __future__ import annotations

from .context import ALL, Context

MEASURES = {"single": "enqueue.single", "batch": "enqueue.batch"}


def run(ctx: Context) -> None:
    n, size = ctx.args.n, ctx.args.size
    configs = ctx.available(ALL)
    for measure in MEASURES.values():
        ctx.mark_redis(measure, "msg/s")
    for rep in range(ctx.args.repeats):
        for mode, measure in MEASURES.items():
            for cfg in configs:
                try:
                    with ctx.fresh(cfg) as db:
                        res = ctx.driver(cfg, db, "enqueue", "--mode", mode, "--count", n, "--size", size)
                    if not res["ok"]:
                        raise RuntimeError(f"queued {res['queued']}, expected {res['expected']}")
                    rate = res["count"] / res["seconds"]
                    ctx.record(measure, cfg.key, "msg/s", rate, seconds=res["seconds"], count=res["count"])
                    ctx.log(f"{measure} {cfg.key} run {rep + 1}: {rate:,.0f} msg/s")
                except Exception as exc:  # noqa: BLE001 - one configuration's failure must not stop the run
                    ctx.mark(measure, cfg.key, "msg/s", "error", f"{type(exc).__name__}: {exc}")
                    ctx.log(f"{measure} {cfg.key} run {rep + 1}: ERROR {exc}")

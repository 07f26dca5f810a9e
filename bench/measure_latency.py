"""Idle latency: an idle worker, then messages added one at a time; add → RCPT at a recording sink.

The worker (ours: `mailqueue_work`; django-mailer: `runmailer`, or
`runmailer_pg` on PostgreSQL; post-office has no daemon, it runs from cron)
is started against an empty queue and sends to `bench/recording_sink.py`,
which logs each RCPT's arrival time. After one warm-up message has arrived,
`--latency-count` messages are added, `--latency-interval` seconds apart, each
with its own recipient token; latency = RCPT arrival − the moment `send_mail()`
returned (the message was committed). Percentiles are per run; the report
gives the median of the runs' percentiles and their spread.
"""

from __future__ import annotations

import statistics

from .context import LOGS, MAILER_PG, MAILER_SQLITE, OURS, PO_PG, PO_SQLITE, Config, Context
from .procs import Child

PERCENTILES = (50, 95, 99)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def daemon(ctx: Context, cfg: Config) -> list[str]:
    if cfg.lib == "ours":
        return ctx.manage(cfg, "mailqueue_work")
    return ctx.manage(cfg, "runmailer_pg" if cfg.db == "postgres" else "runmailer")


def run(ctx: Context) -> None:
    count, interval = ctx.args.latency_count, ctx.args.latency_interval
    recorder = ctx.servers.recorder
    for p in PERCENTILES:
        ctx.mark_redis(f"latency.p{p}", "ms")
        for cfg in (PO_SQLITE, PO_PG):
            ctx.mark(f"latency.p{p}", cfg.key, "ms", "n/a", "n/a (cron)")
    configs = [*ctx.available(OURS), MAILER_SQLITE, MAILER_PG]
    for rep in range(ctx.args.repeats):
        for cfg in configs:
            prefix = f"lat-{cfg.key}-r{rep + 1}-"
            # django-mailer's runmailer polls every MAILER_EMPTY_QUEUE_SLEEP (30 s by default)
            wait = 120.0 if cfg.lib == "mailer" else 60.0
            try:
                with ctx.fresh(cfg) as db:
                    if cfg.store == "redis":
                        ctx.servers.redis.flush()
                    env = ctx.env(cfg, db, sink_port=recorder.port)
                    worker = Child(daemon(ctx, cfg), env=env, log=LOGS / f"latency-{cfg.key}-r{rep + 1}.log")
                    try:
                        res = ctx.driver(
                            cfg,
                            db,
                            "feed",
                            "--count",
                            count,
                            "--interval",
                            interval,
                            "--prefix",
                            prefix,
                            "--sink-log",
                            recorder.log,
                            "--timeout",
                            wait,
                            "--warmup-timeout",
                            wait,
                            sink_port=recorder.port,
                        )
                    finally:
                        stopped = worker.stop(30)
                if not res.get("ok") and "added" not in res:
                    raise RuntimeError(res.get("error", "feed failed"))
                arrivals = recorder.arrivals(prefix)
                added = res["added"]
                lat = [1000 * (arrivals[a] - t[1]) for a, t in added.items() if a in arrivals]
                missing = len(added) - len(lat)
                if not lat:
                    raise RuntimeError("no message arrived")
                values = {p: percentile(lat, p) for p in PERCENTILES}
                for p, v in values.items():
                    ctx.record(
                        f"latency.p{p}",
                        cfg.key,
                        "ms",
                        v,
                        messages=len(added),
                        missing=missing,
                        mean_ms=statistics.fmean(lat),
                        max_ms=max(lat),
                        idle_worker_maxrss_mib=stopped.maxrss_kib / 1024,
                    )
                ctx.log(
                    f"latency {cfg.key} run {rep + 1}: p50 {values[50]:.1f} ms, p95 {values[95]:.1f} ms, "
                    f"p99 {values[99]:.1f} ms ({missing} missing)"
                )
            except Exception as exc:  # noqa: BLE001
                for p in PERCENTILES:
                    ctx.mark(f"latency.p{p}", cfg.key, "ms", "error", f"{type(exc).__name__}: {exc}")
                ctx.log(f"latency {cfg.key} run {rep + 1}: ERROR {exc}")

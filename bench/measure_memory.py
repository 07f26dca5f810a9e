"""Peak RSS of our worker delivering big messages (default 50 × 10 MiB at CONCURRENCY 20), per store.

The report puts the peak RSS next to CONCURRENCY × message size (what could
be in flight without a budget) and next to `MAILQUEUE["MAX_BYTES_IN_FLIGHT"]`
(`driver info` reads it), the budget the target is set against.
"""

from __future__ import annotations

from .context import OURS, Context
from .measure_delivery import deliver_once

MIB = 1024 * 1024


def run(ctx: Context) -> None:
    count, mib, conc = ctx.args.big_count, ctx.args.big_mib, ctx.args.big_concurrency
    ctx.mark_redis("rss.big", "MiB")
    for rep in range(ctx.args.repeats):
        for cfg in ctx.available(OURS):
            try:
                stats = deliver_once(ctx, "deliver.big", cfg, 1, count=count, size=mib * MIB, rep=rep, concurrency=conc)
                assert stats is not None
                ctx.record(
                    "rss.big",
                    cfg.key,
                    "MiB",
                    stats["maxrss_mib"],
                    in_flight_mib=conc * mib,
                    mib_per_s=stats["rate"] * mib,
                    cpu_seconds=stats["cpu_seconds"],
                )
                ctx.log(f"rss.big {cfg.key} run {rep + 1}: peak RSS {stats['maxrss_mib']:.0f} MiB")
            except Exception as exc:  # noqa: BLE001
                ctx.mark("rss.big", cfg.key, "MiB", "error", f"{type(exc).__name__}: {exc}")
                ctx.log(f"rss.big {cfg.key} run {rep + 1}: ERROR {exc}")

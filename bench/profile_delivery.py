"""Profiles of our delivery path: py-spy sampling `mailqueue_work --once` delivering N messages, per store.

Two profiles a store: `cpu` (py-spy's default: only threads that are
running) says where the CPU goes; `wall` (`--idle`) also counts threads
waiting (the event loop in select, pool threads waiting for work, database
and SMTP round trips). The folded stacks go to bench/.work/profiles/ (load
them into speedscope or flamegraph.pl); the summaries to bench/profiles/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from . import measure_delivery, procs, stacks
from .context import BENCH, LOGS, OURS, PEERS_PY, Context

RAW = BENCH / ".work" / "profiles"
OUT = BENCH / "profiles"


def py_spy() -> str | None:
    candidate = PEERS_PY.parent / "py-spy"
    return str(candidate) if candidate.exists() else shutil.which("py-spy")


def enqueue_profiles(ctx: Context) -> None:
    """cProfile of ours enqueueing (bench/profile_enqueue.py), per store and mode, to bench/profiles/."""
    OUT.mkdir(parents=True, exist_ok=True)
    for cfg in ctx.available(OURS):
        for mode in ("batch", "single"):
            try:
                with ctx.fresh(cfg) as db:
                    if cfg.store == "redis":
                        ctx.servers.redis.flush()
                    count = min(ctx.args.n, 2000 if mode == "batch" else 500)
                    res = procs.run(
                        [str(cfg.python), "-m", "bench.profile_enqueue", "--mode", mode, "--count", str(count)],
                        env=ctx.env(cfg, db), cwd=BENCH.parent, timeout=1800,
                    ).check("profile_enqueue")  # fmt: skip
                path = OUT / f"enqueue-{cfg.key}-{mode}.txt"
                path.write_text(f"cProfile: {cfg.label}, {count} messages, {mode}\n\n{res.stdout}")
                ctx.log(f"profile enqueue {cfg.key} {mode}: written to {path}")
            except Exception as exc:  # noqa: BLE001
                ctx.log(f"profile enqueue {cfg.key} {mode}: ERROR {exc}")


def run(ctx: Context) -> None:
    measure_delivery.diagnose(ctx)
    enqueue_profiles(ctx)
    spy = py_spy()
    if spy is None:
        ctx.log("profile: py-spy is not installed; skipped")
        return
    RAW.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    n, size = ctx.args.n, ctx.args.size
    for cfg in ctx.available(OURS):
        for mode in ("cpu", "wall"):
            folded = RAW / f"{cfg.key}-{mode}.folded"
            try:
                with ctx.fresh(cfg, "filled", count=n, size=size) as db:
                    before = ctx.servers.sink.messages()
                    cmd = [
                        spy,
                        "record",
                        "--rate",
                        str(ctx.args.profile_rate),
                        "--nonblocking",
                        "--format",
                        "raw",
                        "--output",
                        str(folded),
                    ]
                    if mode == "wall":
                        cmd.append("--idle")
                    cmd += ["--", *ctx.manage(cfg, "mailqueue_work", "--once")]
                    group = procs.measure([cmd], env=ctx.env(cfg, db), logdir=LOGS, name=f"profile-{cfg.key}-{mode}")
                    group.results[0].check("py-spy")
                    got = ctx.servers.sink.messages() - before
                if got < n:
                    raise RuntimeError(f"the sink got {got} of {n}")
                r = group.results[0]
                per = (1000 * r.cpu / n) if mode == "cpu" else (1000 * group.wall / n)
                title = (
                    f"{cfg.label}: `mailqueue_work --once`, {n} messages of {size} B, py-spy {mode} profile "
                    f"({n / group.wall:,.0f} msg/s under the profiler; worker CPU {r.cpu:.1f} s in {group.wall:.1f} s)"
                )
                text = stacks.summarise(
                    Path(folded).read_text(), title=title, ms_per_msg=per, basis="CPU" if mode == "cpu" else "wall"
                )
                (OUT / f"{cfg.key}-{mode}.md").write_text(text + "\n")
                ctx.log(f"profile {cfg.key} {mode}: written to {OUT / f'{cfg.key}-{mode}.md'}")
            except Exception as exc:  # noqa: BLE001
                ctx.log(f"profile {cfg.key} {mode}: ERROR {exc}")

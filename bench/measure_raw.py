"""The raw client ceiling on the same sink: aiosmtplib with 20 connections (one message a connection, and
connections reused with RSET between messages), and Postfix's own C `smtp-source` the same two ways.
"""

from __future__ import annotations

import json
import os
import shutil

from . import procs
from .context import BENCH, LOGS, PEERS_PY, Context

CONCURRENCY = 20


def smtp_source() -> str | None:
    found = shutil.which("smtp-source")
    if found:
        return found
    return "/usr/sbin/smtp-source" if os.path.exists("/usr/sbin/smtp-source") else None


def plain_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BENCH_", "DJANGO_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def aiosmtplib_rate(ctx: Context, mode: str) -> dict[str, float]:
    """One run of the raw aiosmtplib client (20 connections, N messages): its rate, seconds and size."""
    n, size = ctx.args.n, ctx.args.size
    before = ctx.servers.sink.messages()
    res = procs.run(
        [
            str(PEERS_PY),
            str(BENCH / "raw_client.py"),
            "--port",
            str(ctx.servers.sink.port),
            "--count",
            str(n),
            "--size",
            str(size),
            "--concurrency",
            str(CONCURRENCY),
            "--mode",
            mode,
        ],
        env=plain_env(),
        timeout=1800,
    ).check("raw aiosmtplib client")
    got = ctx.servers.sink.messages() - before
    if got < n:
        raise RuntimeError(f"the sink got {got} of {n}")
    out: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def run(ctx: Context) -> None:
    n, size = ctx.args.n, ctx.args.size
    port = ctx.servers.sink.port
    source = smtp_source()
    for rep in range(ctx.args.repeats):
        for mode in ("per-connection", "reuse"):
            measure = f"raw.{mode}"
            try:
                out = aiosmtplib_rate(ctx, mode)
                ctx.record(measure, "aiosmtplib", "msg/s", out["rate"], seconds=out["seconds"], size=out["size"])
                ctx.log(f"{measure} aiosmtplib run {rep + 1}: {out['rate']:,.0f} msg/s")
            except Exception as exc:  # noqa: BLE001
                ctx.mark(measure, "aiosmtplib", "msg/s", "error", f"{type(exc).__name__}: {exc}")
                ctx.log(f"{measure} aiosmtplib run {rep + 1}: ERROR {exc}")
            if source is None:
                ctx.mark(measure, "smtp-source", "msg/s", "n/a", "smtp-source is not installed")
                continue
            try:
                before = ctx.servers.sink.messages()
                cmd = [
                    source,
                    "-s",
                    str(CONCURRENCY),
                    "-m",
                    str(n),
                    "-l",
                    str(size),
                    "-M",
                    "bench.example",
                    "-f",
                    "sender@bench.example",
                    "-t",
                    "rcpt@bench.example",
                ]
                if mode == "reuse":
                    cmd.append("-d")
                group = procs.measure(
                    [[*cmd, f"127.0.0.1:{port}"]],
                    env=plain_env(),
                    logdir=LOGS,
                    name=f"smtp-source-{mode}-r{rep + 1}",
                    timeout=1800,
                )
                group.results[0].check("smtp-source")
                got = ctx.servers.sink.messages() - before
                if got < n:
                    raise RuntimeError(f"the sink got {got} of {n}")
                ctx.record(measure, "smtp-source", "msg/s", n / group.wall, seconds=group.wall)
                ctx.log(f"{measure} smtp-source run {rep + 1}: {n / group.wall:,.0f} msg/s")
            except Exception as exc:  # noqa: BLE001
                ctx.mark(measure, "smtp-source", "msg/s", "error", f"{type(exc).__name__}: {exc}")
                ctx.log(f"{measure} smtp-source run {rep + 1}: ERROR {exc}")

"""CPU per delivered message, ours (and post-office), one process: `python -m bench.cpu_delivery` (not in `make bench`).

A development aid for work on the delivery path under a loaded machine: the
worker's own CPU time (user + system, from `wait4`) divided by the messages,
per store and signing mode, interleaved over `--repeats`; with `--profile`, a
cProfile of each run (top functions by own time, to bench/.work/profiles/); with
`--callgrind`, the instructions valgrind counts in the worker's run (all its threads).
Wall rates and ratios are printed too; read them only from a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path

from . import measure_delivery, procs
from .context import BENCH, LOGS, OURS, OURS_REDIS_CLUSTER, PEERS_PY, PO_PG, PO_SQLITE, Config, Context
from .servers import Servers

MODES = {
    "plain": "deliver.1",
    "rsa": "deliver.1.dkim-rsa",
    "ed25519": "deliver.1.dkim-ed25519",
    "shaped": measure_delivery.SHAPED,
}
PROFILES = BENCH / ".work" / "profiles"
#: `python -m django ...` under cProfile timed by the process's CPU clock (not wall time: the machine is loaded)
_PROFILED = (
    "import cProfile, runpy, sys, time\n"
    "sys.argv = ['django', *sys.argv[1:]]\n"
    "p = cProfile.Profile(time.process_time)\n"
    "p.enable()\n"
    "try:\n"
    "    runpy.run_module('django', run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    p.disable()\n"
    "    p.dump_stats({path!r})\n"
)


#: `python -m django ...` with the time spent in the garbage collector written to stderr at exit
_GC_TIMED = (
    "import atexit, gc, runpy, sys, time\n"
    "sys.argv = ['django', *sys.argv[1:]]\n"
    "stats = {'t': 0.0, 'n': [0, 0, 0], 'start': 0.0}\n"
    "def cb(phase, info):\n"
    "    if phase == 'start': stats['start'] = time.process_time()\n"
    "    else:\n"
    "        stats['t'] += time.process_time() - stats['start']; stats['n'][info['generation']] += 1\n"
    "gc.callbacks.append(cb)\n"
    "def report(): print(f\"GC {stats['t']:.3f} s CPU, collections by generation {stats['n']}\", file=sys.stderr)\n"
    "atexit.register(report)\n"
    "runpy.run_module('django', run_name='__main__', alter_sys=True)\n"
)


#: `python -m django ...` counting, per message, the store's calls and Django's commits and statements (`--count`):
#: a line "COUNTS {json}" at exit
_COUNTED = (
    "import atexit, collections, functools, inspect, json, runpy, sys\n"
    "sys.argv = ['django', *sys.argv[1:]]\n"
    "calls = collections.Counter()\n"
    "def counted(cls, name, fn):\n"
    "    label = f'{cls.__name__}.{name}'\n"
    "    if inspect.iscoroutinefunction(fn):\n"
    "        @functools.wraps(fn)\n"
    "        async def wrapper(*a, **k):\n"
    "            calls[label] += 1\n"
    "            return await fn(*a, **k)\n"
    "    else:\n"
    "        @functools.wraps(fn)\n"
    "        def wrapper(*a, **k):\n"
    "            calls[label] += 1\n"
    "            return fn(*a, **k)\n"
    "    setattr(cls, name, wrapper)\n"
    "import django\n"
    "_setup = django.setup\n"
    "def setup(*a, **k):\n"
    "    _setup(*a, **k)\n"
    "    from django.db.backends.base.base import BaseDatabaseWrapper\n"
    "    from django.db.backends.utils import CursorWrapper\n"
    "    for name in ('commit', 'rollback'): counted(BaseDatabaseWrapper, name, getattr(BaseDatabaseWrapper, name))\n"
    "    for name in ('execute', 'executemany'): counted(CursorWrapper, name, getattr(CursorWrapper, name))\n"
    "    import django_mailqueue.stores.orm.store, django_mailqueue.stores.redis\n"
    "    from django_mailqueue.stores.base import QueueStore\n"
    "    seen, todo = set(), [QueueStore]\n"
    "    while todo:\n"
    "        cls = todo.pop(); todo += cls.__subclasses__()\n"
    "        for name, fn in list(vars(cls).items()):\n"
    "            if not name.startswith('_') and inspect.isfunction(fn) and (cls, name) not in seen:\n"
    "                seen.add((cls, name)); counted(cls, name, fn)\n"
    "django.setup = setup\n"
    "atexit.register(lambda: print('COUNTS ' + json.dumps(calls), file=sys.stderr, flush=True))\n"
    "runpy.run_module('django', run_name='__main__', alter_sys=True)\n"
)


def wait_quiet() -> None:
    """Someone else measures while /work/BENCH_RUNNING exists (HELPERS.md): wait."""
    flag = Path("/work/BENCH_RUNNING")
    while flag.exists() and flag.read_text().strip() != str(os.getpid()):
        time.sleep(10)


def transactions(ctx: Context, name: str) -> int:
    """The PostgreSQL database's transactions so far (committed and rolled back): each is a round trip at least."""
    import psycopg

    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{ctx.servers.postgres.port}/postgres") as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
    return int(row[0]) if row else 0


def run_one(
    ctx: Context, cfg: Config, mode: str, n: int, profile: Path | None, spy: Path | None = None
) -> tuple[float, float]:
    """(CPU ms a message, messages a second) of one run; n = 0: the empty run's CPU seconds and wall. On
    PostgreSQL, the worker's transactions a message are printed too."""
    measure = MODES.get(mode, "deliver.1")
    wait_quiet()
    with ctx.fresh(cfg, "filled" if n else "migrated", count=n, size=ctx.args.size) as db:
        if not n and cfg.store.startswith("redis"):
            ctx.flush_redis(cfg)
        before = ctx.servers.sink.counters()
        cmd = measure_delivery.commands(ctx, cfg, 1)[0]
        if profile is not None:
            cmd = [cmd[0], "-c", _PROFILED.format(path=str(profile)), *cmd[3:]]
        if os.environ.get("CPU_DELIVERY_GC"):
            cmd = [cmd[0], "-c", _GC_TIMED, *cmd[3:]]
        if getattr(ctx.args, "count", False):
            cmd = [cmd[0], "-c", _COUNTED, *cmd[3:]]
        trace = PROFILES / f"strace-{cfg.key}-{mode}-{n}-{time.time_ns()}.txt"
        if getattr(ctx.args, "count", False) and n:
            cmd = ["strace", "-f", "-c", "-e", "trace=fdatasync,fsync", "-o", str(trace), *cmd]
        if ctx.args.callgrind:
            out = PROFILES / f"callgrind-{cfg.key}-{mode}-{n}-{time.time_ns()}.out"
            cmd = ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={out}", *cmd]
        if spy is not None:
            exe = str(PEERS_PY.parent / "py-spy")
            cmd = [exe, "record", "--rate", "250", "--nonblocking", "--format", "raw", "--output", str(spy), "--", *cmd]
        shaped = {"BENCH_SHAPED": "1"} if measure == measure_delivery.SHAPED else {}
        env = ctx.env(cfg, db, **measure_delivery.dkim_env(ctx, measure), **shaped)
        postgres = cfg.store == "orm" and db.kind == "postgres"
        before_xacts = transactions(ctx, db.name) if postgres else 0
        if getattr(ctx.args, "count", False) and cfg.store == "redis" and n:
            ctx.servers.redis.reset_stats()  # before server_before: its difference stays right
        server_before = redis_server_use(ctx, cfg)
        group = procs.measure([cmd], env=env, logdir=LOGS, name=f"cpu-{cfg.key}-{mode}")
        server_after = redis_server_use(ctx, cfg)
        if server_before is not None and server_after is not None and n:
            cpu_us = 1e6 * (server_after[0] - server_before[0]) / n
            calls = (server_after[1] - server_before[1]) / n
            print(f"    {cfg.key} {mode}: Redis server {cpu_us:.1f} µs CPU, {calls:.2f} commands a message", flush=True)
        if postgres and n:
            time.sleep(0.6)  # the backend's statistics are sent at its exit, within PGSTAT_MIN_INTERVAL
            print(f"    {cfg.key} {mode}: {(transactions(ctx, db.name) - before_xacts) / n:.4f} transactions a message")
        group.results[0].check(f"{cfg.key} {mode}")
        if getattr(ctx.args, "count", False) and n:
            print_counts(ctx, cfg, mode, n, group.results[0].stdout + group.results[0].stderr, trace)
        if os.environ.get("CPU_DELIVERY_GC"):
            log = LOGS / f"cpu-{cfg.key}-{mode}.0.log"
            print(
                "   ",
                [
                    line
                    for line in (group.results[0].stderr + (log.read_text() if log.exists() else "")).splitlines()
                    if line.startswith("GC ")
                ],
            )
        got = ctx.servers.sink.counters()["mesg"] - before["mesg"]
    if got < n:
        raise RuntimeError(f"the sink got {got} of {n}")
    if ctx.args.callgrind:
        print(f"    {cfg.key} {mode}: {instructions(out):,} instructions, {n} messages", flush=True)
    if not n:
        return group.results[0].cpu, group.wall
    return 1000 * group.results[0].cpu / n, n / group.wall


def redis_server_use(ctx: Context, cfg: Config) -> tuple[float, int] | None:
    """The private redis-server's CPU seconds (user + system) and commands run so far (`INFO`); None off Redis.
    The INFO calls themselves are a few of the commands."""
    if cfg.store != "redis":
        return None
    import redis

    client = redis.Redis.from_url(ctx.servers.redis.url)
    try:
        cpu = client.info("cpu")
        stats = client.info("commandstats")
    finally:
        client.close()
    used = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    return used, sum(int(entry["calls"]) for entry in stats.values())


def print_counts(ctx: Context, cfg: Config, mode: str, n: int, output: str, trace: Path) -> None:
    """`--count`: the store's calls, Django's commits and statements, fsyncs and Redis commands, a message each."""
    import json

    lines = [line for line in output.splitlines() if line.startswith("COUNTS ")]
    counts: dict[str, int] = json.loads(lines[-1][7:]) if lines else {}
    if trace.exists():
        for line in trace.read_text().splitlines():
            parts = line.split()
            if parts and parts[-1] in ("fsync", "fdatasync"):
                counts[f"syscall.{parts[-1]}"] = int(parts[3])
    if cfg.store == "redis":
        counts.update({f"redis.{k}": v for k, v in ctx.servers.redis.command_calls().items()})
    for name, calls in sorted(counts.items()):
        print(f"    {cfg.key} {mode} count {name}: {calls} ({calls / n:.4f} a message)", flush=True)


def instructions(out: Path) -> int:
    """The instructions callgrind counted in a run, all threads (`--callgrind`)."""
    for line in out.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def summarise(profile: Path, top: int) -> str:
    import io
    import pstats

    out = io.StringIO()
    pstats.Stats(str(profile), stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.cpu_delivery", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--stores", default="sqlite,postgres,redis", help="of sqlite, postgres, redis, redis-cluster")
    p.add_argument("--modes", default="plain,rsa,ed25519")
    p.add_argument("--postoffice", action="store_true", help="post-office's one-process runs too (SQLite, PG)")
    p.add_argument("--profile", action="store_true", help="cProfile every run (CPU figures then include it)")
    p.add_argument("--spy", action="store_true", help="py-spy (CPU samples) every run, summarised by bench/stacks.py")
    p.add_argument("--top", type=int, default=40)
    p.add_argument(
        "--count",
        action="store_true",
        help="count the store's calls, Django's commits and statements, fsyncs (strace) and Redis commands a message",
    )
    p.add_argument(
        "--callgrind",
        action="store_true",
        help="run the worker under valgrind's callgrind: instructions a message, repeatable under load (rates not)",
    )
    args = p.parse_args(argv)
    stores = args.stores.split(",")
    cfgs = [c for c in (*OURS, OURS_REDIS_CLUSTER) if (c.store if c.store.startswith("redis") else c.db) in stores]
    modes = args.modes.split(",")
    ns = types.SimpleNamespace(
        n=args.n, size=args.size, libs="", measures="", callgrind=args.callgrind, count=args.count
    )
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    PROFILES.mkdir(parents=True, exist_ok=True)
    with Servers() as servers:
        ctx = Context(ns, servers)
        empty: dict[tuple[str, str], float] = {}
        for cfg in cfgs:
            for mode in modes:
                tries = 1 if args.callgrind else 2  # instructions do not vary with the machine's load
                empty[(cfg.key, mode)] = min(run_one(ctx, cfg, mode, 0, None)[0] for _ in range(tries))
                print(f"{cfg.key:14} {mode:8} empty run: {empty[(cfg.key, mode)]:.3f} s CPU", flush=True)
        for rep in range(args.repeats):
            plan = [(c, m) for c in cfgs for m in modes]
            if args.postoffice:
                plan += [(c, "po") for c in (PO_SQLITE, PO_PG) if c.db in stores]
            for cfg, mode in plan:
                prof = PROFILES / f"cpu-{cfg.key}-{mode}-r{rep + 1}.prof" if args.profile and mode != "po" else None
                try:
                    spy = PROFILES / f"spy-{cfg.key}-{mode}-r{rep + 1}.folded" if args.spy and mode != "po" else None
                    cpu, rate = run_one(ctx, cfg, mode, args.n, prof, spy)
                    if spy is not None:
                        from . import stacks

                        text = stacks.summarise(spy.read_text(), title=f"{cfg.key} {mode}", ms_per_msg=cpu, top=60)
                        spy.with_suffix(".md").write_text(text + "\n")
                except Exception as exc:  # noqa: BLE001
                    print(f"{cfg.key} {mode} run {rep + 1}: ERROR {exc}", flush=True)
                    continue
                results.setdefault((cfg.key, mode), []).append((cpu, rate))
                print(f"{cfg.key:14} {mode:8} run {rep + 1}: {cpu:.3f} ms CPU/msg, {rate:,.0f} msg/s", flush=True)
                if prof is not None:
                    (prof.with_suffix(".txt")).write_text(summarise(prof, args.top))
    print("\nmedians (CPU ms/msg, marginal CPU ms/msg = beyond the empty run's, msg/s):")
    for (key, mode), values in results.items():
        cpu = statistics.median(v[0] for v in values)
        marginal = cpu - 1000 * empty.get((key, mode), 0.0) / args.n
        rate = statistics.median(v[1] for v in values)
        runs = [round(v[0], 3) for v in values]
        print(f"  {key:14} {mode:8} {cpu:.3f} ms  marginal {marginal:.3f} ms  {rate:,.0f} msg/s  (cpu runs: {runs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

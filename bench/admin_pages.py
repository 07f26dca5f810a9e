"""Times every admin page at the scale `bench/admin_seed.py` seeds (issue 25), server-side: Django's test client
through the whole middleware stack, the median of `--repeats` runs after a warming one, the load average beside.
On PostgreSQL each page's queries are captured and `EXPLAIN (ANALYZE, BUFFERS)`-ed (a sequential scan of a big
table is flagged); on Redis each page's commands are counted (`INFO commandstats`, the scripts' own included).

    python -m bench.admin_pages postgres --pg-name mq_bench_admin1m
    python -m bench.admin_pages redis --redis-url redis://127.0.0.1:6391/0 --prefix mqb: --pg-name mq_bench_admin1m
    python -m bench.admin_pages sqlite --sqlite-path /tmp/mq_bench.sqlite3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.admin_seed import PROBE_ITEM, RARE_DOMAIN, RARE_WORD, _django, item_id

BIG_TABLES = re.compile(r"Seq Scan on (mailqueue_item|mailqueue_recipient|mailqueue_message|mailqueue_history)\b")
SQLITE_SCANS = re.compile(r"^SCAN (mailqueue_item|mailqueue_recipient|mailqueue_message|mailqueue_history)\b", re.M)
QUEUE = "/admin/django_mailqueue/queueditem/"
#: The issue's goal for every page, server-side.
GOAL_MS = 200
#: A page slower than this is run once, not measured `--repeats` times.
SLOW_MS = 5_000
HISTORY = "/admin/django_mailqueue/deliveryrecord/"


def pages(probe_address: str, probe_id: object) -> list[tuple[str, str, dict[str, str]]]:
    """(label, path, query) of every page the issue names."""
    today = datetime.now(UTC).strftime("%Y-%m-%d 00:00:00+00:00")
    return [
        ("list", QUEUE, {}),
        *((f"state={s}", QUEUE, {"state": s}) for s in ("due", "scheduled", "deferred", "leased", "failed")),
        ("queue=bulk", QUEUE, {"queue": "bulk"}),
        ("queue=rare (10 items)", QUEUE, {"queue": "rare"}),
        ("domain=gmail.com (11%)", QUEUE, {"domain": "gmail.com"}),
        (f"domain={RARE_DOMAIN} (20 items)", QUEUE, {"domain": RARE_DOMAIN}),
        ("search: full address", QUEUE, {"q": probe_address}),
        ("search: address prefix", QUEUE, {"q": probe_address[:9]}),
        ("search: a rare domain", QUEUE, {"q": "@" + RARE_DOMAIN}),
        ("search: a big domain", QUEUE, {"q": "@gmail.com"}),
        (f"search: subject word ({RARE_WORD}, 10 items)", QUEUE, {"q": RARE_WORD}),
        ("search: subject word (invoice, 1 in 7)", QUEUE, {"q": "invoice"}),
        ("page 1,000", QUEUE, {"p": "1000"}),
        ("one item", f"{QUEUE}{probe_id}/change/", {}),
        ("overview", f"{QUEUE}overview/", {}),
        ("history", HISTORY, {}),
        ("history: state=failed", HISTORY, {"state__exact": "failed"}),
        ("history: today", HISTORY, {"recorded__gte": today}),
        ("history: queue=rare", HISTORY, {"queue": "rare"}),
        (f"history: domain={RARE_DOMAIN}", HISTORY, {"domain": RARE_DOMAIN}),
        ("history: possibly delivered", HISTORY, {"possibly_delivered__exact": "1"}),
        ("history: page 1,000", HISTORY, {"p": "1000"}),
    ]


def measure(store_kind: str, repeats: int, redis_url: str, only: str = "") -> list[dict[str, Any]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment

    from django_mailqueue.stores import get_store

    setup_test_environment()
    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    probe_number = min(PROBE_ITEM, get_store().count() // 2)
    probe = get_store().get(item_id(probe_number))
    assert probe is not None, "the probe item is missing: seed first"
    redis_client = None
    if store_kind == "redis":
        import redis

        redis_client = redis.Redis.from_url(redis_url)
    results = []
    for label, path, query in pages(probe.recipients[0].address, probe.id):
        if only and only not in label:
            continue
        started = time.perf_counter()
        first = client.get(path, query)
        warm = (time.perf_counter() - started) * 1000
        if first.status_code != 200:  # a page past the end of a small seed
            print(f"{label:45} HTTP {first.status_code}: skipped", flush=True)
            continue
        if warm > SLOW_MS:  # one run says enough (a Redis search at a million items)
            results.append({"page": label, "path": path, "query": query, "median_ms": round(warm, 1),
                            "runs_ms": [round(warm, 1)], "cpu_ms": None, "cpu_db_ms": None, "blocks": None,
                            "seq_scans": [], "load": os.getloadavg()[0], "slow": True})  # fmt: skip
            print(f"{label:45} {warm:8.1f} ms  (one run: slower than {SLOW_MS} ms)", flush=True)
            continue
        runs, cpu = [], []
        for _ in range(repeats):
            started, started_cpu = time.perf_counter(), time.process_time()
            response = client.get(path, query)
            runs.append((time.perf_counter() - started) * 1000)
            cpu.append((time.process_time() - started_cpu) * 1000)
            assert response.status_code == 200, label
        result: dict[str, Any] = {
            "page": label,
            "path": path,
            "query": query,
            "median_ms": round(statistics.median(runs), 1),
            "runs_ms": [round(r, 1) for r in runs],
            "cpu_ms": round(statistics.median(cpu), 1),
            "load": os.getloadavg()[0],
        }
        redis_cpu = 0.0
        if redis_client is not None:
            redis_client.execute_command("CONFIG", "RESETSTAT")
            redis_cpu = _redis_cpu(redis_client)
        with CaptureQueriesContext(connection) as captured:
            client.get(path, query)
        if redis_client is not None:
            stats = redis_client.info("commandstats")
            calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
            calls.pop("config", None)
            result["redis_commands"] = sum(calls.values())
            result["redis_by_command"] = dict(sorted(calls.items(), key=lambda kv: -kv[1]))
            # Redis's own CPU time for the page (the server is the benchmark's own: nothing else runs on it)
            result["redis_ms"] = round((_redis_cpu(redis_client) - redis_cpu) * 1000, 1)
        result["sql_queries"] = len(captured.captured_queries)
        result["plans"], result["seq_scans"], result["db_ms"], result["blocks"] = explain(
            connection, [q["sql"] for q in captured.captured_queries]
        )
        # server-side, whatever else the machine runs: this process's CPU and the database's (or Redis's) time
        result["cpu_db_ms"] = round(result["cpu_ms"] + result["db_ms"] + result.get("redis_ms", 0), 1)
        results.append(result)
        print(
            f"{label:45} {result['median_ms']:8.1f} ms  cpu+db {result['cpu_db_ms']:7.1f} ms  load {result['load']:.2f}"
            + (f"  redis {result['redis_commands']} cmds" if "redis_commands" in result else "")
            + f"  sql {result['sql_queries']} ({result['blocks']} blocks)"
            + (f"  SEQ SCAN {result['seq_scans']}" if result["seq_scans"] else ""),
            flush=True,
        )
    return results


def _redis_cpu(client: Any) -> float:
    """Seconds of CPU the Redis server has used (`INFO cpu`)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


#: A sequential scan reading more rows than this (returned plus removed by its filter) is a full scan.
SCAN_ROWS = 50_000


def explain(connection: Any, queries: list[str]) -> tuple[list[dict[str, str]], list[str], float, int]:
    """The plan of each query on a big table, the big tables any of them scans sequentially past `SCAN_ROWS` rows
    (a Limit stops the others early), their execution time as the database measured it, and the 8 KiB blocks
    they touched (the work, whatever the machine's load)."""
    plans, scans, executing, blocks = [], [], 0.0, 0
    with connection.cursor() as cursor:
        for sql in queries:
            if "mailqueue_" not in sql or not sql.lstrip().upper().startswith(("SELECT", "WITH")):
                continue
            try:
                sqlite = connection.vendor == "sqlite"
                cursor.execute(("EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN (ANALYZE, BUFFERS) ") + sql)
            except Exception as exc:  # noqa: BLE001 - a statement with server-side parameters: noted, not explained
                plans.append({"sql": sql, "plan": f"not explained: {type(exc).__name__}"})
                continue
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
            plans.append({"sql": sql, "plan": plan})
            if sqlite:
                scans += SQLITE_SCANS.findall(plan)
                continue
            executing += sum(float(t) for t in re.findall(r"Execution Time: ([\d.]+) ms", plan))
            top = re.search(r"Buffers: shared(?: hit=(\d+))?(?: read=(\d+))?", plan)  # the top node's: the query's
            blocks += sum(int(n) for n in top.groups() if n) if top else 0
            lines = plan.splitlines()
            for i, line in enumerate(lines):
                scan = BIG_TABLES.search(line)
                if not scan:
                    continue
                rows = re.search(r"actual time=[\d.]+\.\.[\d.]+ rows=(\d+) loops=(\d+)", line)
                read = int(rows.group(1)) * int(rows.group(2)) if rows else 0
                removed = re.match(r"\s*Rows Removed by Filter: (\d+)", lines[i + 1]) if i + 1 < len(lines) else None
                read += int(removed.group(1)) if removed else 0
                if read > SCAN_ROWS:
                    scans.append(f"{scan.group(1)} ({read:,} rows)")
    return plans, sorted(set(scans)), round(executing, 1), blocks


def table(store_kind: str, results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table (docs/performance.md's): each page's median, its server-side time, what it
    read (PostgreSQL blocks or Redis commands), the full scans found, the load average it was measured at."""
    work = "Redis commands" if store_kind == "redis" else "blocks"
    lines = [
        f"| page ({store_kind}) | median ms | cpu+db ms | queries | {work} | full scans | load |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in results:
        read = r.get("redis_commands") if store_kind == "redis" else r.get("blocks")
        lines.append(
            f"| {r['page']} | {r['median_ms']:,.1f} | {r['cpu_db_ms'] if r.get('cpu_db_ms') is not None else '–'} "
            f"| {r.get('sql_queries', '–')} | {read if read is not None else '–'} "
            f"| {', '.join(r['seq_scans']) or 'none'} | {r['load']:.1f} |"
        )
    over = [r["page"] for r in results if r["median_ms"] > GOAL_MS]
    lines.append(f"\n{len(results) - len(over)} of {len(results)} pages within {GOAL_MS} ms" + (
        f"; over: {', '.join(over)}" if over else ""))  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", choices=["postgres", "redis", "sqlite"])
    parser.add_argument("--sqlite-path", default="/tmp/mq_bench_admin.sqlite3")
    parser.add_argument("--pg-name", default="mq_bench_admin")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--prefix", default="mqb:", help="the Redis key prefix the seed wrote under")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/.work/admin_pages.json")
    parser.add_argument("--only", default="", help="measure only the pages whose label holds this text")
    args = parser.parse_args(argv)
    if args.store == "sqlite":
        _django("sqlite", "", 0, sqlite_path=args.sqlite_path)
    else:
        os.environ["BENCH_REDIS_PREFIX"] = args.prefix
        _django("postgres", args.pg_name, args.pg_port, "orm" if args.store == "postgres" else "redis", args.redis_url)
    started = time.time()
    results = measure(args.store, args.repeats, args.redis_url, args.only)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(out.read_text()) if out.exists() else {}
    previous[args.store] = {"started": started, "results": results}
    out.write_text(json.dumps(previous, indent=1))
    print(table(args.store, results))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

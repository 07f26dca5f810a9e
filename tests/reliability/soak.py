"""`make soak`: the fault run at soak size, on each store, printed and written to a JSON file.

    SOAK_MESSAGES=100000 SOAK_STORES=redis,postgres SOAK_WORKERS=4 make soak

Environment: SOAK_MESSAGES (default 100000), SOAK_STORES (default
"redis,postgres"), SOAK_WORKERS (4), SOAK_FAULT_RATE (0.03),
SOAK_KILL_INTERVAL (10 s: a SIGKILL that often for the whole run),
SOAK_STOP_EVERY (120 s), SOAK_RESTART_EVERY (600 s), SOAK_DEADLINE (4 h),
SOAK_RESULTS (default `soak-results.json` in the working directory).
Exits 1 when a check fails.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")  # unwinds through the harness's clean-up


def main() -> int:
    # Started in the background a shell ignores SIGINT for us: take SIGTERM and SIGINT as a clean stop.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from tests.reliability.harness import FaultRunConfig, run_fault_run

    messages = int(os.environ.get("SOAK_MESSAGES", "100000"))
    results_path = os.environ.get("SOAK_RESULTS", "soak-results.json")
    results = []
    failed = False
    for store in os.environ.get("SOAK_STORES", "redis,postgres").split(","):
        config = FaultRunConfig(
            store=store.strip(),  # type: ignore[arg-type]
            messages=messages,
            workers=int(os.environ.get("SOAK_WORKERS", "4")),
            fault_rate=float(os.environ.get("SOAK_FAULT_RATE", "0.03")),
            kill_interval=float(os.environ.get("SOAK_KILL_INTERVAL", "10")),
            kills=10,
            kill_until_done=True,
            stop_at=15,
            stop_every=float(os.environ.get("SOAK_STOP_EVERY", "120")),
            restart_at=30,
            restart_every=float(os.environ.get("SOAK_RESTART_EVERY", "600")),
            deadline=float(os.environ.get("SOAK_DEADLINE", str(4 * 3600))),
            verbose=True,
            poll=1.0,
        )
        started = time.time()
        report = run_fault_run(config)
        entry = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
            "load_average_after": os.getloadavg(),
            **asdict(report),
        }
        results.append(entry)
        with open(results_path, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)
        print(report.summary(), flush=True)
        failed = failed or bool(report.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

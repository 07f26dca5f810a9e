"""The shaped path's own CPU a message, in process: `python -m bench.shaped_path [--n 20000] [--rounds 5]`.

What a worker does for each message beyond an unshaped run when limits do not bind (`deliver.1.shaped`'s
`RATE "100000/s"`, `CONNECTIONS 100`, `MESSAGES_PER_CONNECTION 100000`): the shaper's admission and release (a
token from the process's stock, the token reported done with the next take) and the transport's connection
slot (`CONNECTIONS`: a semaphore a session). Both settings on the memory store, alternated over `--rounds`;
CPU time (`time.process_time`) a message, the load beside it (docs/performance.md, "Traffic shaping").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections import Counter
from typing import Any

import django
from django.conf import settings as django_settings

if not django_settings.configured:
    django_settings.configure(INSTALLED_APPS=["django_mailqueue"], USE_TZ=True)
    django.setup()

from django_mailqueue.conf import load_settings  # noqa: E402
from django_mailqueue.core.clock import SystemClock  # noqa: E402
from django_mailqueue.core.items import NewItem  # noqa: E402
from django_mailqueue.stores.memory import MemoryStore  # noqa: E402
from django_mailqueue.worker.shaper import Shaper, Ticket, Wait  # noqa: E402

RELAY = {"HOST": "192.0.2.1", "PORT": 25, "TLS": "none"}
SHAPED = {**RELAY, "RATE": "100000/s", "CONNECTIONS": 100, "MESSAGES_PER_CONNECTION": 100000}


async def run(route: dict[str, Any], n: int) -> float:
    """CPU microseconds a message of admission, the transport's slot and release."""
    store, clock = MemoryStore(), SystemClock()
    shaper = Shaper(load_settings({"ROUTES": {"*": route}, "CONCURRENCY": 20}), store, clock=clock)
    items = [store.add(NewItem("s@o.test", (f"u{i}@a.test",), b"x"), now=clock.now()) for i in range(n)]
    shaper.admit(items[0])  # the first take (a shaped run's one round trip, not per message)
    await asyncio.sleep(0.01)
    connections = route.get("CONNECTIONS")
    slots, busy = asyncio.Semaphore(connections or 1), Counter[str]()
    started = time.process_time()
    for item in items:
        ticket = shaper.admit(item)
        while isinstance(ticket, Wait):  # the next take, once every 5,000 tokens (its CPU counted)
            await asyncio.sleep(0.001)
            ticket = shaper.admit(item)
        assert isinstance(ticket, Ticket), ticket
        if connections is not None:  # delivery/smtp.py's `send`
            async with slots:
                busy["relay"] += 1
                busy["relay"] -= 1
        shaper.release(ticket)
    return 1e6 * (time.process_time() - started) / n


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.shaped_path", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}")
    found: dict[str, list[float]] = {"plain": [], "shaped": []}
    for _ in range(args.rounds):
        for name, route in (("plain", RELAY), ("shaped", SHAPED)):
            found[name].append(asyncio.run(run(route, args.n)))
    for name, values in found.items():
        print(f"{name:7} {statistics.median(values):.2f} µs a message (runs {[round(v, 2) for v in values]})")
    print(f"shaped - plain: {statistics.median(found['shaped']) - statistics.median(found['plain']):.2f} µs a message")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

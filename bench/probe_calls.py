"""Slow start's cost (issue 20, line 3): store calls and CPU per message, mail to many MX domains, probe on and off.

    .venv/bin/python -m bench.probe_calls --domains 2000 --per-domain 2 --repeats 3

One worker in this process (`--once`, a RedisStore on MAILQUEUE_TEST_REDIS under a prefix of its own, deleted),
`domains` recipient domains each with its own MX (the loopback DNS server of the tests) pointing at Postfix's
smtp-sink, `per-domain` messages each, one connection a message: every domain is a destination of its own,
cold at first. Counted: the
store's shaping calls (`asuspensions`, `atake_probe`, `aend_probe`) and the process's CPU time, per message,
with slow start (this code) and without it (`Shaper.connect` as before it: the shared read of the suspensions
before each new connection). Prints a JSON line per run with the load average. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from .servers import SmtpSink

REDIS_URL = os.environ.get("MAILQUEUE_TEST_REDIS", "redis://127.0.0.1:6379/3")
COUNTED = ("asuspensions", "atake_probe", "aend_probe", "asuspend", "atake_tokens")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(domains: int, per_domain: int, probe: bool, dns_port: int, sink: SmtpSink) -> dict[str, Any]:
    from django_mailqueue.conf import load_settings
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.core.items import NewItem
    from django_mailqueue.stores.redis import RedisStore
    from django_mailqueue.worker import Worker
    from django_mailqueue.worker.shaper import Shaper

    calls: Counter[str] = Counter()

    class Counting(RedisStore):
        pass

    for name in COUNTED:
        original = getattr(RedisStore, name)

        def counted(self: Any, *args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _original(self, *args, **kwargs)

        setattr(Counting, name, counted)

    prefix = f"bench-probe-{uuid.uuid4().hex[:8]}:"
    options = {"url": REDIS_URL, "key_prefix": prefix}
    store = Counting(options)
    now = SystemClock().now()
    items = [
        NewItem(
            "sender@bench.example",
            (f"user{n}@d{d}.example",),
            f"From: sender@bench.example\r\nTo: user{n}@d{d}.example\r\nSubject: {n}\r\n\r\n{'x' * 1500}\r\n".encode(),
        )
        for n in range(per_domain)
        for d in range(domains)
    ]
    for first in range(0, len(items), 500):
        store.add_many(items[first : first + 500], now=now)
    settings = load_settings(
        {
            "STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": options},
            "HOSTNAME": "bench.example",
            "ROUTES": {"*": "mx"},
            "DNS": {"NAMESERVERS": ["127.0.0.1"], "PORT": dns_port, "TIMEOUT": 5},
            "MX_PORT": sink.port,
            "MTA_STS": False,
            "POLL_INTERVAL": 0.2,
            # every MX is smtp-sink's one address, whose cached connections any domain would reuse: one connection
            # a message instead, as to many domains' own servers
            "SHAPING": {"*": {"MESSAGES_PER_CONNECTION": 1}},
        }
    )
    saved = Shaper.connect
    if not probe:

        async def without(self: Shaper, key: str, holder: str, *, seconds: float, deadline: float) -> Any:
            return await self.current(key)

        Shaper.connect = without  # type: ignore[method-assign]
    calls.clear()
    base = sink.messages()
    before = load()
    cpu, wall = time.process_time(), time.monotonic()
    try:
        asyncio.run(Worker(store=store, settings=settings, once=True).run())
    finally:
        Shaper.connect = saved  # type: ignore[method-assign]
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    n = domains * per_domain
    delivered = sink.messages() - base
    left = store.count()
    client = store  # delete the prefix's keys
    for key in client._do(lambda c: list(c.scan_iter(match=f"{prefix}*", count=1000))):  # noqa: SLF001
        client._do(lambda c, k=key: c.delete(k))  # noqa: SLF001
    store.close()
    return {
        "probe": probe,
        "messages": n,
        "domains": domains,
        "delivered": delivered,
        "left": left,
        "store_calls_per_message": {k: round(v / n, 3) for k, v in sorted(calls.items())},
        "cpu_ms_per_message": round(1000 * cpu / n, 3),
        "wall_s": round(wall, 2),
        "load_before": before,
        "load_after": load(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--domains", type=int, default=2000)
    parser.add_argument("--per-domain", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    import django
    from django.conf import settings

    settings.configure(INSTALLED_APPS=["django_mailqueue"], DATABASES={}, USE_TZ=True)
    django.setup()
    from tests.support.dns_server import DnsServer

    with tempfile.TemporaryDirectory() as root:
        sink = SmtpSink(Path(root))
        sink.start()
        dns = DnsServer().start()
        try:
            for d in range(args.domains):
                dns.mx(f"d{d}.example", (10, f"mx.d{d}.example")).a(f"mx.d{d}.example", "127.0.0.1")
            for _ in range(args.repeats):
                for probe in (False, True):
                    print(json.dumps(run(args.domains, args.per_domain, probe, dns.port, sink)), flush=True)
        finally:
            dns.stop()
            sink.stop()


if __name__ == "__main__":
    main()

"""The worker's own part of one-process delivery, without SMTP or a database: `python -m bench.worker_cycle`.

A `Worker` (`--once`, `CONCURRENCY` 20, its traffic shaper, as `mailqueue_work` builds it) on the memory store
with a deliverer that answers at once (one turn of the event loop, then every recipient delivered with one
destination's report): what is left is the worker's per-message Python that is the same on every store — the
claim's bookkeeping, the attempt's task, `decide`, the completion's batch, the telling — and the memory store's
own calls. The CPU time (`time.process_time`) of `--n` messages after a run of `--warm`, ÷ n; one thread, so it
holds under load where a whole run's does not. `--profile FILE` writes a cProfile of the measured run.

    PYTHONPATH=$PWD .venv/bin/python -m bench.worker_cycle --n 20000
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import random
import time
from collections.abc import Sequence


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.worker_cycle", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--warm", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--profile", default="", help="write a cProfile of the last measured run here")
    p.add_argument("--no-shaper", action="store_true", help="a worker without traffic shaping (as a test's)")
    args = p.parse_args(argv)

    import django
    from django.conf import settings

    settings.configure(INSTALLED_APPS=["django_mailqueue"], USE_TZ=True, DATABASES={})
    django.setup()
    from django_mailqueue.conf import load_settings
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.core.items import NewItem, RecipientOutcome, RecipientState, Reply
    from django_mailqueue.delivery.attempt import AttemptResult
    from django_mailqueue.delivery.destinations import DestinationReport
    from django_mailqueue.stores.memory import MemoryStore
    from django_mailqueue.worker import Worker
    from django_mailqueue.worker.shaper import Shaper

    queue = load_settings(
        {"HOSTNAME": "bench.example", "ROUTES": {"*": {"HOST": "127.0.0.1", "PORT": 2525, "TLS": "none"}}}
    )
    reply = Reply(250, "2.0.0", "Ok: queued")
    message = b"Subject: bench\r\n\r\n" + b"x" * args.size

    class Instant:
        """Every recipient delivered after one turn of the loop, with its relay's report (as the deliverer's)."""

        def __init__(self, shaper: Shaper) -> None:
            self.policy = shaper._known("example.org")  # noqa: SLF001 - the relay's policy, as the deliverer finds it

        async def deliver(self, sender: str, recipients: Sequence[str], message: bytes) -> AttemptResult:
            await asyncio.sleep(0)
            outcomes = tuple(RecipientOutcome(r, RecipientState.DELIVERED, reply, "127.0.0.1") for r in recipients)
            assert self.policy is not None
            return AttemptResult(outcomes, destinations=(DestinationReport(self.policy, "127.0.0.1", delivered=True),))

        async def aclose(self) -> None:
            pass

    def one(n: int, profile: cProfile.Profile | None) -> float:
        store = MemoryStore()
        clock = SystemClock()
        now = clock.now()
        store.add_many(
            [NewItem("a@bench.example", (f"r{i}@example.org",), message, subject=f"bench {i:05}") for i in range(n)],
            now=now,
        )
        shaper = Shaper(queue, store, clock=clock)
        worker = Worker(
            store=store, settings=queue, deliverer=Instant(shaper), clock=clock, once=True,
            shaper=None if args.no_shaper else shaper,
            rng=random.Random(1),
        )  # fmt: skip
        start = time.process_time()
        if profile is not None:
            profile.enable()
        stats = asyncio.run(worker.run())
        if profile is not None:
            profile.disable()
        spent = time.process_time() - start
        assert stats.delivered == n, stats
        return spent

    one(args.warm, None)
    results = []
    for rep in range(args.repeats):
        profile = cProfile.Profile(time.process_time) if args.profile and rep == args.repeats - 1 else None
        spent = one(args.n, profile)
        results.append(1e6 * spent / args.n)
        print(f"run {rep + 1}: {results[-1]:.1f} µs CPU a message{' (profiled)' if profile else ''}", flush=True)
        if profile is not None:
            profile.dump_stats(args.profile)
    unprofiled = results[:-1] if args.profile else results
    if unprofiled:
        print(f"best {min(unprofiled):.1f} µs a message, median {sorted(unprofiled)[len(unprofiled) // 2]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`manage.py mailqueue_work`: run a worker until SIGTERM/SIGINT, or once with `--once`."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import get_settings
from ...core.errors import QueueError
from ...metrics import NEEDS_EXTRA, prometheus_installed
from ...stores.redis_checks import worker_refusal
from ...worker import Worker, WorkerStats, build_worker
from ..arguments import positive

if TYPE_CHECKING:
    from ...metrics.worker import MetricsServer


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port (0-65535; 0: any free port)")
    return port


def _queues(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one queue")
    return names


class Command(BaseCommand):
    help = "Deliver the mail queue: claim due items, deliver them, retry, send DSNs."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--once",
            action="store_true",
            help="deliver everything due now, wait for those deliveries, and exit 0 (1 when the store stayed out of "
            "reach and due mail was left)",
        )
        parser.add_argument(
            "--concurrency", type=positive, default=None, help="items in flight (default: MAILQUEUE['CONCURRENCY'])"
        )
        parser.add_argument(
            "--queues", type=_queues, default=None, help="comma-separated queues, in order of preference (default: all)"
        )
        parser.add_argument("--owner", default=None, help="this worker's name in leases (default: host:pid:random)")
        parser.add_argument(
            "--metrics-port",
            type=_port,
            default=None,
            help="serve Prometheus metrics on this port (0: any free port); needs django-mailqueue[prometheus]",
        )
        parser.add_argument(
            "--metrics-address",
            default=None,
            help="the address to serve metrics on (default 127.0.0.1: this machine only; see docs/metrics.md)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["metrics_address"] is not None and options["metrics_port"] is None:
            raise CommandError("--metrics-address needs --metrics-port")
        if options["metrics_port"] is not None and not prometheus_installed():
            raise CommandError(NEEDS_EXTRA)
        verbosity = int(options["verbosity"])
        if verbosity >= 2:
            package_logger = logging.getLogger("django_mailqueue")
            package_logger.setLevel(logging.DEBUG if verbosity >= 3 else logging.INFO)
            if not package_logger.hasHandlers():
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
                package_logger.addHandler(handler)
        metrics = None
        try:
            if options["metrics_port"] is not None:
                from ...metrics.worker import WorkerMetrics

                metrics = WorkerMetrics(get_settings())
            # A process that runs a worker: its freed message buffers go back to the system.
            worker = build_worker(
                owner=options["owner"],
                queues=options["queues"],
                concurrency=options["concurrency"],
                once=options["once"],
                release_memory=True,
                observer=metrics,
            )
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        server: MetricsServer | None = None

        async def start() -> None:
            """After the store's check, before the first claim: the metrics served, the worker announced."""
            nonlocal server
            if metrics is not None:
                metrics.watch(worker)
                address = options["metrics_address"] or "127.0.0.1"
                try:
                    server = metrics.serve(options["metrics_port"], address)
                except OSError as exc:
                    await worker.store.aclose()
                    port = options["metrics_port"]
                    raise CommandError(f"cannot serve metrics on {address} port {port}: {exc}") from None
                if verbosity >= 1:
                    host = f"[{address}]" if ":" in address else address
                    self.stderr.write(f"mailqueue: metrics on http://{host}:{server.port}/metrics")
            if verbosity >= 1:
                self.stderr.write(
                    f"mailqueue: worker {worker.owner} on {type(worker.store).__name__}, queues "
                    f"{','.join(worker.queues) if worker.queues else 'all'}, concurrency {worker.concurrency}"
                    + (", once" if worker.once else "")
                )
            # Start-up's objects (Django's, the settings', the worker's) live as long as the process: out of the
            # garbage collector's sight, its collections while mail is delivered no longer walk them.
            gc.freeze()

        try:
            stats = asyncio.run(self._run(worker, verbosity, start))
        finally:
            if server is not None:
                server.stop()
        if verbosity >= 1:
            self.stdout.write(
                f"mailqueue: {stats.claimed} attempts, {stats.delivered} delivered, {stats.deferred} deferred, "
                f"{stats.failed} failed, {stats.dsns} DSNs, {stats.leases_lost} leases lost, "
                f"{stats.given_back} given back"
            )
        if stats.unreached is not None:  # exit 1: a cron job or a script must not take this run for a full one
            raise CommandError(f"--once left mail in the queue that it could not reach: {stats.unreached}")

    async def _run(self, worker: Worker, verbosity: int, start: Callable[[], Awaitable[None]]) -> WorkerStats:
        # A Cluster queue with items its partitions do not reach: refused, in the loop the worker's calls use
        # (its asyncio cluster client, one slot map for the run: docs/performance.md, helper `cluster`).
        refused = await worker_refusal(worker.store)
        if refused is not None:
            await worker.store.aclose()
            raise CommandError(refused)
        loop = asyncio.get_running_loop()
        signals_seen = 0

        def on_signal(signum: int) -> None:
            nonlocal signals_seen
            signals_seen += 1
            if signals_seen > 1:
                self.stderr.write("mailqueue: second signal, exiting at once; leases expire as for a crash")
                os._exit(1)
            if verbosity >= 1:
                self.stderr.write(
                    f"mailqueue: {signal.Signals(signum).name}: finishing the sessions under way "
                    "(send it again to exit at once)"
                )
            worker.stop()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        await start()  # its line says the worker is up: the signals are handled from here on
        progress = None
        if worker.once and verbosity >= 1 and sys.stdout.isatty():
            progress = asyncio.create_task(self._progress(worker))
        try:
            return await worker.run()
        finally:
            if progress is not None:
                progress.cancel()

    async def _progress(self, worker: Worker) -> None:
        while True:
            await asyncio.sleep(1)
            s = worker.stats
            self.stdout.write(
                f"\r{s.claimed} attempts: {s.delivered} delivered, {s.deferred} deferred, {s.failed} failed", ending=""
            )
            self.stdout.flush()

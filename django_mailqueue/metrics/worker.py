"""The worker's Prometheus metrics: an `Observer` (core/observer.py) counting in the loop, served over HTTP."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIServer

from django.dispatch import Signal
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from .. import signals
from ..conf import QueueSettings
from ..core.items import QueueItem
from .labels import OUTCOMES, recipient_route, route_label, status_class

if TYPE_CHECKING:
    from ..worker import Worker

logger = logging.getLogger("django_mailqueue")

#: Seconds: one attempt's delivery part, one session (a relay answers in milliseconds, a slow MX in minutes).
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800)
#: Seconds from enqueue to delivery: at once, after a retry or two, after hours of deferral (up to MAX_LIFETIME).
LATENCY_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 2 * 86400, 5 * 86400)

_OUTCOME_OF = {signals.delivered: "delivered", signals.deferred: "deferred", signals.failed: "failed"}
#: The status class each outcome has unless something unusual happened; its series exist from the start.
_USUAL_CLASS = {"delivered": "2xx", "deferred": "4xx", "failed": "5xx"}


class WorkerMetrics:
    """One worker's series; on a registry of their own with the process's (CPU, memory, file descriptors, GC)
    unless `registry` is given."""

    def __init__(self, settings: QueueSettings, *, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._routes = settings.routes
        r = self.registry
        self.recipients = Counter(
            "mailqueue_recipients",
            "Recipient outcomes recorded, by route (the ROUTES key), outcome and reply status class.",
            ["route", "outcome", "status_class"],
            registry=r,
        )
        self.attempts = Counter("mailqueue_attempts", "Delivery attempts whose outcome was recorded.", registry=r)
        self.dsns = Counter("mailqueue_dsns", "DSNs queued, by kind (failed, delayed).", ["kind"], registry=r)
        self.errors = Counter("mailqueue_errors", "Errors told on the error signal, by code.", ["code"], registry=r)
        self.attempt_seconds = Histogram(
            "mailqueue_attempt_duration_seconds",
            "One attempt's delivery: DNS and every session of the item, the store not included.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.session_seconds = Histogram(
            "mailqueue_session_duration_seconds",
            "One session with one server (or one exchange on a reused connection), by route.",
            ["route"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.latency = Histogram(
            "mailqueue_delivery_latency_seconds",
            "From enqueue to a recipient's delivery being recorded, by route.",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.bytes_in_flight = Gauge(
            "mailqueue_bytes_in_flight",
            "Bytes counted against MAX_BYTES_IN_FLIGHT (twice each message under way).",
            registry=r,
        )
        self.in_flight = Gauge("mailqueue_attempts_in_flight", "Attempts in their SMTP part.", registry=r)
        for route in self._routes:
            for outcome in OUTCOMES:
                self.recipients.labels(route, outcome, _USUAL_CLASS[outcome])
            self.session_seconds.labels(route)
            self.latency.labels(route)
        if registry is None:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

    def watch(self, worker: Worker) -> None:
        """Read the worker's in-flight counters at each scrape (nothing is done in its loop for them)."""
        self.bytes_in_flight.set_function(lambda: worker.bytes_in_flight)
        self.in_flight.set_function(lambda: worker.in_flight)

    # --- the Observer ----------------------------------------------------------------

    def told(self, events: Sequence[tuple[Signal, dict[str, Any]]], *, item: QueueItem | None, now: datetime) -> None:
        for signal, kwargs in events:
            outcome = _OUTCOME_OF.get(signal)
            if outcome is not None:
                route = recipient_route(self._routes, kwargs["recipient"])
                self.recipients.labels(route, outcome, status_class(kwargs["reply"])).inc()
                if outcome == "delivered" and item is not None:
                    self.latency.labels(route).observe(max(0.0, (now - item.created).total_seconds()))
            elif signal is signals.dsn:
                self.dsns.labels(kwargs["kind"]).inc()
            elif signal is signals.error:
                self.errors.labels(str(kwargs["error"].code)).inc()
        if item is not None:
            self.attempts.inc()

    def attempt(self, seconds: float) -> None:
        self.attempt_seconds.observe(seconds)

    def session(self, domain: str, seconds: float) -> None:
        self.session_seconds.labels(route_label(self._routes, domain)).observe(seconds)

    # --- serving ---------------------------------------------------------------------

    def serve(self, port: int, address: str) -> MetricsServer:
        """Serve /metrics on `address`:`port` (0: a free port) from a thread; raises OSError when it cannot bind."""
        server, thread = start_http_server(port, addr=address, registry=self.registry)
        return MetricsServer(server, thread)


class MetricsServer:
    """prometheus_client's HTTP server thread, stoppable."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

"""The queue's depth for a site's own /metrics: a prometheus_client collector over the store's summary, cached."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..core.clock import Clock, SystemClock
from ..core.errors import QueueError
from ..core.items import ItemState
from ..core.shaping import Suspension
from ..core.status import QueueSummary
from ..stores import get_store
from ..stores.base import QueueStore
from .labels import OTHER_DESTINATIONS, configured_destinations

logger = logging.getLogger("django_mailqueue")

#: Seconds a summary is reused: scrapes from several Prometheus servers, or a storm of them, read the store once.
CACHE_SECONDS = 5.0
#: The queue every item is in unless it names one: listed even when empty, so the series always exist.
DEFAULT_QUEUE = "default"


class QueueCollector(Collector):
    """`mailqueue_queue_items{queue,state}`, the oldest due item's age and wait, the suspended destinations, and
    `mailqueue_store_up`.

    Read with the store's summary (what `mailqueue_status` prints) and its suspensions, at most once per `cache`
    seconds whatever the scrapes; `store` None reads the configured store (`get_store()`) each time.
    `destinations` gives the destinations labelled by name (by default the settings' shaping keys); the
    others are counted under `other`.
    """

    def __init__(
        self,
        *,
        cache: float = CACHE_SECONDS,
        store: QueueStore | None = None,
        clock: Clock | None = None,
        destinations: Callable[[], Sequence[str]] = configured_destinations,
    ):
        self.cache = cache
        self._store = store
        self._clock: Clock = clock or SystemClock()
        self._destinations = destinations
        self._lock = threading.Lock()
        self._summary: QueueSummary | None = None
        self._suspended: list[Suspension] = []
        self._read_at: float | None = None

    def describe(self) -> Iterable[GaugeMetricFamily]:
        """The families without samples: registering reads nothing from the store."""
        return self._families()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        summary = self.summary()
        up, items, age, wait, suspended = self._families()
        up.add_metric([], 0 if summary is None else 1)
        if summary is None:
            return [up]
        by_queue = dict(summary.by_queue)
        by_queue.setdefault(DEFAULT_QUEUE, Counter())
        for queue, counts in sorted(by_queue.items()):
            for state in ItemState:
                items.add_metric([queue, state.value], counts.get(state.value, 0))
        oldest, now = summary.oldest_due, self._clock.now()
        age.add_metric([], 0 if oldest is None else max(0.0, (now - oldest.created).total_seconds()))
        wait.add_metric([], 0 if oldest is None else max(0.0, (now - oldest.next_attempt).total_seconds()))
        named = dict.fromkeys(self._destinations(), 0)
        for suspension in self._suspended:
            key = suspension.destination if suspension.destination in named else OTHER_DESTINATIONS
            named[key] = named.get(key, 0) + 1
        named.setdefault(OTHER_DESTINATIONS, 0)
        for destination, count in named.items():
            suspended.add_metric([destination], count)
        return [up, items, age, wait, suspended]

    def summary(self) -> QueueSummary | None:
        """The store's summary, read again when the last is older than `cache` seconds; None when the store failed
        (the failure is cached as long, so a store that is down is not asked at every scrape either)."""
        with self._lock:  # concurrent scrapes wait for one read rather than each reading
            if self._read_at is not None and time.monotonic() - self._read_at < self.cache:
                return self._summary
            store = self._store or get_store()
            now = self._clock.now()
            try:
                self._summary = store.summary(now=now)
                self._suspended = store.suspensions(now=now)
            except QueueError as exc:
                logger.warning("queue metrics: the store's summary failed: %s", exc)
                self._summary, self._suspended = None, []
            self._read_at = time.monotonic()
            return self._summary

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily
    ]:
        return (
            GaugeMetricFamily("mailqueue_store_up", "1 when the last read of the queue's summary succeeded, else 0."),
            GaugeMetricFamily(
                "mailqueue_queue_items", "Items in the queue, by queue and state.", labels=["queue", "state"]
            ),
            GaugeMetricFamily(
                "mailqueue_oldest_due_age_seconds", "Seconds since the oldest due item was queued; 0: none is due."
            ),
            GaugeMetricFamily(
                "mailqueue_oldest_due_wait_seconds",
                "Seconds the oldest due item has been due without a worker taking it; 0: none is due.",
            ),
            GaugeMetricFamily(
                "mailqueue_destinations_suspended",
                "Destinations no worker connects to until their suspension ends: 1 or 0 for each one the settings "
                'shape by name, and how many others under destination="other".',
                labels=["destination"],
            ),
        )


_registered: dict[int, QueueCollector] = {}


def register_collector(registry: CollectorRegistry = REGISTRY, *, cache: float = CACHE_SECONDS) -> QueueCollector:
    """Register a `QueueCollector` in `registry` (prometheus_client's default: the one django-prometheus
    exports), once: a second call gives the first one back."""
    found = _registered.get(id(registry))
    if found is None:
        found = _registered[id(registry)] = QueueCollector(cache=cache)
        registry.register(found)
    return found


def unregister_collector(registry: CollectorRegistry = REGISTRY) -> None:
    """Take back what `register_collector` registered (tests, or a site that reconfigures)."""
    found = _registered.pop(id(registry), None)
    if found is not None:
        registry.unregister(found)

"""The queue collector on the site's /metrics (tests/urls.py), through the Django test client, on each store."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.apps import apps
from django.core.checks import run_checks
from django.test import Client, override_settings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.errors import Code, QueueError
from django_mailqueue.core.items import Completion, NewItem, RecipientOutcome, RecipientState, Reply
from django_mailqueue.core.status import QueueSummary
from django_mailqueue.metrics.collector import QueueCollector, unregister_collector
from django_mailqueue.stores import get_store
from django_mailqueue.stores.memory import MemoryStore
from tests.support.databases import DATABASES
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.django_db(databases=DATABASES)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def item(n: int, **extra: Any) -> NewItem:
    message = f"From: a@origin.test\r\nSubject: {n}\r\n\r\nbody\r\n".encode()
    return NewItem(sender="a@origin.test", recipients=(f"r{n}@dest.test",), message=message, **extra)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store_config(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "redis":
        url, prefix = request.getfixturevalue("redis_url"), unique_prefix("metrics")
        yield {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {"url": url, "key_prefix": prefix}}
        delete_prefix(url, prefix)
        return
    alias = request.getfixturevalue("pg_alias") if request.param == "postgres" else "default"
    yield {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": alias}}


@pytest.fixture
def registered(store_config: dict[str, Any]) -> Iterator[None]:
    """MAILQUEUE with METRICS_COLLECTOR on, and the app started as a site starts it (ready())."""
    with override_settings(MAILQUEUE={"STORE": store_config, "METRICS_COLLECTOR": True}):
        apps.get_app_config("django_mailqueue").ready()
        try:
            yield
        finally:
            unregister_collector()


def test_the_sites_metrics_count_what_the_test_queued(registered: None, client: Client) -> None:
    store, now = get_store(), SystemClock().now()
    # queued 10 minutes ago, due since 1 minute ago
    store.add_many(
        [item(n, not_before=now - timedelta(seconds=60)) for n in range(5)], now=now - timedelta(seconds=600)
    )
    store.add_many([item(n, queue="bulk", not_before=now + timedelta(hours=1)) for n in range(5, 7)], now=now)
    (leased,) = store.claim(owner="test", now=now, lease_expires=now + timedelta(minutes=5), limit=1)
    (deferred,) = store.claim(owner="test", now=now, lease_expires=now + timedelta(minutes=5), limit=1)
    greylisted = Reply(451, "4.7.1", "Greylisted")
    outcome = RecipientOutcome(deferred.recipients[0].address, RecipientState.PENDING, greylisted)
    store.complete(
        deferred.id,
        owner="test",
        revision=deferred.revision,
        completion=Completion((outcome,), next_attempt=now + timedelta(seconds=600)),
    )

    response = client.get("/metrics")
    assert response.status_code == 200
    samples = parse(response.content.decode())
    assert value(samples, "mailqueue_store_up") == 1
    expected = {("default", "due"): 3, ("default", "leased"): 1, ("default", "deferred"): 1, ("bulk", "scheduled"): 2}
    for queue in ("default", "bulk"):
        for state in ("due", "scheduled", "deferred", "leased"):
            assert value(samples, "mailqueue_queue_items", queue=queue, state=state) == expected.get((queue, state), 0)
    assert 600 <= value(samples, "mailqueue_oldest_due_age_seconds") < 700  # type: ignore[operator]
    assert 60 <= value(samples, "mailqueue_oldest_due_wait_seconds") < 160  # type: ignore[operator]


def test_an_empty_queue_still_has_its_series(registered: None, client: Client) -> None:
    samples = parse(client.get("/metrics").content.decode())
    assert value(samples, "mailqueue_queue_items", queue="default", state="due") == 0
    assert value(samples, "mailqueue_oldest_due_age_seconds") == 0


class CountingStore(MemoryStore):
    """A memory store that counts its summaries (and can be made to fail them)."""

    def __init__(self) -> None:
        super().__init__()
        self.summaries = 0
        self.down = False

    def summary(self, *, now: datetime) -> QueueSummary:
        self.summaries += 1
        if self.down:
            raise QueueError(Code.STORE_UNAVAILABLE, "the store is out of reach")
        return super().summary(now=now)


def test_a_scrape_storm_reads_the_store_once() -> None:
    store = CountingStore()
    store.add(item(1), now=SystemClock().now())
    registry = CollectorRegistry()
    registry.register(QueueCollector(cache=60, store=store))
    assert store.summaries == 0  # registering reads nothing
    pages: list[bytes] = []
    threads = [threading.Thread(target=lambda: pages.append(generate_latest(registry))) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.summaries == 1 and len(pages) == 20
    assert all(
        value(parse(page.decode()), "mailqueue_queue_items", queue="default", state="due") == 1 for page in pages
    )


def test_a_store_out_of_reach_is_store_up_0_and_asked_again_later(caplog: pytest.LogCaptureFixture) -> None:
    store = CountingStore()
    store.down = True
    collector = QueueCollector(cache=0, store=store)
    registry = CollectorRegistry()
    registry.register(collector)
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "mailqueue_store_up") == 0
    assert not any(name == "mailqueue_queue_items" for name, _ in samples)
    assert "the store is out of reach" in caplog.text
    store.down = False
    samples = parse(generate_latest(registry).decode())
    assert value(samples, "mailqueue_store_up") == 1 and store.summaries == 2


def test_the_setting_without_prometheus_client_is_a_check_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed: importing it fails
    with override_settings(MAILQUEUE={"METRICS_COLLECTOR": True}):
        errors = [m for m in run_checks() if m.id == "mailqueue.E025"]
    assert len(errors) == 1 and "pip install 'django-mailqueue[prometheus]'" in errors[0].msg


def test_suspended_destinations_are_counted_under_bounded_labels(store_config: dict[str, Any]) -> None:
    with override_settings(MAILQUEUE={"STORE": store_config}):
        store, now = get_store(), SystemClock().now()
        throttled = Reply(421, "4.7.0", "Try again later")
        for destination in (".google.com", "a.example", "b.example", "relay:old.example:25"):
            store.suspend(destination, until=now + timedelta(minutes=5), reply=throttled, now=now)
        store.suspend(
            "ended.example", until=now - timedelta(seconds=1), reply=throttled, now=now - timedelta(minutes=1)
        )
        registry = CollectorRegistry()
        shaped = [".google.com", ".outlook.com", "relay:smtp.example.net:587"]
        registry.register(QueueCollector(cache=0, destinations=lambda: shaped))
        samples = parse(generate_latest(registry).decode())
    suspended = {
        dict(labels)["destination"]: count
        for (name, labels), count in samples.items()
        if name == "mailqueue_destinations_suspended"
    }
    assert suspended == {".google.com": 1, ".outlook.com": 0, "relay:smtp.example.net:587": 0, "other": 3}


def test_the_named_destinations_come_from_the_settings() -> None:
    shaped = {
        "STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
        "ROUTES": {
            "*": "mx",
            "corp.example": {"HOST": "Relay.Corp.example", "PORT": 587, "RATE": "14/s"},
            "corp.test": {"HOST": "relay.corp.example", "PORT": 587},
        },
        "SHAPING": {".google.com": {"RATE": "20/s"}, "outlook.com": {"CONNECTIONS": 5}, "*": {"CONNECTIONS": 4}},
    }
    with override_settings(MAILQUEUE=shaped):
        store, now = get_store(), SystemClock().now()
        store.suspend("gmail.example", until=now + timedelta(minutes=5), reply=Reply(421, "", "later"), now=now)
        registry = CollectorRegistry()
        registry.register(QueueCollector(cache=0, store=store))
        samples = parse(generate_latest(registry).decode())
    suspended = {
        dict(labels)["destination"]: count
        for (name, labels), count in samples.items()
        if name == "mailqueue_destinations_suspended"
    }
    assert suspended == {".google.com": 0, "outlook.com": 0, "relay:relay.corp.example:587": 0, "other": 1}

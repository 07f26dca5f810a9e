"""The worker's Prometheus metrics scraped over HTTP: a worker in the test's loop, and a real `mailqueue_work`."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import urllib.request
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from django_mailqueue import signals
from django_mailqueue.conf import get_settings, load_settings
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.errors import Code, QueueError
from django_mailqueue.core.items import ItemQuery, ItemState, NewItem, Reply
from django_mailqueue.metrics.labels import route_label, status_class
from django_mailqueue.metrics.worker import WorkerMetrics
from django_mailqueue.stores import get_store
from django_mailqueue.stores.base import QueueStore
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.worker import Worker
from tests.support.databases import DATABASES
from tests.support.smtp_server import free_port
from tests.support.workers import WorkerProcess, wait_until
from tests.worker.conftest import STORES, MailWorld

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

#: dest.test has a route of its own, so it is a label; origin.test goes by "*"
ROUTES = {"*": "mx", "dest.test": "mx"}


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:  # noqa: S310
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def enqueue(store: QueueStore) -> None:
    """3 + 1 to be delivered, 2 deferred by a 451, 1 failed by a 550 (and its DSN, delivered)."""
    now = SystemClock().now()

    def item(n: int, to: str) -> NewItem:
        message = f"From: sender@origin.test\r\nTo: {to}\r\nSubject: metrics {n}\r\n\r\nbody {n}\r\n".encode()
        return NewItem(sender="sender@origin.test", recipients=(to,), message=message)

    to = ["someone@dest.test"] * 3 + ["greylisted@dest.test"] * 2 + ["someone@origin.test", "rejected@dest.test"]
    store.add_many([item(n, address) for n, address in enumerate(to)], now=now)


def check_counts(samples: Samples) -> None:
    recipients = "mailqueue_recipients_total"
    assert value(samples, recipients, route="dest.test", outcome="delivered", status_class="2xx") == 3
    assert value(samples, recipients, route="*", outcome="delivered", status_class="2xx") == 2  # one is the DSN
    assert value(samples, recipients, route="dest.test", outcome="deferred", status_class="4xx") == 2
    assert value(samples, recipients, route="dest.test", outcome="failed", status_class="5xx") == 1
    assert value(samples, "mailqueue_dsns_total", kind="failed") == 1
    assert value(samples, "mailqueue_attempts_total") == 8
    assert value(samples, "mailqueue_attempt_duration_seconds_count") == 8
    sessions = value(samples, "mailqueue_session_duration_seconds_count", route="dest.test")
    assert sessions == 6 and value(samples, "mailqueue_session_duration_seconds_count", route="*") == 2
    assert value(samples, "mailqueue_delivery_latency_seconds_count", route="dest.test") == 3
    assert value(samples, "mailqueue_delivery_latency_seconds_count", route="*") == 2
    assert 0 < value(samples, "mailqueue_delivery_latency_seconds_sum", route="dest.test") < 60
    assert not any(dict(labels).get("route") not in (None, "*", "dest.test") for _, labels in samples)


async def test_a_worker_in_the_loop_serves_its_metrics(mail_world: MailWorld) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(STORES["memory"], ROUTES=ROUTES)):
        store = get_store()
        enqueue(store)
        metrics = WorkerMetrics(get_settings())
        worker = Worker(store=store, settings=get_settings(), once=True, observer=metrics)
        metrics.watch(worker)
        server = metrics.serve(0, "127.0.0.1")
        try:
            stats = await worker.run()
            samples = await asyncio.to_thread(scrape, server.port)
        finally:
            server.stop()
    assert (stats.delivered, stats.deferred, stats.failed, stats.dsns) == (5, 2, 1, 1)
    check_counts(samples)
    assert value(samples, "mailqueue_bytes_in_flight") == 0 and value(samples, "mailqueue_attempts_in_flight") == 0
    assert any(name == "process_cpu_seconds_total" for name, _ in samples) == sys.platform.startswith("linux")


def test_labels_are_configured_routes_and_reply_classes() -> None:
    routes = {"*": object(), "corp.example": object(), "xn--bcher-kva.example": object()}
    assert route_label(routes, "corp.example") == "corp.example"
    assert route_label(routes, "CORP.example") == "corp.example"
    assert route_label(routes, "bücher.example") == "xn--bcher-kva.example"
    assert route_label(routes, "sub.corp.example") == "*"
    assert route_label(routes, "") == "*"
    assert status_class(Reply(250, "2.0.0", "ok")) == "2xx"
    assert status_class(Reply(550, "4.7.1", "a 5xx the queue defers is still 5xx")) == "5xx"
    assert status_class(Reply(None, "4.4.1", "connection refused")) == "4xx"
    assert status_class(Reply(None, "5.1.2", "no such domain")) == "5xx"
    assert status_class(Reply(None, "", "")) == "other"


def test_metrics_port_without_prometheus_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed: importing it fails
    with pytest.raises(CommandError, match=r"pip install 'django-mailqueue\[prometheus\]'"):
        call_command("mailqueue_work", "--once", "--metrics-port", "0", stdout=StringIO(), stderr=StringIO())


def test_errors_are_counted_by_code_and_are_not_attempts() -> None:
    metrics = WorkerMetrics(load_settings({"ROUTES": {"*": "mx"}}), registry=CollectorRegistry())
    error = QueueError(Code.STORE_UNAVAILABLE, "the store is out of reach")
    metrics.told([(signals.error, {"error": error, "item_id": None})], item=None, now=SystemClock().now())
    assert metrics.registry.get_sample_value("mailqueue_errors_total", {"code": "STORE_UNAVAILABLE"}) == 1
    assert metrics.registry.get_sample_value("mailqueue_attempts_total") == 0


@pytest.mark.django_db
def test_a_metrics_port_in_use_stops_the_command_saying_so() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"cannot serve metrics on 127.0.0.1 port {port}: .*in use"):
            call_command("mailqueue_work", "--once", "--metrics-port", str(port), stdout=StringIO(), stderr=StringIO())


def test_metrics_address_needs_a_port() -> None:
    with pytest.raises(CommandError, match="--metrics-address needs --metrics-port"):
        call_command("mailqueue_work", "--once", "--metrics-address", "::1", stdout=StringIO(), stderr=StringIO())


@pytest.fixture
def worker_process(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(mailqueue: dict[str, Any], *args: str) -> WorkerProcess:
        started.append(WorkerProcess(mailqueue, *args, tmp_path=tmp_path, name="metrics"))
        return started[-1]

    yield start
    for process in started:
        process.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, databases=DATABASES)
def test_mailqueue_work_serves_metrics_on_its_port(
    mail_world: MailWorld, pg_alias: str, worker_process: Callable[..., WorkerProcess]
) -> None:
    config = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": pg_alias}}
    store = OrmStore({"database": pg_alias})
    enqueue(store)
    port = free_port(("127.0.0.1",))
    worker = worker_process(mail_world.mailqueue(config, ROUTES=ROUTES), "--metrics-port", str(port))
    seen: list[Samples] = []

    def all_recorded() -> bool:
        if not worker.running():
            raise AssertionError(f"the worker exited; stderr:\n{worker.stderr}")
        try:
            seen.append(scrape(port))
        except OSError:
            return False  # not listening yet
        return value(seen[-1], "mailqueue_attempts_total") >= 8

    wait_until(all_recorded, 60, "8 attempts in the worker's metrics", interval=0.2)
    check_counts(seen[-1])
    assert f"metrics on http://127.0.0.1:{port}/metrics" in worker.stderr
    # the deferred ones, which is what the queue collector counts as waiting, and the one failed (KEEP_FAILED)
    assert store.count() == 3
    assert store.count(ItemQuery(state=ItemState.FAILED, now=SystemClock().now())) == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    store.close()

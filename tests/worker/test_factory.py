"""`build_worker`: a worker ready to run from settings, as a test, a Celery task or a custom command embeds it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.core.mail import send_mail
from django.test import override_settings

from django_mailqueue.delivery import Deliverer
from django_mailqueue.exceptions import QueueError
from django_mailqueue.models import DeliveryRecord
from django_mailqueue.stores import get_store
from django_mailqueue.worker import build_worker
from tests.support.databases import DATABASES
from tests.worker.conftest import MailWorld

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)

SQLITE = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "default"}}


def test_a_built_worker_delivers_over_smtp_and_writes_the_history(mail_world: MailWorld) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(SQLITE)):
        send_mail("Hello", "Body.\n", "sender@origin.test", ["someone@dest.test"])
        worker = build_worker(once=True, owner="embedded", concurrency=3)
        assert isinstance(worker.deliverer, Deliverer) and worker.history is not None
        assert worker.store is get_store() and worker.close_store
        assert worker.owner == "embedded" and worker.concurrency == 3 and worker.once
        stats = asyncio.run(worker.run())
        assert stats.delivered == 1 and get_store().count() == 0
    (message,) = mail_world.mx.messages
    assert message.rcpt_tos == ["someone@dest.test"]
    assert DeliveryRecord.objects.filter(recipient="someone@dest.test").count() == 1


def test_no_history_without_history_days(mail_world: MailWorld) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(SQLITE, HISTORY_DAYS=0)):
        assert build_worker(once=True).history is None


def test_runs_in_one_fresh_event_loop_after_another(mail_world: MailWorld, redis_store_config: dict[str, Any]) -> None:
    """What a Celery task does: `asyncio.run(build_worker(once=True).run())` per task, the store shared by the
    process. The worker closes the store's connections when its run ends, so the next loop gets its own."""
    with override_settings(MAILQUEUE=mail_world.mailqueue(redis_store_config)):
        for n in range(2):
            send_mail(f"Task {n}", "Body.\n", "sender@origin.test", [f"task{n}@dest.test"])
            stats = asyncio.run(build_worker(once=True).run())
            assert stats.delivered == 1 and not stats.errors, stats
        get_store().close()
    assert sorted(m.rcpt_tos[0] for m in mail_world.mx.messages) == ["task0@dest.test", "task1@dest.test"]


def test_bad_settings_are_a_queue_error() -> None:
    with override_settings(MAILQUEUE={"CONCURRENCY": 0}), pytest.raises(QueueError):
        build_worker()

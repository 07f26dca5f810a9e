"""The admin pages send their own Content-Security-Policy and `nosniff`, on a site without SecurityMiddleware."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from django_mailqueue.admin.headers import admin_csp, with_security_headers
from tests.admin.queue_data import Queue, record_history

pytestmark = pytest.mark.django_db


def pages(queue: Queue) -> list[str]:
    from django_mailqueue.models import DeliveryRecord

    record = DeliveryRecord.objects.first()
    assert record is not None
    return [
        reverse("admin:django_mailqueue_queueditem_changelist"),
        reverse("admin:django_mailqueue_queueditem_change", args=[queue.newsletter.id]),
        reverse("admin:django_mailqueue_queueditem_overview"),
        reverse("admin:django_mailqueue_deliveryrecord_changelist"),
        reverse("admin:django_mailqueue_deliveryrecord_change", args=[record.pk]),
    ]


@pytest.fixture
def history(queue: Queue) -> None:
    record_history(datetime.now(UTC))


def test_every_page_sends_its_csp_and_nosniff_without_security_middleware(
    operator_client: Client, queue: Queue, history: None, settings: Any
) -> None:
    assert not any("SecurityMiddleware" in m for m in settings.MIDDLEWARE)
    for url in pages(queue):
        page = operator_client.get(url)
        assert page.status_code == 200, url
        assert page.headers["Content-Security-Policy"] == admin_csp(), url
        assert page.headers["X-Content-Type-Options"] == "nosniff", url
    policy = admin_csp()
    assert "default-src 'none'" in policy and "script-src 'self';" in policy and "object-src 'none'" in policy


def test_an_action_page_sends_them_too(operator_client: Client, queue: Queue) -> None:
    page = operator_client.post(
        reverse("admin:django_mailqueue_queueditem_action"), {"action": "cancel", "item": [str(queue.due[0].id)]}
    )
    assert page.status_code == 200  # the confirmation page
    assert page.headers["Content-Security-Policy"] == admin_csp()
    assert page.headers["X-Content-Type-Options"] == "nosniff"


def test_static_files_on_another_host_are_allowed(settings: Any) -> None:
    settings.STATIC_URL = "https://cdn.example.com/static/"
    policy = admin_csp()
    assert "script-src 'self' https://cdn.example.com;" in policy
    assert "style-src 'self' https://cdn.example.com;" in policy


def test_a_sites_own_headers_are_kept() -> None:
    response = HttpResponse()
    response.headers["Content-Security-Policy"] = "default-src 'self'"
    response.headers["X-Content-Type-Options"] = "nosniff"
    assert with_security_headers(response).headers["Content-Security-Policy"] == "default-src 'self'"

"""How the secret tests look for a secret: the forms it travels in, every text of an exception, the `error`
signals' payloads, Django's error report, and every admin page of the queue and the history."""

from __future__ import annotations

import base64
import traceback
from typing import Any

from django.contrib.auth.models import User
from django.test import Client
from django.urls import NoReverseMatch, reverse
from django.views.debug import ExceptionReporter

#: the relay user of the secret tests (its base64 forms with the password are AUTH's)
RELAY_USER = "relayuser"


def forms(secret: str, user: str = RELAY_USER) -> list[str]:
    """The secret as it may travel: plain, URL-quoted parts aside, and the base64 forms AUTH uses."""
    raw = secret.encode()
    return [
        secret,
        base64.b64encode(raw).decode(),
        base64.b64encode(b"\0" + user.encode() + b"\0" + raw).decode(),
    ]


def leaks(secret: str, *texts: str) -> list[str]:
    return [text[:300] for text in texts if any(form in text for form in forms(secret))]


def exception_texts(exc: BaseException) -> list[str]:
    return [str(exc), repr(exc), "".join(traceback.format_exception(exc))]


class ErrorSignals:
    def __init__(self) -> None:
        self.payloads: list[str] = []

    def __call__(self, sender: Any, **kwargs: Any) -> None:
        error = kwargs.get("error")
        self.payloads += [repr(kwargs), str(error), repr(error), repr(getattr(error, "args", ()))]


def report_text(exc: BaseException) -> str:
    """Django's error report (the text of a 500 page / an error email) for `exc`, with the current settings."""
    return ExceptionReporter(None, type(exc), exc, exc.__traceback__).get_traceback_text()


def admin_pages(item_id: object) -> list[str]:
    """Every admin page of the queue and the history, as a superuser sees them."""
    user = User.objects.create_superuser("rel-admin", "admin@origin.test", "pw")
    client = Client()
    client.force_login(user)
    pages = []
    names = [
        ("admin:django_mailqueue_queueditem_changelist", []),
        ("admin:django_mailqueue_queueditem_change", [item_id]),
        ("admin:django_mailqueue_queueditem_overview", []),
        ("admin:django_mailqueue_deliveryrecord_changelist", []),
        ("admin:index", []),
    ]
    for name, args in names:
        try:
            url = reverse(name, args=args)
        except NoReverseMatch:
            continue
        page = client.get(url)
        assert page.status_code == 200, (name, page.status_code)
        pages.append(page.content.decode())
    from django_mailqueue.models import DeliveryRecord

    for record in DeliveryRecord.objects.all()[:3]:
        page = client.get(reverse("admin:django_mailqueue_deliveryrecord_change", args=[record.pk]))
        assert page.status_code == 200
        pages.append(page.content.decode())
    assert pages, "no admin page rendered"
    return pages


def aware_now() -> Any:
    from django_mailqueue.core.clock import SystemClock

    return SystemClock().now()

"""The demo's pages: compose and send, the mailboxes, one message (escaped), and the whole state as JSON."""

from __future__ import annotations

import logging
from email.utils import make_msgid
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.mail import EmailMessage
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from django_mailqueue.exceptions import QueueError
from django_mailqueue.models import DeliveryRecord
from django_mailqueue.stores import get_store

from .forms import ComposeForm
from .models import ReceivedMessage, SmtpEvent
from .policy import GREYLISTED, REJECTED, THROTTLE_COUNT, THROTTLE_SECONDS, THROTTLED
from .reading import summarise

logger = logging.getLogger("demo")

#: rows each list on the mailbox page shows
PAGE = 50


def compose(request: HttpRequest) -> HttpResponse:
    """GET: the form. POST: queue the message with Django's `EmailMessage(...).send()`, then come back here."""
    if request.method == "POST":
        form = ComposeForm(request.POST, request.FILES)
        if form.is_valid():
            data = form.cleaned_data
            message_id = make_msgid(domain=settings.MAILQUEUE["HOSTNAME"])
            message = EmailMessage(
                subject=data["subject"],
                body=data["body"],
                from_email=data["from_email"],
                to=data["to"],
                headers={"Message-ID": message_id},
            )
            upload = data.get("attachment")
            if upload:
                message.attach(upload.name, upload.read(), upload.content_type or None)
            message.queue = data["queue"]  # the item's lane; see the README
            try:
                message.send()
            except QueueError as exc:
                form.add_error(None, f"Not queued ({exc.code}): {exc}")
            else:
                messages.success(
                    request,
                    f"Queued {message_id} for {', '.join(data['to'])} on the {data['queue']!r} queue. "
                    "The worker delivers it in a moment; watch the mailbox.",
                )
                return redirect(reverse("compose") + "?" + urlencode({"sent": message_id}))
    else:
        form = ComposeForm()
    return render(
        request,
        "demo/compose.html",
        {
            "form": form,
            "greylisted": sorted(GREYLISTED),
            "throttled": sorted(THROTTLED),
            "throttle_count": THROTTLE_COUNT,
            "throttle_seconds": int(THROTTLE_SECONDS),
            "rejected": sorted(REJECTED.items()),
            "sink_port": settings.DEMO_SINK_PORT,
            "first_retry": settings.MAILQUEUE["RETRY_DELAYS"][0],
        },
    )


@require_GET
def mailbox(request: HttpRequest) -> HttpResponse:
    """Every mailbox of the sink, the selected one's messages, and both sides' logs."""
    box = request.GET.get("box", "").strip().lower()
    received = ReceivedMessage.objects.defer("data")
    if box:
        received = received.filter(mailbox=box)
    return render(
        request,
        "demo/mailbox.html",
        {
            "box": box,
            "boxes": ReceivedMessage.objects.values("mailbox").annotate(count=Count("id")).order_by("mailbox"),
            "received": received[:PAGE],
            "history": DeliveryRecord.objects.all()[:PAGE],
            "smtp_log": SmtpEvent.objects.all()[:PAGE],
            "queue": _queue_now(),
        },
    )


@require_GET
def message_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """One received message: its summary, what a DSN reports, and the raw message, escaped."""
    received = get_object_or_404(ReceivedMessage, pk=pk)
    data = bytes(received.data)
    return render(
        request,
        "demo/message.html",
        {
            "m": received,
            "summary": summarise(data),
            "raw": data.decode("utf-8", "replace"),
        },
    )


@require_GET
def state_json(request: HttpRequest) -> JsonResponse:
    """The mailboxes, the delivery history and the sink's RCPT log, for scripts (tests/demo/check_demo.py)."""
    received = []
    for m in ReceivedMessage.objects.all()[:500]:
        summary = summarise(bytes(m.data))
        received.append(
            {
                "id": m.pk,
                "mailbox": m.mailbox,
                "envelope_from": m.envelope_from,
                "envelope_to": m.envelope_to,
                "subject": m.subject,
                "message_id": m.message_id,
                "received": m.received.isoformat(),
                "attachments": summary.attachments,
                "dkim": m.dkim,
                "dsn": None
                if summary.dsn is None
                else {
                    "original_message_id": summary.dsn.original_message_id,
                    "reporting_mta": summary.dsn.reporting_mta,
                    "recipients": [vars(r) for r in summary.dsn.recipients],
                },
            }
        )
    history = [
        {
            "message_id": r.message_id,
            "sender": r.sender,
            "recipient": r.recipient,
            "queue": r.queue,
            "state": r.state,
            "reply_code": r.reply_code,
            "reply_status": r.reply_status,
            "reply_text": r.reply_text,
            "attempt": r.attempt,
            "recorded": r.recorded.isoformat(),
        }
        for r in DeliveryRecord.objects.all()[:500]
    ]
    smtp_log = [
        {"at": e.at.isoformat(), "envelope_from": e.envelope_from, "recipient": e.recipient, "reply": e.reply}
        for e in SmtpEvent.objects.all()[:500]
    ]
    return JsonResponse({"received": received, "history": history, "smtp_log": smtp_log})


def _queue_now() -> dict[str, object]:
    """The items waiting in the queue (each with the seconds until its next attempt), or why they cannot be read."""
    now = timezone.now()
    try:
        store = get_store()
        items = store.list(limit=PAGE)
        total = store.count()
    except QueueError as exc:
        logger.warning("the queue cannot be read: %s", exc)
        return {"items": [], "total": 0, "error": str(exc)}
    rows = [{"item": i, "due_in": max(0, round((i.next_attempt - now).total_seconds()))} for i in items]
    return {"items": rows, "total": total, "error": None}

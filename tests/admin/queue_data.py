"""A realistic little queue for the admin tests: due, scheduled, deferred and leased items on any store."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.mail import EmailMessage, EmailMultiAlternatives

from django_mailqueue.core.items import Completion, NewItem, QueueItem, RecipientOutcome, RecipientState, Reply
from django_mailqueue.envelopes import message_to_item
from django_mailqueue.stores.base import QueueStore

SIZE = 25 * 1024 * 1024


def new_item(
    subject: str,
    sender: str,
    to: list[str],
    *,
    queue: str = "default",
    send_at: datetime | None = None,
    html: str | None = None,
    attachments: list[tuple[str, bytes, str]] = (),  # type: ignore[assignment]
    body: str = "Hello,\n\nthis is a test message.\n",
) -> NewItem:
    message: EmailMessage
    if html is not None:
        message = EmailMultiAlternatives(subject, body, sender, to)
        message.attach_alternative(html, "text/html")
    else:
        message = EmailMessage(subject, body, sender, to)
    for name, content, mimetype in attachments:
        message.attach(name, content, mimetype)
    message.queue = queue  # type: ignore[attr-defined]
    if send_at is not None:
        message.send_at = send_at  # type: ignore[attr-defined]
    return message_to_item(message, max_message_size=SIZE)


@dataclass
class Queue:
    """The items `populate` added, by role."""

    due: list[QueueItem]
    scheduled: QueueItem
    deferred: QueueItem
    partly_delivered: QueueItem
    leased: QueueItem
    newsletter: QueueItem

    @property
    def all(self) -> list[QueueItem]:
        return [*self.due, self.scheduled, self.deferred, self.partly_delivered, self.leased, self.newsletter]

    def ids(self) -> set[uuid.UUID]:
        return {item.id for item in self.all}


REPORT_PDF = b"%PDF-1.4\n" + b"0" * 2048


def populate(store: QueueStore, now: datetime) -> Queue:
    """Add a dozen items in every state, through the store's own API (as the backend and a worker would)."""
    earlier = now - timedelta(hours=2)
    # first the items a worker will take: they are the earliest due
    to_work = store.add_many(
        [
            new_item("Your order #1042", "shop@origin.test", ["greylisted@dest.test"], queue="transactional"),
            new_item(
                "Invoice 2030-17",
                "billing@origin.test",
                ["accounts@dest.test", "greylisted@dest.test"],
                attachments=[("invoice-2030-17.pdf", REPORT_PDF, "application/pdf")],
            ),
            new_item("Password reset", "noreply@origin.test", ["erin@slow.test"], queue="transactional"),
        ],
        now=earlier - timedelta(minutes=30),
    )
    claimed = store.claim(owner="worker-a:4242", now=earlier, lease_expires=earlier + timedelta(minutes=5), limit=2)
    by_id = {item.id: item for item in claimed}
    greylisted = Reply(451, "4.7.1", "Greylisted, please try again later")
    store.complete(
        to_work[0].id,
        owner="worker-a:4242",
        revision=by_id[to_work[0].id].revision,
        completion=Completion(
            outcomes=(RecipientOutcome("greylisted@dest.test", RecipientState.PENDING, greylisted, "mx.dest.test"),),
            next_attempt=now + timedelta(minutes=10),
        ),
    )
    store.complete(
        to_work[1].id,
        owner="worker-a:4242",
        revision=by_id[to_work[1].id].revision,
        completion=Completion(
            outcomes=(
                RecipientOutcome(
                    "accounts@dest.test",
                    RecipientState.DELIVERED,
                    Reply(250, "2.0.0", "Ok: queued as 4F2A1"),
                    "mx.dest.test",
                ),
                RecipientOutcome("greylisted@dest.test", RecipientState.PENDING, greylisted, "mx.dest.test"),
            ),
            next_attempt=now - timedelta(minutes=1),
        ),
    )
    (leased,) = store.claim(owner="worker-b:777", now=now, lease_expires=now + timedelta(minutes=5), limit=1)
    assert leased.id == to_work[2].id
    due = store.add_many(
        [
            new_item("Welcome aboard", "alice@origin.test", ["bob@dest.test", "carol@dest.test"]),
            new_item(
                "Weekly digest",
                "digest@origin.test",
                ["dave@example.org"],
                html="<h1>Your week</h1><p>Three new <b>comments</b>.</p>",
            ),
            new_item("Re: lunch?", "alice@origin.test", ["frank@example.org"]),
            new_item("Build failed", "ci@origin.test", ["team@example.org", "oncall@dest.test"]),
            new_item("Meeting notes", "grace@origin.test", ["heidi@dest.test"]),
        ],
        now=now,
    )
    newsletter, scheduled = store.add_many(
        [
            new_item(
                "March newsletter",
                "news@origin.test",
                [f"reader{i}@list.test" for i in range(1, 8)],
                queue="bulk",
                send_at=now + timedelta(hours=3),
            ),
            new_item("Reminder: renew", "alice@origin.test", ["ivan@dest.test"], send_at=now + timedelta(days=1)),
        ],
        now=now,
    )
    return Queue(
        due=due,
        scheduled=scheduled,
        deferred=store.get(to_work[0].id),  # type: ignore[arg-type]
        partly_delivered=store.get(to_work[1].id),  # type: ignore[arg-type]
        leased=leased,
        newsletter=newsletter,
    )


def record_history(now: datetime, *, alias: str = "default") -> int:
    """Delivery records spread over the last day, as a worker would have written them (for the overview's chart)."""
    from django_mailqueue.models import DeliveryRecord

    rows = []
    for hour in range(24):
        delivered = (7 * hour + 5) % 23 + (12 if 8 <= (hour + now.hour) % 24 <= 18 else 2)
        failed = (hour * 5) % 7 // 3
        deferred = hour % 4
        for state, count in (("delivered", delivered), ("failed", failed), ("deferred", deferred)):
            for n in range(count):
                rows.append(
                    DeliveryRecord(
                        item_id=uuid.uuid4(),
                        message_id=f"<{hour}.{n}@origin.test>",
                        sender="alice@origin.test",
                        recipient=f"user{n}@dest.test",
                        domain="dest.test",
                        queue="default",
                        state=state,
                        reply_code={"delivered": 250, "failed": 550, "deferred": 451}[state],
                        reply_status={"delivered": "2.0.0", "failed": "5.1.1", "deferred": "4.7.1"}[state],
                        reply_text="ok",
                        remote_mta="mx.dest.test",
                        attempt=1,
                        recorded=now - timedelta(hours=hour, minutes=n % 50),
                    )
                )
    DeliveryRecord.objects.using(alias).bulk_create(rows)
    return len(rows)

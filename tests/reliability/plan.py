"""The fault run's messages: message n's envelope, Message-ID, item id and expected outcome, from n alone."""

from __future__ import annotations

import uuid

from django_mailqueue.core.items import NewItem

SENDER = "sender@origin.test"
DOMAINS = ("d0.test", "d1.test", "d2.test", "d3.test")
#: every BOUNCE_EVERY-th message has one recipient the server always refuses (550 5.1.1)
BOUNCE_EVERY = 25
_NAMESPACE = uuid.UUID("6f0b7c52-2a43-4a4c-9b51-0d8e1c0e8d11")


def message_id(n: int) -> str:
    return f"<rel{n}@origin.test>"


def item_id(n: int) -> uuid.UUID:
    """Message n's item id (fixed, so the checks map Message-ID, item and log lines without a lookup)."""
    return uuid.uuid5(_NAMESPACE, f"rel{n}")


def recipients(n: int) -> tuple[str, ...]:
    """2 or 3 recipients at one domain (one transaction), every fifth message one at a second domain; one
    `bounce…` recipient every BOUNCE_EVERY messages."""
    domain, other = DOMAINS[n % 4], DOMAINS[(n + 1) % 4]
    boxes = [f"a{n}@{domain}", f"b{n}@{other if n % 5 == 0 else domain}"]
    if n % 2:
        boxes.append(f"c{n}@{domain}")
    if n % BOUNCE_EVERY == 0:
        boxes[-1] = f"bounce{n}@{other}"
    return tuple(boxes)


def is_bounce(address: str) -> bool:
    return address.startswith("bounce")


def new_item(n: int) -> NewItem:
    boxes = recipients(n)
    data = (
        f"From: {SENDER}\r\nTo: {', '.join(boxes)}\r\nSubject: fault run {n}\r\n"
        f"Message-ID: {message_id(n)}\r\n\r\n" + f"body of message {n}\r\n" * (1 + n % 7)
    ).encode()
    return NewItem(
        sender=SENDER, recipients=boxes, message=data, message_id=message_id(n), subject=f"fault run {n}", id=item_id(n)
    )

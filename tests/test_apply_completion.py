"""`apply_completion` makes the item after an outcome field by field: every field it does not decide is kept."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

from django_mailqueue.core.items import (
    Completion,
    QueueItem,
    Recipient,
    RecipientOutcome,
    RecipientState,
    Reply,
    apply_completion,
)

T = datetime(2026, 1, 1, tzinfo=UTC)
DECIDED = {"recipients", "next_attempt", "attempts", "owner", "lease_expires", "revision", "reclaims", "delay_warned"}


def test_every_field_the_outcome_does_not_decide_is_kept() -> None:
    item = QueueItem(
        id=uuid.uuid4(),
        sender="a@example.com",
        recipients=(Recipient("b@example.org"), Recipient("c@example.org")),
        size=1234,
        created=T,
        next_attempt=T,
        attempts=2,
        queue="bulk",
        owner="w1",
        lease_expires=T + timedelta(minutes=5),
        revision=7,
        reclaims=1,
        delay_warned=False,
        message_id="<m@example.com>",
        subject="hello",
        failed_at=T - timedelta(days=1),
    )
    reply = Reply(250, "2.0.0", "ok")
    completion = Completion(
        (RecipientOutcome("b@example.org", RecipientState.DELIVERED, reply, "mx"),),
        next_attempt=T + timedelta(hours=1),
        delay_warned=True,
    )
    after = apply_completion(item, completion)
    for f in dataclasses.fields(QueueItem):
        if f.name not in DECIDED:
            assert getattr(after, f.name) == getattr(item, f.name), f.name
    assert after.recipients == (
        Recipient("b@example.org", RecipientState.DELIVERED, reply, "mx"),
        Recipient("c@example.org"),
    )
    assert (after.next_attempt, after.attempts, after.owner, after.lease_expires) == (
        T + timedelta(hours=1),
        3,
        None,
        None,
    )
    assert (after.revision, after.reclaims, after.delay_warned) == (8, 0, True)

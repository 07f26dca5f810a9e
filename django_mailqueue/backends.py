"""`QueueEmailBackend`: Django's email backend API, storing each message in the queue."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend

from .conf import get_settings
from .core.clock import Clock, SystemClock
from .core.errors import QueueError
from .core.items import NewItem
from .envelopes import message_to_item, recipients_of
from .stores import QueueStore, get_store

logger = logging.getLogger("django_mailqueue")


class QueueEmailBackend(BaseEmailBackend):
    """`EMAIL_BACKEND = "django_mailqueue.backends.QueueEmailBackend"`.

    `send_messages()` returns once every message is stored: one item per
    message, the whole batch in one round trip to the store. On the ORM store
    the add joins the caller's transaction. A message that cannot be queued
    raises `QueueError` (`INVALID`, `TOO_LARGE`, `FULL`; the first two are
    also `ValueError`s, as Django's SMTP backend raises for a bad address) and
    nothing of the batch is stored; with `fail_silently=True` the bad messages
    are skipped and the count returned says how many were queued.
    """

    def __init__(
        self, fail_silently: bool = False, *, store: QueueStore | None = None, clock: Clock | None = None, **kwargs: Any
    ) -> None:
        super().__init__(fail_silently=fail_silently, **kwargs)
        self._store = store
        self._clock: Clock = clock or SystemClock()

    @property
    def store(self) -> QueueStore:
        return self._store or get_store()

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        if not email_messages:
            return 0
        settings = get_settings()
        items: list[NewItem] = []
        for message in email_messages:
            try:
                if not recipients_of(message):
                    continue  # as Django's SMTP backend: nothing to send, not counted
                items.append(
                    message_to_item(message, max_message_size=settings.max_message_size, route_for=settings.route_for)
                )
            except QueueError:
                if not self.fail_silently:
                    raise
                logger.warning("a message was not queued: it could not be made into an item", exc_info=True)
        if not items:
            return 0
        try:
            self.store.put_many(items, now=self._clock.now())
        except QueueError:
            if not self.fail_silently:
                raise
            logger.warning("%d messages were not queued", len(items), exc_info=True)
            return 0
        return len(items)

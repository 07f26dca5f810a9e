"""What the contract's tests share: the times, the items, the replies, and the fixtures every part uses."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ...core.items import (
    NewItem,
    QueueItem,
    RecipientOutcome,
    RecipientState,
    Reply,
)
from ...stores.base import QueueStore
from .. import damage

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
OK = Reply(250, "2.0.0", "ok")
LATER = Reply(451, "4.3.0", "try later")
NO = Reply(550, "5.1.1", "no such user")

StoreFactory = Callable[..., QueueStore]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def new_item(
    recipients: Sequence[str] = ("rcpt@example.org",),
    *,
    sender: str = "sender@example.com",
    message: bytes = b"Subject: hi\r\n\r\nhello\r\n",
    queue: str = "default",
    not_before: datetime | None = None,
    **kwargs: Any,
) -> NewItem:
    return NewItem(
        sender=sender, recipients=tuple(recipients), message=message, queue=queue, not_before=not_before, **kwargs
    )


def outcome(address: str, state: RecipientState, reply: Reply = OK) -> RecipientOutcome:
    return RecipientOutcome(address, state, reply, remote_mta="mx.example.org")


class ContractBase:
    """The fixtures and helpers of the contract's parts; `make_store` comes from the subclass."""

    #: items the thread tests use; a subclass may lower it for a slow store
    race_items = 200

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        raise NotImplementedError("give the contract a make_store fixture")

    @pytest.fixture
    def store(self, make_store: StoreFactory) -> QueueStore:
        return make_store()

    def needs_add_order(self, store: QueueStore) -> None:
        """Skip a test of the add order across the whole store where the store keeps it only within each part."""
        if not store.in_add_order:
            pytest.skip(f"{type(store).__name__} keeps the add order within each partition only")

    def lose_message(self, store: QueueStore, item_id: uuid.UUID) -> None:
        """Drop an item's message but keep the item; a store the package does not know overrides this."""
        try:
            damage.lose_message(store, item_id)
        except NotImplementedError as exc:
            pytest.skip(str(exc))

    def end_thread(self) -> None:
        from django.db import connections

        connections.close_all()

    def in_threads(self, count: int, work: Callable[[int], Any]) -> list[Any]:
        barrier = threading.Barrier(count)

        def run(index: int) -> Any:
            try:
                barrier.wait()
                return work(index)
            finally:
                self.end_thread()

        with ThreadPoolExecutor(count) as pool:
            return list(pool.map(run, range(count)))

    def claim_one(
        self, store: QueueStore, now: datetime = T0, owner: str = "w1", lease: float = 60, **kwargs: Any
    ) -> QueueItem:
        claimed = store.claim(owner=owner, now=now, lease_expires=now + timedelta(seconds=lease), **kwargs)
        assert len(claimed) == 1, claimed
        return claimed[0]

"""The contract on a claimed batch: `claim_batch` and its async twin claim as `claim` does and read what
`suppressed` and `read_messages` would."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import pytest

from ...core.items import QueueItem, Suppression
from ...stores.base import ClaimedBatch, QueueStore
from .support import NO, T0, ContractBase, at, new_item

_T = TypeVar("_T")
BIG = b"Subject: big\r\n\r\n" + b"x" * 4000


class ClaimingBatches(ContractBase):
    """`claim_batch` / `aclaim_batch`: the items leased as `claim` leases them, each one's pending recipients on
    the suppression list (keyed as the list keys addresses, entries since the cut-off), the small messages."""

    def fill(self, store: QueueStore) -> tuple[QueueItem, QueueItem, QueueItem]:
        gone = Suppression("gone@dest.example", NO, at(5))
        store.suppress([gone, Suppression("Other@dest.example", NO, at(6)), Suppression("old@dest.example", NO, at(1))])
        # listed as the list keys it (the domain's case is not the address's); another's local part; not listed
        listed = store.add(new_item(["gone@DEST.example", "fine@dest.example", "other@dest.example"]), now=T0)
        big = store.add(new_item(["gone@dest.example"], message=BIG), now=at(1))  # listed, its message not read
        plain = store.add(new_item(["old@dest.example"]), now=at(2))  # listed before the cut-off
        return listed, big, plain

    async def off_loop(self, work: Callable[[], _T]) -> _T:
        """`work()` in a thread of its own (the sync methods it calls may not run in the event loop)."""

        def run() -> _T:
            try:
                return work()
            finally:
                self.end_thread()

        return await asyncio.to_thread(run)

    def check(self, store: QueueStore, batch: ClaimedBatch, added: tuple[QueueItem, QueueItem, QueueItem]) -> None:
        listed, big, plain = added
        assert {item.id for item in batch.items} == {listed.id, big.id, plain.id}
        assert all(item.owner == "w" and item.lease_expires == at(60) for item in batch.items)
        assert batch.items == [store.get(item.id) for item in batch.items]  # as claimed, as `claim` answers
        gone = Suppression("gone@dest.example", NO, at(5))
        assert batch.listed == {
            listed.id: {"gone@DEST.example": gone},
            big.id: {"gone@dest.example": gone},
            plain.id: {},
        }
        assert batch.messages == {listed.id: b"Subject: hi\r\n\r\nhello\r\n", plain.id: b"Subject: hi\r\n\r\nhello\r\n"}
        assert batch.listed_error is None and batch.messages_error is None

    def test_claim_batch_claims_and_reads_what_the_worker_needs(self, store: QueueStore) -> None:
        added = self.fill(store)
        batch = store.claim_batch(
            owner="w", now=at(3), lease_expires=at(60), limit=10, suppressed_since=at(3), read_up_to=1000
        )
        self.check(store, batch, added)
        assert store.claim(owner="x", now=at(3), lease_expires=at(60), limit=10) == []

    def test_claim_batch_reads_only_what_it_is_asked(self, store: QueueStore) -> None:
        self.fill(store)
        batch = store.claim_batch(owner="w", now=at(3), lease_expires=at(60), limit=2)
        assert len(batch.items) == 2 and batch.listed == {} and batch.messages == {}
        assert store.claim_batch(owner="w", now=at(3), lease_expires=at(60), limit=0) == ClaimedBatch()
        rest = store.claim_batch(owner="w", now=at(3), lease_expires=at(60), suppressed_since=T0, read_up_to=10**6)
        assert len(rest.items) == 1 and list(rest.messages) == [rest.items[0].id]
        nothing = store.claim_batch(owner="w", now=at(3), lease_expires=at(60), suppressed_since=T0, read_up_to=10**6)
        assert nothing == ClaimedBatch()

    @pytest.mark.asyncio
    async def test_the_async_twin_claims_and_reads_the_same(self, store: QueueStore) -> None:
        try:
            added = await self.off_loop(lambda: self.fill(store))
            batch = await store.aclaim_batch(
                owner="w", now=at(3), lease_expires=at(60), limit=10, suppressed_since=at(3), read_up_to=1000
            )
            await self.off_loop(lambda: self.check(store, batch, added))
            again = await store.aclaim_batch(owner="w", now=at(3), lease_expires=at(60), suppressed_since=T0)
            assert again == ClaimedBatch()
        finally:
            await store.aclose()

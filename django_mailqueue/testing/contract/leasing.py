"""The contract on leases: claiming, renewing, giving back and cancelling."""

from __future__ import annotations

import uuid

from ...core.items import (
    Completion,
    RecipientState,
)
from ...stores.base import QueueStore
from .support import T0, ContractBase, at, new_item, outcome


class Leasing(ContractBase):
    """`claim`, `renew`, `reschedule`, `cancel`: one holder per item, earliest due first."""

    # --- claim ----------------------------------------------------------------------

    def test_claim_takes_the_earliest_due_then_the_oldest(self, store: QueueStore) -> None:
        self.needs_add_order(store)
        first = store.add(new_item(not_before=at(10)), now=T0)
        second = store.add(new_item(not_before=at(10)), now=T0)
        earliest = store.add(new_item(not_before=at(5)), now=at(1))
        future = store.add(new_item(not_before=at(1000)), now=T0)
        claimed = store.claim(owner="w", now=at(20), lease_expires=at(80), limit=10)
        assert [i.id for i in claimed] == [earliest.id, first.id, second.id]
        assert future.id not in {i.id for i in claimed}

    def test_equally_due_items_come_oldest_first(self, store: QueueStore) -> None:
        self.needs_add_order(store)
        ids = [store.add(new_item(), now=T0).id for _ in range(12)]
        batch = store.add_many([new_item() for _ in range(5)], now=T0)
        ids.extend(b.id for b in batch)
        order: list[uuid.UUID] = []
        while claimed := store.claim(owner="w", now=T0, lease_expires=at(60), limit=3):
            order.extend(i.id for i in claimed)
        assert order == ids

    def test_claim_leases_and_bumps_the_revision(self, store: QueueStore) -> None:
        added = store.add(new_item(), now=T0)
        item = self.claim_one(store, owner="worker-a", lease=30)
        assert item.owner == "worker-a" and item.lease_expires == at(30)
        assert item.revision == added.revision + 1 and item.reclaims == 0
        assert store.get(added.id) == item
        assert store.claim(owner="worker-b", now=at(29), lease_expires=at(90)) == []

    def test_an_expired_lease_is_claimable_again_and_counted(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        first = self.claim_one(store, owner="a", lease=30)
        again = self.claim_one(store, now=at(30), owner="b", lease=30)
        assert again.id == first.id and again.owner == "b"
        assert again.reclaims == 1 and again.revision == first.revision + 1

    def test_claim_honours_the_limit_and_the_queue_order(self, store: QueueStore) -> None:
        self.needs_add_order(store)
        bulk = [store.add(new_item(queue="bulk"), now=T0).id for _ in range(3)]
        urgent = [store.add(new_item(queue="urgent"), now=at(1)).id for _ in range(2)]
        store.add(new_item(queue="other"), now=T0)
        got = store.claim(owner="w", now=at(5), lease_expires=at(60), queues=["urgent", "bulk"], limit=4)
        assert [i.id for i in got] == [*urgent, *bulk[:2]]
        assert store.claim(owner="w", now=at(5), lease_expires=at(60), queues=["nothing"]) == []

    def test_concurrent_claimers_never_share_an_item(self, store: QueueStore) -> None:
        total = self.race_items
        for start in range(0, total, 50):
            store.add_many([new_item() for _ in range(min(50, total - start))], now=T0)

        def drain(index: int) -> list[uuid.UUID]:
            taken: list[uuid.UUID] = []
            while claimed := store.claim(owner=f"w{index}", now=at(1), lease_expires=at(600), limit=3):
                taken.extend(i.id for i in claimed)
            return taken

        results = self.in_threads(8, drain)
        every = [item_id for taken in results for item_id in taken]
        assert len(every) == total
        assert len(set(every)) == total

    # --- renew --------------------------------------------------------------------

    def test_renew_extends_only_the_owners_leases(self, store: QueueStore) -> None:
        store.add_many([new_item(), new_item()], now=T0)
        mine = self.claim_one(store, owner="a", lease=30)
        theirs = self.claim_one(store, owner="b", lease=30)
        assert store.renew([mine.id, theirs.id], owner="a", lease_expires=at(90)) == [mine.id]
        renewed = store.get(mine.id)
        assert renewed is not None and renewed.lease_expires == at(90)
        untouched = store.get(theirs.id)
        assert untouched is not None and untouched.lease_expires == at(30)
        # b's lease expired at 30, a's was renewed to 90: only b's item is claimable at 60
        assert [i.id for i in store.claim(owner="c", now=at(60), lease_expires=at(120), limit=5)] == [theirs.id]
        still = store.get(mine.id)
        assert still is not None and still.owner == "a"

    def test_a_taken_lease_is_not_renewed(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store, owner="a", lease=30)
        self.claim_one(store, now=at(31), owner="b", lease=30)
        assert store.renew([item.id], owner="a", lease_expires=at(200)) == []

    # --- reschedule and cancel ---------------------------------------------------------

    def test_reschedule_moves_the_next_attempt(self, store: QueueStore) -> None:
        added = store.add(new_item(), now=T0)
        assert store.reschedule(added.id, at=at(500)) is True
        assert store.claim(owner="w", now=at(499), lease_expires=at(600)) == []
        assert len(store.claim(owner="w", now=at(500), lease_expires=at(600))) == 1

    def test_reschedule_by_the_owner_gives_the_item_back(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store, owner="a", lease=300)
        assert store.reschedule(item.id, at=at(1), owner="b") is False
        assert store.reschedule(item.id, at=at(1), owner="a") is True
        back = store.get(item.id)
        assert back is not None and back.owner is None and back.lease_expires is None and back.attempts == 0
        again = self.claim_one(store, now=at(1), owner="c")
        assert again.reclaims == 0

    def test_reschedule_without_owner_keeps_the_lease(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store, owner="a", lease=300)
        assert store.reschedule(item.id, at=T0) is True
        kept = store.get(item.id)
        assert kept is not None and kept.owner == "a" and kept.lease_expires == at(300)
        assert store.claim(owner="b", now=at(1), lease_expires=at(60)) == []

    def test_cancel_drops_the_item_and_its_message(self, store: QueueStore) -> None:
        added = store.add(new_item(), now=T0)
        self.claim_one(store, owner="a")
        cancelled = store.cancel(added.id)
        assert cancelled is not None and cancelled.id == added.id and cancelled.owner == "a"
        assert store.get(added.id) is None and store.read_message(added.id) is None
        assert store.cancel(added.id) is None
        done = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=T0)
        assert store.complete(added.id, owner="a", revision=cancelled.revision, completion=done) is None

    def test_cancel_many_drops_each_and_answers_in_order(self, store: QueueStore) -> None:
        leased, kept, plain = (store.add(new_item([f"r{n}@example.org"]), now=T0) for n in range(3))
        assert self.claim_one(store, owner="a").id == leased.id
        answers = store.cancel_many([plain.id, uuid.uuid4(), leased.id, plain.id])
        assert [a.id if a else None for a in answers] == [plain.id, None, leased.id, None]
        assert answers[2] is not None and answers[2].owner == "a"
        for item in (plain, leased):
            assert store.get(item.id) is None and store.read_message(item.id) is None
        assert store.get(kept.id) is not None and store.cancel_many([]) == []

"""The contract on a completion's DSNs: written with the outcome in one step — both or neither."""

from __future__ import annotations

import uuid

import pytest

from ...core.errors import Code, QueueError
from ...core.items import CompleteRequest, Completion, NewItem, QueueItem, RecipientState, Reply
from ...stores.base import QueueStore
from .support import LATER, NO, T0, ContractBase, StoreFactory, at, new_item, outcome


def dsn_for(item: QueueItem, *, tag: str = "failed") -> NewItem:
    """A DSN-like item about `item`: from the null sender to its sender, in its queue."""
    return NewItem(
        sender="",
        recipients=(item.sender,),
        message=f"Subject: Delivery Status Notification ({tag})\r\n\r\nabout {item.id}\r\n".encode(),
        queue=item.queue,
        subject=f"Delivery Status Notification ({tag})",
    )


class CompletingWithDsns(ContractBase):
    """`complete` adds `completion.dsns` only with the outcome: never an outcome without its DSNs,
    never a DSN without its outcome (a crash can leave neither)."""

    def failed_with(self, item: QueueItem, *dsns: NewItem, when: float = 7) -> Completion:
        outcomes = tuple(outcome(r.address, RecipientState.FAILED, NO) for r in item.recipients)
        return Completion(outcomes, next_attempt=at(300), dsns=dsns, now=at(when))

    def dsns_held(self, store: QueueStore) -> list[QueueItem]:
        return [i for i in store.list(limit=1000) if i.sender == ""]

    def test_the_outcome_and_its_dsns_are_written_together(self, store: QueueStore) -> None:
        store.add(new_item(["a@x.org", "b@x.org"]), now=T0)
        item = self.claim_one(store)
        dsn = dsn_for(item)
        completion = Completion(
            (outcome("a@x.org", RecipientState.FAILED, NO), outcome("b@x.org", RecipientState.PENDING, LATER)),
            next_attempt=at(300),
            dsns=(dsn, dsn_for(item, tag="delayed")),
            now=at(7),
        )
        recorded = store.complete(item.id, owner="w1", revision=item.revision, completion=completion)
        assert recorded is not None and recorded.attempts == 1
        assert store.get(item.id) == recorded
        held = self.dsns_held(store)
        assert sorted(i.subject for i in held) == [
            "Delivery Status Notification (delayed)",
            "Delivery Status Notification (failed)",
        ]
        added = store.get(dsn.id)
        assert added is not None
        assert added.created == at(7) and added.next_attempt == at(7) and added.owner is None
        assert [r.address for r in added.recipients] == [item.sender] and added.queue == item.queue
        assert store.read_message(dsn.id) == dsn.message
        # A DSN is an item like any other: due at once, claimable.
        assert dsn.id in {i.id for i in store.claim(owner="w2", now=at(8), lease_expires=at(60), limit=5)}

    def test_an_item_dropped_as_done_leaves_its_dsns(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store)
        dsn = dsn_for(item)
        recorded = store.complete(item.id, owner="w1", revision=item.revision, completion=self.failed_with(item, dsn))
        assert recorded is not None and recorded.done
        assert store.get(item.id) is None and store.read_message(item.id) is None
        assert [i.id for i in self.dsns_held(store)] == [dsn.id]
        assert store.count() == 1

    def test_no_dsn_without_its_outcome(self, store: QueueStore) -> None:
        store.add_many([new_item(), new_item()], now=T0)
        item, other = store.claim(owner="w1", now=T0, lease_expires=at(60), limit=2)
        completion = self.failed_with(item, dsn_for(item))
        with pytest.raises(QueueError) as stranger:
            store.complete(item.id, owner="intruder", revision=item.revision, completion=completion)
        assert stranger.value.code == Code.LEASE_LOST
        with pytest.raises(QueueError) as stale:
            store.complete(item.id, owner="w1", revision=item.revision - 1, completion=completion)
        assert stale.value.code == Code.LEASE_LOST
        assert store.cancel(other.id) is not None
        gone = store.complete(other.id, owner="w1", revision=other.revision, completion=self.failed_with(other))
        assert gone is None
        gone_with_dsn = self.failed_with(other, dsn_for(other))
        assert store.complete(other.id, owner="w1", revision=other.revision, completion=gone_with_dsn) is None
        assert self.dsns_held(store) == []
        assert store.get(item.id) == item

    def test_an_unkeepable_dsn_refuses_the_whole_completion(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store)
        bad = NewItem(sender="", recipients=("x\x00@example.org",), message=b"x")
        with pytest.raises(QueueError) as refused:
            store.complete(item.id, owner="w1", revision=item.revision, completion=self.failed_with(item, bad))
        assert refused.value.code == Code.INVALID
        without_now = Completion(self.failed_with(item).outcomes, next_attempt=at(300), dsns=(dsn_for(item),))
        with pytest.raises(QueueError) as no_time:
            store.complete(item.id, owner="w1", revision=item.revision, completion=without_now)
        assert no_time.value.code == Code.INVALID
        assert store.get(item.id) == item and self.dsns_held(store) == []

    def test_dsns_past_max_items_refuse_the_whole_completion(self, make_store: StoreFactory) -> None:
        store = make_store(max_items=2)
        store.add_many([new_item(), new_item()], now=T0)
        item, other = store.claim(owner="w1", now=T0, lease_expires=at(60), limit=2)
        with pytest.raises(QueueError) as full:
            store.complete(
                item.id, owner="w1", revision=item.revision, completion=self.failed_with(item, dsn_for(item))
            )
        assert full.value.code == Code.FULL
        assert store.get(item.id) == item and self.dsns_held(store) == []
        # The same outcome without its DSN is recorded; then there is room for the other's.
        assert store.complete(item.id, owner="w1", revision=item.revision, completion=self.failed_with(item))
        dsn = dsn_for(other)
        assert store.complete(other.id, owner="w1", revision=other.revision, completion=self.failed_with(other, dsn))
        assert [i.id for i in self.dsns_held(store)] == [dsn.id]

    def test_complete_many_writes_each_answer_with_its_own_dsns(self, store: QueueStore) -> None:
        store.add_many([new_item(), new_item(), new_item()], now=T0)
        first, second, third = store.claim(owner="w1", now=T0, lease_expires=at(60), limit=3)
        mine, refused, theirs = dsn_for(first), dsn_for(second), dsn_for(third)
        ghost = uuid.uuid4()
        answers = store.complete_many(
            [
                CompleteRequest(first.id, "w1", first.revision, self.failed_with(first, mine)),
                CompleteRequest(second.id, "intruder", second.revision, self.failed_with(second, refused)),
                CompleteRequest(ghost, "w1", 1, Completion((), next_attempt=at(5), dsns=(dsn_for(first),), now=at(5))),
                CompleteRequest(third.id, "w1", third.revision, self.failed_with(third, theirs)),
            ]
        )
        done, lost, gone, also_done = answers
        assert isinstance(done, QueueItem) and isinstance(also_done, QueueItem)
        assert isinstance(lost, QueueError) and lost.code == Code.LEASE_LOST and gone is None
        assert {i.id for i in self.dsns_held(store)} == {mine.id, theirs.id}

    @pytest.mark.asyncio
    async def test_the_async_twins_write_the_dsns_with_the_outcome(self, store: QueueStore) -> None:
        try:
            await store.aadd_many([new_item(), new_item()], now=T0)
            first, second = await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=2)
            one, two = dsn_for(first), dsn_for(second)
            answers = await store.acomplete_many(
                [
                    CompleteRequest(first.id, "w", first.revision, self.failed_with(first, one)),
                    CompleteRequest(second.id, "w", second.revision - 1, self.failed_with(second, two)),
                ]
            )
            assert isinstance(answers[0], QueueItem) and answers[0].done
            assert isinstance(answers[1], QueueError) and answers[1].code == Code.LEASE_LOST
            assert await store.aget(one.id) is not None and await store.aget(two.id) is None
            three = dsn_for(second, tag="again")
            recorded = await store.acomplete(
                second.id, owner="w", revision=second.revision, completion=self.failed_with(second, three)
            )
            assert recorded is not None and recorded.done
            assert await store.aread_message(three.id) == three.message
            assert {i.id for i in await store.alist(limit=1000) if i.sender == ""} == {one.id, three.id}
        finally:
            await store.aclose()

    def test_the_delay_warning_is_marked_with_its_dsn(self, store: QueueStore) -> None:
        """A delayed DSN and the mark that it was sent are written together."""
        store.add(new_item(), now=T0)
        item = self.claim_one(store)
        reply = Reply(550, "5.1.1", "no such user here")
        completion = Completion(
            (outcome(item.recipients[0].address, RecipientState.PENDING, reply),),
            next_attempt=at(9),
            delay_warned=True,
            dsns=(dsn_for(item, tag="delayed"),),
            now=at(3),
        )
        recorded = store.complete(item.id, owner="w1", revision=item.revision, completion=completion)
        assert recorded is not None and recorded.delay_warned and recorded.recipients[0].reply == reply
        assert len(self.dsns_held(store)) == 1

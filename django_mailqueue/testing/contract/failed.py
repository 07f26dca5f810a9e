"""The contract on failed items kept to be sent again (`KEEP_FAILED`): kept by `complete`, never claimed nor
counted as waiting, sent again by `send_again`, dropped by `prune_failed` and `cancel`."""

from __future__ import annotations

import uuid

import pytest

from ...core.errors import Code, QueueError
from ...core.items import (
    NEVER,
    Completion,
    ItemQuery,
    ItemState,
    QueueItem,
    RecipientState,
)
from ...stores.base import QueueStore
from .support import LATER, NO, OK, T0, ContractBase, at, new_item, outcome

STATES = tuple(ItemState)


class KeepingFailed(ContractBase):
    """A failure with `keep_failed` keeps the item, in state failed, with its message, until sent again."""

    def fail(
        self, store: QueueStore, recipients: tuple[str, ...] = ("a@x.org", "b@x.org"), *, when: float = 10
    ) -> QueueItem:
        """Add an item at T0 and record an attempt at `when` that delivers its first recipient and fails the rest,
        keeping it; the item as recorded."""
        added = store.add(new_item(recipients), now=T0)
        item = self.claim_one(store, now=at(when))
        assert item.id == added.id
        outcomes = [outcome(recipients[0], RecipientState.DELIVERED)]
        outcomes += [outcome(r, RecipientState.FAILED, NO) for r in recipients[1:]]
        completion = Completion(tuple(outcomes), next_attempt=at(when + 300), now=at(when), keep_failed=True)
        recorded = store.complete(item.id, owner="w1", revision=item.revision, completion=completion)
        assert recorded is not None
        return recorded

    def states(self, store: QueueStore, now: float) -> dict[str, int]:
        return {s.value: store.count(ItemQuery(state=s, now=at(now))) for s in STATES}

    def test_a_failure_that_keeps_the_item_keeps_it_with_its_message(self, store: QueueStore) -> None:
        message = b"Subject: kept\r\n\r\nthe bytes as added\r\n"
        dsn = new_item(["sender@example.com"], sender="", message=b"Subject: failure\r\n\r\nDSN\r\n")
        store.add(new_item(["a@x.org", "b@x.org"], message=message), now=T0)
        item = self.claim_one(store, now=at(10))
        completion = Completion(
            (outcome("a@x.org", RecipientState.DELIVERED), outcome("b@x.org", RecipientState.FAILED, NO)),
            next_attempt=at(310),
            dsns=(dsn,),
            now=at(10),
            keep_failed=True,
        )
        recorded = store.complete(item.id, owner="w1", revision=item.revision, completion=completion)
        assert recorded is not None and recorded.done and recorded.kept
        assert recorded.failed_at == at(10) and recorded.next_attempt == NEVER
        assert recorded.state_at(at(10)) is ItemState.FAILED
        assert [(r.state, r.reply) for r in recorded.recipients][1] == (RecipientState.FAILED, NO)
        assert recorded.recipients[0].state is RecipientState.DELIVERED
        assert recorded.attempts == 1 and recorded.owner is None
        assert store.get(item.id) == recorded
        assert store.read_message(item.id) == message
        # its DSN went in with the outcome, as without keep_failed
        assert store.get(dsn.id) is not None
        assert store.count() == 2

    def test_a_kept_item_is_never_claimed_nor_counted_as_waiting(self, store: QueueStore) -> None:
        kept = self.fail(store)
        later = 400 * 86400  # well past any next attempt, far before NEVER
        assert store.claim(owner="w2", now=at(later), lease_expires=at(later + 60), limit=10) == []
        for when in (10, 20, later):
            assert self.states(store, when) == {**{s.value: 0 for s in STATES}, "failed": 1}
            assert [i.id for i in store.list(ItemQuery(state=ItemState.FAILED, now=at(when)))] == [kept.id]
        assert store.count(ItemQuery(state=ItemState.FAILED, queue="default", now=at(20))) == 1
        assert store.count(ItemQuery(state=ItemState.FAILED, queue="other", now=at(20))) == 0
        assert store.count(ItemQuery(state=ItemState.FAILED, domain="x.org", now=at(20))) == 1
        assert store.count(ItemQuery(state=ItemState.SCHEDULED, domain="x.org", now=at(20))) == 0
        summary = store.summary(now=at(20))
        assert summary.by_state["failed"] == 1 and summary.total == 1 and summary.oldest_due is None
        overview = store.overview(now=at(20), bound=100)
        assert overview.by_state["failed"] == 1 and overview.by_state["due"] == 0
        assert overview.by_queue["default"]["failed"] == 1
        # nothing but send_again brings it back
        assert store.reschedule(kept.id, at=at(20)) is False
        assert store.defer_destination(["x.org"], until=at(5000), now=at(20)) == 0
        assert store.get(kept.id) == kept

    def test_waiting_items_beside_a_kept_one_are_counted_as_before(self, store: QueueStore) -> None:
        self.fail(store)
        tried = store.add(new_item(["c@x.org"]), now=at(20))
        store.add(new_item(["d@x.org"], not_before=at(5000)), now=at(20))
        store.add(new_item(["e@x.org"]), now=at(20))
        item = self.claim_one(store, now=at(30))
        assert item.id == tried.id
        completion = Completion((outcome("c@x.org", RecipientState.PENDING, LATER),), next_attempt=at(600))
        store.complete(item.id, owner="w1", revision=item.revision, completion=completion)
        assert self.states(store, 40) == {"due": 1, "scheduled": 1, "deferred": 1, "leased": 0, "failed": 1}
        assert store.count() == 4
        listed = store.list(ItemQuery(state=ItemState.SCHEDULED, now=at(40)))
        assert [i.recipients[0].address for i in listed] == ["d@x.org"]
        listed = store.list(ItemQuery(state=ItemState.DEFERRED, now=at(40)))
        assert [i.recipients[0].address for i in listed] == ["c@x.org"]

    def test_only_a_failure_is_kept(self, store: QueueStore) -> None:
        store.add(new_item(["a@x.org"]), now=T0)
        store.add(new_item(["b@x.org"]), now=T0)
        for item in store.claim(owner="w1", now=at(10), lease_expires=at(70), limit=2):
            delivered = item.recipients[0].address == "a@x.org"
            state, reply = (RecipientState.DELIVERED, OK) if delivered else (RecipientState.PENDING, LATER)
            completion = Completion(
                (outcome(item.recipients[0].address, state, reply),), next_attempt=at(300), now=at(10), keep_failed=True
            )
            recorded = store.complete(item.id, owner="w1", revision=item.revision, completion=completion)
            assert recorded is not None and not recorded.kept
            assert (store.get(item.id) is None) is (state is RecipientState.DELIVERED)
        assert store.count(ItemQuery(state=ItemState.FAILED, now=at(20))) == 0

    def test_keeping_needs_now(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store)
        completion = Completion(
            (outcome("rcpt@example.org", RecipientState.FAILED, NO),), next_attempt=at(300), keep_failed=True
        )
        with pytest.raises(QueueError) as caught:
            store.complete(item.id, owner="w1", revision=item.revision, completion=completion)
        assert caught.value.code is Code.INVALID
        assert store.get(item.id) == item

    def test_send_again_makes_the_failed_recipients_pending_and_the_item_due(self, store: QueueStore) -> None:
        kept = self.fail(store, ("a@x.org", "b@x.org", "c@x.org"))
        waiting = store.add(new_item(["z@x.org"]), now=at(20))
        answers = store.send_again([kept.id, uuid.uuid4(), waiting.id], now=at(1000))
        assert answers[1:] == [None, None]
        again = answers[0]
        assert again is not None and not again.kept and again.failed_at is None
        assert [(r.address, r.state, r.reply) for r in again.recipients][1:] == [
            ("b@x.org", RecipientState.PENDING, None),
            ("c@x.org", RecipientState.PENDING, None),
        ]
        assert again.recipients[0] == kept.recipients[0]  # delivered stays delivered
        assert again.created == at(1000) and again.next_attempt == at(1000)
        assert again.attempts == 0 and again.revision == kept.revision + 1 and not again.delay_warned
        assert store.get(kept.id) == again
        assert again.state_at(at(1000)) is ItemState.DUE
        assert self.states(store, 1000) == {"due": 2, "scheduled": 0, "deferred": 0, "leased": 0, "failed": 0}
        assert store.send_again([kept.id], now=at(1001)) == [None]  # not failed any more
        # claimed, delivered, and gone as any item
        claimed = {i.id: i for i in store.claim(owner="w3", now=at(1000), lease_expires=at(1060), limit=5)}
        assert set(claimed) == {kept.id, waiting.id}
        item = claimed[kept.id]
        assert store.read_message(item.id) is not None
        completion = Completion(
            tuple(outcome(r.address, RecipientState.DELIVERED) for r in item.pending), next_attempt=at(1300)
        )
        done = store.complete(item.id, owner="w3", revision=item.revision, completion=completion)
        assert done is not None and done.done and not done.kept
        assert store.get(item.id) is None

    def test_a_kept_item_sent_again_can_fail_and_be_kept_again(self, store: QueueStore) -> None:
        kept = self.fail(store)
        store.send_again([kept.id], now=at(100))
        item = self.claim_one(store, now=at(100))
        completion = Completion(
            (outcome("b@x.org", RecipientState.FAILED, NO),), next_attempt=at(400), now=at(110), keep_failed=True
        )
        recorded = store.complete(item.id, owner="w1", revision=item.revision, completion=completion)
        assert recorded is not None and recorded.kept and recorded.failed_at == at(110)
        assert store.count(ItemQuery(state=ItemState.FAILED, now=at(120))) == 1

    def test_prune_drops_the_items_kept_since_before_a_time(self, store: QueueStore) -> None:
        first = self.fail(store, when=10)
        second = self.fail(store, when=20)
        waiting = store.add(new_item(["z@x.org"]), now=at(20))
        assert store.prune_failed(before=at(10)) == 0
        assert store.prune_failed(before=at(15)) == 1
        assert store.get(first.id) is None and store.read_message(first.id) is None
        assert store.get(second.id) == second and store.get(waiting.id) == waiting
        assert store.count(ItemQuery(state=ItemState.FAILED, now=at(30))) == 1
        assert store.count(ItemQuery(domain="x.org")) == 2
        assert store.prune_failed(before=at(1000)) == 1
        assert store.count() == 1 and store.send_again([second.id], now=at(1000)) == [None]

    def test_cancel_drops_a_kept_item(self, store: QueueStore) -> None:
        kept = self.fail(store)
        assert store.cancel(kept.id) == kept
        assert store.get(kept.id) is None and store.count() == 0
        assert store.count(ItemQuery(state=ItemState.FAILED, now=at(20))) == 0
        assert store.prune_failed(before=at(1000)) == 0

"""The contract on recording outcomes: `complete` and `complete_many`."""

from __future__ import annotations

import uuid

import pytest

from ...core.errors import Code, QueueError
from ...core.items import (
    CompleteRequest,
    Completion,
    QueueItem,
    RecipientState,
)
from ...stores.base import QueueStore
from .support import LATER, NO, OK, T0, ContractBase, at, new_item, outcome


class Completing(ContractBase):
    """One step per outcome, for the lease's owner at its revision; final states never change."""

    # --- complete -------------------------------------------------------------------

    def test_complete_records_outcomes_and_lets_go(self, store: QueueStore) -> None:
        store.add(new_item(["a@x.org", "b@x.org", "c@x.org"]), now=T0)
        item = self.claim_one(store)
        done = Completion(
            (
                outcome("a@x.org", RecipientState.DELIVERED),
                outcome("b@x.org", RecipientState.FAILED, NO),
                outcome("c@x.org", RecipientState.PENDING, LATER),
            ),
            next_attempt=at(300),
        )
        recorded = store.complete(item.id, owner="w1", revision=item.revision, completion=done)
        assert recorded is not None and not recorded.done
        assert [(r.state, r.reply) for r in recorded.recipients] == [
            (RecipientState.DELIVERED, OK),
            (RecipientState.FAILED, NO),
            (RecipientState.PENDING, LATER),
        ]
        assert recorded.recipients[0].remote_mta == "mx.example.org"
        assert recorded.attempts == 1 and recorded.next_attempt == at(300)
        assert recorded.owner is None and recorded.lease_expires is None
        assert store.get(item.id) == recorded
        assert store.claim(owner="w", now=at(299), lease_expires=at(400)) == []
        assert [i.id for i in store.claim(owner="w", now=at(300), lease_expires=at(400))] == [item.id]

    def test_a_final_state_never_changes(self, store: QueueStore) -> None:
        store.add(new_item(["a@x.org", "b@x.org"]), now=T0)
        item = self.claim_one(store)
        store.complete(
            item.id,
            owner="w1",
            revision=item.revision,
            completion=Completion(
                (outcome("a@x.org", RecipientState.DELIVERED), outcome("b@x.org", RecipientState.PENDING, LATER)),
                next_attempt=at(10),
            ),
        )
        again = self.claim_one(store, now=at(10))
        recorded = store.complete(
            again.id,
            owner="w1",
            revision=again.revision,
            completion=Completion(
                (outcome("a@x.org", RecipientState.FAILED, NO), outcome("b@x.org", RecipientState.PENDING, LATER)),
                next_attempt=at(20),
            ),
        )
        assert recorded is not None
        assert recorded.recipients[0].state is RecipientState.DELIVERED
        assert recorded.recipients[0].reply == OK
        assert recorded.attempts == 2

    def test_an_item_whose_every_recipient_is_final_is_dropped(self, store: QueueStore) -> None:
        added = store.add(new_item(["a@x.org", "b@x.org"]), now=T0)
        item = self.claim_one(store)
        recorded = store.complete(
            item.id,
            owner="w1",
            revision=item.revision,
            completion=Completion(
                (outcome("a@x.org", RecipientState.DELIVERED), outcome("b@x.org", RecipientState.FAILED, NO)),
                next_attempt=at(10),
            ),
        )
        assert recorded is not None and recorded.done
        assert store.get(added.id) is None
        assert store.read_message(added.id) is None
        assert store.count() == 0

    def test_complete_needs_the_owner_and_the_revision(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store, owner="a", lease=30)
        done = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=T0)
        with pytest.raises(QueueError) as other:
            store.complete(item.id, owner="b", revision=item.revision, completion=done)
        assert other.value.code == Code.LEASE_LOST
        with pytest.raises(QueueError) as stale:
            store.complete(item.id, owner="a", revision=item.revision - 1, completion=done)
        assert stale.value.code == Code.LEASE_LOST
        self.claim_one(store, now=at(31), owner="a", lease=30)  # the same owner, a new claim
        with pytest.raises(QueueError) as reclaimed:
            store.complete(item.id, owner="a", revision=item.revision, completion=done)
        assert reclaimed.value.code == Code.LEASE_LOST
        held = store.get(item.id)
        assert held is not None and held.recipients[0].state is RecipientState.PENDING

    def test_complete_can_mark_the_delay_warning_and_skip_the_count(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store)
        recorded = store.complete(
            item.id,
            owner="w1",
            revision=item.revision,
            completion=Completion((), next_attempt=at(5), count_attempt=False, delay_warned=True),
        )
        assert recorded is not None and recorded.attempts == 0 and recorded.delay_warned
        assert recorded.reclaims == 0

    def test_an_outcome_resets_the_reclaim_count(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        self.claim_one(store, owner="a", lease=10)
        item = self.claim_one(store, now=at(10), owner="b", lease=10)
        assert item.reclaims == 1
        recorded = store.complete(
            item.id,
            owner="b",
            revision=item.revision,
            completion=Completion((outcome("rcpt@example.org", RecipientState.PENDING, LATER),), next_attempt=at(20)),
        )
        assert recorded is not None and recorded.reclaims == 0

    def test_complete_many_answers_each_request_in_order(self, store: QueueStore) -> None:
        store.add_many([new_item(["a@x.org"]), new_item(["b@x.org"]), new_item(["c@x.org", "d@x.org"])], now=T0)
        first, second, third = store.claim(owner="w1", now=T0, lease_expires=at(60), limit=3)
        ghost = uuid.uuid4()
        answers = store.complete_many(
            [
                CompleteRequest(
                    first.id,
                    "w1",
                    first.revision,
                    Completion((outcome("a@x.org", RecipientState.DELIVERED),), next_attempt=at(5)),
                ),
                CompleteRequest(
                    second.id,
                    "intruder",
                    second.revision,
                    Completion((outcome("b@x.org", RecipientState.DELIVERED),), next_attempt=at(5)),
                ),
                CompleteRequest(ghost, "w1", 1, Completion((), next_attempt=at(5))),
                CompleteRequest(
                    third.id,
                    "w1",
                    third.revision,
                    Completion(
                        (
                            outcome("c@x.org", RecipientState.FAILED, NO),
                            outcome("d@x.org", RecipientState.PENDING, LATER),
                        ),
                        next_attempt=at(300),
                    ),
                ),
            ]
        )
        assert len(answers) == 4
        done, refused, gone, deferred = answers
        assert isinstance(done, QueueItem) and done.done and store.get(first.id) is None
        assert isinstance(refused, QueueError) and refused.code == Code.LEASE_LOST
        held = store.get(second.id)
        assert held is not None and held.owner == "w1" and held.recipients[0].state is RecipientState.PENDING
        assert gone is None
        assert isinstance(deferred, QueueItem) and not deferred.done
        assert store.get(third.id) == deferred
        assert [r.state for r in deferred.recipients] == [RecipientState.FAILED, RecipientState.PENDING]
        assert deferred.next_attempt == at(300) and deferred.owner is None and deferred.attempts == 1
        assert store.complete_many([]) == []

    # --- history rows in the completion's transaction (`completes_with_history`) -----------------

    def test_also_runs_with_the_answers_only_where_the_store_completes_with_history(self, store: QueueStore) -> None:
        """`complete_many(…, also=)`: a store that `completes_with_history` (for one of Django's databases)
        calls it once, with the answers; any other refuses it (TypeError) and records nothing."""
        store.add(new_item(["a@x.org"]), now=T0)
        item = self.claim_one(store)
        request = CompleteRequest(item.id, "w1", item.revision, _deferred("a@x.org"))
        seen: list[list[object]] = []
        if not _takes_also(store):
            with pytest.raises(TypeError):
                store.complete_many([request], also=lambda answers: seen.append(list(answers)))
            held = store.get(item.id)
            assert seen == [] and held is not None and held.owner == "w1" and held.attempts == 0
            return
        answers = store.complete_many([request], also=lambda answers: seen.append(list(answers)))
        assert seen == [answers]
        assert isinstance(answers[0], QueueItem) and answers[0].attempts == 1 and answers[0].owner is None

    @pytest.mark.asyncio
    async def test_the_async_twin_takes_also_as_the_store_says(self, store: QueueStore) -> None:
        try:
            await store.aadd(new_item(["a@x.org"]), now=T0)
            (item,) = await store.aclaim(owner="w1", now=T0, lease_expires=at(60))
            request = CompleteRequest(item.id, "w1", item.revision, _deferred("a@x.org"))
            seen: list[list[object]] = []
            if not _takes_also(store):
                with pytest.raises(TypeError):
                    await store.acomplete_many([request], also=lambda answers: seen.append(list(answers)))
                held = await store.aget(item.id)
                assert seen == [] and held is not None and held.owner == "w1" and held.attempts == 0
                return
            answers = await store.acomplete_many([request], also=lambda answers: seen.append(list(answers)))
            assert seen == [answers] and isinstance(answers[0], QueueItem) and answers[0].attempts == 1
        finally:
            await store.aclose()


def _deferred(address: str) -> Completion:
    return Completion((outcome(address, RecipientState.PENDING, LATER),), next_attempt=at(5))


def _takes_also(store: QueueStore) -> bool:
    """Whether the store says it runs `also` in its completions' transaction, for one of Django's databases."""
    from django.conf import settings

    return any(store.completes_with_history(alias) for alias in settings.DATABASES)

"""The contract on the suppression list: entries written with their outcome in one step, looked up in one call."""

from __future__ import annotations

import pytest

from ...core.errors import Code, QueueError
from ...core.items import CompleteRequest, Completion, QueueItem, RecipientState, Reply, Suppression
from ...stores.base import QueueStore
from .dsns import dsn_for
from .support import NO, T0, ContractBase, StoreFactory, at, new_item, outcome


def entry(address: str, when: float = 7, *, item: QueueItem | None = None, reply: Reply = NO) -> Suppression:
    return Suppression(address, reply, at(when), item.id if item is not None else None)


class Suppressing(ContractBase):
    """`complete` puts `completion.suppress` on the list with the outcome (both or neither); `suppressed`
    finds the entries of many addresses at once; the list is read, searched, edited and pruned."""

    def failed_suppressing(self, item: QueueItem, *entries: Suppression, **kwargs: object) -> Completion:
        outcomes = tuple(outcome(r.address, RecipientState.FAILED, NO) for r in item.recipients)
        return Completion(outcomes, next_attempt=at(300), suppress=entries, **kwargs)  # type: ignore[arg-type]

    def test_an_outcome_puts_its_entries_on_the_list_in_its_step(self, store: QueueStore) -> None:
        store.add(new_item(["Bob@x.org", "c@x.org"]), now=T0)
        item = self.claim_one(store)
        reply = Reply(550, "5.1.1", "<Bob@x.org>: Recipient address rejected: User unknown in virtual table")
        bob = Suppression("Bob@x.org", reply, at(7.000123), item.id)
        recorded = store.complete(
            item.id, owner="w1", revision=item.revision, completion=self.failed_suppressing(item, bob)
        )
        assert recorded is not None and recorded.done
        found = store.suppressed(["Bob@x.org", "c@x.org", "bob@x.org", "nobody@x.org"], since=T0)
        assert found == {"Bob@x.org": bob}  # the whole entry, to the microsecond; keys as given
        assert store.suppressed([], since=T0) == {}

    def test_no_entry_without_its_outcome(self, make_store: StoreFactory) -> None:
        store = make_store(max_items=2)
        store.add_many([new_item(), new_item()], now=T0)
        item, other = store.claim(owner="w1", now=T0, lease_expires=at(60), limit=2)
        listed = entry("rcpt@example.org", item=item)
        with pytest.raises(QueueError) as stranger:
            store.complete(
                item.id, owner="intruder", revision=item.revision, completion=self.failed_suppressing(item, listed)
            )
        assert stranger.value.code == Code.LEASE_LOST
        with pytest.raises(QueueError) as full:
            store.complete(
                item.id,
                owner="w1",
                revision=item.revision,
                completion=self.failed_suppressing(item, listed, dsns=(dsn_for(item),), now=at(7)),
            )
        assert full.value.code == Code.FULL
        bad = Suppression("rcpt@example.org", Reply(550, "5.1.1", "no\x00such"), at(7), item.id)
        with pytest.raises(QueueError) as invalid:
            store.complete(item.id, owner="w1", revision=item.revision, completion=self.failed_suppressing(item, bad))
        assert invalid.value.code == Code.INVALID
        assert store.cancel(other.id) is not None
        gone = store.complete(
            other.id, owner="w1", revision=other.revision, completion=self.failed_suppressing(other, listed)
        )
        assert gone is None
        assert store.suppressed(["rcpt@example.org"], since=T0) == {}
        assert store.get(item.id) == item

    def test_complete_many_writes_each_answers_entries_the_last_one_winning(self, store: QueueStore) -> None:
        store.add_many([new_item(["same@x.org"]), new_item(["same@x.org"]), new_item(["other@x.org"])], now=T0)
        first, second, refused = store.claim(owner="w1", now=T0, lease_expires=at(60), limit=3)
        answers = store.complete_many(
            [
                CompleteRequest(first.id, "w1", first.revision, self.failed_suppressing(first, entry("same@x.org", 5))),
                CompleteRequest(
                    second.id, "w1", second.revision, self.failed_suppressing(second, entry("same@x.org", 6))
                ),
                CompleteRequest(
                    refused.id, "intruder", refused.revision, self.failed_suppressing(refused, entry("other@x.org"))
                ),
            ]
        )
        assert isinstance(answers[0], QueueItem) and isinstance(answers[1], QueueItem)
        assert isinstance(answers[2], QueueError) and answers[2].code == Code.LEASE_LOST
        assert store.suppressed(["same@x.org", "other@x.org"], since=T0) == {"same@x.org": entry("same@x.org", 6)}

    def test_an_entry_older_than_the_cut_off_does_not_apply(self, store: QueueStore) -> None:
        store.suppress([entry("old@x.org", 10), entry("new@x.org", 20)])
        assert set(store.suppressed(["old@x.org", "new@x.org"], since=at(10))) == {"old@x.org", "new@x.org"}
        assert set(store.suppressed(["old@x.org", "new@x.org"], since=at(15))) == {"new@x.org"}
        assert store.count_suppressed(since=at(15)) == 1
        assert [e.address for e in store.list_suppressed(since=at(15))] == ["new@x.org"]

    def test_by_hand_an_entry_is_added_replaced_and_removed(self, store: QueueStore) -> None:
        by_hand = Suppression("a@x.org", Reply(None, "5.1.1", "bounced in our old system"), at(1))
        store.suppress([by_hand, entry("b@x.org", 2)])
        assert store.suppressed(["a@x.org"], since=T0) == {"a@x.org": by_hand}
        newer = entry("a@x.org", 3, reply=Reply(550, "5.2.1", "mailbox disabled"))
        store.suppress([newer])
        assert store.suppressed(["a@x.org"], since=T0) == {"a@x.org": newer}
        assert store.unsuppress(["a@x.org", "a@x.org", "never@x.org"]) == 1
        assert store.suppressed(["a@x.org", "b@x.org"], since=T0) == {"b@x.org": entry("b@x.org", 2)}
        assert store.unsuppress([]) == 0
        store.suppress([])

    def test_bad_entries_are_refused_whole(self, store: QueueStore) -> None:
        for bad in (
            [entry("a@x.org"), entry("line\r\nbreak@x.org")],
            [entry("a@x.org"), entry("a@x.org")],
            [Suppression("a@x.org", NO, at(1).replace(tzinfo=None))],
            [entry("")],
        ):
            with pytest.raises(QueueError) as refused:
                store.suppress(bad)
            assert refused.value.code == Code.INVALID
        assert store.count_suppressed(since=T0) == 0

    def test_the_list_pages_newest_first_and_searches_addresses(self, store: QueueStore) -> None:
        store.suppress([entry("c@x.org", 5), entry("b@x.org", 5), entry("Alice@Big.example", 9), entry("z@y.org", 1)])
        listed = store.list_suppressed(since=T0)
        assert [e.address for e in listed] == ["Alice@Big.example", "b@x.org", "c@x.org", "z@y.org"]
        assert [e.address for e in store.list_suppressed(since=T0, offset=1, limit=2)] == ["b@x.org", "c@x.org"]
        assert store.list_suppressed(since=T0, offset=4) == []
        assert [e.address for e in store.list_suppressed(since=T0, search="big.EX")] == ["Alice@Big.example"]
        assert [e.address for e in store.list_suppressed(since=T0, search="X.ORG")] == ["b@x.org", "c@x.org"]
        assert store.count_suppressed(since=T0) == 4 and store.count_suppressed(since=T0, search="@x.") == 2

    def test_prune_drops_the_entries_older_than_a_time(self, store: QueueStore) -> None:
        store.suppress([entry("a@x.org", 1), entry("b@x.org", 2), entry("c@x.org", 3)])
        assert store.prune_suppressed(before=at(3)) == 2
        assert [e.address for e in store.list_suppressed(since=T0)] == ["c@x.org"]
        assert store.prune_suppressed(before=at(3)) == 0

    def test_many_addresses_are_looked_up_at_once(self, store: QueueStore) -> None:
        listed = [entry(f"user{i}@x.org", i % 50) for i in range(0, 3000, 7)]
        store.suppress(listed)
        asked = [f"user{i}@x.org" for i in range(3000)]
        assert store.suppressed(asked, since=T0) == {e.address: e for e in listed}

    @pytest.mark.asyncio
    async def test_the_async_twins_write_and_look_up(self, store: QueueStore) -> None:
        try:
            await store.aadd_many([new_item(["a@x.org", "b@x.org"])], now=T0)
            (item,) = await store.aclaim(owner="w", now=T0, lease_expires=at(60))
            entries = (entry("a@x.org", 1, item=item), entry("b@x.org", 2, item=item))
            (answer,) = await store.acomplete_many(
                [CompleteRequest(item.id, "w", item.revision, self.failed_suppressing(item, *entries))]
            )
            assert isinstance(answer, QueueItem) and answer.done
            found = await store.asuppressed(["a@x.org", "b@x.org", "c@x.org"], since=at(2))
            assert found == {"b@x.org": entries[1]}
        finally:
            await store.aclose()

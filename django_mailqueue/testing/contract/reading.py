"""The contract on reading: messages, pages, counts, walks, the async twins, and whose clock counts."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from ...core.errors import Code, QueueError
from ...core.items import (
    CompleteRequest,
    Completion,
    ItemOrder,
    ItemQuery,
    ItemState,
    QueueItem,
    RecipientState,
    matches,
)
from ...stores.base import QueueStore
from .support import LATER, T0, ContractBase, at, new_item, outcome


class Reading(ContractBase):
    """`read_messages`, `list`, `count`, `iter_items`, the async twins and `await_added`."""

    def test_read_messages_gives_what_is_there(self, store: QueueStore) -> None:
        one = store.add(new_item(message=b"one\x00\xff"), now=T0)
        two = store.add(new_item(message=b"two"), now=T0)
        lost = store.add(new_item(message=b"lost"), now=T0)
        self.lose_message(store, lost.id)
        found = store.read_messages([one.id, two.id, lost.id, uuid.uuid4()])
        assert found == {one.id: b"one\x00\xff", two.id: b"two"}

    # --- the async twins ---------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_the_async_twins_keep_the_same_promises(self, store: QueueStore) -> None:
        try:
            added = await store.aadd_many([new_item(["a@x.org"], message=b"one"), new_item(["b@x.org"])], now=T0)
            single = await store.aadd(new_item(["c@x.org"]), now=at(1))
            assert await store.acount() == 3
            assert await store.aget(single.id) == single
            assert await store.aread_message(added[0].id) == b"one"
            claimed = await store.aclaim(owner="w", now=at(2), lease_expires=at(60), limit=5)
            assert [i.id for i in claimed] == [added[0].id, added[1].id, single.id]
            assert await store.arenew([claimed[0].id], owner="w", lease_expires=at(90)) == [claimed[0].id]
            assert set(await store.aread_messages([i.id for i in claimed])) == {i.id for i in claimed}
            first, second, third = claimed
            answers = await store.acomplete_many(
                [
                    CompleteRequest(
                        first.id,
                        "w",
                        first.revision,
                        Completion((outcome("a@x.org", RecipientState.DELIVERED),), next_attempt=at(5)),
                    ),
                    CompleteRequest(
                        second.id,
                        "w",
                        second.revision,
                        Completion((outcome("b@x.org", RecipientState.PENDING, LATER),), next_attempt=at(500)),
                    ),
                ]
            )
            assert isinstance(answers[0], QueueItem) and answers[0].done
            assert isinstance(answers[1], QueueItem) and answers[1].next_attempt == at(500)
            recorded = await store.acomplete(
                third.id,
                owner="w",
                revision=third.revision,
                completion=Completion((outcome("c@x.org", RecipientState.PENDING, LATER),), next_attempt=at(600)),
            )
            assert recorded is not None and recorded.attempts == 1
            assert await store.areschedule(third.id, at=at(3)) is True
            assert [i.id for i in await store.alist(ItemQuery(queue="default"))] == [third.id, second.id]
            cancelled = await store.acancel(second.id)
            assert cancelled is not None and await store.aget(second.id) is None
        finally:
            await store.aclose()

    @pytest.mark.asyncio
    async def test_an_idle_waiter_hears_an_add(self, store: QueueStore) -> None:
        if not store.supports_wakeup:
            pytest.skip(f"{type(store).__name__} does not wake idle workers; they poll")
        try:
            await store.await_added(0.05)  # set up whatever the store listens with
            waiter = asyncio.ensure_future(store.await_added(10))
            await asyncio.sleep(0.2)
            await store.aadd(new_item(), now=T0)
            assert await asyncio.wait_for(waiter, 10) is True
        finally:
            await store.aclose()

    def test_a_lost_message_reads_as_none(self, store: QueueStore) -> None:
        added = store.add(new_item(), now=T0)
        self.lose_message(store, added.id)
        assert store.get(added.id) is not None
        assert store.read_message(added.id) is None

    # --- list and count --------------------------------------------------------------

    def test_list_pages_in_a_stable_order(self, store: QueueStore) -> None:
        later = store.add(new_item(not_before=at(100)), now=T0).id
        ids = [store.add(new_item(), now=T0).id for _ in range(7)]
        pages = [store.list(offset=o, limit=3) for o in (0, 3, 6)]
        if not store.in_add_order:  # equally due and old: in an order of the store's own, the same every call
            ids = [i.id for i in store.list(limit=7)]
        assert [i.id for page in pages for i in page] == [*ids, later]
        assert store.list(offset=0, limit=3) == pages[0]

    def test_list_and_count_filter(self, store: QueueStore) -> None:
        due = store.add(new_item(["ann@alpha.example"]), now=T0)
        scheduled = store.add(new_item(["bob@beta.example"], not_before=at(1000)), now=T0)
        deferred = store.add(new_item(["cat@Alpha.example", "dan@gamma.example"], queue="bulk"), now=T0)
        leased = store.add(new_item(["eve@delta.example"], sender="boss@corp.example"), now=T0)
        taken = store.claim(owner="w", now=T0, lease_expires=at(60), limit=3)
        by_id = {i.id: i for i in taken}
        assert set(by_id) == {due.id, deferred.id, leased.id}
        store.complete(
            deferred.id,
            owner="w",
            revision=by_id[deferred.id].revision,
            completion=Completion((outcome("cat@Alpha.example", RecipientState.PENDING, LATER),), next_attempt=at(5)),
        )
        store.reschedule(due.id, at=T0, owner="w")
        now = at(1)

        def ids(query: ItemQuery) -> set[uuid.UUID]:
            listed = {i.id for i in store.list(query, limit=100)}
            assert store.count(query) == len(listed)
            return listed

        assert ids(ItemQuery(state=ItemState.DUE, now=now)) == {due.id}
        assert ids(ItemQuery(state=ItemState.SCHEDULED, now=now)) == {scheduled.id}
        assert ids(ItemQuery(state=ItemState.DEFERRED, now=now)) == {deferred.id}
        assert ids(ItemQuery(state=ItemState.LEASED, now=now)) == {leased.id}
        assert ids(ItemQuery(queue="bulk")) == {deferred.id}
        assert ids(ItemQuery(domain="alpha.example")) == {due.id, deferred.id}
        assert ids(ItemQuery(search="BOB")) == {scheduled.id}
        assert ids(ItemQuery(search="@Delta.example")) == {leased.id}
        assert ids(ItemQuery(domain="alpha.example", queue="default")) == {due.id}
        assert store.count() == 4

    def test_search_reads_subjects_and_ids_by_prefix(self, store: QueueStore) -> None:
        invoice = store.add(new_item(["ann@alpha.example"], subject="Invoice 2030-17 for March"), now=T0)
        other = store.add(new_item(["bob@beta.example"], subject="Welcome"), now=T0)
        dsn = store.add(new_item(["ann@alpha.example"], sender="", subject="Undelivered Mail"), now=T0)
        assert {i.id for i in store.list(ItemQuery(search="invoice 2030"))} == {invoice.id}
        assert {i.id for i in store.list(ItemQuery(search="ANN@ALPHA"))} == {invoice.id, dsn.id}
        for item in (invoice, other, dsn):
            for digits in (1, 8, 31, 32):
                prefix = item.id.hex[:digits]
                found = {i.id for i in store.list(ItemQuery(id_prefix=prefix), limit=100)}
                assert found == {i.id for i in (invoice, other, dsn) if i.id.hex.startswith(prefix)}
                assert store.count(ItemQuery(id_prefix=prefix)) == len(found)

    def test_search_is_an_address_start_a_domain_or_a_subject_word(self, store: QueueStore) -> None:
        """What can be read from an index (`core.search`): the start of a recipient's address (a whole address
        is one), a recipient's `@domain`, a whole word of the subject — in any case, every term of the search;
        never the sender, a part inside an address or a word, a domain's part. LIKE's `%`, `_` and `\\` are
        themselves."""
        items = [
            store.add(new_item(["A_b@Under.example"], subject="100% off"), now=T0),
            store.add(new_item(["axb@plain.example"], subject="snake_case and 100 off"), now=T0),
            store.add(new_item(["back\\slash@odd.example"], sender="boss@corp.example"), now=T0),
            store.add(new_item(["ann@alpha.example", "bob@beta.example"], subject="Weekly report: March"), now=T0),
            store.add(new_item(["ann@alpha.example.net"], subject="Reporting weekly"), now=T0),
        ]
        expected = {
            "a_b": {0},  # an address start, `_` itself
            "A_B@UNDER.EXAMPLE": {0},  # a whole address, any case
            "a%": set(),
            "a": {0, 1, 3, 4},
            "ann": {3, 4},
            "ann@": {3, 4},
            "ann@alpha.example": {3, 4},  # a start: ann@alpha.example.net starts so too
            "back\\": {2},
            "@alpha.example": {3},  # a domain is whole
            "@ALPHA.EXAMPLE.NET": {4},
            "@example": set(),
            "@": set(),
            "@corp.example": set(),  # never the sender
            "boss": set(),
            "under.example": set(),  # never a part inside an address
            "100": {0, 1},  # a word of the subject (and no address starts with it)
            "100%": set(),
            "off": {0, 1},
            "snake_case": {1},
            "snake": set(),  # a word is whole: `_` is part of it
            "case": set(),
            "weekly": {3, 4},
            "WEEKLY REPORT": {3},  # every term: "report" is no word of "Reporting weekly"
            "report": {3},
            "repo": set(),
            "weekly @alpha.example.net": {4},
            "march ann": {3},
            "zzz": set(),
        }
        for search, indexes in expected.items():
            want = {items[n].id for n in indexes}
            assert {i.id for i in items if matches(i, ItemQuery(search=search))} == want, search
            assert {i.id for i in store.list(ItemQuery(search=search), limit=100)} == want, search
            assert store.count(ItemQuery(search=search)) == len(want), search

    def test_present_names_the_items_in_the_store(self, store: QueueStore) -> None:
        kept, gone = store.add(new_item(), now=T0), store.add(new_item(), now=T0)
        store.cancel(gone.id)
        assert store.present([kept.id, gone.id, uuid.uuid4(), kept.id]) == {kept.id}
        assert store.present([]) == set()

    def test_the_overview_is_the_summary_counted_to_a_bound(self, store: QueueStore) -> None:
        for n in range(3):
            store.add(new_item([f"r{n}@alpha.example"], queue="bulk"), now=T0)
        store.add(new_item(["s@beta.example"], not_before=at(1000)), now=T0)
        deferred = store.add(new_item(["p@gamma.example", "q@Gamma.example", "d@delta.example"]), now=at(1))
        leased = store.add(new_item(["l@alpha.example"], queue="bulk"), now=at(2))
        taken = {i.id: i for i in store.claim(owner="w", now=at(10), lease_expires=at(60), limit=10)}
        store.complete(
            deferred.id,
            owner="w",
            revision=taken[deferred.id].revision,
            completion=Completion(
                (
                    outcome("p@gamma.example", RecipientState.PENDING, LATER),
                    outcome("q@Gamma.example", RecipientState.PENDING, LATER),
                    outcome("d@delta.example", RecipientState.DELIVERED),
                ),
                next_attempt=at(5),
            ),
        )
        for item_id in taken:
            if item_id not in (deferred.id, leased.id):
                store.reschedule(item_id, at=T0, owner="w")
        now = at(20)
        exact = store.summary(now=now)
        assert exact.by_state["leased"] == 1 and exact.by_state["deferred"] == 1 and exact.total == 6
        assert store.queues() == ["bulk", "default"] and store.queues(limit=1) == ["bulk"]
        roomy = store.overview(now=now, bound=100)
        assert (roomy.total, roomy.by_state, roomy.by_queue) == (exact.total, exact.by_state, exact.by_queue)
        assert roomy.deferred_by_domain == exact.deferred_by_domain == {"gamma.example": 2}
        assert roomy.oldest_due == exact.oldest_due and roomy.bound == 100 and roomy.domain_sample is None
        tight = store.overview(now=now, bound=1)
        assert tight.total == 2 and tight.by_state["due"] == 2 and tight.by_state["leased"] == 1
        assert tight.by_queue["bulk"]["due"] == 2 and tight.by_queue["bulk"]["leased"] == 1

    def test_count_by_state_is_a_count_of_each_state(self, store: QueueStore) -> None:
        """The admin's totals beside its state filter, after every kind of change: added, claimed, deferred,
        delivered, cancelled, rescheduled, failed and kept, a lease run out."""
        due = store.add(new_item(["a@alpha.example"]), now=T0)
        store.add(new_item(["b@beta.example"], not_before=at(1000)), now=T0)
        bulk = [store.add(new_item([f"c{n}@gamma.example"], queue="bulk"), now=at(1)) for n in range(4)]
        gone = store.add(new_item(["d@delta.example"], queue="bulk"), now=at(1))

        def check(now: datetime, expected: dict[str | None, dict[ItemState, int]]) -> None:
            for queue, counts in expected.items():
                query = ItemQuery(queue=queue, now=now)
                assert store.count_by_state(query, limit=100) == counts, queue
                assert counts == {s: store.count(ItemQuery(state=s, queue=queue, now=now)) for s in ItemState}
                assert store.count_by_state(query, limit=2) == {s: min(n, 2) for s, n in counts.items()}

        def states(due: int, scheduled: int, deferred: int, leased: int, failed: int) -> dict[ItemState, int]:
            return dict(zip(ItemState, (due, scheduled, deferred, leased, failed), strict=True))

        assert list(ItemState) == [ItemState.DUE, ItemState.SCHEDULED, ItemState.DEFERRED, ItemState.LEASED,
                                   ItemState.FAILED]  # fmt: skip
        check(at(2), {None: states(6, 1, 0, 0, 0), "bulk": states(5, 0, 0, 0, 0), "none": states(0, 0, 0, 0, 0)})
        taken = {i.id: i for i in store.claim(owner="w", now=at(2), lease_expires=at(60), limit=6)}
        assert set(taken) == {due.id, *(i.id for i in bulk), gone.id}
        check(at(3), {None: states(0, 1, 0, 6, 0), "bulk": states(0, 0, 0, 5, 0)})
        first, second, third, fourth = (taken[i.id] for i in bulk)
        store.complete(first.id, owner="w", revision=first.revision, completion=Completion(
            (outcome("c0@gamma.example", RecipientState.PENDING, LATER),), next_attempt=at(10)))  # fmt: skip
        store.complete(second.id, owner="w", revision=second.revision, completion=Completion(
            (outcome("c1@gamma.example", RecipientState.DELIVERED),), next_attempt=at(900)))  # fmt: skip
        store.cancel(gone.id)
        store.reschedule(third.id, at=at(500), owner="w")
        check(at(4), {None: states(0, 2, 1, 2, 0), "bulk": states(0, 1, 1, 1, 0)})
        check(at(20), {None: states(0, 2, 1, 2, 0), "bulk": states(0, 1, 1, 1, 0)})  # deferred, due again
        check(at(61), {None: states(2, 2, 1, 0, 0), "bulk": states(1, 1, 1, 0, 0)})  # the leases ran out
        retaken = {i.id: i for i in store.claim(owner="v", now=at(61), lease_expires=at(120), limit=10)}
        assert set(retaken) == {due.id, fourth.id, first.id}
        failed = Completion(
            (outcome("c3@gamma.example", RecipientState.FAILED),), next_attempt=at(900), now=at(61), keep_failed=True
        )
        store.complete(fourth.id, owner="v", revision=retaken[fourth.id].revision, completion=failed)
        check(at(62), {None: states(0, 2, 0, 2, 1), "bulk": states(0, 1, 0, 1, 1)})

    def test_list_gives_each_order_it_names(self, store: QueueStore) -> None:
        first = store.add(new_item(not_before=at(30)), now=T0).id
        second = store.add(new_item(not_before=at(10)), now=at(1)).id
        third = store.add(new_item(not_before=at(10)), now=at(2)).id
        fourth = store.add(new_item(not_before=at(20)), now=at(3)).id
        expected = {
            ItemOrder.NEXT_ATTEMPT: [second, third, fourth, first],
            ItemOrder.NEXT_ATTEMPT_DESC: [first, fourth, third, second],
            ItemOrder.OLDEST: [first, second, third, fourth],
            ItemOrder.NEWEST: [fourth, third, second, first],
        }
        assert ItemOrder.NEXT_ATTEMPT in store.orders
        for order in ItemOrder:
            if order not in store.orders:
                with pytest.raises(QueueError) as refused:
                    store.list(order=order)
                assert refused.value.code is Code.INVALID
                continue
            assert [i.id for i in store.list(order=order)] == expected[order]
            pages = [store.list(offset=o, limit=2, order=order) for o in (0, 2)]
            assert [i.id for page in pages for i in page] == expected[order]
            query = ItemQuery(search="@example.org")
            assert [i.id for i in store.list(query, offset=1, limit=2, order=order)] == expected[order][1:3]

    def test_count_stops_at_its_limit(self, store: QueueStore) -> None:
        for n in range(5):
            store.add(new_item([f"r{n}@{'odd' if n % 2 else 'even'}.example"]), now=T0)
        assert store.count(limit=3) == 3 and store.count(limit=10) == 5 and store.count() == 5
        assert store.count(ItemQuery(domain="even.example"), limit=2) == 2
        assert store.count(ItemQuery(domain="even.example"), limit=4) == 3
        assert store.count(ItemQuery(domain="none.example"), limit=4) == 0

    def test_iter_items_walks_the_list_order_a_batch_at_a_time(self, store: QueueStore) -> None:
        later = [store.add(new_item(["x@far.example"], not_before=at(100 + i)), now=T0).id for i in range(3)]
        tied = [store.add(new_item([f"r{i}@{'odd' if i % 2 else 'even'}.example"]), now=T0).id for i in range(7)]
        odd_ones = set(tied[1::2])
        if not store.in_add_order:  # equally due and old: in an order of the store's own, the same every call
            tied = [i.id for i in store.list(limit=7)]
        odd_tied = [item_id for item_id in tied if item_id in odd_ones]
        everything = [*tied, *later]
        assert [i.id for i in store.list(limit=100)] == everything
        for batch in (1, 2, 3, 10, 500):  # a batch boundary inside the items that share a next attempt, and none
            assert [i.id for i in store.iter_items(batch=batch)] == everything
            odd = [i.id for i in store.iter_items(ItemQuery(domain="odd.example"), batch=batch)]
            assert odd == odd_tied
        odd_query = ItemQuery(domain="odd.example")
        assert [i.id for i in store.list(odd_query, offset=1, limit=2)] == odd_tied[1:3]
        assert list(store.iter_items(ItemQuery(queue="none-such"), batch=2)) == []

    # --- the store keeps no clock ----------------------------------------------------------

    def test_times_are_the_callers(self, store: QueueStore) -> None:
        long_ago = datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
        added = store.add(new_item(), now=long_ago)
        assert added.created == long_ago
        item = self.claim_one(store, now=long_ago, lease=0.000001)
        assert item.lease_expires == long_ago + timedelta(microseconds=1)
        assert store.claim(owner="w", now=long_ago, lease_expires=T0) == []

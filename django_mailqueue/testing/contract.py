"""The store contract suite: every promise of `QueueStore`, as pytest tests any store can run.

Subclass `QueueStoreContract` in a test module and give it a `make_store`
fixture returning a callable that builds a fresh, empty store::

    class TestMyStore(QueueStoreContract):
        @pytest.fixture
        def make_store(self):
            def make(max_items=None):
                return MyStore({...}, max_items=max_items)
            return make

A store that can lose a message (to test the 5.3.0 flow) overrides
`lose_message`. Thread tests call `end_thread()` in each thread they start;
the default closes Django's database connections.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ..core.errors import Code, QueueError
from ..core.items import (
    CompleteRequest,
    Completion,
    ItemQuery,
    ItemState,
    NewItem,
    QueueItem,
    RecipientOutcome,
    RecipientState,
    Reply,
)
from ..stores.base import QueueStore

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


class QueueStoreContract:
    """The promises of `QueueStore`, checked against the store `make_store` builds."""

    #: items the thread tests use; a subclass may lower it for a slow store
    race_items = 200

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        raise NotImplementedError("give the contract a make_store fixture")

    @pytest.fixture
    def store(self, make_store: StoreFactory) -> QueueStore:
        return make_store()

    def lose_message(self, store: QueueStore, item_id: uuid.UUID) -> None:
        lose = getattr(store, "lose_message", None)
        if lose is None:
            pytest.skip(f"{type(store).__name__} cannot be made to lose a message")
        lose(item_id)

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

    # --- add, get, read_message ------------------------------------------------------

    def test_add_returns_the_item_as_stored(self, store: QueueStore) -> None:
        added = store.add(new_item(["a@example.org", "b@example.net"], message_id="<m1@x>", subject="Hi"), now=T0)
        assert added.sender == "sender@example.com"
        assert [r.address for r in added.recipients] == ["a@example.org", "b@example.net"]
        assert all(r.state is RecipientState.PENDING and r.reply is None for r in added.recipients)
        assert added.created == T0 and added.next_attempt == T0
        assert added.attempts == 0 and added.owner is None and added.lease_expires is None
        assert added.size == len(b"Subject: hi\r\n\r\nhello\r\n")
        assert added.message_id == "<m1@x>" and added.subject == "Hi"
        assert store.get(added.id) == added
        assert store.count() == 1

    def test_the_null_sender_is_kept(self, store: QueueStore) -> None:
        added = store.add(new_item(sender=""), now=T0)
        got = store.get(added.id)
        assert got is not None and got.sender == ""

    def test_utf8_addresses_and_bare_local_parts_are_kept(self, store: QueueStore) -> None:
        """A UTF-8 local part (SMTPUTF8), and an address without a domain, which a relay route delivers."""
        added = store.add(new_item(sender="tester", recipients=("jösé@example.test", "django")), now=T0)
        got = store.get(added.id)
        assert got is not None and got.sender == "tester"
        assert [r.address for r in got.recipients] == ["jösé@example.test", "django"]
        assert [r.domain for r in got.recipients] == ["example.test", ""]

    def test_message_bytes_come_back_identical(self, store: QueueStore) -> None:
        raw = bytes(range(256)) * 40 + b"\x00\r\n.\r\n\xff\xfe not utf-8 \x80"
        added = store.add(new_item(message=raw), now=T0)
        assert store.read_message(added.id) == raw

    def test_a_given_buffer_changed_later_changes_nothing(self, store: QueueStore) -> None:
        buffer = bytearray(b"Subject: x\r\n\r\nbody\r\n")
        added = store.add(new_item(message=bytes(buffer)), now=T0)
        buffer[0:7] = b"XXXXXXX"
        assert store.read_message(added.id) == b"Subject: x\r\n\r\nbody\r\n"

    def test_add_many_stores_a_batch(self, store: QueueStore) -> None:
        batch = [new_item([f"r{i}@example.org"], message=f"m{i}".encode()) for i in range(25)]
        added = store.add_many(batch, now=T0)
        assert [a.id for a in added] == [b.id for b in batch]
        assert store.count() == 25
        for a in added:
            assert store.read_message(a.id) == f"m{a.recipients[0].address[1:-12]}".encode()

    def test_not_before_sets_the_first_attempt(self, store: QueueStore) -> None:
        later = store.add(new_item(not_before=at(3600)), now=T0)
        past = store.add(new_item(not_before=at(-3600)), now=T0)
        assert later.next_attempt == at(3600)
        assert past.next_attempt == T0
        assert [i.id for i in store.claim(owner="w", now=T0, lease_expires=at(60), limit=10)] == [past.id]

    def test_unknown_ids_are_answered_not_raised(self, store: QueueStore) -> None:
        ghost = uuid.uuid4()
        assert store.get(ghost) is None
        assert store.read_message(ghost) is None
        assert store.renew([ghost], owner="w", lease_expires=at(60)) == []
        assert store.reschedule(ghost, at=T0) is False
        assert store.cancel(ghost) is None
        done = Completion((), next_attempt=T0)
        assert store.complete(ghost, owner="w", revision=1, completion=done) is None

    # --- bounds -------------------------------------------------------------------

    def test_max_items_refuses_a_batch_whole(self, make_store: StoreFactory) -> None:
        store = make_store(max_items=5)
        store.add_many([new_item() for _ in range(4)], now=T0)
        with pytest.raises(QueueError) as refused:
            store.add_many([new_item(), new_item()], now=T0)
        assert refused.value.code == Code.FULL
        assert store.count() == 4
        store.add(new_item(), now=T0)
        with pytest.raises(QueueError) as full:
            store.add(new_item(), now=T0)
        assert full.value.code == Code.FULL
        assert store.count() == 5

    def test_concurrent_adders_never_pass_max_items(self, make_store: StoreFactory) -> None:
        store = make_store(max_items=40)

        def add(index: int) -> int:
            added = 0
            for _ in range(10):
                try:
                    store.add(new_item(), now=T0)
                    added += 1
                except QueueError as exc:
                    assert exc.code == Code.FULL
            return added

        counts = self.in_threads(8, add)
        assert sum(counts) == 40
        assert store.count() == 40

    # --- what no store keeps --------------------------------------------------------

    @pytest.mark.parametrize(
        "bad",
        [
            {"sender": "a\x00b@example.com"},
            {"sender": "a\ud800@example.com"},
            {"sender": "a@example.com\r\nRCPT TO:<x@evil>"},
            {"recipients": ("x@example.org\n",)},
            {"recipients": ("x\x00@example.org",)},
            {"recipients": ("x\udfff@example.org",)},
            {"recipients": ("not an address",)},
            {"recipients": ("<x@example.org>",)},
            {"recipients": ()},
            {"queue": "bulk\x00"},
            {"queue": ""},
            {"subject": "a\ud800"},
        ],
    )
    def test_unkeepable_text_is_refused_and_nothing_stored(self, store: QueueStore, bad: dict[str, Any]) -> None:
        fields: dict[str, Any] = {
            "sender": "s@example.com",
            "recipients": ("r@example.org",),
            "message": b"x",
            "queue": "default",
        }
        fields.update(bad)
        good = new_item()
        with pytest.raises(QueueError) as refused:
            store.add_many([good, NewItem(**fields)], now=T0)
        assert refused.value.code == Code.INVALID
        assert store.count() == 0

    def test_outcomes_with_unkeepable_text_are_refused(self, store: QueueStore) -> None:
        store.add(new_item(), now=T0)
        item = self.claim_one(store)
        bad = Completion(
            (outcome("rcpt@example.org", RecipientState.FAILED, Reply(550, "5.0.0", "a\x00b")),), next_attempt=T0
        )
        with pytest.raises(QueueError) as refused:
            store.complete(item.id, owner="w1", revision=item.revision, completion=bad)
        assert refused.value.code == Code.INVALID
        assert store.get(item.id) == item

    def test_an_empty_owner_is_invalid(self, store: QueueStore) -> None:
        with pytest.raises(QueueError) as refused:
            store.reschedule(uuid.uuid4(), at=T0, owner="")
        assert refused.value.code == Code.INVALID
        with pytest.raises(QueueError):
            store.claim(owner="", now=T0, lease_expires=at(60))

    # --- claim ----------------------------------------------------------------------

    def test_claim_takes_the_earliest_due_then_the_oldest(self, store: QueueStore) -> None:
        first = store.add(new_item(not_before=at(10)), now=T0)
        second = store.add(new_item(not_before=at(10)), now=T0)
        earliest = store.add(new_item(not_before=at(5)), now=at(1))
        future = store.add(new_item(not_before=at(1000)), now=T0)
        claimed = store.claim(owner="w", now=at(20), lease_expires=at(80), limit=10)
        assert [i.id for i in claimed] == [earliest.id, first.id, second.id]
        assert future.id not in {i.id for i in claimed}

    def test_equally_due_items_come_oldest_first(self, store: QueueStore) -> None:
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
        assert ids(ItemQuery(search="corp.example")) == {leased.id}
        assert ids(ItemQuery(domain="alpha.example", queue="default")) == {due.id}
        assert store.count() == 4

    def test_iter_items_walks_the_list_order_a_batch_at_a_time(self, store: QueueStore) -> None:
        later = [store.add(new_item(["x@far.example"], not_before=at(100 + i)), now=T0).id for i in range(3)]
        tied = [store.add(new_item([f"r{i}@{'odd' if i % 2 else 'even'}.example"]), now=T0).id for i in range(7)]
        everything = [*tied, *later]
        assert [i.id for i in store.list(limit=100)] == everything
        for batch in (1, 2, 3, 10, 500):  # a batch boundary inside the items that share a next attempt, and none
            assert [i.id for i in store.iter_items(batch=batch)] == everything
            odd = [i.id for i in store.iter_items(ItemQuery(domain="odd.example"), batch=batch)]
            assert odd == tied[1::2]
        odd_query = ItemQuery(domain="odd.example")
        assert [i.id for i in store.list(odd_query, offset=1, limit=2)] == tied[3:6:2]
        assert list(store.iter_items(ItemQuery(queue="none-such"), batch=2)) == []

    # --- the store keeps no clock ----------------------------------------------------------

    def test_times_are_the_callers(self, store: QueueStore) -> None:
        long_ago = datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
        added = store.add(new_item(), now=long_ago)
        assert added.created == long_ago
        item = self.claim_one(store, now=long_ago, lease=0.000001)
        assert item.lease_expires == long_ago + timedelta(microseconds=1)
        assert store.claim(owner="w", now=long_ago, lease_expires=T0) == []

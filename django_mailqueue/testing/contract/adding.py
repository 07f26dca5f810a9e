"""The contract on adding: what is stored, the `max_items` bound, and what no store keeps."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ...core.errors import Code, QueueError
from ...core.items import (
    Completion,
    NewItem,
    RecipientState,
    Reply,
)
from ...stores.base import QueueStore
from .support import T0, ContractBase, StoreFactory, at, new_item, outcome


class Adding(ContractBase):
    """`add`, `add_many`, `get`, `read_message`: stored in one step, bounded, refused whole."""

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

    def test_put_many_stores_a_batch_as_add_many_does(self, store: QueueStore) -> None:
        """`put_many` (the email backend's call) stores what `add_many` stores, and says how many."""
        batch = [
            new_item([f"r{i}@example.org", f"s{i}@example.net"], message=f"m{i}".encode(), message_id=f"<{i}@x>")
            for i in range(3)
        ]
        batch.append(new_item(["late@example.org"], not_before=at(3600), queue="bulk", subject="Later"))
        assert store.put_many(batch, now=T0) == 4
        assert store.put_many([], now=T0) == 0
        for new in batch:
            got = store.get(new.id)
            assert got is not None
            assert got.sender == new.sender and [r.address for r in got.recipients] == list(new.recipients)
            assert all(r.state is RecipientState.PENDING for r in got.recipients)
            assert got.created == T0 and got.next_attempt == (new.not_before or T0)
            assert (got.size, got.queue, got.message_id, got.subject) == (
                len(new.message),
                new.queue,
                new.message_id,
                new.subject,
            )
            assert store.read_message(new.id) == new.message
        claimed = store.claim(owner="w", now=T0, lease_expires=at(60), limit=10)
        assert sorted(i.id for i in claimed) == sorted(new.id for new in batch[:3])

    def test_put_many_is_bounded_and_refused_whole(self, make_store: StoreFactory) -> None:
        store = make_store(max_items=2)
        with pytest.raises(QueueError) as full:
            store.put_many([new_item() for _ in range(3)], now=T0)
        assert full.value.code == Code.FULL
        with pytest.raises(QueueError) as invalid:
            store.put_many([new_item(), new_item(["not an address"])], now=T0)
        assert invalid.value.code == Code.INVALID
        assert store.count() == 0
        assert store.put_many([new_item(), new_item()], now=T0) == 2

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
        if not store.exact_max_items:
            pytest.skip(f"{type(store).__name__} checks max_items against counts read before the add")

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

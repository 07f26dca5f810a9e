"""RedisStore beyond the contract: keys, races, bytes, scripts, damage, paging, on_commit, event loops (its options,
connections and wake-ups: test_redis_connection.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import transaction

from django_mailqueue.core.items import Completion, ItemOrder, ItemQuery, QueueItem, RecipientState
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores import redis as redis_store
from django_mailqueue.stores import redis_reading
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.stores.redis import LAYOUT_VERSION, RedisStore
from django_mailqueue.testing.contract import LATER, NO, OK, T0, at, new_item, outcome

pytestmark = pytest.mark.redis

Maker = Callable[..., RedisStore]


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client on the test database, to look at and damage the store's keys."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def store(make: Maker) -> RedisStore:
    return make()


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    barrier = threading.Barrier(count)

    def run(index: int) -> Any:
        barrier.wait()
        return work(index)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


# --- the keys -----------------------------------------------------------------------------------------


def test_the_documented_keys_and_types(store: RedisStore, admin: redis.Redis, redis_prefix: str) -> None:
    first = store.add(new_item(queue="bulk"), now=T0)
    second = store.add(new_item(queue="bulk"), now=T0)
    p = redis_prefix
    assert admin.get(f"{p}schema") == LAYOUT_VERSION.encode()
    assert admin.type(f"{p}item:{first.id}") == b"hash"
    assert admin.type(f"{p}message:{first.id}") == b"string"
    assert admin.type(f"{p}seq") == b"string"
    assert admin.smembers(f"{p}queues") == {b"bulk"}
    members = admin.zrange(f"{p}ready:bulk", 0, -1, withscores=True)
    assert [m.split(b":")[1].decode() for m, _ in members] == [str(first.id), str(second.id)]
    assert all(len(m.split(b":")[0]) == 16 for m, _ in members)
    assert members[0][1] == T0.timestamp() * 1_000_000
    assert admin.zrange(f"{p}items", 0, -1) == [m for m, _ in members]
    assert not admin.exists(f"{p}leases")
    claimed = store.claim(owner="w", now=T0, lease_expires=at(60))
    assert [i.id for i in claimed] == [first.id]
    assert admin.zscore(f"{p}leases", members[0][0]) == at(60).timestamp() * 1_000_000
    assert admin.zrange(f"{p}ready:bulk", 0, -1) == [members[1][0]]
    assert admin.hget(f"{p}item:{first.id}", "owner") == b"w"
    # nothing outside the prefix
    keys = {k.decode() for k in admin.scan_iter(match=f"{p}*")}
    assert all(k.startswith(p) for k in keys)


def test_another_applications_prefix_is_refused(make: Maker, admin: redis.Redis, redis_prefix: str) -> None:
    admin.set(f"{redis_prefix}schema", "celery-results:3")
    store = make()
    for call in (lambda: store.add(new_item(), now=T0), store.count, lambda: store.get(uuid.uuid4())):
        with pytest.raises(QueueError) as refused:
            call()
        assert refused.value.code == "INVALID_OPTION"
        assert "another application's" in str(refused.value) and "celery-results:3" in str(refused.value)
    admin.delete(f"{redis_prefix}schema")
    admin.hset(f"{redis_prefix}schema", "x", "1")
    with pytest.raises(QueueError) as wrong_type:
        make().count()
    assert wrong_type.value.code == "INVALID_OPTION" and "type hash" in str(wrong_type.value)
    assert admin.type(f"{redis_prefix}item") == b"none"


def test_the_add_script_checks_the_schema_too(store: RedisStore, admin: redis.Redis, redis_prefix: str) -> None:
    store.add(new_item(), now=T0)  # the prefix is checked and taken
    admin.set(f"{redis_prefix}schema", "someone-else")
    with pytest.raises(QueueError) as refused:
        store.add(new_item(), now=T0)
    assert refused.value.code == "INVALID_OPTION"
    assert admin.zcard(f"{redis_prefix}items") == 1
    with pytest.raises(QueueError):
        store.count()  # the store checks the prefix again before its next call
    admin.delete(f"{redis_prefix}schema")  # flushed, say: the next call writes it again
    store.add(new_item(), now=T0)
    assert store.count() == 2
    assert admin.get(f"{redis_prefix}schema") == LAYOUT_VERSION.encode()


def test_a_duplicate_id_is_refused_whole(store: RedisStore) -> None:
    first = store.add(new_item(), now=T0)
    with pytest.raises(QueueError) as again:
        store.add_many([new_item(), new_item(id=first.id)], now=T0)
    assert again.value.code == "INVALID"
    twice = new_item()
    with pytest.raises(QueueError):
        store.add_many([twice, twice], now=T0)
    assert store.count() == 1


# --- races (as for the ORM store on PostgreSQL) -------------------------------------------------------


def test_eight_claimers_drain_2000_items_each_claimed_once(make: Maker) -> None:
    adder = make()
    for start in range(0, 2000, 500):
        adder.add_many([new_item([f"r{start + i}@example.org"]) for i in range(500)], now=T0)
    workers = [make() for _ in range(8)]  # a store each, as separate processes would have

    def drain(index: int) -> list[uuid.UUID]:
        taken: list[uuid.UUID] = []
        while claimed := workers[index].claim(owner=f"w{index}", now=at(1), lease_expires=at(600), limit=5):
            taken.extend(item.id for item in claimed)
        return taken

    results = in_threads(8, drain)
    every = [item_id for taken in results for item_id in taken]
    assert len(every) == 2000 and len(set(every)) == 2000
    assert sum(1 for taken in results if taken) >= 2, "the claimers did not run concurrently"


def test_eight_adders_never_pass_max_items(make: Maker) -> None:
    stores = [make(max_items=100) for _ in range(8)]

    def add(index: int) -> int:
        added = 0
        for _ in range(30):
            try:
                stores[index].add(new_item(), now=T0 + timedelta(microseconds=index))
                added += 1
            except QueueError as exc:
                assert exc.code == "FULL", exc
        return added

    counts = in_threads(8, add)
    assert sum(counts) == 100
    assert stores[0].count() == 100


# --- bytes ----------------------------------------------------------------------------------------------


MESSAGES = [
    b"",
    b"\x00",
    bytes(range(256)),
    b"Subject: \xff\xfe\r\n\r\n\x00\x00 body \x80\x81\r\n.\r\n",
    random.Random(5).randbytes(3 * 1024 * 1024),
    random.Random(6).randbytes(2 * 1024 * 1024 + 17),  # read in three slices, the last of 17 bytes
]


def test_arbitrary_bytes_read_back_identical(store: RedisStore) -> None:
    added = store.add_many([new_item(message=m) for m in MESSAGES], now=T0)
    for item, message in zip(added, MESSAGES, strict=True):
        assert item.size == len(message)
        assert store.read_message(item.id) == message


def _recording(store: RedisStore, monkeypatch: pytest.MonkeyPatch, after: Any = None) -> list[tuple[str, int]]:
    """The commands the store's sync client runs, with the length of each reply; `after(name)` runs after each."""
    client = store._sync_client()
    run = client.execute_command
    seen: list[tuple[str, int]] = []

    def recorded(*args: Any, **options: Any) -> Any:
        reply = run(*args, **options)
        seen.append((str(args[0]), len(reply) if isinstance(reply, bytes) else 0))
        if after is not None:
            after(str(args[0]))
        return reply

    monkeypatch.setattr(client, "execute_command", recorded)
    return seen


def test_a_large_message_is_read_in_slices(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from django_mailqueue.stores.base import READ_CHUNK

    message = random.Random(7).randbytes(5 * READ_CHUNK // 2)
    item = store.add(new_item(message=message), now=T0)
    seen = _recording(store, monkeypatch)
    assert store.read_message(item.id) == message
    assert [name for name, _ in seen] == ["STRLEN", "GETRANGE", "GETRANGE", "GETRANGE"]
    assert max(length for _, length in seen) == READ_CHUNK  # no reply holds the whole message


def test_a_message_dropped_between_slices_reads_as_gone(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from django_mailqueue.stores.base import READ_CHUNK

    item = store.add(new_item(message=b"x" * (3 * READ_CHUNK)), now=T0)
    key = store.keys.message(item.id)
    sync = store._sync_client()
    _recording(store, monkeypatch, after=lambda name: sync.delete(key) if name == "GETRANGE" else None)
    assert store.read_message(item.id) is None


async def test_arbitrary_bytes_read_back_identical_async(store: RedisStore) -> None:
    try:
        added = await store.aadd_many([new_item(message=m) for m in MESSAGES], now=T0)
        for item, message in zip(added, MESSAGES, strict=True):
            assert await store.aread_message(item.id) == message
            assert store.read_message(item.id) == message
    finally:
        await store.aclose()


def test_text_comes_back_as_given(store: RedisStore) -> None:
    added = store.add(
        new_item(["zoë@exämple.org", "日本@例え.jp"], sender="ünï@códe.example", queue="lane ✉", subject="Grüße 👋"),
        now=T0,
    )
    assert store.get(added.id) == added
    claimed = store.claim(owner="wörker", now=T0, lease_expires=at(60), queues=["lane ✉"])
    assert [i.id for i in claimed] == [added.id]


# --- scripts forgotten, Redis out of reach ------------------------------------------------------------------


def test_script_flush_between_calls(store: RedisStore, admin: redis.Redis) -> None:
    first = store.add(new_item(), now=T0)
    admin.script_flush()
    assert admin.script_exists(redis_store.scripts.CLAIM.sha) == [False]
    claimed = store.claim(owner="w", now=T0, lease_expires=at(60))
    assert [i.id for i in claimed] == [first.id]
    assert admin.script_exists(redis_store.scripts.CLAIM.sha) == [True]  # EVAL cached it again
    admin.script_flush()
    done = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
    recorded = store.complete(first.id, owner="w", revision=claimed[0].revision, completion=done)
    assert recorded is not None and recorded.done
    admin.script_flush()
    store.add(new_item(), now=T0)
    assert store.count() == 1


async def test_script_flush_between_calls_async(store: RedisStore, admin: redis.Redis) -> None:
    try:
        added = await store.aadd(new_item(), now=T0)
        admin.script_flush()
        claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60))
        assert [i.id for i in claimed] == [added.id]
        admin.script_flush()
        assert await store.arenew([added.id], owner="w", lease_expires=at(90)) == [added.id]
        admin.script_flush()
        assert await store.areschedule(added.id, at=at(5), owner="w") is True
        admin.script_flush()
        assert await store.acancel(added.id) is not None
    finally:
        await store.aclose()


async def test_script_flush_before_a_batch_of_completions(store: RedisStore, admin: redis.Redis) -> None:
    from django_mailqueue.core.items import CompleteRequest

    try:
        added = [await store.aadd(new_item(), now=T0) for _ in range(3)]
        claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=3)
        admin.script_flush()
        done = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
        answers = await store.acomplete_many(
            [CompleteRequest(item.id, "w", item.revision, done) for item in claimed]
            + [CompleteRequest(claimed[0].id, "w", claimed[0].revision, done)]
        )  # a stale repeat: gone by then
        assert [a.done for a in answers[:3]] == [True, True, True]  # type: ignore[union-attr]
        assert answers[3] is None
        assert {i.id for i in claimed} == {i.id for i in added} and await store.acount() == 0
    finally:
        await store.aclose()


# --- damage done by hand --------------------------------------------------------------------------------------


def test_an_item_hash_deleted_by_hand_is_dropped_by_the_next_claim(
    store: RedisStore,
    admin: redis.Redis,
    redis_prefix: str,
) -> None:
    gone, kept = store.add_many([new_item(), new_item()], now=T0)
    admin.delete(f"{redis_prefix}item:{gone.id}")
    claimed = store.claim(owner="w", now=T0, lease_expires=at(60), limit=5)
    assert [i.id for i in claimed] == [kept.id]
    assert not admin.exists(f"{redis_prefix}message:{gone.id}")
    every_member = admin.zrange(f"{redis_prefix}items", 0, -1) + admin.zrange(f"{redis_prefix}leases", 0, -1)
    assert all(str(gone.id).encode() not in m for m in every_member)
    assert store.count() == 1


def test_a_leased_item_deleted_by_hand_is_dropped_when_its_lease_expires(
    store: RedisStore,
    admin: redis.Redis,
    redis_prefix: str,
) -> None:
    item = store.add(new_item(), now=T0)
    store.claim(owner="a", now=T0, lease_expires=at(30))
    admin.delete(f"{redis_prefix}item:{item.id}")
    assert store.claim(owner="b", now=at(31), lease_expires=at(90)) == []
    assert admin.zcard(f"{redis_prefix}leases") == 0 and admin.zcard(f"{redis_prefix}items") == 0
    assert not admin.exists(f"{redis_prefix}message:{item.id}")


def test_a_message_deleted_by_hand_reads_as_none_and_the_item_stays_claimable(
    store: RedisStore,
    admin: redis.Redis,
    redis_prefix: str,
) -> None:
    item = store.add(new_item(), now=T0)
    admin.delete(f"{redis_prefix}message:{item.id}")
    assert store.read_message(item.id) is None
    claimed = store.claim(owner="w", now=T0, lease_expires=at(60))
    assert [i.id for i in claimed] == [item.id]
    failed = Completion((outcome("rcpt@example.org", RecipientState.FAILED, NO),), next_attempt=at(1))
    recorded = store.complete(item.id, owner="w", revision=claimed[0].revision, completion=failed)
    assert recorded is not None and recorded.done and store.count() == 0


# --- lanes, leases, paging -------------------------------------------------------------------------------------


def test_a_lane_claim_reads_only_its_lanes(store: RedisStore) -> None:
    store.add_many([new_item(queue="bulk") for _ in range(300)], now=T0)
    urgent = store.add(new_item(queue="urgent"), now=at(5))
    got = store.claim(owner="w", now=at(10), lease_expires=at(60), queues=["urgent", "urgent"], limit=3)
    assert [i.id for i in got] == [urgent.id]
    assert store.claim(owner="w", now=at(10), lease_expires=at(60), queues=[]) == []
    assert len(store.claim(owner="w", now=at(10), lease_expires=at(60), limit=1000)) == 300


def test_an_expired_lease_moved_later_waits_for_its_time(store: RedisStore) -> None:
    item = store.add(new_item(), now=T0)
    store.claim(owner="a", now=T0, lease_expires=at(30))
    assert store.reschedule(item.id, at=at(100)) is True  # the lease stays
    assert store.claim(owner="b", now=at(50), lease_expires=at(110)) == []
    again = store.claim(owner="b", now=at(100), lease_expires=at(160))
    assert [(i.id, i.reclaims) for i in again] == [(item.id, 1)]
    # renewing a lease past an earlier next attempt, and back
    assert store.renew([item.id], owner="b", lease_expires=at(400)) == [item.id]
    assert store.claim(owner="c", now=at(399), lease_expires=at(500)) == []


def test_filtered_list_and_count_read_every_page(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_reading, "SCAN_PAGE", 7)  # a search is tested on pages of 7
    added = [store.add(new_item([f"r{i}@{'odd' if i % 2 else 'even'}.example"]), now=at(i)) for i in range(40)]
    odd = [item.id for item in added if "odd" in item.recipients[0].address]
    for query in (
        ItemQuery(domain="ODD.example"),
        ItemQuery(domain="ODD.example", search="R"),
        ItemQuery(search="@odd.example"),
    ):
        assert store.count(query) == 20
        assert [i.id for i in store.list(query, limit=100)] == odd
        assert [i.id for i in store.list(query, offset=15, limit=3)] == odd[15:18]
        backwards = store.list(query, offset=2, limit=4, order=ItemOrder.NEXT_ATTEMPT_DESC)
        assert [i.id for i in backwards] == odd[::-1][2:6]
    assert [i.id for i in store.list(offset=38, limit=5)] == [added[38].id, added[39].id]
    assert store.list(limit=0) == []


# --- the same answers as the memory store -----------------------------------------------------------------------


def test_a_random_run_matches_the_memory_store(store: RedisStore) -> None:
    """Every answer of 600 random operations equals MemoryStore's (the reference semantics)."""
    memory = MemoryStore()
    rng = random.Random(20300101)
    now = T0
    ids: list[uuid.UUID] = []
    held: dict[uuid.UUID, tuple[str, int]] = {}
    lanes = ["default", "bulk", "urgent"]

    def both(call: Callable[[Any], Any]) -> Any:
        expected = _outcome(lambda: call(memory))
        got = _outcome(lambda: call(store))
        assert got == expected
        return got[1] if got[0] == "ok" else []

    for _ in range(600):
        now += timedelta(seconds=rng.choice([0, 0, 1, 7, 40]))
        action = rng.random()
        if action < 0.25:
            batch = [
                new_item(
                    [f"r{j}@x{rng.randint(0, 3)}.example" for j in range(rng.randint(1, 3))],
                    queue=rng.choice(lanes),
                    not_before=now + timedelta(seconds=rng.choice([-5, 0, 0, 30])),
                )
                for _ in range(rng.randint(1, 3))
            ]
            ids.extend(i.id for i in both(lambda s, b=batch, n=now: s.add_many(b, now=n)))
        elif action < 0.5:
            queues = rng.choice([None, None, ["urgent", "bulk"], ["default"], ["bulk", "default", "urgent"]])
            owner = rng.choice(["w1", "w2", "w3"])
            lease = timedelta(seconds=rng.choice([5, 30, 120]))
            limit = rng.choice([1, 1, 2, 5])
            claimed = both(
                lambda s, o=owner, n=now, le=lease, q=queues, li=limit: s.claim(
                    owner=o, now=n, lease_expires=n + le, queues=q, limit=li
                )
            )
            for item in claimed:
                held[item.id] = (item.owner, item.revision)
        elif action < 0.7 and held:
            item_id = rng.choice(list(held))
            owner, revision = held[item_id]
            if rng.random() < 0.2:
                owner = "w9"
            item = memory.get(item_id)
            recipients = [r.address for r in item.recipients] if item else ["rcpt@example.org"]
            states = [RecipientState.DELIVERED, RecipientState.FAILED, RecipientState.PENDING]
            outcomes = tuple(
                outcome(a, st, {RecipientState.DELIVERED: OK, RecipientState.FAILED: NO}.get(st, LATER))
                for a in recipients
                if rng.random() < 0.8
                for st in [rng.choice(states)]
            )
            done = Completion(
                outcomes,
                next_attempt=now + timedelta(seconds=rng.choice([0, 30, 300])),
                count_attempt=rng.random() < 0.8,
                delay_warned=rng.random() < 0.2,
            )
            both(lambda s, i=item_id, o=owner, r=revision, c=done: s.complete(i, owner=o, revision=r, completion=c))
        elif action < 0.8 and ids:
            item_id = rng.choice(ids)
            owner = rng.choice([None, "w1", "w2"])
            when = now + timedelta(seconds=rng.choice([-10, 0, 60]))
            both(lambda s, i=item_id, w=when, o=owner: s.reschedule(i, at=w, owner=o))
        elif action < 0.87 and ids:
            item_ids = rng.sample(ids, min(3, len(ids)))
            owner = rng.choice(["w1", "w2"])
            both(lambda s, i=item_ids, o=owner, n=now: s.renew(i, owner=o, lease_expires=n + timedelta(seconds=60)))
        elif action < 0.92 and ids:
            item_id = rng.choice(ids)
            both(lambda s, i=item_id: s.cancel(i))
        else:
            query = rng.choice([None, ItemQuery(state=rng.choice(list(_states())), now=now), ItemQuery(queue="bulk")])
            offset, limit = rng.randint(0, 3), rng.randint(1, 20)
            both(lambda s, q=query, o=offset, li=limit: s.list(q, offset=o, limit=li))
            both(lambda s, q=query: s.count(q))
        for item_id in rng.sample(ids, min(2, len(ids))):
            both(lambda s, i=item_id: s.get(i))
            both(lambda s, i=item_id: s.read_message(i))
    assert store.count() == memory.count()


def _states() -> Any:
    from django_mailqueue.core.items import ItemState

    return ItemState


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("ok", call())
    except QueueError as exc:
        return ("error", exc.code)


# --- enqueueing and transactions ----------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
class TestOnCommit:
    def test_a_rollback_adds_nothing(self, make: Maker) -> None:
        store, reader = make(on_commit=True), make()
        with pytest.raises(RuntimeError), transaction.atomic():
            returned = store.add(new_item(), now=T0)
            assert returned.created == T0
            assert reader.count() == 0
            raise RuntimeError("roll back")
        assert reader.count() == 0

    def test_a_commit_adds(self, make: Maker) -> None:
        store, reader = make(on_commit=True), make()
        with transaction.atomic():
            added = store.add_many([new_item(), new_item()], now=T0)
            assert reader.count() == 0
        assert reader.count() == 2
        assert [i.id for i in reader.list()] == [i.id for i in added]

    def test_outside_a_transaction_the_add_is_at_once(self, make: Maker) -> None:
        store = make(on_commit=True)
        store.add(new_item(), now=T0)
        assert store.count() == 1

    def test_bad_input_is_refused_at_the_call(self, make: Maker) -> None:
        store = make(on_commit=True)
        with transaction.atomic(), pytest.raises(QueueError) as refused:
            store.add(new_item(sender="a\x00@example.com"), now=T0)
        assert refused.value.code == "INVALID"

    def test_full_after_the_commit_is_logged_not_raised(self, make: Maker, caplog: pytest.LogCaptureFixture) -> None:
        store = make(max_items=1, on_commit=True)
        store.add(new_item(), now=T0)
        late = new_item()
        with caplog.at_level(logging.ERROR, logger="django_mailqueue"), transaction.atomic():
            store.add(late, now=T0)
        assert store.count() == 1 and store.get(late.id) is None
        assert any(str(late.id) in r.getMessage() and "FULL" in r.getMessage() for r in caplog.records)

    def test_without_on_commit_a_rollback_keeps_the_add(self, make: Maker) -> None:
        store = make()
        with pytest.raises(RuntimeError), transaction.atomic():
            store.add(new_item(), now=T0)
            assert store.count() == 1
            raise RuntimeError("roll back")
        assert store.count() == 1


# --- the async side across event loops ----------------------------------


def test_a_store_used_from_successive_event_loops(store: RedisStore) -> None:
    async def once() -> QueueItem:
        try:
            added = await store.aadd(new_item(), now=T0)
            assert await store.aget(added.id) == added
            return added
        finally:
            await store.aclose()

    first = asyncio.run(once())
    second = asyncio.run(once())
    assert store.count() == 2 and first.id != second.id

"""RedisStore on a Redis Cluster: the contract suite (sync and asyncio) on three primaries of the test's own, every key
of a queue in one hash slot, the wake-up heard through the cluster, and the cluster's options."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from django_mailqueue.core.items import CompleteRequest, Completion, RecipientState
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.stores.redis_layout import every_partition_tag, layout_prefix, partition_tag
from django_mailqueue.testing.contract import T0, StoreFactory, at, new_item, outcome
from tests.stores import test_redis as redis_tests
from tests.support.redis_cluster import ClusterSetup
from tests.support.redis_stores import AsyncTwinsContract, Maker, RedisContract, async_twins, redis_stores

pytestmark = pytest.mark.redis


@pytest.fixture
def cluster(redis_cluster: ClusterSetup) -> ClusterSetup:
    return redis_cluster


def _prefix(tag: str) -> str:
    return f"mqtest-cluster-{tag}-{uuid.uuid4().hex[:12]}:"


class TestRedisStoreOnCluster(RedisContract):
    """The whole contract through redis-py's cluster client, on three primaries."""

    @pytest.fixture
    def make_store(self, cluster: ClusterSetup) -> Iterator[StoreFactory]:
        with redis_stores(lambda: cluster.options(key_prefix=_prefix("s"))) as make:
            yield make


class TestRedisStoreOnClusterAsync(AsyncTwinsContract):
    """The whole contract through the asyncio twins, on redis-py's asyncio cluster client."""

    @pytest.fixture
    def make_store(self, cluster: ClusterSetup) -> Iterator[StoreFactory]:
        with async_twins(lambda: cluster.options(key_prefix=_prefix("a"))) as make:
            yield make


@pytest.mark.parametrize("key_prefix", ["mailqueue:", "shop:{eu}:", ""])
def test_every_partition_tag_is_the_tag_of_each_count(key_prefix: str) -> None:
    # The worker's start checks every count's tags at once (E030): the bulk search finds each count's own tag.
    tags = every_partition_tag(key_prefix, 64)
    assert tags == {(p, n): partition_tag(key_prefix, p, n) for n in range(2, 65) for p in range(1, n)}


def test_every_key_of_the_queue_is_in_one_slot_of_one_primary(cluster: ClusterSetup) -> None:
    prefix = _prefix("slot")
    store = RedisStore(cluster.options(key_prefix=prefix))
    try:
        items = store.add_many([new_item([f"r{i}@example.org", "x@example.net"]) for i in range(20)], now=T0)
        first = store.claim(owner="w", now=T0, lease_expires=at(60), limit=5)
        for item in first[:3]:
            done = Completion(tuple(outcome(r.address, RecipientState.DELIVERED) for r in item.recipients), T0)
            store.complete(item.id, owner="w", revision=item.revision, completion=done)
        store.take_tokens("relay:x", rate=1.0, burst=5, want=1, now=T0)
        with cluster.client() as client:
            keys = list(client.scan_iter(match=f"{prefix}*", count=1000, target_nodes=redis.RedisCluster.PRIMARIES))
            slots = {client.keyslot(key) for key in keys}
        assert len(keys) > 20 and len(slots) == 1, (len(keys), slots)
        held = cluster.keys_per_node(f"{prefix}*")
        assert sorted(held.values())[:2] == [0, 0] and sum(held.values()) == len(keys), held
        assert all(store.get(item.id) is not None for item in items[5:])
    finally:
        store.close()


def test_an_add_wakes_a_waiting_worker(cluster: ClusterSetup) -> None:
    store = RedisStore(cluster.options(key_prefix=_prefix("wake")))

    async def run() -> tuple[bool, bool]:
        quiet = await store.await_added(0.2)  # subscribes; nothing added yet
        waiting = asyncio.create_task(store.await_added(10))
        await asyncio.sleep(0.2)
        await store.aadd_many([new_item()], now=T0)
        woke = await asyncio.wait_for(waiting, 10)
        await store.aclose()
        return quiet, woke

    assert asyncio.run(run()) == (False, True)


def test_a_wrong_type_at_the_schema_key_is_refused(cluster: ClusterSetup) -> None:
    from django_mailqueue.core.errors import Code, QueueError

    prefix = _prefix("foreign")
    store = RedisStore(cluster.options(key_prefix=prefix))
    with cluster.client() as client:
        client.execute_command("HSET", store.keys.schema, "a", "b")
    with pytest.raises(QueueError) as refused:
        store.add(new_item(), now=T0)
    assert refused.value.code == Code.INVALID_OPTION
    store.close()


def test_the_policy_check_reads_every_primary(cluster: ClusterSetup) -> None:
    store = RedisStore(cluster.options(key_prefix=_prefix("policy")))
    last = cluster.nodes[-1]
    try:
        assert store.maxmemory_policy() == "noeviction"
        with last.client() as client:
            client.config_set("maxmemory-policy", "allkeys-lru")
        assert store.maxmemory_policy() == "allkeys-lru"
    finally:
        with last.client() as client:
            client.config_set("maxmemory-policy", "noeviction")
        store.close()


def test_a_cluster_out_of_reach_is_store_unavailable(cluster: ClusterSetup) -> None:
    from django_mailqueue.core.errors import Code, QueueError
    from tests.support.redis_server import free_port

    store = RedisStore({"url": f"redis://127.0.0.1:{free_port()}/0", "cluster": True, "socket_timeout": 2})
    with pytest.raises(QueueError) as sync_refused:
        store.add(new_item(), now=T0)

    async def later() -> QueueError:
        with pytest.raises(QueueError) as refused:
            await store.aadd_many([new_item()], now=T0)
        await store.aclose()
        return refused.value

    for error in (sync_refused.value, asyncio.run(later())):
        assert error.code == Code.STORE_UNAVAILABLE and "127.0.0.1" in error.message, error


def test_the_store_follows_its_slot_to_another_primary(cluster: ClusterSetup) -> None:
    """The store talks to the slot's primary with a plain client: when the slot moves (MOVED), the sync and the
    asyncio side read the slot map anew and send the call again, nothing lost or done twice."""
    store = RedisStore(cluster.options(key_prefix=_prefix("moved")))
    try:
        added = store.add_many([new_item([f"r{i}@example.org"]) for i in range(6)], now=T0)
        before = cluster.node_of(store.keys.schema)
        after = cluster.move_slot_of(store.keys.schema)
        assert after != before and cluster.node_of(store.keys.schema) == after
        first = store.claim(owner="w", now=T0, lease_expires=at(60), limit=3)  # MOVED, then sent again

        async def run() -> list[uuid.UUID]:
            claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=3)
            ids = [item.id for item in claimed]
            cluster.move_slot_of(store.keys.schema)  # and again, under the asyncio client
            requests = [
                CompleteRequest(item.id, "w", item.revision, Completion((outcome(item.recipients[0].address,
                    RecipientState.DELIVERED),), T0))
                for item in [*first, *claimed]
            ]  # fmt: skip
            answers = await store.acomplete_many(requests)
            assert not [answer for answer in answers if isinstance(answer, Exception)], answers
            await store.aclose()
            return ids

        second = asyncio.run(run())
        assert sorted({item.id for item in first} | set(second)) == sorted(item.id for item in added)
        assert store.count() == 0
        held = cluster.keys_per_node(f"{store.keys.prefix}*")
        assert sum(held.values()) == held[cluster.node_of(store.keys.schema)] > 0, held
    finally:
        store.close()


# --- a queue split into partitions (OPTIONS["partitions"]) --------------------------------------------------------


def _partitioned(cluster: ClusterSetup, tag: str, max_items: int | None = None, partitions: int = 3) -> RedisStore:
    return RedisStore(cluster.options(key_prefix=_prefix(tag), partitions=partitions), max_items=max_items)


class TestPartitionedStoreOnCluster(RedisContract):
    """The whole contract on a queue of three partitions (but the claim order across partitions: `in_add_order` is
    False; see the tests below), `max_items` under concurrent adders included."""

    @pytest.fixture
    def make_store(self, cluster: ClusterSetup) -> Iterator[StoreFactory]:
        with redis_stores(lambda: cluster.options(key_prefix=_prefix("p"), partitions=3)) as make:
            yield make


class TestPartitionedStoreOnClusterAsync(AsyncTwinsContract):
    """The same through the asyncio twins."""

    @pytest.fixture
    def make_store(self, cluster: ClusterSetup) -> Iterator[StoreFactory]:
        with async_twins(lambda: cluster.options(key_prefix=_prefix("pa"), partitions=3)) as make:
            yield make


def test_partitions_spread_the_queue_one_a_primary(cluster: ClusterSetup) -> None:
    from django_mailqueue.stores.redis_partitions import PartitionedRedisStore

    store = _partitioned(cluster, "spread")
    assert isinstance(store, PartitionedRedisStore)
    try:
        store.add_many([new_item([f"r{i}@example.org"]) for i in range(5)], now=T0)
        for i in range(30):
            store.add(new_item([f"s{i}@example.org"]), now=T0)
        with cluster.client() as client:
            slots = {client.keyslot(part.keys.schema) for part in store.parts}
        held = cluster.keys_per_node(f"{store.key_prefix}*")
        assert len(slots) == 3 and len(held) == 3 and min(held.values()) >= 20, (slots, held)
        assert sorted(cluster.node_of(part.keys.schema) for part in store.parts) == sorted(held)
        assert store.count() == 35 and [part.count() for part in store.parts].count(0) == 0
    finally:
        store.close()


def test_a_claim_takes_from_the_partitions_in_turn_each_in_its_order(cluster: ClusterSetup) -> None:
    """Each partition's items come earliest due first, then oldest; the claims start at the next partition each
    time, so every partition is served while each holds more than a claim takes."""
    from django_mailqueue.stores.redis_partitions import PartitionedRedisStore

    store = _partitioned(cluster, "turn")
    assert isinstance(store, PartitionedRedisStore)
    try:
        ids = [store.add(new_item(not_before=at(60 - i % 7)), now=T0).id for i in range(60)]
        where = {item_id: store.part_of(item_id) for item_id in ids}
        got: list[list[uuid.UUID]] = []
        while claimed := store.claim(owner="w", now=at(100), lease_expires=at(200), limit=4):
            got.append([item.id for item in claimed])
        assert sorted(i for batch in got for i in batch) == sorted(ids)
        firsts = [where[batch[0]].partition for batch in got[:3]]  # type: ignore[union-attr]
        assert sorted(firsts) == [0, 1, 2], firsts
        for part in store.parts:
            mine = [i for batch in got for i in batch if where[i] is part]
            expected = sorted(mine, key=lambda i: (60 - ids.index(i) % 7, ids.index(i)))
            assert mine == expected, part.partition
    finally:
        store.close()


def test_one_partition_then_three_keeps_the_queue(cluster: ClusterSetup) -> None:
    """Partition 0's keys are the one-partition queue's: a queue given more partitions keeps its items."""
    prefix = _prefix("grow")
    one = RedisStore(cluster.options(key_prefix=prefix))
    three = RedisStore(cluster.options(key_prefix=prefix, partitions=3))
    try:
        before = one.add_many([new_item() for _ in range(4)], now=T0)
        assert three.count() == 4 and {three.get(item.id) for item in before} == set(before)
        three.add_many([new_item() for _ in range(4)], now=T0)
        claimed = three.claim(owner="w", now=T0, lease_expires=at(60), limit=20)
        assert len(claimed) == 8 and three.count() == 8
    finally:
        one.close()
        three.close()


def test_status_counts_every_partition(cluster: ClusterSetup) -> None:
    """`mailqueue_status` (and the metrics, which read the same summary) sees the items of every partition."""
    import json
    from datetime import UTC, datetime
    from io import StringIO

    from django.core.management import call_command
    from django.test import override_settings

    from django_mailqueue.stores import get_store, reset_store

    options = cluster.options(key_prefix=_prefix("status"), partitions=3)
    store = {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": options}
    with override_settings(MAILQUEUE={"STORE": store, "HOSTNAME": "mq.test"}):
        reset_store()
        try:
            queued = get_store()
            now = datetime.now(UTC)
            for i in range(9):
                queued.add(new_item([f"r{i}@example.org"], queue="bulk" if i % 3 else "default"), now=now)
            assert all(part.count() == 3 for part in queued.parts)  # type: ignore[attr-defined]
            out = StringIO()
            call_command("mailqueue_status", "--json", stdout=out)
            data = json.loads(out.getvalue())
            assert data["total"] == 9 and data["by_state"]["due"] == 9, data
            assert data["by_queue"]["bulk"]["due"] == 6 and data["by_queue"]["default"]["due"] == 3, data
        finally:
            reset_store()


def _named(message: str) -> dict[tuple[int, int], int]:
    """What E030's text names: (partition, count) for each count it names with the partition, and the items."""
    found: dict[tuple[int, int], int] = {}
    for partition, counts, items in re.findall(r"partition (\d+) of ([\d or]+): (\d+) items", message):
        for count in counts.split(" or "):
            found[int(partition), int(count)] = int(items)
    return found


def test_the_check_names_the_partitions_a_changed_count_strands(cluster: ClusterSetup) -> None:
    """mailqueue.E030: a queue of three partitions set to two (or four) has items the store no longer reaches;
    the check names each of those partitions and its items, and is quiet again once they are drained."""
    from django.test import override_settings

    from django_mailqueue.checks import check_redis_stranded_partitions
    from django_mailqueue.stores.redis_checks import stranded_partitions
    from django_mailqueue.stores.redis_layout import layout_prefix

    prefix = _prefix("strand")
    three = RedisStore(cluster.options(key_prefix=prefix, partitions=3))

    def errors(partitions: int) -> list[str]:
        options = cluster.options(key_prefix=prefix, partitions=partitions)
        store = {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": options}
        with override_settings(MAILQUEUE={"STORE": store, "HOSTNAME": "mq.test"}):
            found = check_redis_stranded_partitions(databases=["default"])
        assert all(error.id == "mailqueue.E030" for error in found)
        return [error.msg for error in found]

    try:
        for _ in range(3):
            three.add_many([new_item(), new_item()], now=T0)  # two items in each partition
        assert stranded_partitions(three) == {} and errors(3) == []
        # A partition's tag depends on the count: a change strands those whose tag changed (the prefix's draw:
        # partition 1 of 3 has partition 1 of 2's tag for about a quarter of prefixes, partition 2 of 3 never)
        tags = {
            n: [layout_prefix(prefix, cluster=True, partition=p, partitions=n) for p in range(n)] for n in (2, 3, 4)
        }
        (message,) = errors(2)
        assert "'partitions' 2 does not reach" in message
        named = _named(message)
        assert named[2, 3] == 2 and named.get((1, 3)) == (2 if tags[3][1] not in tags[2] else None), message
        moved = [p for p in (1, 2) if tags[3][p] not in tags[4]]
        named = _named(" ".join(errors(4)))
        assert [named.get((p, 3)) for p in (1, 2)] == [2 if p in moved else None for p in (1, 2)], named
        assert errors(1) != []
        for item in three.claim(owner="w", now=T0, lease_expires=at(60), limit=10):
            done = Completion(tuple(outcome(r.address, RecipientState.DELIVERED) for r in item.recipients), T0)
            three.complete(item.id, owner="w", revision=item.revision, completion=done)
        assert three.count() == 0 and errors(2) == [] and errors(1) == []
    finally:
        three.close()


def test_the_stranded_counts_follow_a_moved_slot(cluster: ClusterSetup) -> None:
    """E030's counts go in a plain pipeline a primary, by the slot map the store read: a slot moved since (MOVED)
    is counted through redis-py's cluster pipeline instead, the same counts."""
    from django_mailqueue.stores.redis_checks import stranded_partitions

    prefix = _prefix("strandmoved")
    three = RedisStore(cluster.options(key_prefix=prefix, partitions=3))
    two = RedisStore(cluster.options(key_prefix=prefix, partitions=2))
    try:
        for _ in range(3):
            three.add_many([new_item(), new_item()], now=T0)
        before = stranded_partitions(two)  # the slot map read
        assert before and all(n == 2 for n in before.values()), before
        cluster.move_slot_of(three.parts[2].keys.items)  # partition 2 of 3: never one of two's
        assert stranded_partitions(two) == before
    finally:
        three.close()
        two.close()


def test_a_worker_refuses_to_start_on_stranded_partitions(cluster: ClusterSetup) -> None:
    """`mailqueue_work` reads what E030 reads before it claims: set to two partitions where three hold items, it
    exits naming them (and no URL), and the items stay; at three it runs."""
    from django.core.management import CommandError, call_command
    from django.test import override_settings

    from django_mailqueue.stores import reset_store

    prefix = _prefix("refuse")
    three = RedisStore(cluster.options(key_prefix=prefix, partitions=3))
    try:
        for _ in range(3):
            three.add(new_item(not_before=at(3600 * 24 * 365 * 100)), now=T0)  # one in each, due in a century
        # Partition 1 of 3 shares its hash tag with partition 1 of 2 for some prefixes (partition_tag): then two
        # partitions reach its item, and only partition 2 of 3's is stranded.
        two = {layout_prefix(prefix, cluster=True, partition=p, partitions=2) for p in range(2)}
        held = {
            (p, 3): 1 for p in range(3) if layout_prefix(prefix, cluster=True, partition=p, partitions=3) not in two
        }
        assert (2, 3) in held
        for partitions, refused in ((2, True), (3, False)):
            store = {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": cluster.options(
                key_prefix=prefix, partitions=partitions)}  # fmt: skip
            with override_settings(MAILQUEUE={"STORE": store, "HOSTNAME": "mq.test"}):
                reset_store()
                try:
                    call_command("mailqueue_work", "--once", verbosity=0)
                except CommandError as exc:
                    assert refused, exc
                    assert "2 does not reach (" in str(exc), exc
                    assert {k: n for k, n in _named(str(exc)).items() if k[1] == 3} == held, exc
                    assert "mailqueue_status" in str(exc) and "127.0.0.1" not in str(exc), exc
                else:
                    assert not refused
                finally:
                    reset_store()
        assert three.count() == 3
    finally:
        three.close()


@pytest.mark.django_db(transaction=True)
class TestOnCommitInPartitions(redis_tests.TestOnCommit):
    """`on_commit` on three partitions: the store itself waits for the commit (its parts add at once), then adds,
    moving shares when its partition's is short."""

    @pytest.fixture
    def make(self, cluster: ClusterSetup) -> Iterator[Maker]:
        prefix = _prefix("commit")
        with redis_stores(lambda: cluster.options(key_prefix=prefix, partitions=3)) as build:
            yield build

    def test_a_commit_moves_shares_for_its_batch(self, make: Callable[..., RedisStore]) -> None:
        from django.db import transaction

        store, reader = make(max_items=3, on_commit=True), make()
        with transaction.atomic():
            added = store.add_many([new_item(), new_item(), new_item()], now=T0)  # one partition, share 1
            assert reader.count() == 0
        assert sorted(item.id for item in reader.list()) == sorted(item.id for item in added)


def test_the_partitions_share_one_asyncio_cluster_client(
    cluster: ClusterSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's claims reach every part: one redis-py asyncio cluster client (one slot map read) for all of
    them, not one a part (docs/performance.md, "The worker's start")."""
    from django_mailqueue.stores import redis_connection

    made: list[str] = []
    real = redis_connection.async_cluster_client

    def counted(*args: object, **kwargs: object) -> object:
        made.append("client")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(redis_connection, "async_cluster_client", counted)
    store = _partitioned(cluster, "shared")

    async def run() -> int:
        try:
            for _ in range(3):  # each claim starts at the next part
                await store.aclaim(owner="w", now=at(100), lease_expires=at(200), limit=4)
            return len(made)
        finally:
            await store.aclose()

    assert asyncio.run(run()) == 1


def test_a_worker_counts_the_stranded_partitions_on_its_asyncio_cluster_client(
    cluster: ClusterSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mailqueue_work` reads what E030 reads (and still refuses on it: above) in its event loop, through the asyncio
    cluster client its claims use: no sync cluster client, and no slot map read for it alone (docs/performance.md,
    helper `cluster`)."""
    from django.core.management import call_command
    from django.test import override_settings

    from django_mailqueue.stores import redis_connection, reset_store

    made: list[str] = []
    for name in ("sync_cluster_client", "async_cluster_client"):

        def counted(*args: object, _real: object = getattr(redis_connection, name), _name: str = name) -> object:
            made.append(_name)
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(redis_connection, name, counted)
    prefix = _prefix("count")
    store = {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": cluster.options(
        key_prefix=prefix, partitions=3)}  # fmt: skip
    with override_settings(MAILQUEUE={"STORE": store, "HOSTNAME": "mq.test"}):
        reset_store()
        try:
            call_command("mailqueue_work", "--once", verbosity=0)
        finally:
            reset_store()
    assert made == ["async_cluster_client"], made


def test_a_batch_of_claimed_items_completes_without_asking_where_each_checked_once(
    cluster: ClusterSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's batches: items the store claimed are completed in their remembered partitions (no part asked
    which holds one), each completion checked once, not again by its part (docs/performance.md, helper `cluster`)."""
    from django_mailqueue.stores import redis as redis_module
    from django_mailqueue.stores import redis_partitions

    store = _partitioned(cluster, "done")
    checked: list[Completion] = []

    def counting(
        completion: Completion, _real: Callable[[Completion], None] = redis_partitions.check_completion
    ) -> None:
        checked.append(completion)
        _real(completion)

    async def asked(item_id: uuid.UUID) -> None:
        raise AssertionError(f"asked the parts which holds {item_id}")

    async def run() -> list[object]:
        try:
            for _ in range(3):  # one a partition: the adds take the parts in turn
                await store.aadd(new_item(), now=T0)
            claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=3)
            assert len(claimed) == 3
            monkeypatch.setattr(redis_partitions, "check_completion", counting)
            monkeypatch.setattr(redis_module, "check_completion", counting)
            monkeypatch.setattr(store, "_apart_of", asked)
            done = Completion(tuple(outcome(r.address, RecipientState.DELIVERED) for r in claimed[0].recipients), T0)
            answers = await store.acomplete_many([CompleteRequest(i.id, "w", i.revision, done) for i in claimed])
            assert await store.acount() == 0
            return list(answers)
        finally:
            await store.aclose()

    answers = asyncio.run(run())
    assert [getattr(a, "done", None) for a in answers] == [True, True, True] and len(checked) == 3, (answers, checked)

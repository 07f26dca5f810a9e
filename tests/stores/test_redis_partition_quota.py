"""A partitioned Redis queue's MAX_ITEMS on a real Cluster: the partitions' shares add up to it, a transfer a
stopped taker left is given by the next, and a changed MAX_ITEMS moves every share by the same rule."""

from __future__ import annotations

import time
import uuid

import pytest

from django_mailqueue.core.errors import Code, QueueError
from django_mailqueue.stores import redis_scripts as scripts
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.stores.redis_partitions import PartitionedRedisStore
from django_mailqueue.stores.redis_quota import NEVER_GIVEN_MS, share_spec
from django_mailqueue.testing.contract import T0, new_item
from tests.support.redis_cluster import ClusterSetup

pytestmark = pytest.mark.redis


def _store(cluster: ClusterSetup, prefix: str, max_items: int | None) -> PartitionedRedisStore:
    store = RedisStore(cluster.options(key_prefix=prefix, partitions=3), max_items=max_items)
    assert isinstance(store, PartitionedRedisStore)
    return store


def _read(part: RedisStore, *command: str) -> int:
    return int(part._do(lambda c: c.execute_command(*command)) or 0)


def _shares(store: PartitionedRedisStore) -> list[int]:
    return [_read(part, "HGET", part.keys.quota, "share") for part in store.parts]


def _fill(store: PartitionedRedisStore) -> int:
    """Single adds until FULL: how many went in."""
    added = 0
    while True:
        try:
            store.add(new_item(), now=T0)
        except QueueError as exc:
            assert exc.code == Code.FULL and "MAX_ITEMS is" in exc.message
            return added
        added += 1


def test_the_shares_add_up_to_max_items_and_follow_the_items(redis_cluster: ClusterSetup) -> None:
    store = _store(redis_cluster, f"mqtest-quota-{uuid.uuid4().hex[:10]}:", 7)
    try:
        store.add_many([new_item() for _ in range(5)], now=T0)  # one partition: shares moved to it
        assert sum(_shares(store)) == 7 and store.count() == 5
        assert _fill(store) == 2 and store.count() == 7 and sum(_shares(store)) == 7
        for part in store.parts:
            assert part.count() <= _read(part, "HGET", part.keys.quota, "share")
            assert _read(part, "HLEN", part.keys.quota_out) == 0
    finally:
        store.close()


def test_a_transfer_whose_taker_stopped_is_given_by_the_next(redis_cluster: ClusterSetup) -> None:
    """A taker that stopped between its take and its give leaves the share recorded in `quota:out`; once older than
    NEVER_GIVEN_MS the next transfer from that partition gives it, and the queue holds MAX_ITEMS again."""
    store = _store(redis_cluster, f"mqtest-quota-{uuid.uuid4().hex[:10]}:", 6)
    try:
        source = store.parts[1]
        long_ago = int(time.time() * 1000) - NEVER_GIVEN_MS - 1000
        keys = [source.keys.quota, source.keys.items, source.keys.quota_out]
        args = [share_spec(6, 3, 1), "2", "stopped", "0", str(long_ago), "0"]
        taken = source._do(lambda c: scripts.QUOTA_TAKE.run(c, keys, args))
        assert int(taken[0]) == 2  # partition 1's whole share, given to no one
        assert _fill(store) == 6 and store.count() == 6, _shares(store)
        assert sum(_shares(store)) == 6
        assert _read(source, "HLEN", source.keys.quota_out) == 0
    finally:
        store.close()


def test_a_transfer_given_twice_counts_once(redis_cluster: ClusterSetup) -> None:
    store = _store(redis_cluster, f"mqtest-quota-{uuid.uuid4().hex[:10]}:", 6)
    try:
        for _ in range(3):
            store.add(new_item(), now=T0)  # one in each partition: every share set
        dest = store.parts[0]
        keys, args = [dest.keys.quota, dest.keys.quota_in("t1")], [share_spec(6, 3, 0), "1", "60000"]
        before = _shares(store)[0]
        assert [dest._do(lambda c: scripts.QUOTA_GIVE.run(c, keys, args)) for _ in range(2)] == [1, 0]
        assert _shares(store)[0] == before + 1
    finally:
        store.close()


def test_a_changed_max_items_moves_every_share(redis_cluster: ClusterSetup) -> None:
    prefix = f"mqtest-quota-{uuid.uuid4().hex[:10]}:"
    small, large = _store(redis_cluster, prefix, 6), _store(redis_cluster, prefix, 9)
    try:
        assert _fill(small) == 6
        assert _fill(large) == 3 and large.count() == 9 and sum(_shares(large)) == 9
        assert _fill(small) == 0 and sum(_shares(small)) == 6  # 9 held: over the bound, nothing more
    finally:
        small.close()
        large.close()

"""The documented ACL line on a Redis Cluster: the whole contract on three partitions as a user created with it on
each primary (ACL users are per node), the wake-up heard on the partitions' channels."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, StoreFactory, new_item
from tests.stores.test_redis_contract import acl_rules
from tests.support.redis_cluster import ClusterSetup
from tests.support.redis_stores import RedisContract, redis_stores

pytestmark = pytest.mark.redis


@pytest.fixture
def cluster_acl_user(redis_cluster: ClusterSetup) -> Iterator[tuple[dict[str, str], str]]:
    """A user made with the documented ACL line on every primary, for a fresh prefix: (its url parts, prefix)."""
    user, password = f"mqtest-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
    prefix = f"mqtest-cacl-{uuid.uuid4().hex[:10]}:"
    for node in redis_cluster.nodes:
        with node.client() as admin:
            admin.execute_command("ACL", "SETUSER", user, "reset", *acl_rules(prefix, password))
    node = redis_cluster.nodes[0]
    yield {"url": f"redis://{user}:{password}@127.0.0.1:{node.port}/0"}, prefix
    for node in redis_cluster.nodes:
        with node.client() as admin:
            admin.execute_command("ACL", "DELUSER", user)


class TestPartitionedStoreAsDocumentedAclUser(RedisContract):
    """The whole contract on three partitions, as the documented user."""

    @pytest.fixture
    def make_store(self, cluster_acl_user: tuple[dict[str, str], str]) -> Iterator[StoreFactory]:
        where, prefix = cluster_acl_user
        options = {**where, "cluster": True, "key_prefix": prefix, "partitions": 3}
        with redis_stores(lambda: options, one=True) as make:
            yield make


def test_an_add_in_any_partition_wakes_the_documented_user(cluster_acl_user: tuple[dict[str, str], str]) -> None:
    where, prefix = cluster_acl_user
    store = RedisStore({**where, "cluster": True, "key_prefix": prefix, "partitions": 3})

    async def run() -> list[bool]:
        woke = [await store.await_added(0.2)]  # subscribes to every partition's channel
        for _ in range(3):  # the partitions in turn
            waiting = asyncio.create_task(store.await_added(10))
            await asyncio.sleep(0.1)
            await store.aadd_many([new_item()], now=T0)
            woke.append(await asyncio.wait_for(waiting, 10))
        await store.aclose()
        return woke

    assert asyncio.run(run()) == [False, True, True, True]

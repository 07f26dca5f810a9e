"""RedisStore through Redis Sentinel: the contract suite on a primary, a replica and three sentinels of the
test's own (with WAIT for the replica), django-redis's Sentinel cache, and a failover under the store's feet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from django_mailqueue.core.items import Completion, RecipientState
from django_mailqueue.stores import get_store
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, StoreFactory, at, new_item, outcome
from tests.support.redis_sentinel import SERVICE, SentinelSetup
from tests.support.redis_server import unique_prefix
from tests.support.redis_stores import RedisContract, redis_stores

pytestmark = pytest.mark.redis

PASSWORD = "data-Node-pw-5e1f"  # noqa: S105 - the test servers' own
SENTINEL_PASSWORD = "sentinel-Pw-90ab"  # noqa: S105


@pytest.fixture(scope="module")
def sentinel_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    directory = tmp_path_factory.mktemp("sentinel")
    with SentinelSetup(directory, replicas=1, password=PASSWORD, sentinel_password=SENTINEL_PASSWORD) as setup:
        yield setup


class TestRedisStoreThroughSentinel(RedisContract):
    """The whole contract, the primary found through the sentinels, every write waiting for the replica."""

    @pytest.fixture
    def make_store(self, sentinel_setup: SentinelSetup) -> Iterator[StoreFactory]:
        def options() -> dict[str, Any]:
            return sentinel_setup.options(key_prefix=unique_prefix("sentinel"), sync_replicas=1)

        with redis_stores(options) as make:
            yield make


def test_the_options_name_the_service_and_no_password(sentinel_setup: SentinelSetup) -> None:
    store = RedisStore(sentinel_setup.options())
    assert store.place.startswith("sentinel://127.0.0.1:") and store.place.endswith(f"/{SERVICE}/0")
    assert PASSWORD not in repr(store) and SENTINEL_PASSWORD not in repr(store)
    store.close()


def test_the_replica_has_each_acknowledged_write(sentinel_setup: SentinelSetup) -> None:
    store = RedisStore(sentinel_setup.options(key_prefix="mqtest-acked:", sync_replicas=1))
    added = store.add(new_item(), now=T0)
    (claimed,) = store.claim(owner="w", now=T0, lease_expires=at(60))
    with sentinel_setup.replicas[0].client() as replica:
        held = replica.hgetall(f"mqtest-acked:item:{added.id}")
    assert held[b"owner"] == b"w" and int(held[b"rev"]) == claimed.revision
    done = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
    assert store.complete(claimed.id, owner="w", revision=claimed.revision, completion=done) is not None
    with sentinel_setup.replicas[0].client() as replica:
        assert replica.exists(f"mqtest-acked:item:{added.id}") == 0
    store.close()


def test_django_redis_sentinel_cache(sentinel_setup: SentinelSetup) -> None:
    """A `cache` alias configured with django-redis's Sentinel client: the store asks the same sentinels."""
    caches = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "queue": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{SERVICE}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": [("127.0.0.1", s.port) for s in sentinel_setup.sentinels],
                "SENTINEL_KWARGS": {"password": SENTINEL_PASSWORD},
                "PASSWORD": PASSWORD,
            },
        },
    }
    mailqueue = {
        "STORE": {
            "BACKEND": "django_mailqueue.stores.redis.RedisStore",
            "OPTIONS": {"cache": "queue", "key_prefix": "mqtest-cache-sentinel:"},
        }
    }
    with override_settings(CACHES=caches, MAILQUEUE=mailqueue):
        store = get_store()
        assert isinstance(store, RedisStore)
        assert store._clients.failover_timeout == 60.0  # the Sentinel default, read from CACHES
        added = store.add(new_item(), now=T0)
        assert store.place.startswith("sentinel://") and "cache 'queue'" in store.place
        assert [i.id for i in store.claim(owner="w", now=T0, lease_expires=at(60))] == [added.id]
        store.cancel(added.id)
        store.close()


def test_a_failover_is_followed_by_sync_and_async_calls(tmp_path: Path) -> None:
    """The primary SIGKILLed: the next calls wait for the sentinels' choice and go to the new primary."""
    import asyncio

    with SentinelSetup(tmp_path, replicas=2) as setup:
        options: dict[str, Any] = setup.options(key_prefix="mq:", sync_replicas=1, failover_timeout=30)
        store = RedisStore(options)
        first = store.add(new_item(), now=T0)
        (claimed,) = store.claim(owner="w", now=T0, lease_expires=at(60))

        async def claim_after_failover() -> list[Any]:
            try:
                await store.aadd(new_item(), now=T0)  # connects the asyncio side to the first primary
                setup.kill_primary()
                third = await store.aadd(new_item(), now=T0)  # waits out the failover
                return [third, await store.aclaim(owner="w", now=T0, lease_expires=at(60), limit=10)]
            finally:
                await store.aclose()

        third, taken = asyncio.run(claim_after_failover())
        new_port = setup.primary_port()
        assert new_port != setup.primary.port
        # the acknowledged writes are all on the new primary: the lease of `first` is held still
        assert {i.id for i in taken} == {i.id for i in store.list()} - {first.id}
        assert third.id in {i.id for i in taken}
        done = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
        assert store.complete(first.id, owner="w", revision=claimed.revision, completion=done) is not None
        assert store.count() == 2
        store.close()


# --- the options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"sentinels": [("h", 26379)]}, "'service_name'"),
        ({"sentinels": [], "service_name": "mq"}, "'sentinels' must be"),
        ({"sentinels": "h:26379", "service_name": "mq"}, "'sentinels' must be"),
        ({"sentinels": [("h", "26379")], "service_name": "mq"}, "'sentinels' must be"),
        ({"sentinels": [("h", 0)], "service_name": "mq"}, "'sentinels' must be"),
        ({"sentinels": [("h", 26379)], "service_name": "my master"}, "'service_name'"),
        ({"sentinels": [("h", 26379)], "service_name": "mq", "url": "redis://h/0"}, "exactly one of"),
        ({"sentinels": [("h", 26379)], "service_name": "mq", "db": -1}, "'db'"),
        ({"sentinels": [("h", 26379)], "service_name": "mq", "sentinel_password": ""}, "'sentinel_password'"),
        ({"url": "redis://h/0", "service_name": "mq"}, "go(es) with 'sentinels'"),
        ({"url": "redis://h/0", "sentinel_password": "x"}, "go(es) with 'sentinels'"),
        ({"url": "redis://h/0", "cluster": "yes"}, "'cluster' must be True or False"),
        ({"url": "redis://h/0", "partitions": 1}, "'partitions' goes with 'cluster'"),
        ({"url": "redis://h/0", "cluster": True, "partitions": 65}, "'partitions' must be a whole number"),
        ({"url": "redis://h/0", "cluster": True, "partitions": True}, "'partitions' must be a whole number"),
        ({"url": "redis://h/0", "cluster": True, "sync_replicas": 1}, "'sync_replicas' is not supported"),
        ({"cache": "default", "cluster": True}, "reached by 'url'"),
    ],
)
def test_bad_sentinel_options_are_refused_by_the_check(options: dict[str, Any], fragment: str) -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    assert any(fragment in p for p in RedisStore.check_options(options)), RedisStore.check_options(options)
    store = {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": options}
    with override_settings(MAILQUEUE={"STORE": store}):
        out = StringIO()
        with pytest.raises(SystemCheckError) as check:
            call_command("check", stdout=out, stderr=out)
        assert "mailqueue.E003" in str(check.value)


def test_good_sentinel_options_pass() -> None:
    options = {
        "sentinels": [("10.0.0.5", 26379), ["10.0.0.6", 26379]],  # a list from JSON settings too
        "service_name": "mymaster",
        "db": 2,
        "username": "mailqueue-worker",
        "password": "x",
        "sentinel_password": "y",
        "failover_timeout": 20,
        "sync_replicas": 1,
    }
    assert RedisStore.check_options(options) == []
    assert RedisStore(options)._clients.failover_timeout == 20
    assert RedisStore({k: v for k, v in options.items() if k != "failover_timeout"})._clients.failover_timeout == 60

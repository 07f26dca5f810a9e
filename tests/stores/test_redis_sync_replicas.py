"""`sync_replicas`: each write waits (WAIT) until that many replicas have it, or fails STORE_UNAVAILABLE after
`sync_timeout` — on a primary and a replica of the test's own, the replica then stopped."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_mailqueue.core.errors import QueueError
from django_mailqueue.core.items import Completion, RecipientState, Reply
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, at, new_item, outcome
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

DONE = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))


class Pair:
    def __init__(self, directory: Path) -> None:
        (directory / "p").mkdir()
        (directory / "r").mkdir()
        self.primary = RedisServer(directory / "p", "--repl-diskless-sync-delay", "0").start()
        self.replica = RedisServer(
            directory / "r", "--replicaof", "127.0.0.1", str(self.primary.port), "--repl-diskless-sync-delay", "0"
        ).start()
        with self.primary.client() as client:  # until the replica acknowledges writes
            while client.set("mqtest-probe", 1) and client.execute_command("WAIT", 1, 100) < 1:
                pass

    def store(self, **options: Any) -> RedisStore:
        return RedisStore({"url": self.primary.url, "sync_replicas": 1, "sync_timeout": 0.3, **options})


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    servers = Pair(tmp_path)
    yield servers
    servers.replica.kill()
    servers.primary.kill()


def test_each_write_is_on_the_replica_when_the_call_returns(pair: Pair) -> None:
    store = pair.store()
    replica = pair.replica.client()
    added = store.add(new_item(), now=T0)
    assert replica.exists(f"mailqueue:item:{added.id}") == 1
    (claimed,) = store.claim(owner="w", now=T0, lease_expires=at(60))
    assert replica.hget(f"mailqueue:item:{added.id}", "owner") == b"w"
    assert store.renew([added.id], owner="w", lease_expires=at(120)) == [added.id]
    assert replica.zscore("mailqueue:leases", replica.hget(f"mailqueue:item:{added.id}", "member")) == float(
        int(at(120).timestamp()) * 1_000_000
    )
    assert store.complete(added.id, owner="w", revision=claimed.revision, completion=DONE) is not None
    assert replica.exists(f"mailqueue:item:{added.id}") == 0
    other = store.add(new_item(), now=T0)
    assert store.reschedule(other.id, at=at(500)) is True
    assert replica.hget(f"mailqueue:item:{other.id}", "next") == str(int(at(500).timestamp()) * 1_000_000).encode()
    assert store.cancel(other.id) is not None
    assert replica.exists(f"mailqueue:item:{other.id}") == 0
    replica.close()
    store.close()


def test_shaping_waits_for_its_suspensions_and_not_for_its_buckets(pair: Pair) -> None:
    """A suspension, its clearing and a deferral are writes like the others; a token bucket's take is not
    waited for (a bucket lost in a failover is only full again)."""
    store = pair.store()
    throttled = Reply(421, "4.7.0", "Try again later")
    item = store.add(new_item(["a@x.example"]), now=T0)
    store.suspend("x.example", until=at(60), reply=throttled, now=T0)
    replica = pair.replica.client()
    assert replica.hget("mailqueue:suspension:x.example", "strikes") == b"1"
    assert store.defer_destination(["x.example"], until=at(60), now=T0) == 1
    assert replica.hget(f"mailqueue:item:{item.id}", "next") == str(int(at(60).timestamp()) * 1_000_000).encode()
    with pair.primary.client() as admin:
        before = admin.info("commandstats")["cmdstat_wait"]["calls"]
        assert store.take_tokens("relay:smtp.example.net:587", rate=1, burst=5, want=2, now=T0) == 2
        assert admin.info("commandstats")["cmdstat_wait"]["calls"] == before
    pair.replica.kill()
    assert store.take_tokens("relay:smtp.example.net:587", rate=1, burst=5, want=2, now=T0) == 2
    assert [s.destination for s in store.suspensions(now=T0)] == ["x.example"]  # a read
    for write in (
        lambda: store.suspend("y.example", until=at(60), reply=throttled, now=T0),
        lambda: store.clear_suspension("x.example"),
    ):
        with pytest.raises(QueueError) as behind:
            write()
        assert behind.value.code == "STORE_UNAVAILABLE" and "replicas" in behind.value.message
    assert [s.destination for s in store.suspensions(now=T0)] == ["y.example"]  # done on the primary
    replica.close()
    store.close()


def test_without_the_replica_a_write_fails_and_is_on_the_primary_whole(pair: Pair) -> None:
    store = pair.store()
    store.add(new_item(), now=T0)  # connected, while the replica is up
    pair.replica.kill()
    batch = [new_item() for _ in range(3)]
    with pytest.raises(QueueError) as behind:
        store.add_many(batch, now=T0)
    error = behind.value
    assert error.code == "STORE_UNAVAILABLE"
    assert "0 of the 1 replicas" in error.message and "it is on the primary" in error.message
    # what a failed WAIT means: the write was done, whole, on the primary (and may be lost with it)
    assert {i.id for i in store.list()} >= {i.id for i in batch}
    assert store.count() == 4

    # a claim that leases something fails the same way; the lease is held on the primary
    with pytest.raises(QueueError) as claim_behind:
        store.claim(owner="w", now=T0, lease_expires=at(60), limit=1)
    assert claim_behind.value.code == "STORE_UNAVAILABLE"
    assert sum(1 for i in store.list() if i.owner == "w") == 1


def test_without_the_replica_a_write_that_writes_nothing_is_answered(pair: Pair) -> None:
    """A refusal (FULL, a duplicate id) or a claim of nothing wrote nothing: no replica has to have it."""
    store = pair.store()
    full = RedisStore({"url": pair.primary.url, "sync_replicas": 1, "sync_timeout": 0.3}, max_items=1)
    first = store.add(new_item(not_before=at(1000)), now=T0)
    pair.replica.kill()
    assert store.claim(owner="w", now=T0, lease_expires=at(60)) == []
    with pytest.raises(QueueError) as refused:
        full.add(new_item(), now=T0)
    assert refused.value.code == "FULL"
    with pytest.raises(QueueError) as duplicate:
        store.add(new_item(id=first.id), now=T0)
    assert duplicate.value.code == "INVALID"
    full.close()
    store.close()


async def test_the_async_side_waits_too(pair: Pair) -> None:
    store = pair.store()
    try:
        added = await store.aadd(new_item(), now=T0)
        (claimed,) = await store.aclaim(owner="w", now=T0, lease_expires=at(60))
        pair.replica.kill()
        with pytest.raises(QueueError) as behind:
            await store.acomplete(added.id, owner="w", revision=claimed.revision, completion=DONE)
        assert behind.value.code == "STORE_UNAVAILABLE" and "replicas" in behind.value.message
        assert await store.aget(added.id) is None  # done on the primary
    finally:
        await store.aclose()


def test_each_write_sends_one_wait(pair: Pair) -> None:
    store = pair.store()
    store.add(new_item(), now=T0)
    with pair.primary.client() as admin:
        before = admin.info("commandstats")
        store.add(new_item(), now=T0)
        after = admin.info("commandstats")
    assert after["cmdstat_wait"]["calls"] - before["cmdstat_wait"]["calls"] == 1
    assert after["cmdstat_evalsha"]["calls"] - before["cmdstat_evalsha"]["calls"] == 1
    store.close()


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"sync_replicas": -1}, "'sync_replicas'"),
        ({"sync_replicas": True}, "'sync_replicas'"),
        ({"sync_replicas": 1, "sync_timeout": 0}, "'sync_timeout'"),
        ({"sync_replicas": 1, "sync_timeout": 10}, "less than 'socket_timeout'"),
        ({"failover_timeout": -1}, "'failover_timeout'"),
        ({"failover_timeout": "30"}, "'failover_timeout'"),
    ],
)
def test_bad_sync_options_are_refused_by_the_check(options: dict[str, Any], fragment: str) -> None:
    store = {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {"url": "redis://h/0", **options}}
    assert any(fragment in p for p in RedisStore.check_options(store["OPTIONS"]))
    with override_settings(MAILQUEUE={"STORE": store}):
        out = StringIO()
        with pytest.raises(SystemCheckError) as check:
            call_command("check", stdout=out, stderr=out)
        assert "mailqueue.E003" in str(check.value) and fragment in str(check.value)


def test_good_sync_options_pass() -> None:
    assert RedisStore.check_options({"url": "redis://h/0", "sync_replicas": 2, "sync_timeout": 0.5}) == []
    assert RedisStore.check_options({"url": "redis://h/0", "failover_timeout": 0}) == []


def test_a_url_that_reaches_a_replica_is_retried_until_it_is_the_primary(pair: Pair) -> None:
    """`failover_timeout` with a `url`: READONLY is retried (on new connections) until the node is promoted."""
    import threading

    on_primary = pair.store()
    on_primary.count()  # the prefix's schema key written, and replicated (WAIT)
    on_primary.close()
    store = RedisStore({"url": pair.replica.url, "failover_timeout": 30})
    assert store.count() == 0  # reads work on a replica
    promoted = threading.Event()

    def promote() -> None:
        promoted.wait()
        with pair.replica.client() as replica:
            replica.execute_command("REPLICAOF", "NO", "ONE")

    promoter = threading.Thread(target=promote)
    promoter.start()
    with pair.replica.client() as replica:
        assert replica.info("replication")["role"] == "slave"
    timer = threading.Timer(0.2, promoted.set)
    timer.start()
    added = store.add(new_item(), now=T0)  # READONLY until the promotion, then stored
    promoter.join(10)
    assert [i.id for i in store.list()] == [added.id]
    store.close()


def test_without_failover_timeout_a_replica_refuses_at_once(pair: Pair) -> None:
    on_primary = pair.store()
    on_primary.add(new_item(), now=T0)  # the schema key, replicated
    on_primary.close()
    store = RedisStore({"url": pair.replica.url})
    with pytest.raises(QueueError) as refused:
        store.add(new_item(), now=T0)
    assert refused.value.code == "STORE_UNAVAILABLE" and "read-only replica" in refused.value.message
    store.close()


def test_the_documented_acl_user_may_wait(pair: Pair) -> None:
    """The ACL line of docs/redis.md grants `WAIT`: the store works as that user with sync_replicas."""
    from tests.stores.test_redis_contract import acl_rules

    with pair.primary.client() as admin:
        admin.execute_command("ACL", "SETUSER", "mq-wait", "reset", *acl_rules("mqacl:", "pw-wait-1"))
    url = f"redis://mq-wait:pw-wait-1@127.0.0.1:{pair.primary.port}/0"
    store = RedisStore({"url": url, "key_prefix": "mqacl:", "sync_replicas": 1})
    added = store.add(new_item(), now=T0)
    (claimed,) = store.claim(owner="w", now=T0, lease_expires=at(60))
    assert store.complete(added.id, owner="w", revision=claimed.revision, completion=DONE) is not None
    store.close()

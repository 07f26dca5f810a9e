"""RedisStore against private redis-server processes: a crash and restart with AOF, maxmemory, the W001 check."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

from django_mailqueue.checks import check_redis_maxmemory_policy
from django_mailqueue.core.items import Completion, RecipientState
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, at, new_item, outcome
from tests.support.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis


@pytest.fixture
def aof_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path, "--appendonly", "yes", "--appendfsync", "always") as server:
        yield server


def redis_settings(url: str, **options: Any) -> dict[str, Any]:
    return {"STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {"url": url, **options}}}


# --- a crash and a restart -------------------------------------------------------------------------------


def test_a_crash_with_aof_always_loses_nothing_acknowledged(aof_server: RedisServer) -> None:
    store = RedisStore({"url": aof_server.url, "socket_timeout": 2})
    added = store.add_many([new_item(message=f"m{i}\x00\xff".encode()) for i in range(30)], now=T0)
    claimed = store.claim(owner="w1", now=T0, lease_expires=at(300), limit=10)
    delivered = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
    for item in claimed[:4]:
        store.complete(item.id, owner="w1", revision=item.revision, completion=delivered)
    before = {item.id: item for item in store.list(limit=100)}
    assert len(before) == 26

    aof_server.kill()  # SIGKILL: only what reached the disk survives
    with pytest.raises(QueueError) as down:
        store.count()
    assert down.value.code == "STORE_UNAVAILABLE"
    aof_server.start()

    assert store.count() == 26  # the next call reconnects by itself
    assert {item.id: item for item in store.list(limit=100)} == before
    for item in added[10:]:
        assert store.read_message(item.id) == f"m{added.index(item)}\x00\xff".encode()
    # leases held before the crash are still held; the rest is claimable as before
    assert store.renew([claimed[5].id], owner="w1", lease_expires=at(400)) == [claimed[5].id]
    rest = store.claim(owner="w2", now=at(1), lease_expires=at(60), limit=100)
    assert [i.id for i in rest] == [i.id for i in added[10:]]
    store.close()


async def test_the_async_side_carries_on_after_a_restart(aof_server: RedisServer) -> None:
    store = RedisStore({"url": aof_server.url, "socket_timeout": 2})
    try:
        first = await store.aadd(new_item(), now=T0)
        assert [i.id for i in await store.aclaim(owner="w", now=T0, lease_expires=at(60))] == [first.id]
        assert await store.await_added(0.01) is False  # subscribed
        aof_server.kill()
        with pytest.raises(QueueError) as down:
            await store.aclaim(owner="w", now=T0, lease_expires=at(60))
        assert down.value.code == "STORE_UNAVAILABLE"
        assert await store.await_added(0.05) is False  # the subscription broke: it polls
        aof_server.start()
        second = await store.aadd(new_item(), now=T0)
        assert [i.id for i in await store.aclaim(owner="w", now=T0, lease_expires=at(60))] == [second.id]
        got = await store.aget(first.id)
        assert got is not None and got.owner == "w"
        assert await store.await_added(0.01) is False  # subscribed again
        other = RedisStore({"url": aof_server.url})
        other.add(new_item(), now=T0)
        other.close()
        assert await store.await_added(2) is True
    finally:
        await store.aclose()


# --- maxmemory ---------------------------------------------------------------------------------------------


def test_out_of_memory_is_a_clear_error_and_stores_nothing_of_the_batch(tmp_path: Path) -> None:
    with RedisServer(tmp_path, "--maxmemory-policy", "noeviction") as server:
        client = server.client()
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", used + 2 * 1024 * 1024)
        store = RedisStore({"url": server.url})
        stalled = store.add(new_item(), now=T0)
        store.claim(owner="gone", now=T0, lease_expires=at(10))  # a worker that stopped
        body = b"x" * (256 * 1024)
        stored = 1
        with pytest.raises(QueueError) as refused:
            for _ in range(100):
                store.add_many([new_item(message=body), new_item(message=body)], now=T0)
                stored += 2
        error = refused.value
        assert error.code == "STORE_UNAVAILABLE"
        assert "out of memory" in str(error) and "maxmemory" in str(error)
        assert 1 < stored < 200
        assert store.count() == stored  # the refused batch left nothing behind
        # items and messages; schema, seq, items, leases, ready:default, queues; the admin's indexes: ids,
        # queue:default, domain:example.org, queue_names; the search's: search_layout, addrs (no subject: no word)
        assert int(client.dbsize()) == stored * 2 + 12
        # workers still claim (an expired lease too) and complete, which makes room again,
        # even with Redis over its maxmemory when the scripts start
        client.config_set("maxmemory", int(client.info("memory")["used_memory"]) - 200 * 1024)
        with pytest.raises(QueueError):
            store.add(new_item(), now=T0)
        taken = store.claim(owner="w", now=at(20), lease_expires=at(60), limit=2)
        assert [(i.id, i.reclaims) for i in taken][0] == (stalled.id, 1) and len(taken) == 2
        done = Completion((outcome("rcpt@example.org", RecipientState.DELIVERED),), next_attempt=at(1))
        for item in taken:
            recorded = store.complete(item.id, owner="w", revision=item.revision, completion=done)
            assert recorded is not None and recorded.done
        assert store.count() == stored - 2
        store.close()
        client.close()


@pytest.mark.parametrize(("policy", "warned"), [("allkeys-lru", True), ("volatile-lfu", True), ("noeviction", False)])
def test_w001_warns_unless_the_policy_is_noeviction(tmp_path: Path, policy: str, warned: bool) -> None:
    with RedisServer(tmp_path, "--maxmemory-policy", policy) as server:
        with override_settings(MAILQUEUE=redis_settings(server.url, key_prefix="mq:")):
            found = check_redis_maxmemory_policy(databases=["default"])
            assert [m.id for m in found] == (["mailqueue.W001"] if warned else [])
            if warned:
                assert isinstance(found[0], checks.Warning) and policy in found[0].msg
                assert "noeviction" in (found[0].hint or "")
            # only with the database checks: `check --database`, `migrate`
            assert check_redis_maxmemory_policy(databases=None) == []
            ran = checks.run_checks(databases=["default"], tags=[checks.Tags.database])
            assert ("mailqueue.W001" in [m.id for m in ran]) is warned


def test_w001_says_when_config_is_not_permitted(tmp_path: Path) -> None:
    with RedisServer(tmp_path, "--maxmemory-policy", "allkeys-lru") as server:
        client = server.client()
        client.execute_command("ACL", "SETUSER", "mq", "on", ">pw-secret", "~mq:*", "+@all", "-config")
        with override_settings(MAILQUEUE=redis_settings(f"redis://mq:pw-secret@127.0.0.1:{server.port}/0")):
            (found,) = check_redis_maxmemory_policy(databases=["default"])
        assert found.id == "mailqueue.W001" and "CONFIG" in (found.hint or "")
        assert "pw-secret" not in found.msg + (found.hint or "")
        client.close()


def test_w001_reports_an_unreachable_server_without_failing() -> None:
    url = f"redis://:pw-secret@127.0.0.1:{free_port()}/0"
    with override_settings(MAILQUEUE=redis_settings(url, socket_timeout=1)):
        (found,) = check_redis_maxmemory_policy(databases=["default"])
    assert found.id == "mailqueue.W001" and "STORE_UNAVAILABLE" in found.msg
    assert "pw-secret" not in found.msg


def test_w001_ignores_other_stores() -> None:
    with override_settings(MAILQUEUE={"STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}}):
        assert check_redis_maxmemory_policy(databases=["default"]) == []


def test_the_first_call_logs_an_evicting_policy(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with RedisServer(tmp_path, "--maxmemory-policy", "allkeys-lru") as server:
        store = RedisStore({"url": server.url, "key_prefix": f"mq-{uuid.uuid4().hex[:6]}:"})
        with caplog.at_level(logging.WARNING, logger="django_mailqueue"):
            store.count()
            store.count()
        logged = [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]
        assert len(logged) == 1 and "allkeys-lru" in logged[0].getMessage()
        store.close()

"""RedisStore's options and connections: options checked without connecting, a URL's or a django-redis cache's
client, passwords never shown whatever fails, and the subscription that wakes an idle worker."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.test import override_settings

from django_mailqueue.core.masking import SecretMask
from django_mailqueue.exceptions import QueueError
from django_mailqueue.stores import get_store
from django_mailqueue.stores.redis import RedisStore
from django_mailqueue.testing.contract import T0, at, new_item
from tests.support.redis_server import free_port

pytestmark = pytest.mark.redis

Maker = Callable[..., RedisStore]


# --- options ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({}, "exactly one of 'url'"),
        ({"url": "redis://h/0", "cache": "default"}, "exactly one of 'url'"),
        ({"url": "http://h/0"}, "must start with redis://"),
        ({"url": "redis://h:99999/0"}, "not a URL"),
        ({"url": "unix://"}, "socket's path"),
        ({"url": 5}, "'url' must be a string"),
        ({"url": "redis://h/0", "key_prefix": "Mail:"}, "'key_prefix'"),
        ({"url": "redis://h/0", "key_prefix": "{mail}:"}, "'key_prefix'"),
        ({"url": "redis://h/0", "key_prefix": "mail*:"}, "'key_prefix'"),
        ({"url": "redis://h/0", "key_prefix": "mail?[a]"}, "'key_prefix'"),
        ({"url": "redis://h/0", "key_prefix": "1mail:"}, "'key_prefix'"),
        ({"url": "redis://h/0", "key_prefix": "m" * 41}, "'key_prefix'"),
        ({"url": "redis://h/0", "key_prefix": ""}, "'key_prefix'"),
        ({"url": "redis://h/0", "on_commit": "yes"}, "'on_commit'"),
        ({"url": "redis://h/0", "socket_timeout": 0}, "'socket_timeout'"),
        ({"url": "redis://h/0", "socket_timeout": True}, "'socket_timeout'"),
        ({"url": "redis://h/0", "database": "default"}, "unknown option"),
        ({"cache": "nope"}, "not an alias of CACHES"),
        ({"cache": "locmem"}, "not a django-redis cache"),
    ],
)
def test_bad_options_are_refused_without_connecting(options: dict[str, Any], fragment: str) -> None:
    with override_settings(CACHES={"locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}):
        problems = RedisStore.check_options(options)
        assert any(fragment in p for p in problems), problems
        with pytest.raises(QueueError) as refused:
            RedisStore(options)
        assert refused.value.code == "INVALID_OPTION"


def test_good_options_pass() -> None:
    assert RedisStore.check_options({"url": "redis://u:p@h:6380/2", "key_prefix": "mail.q-1_x:"}) == []
    assert RedisStore.check_options({"url": "unix:///run/redis.sock?db=1", "on_commit": True}) == []
    assert RedisStore.check_options({"url": "rediss://h", "socket_timeout": 2.5}) == []


def test_nothing_connects_until_the_first_call() -> None:
    port = free_port()  # nothing listens there
    store = RedisStore({"url": f"redis://127.0.0.1:{port}/0"})
    assert store.supports_wakeup and not store.supports_transactional_add
    with pytest.raises(QueueError) as unreachable:
        store.count()
    assert unreachable.value.code == "STORE_UNAVAILABLE"
    store.close()
    store.close()


def test_get_store_builds_the_configured_redis_store(redis_url: str, redis_prefix: str) -> None:
    options = {"url": redis_url, "key_prefix": redis_prefix}
    with override_settings(
        MAILQUEUE={"STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": options}, "MAX_ITEMS": 7}
    ):
        store = get_store()
        assert isinstance(store, RedisStore) and store.max_items == 7 and store.key_prefix == redis_prefix
        store.add(new_item(), now=T0)
        assert store.count() == 1


# --- secrets --------------------------------------------------------------------------------------


def test_a_password_is_masked_in_every_spelling() -> None:
    mask = SecretMask().adding("p@ss/w0rd")
    text = "redis://bob:p%40ss%2Fw0rd@h:1/0 said p@ss/w0rd and p%40ss%2Fw0rd; redis://x:other@h"
    masked = mask(text)
    assert "p@ss" not in masked and "p%40ss" not in masked and "other" not in masked
    assert "redis://bob:********@h:1/0" in masked


def test_an_unreachable_server_never_shows_the_password() -> None:
    password = "hunter2-very-secret"
    store = RedisStore({"url": f"redis://mailer:{password}@127.0.0.1:{free_port()}/3", "socket_timeout": 2})
    with pytest.raises(QueueError) as unreachable:
        store.add(new_item(), now=T0)
    error = unreachable.value
    assert error.code == "STORE_UNAVAILABLE"
    assert "redis://127.0.0.1:" in str(error) and "out of reach" in str(error)
    for shown in (str(error), repr(error), error.message):
        assert password not in shown and "mailer:" not in shown
    assert error.__cause__ is None and error.__suppress_context__
    store.close()


async def test_an_unreachable_server_never_shows_the_password_async() -> None:
    password = "hunter3-very-secret"
    store = RedisStore({"url": f"redis://mailer:{password}@127.0.0.1:{free_port()}/3", "socket_timeout": 2})
    try:
        with pytest.raises(QueueError) as unreachable:
            await store.aclaim(owner="w", now=T0, lease_expires=at(60))
        assert unreachable.value.code == "STORE_UNAVAILABLE"
        assert password not in str(unreachable.value) and unreachable.value.__cause__ is None
    finally:
        await store.aclose()


@pytest.fixture
def acl_user_with_password(redis_url: str, redis_prefix: str) -> Iterator[tuple[str, str]]:
    user = f"mqtest-{uuid.uuid4().hex[:10]}"
    password = f"right-{uuid.uuid4().hex}"
    with redis.Redis.from_url(redis_url) as client:
        client.execute_command("ACL", "SETUSER", user, "on", f">{password}", f"~{redis_prefix}*", "+@all")
    yield user, password
    with redis.Redis.from_url(redis_url) as client:
        client.execute_command("ACL", "DELUSER", user)


def test_a_wrong_password_is_refused_and_not_shown(
    redis_url: str,
    redis_prefix: str,
    acl_user_with_password: tuple[str, str],
) -> None:
    user, password = acl_user_with_password
    host_db = redis_url.split("://", 1)[1]
    wrong = "wrong-" + uuid.uuid4().hex
    store = RedisStore({"url": f"redis://{user}:{wrong}@{host_db}", "key_prefix": redis_prefix})
    with pytest.raises(QueueError) as refused:
        store.count()
    assert refused.value.code == "STORE_UNAVAILABLE" and "credentials" in str(refused.value)
    assert wrong not in str(refused.value) and password not in str(refused.value)
    store.close()
    right = RedisStore({"url": f"redis://{user}:{password}@{host_db}", "key_prefix": redis_prefix})
    assert right.count() == 0
    right.close()


# --- waking idle workers --------------------------------------------------------------------------------------------


async def test_an_add_wakes_a_waiting_worker(make: Maker) -> None:
    worker, adder = make(), make()
    try:
        assert await worker.await_added(0.05) is False  # subscribes; nothing came
        waiting = asyncio.create_task(worker.await_added(5))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await asyncio.to_thread(adder.add, new_item(), now=T0)
        assert await waiting is True
        assert time.monotonic() - started < 2  # at once, not after the timeout
        assert await worker.await_added(0.05) is False
    finally:
        await worker.aclose()


async def test_an_add_between_waits_is_not_missed(make: Maker) -> None:
    worker, adder = make(), make()
    try:
        assert await worker.await_added(0.01) is False
        await asyncio.to_thread(adder.add_many, [new_item(), new_item()], now=T0)
        await asyncio.to_thread(adder.add, new_item(), now=T0)
        started = time.monotonic()
        assert await worker.await_added(5) is True
        assert time.monotonic() - started < 2  # at once, not after the timeout
        # with no add since, a wait ends False (a message still on its way may wake one more)
        assert False in [await worker.await_added(0.05), await worker.await_added(0.05)]
    finally:
        await worker.aclose()


async def test_a_reschedule_wakes_a_waiting_worker(make: Maker) -> None:
    worker, admin_store = make(), make()
    try:
        item = await admin_store.aadd(new_item(not_before=at(3600)), now=T0)
        await worker.await_added(0.01)
        waiting = asyncio.create_task(worker.await_added(5))
        await asyncio.sleep(0.05)
        assert await asyncio.to_thread(admin_store.reschedule, item.id, at=T0) is True
        assert await waiting is True
    finally:
        await worker.aclose()
        await admin_store.aclose()


async def test_a_wait_longer_than_the_socket_timeout_is_no_error(make: Maker, caplog: pytest.LogCaptureFixture) -> None:
    worker = make(socket_timeout=0.2)
    try:
        with caplog.at_level(logging.WARNING, logger="django_mailqueue"):
            started = time.monotonic()
            assert await worker.await_added(0.6) is False
            assert time.monotonic() - started >= 0.55
        assert not caplog.records
    finally:
        await worker.aclose()


async def test_waiting_on_an_unreachable_redis_polls() -> None:
    store = RedisStore({"url": f"redis://:secret-pw@127.0.0.1:{free_port()}/0", "socket_timeout": 1})
    try:
        started = time.monotonic()
        assert await store.await_added(0.3) is False
        assert 0.25 <= time.monotonic() - started < 2
    finally:
        await store.aclose()


# --- a django-redis cache's connection ------------------------------------------------------------


@pytest.mark.parametrize("decode", [False, True])
def test_the_cache_option_reuses_django_redis(redis_url: str, redis_prefix: str, decode: bool) -> None:
    from django_redis import get_redis_connection

    caches = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "queue": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": redis_url,
            "OPTIONS": {"CONNECTION_POOL_KWARGS": {"decode_responses": decode}},
        },
    }
    with override_settings(CACHES=caches):
        store = RedisStore({"cache": "queue", "key_prefix": redis_prefix})
        raw = b"\xff\x00 not text \x80"
        added = store.add(new_item(message=raw), now=T0)
        assert store.read_message(added.id) == raw
        shared = get_redis_connection("queue")
        if not decode:
            assert store._sync_client() is shared  # django-redis's own client and pool

        async def work() -> None:
            try:
                assert await store.aread_message(added.id) == raw
                claimed = await store.aclaim(owner="w", now=T0, lease_expires=at(60))
                assert [i.id for i in claimed] == [added.id]
            finally:
                await store.aclose()

        asyncio.run(work())
        store.close()
        assert shared.ping()  # the store never closes django-redis's connection


def test_a_wrong_password_in_the_cache_is_not_shown(redis_url: str, acl_user_with_password: tuple[str, str]) -> None:
    user, password = acl_user_with_password
    wrong = "cache-wrong-" + uuid.uuid4().hex
    location = f"redis://{user}:{wrong}@{redis_url.split('://', 1)[1]}"
    caches = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "queue": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": location},
    }
    with override_settings(CACHES=caches):
        store = RedisStore({"cache": "queue"})
        with pytest.raises(QueueError) as refused:
            store.count()
        assert refused.value.code == "STORE_UNAVAILABLE" and wrong not in str(refused.value)


# --- commands packed by hiredis ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "a" * 40, "2", "mq:{q}:items", "mq:{q}:leases", "owner", "record", '[["ü@b.example","delivered"]]'),
        ("HGETALL", b"mq:{q}:item:\xff"),
        ("SCRIPT LOAD", "return 1"),  # redis-py sends a command's words apart: the fallback's packing
        ("EVALSHA", "a" * 40, 2, "k1", "k2", "x"),  # the key count as redis-py's scripts pass it
        ("SET", "k", -7),
        ("SET", "k", 1.5),  # not text: the fallback's
        ("SET", "k", b"x" * 10_000),  # long: redis-py's, which sends it without a copy
        ("SET", "k", "ü" * 7_000),
    ],
)
def test_hiredis_packs_every_command_as_redis_py_does(args: tuple[Any, ...]) -> None:
    import redis.asyncio

    from django_mailqueue.stores.redis_connection import pack_with_hiredis

    client = redis.asyncio.Redis()
    plain = client.connection_pool.connection_class()
    pack_with_hiredis(client)
    packing = client.connection_pool.connection_class()
    assert type(packing).__name__ == "HiredisConnection"
    assert b"".join(packing.pack_command(*args)) == b"".join(plain.pack_command(*args))


def test_a_script_call_with_its_key_count_is_packed_by_hiredis(monkeypatch: pytest.MonkeyPatch) -> None:
    import hiredis
    import redis.asyncio

    from django_mailqueue.stores import redis_connection

    packed: list[tuple[Any, ...]] = []

    def counting(args: tuple[Any, ...]) -> bytes:
        packed.append(args)
        return hiredis.pack_command(args)

    client = redis.asyncio.Redis()
    redis_connection.pack_with_hiredis(client)
    monkeypatch.setattr(redis_connection, "hiredis", type("H", (), {"pack_command": staticmethod(counting)}))
    client.connection_pool.connection_class().pack_command("EVALSHA", "a" * 40, 2, "k1", "k2", "x")
    assert packed == [("EVALSHA", "a" * 40, 2, "k1", "k2", "x")]


async def test_the_store_packs_its_async_commands_with_hiredis(make: Maker) -> None:
    store = make()
    try:
        item = (await store.aadd_many([new_item()], now=T0))[0]
        (claimed,) = await store.aclaim(owner="w", now=T0, lease_expires=at(300), limit=1)
        assert claimed.id == item.id
        client = store._clients.async_()  # noqa: SLF001 - which connections the worker's calls went through
        assert client.connection_pool.connection_class.__name__.startswith("Hiredis")
    finally:
        await store.aclose()

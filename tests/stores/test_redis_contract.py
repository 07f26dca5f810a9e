"""The store contract suite on Redis: as a plain URL, as the documented ACL user, and through the async twins."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from django_mailqueue.testing.contract import StoreFactory
from tests.support.redis_server import delete_prefix
from tests.support.redis_stores import AsyncTwinsContract, RedisContract, async_twins, fresh_prefixes, redis_stores

pytestmark = pytest.mark.redis

DOCS = Path(__file__).resolve().parents[2] / "docs" / "redis.md"


class TestRedisStore(RedisContract):
    @pytest.fixture
    def make_store(self, redis_url: str) -> Iterator[StoreFactory]:
        with fresh_prefixes(redis_url, "contract") as options, redis_stores(options) as make:
            yield make


# --- the ACL user of docs/redis.md -------------------------------------------------------------


def documented_acl_line() -> str:
    """The `ACL SETUSER` line of docs/redis.md, the one operators are told to use."""
    found = re.findall(r"^ACL SETUSER mailqueue-worker .*$", DOCS.read_text(), flags=re.MULTILINE)
    assert len(found) == 1, "docs/redis.md must give exactly one ACL line"
    return found[0]


def acl_rules(prefix: str, password: str) -> list[str]:
    """The documented line's rules for another prefix and password."""
    words = documented_acl_line().split()[3:]
    rules = []
    for word in words:
        if word.startswith(">"):
            word = f">{password}"
        elif word.startswith(("~mailqueue:", "&mailqueue:")):
            word = word[0] + prefix + word[len("~mailqueue:") :]
        rules.append(word)
    assert "~" + prefix + "*" in rules and "-@all" in rules
    return rules


@pytest.fixture
def acl_user(redis_url: str) -> Iterator[tuple[str, str, str]]:
    """A user made with the documented ACL line for a fresh prefix: (url, prefix, password)."""
    user = f"mqtest-{uuid.uuid4().hex[:10]}"
    password = uuid.uuid4().hex
    prefix = f"mqtest-acl-{uuid.uuid4().hex[:10]}:"
    with redis.Redis.from_url(redis_url) as admin:
        admin.execute_command("ACL", "SETUSER", user, "reset", *acl_rules(prefix, password))
    parts = redis_url.split("://", 1)[1].split("/", 1)
    url = f"redis://{user}:{password}@{parts[0]}/{parts[1] if len(parts) > 1 else '0'}"
    yield url, prefix, password
    with redis.Redis.from_url(redis_url) as admin:
        admin.execute_command("ACL", "DELUSER", user)
    delete_prefix(redis_url, prefix)


class TestRedisStoreAsDocumentedAclUser(RedisContract):
    """The whole contract, as a user with exactly the documented permissions."""

    @pytest.fixture
    def make_store(self, acl_user: tuple[str, str, str]) -> Iterator[StoreFactory]:
        url, prefix, _ = acl_user
        with redis_stores(lambda: {"url": url, "key_prefix": prefix}, one=True) as make:
            yield make

    def test_the_user_may_not_touch_other_keys(self, acl_user: tuple[str, str, str]) -> None:
        url, prefix, _ = acl_user
        with redis.Redis.from_url(url) as client:
            client.set(f"{prefix}x", "1")
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.set("elsewhere:x", "1")
            with pytest.raises(redis.exceptions.NoPermissionError):
                client.execute_command("CONFIG", "GET", "maxmemory-policy")


def test_the_docs_acl_line_grants_no_category_and_no_admin_command() -> None:
    words = documented_acl_line().split()
    granted = {w[1:] for w in words if w.startswith("+")}
    assert not any(g.startswith("@") for g in granted)
    assert not granted & {"config", "flushall", "flushdb", "keys", "script", "acl", "debug", "shutdown"}


# --- the async twins, through the same suite -------------------------------------------------------


class TestRedisStoreAsyncTwins(AsyncTwinsContract):
    """The whole contract through `aadd_many`, `aclaim`, `arenew`, `acomplete`, … on redis-py's asyncio client."""

    @pytest.fixture
    def make_store(self, redis_url: str) -> Iterator[StoreFactory]:
        with fresh_prefixes(redis_url, "async") as options, async_twins(options) as make:
            yield make

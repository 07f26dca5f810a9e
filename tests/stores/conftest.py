"""Fixtures for the store tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_mailqueue.stores.redis import RedisStore
from tests.support.redis_server import delete_prefix, unique_prefix

Maker = Callable[..., RedisStore]


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of the test's own; its keys are deleted afterwards."""
    prefix = unique_prefix()
    yield prefix
    delete_prefix(redis_url, prefix)


@pytest.fixture
def make(redis_url: str, redis_prefix: str) -> Iterator[Maker]:
    """Redis stores on the test's prefix (several share it, as processes would); closed afterwards."""
    made: list[RedisStore] = []

    def build(max_items: int | None = None, **options: Any) -> RedisStore:
        store = RedisStore({"url": redis_url, "key_prefix": redis_prefix, **options}, max_items=max_items)
        made.append(store)
        return store

    yield build
    for store in made:
        store.close()

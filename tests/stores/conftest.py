"""Fixtures for the store tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import delete_prefix, unique_prefix
from tests.support.redis_stores import Maker, redis_stores

__all__ = ["Maker"]


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of the test's own; its keys are deleted afterwards."""
    prefix = unique_prefix()
    yield prefix
    delete_prefix(redis_url, prefix)


@pytest.fixture
def make(redis_url: str, redis_prefix: str) -> Iterator[Maker]:
    """Redis stores on the test's prefix (several share it, as processes would); closed afterwards."""
    with redis_stores(lambda: {"url": redis_url, "key_prefix": redis_prefix}) as build:
        yield build

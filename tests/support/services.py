"""Whether the PostgreSQL and Redis servers the tests use are reachable, and what to do when not."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

import pytest

#: Set by .ci/run: a PostgreSQL or Redis test that would be skipped fails instead.
REQUIRED = os.environ.get("MAILQUEUE_REQUIRE_SERVICES", "") not in ("", "0")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def postgres_reachable(url: str) -> tuple[bool, str]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    if not _port_open(host, port):
        return False, f"PostgreSQL is not running at {host}:{port} (set MAILQUEUE_TEST_POSTGRES)"
    try:
        import psycopg
    except ImportError:
        return False, "psycopg is not installed (pip install django-mailqueue[postgres])"
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as exc:
        return False, f"PostgreSQL at {host}:{port} refused the connection: {type(exc).__name__}"
    return True, ""


def redis_reachable(url: str) -> tuple[bool, str]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    if not _port_open(host, port):
        return False, f"Redis is not running at {host}:{port} (set MAILQUEUE_TEST_REDIS)"
    try:
        import redis
    except ImportError:
        return False, "redis-py is not installed (pip install django-mailqueue[redis])"
    try:
        redis.Redis.from_url(url, socket_timeout=3).ping()
    except redis.RedisError as exc:
        return False, f"Redis at {host}:{port} did not answer: {type(exc).__name__}"
    return True, ""


def skip_or_fail(reason: str) -> None:
    """Skip the test with `reason`; under MAILQUEUE_REQUIRE_SERVICES, fail it."""
    if REQUIRED:
        pytest.fail(f"required service missing: {reason}", pytrace=False)
    pytest.skip(reason)


def drop_redis_keys(url: str, prefix: str) -> None:
    """Delete every key under `prefix`: what a test's Redis store left behind."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()

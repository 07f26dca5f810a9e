"""Fixtures shared by the whole suite: the PostgreSQL and Redis gates, a clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.register_assert_rewrite("django_mailqueue.testing")

from django.conf import settings  # noqa: E402

from django_mailqueue.conf import get_settings  # noqa: E402
from django_mailqueue.core.clock import FakeClock  # noqa: E402
from django_mailqueue.stores import reset_store  # noqa: E402
from tests.support.services import REQUIRED, redis_reachable, skip_or_fail  # noqa: E402

#: Django's deprecations of its next releases, errors by name (pyproject.toml's "error" makes every warning
#: one; these stay errors whatever "ignore" line pyproject.toml gains). Named where this Django has them:
#: 5.2 has both, 6.0 the second, 4.2 neither — pyproject.toml cannot name a class that may be missing.
DJANGO_DEPRECATIONS = ("RemovedInDjango60Warning", "RemovedInDjango61Warning")


def pytest_configure(config: pytest.Config) -> None:
    from django.utils import deprecation

    for name in DJANGO_DEPRECATIONS:
        if hasattr(deprecation, name):
            config.addinivalue_line("filterwarnings", f"error::django.utils.deprecation.{name}")


#: Under pytest-xdist (`make test` runs `-n 2 --dist loadgroup`), the tests that use one of these fixtures run on
#: one worker, in the group named: each fixture starts servers or a browser once per session (or module) of the
#: worker that runs it, and two workers would start two.
XDIST_GROUPS = {
    "browser": "chromium",
    "postfix_server": "postfix",
    "redis_cluster": "redis-cluster",
    "sentinel_setup": "redis-sentinel",
    "secret_redis": "secret-servers",
    "secret_sentinels": "secret-servers",
    "secret_postgres": "secret-servers",
}


#: modules whose tests run on one xdist worker, one after the other: each test starts four worker processes
XDIST_MODULE_GROUPS = {"tests/worker/test_shaping_processes.py": "worker-processes"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module_group = XDIST_MODULE_GROUPS.get(item.nodeid.split("::", 1)[0])
        if module_group:
            item.add_marker(pytest.mark.xdist_group(module_group))
            continue
        for fixture in getattr(item, "fixturenames", ()):
            group = XDIST_GROUPS.get(fixture)
            if group:
                item.add_marker(pytest.mark.xdist_group(group))
                break


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    pg = "available" if settings.PG_AVAILABLE else f"absent: {settings.PG_REASON}"
    ok, reason = redis_reachable(settings.REDIS_URL)
    lines.append(f"mailqueue: PostgreSQL {pg}")
    lines.append(f"mailqueue: Redis {'available' if ok else 'absent: ' + reason}")
    lines.append(f"mailqueue: services required: {REQUIRED}")
    return lines


@pytest.fixture
def pg_alias() -> str:
    """The database alias of the PostgreSQL test database; skips (or fails) without one."""
    if not settings.PG_AVAILABLE:
        skip_or_fail(settings.PG_REASON)
    return "pg"


@pytest.fixture
def redis_url() -> str:
    ok, reason = redis_reachable(settings.REDIS_URL)
    if not ok:
        skip_or_fail(reason)
    return str(settings.REDIS_URL)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Redis Cluster of three primaries on loopback (tests/support/redis_cluster.py), one for the session."""
    from tests.support.redis_cluster import ClusterSetup

    with ClusterSetup(tmp_path_factory.mktemp("cluster")) as setup:
        yield setup


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
def _queue_backend(settings: Any) -> None:
    """Django's test set-up swaps EMAIL_BACKEND for locmem; the suite tests the queue's."""
    settings.EMAIL_BACKEND = "django_mailqueue.backends.QueueEmailBackend"


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    reset_store()
    yield
    get_settings.cache_clear()
    reset_store()

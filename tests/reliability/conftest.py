"""The reliability suite's fixtures and its hypothesis profile (a fixed seed, a budget that fits CI)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from django_mailqueue import signals
from tests.reliability.secret_texts import ErrorSignals
from tests.support.services import skip_or_fail

settings.register_profile(
    "reliability",
    derandomize=True,  # a fixed seed: the same examples every run
    max_examples=int(os.environ.get("MAILQUEUE_REL_EXAMPLES", "60")),
    deadline=None,  # a loaded CI machine must not turn slowness into a failure
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    database=None,
)
RELIABILITY = settings.get_profile("reliability")


@pytest.fixture
def private_servers() -> None:
    """Skip (fail, when services are required) without PostgreSQL's tools and redis-server."""
    for tool in ("initdb", "pg_ctl", "redis-server"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/bin/{tool}"):
            skip_or_fail(f"{tool} is not installed: the fault run starts private servers")


@pytest.fixture
def error_signals() -> Iterator[ErrorSignals]:
    """Every `error` signal's payload, as texts (the secret tests look for secrets in them)."""
    receiver = ErrorSignals()
    signals.error.connect(receiver, weak=False, dispatch_uid="rel-secrets")
    yield receiver
    signals.error.disconnect(dispatch_uid="rel-secrets")

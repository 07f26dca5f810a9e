"""Token buckets across processes: takers in four processes at once never get more than the bucket holds,
on SQLite, PostgreSQL and Redis (the contract suite races threads; these are separate processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from tests.stores.bucket_taker import BURST
from tests.support.databases import DATABASES
from tests.support.redis_server import delete_prefix, unique_prefix

ROOT = Path(__file__).resolve().parents[2]
TAKERS = 4

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store_config(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "redis":
        url, prefix = request.getfixturevalue("redis_url"), unique_prefix("buckets")
        yield {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {"url": url, "key_prefix": prefix}}
        delete_prefix(url, prefix)
        return
    alias = request.getfixturevalue("pg_alias") if request.param == "postgres" else "default"
    yield {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": alias}}


def test_takers_in_several_processes_share_one_bucket(store_config: dict[str, Any]) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "MAILQUEUE_TEST_WORKER": "1",
        "MAILQUEUE_TEST_SQLITE": str(connections["default"].settings_dict["NAME"]),
        "MAILQUEUE_TEST_MAILQUEUE": json.dumps({"STORE": store_config}),
    }
    key = f"relay:{uuid.uuid4().hex}.example:587"
    takers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.stores.bucket_taker", key, str(1 + n % 3)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(TAKERS)
    ]
    try:
        for taker in takers:
            assert taker.stdout is not None and taker.stdout.readline().strip() == "ready", taker.stderr
        for taker in takers:  # all ready: start them together
            assert taker.stdin is not None
            taker.stdin.write("go\n")
            taker.stdin.flush()
        got = []
        for taker in takers:
            out, err = taker.communicate(timeout=120)
            assert taker.returncode == 0, err
            got.append(int(out.strip()))
    finally:
        for taker in takers:
            if taker.poll() is None:
                taker.kill()
    print(f"\nbucket of {BURST} shared by {TAKERS} processes: {got}")
    assert sum(got) == BURST

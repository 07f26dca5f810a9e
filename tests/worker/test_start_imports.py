"""What a worker's start imports: nothing a setting does not ask for (docs/performance.md, "Our part of the
worker's start")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem

ROOT = Path(__file__).resolve().parents[2]

#: What `mailqueue_work` does before its first claim: the command loaded, the system checks run, the worker built.
_START = (
    "import json, sys, django\n"
    "django.setup()\n"
    "from django.core import checks\n"
    "from django.core.management import load_command_class\n"
    "load_command_class('django_mailqueue', 'mailqueue_work')\n"
    "checks.run_checks()\n"
    "from django_mailqueue.worker import build_worker\n"
    "build_worker()\n"
    "print(json.dumps(sorted(name for name in sys.modules if name.startswith('django_mailqueue'))))\n"
)
_RELAY = {"*": {"HOST": "127.0.0.1", "PORT": 2525, "TLS": "none"}}
#: Imported only where DKIM is set, for the bulk commands (mailqueue_cancel, _retry, _list), or by the ORM store
_NEVER = {
    "django_mailqueue.dkim",
    "django_mailqueue.dkimpy_adapter",
    "django_mailqueue.delivery.signing",
    "django_mailqueue.selection",
    "django_mailqueue.management.options",
}


def started(tmp_path: Path, mailqueue: dict[str, Any]) -> set[str]:
    """Our modules loaded in a fresh process once a worker of `mailqueue` is ready to claim."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.support.worker_only_settings",
        "PYTHONPATH": str(ROOT),
        "MAILQUEUE_TEST_SQLITE": str(tmp_path / "queue.sqlite3"),
        "MAILQUEUE_TEST_MAILQUEUE": json.dumps({"HOSTNAME": "mx.test.example", "ROUTES": _RELAY, **mailqueue}),
    }
    done = subprocess.run(
        [sys.executable, "-c", _START], capture_output=True, text=True, timeout=120, check=True, cwd=ROOT, env=env
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_a_worker_on_sqlite_loads_neither_postgresql_nor_dkim(tmp_path: Path) -> None:
    loaded = started(tmp_path, {})

    assert "django_mailqueue.stores.orm.store" in loaded  # the store it uses
    pg = {"django_mailqueue.stores.orm.postgresql", "django_mailqueue.stores.orm.pg_search"}
    assert loaded & (_NEVER | pg) == set()


def test_a_worker_on_redis_does_not_load_the_orm_store(tmp_path: Path, redis_url: str) -> None:
    loaded = started(
        tmp_path, {"STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": {"url": redis_url}}}
    )

    assert "django_mailqueue.stores.redis" in loaded
    assert "django_mailqueue.history" in loaded  # the history is written to the database all the same
    orm_store = {"django_mailqueue.stores.orm.store", "django_mailqueue.stores.orm.queries"}
    assert loaded & (_NEVER | orm_store) == set()


def test_dkim_is_loaded_where_it_is_set(tmp_path: Path) -> None:
    key = tmp_path / "mail.pem"
    key.write_bytes(generate_pem("ed25519-sha256"))
    dkim = {"test.example": {"SELECTOR": "mq1", "PRIVATE_KEY": str(key), "ALGORITHM": "ed25519-sha256"}}

    loaded = started(tmp_path, {"DKIM": dkim})

    assert {"django_mailqueue.dkim", "django_mailqueue.delivery.signing"} <= loaded

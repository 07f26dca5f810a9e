"""Django settings for the reliability suite's worker processes: the test settings plus private servers.

`tests.settings`, and from the environment:

- `MAILQUEUE_REL_PG_URL`: a PostgreSQL URL (a private cluster the fault run
  restarts) as the `faulty_pg` alias;
- `MAILQUEUE_REL_DEFAULT_URL`: a PostgreSQL URL for the `default` alias
  instead of SQLite (where the Redis run's workers write their history).

Used with `DJANGO_SETTINGS_MODULE=tests.reliability.settings` by the
processes `tests/reliability/harness.py` starts; the pytest process itself
keeps `tests.settings`.
"""

from __future__ import annotations

import os
from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, database_from_url


def postgres_from_url(url: str) -> dict[str, Any]:
    """A `DATABASES` entry for a private server's postgresql:// URL: connections give up after 3 s."""
    return {
        **database_from_url(url, "django.db.backends.postgresql", "postgres", 5432),
        "OPTIONS": {"connect_timeout": 3},
    }


if os.environ.get("MAILQUEUE_REL_PG_URL"):
    DATABASES["faulty_pg"] = postgres_from_url(os.environ["MAILQUEUE_REL_PG_URL"])
if os.environ.get("MAILQUEUE_REL_DEFAULT_URL"):
    DATABASES["default"] = postgres_from_url(os.environ["MAILQUEUE_REL_DEFAULT_URL"])

if os.environ.get("MAILQUEUE_REL_SIGNAL_LOG"):
    from tests.settings import INSTALLED_APPS

    INSTALLED_APPS = [*INSTALLED_APPS, "tests.reliability.signal_log.SignalLogConfig"]

"""The traffic-shaping benchmark's project (bench/shaping.py): PostgreSQL from BENCH_SHAPING_PG, MAILQUEUE as JSON.

BENCH_SHAPING_PG         postgresql://user@host:port/name (the database bench/shaping.py made)
BENCH_SHAPING_MAILQUEUE  the MAILQUEUE setting, as JSON
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

SECRET_KEY = "bench-only-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django_mailqueue"]
EMAIL_BACKEND = "django_mailqueue.backends.QueueEmailBackend"

_pg = urlsplit(os.environ.get("BENCH_SHAPING_PG", "postgresql://postgres@127.0.0.1:5432/bench_shaping"))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _pg.path.lstrip("/"),
        "USER": _pg.username or "postgres",
        "PASSWORD": _pg.password or "",
        "HOST": _pg.hostname or "127.0.0.1",
        "PORT": str(_pg.port or 5432),
    }
}
MAILQUEUE = json.loads(os.environ.get("BENCH_SHAPING_MAILQUEUE", "{}"))

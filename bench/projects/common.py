"""Settings every benchmark project shares: the database and the sink, from BENCH_* environment variables.

BENCH_DB            "sqlite" (BENCH_SQLITE_PATH) or "postgres" (BENCH_PG_PORT, BENCH_PG_NAME)
BENCH_PG_OPTIONS    "default" (Django's: no OPTIONS) or "tuned" (server_side_binding, prepare_threshold)
BENCH_SINK_PORT     the SMTP sink everybody sends to, on 127.0.0.1
BENCH_WORKDIR       where lock files go
"""

from __future__ import annotations

import os

SECRET_KEY = "bench-only-not-secret"  # noqa: S105
DEBUG = False  # no query log
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS: list[str] = []
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DEFAULT_FROM_EMAIL = "sender@bench.example"

WORKDIR = os.environ.get("BENCH_WORKDIR", "/tmp")
SINK_PORT = int(os.environ.get("BENCH_SINK_PORT", "2525"))


def database() -> dict[str, object]:
    kind = os.environ.get("BENCH_DB", "sqlite")
    if kind == "sqlite":
        # Django's defaults (rollback journal, synchronous=FULL); a busy timeout for
        # several worker processes sharing the file.
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("BENCH_SQLITE_PATH", os.path.join(WORKDIR, "bench.sqlite3")),
            "OPTIONS": {"timeout": 30},
        }
    if kind == "postgres":
        db: dict[str, object] = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("BENCH_PG_NAME", "bench"),
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": os.environ.get("BENCH_PG_PORT", "5432"),
        }
        options = os.environ.get("BENCH_PG_OPTIONS", "default")
        if options == "tuned":
            # The second line, every library alike: parameters bound on the server, and a statement
            # run five times prepared (Django's options for psycopg 3; its default is neither).
            db["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}
        elif options != "default":
            raise ValueError(f"BENCH_PG_OPTIONS must be default or tuned, not {options!r}")
        return db
    raise ValueError(f"BENCH_DB must be sqlite or postgres, not {kind!r}")


DATABASES = {"default": database()}

# post-office renders every subject and body as a template
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [], "APP_DIRS": False}]

# Peers deliver with Django's SMTP backend, to the sink.
EMAIL_HOST = "127.0.0.1"
EMAIL_PORT = SINK_PORT
EMAIL_USE_TLS = False
EMAIL_USE_SSL = False


# Diagnostics (bench/profile_delivery.py): BENCH_COUNT_QUERIES=<file> counts the SQL statements this
# process runs, by verb, and writes them to <file> at exit. Off in every timed run.
if os.environ.get("BENCH_COUNT_QUERIES"):
    import atexit
    import json
    import threading
    from collections import Counter

    from django.db.backends.signals import connection_created

    _counts: Counter[str] = Counter()
    _lock = threading.Lock()

    def _count(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        verb = (sql.lstrip().split(None, 1) or ["?"])[0].upper()
        with _lock:
            _counts[verb] += len(params) if many and params is not None else 1
        return execute(sql, params, many, context)

    def _install(sender, connection, **kwargs):  # type: ignore[no-untyped-def]
        if _count not in connection.execute_wrappers:
            connection.execute_wrappers.append(_count)

    connection_created.connect(_install, weak=False)

    def _dump() -> None:
        with open(os.environ["BENCH_COUNT_QUERIES"], "w") as f:
            json.dump(dict(_counts), f)

    atexit.register(_dump)

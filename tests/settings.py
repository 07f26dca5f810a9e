"""Django settings for the test suite: SQLite always, PostgreSQL and Redis when reachable."""

from __future__ import annotations

import os
import tempfile
from urllib.parse import unquote, urlsplit

from tests.support.services import postgres_reachable

SECRET_KEY = "tests-only-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_mailqueue",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES: dict[str, dict[str, object]] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",  # the test database is a file (below), so threads share it
        "OPTIONS": {"timeout": 20},
        "TEST": {
            "NAME": os.environ.get("MAILQUEUE_TEST_SQLITE")
            or os.path.join(tempfile.mkdtemp(prefix="mailqueue-tests-"), "test.sqlite3")
        },
    },
}


def database_from_url(url: str, engine: str, user: str, port: int) -> dict[str, object]:
    """A `DATABASES` entry for `url` (scheme://user:password@host:port/name), with these defaults."""
    parts = urlsplit(url)
    return {
        "ENGINE": engine,
        "NAME": (parts.path or "/test").lstrip("/"),
        "USER": unquote(parts.username or user),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or port),
    }


PG_URL = os.environ.get("MAILQUEUE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
PG_AVAILABLE, PG_REASON = postgres_reachable(PG_URL)
if PG_AVAILABLE:
    _pg_settings = database_from_url(PG_URL, "django.db.backends.postgresql", "postgres", 5432)
    PG_TEST_NAME = os.environ.get("MAILQUEUE_TEST_PG_DBNAME", "test_mailqueue")
    DATABASES["pg"] = {**_pg_settings, "TEST": {"NAME": PG_TEST_NAME}}
    # The same database, every statement that can be prepared prepared on its first run.
    DATABASES["pg_prepared"] = {**_pg_settings, "OPTIONS": {"prepare_threshold": 0}, "TEST": {"MIRROR": "pg"}}
    # The same database, every session defaulting to SERIALIZABLE.
    DATABASES["pg_serializable"] = {
        **_pg_settings,
        "OPTIONS": {"options": "-c default_transaction_isolation=serializable"},
        "TEST": {"MIRROR": "pg"},
    }

# MariaDB or MySQL, only when asked for (mysql://user:password@host:port/db) and mysqlclient is installed:
# the ORM store's portable dialect on a database it is the dialect of (tests/stores/test_contract.py).
MYSQL_URL = os.environ.get("MAILQUEUE_TEST_MYSQL", "")
if MYSQL_URL:
    DATABASES["mysql"] = {
        **database_from_url(MYSQL_URL, "django.db.backends.mysql", "root", 3306),
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"NAME": os.environ.get("MAILQUEUE_TEST_MYSQL_DBNAME", "test_mailqueue")},
    }

#: The pytest-xdist worker this process is (gw0, gw1, ...), or was started by ("" without xdist): a test's
#: subprocess inherits PYTEST_XDIST_WORKER with the rest of the environment.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def redis_url_of_worker(url: str, worker: str) -> str:
    """`url` with its database number moved up by the xdist worker's index: gw0 keeps it, gwN takes db + N,
    so each worker has a Redis database of its own (`make test`'s `-n 2` on db 9 takes 9 and 10)."""
    if not worker:
        return url
    parts = urlsplit(url)
    base = int(parts.path.lstrip("/") or 0)
    database = base + int(worker.removeprefix("gw"))
    if database > 15:
        raise ValueError(f"{url} with xdist worker {worker} needs Redis database {database} (a server has 0-15)")
    return parts._replace(path=f"/{database}").geturl()


REDIS_URL = redis_url_of_worker(os.environ.get("MAILQUEUE_TEST_REDIS", "redis://127.0.0.1:6379/9"), XDIST_WORKER)

EMAIL_BACKEND = "django_mailqueue.backends.QueueEmailBackend"
MAILQUEUE: dict[str, object] = {"HOSTNAME": "mx.test.example"}

LOGGING_CONFIG = None

# A worker started by a test (tests/support/workers.py) connects straight to the test
# databases, and takes its MAILQUEUE from the environment.
if os.environ.get("MAILQUEUE_TEST_WORKER"):
    import json

    DATABASES["default"]["NAME"] = DATABASES["default"]["TEST"]["NAME"]  # type: ignore[index]
    if PG_AVAILABLE:
        # pytest-django names an xdist worker's test database after it (test_mailqueue_gw1)
        PG_TEST_NAME = f"{PG_TEST_NAME}_{XDIST_WORKER}" if XDIST_WORKER else PG_TEST_NAME
        DATABASES["pg"]["NAME"] = PG_TEST_NAME
        DATABASES["pg_serializable"]["NAME"] = PG_TEST_NAME
        DATABASES["pg_prepared"]["NAME"] = PG_TEST_NAME
    MAILQUEUE = json.loads(os.environ.get("MAILQUEUE_TEST_MAILQUEUE", "{}"))
    LOGGING_CONFIG = "logging.config.dictConfig"
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"stderr": {"class": "logging.StreamHandler"}},
        "loggers": {"django_mailqueue": {"handlers": ["stderr"], "level": "INFO"}},
    }

"""Settings of the example project: SQLite, and django_mailqueue set up as a site would set it up.

Every message goes to the local SMTP sink (`manage.py demo_mailsink`), which
plays the recipients' MX on 127.0.0.1:`DEMO_SINK_PORT` (2525 unless the
environment says otherwise) — nothing leaves the machine.
"""

import os
from pathlib import Path

import django

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "demo-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_mailqueue",
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite: the site, the worker and the sink are three processes writing one
# file. The settings `manage.py check` recommends for the queue (mailqueue.I010,
# docs/guide.md "SQLite"): wait up to 20 s for the write lock; write-ahead
# logging, so readers never wait for the writer; transactions that take the
# lock when they begin. Django 4.2 has no init_command or transaction_mode for
# SQLite: there the demo set-up turns on WAL once (it stays with the file).
SQLITE_OPTIONS = {"timeout": 20}
if django.VERSION >= (5, 1):
    SQLITE_OPTIONS |= {"init_command": "PRAGMA journal_mode=WAL", "transaction_mode": "IMMEDIATE"}
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DEMO_DATABASE") or BASE_DIR / "db.sqlite3",
        "OPTIONS": SQLITE_OPTIONS,
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
STATIC_URL = "static/"

# --- the mail queue ---------------------------------------------------------------

DEMO_SINK_PORT = int(os.environ.get("DEMO_SINK_PORT", "2525"))

EMAIL_BACKEND = "django_mailqueue.backends.QueueEmailBackend"
DEFAULT_FROM_EMAIL = "sender@example.com"
SERVER_EMAIL = "sender@example.com"

MAILQUEUE = {
    # The ORM store (the default) on the database above.
    "STORE": {"BACKEND": "django_mailqueue.stores.orm.OrmStore"},
    "HOSTNAME": "mail.example.com",
    # Every domain goes to the sink, in plain text: it stands in for the MX hosts
    # of example.net (the recipients) and of example.com (where DSNs go back).
    # A real site leaves ROUTES out, and its mail goes through the relay its
    # EMAIL_HOST, EMAIL_PORT, EMAIL_USE_TLS, ... name, as with Django's SMTP backend;
    # or it says {"*": "mx"} to deliver to the recipients' MX hosts itself.
    "ROUTES": {
        "*": {"HOST": "127.0.0.1", "PORT": DEMO_SINK_PORT, "TLS": "none"},
        # The sink again, under another spelling of its address, so it is a destination of its own: it
        # plays an MX that answers 421 past two messages in 30 s (demo/policy.py), and the worker
        # suspends it — not the other domains — until then (docs/shaping.md).
        "busy.example.org": {"HOST": "[127.0.0.1]", "PORT": DEMO_SINK_PORT, "TLS": "none"},
    },
    # Short suspensions, so the demo shows one end (the default starts at 60 s, doubling up to an hour).
    "SHAPING": {"*": {"SUSPEND": 30, "SUSPEND_MAX": 120}},
    # Short, so the greylisted address is retried within the demo (the default
    # starts at 5 minutes).
    "RETRY_DELAYS": [10, 20, 40],
    "MAX_LIFETIME": 3600,
    "DELAY_WARNING": None,
    # An idle worker on SQLite wakes within ~25 ms of an add (PRAGMA data_version); the poll is the fallback.
    "POLL_INTERVAL": 1,
    "CONCURRENCY": 4,
}

# DKIM: the demo signs its mail, and its DSNs, with a key run_demo.py writes at first run into data/
# (ignored by git; `manage.py mailqueue_dkim_keygen` is how a real site makes one). The sink checks the
# signatures on receipt, as a receiving MX would, and the mailbox page shows the result.
DEMO_DKIM_KEY = BASE_DIR / "data" / "dkim-example.com.demo.pem"
if DEMO_DKIM_KEY.exists():
    MAILQUEUE["DKIM"] = {
        domain: {"SELECTOR": "demo", "PRIVATE_KEY": str(DEMO_DKIM_KEY)}
        for domain in ("example.com", "mail.example.com")
    }

# One line per outcome from the worker, on the console.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"short": {"format": "%(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "short"}},
    "loggers": {
        "django_mailqueue": {"handlers": ["console"], "level": "INFO"},
        "demo": {"handlers": ["console"], "level": "INFO"},
    },
}

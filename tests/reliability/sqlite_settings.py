"""Django settings for the SQLite contention run's processes: a newcomer's project on Django's defaults.

One SQLite file (`MAILQUEUE_LOAD_SQLITE`) with no `OPTIONS` at all — no
`timeout` (Python's 5 s), the rollback journal, deferred transactions — the
queue as `EMAIL_BACKEND`, and `MAILQUEUE` from `MAILQUEUE_LOAD_MAILQUEUE`
(JSON). Every `error` signal goes to `MAILQUEUE_REL_SIGNAL_LOG` when set.
"""

from __future__ import annotations

import json
import os

SECRET_KEY = "tests-only-not-secret"  # noqa: S105
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django_mailqueue", "tests.reliability.signal_log.SignalLogConfig"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("MAILQUEUE_LOAD_SQLITE", "")}}
EMAIL_BACKEND = "django_mailqueue.backends.QueueEmailBackend"
MAILQUEUE = json.loads(os.environ.get("MAILQUEUE_LOAD_MAILQUEUE", "{}"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django_mailqueue": {"handlers": ["stderr"], "level": "WARNING"}},
}

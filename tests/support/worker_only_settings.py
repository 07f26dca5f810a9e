"""A project whose only app is django_mailqueue (no admin), as a worker's: the SQLite database file and MAILQUEUE
from the environment (MAILQUEUE_TEST_SQLITE, MAILQUEUE_TEST_MAILQUEUE); tests/worker/test_start_imports.py."""

from __future__ import annotations

import json
import os

SECRET_KEY = "tests-only-not-secret"  # noqa: S105
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django_mailqueue"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["MAILQUEUE_TEST_SQLITE"]}}
MAILQUEUE = json.loads(os.environ["MAILQUEUE_TEST_MAILQUEUE"])

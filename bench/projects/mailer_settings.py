"""django-mailer under benchmark: its DbBackend queues, `send_mail`/`runmailer` deliver with Django's SMTP backend."""

from __future__ import annotations

import os

from bench.projects.common import *  # noqa: F403
from bench.projects.common import WORKDIR

INSTALLED_APPS = ["mailer"]
EMAIL_BACKEND = "mailer.backend.DbBackend"
MAILER_EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
MAILER_LOCK_PATH = os.path.join(WORKDIR, "django-mailer")
# Everything else at django-mailer's defaults (MAILER_EMPTY_QUEUE_SLEEP = 30 s for runmailer).

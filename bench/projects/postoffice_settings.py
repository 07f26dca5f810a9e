"""django-post-office under benchmark: its EmailBackend queues; `send_queued_mail` delivers with the SMTP backend."""

from __future__ import annotations

from bench.projects.common import *  # noqa: F403

INSTALLED_APPS = ["post_office"]
EMAIL_BACKEND = "post_office.EmailBackend"
POST_OFFICE = {"BACKENDS": {"default": "django.core.mail.backends.smtp.EmailBackend"}}
# Everything else at post-office's defaults (BATCH_SIZE 100, THREADS_PER_PROCESS 5, LOG_LEVEL 2).

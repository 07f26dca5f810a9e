"""The Django app: registers the system checks; connects to nothing."""

from __future__ import annotations

from django.apps import AppConfig


class MailQueueConfig(AppConfig):
    name = "django_mailqueue"
    verbose_name = "Mail queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the checks)

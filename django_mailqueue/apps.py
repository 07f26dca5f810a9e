"""The Django app: registers the system checks, and the queue's Prometheus collector when settings ask for it."""

from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class MailQueueConfig(AppConfig):
    name = "django_mailqueue"
    verbose_name = "Mail queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the checks)
        from .metrics import prometheus_installed

        config = getattr(settings, "MAILQUEUE", None)
        # the raw value: anything wrong with it (or with the rest of MAILQUEUE) is for the system checks to say
        if isinstance(config, dict) and config.get("METRICS_COLLECTOR") is True and prometheus_installed():
            from .metrics.collector import register_collector

            register_collector()

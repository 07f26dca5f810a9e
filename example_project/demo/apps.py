"""The demo app's configuration."""

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "demo"
    verbose_name = "Demo mailboxes"
    default_auto_field = "django.db.models.BigAutoField"

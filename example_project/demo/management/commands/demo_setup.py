"""`manage.py demo_setup`: the demo's admin user and write-ahead logging on its SQLite database. Idempotent."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import connection

ADMIN_USERNAME = "admin"
ADMIN_PASSWORD = "admin"


class Command(BaseCommand):
    help = "Create the demo admin user (admin / admin) if missing, and put SQLite in WAL mode."

    def handle(self, *args, **options):
        if connection.vendor == "sqlite":
            # Persistent in the file: the site, the worker and the sink then read while another writes.
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA journal_mode=WAL")
        users = get_user_model().objects
        if not users.filter(username=ADMIN_USERNAME).exists():
            users.create_superuser(ADMIN_USERNAME, "admin@example.com", ADMIN_PASSWORD)
            self.stdout.write(f"demo: created the admin user {ADMIN_USERNAME!r}")
